"""Decorated classes: the rubric they declare, the typed model, and declaration errors."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Literal, Optional

import annotated_types
import pytest
from pydantic import BaseModel, Field

from decisionflow.spec.declare import (
    Ask,
    ask,
    decision,
    is_decision,
    model_for,
    rubric_of,
    typed_model,
)
from decisionflow.spec.problems import RubricError
from decisionflow.spec.rubric import AnswerFormat, FieldKind, Rubric


@decision(instructions="Triage one support ticket.")
class Triage(BaseModel):
    department: Annotated[
        Literal["billing", "shipping", "returns"],
        ask(
            "Which team handles it",
            options={
                "billing": "charges, invoices, refunds",
                "shipping": "delivery and tracking",
                "returns": "sending goods back",
            },
        ),
    ]
    refund_requested: Annotated[bool, ask("Whether the customer asks for money back")]
    severity: Annotated[int, ask("How severe the issue is"), Field(ge=0, le=9)]
    escalate: Annotated[
        bool | None,
        ask("Whether a human must review it", after=["severity"], when={"department": ["billing", "returns"]}),
    ] = None


class Tone(str, Enum):
    CALM = "calm"
    ANGRY = "angry"


@decision
class MoodCheck(BaseModel):
    """Read the customer's mood.

    Look at wording, not topic."""

    tone: Annotated[Tone, ask("The customer's tone", options={Tone.ANGRY: "raised voice, threats"})]
    urgency: int = Field(ge=1, lt=4, description="How urgent it sounds")
    follow_up: Annotated[Optional[bool], ask("Whether to call back", when={"tone": Tone.ANGRY})] = None


def test_rubric_from_class():
    rubric = rubric_of(Triage)
    assert rubric.name == "triage"
    assert rubric.instructions == "Triage one support ticket."
    assert list(rubric.fields) == ["department", "refund_requested", "severity", "escalate"]
    department = rubric.field("department")
    assert department.kind is FieldKind.CHOICE
    assert department.options == {
        "billing": "charges, invoices, refunds",
        "shipping": "delivery and tracking",
        "returns": "sending goods back",
    }
    assert rubric.field("refund_requested").kind is FieldKind.BOOLEAN
    severity = rubric.field("severity")
    assert (severity.kind, severity.min, severity.max) == (FieldKind.SCORE, 0, 9)
    escalate = rubric.field("escalate")
    assert escalate.after == ("severity",)
    assert escalate.when is not None
    assert (escalate.when.field, escalate.when.values) == ("department", ("billing", "returns"))


def test_docstring_enum_description_and_exclusive_bounds():
    rubric = rubric_of(MoodCheck)
    assert rubric.name == "mood_check"
    assert rubric.instructions == "Read the customer's mood.\n\nLook at wording, not topic."
    assert rubric.field("tone").options == {"calm": "", "angry": "raised voice, threats"}
    urgency = rubric.field("urgency")
    assert (urgency.question, urgency.min, urgency.max) == ("How urgent it sounds", 1, 3)
    assert rubric.field("follow_up").when.values == ("angry",)


def test_decision_options_are_passed_to_rubric():
    @decision(name="custom", instructions="Do it.", answer_format="ids", pin_first=False, max_fields_per_pass=2)
    class Custom(BaseModel):
        flag: Annotated[bool, ask("Is it?")]

    rubric = rubric_of(Custom)
    assert (rubric.name, rubric.instructions, rubric.answer_format) == ("custom", "Do it.", AnswerFormat.IDS)
    assert (rubric.pin_first, rubric.max_fields_per_pass) == (False, 2)


def test_interval_and_after_as_single_name():
    @decision
    class HTTPCheck(BaseModel):
        level: Annotated[int, annotated_types.Interval(gt=0, le=5), ask("Level")]
        ok: Annotated[bool, ask("Ok", after="level")]

    rubric = rubric_of(HTTPCheck)
    assert rubric.name == "http_check"
    assert (rubric.field("level").min, rubric.field("level").max) == (1, 5)
    assert rubric.field("ok").after == ("level",)


Severity = Annotated[int, ask("How severe the issue is", catalog="labels"), Field(ge=0, le=9)]


def test_an_alias_specialised_by_another_ask_takes_each_argument_from_the_last_marker_giving_it():
    @decision
    class Legal(BaseModel):
        legal_threat: Annotated[bool, ask("Whether the writer threatens legal action")]
        severity: Annotated[Severity, ask("How severe the legal exposure is", after=["legal_threat"])]
        general: Severity
        follow_up: Annotated[Optional[bool], ask("Follow up?"), ask(when={"legal_threat": True})] = None

    rubric = rubric_of(Legal)
    severity, general, follow_up = rubric.field("severity"), rubric.field("general"), rubric.field("follow_up")
    assert (severity.question, severity.after, severity.catalog) == ("How severe the legal exposure is", ("legal_threat",), "labels")
    assert (severity.min, severity.max) == (0, 9)
    assert (general.question, general.after) == ("How severe the issue is", ())
    assert (follow_up.question, follow_up.when.field, follow_up.when.values) == ("Follow up?", "legal_threat", (True,))


def test_a_field_both_asked_and_derived_is_refused_naming_it():
    from decisionflow import derive

    with pytest.raises(RubricError, match=r"fields\.urgent: a field is either asked of the model \(ask\(\.\.\.\)\) or derived"):
        @decision
        class Both(BaseModel):
            severity: Annotated[int, ask("How severe"), Field(ge=0, le=9)]
            urgent: Annotated[bool, ask("Urgent?"), derive(lambda severity: severity > 5)]


def test_marker_stays_out_of_schema_and_field_stays_required():
    schema = Triage.model_json_schema()
    assert "Ask" not in repr(schema) and "after" not in repr(schema)
    assert schema["required"] == ["department", "refund_requested", "severity"]
    assert isinstance(Triage.model_fields["department"].metadata[0], Ask)


def test_ask_is_frozen_and_hashable():
    marker = ask("q", options={"a": "x"}, after=["b"], when={"c": True})
    assert marker.when == ("c", (True,))
    assert hash(marker) == hash(ask("q", options={"a": "x"}, after=("b",), when={"c": [True]}))
    with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError
        marker.question = "other"  # type: ignore[misc]


def test_rubric_of_rejects_other_objects():
    class Plain(BaseModel):
        x: bool

    with pytest.raises(TypeError, match="not decorated with @decision"):
        rubric_of(Plain)
    with pytest.raises(TypeError, match="expected a Rubric"):
        rubric_of(42)
    assert rubric_of(rubric_of(Triage)) is rubric_of(Triage)
    assert rubric_of(Triage(department="billing", refund_requested=True, severity=1)) is rubric_of(Triage)


def test_undecorated_subclass_is_not_a_decision():
    class Sub(Triage):
        pass

    assert is_decision(Triage) and not is_decision(Sub)
    with pytest.raises(TypeError):
        rubric_of(Sub)


def test_typed_value_from_engine_answers():
    value = typed_model(Triage).model_validate(
        {"department": "billing", "refund_requested": True, "severity": 7, "escalate": None}
    )
    assert isinstance(value, Triage) and value.department == "billing" and value.escalate is None
    mood = typed_model(MoodCheck).model_validate({"tone": "angry", "urgency": 2, "follow_up": True})
    assert mood.tone is Tone.ANGRY


def test_model_for_yaml_rubric():
    rubric = rubric_of(Triage)
    model = model_for(rubric)
    assert model is model_for(Rubric.model_validate(rubric.model_dump() | {"fields": {
        name: spec.model_dump() | {"name": name} for name, spec in rubric.fields.items()}}))
    assert typed_model(rubric) is model
    value = model.model_validate({"department": "returns", "refund_requested": False, "severity": 0, "escalate": None})
    assert value.department == "returns" and value.severity == 0
    schema = model.model_json_schema()
    assert schema["properties"]["department"]["enum"] == ["billing", "shipping", "returns"]
    assert schema["properties"]["severity"]["maximum"] == 9
    assert schema["required"] == ["department", "refund_requested", "severity"]
    with pytest.raises(ValueError):
        model.model_validate({"department": "legal", "refund_requested": False, "severity": 0})
    with pytest.raises(ValueError):
        model.model_validate({"department": "billing", "refund_requested": False, "severity": 10})


def _declare(annotation, default=...):
    namespace = {"__annotations__": {"f": annotation}, "__module__": __name__}
    if default is not ...:
        namespace["f"] = default
    return decision(type("Bad", (BaseModel,), namespace))


@pytest.mark.parametrize(
    "annotation, words",
    [
        (Annotated[float, ask("q")], "type float is not supported"),
        (Annotated[str, ask("q")], "type str is not supported"),
        (Annotated[list[str], ask("q")], "type list[str] is not supported"),
        (Annotated[Literal[1, 2], ask("q")], "Literal values must all be strings"),
        (Annotated[int, ask("q")], "needs both bounds"),
        (Annotated[int, ask("q"), Field(ge=0)], "needs both bounds"),
    ],
)
def test_unsupported_types_name_class_field_and_type(annotation, words):
    with pytest.raises(RubricError) as caught:
        _declare(annotation)
    message = str(caught.value)
    assert message.startswith(f"{__name__}.Bad: fields.f: ")
    assert words in message and "supported: Literal[...] of strings" in message


def test_nested_model_and_numeric_enum_are_rejected():
    class Inner(BaseModel):
        x: bool

    class Number(Enum):
        ONE = 1
        TWO = 2

    with pytest.raises(RubricError, match="type Inner is not supported"):
        _declare(Annotated[Inner, ask("q")])
    with pytest.raises(RubricError, match="Enum values must all be strings"):
        _declare(Annotated[Number, ask("q")])


def test_field_without_question_is_an_error():
    with pytest.raises(RubricError, match=r"fields\.f: no question"):
        _declare(bool)


def test_conditional_field_must_be_optional_with_none_default():
    with pytest.raises(RubricError, match="must be Optional and default to None"):
        _declare(Annotated[bool, ask("q", when={"g": True})])
    with pytest.raises(RubricError, match="must be Optional and default to None"):
        _declare(Annotated[bool | None, ask("q", when={"g": True})])


def test_options_must_describe_allowed_values():
    with pytest.raises(RubricError, match=r"fields\.f: ask\(options=...\) describes 'legal'"):
        _declare(Annotated[Literal["a", "b"], ask("q", options={"legal": "x"})])


def test_rubric_level_errors_name_the_class():
    with pytest.raises(RubricError) as caught:
        _declare(Annotated[Literal["only"], ask("q")])
    assert str(caught.value) == (
        f"{__name__}.Bad: fields.f.options: a choice field needs at least two options, got 1"
    )


def test_bad_when_is_rejected_by_ask():
    with pytest.raises(ValueError, match="exactly one field"):
        ask("q", when={"a": 1, "b": 2})


def test_decision_requires_a_pydantic_model():
    with pytest.raises(TypeError, match="BaseModel subclass"):
        decision(type("NotModel", (), {}))
