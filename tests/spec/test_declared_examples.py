"""In-context examples declared with a rubric: YAML, `@decision(examples=...)`, checks and round trips."""

from __future__ import annotations

import re
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from decisionflow.errors import RubricError
from decisionflow.spec.declare import ask, decision, rubric_of
from decisionflow.spec.yaml_rubric import dump_rubric, loads_rubric

RUBRIC = """\
name: desk
fields:
  department:
    kind: choice
    question: Which team handles it
    options: [billing, shipping]
  severity:
    kind: score
    question: How severe it is
    min: 0
    max: 3
  urgent:
    kind: boolean
    question: Whether it is urgent
examples:
  - text: I was charged twice for one order
    answers: {department: billing, severity: 2, urgent: true}
  - text: "Where is my parcel? It said: out for delivery"
    answers: {department: shipping}
"""


def test_yaml_examples_load_in_order_and_round_trip():
    rubric = loads_rubric(RUBRIC)
    assert [e.text for e in rubric.examples] == ["I was charged twice for one order",
                                                  "Where is my parcel? It said: out for delivery"]
    assert rubric.examples[0].answers == {"department": "billing", "severity": 2, "urgent": True}
    assert rubric.examples[1].answers == {"department": "shipping"}
    written = dump_rubric(rubric)
    assert written.index("fields:") < written.index("examples:")
    assert loads_rubric(written) == rubric
    assert loads_rubric(RUBRIC.split("examples:")[0]).examples == ()
    assert "examples" not in dump_rubric(loads_rubric(RUBRIC.split("examples:")[0]))


@pytest.mark.parametrize(("answers", "expected"), [
    ("{department: sales}", "examples.1.answers.department: 'sales' is not an allowed answer of 'department' "
                            "(allowed: 'billing', 'shipping')"),
    ("{severity: '2'}", "examples.1.answers.severity: '2' is not an allowed answer of 'severity' (allowed: 0, 1, 2, 3); "
                        "the answer is 2, of another type"),
    ("{severity: 7}", "examples.1.answers.severity: 7 is not an allowed answer"),
    ("{urgent: 'yes'}", "examples.1.answers.urgent: 'yes' is not an allowed answer of 'urgent'"),
    ("{team: billing}", "examples.1.answers: unknown field 'team' (fields: department, severity, urgent)"),
    ("{departmnt: billing}", "examples.1.answers: unknown field 'departmnt'; did you mean 'department'? "
                             "(fields: department, severity, urgent)"),
    ("{}", "examples.1.answers"),
])
def test_an_example_answer_the_rubric_cannot_give_is_named_with_its_line(answers: str, expected: str):
    text = RUBRIC.replace("answers: {department: shipping}", f"answers: {answers}")
    with pytest.raises(RubricError) as raised:
        loads_rubric(text, source="desk.yaml")
    message = str(raised.value)
    assert expected in message and message.startswith("desk.yaml: examples.1") and "(line " in message


def test_an_example_without_text_or_answering_a_derived_field_is_refused():
    with pytest.raises(RubricError, match=r"examples\.0\.text: .*empty"):
        loads_rubric(RUBRIC.replace("I was charged twice for one order", "'  '"))
    derived = RUBRIC.replace("  urgent:\n    kind: boolean\n    question: Whether it is urgent\n",
                             "  urgent:\n    kind: boolean\n    question: Whether it is urgent\n    derive:\n"
                             "      rules:\n        - if: {field: severity, at_least: 2}\n          then: true\n"
                             "      otherwise: false\n")
    with pytest.raises(RubricError, match=r"examples\.0\.answers\.urgent: 'urgent' is derived in code"):
        loads_rubric(derived)


