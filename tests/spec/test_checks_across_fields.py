"""Checks across fields: every problem reported at once, `options_by` fields the engine can leave
unanswered, score thresholds, and where the problems of `options_by` and derived functions point."""

from __future__ import annotations

import textwrap
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from decisionflow.spec.declare import ask, decision, derive, model_for, rubric_of
from decisionflow.spec.problems import Problem, RubricError
from decisionflow.spec.yaml_rubric import dump_rubric, loads_rubric

SOURCE = "r.yaml"


def refused(text: str) -> list[Problem]:
    with pytest.raises(RubricError) as caught:
        loads_rubric(textwrap.dedent(text), source=SOURCE)
    return caught.value.problems


def declared(**annotations) -> type[BaseModel]:
    """A class with these annotations (a `(annotation, default)` pair for a field with a default), decorated."""
    namespace = {"__module__": __name__, "__annotations__": {}}
    for name, annotation in annotations.items():
        if isinstance(annotation, tuple):
            annotation, namespace[name] = annotation
        namespace["__annotations__"][name] = annotation
    return decision(type("Decl", (BaseModel,), namespace))


def refused_class(**annotations) -> list[Problem]:
    with pytest.raises(RubricError) as caught:
        declared(**annotations)
    return caught.value.problems


PARENT = Annotated[Literal["c", "a", "b"], ask("Which area")]
INTENT = Literal["x", "y", "z", "w"]
PARTIAL = {"d": {"a": ["x", "y"], "b": ["z", "w"]}}


# --- 1. an `options_by` field the engine can leave unanswered -------------------------------------


def test_options_by_missing_a_parent_answer_must_be_optional_with_none_default():
    (problem,) = refused_class(d=PARENT, i=Annotated[INTENT, ask("Intent", options_by=PARTIAL)])
    assert problem.source == f"{__name__}.Decl" and problem.location == "fields.i"
    assert "must be Optional and default to None" in problem.message
    assert "its parent 'd' answers 'c', which offers no options" in problem.message
    # Optional but required (no default) is refused as `when=` is.
    (problem,) = refused_class(d=PARENT, i=Annotated[INTENT | None, ask("Intent", options_by=PARTIAL)])
    assert problem.location == "fields.i" and "must be Optional and default to None" in problem.message


def test_options_by_fields_that_are_always_answered_need_not_be_optional():
    every = {"d": {**PARTIAL["d"], "c": ["x", "w"]}}
    cls = declared(
        d=PARENT,
        i=(Annotated[INTENT | None, ask("Intent", options_by=PARTIAL)], None),
        j=Annotated[INTENT, ask("Intent", options_by=every)],
    )
    assert rubric_of(cls).optional_fields == frozenset({"i"})
    assert cls.model_validate({"d": "c", "i": None, "j": "x"}).i is None


def test_a_parent_that_can_be_unanswered_leaves_its_options_by_child_unanswered():
    every = {"i": {label: ["p", "q"] for label in ("x", "y", "z", "w")}}
    (problem,) = refused_class(
        d=PARENT,
        i=(Annotated[INTENT | None, ask("Intent", options_by=PARTIAL)], None),
        k=Annotated[Literal["p", "q"], ask("Follow-up", options_by=every)],
    )
    assert problem.location == "fields.k"
    assert "its parent 'i' is left unanswered, so it must be Optional" in problem.message


def test_the_model_generated_for_a_yaml_rubric_accepts_an_unanswered_options_by_field():
    rubric = loads_rubric(
        "name: r\nfields:\n  d: {kind: choice, question: q, options: [c, a, b]}\n"
        "  i: {kind: choice, question: q, options_by: {d: {a: [x, y], b: [z, w]}}}\n"
        "  j: {kind: choice, question: q, options_by: {d: {a: [x, y], b: [z, w], c: [x, w]}}}\n"
    )
    assert rubric.optional_fields == frozenset({"i"})
    model = model_for(rubric)
    assert model.model_validate({"d": "c", "i": None, "j": "x"}).i is None
    assert model.model_json_schema()["required"] == ["d", "j"]


def test_a_derived_function_sees_none_only_for_fields_that_can_be_unanswered():
    every = {"d": {**PARTIAL["d"], "c": ["x", "w"]}}
    cls = declared(
        d=PARENT,
        j=Annotated[INTENT, ask("Intent", options_by=every)],
        first=Annotated[bool, derive(lambda j: j.startswith("x"))],  # never called with None
    )
    assert rubric_of(cls).fields["first"].derive is not None
    (problem,) = refused_class(
        d=PARENT,
        i=(Annotated[INTENT | None, ask("Intent", options_by=PARTIAL)], None),
        first=Annotated[bool, derive(lambda i: i.startswith("x"))],
    )
    assert problem.location == "fields.first.derive" and "AttributeError" in problem.message


# --- 2. every problem at once -----------------------------------------------------------------------


def test_every_problem_of_a_derive_rule_is_reported_together():
    problems = refused(
        """\
        name: r
        fields:
          mood: {kind: choice, question: q, options: [calm, angry]}
          sev: {kind: score, question: q, min: 0, max: 5}
          level:
            kind: choice
            question: q
            options: [low, high]
            derive:
              rules:
                - if: {field: nosuch, is: x}
                  then: high
                - if: {field: mood, is: furious}
                  then: high
                - if: {field: sev, at_least: 3}
                  then: mid
                - if: {field: mood, at_least: 2}
                  then: high
              otherwise: low
        """
    )
    assert [(p.location, p.line) for p in problems] == [
        ("fields.level.derive", 9), ("fields.level.derive.rules.1", 13), ("fields.level.derive.rules.3", 17),
        ("fields.level.derive", 9),
    ]
    assert "unknown field 'nosuch'" in problems[0].message
    assert "'furious' is not an answer of 'mood'" in problems[1].message
    assert "`at_least`/`at_most` compare scores; 'mood' is a choice field" in problems[2].message
    assert "the rule can give 'mid'" in problems[3].message


def test_problems_of_several_fields_conditions_are_reported_together():
    problems = refused(
        """\
        name: r
        fields:
          a: {kind: choice, question: q, options: [x, y]}
          b: {kind: boolean, question: q, when: {a: z}}
          c: {kind: boolean, question: q, when: {nosuch: z}}
          d: {kind: boolean, question: q, when: {a: [x, w]}, after: [nope]}
          e: {kind: boolean, question: q, after: [f]}
          f: {kind: boolean, question: q, after: [e]}
        """
    )
    assert [(p.location, p.line) for p in problems] == [
        ("fields.b.when", 4), ("fields.c.when", 5), ("fields.d.after", 6), ("fields.d.when", 6), ("fields.e", 7),
    ]
    assert "'z' is not an allowed answer of 'a'" in problems[0].message
    assert "unknown field 'nosuch'" in problems[1].message and "unknown field 'nope'" in problems[2].message
    assert "'w' is not an allowed answer" in problems[3].message and "dependency cycle e -> f -> e" in problems[4].message


def test_checks_on_other_fields_still_run_beside_an_unknown_reference():
    problems = refused(
        """\
        name: r
        answer_format: ids
        fields:
          a: {kind: choice, question: q, options: [x, y], marginalize: 5, after: [a2]}
          a2: {kind: boolean, question: q}
          b: {kind: choice, question: q, options_by: {a: {x: [p, q], z: [p, r]}}}
          c: {kind: boolean, question: q, after: [ghost]}
        """
    )
    assert {p.location: p.message for p in problems}.keys() == {
        "fields.a.marginalize", "fields.b.options_by.a", "fields.b.options_by", "fields.c.after",
    }


def test_a_class_reports_the_problems_of_every_field_together():
    problems = refused_class(
        n=Annotated[int, ask("How many")],
        e=Annotated[Literal["yes", "Yes"], ask("Whether")],
        after_n=Annotated[bool, ask("q", after=["n"])],
    )
    assert [p.location for p in problems] == ["fields.n", "fields.e.options"]
    assert "needs both bounds" in problems[0].message
    assert "'yes' and 'Yes' are identical after normalisation" in problems[1].message