def test_decision_takes_examples_as_pairs_or_mappings_and_names_bad_ones():
    @decision(examples=[("I was charged twice", {"department": "billing", "urgent": False}),
                        {"text": "No parcel yet", "answers": {"department": "shipping"}}])
    class Desk(BaseModel):
        """Route one ticket."""

        department: Annotated[Literal["billing", "shipping"], ask("Which team handles it")]
        urgent: bool = Field(description="Whether it is urgent")

    rubric = rubric_of(Desk)
    assert [(e.text, e.answers) for e in rubric.examples] == [
        ("I was charged twice", {"department": "billing", "urgent": False}),
        ("No parcel yet", {"department": "shipping"}),
    ]
    with pytest.raises(RubricError, match=r"examples\.0\.answers\.department: 'sales' is not an allowed answer"):
        @decision(examples=[("x", {"department": "sales"})])
        class Wrong(BaseModel):
            department: Annotated[Literal["billing", "shipping"], ask("Which team handles it")]

    @decision(examples=[["As a list", {"department": "billing"}]])
    class Listed(BaseModel):
        department: Annotated[Literal["billing", "shipping"], ask("Which team handles it")]

    assert rubric_of(Listed).examples[0].text == "As a list"

    @decision(examples=(pair for pair in [("From a generator", {"department": "shipping"})]))
    class Generated(BaseModel):
        department: Annotated[Literal["billing", "shipping"], ask("Which team handles it")]

    assert [e.text for e in rubric_of(Generated).examples] == ["From a generator"]
    with pytest.raises(RubricError, match=r"examples: expected a list of \(text, \{field: answer\}\) pairs .*got str"):
        @decision(examples="I was charged twice")
        class Bare(BaseModel):
            department: Annotated[Literal["billing", "shipping"], ask("Which team handles it")]


@pytest.mark.parametrize(("examples", "expected"), [
    ([("I was charged twice",)], r"examples\.0: expected a \(text, \{field: answer\}\) pair, got a tuple of 1 item$"),
    ([("ok", {"department": "billing"}), ("a", "b", "c")], r"examples\.1: expected .* pair, got a tuple of 3 items$"),
    (["I was charged twice"], r"examples\.0: expected .* or a \{'text': \.\.\., 'answers': \.\.\.\} mapping, got 'I was"),
    ([42], r"examples\.0: expected .* mapping, got 42$"),
])
def test_an_example_of_the_wrong_shape_is_named_with_its_index(examples, expected):
    with pytest.raises(RubricError) as raised:
        @decision(examples=examples)
        class Desk(BaseModel):
            department: Annotated[Literal["billing", "shipping"], ask("Which team handles it")]
    [line] = str(raised.value).splitlines()
    assert re.search(expected, line), line


def test_a_rubric_without_examples_keys_as_before_examples_existed():
    # Heads, calibrations and prefix caches are keyed on `Rubric.key`: adding the setting must not
    # invalidate what was fitted or cached for rubrics that do not use it.
    plain = loads_rubric(RUBRIC.split("examples:")[0])
    assert "examples" not in plain.key
    assert plain.key == plain.model_dump_json(exclude={"examples"})
    # This rubric's heads fingerprint as the release before examples computed it.
    from decisionflow.runtime.heads.fitted import rubric_fingerprint

    assert rubric_fingerprint(plain) == "6f50cfffba646f6cd4c062d503836be0"
    assert loads_rubric(RUBRIC).key != plain.key and "I was charged twice" in loads_rubric(RUBRIC).key


DEPENDENT = """\
name: desk
fields:
  topic: {kind: choice, question: Which topic, options: [billing, tech]}
  detail:
    kind: choice
    question: Which detail
    options_by: {topic: {billing: [refund, invoice], tech: [crash, login]}}
  urgent: {kind: boolean, question: Whether it is urgent, when: {topic: tech}}
examples:
  - text: The app crashes on start
    answers: ANSWERS
"""


@pytest.mark.parametrize(("answers", "expected"), [
    ("{topic: billing, detail: crash}", "examples.0.answers.detail: 'crash' is not offered when 'topic' is 'billing' "
                                        "(offered: 'refund', 'invoice')"),
    ("{topic: billing, urgent: true}", "examples.0.answers.urgent: 'urgent' is asked only when 'topic' is one of 'tech'; "
                                       "the example answers 'topic' with 'billing'"),
    ("{detail: crash}", "examples.0.answers.detail: 'detail' depends on 'topic', which the example does not answer"),
])
def test_an_example_answers_dependent_fields_only_as_the_engine_could(answers: str, expected: str):
    with pytest.raises(RubricError) as raised:
        loads_rubric(DEPENDENT.replace("ANSWERS", answers))
    assert expected in str(raised.value)
    rubric = loads_rubric(DEPENDENT.replace("ANSWERS", "{topic: tech, detail: crash, urgent: true}"))
    assert rubric.examples[0].answers == {"topic": "tech", "detail": "crash", "urgent": True}