def test_a_class_reports_every_check_across_fields_together():
    problems = refused_class(
        a=Annotated[bool, ask("q")],
        b=(Annotated[bool | None, ask("q", when={"a": "true"})], None),
        c=(Annotated[bool | None, ask("q", when={"ghost": True})], None),
        s=Annotated[int, ask("q"), Field(ge=0, le=5)],
        hot=Annotated[bool, derive(lambda s: s > 3 or None)],
    )
    assert [p.location for p in problems] == ["fields.b.when", "fields.c.when", "fields.hot.derive"]
    assert "the answer is true, of another type" in problems[0].message


# --- 3. score thresholds ----------------------------------------------------------------------------


THRESHOLD = """\
name: r
fields:
  sev: {kind: score, question: q, min: 0, max: 5}
  hi:
    kind: boolean
    question: q
    derive:
      rules:
        - if: {field: sev, TEST}
          then: true
      otherwise: false
"""


@pytest.mark.parametrize(
    "test, words",
    [
        ("at_least: 99", "`at_least: 99` is outside the answers of 'sev' (0..5), so the test never holds"),
        ("at_least: 6", "so the test never holds"),
        ("at_most: -1", "`at_most: -1` is outside the answers of 'sev' (0..5), so the test never holds"),
        ("at_least: -2", "so the test holds for every answer; write `at_least: 0`"),
        ("at_most: 7", "so the test holds for every answer; write `at_most: 5`"),
    ],
)
def test_score_thresholds_outside_its_levels_are_refused(test: str, words: str):
    (problem,) = refused(THRESHOLD.replace("TEST", test))
    assert (problem.location, problem.line) == ("fields.hi.derive.rules.0", 9)
    assert words in problem.message


@pytest.mark.parametrize("test", ["at_least: 0", "at_least: 5", "at_most: 0", "at_most: 5", "at_least: 3"])
def test_score_thresholds_on_its_levels_are_accepted(test: str):
    assert loads_rubric(THRESHOLD.replace("TEST", test)).fields["hi"].derive is not None


# --- 4. dumping a derived function --------------------------------------------------------------------


def test_dumping_a_derived_function_names_the_class_and_the_field():
    cls = declared(a=Annotated[bool, ask("q")], alarm=Annotated[bool, derive(lambda a: not a)])
    with pytest.raises(RubricError) as caught:
        dump_rubric(rubric_of(cls))
    (problem,) = caught.value.problems
    assert (problem.source, problem.location) == (f"{__name__}.Decl", "fields.alarm.derive")
    assert "the field 'alarm' is derived by the Python function" in problem.message
    assert "cannot be written as YAML" in problem.message


# --- 5. where `options_by` keys are refused -------------------------------------------------------------


def test_options_by_keys_that_are_not_labels_are_located_where_written():
    problems = refused(
        """\
        name: r
        fields:
          a: {kind: boolean, question: q}
          s: {kind: score, question: q, min: 0, max: 2}
          e:
            kind: choice
            question: q
            options_by:
              a:
                true: [x, y]
                false: [x, z]
          f: {kind: choice, question: q, options_by: {field: s, options: {1: [x, y], '2': [x, z]}}}
        """
    )
    assert [(p.location, p.line) for p in problems] == [
        ("fields.e.options_by.a.true", 10), ("fields.e.options_by.a.false", 11), ("fields.f.options_by.options.1", 12),
    ]
    assert "key must be a string, got True" in problems[0].message and "write it quoted, 'true'" in problems[0].message
    assert "write it quoted, '1'" in problems[2].message


def test_options_by_keys_written_as_labels_are_accepted():
    rubric = loads_rubric(
        "name: r\nfields:\n  a: {kind: boolean, question: q}\n"
        "  e: {kind: choice, question: q, options_by: {a: {'true': [x, y], 'false': [x, z]}}}\n"
    )
    assert rubric.fields["e"].options_for(True) == {"x": "", "y": ""}
    assert loads_rubric(dump_rubric(rubric)) == rubric
