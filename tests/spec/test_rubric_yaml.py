"""YAML rubrics: loading, the friendly forms, and exact round trips."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from decisionflow.spec.declare import ask, decision, rubric_of
from decisionflow.spec.rubric import AnswerFormat, FieldKind
from decisionflow.spec.yaml_rubric import (
    dump_rubric,
    load_rubric,
    loads_rubric,
    save_rubric,
)


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


@decision(answer_format="ids", pin_first=False)
class MoodCheck(BaseModel):
    """Read the customer's mood."""

    tone: Annotated[Tone, ask("The customer's tone", options={Tone.ANGRY: "raised voice"})]
    urgency: Annotated[int, ask("How urgent", options={1: "can wait", 3: "now"}), Field(ge=1, le=3)]
    follow_up: Annotated[bool | None, ask("Whether to call back", when={"tone": Tone.ANGRY})] = None
    callback_soon: Annotated[bool | None, ask("Soon", when={"follow_up": True})] = None

TRIAGE_YAML = """\
name: support_triage
instructions: Triage one support ticket.
answer_format: ids
pin_first: false
max_fields_per_pass: 2
fields:
  department:
    kind: choice
    question: Which team handles it
    options:
      billing: charges, invoices, refunds
      shipping: delivery and tracking
      returns:
  refund_requested: {kind: boolean, question: Whether the customer asks for money back}
  severity: {kind: score, question: How severe, min: 0, max: 9, options: {0: no problem, 9: outage}}
  escalate:
    kind: boolean
    question: Whether a human must review it
    after: [severity]
    when: {department: [billing, returns]}
  channel: {kind: choice, question: Where it came from, options: [email, phone, yes, on]}
  urgent_refund: {kind: boolean, question: Urgent, when: {refund_requested: true}}
"""


def test_load_all_forms(tmp_path: Path):
    path = tmp_path / "triage.yaml"
    path.write_text(TRIAGE_YAML)
    rubric = load_rubric(path)
    assert rubric.name == "support_triage"
    assert (rubric.answer_format, rubric.pin_first, rubric.max_fields_per_pass) == (AnswerFormat.IDS, False, 2)
    assert rubric.field("department").options == {
        "billing": "charges, invoices, refunds",
        "shipping": "delivery and tracking",
        "returns": "",
    }
    severity = rubric.field("severity")
    assert severity.kind is FieldKind.SCORE and severity.options == {"0": "no problem", "9": "outage"}
    assert rubric.field("escalate").when.values == ("billing", "returns")
    # YAML 1.2 booleans: `yes` and `on` stay labels.
    assert list(rubric.field("channel").options) == ["email", "phone", "yes", "on"]
    assert rubric.field("urgent_refund").when.values == (True,)


def test_round_trip_yaml():
    rubric = loads_rubric(TRIAGE_YAML)
    text = dump_rubric(rubric)
    assert loads_rubric(text) == rubric
    assert dump_rubric(loads_rubric(text)) == text


@pytest.mark.parametrize("cls", [Triage, MoodCheck])
def test_round_trip_decorated_class(cls):
    rubric = rubric_of(cls)
    assert loads_rubric(dump_rubric(rubric)) == rubric


def test_dump_omits_defaults_and_keeps_order():
    text = dump_rubric(rubric_of(Triage))
    assert text == """\
name: triage
instructions: Triage one support ticket.
fields:
  department:
    kind: choice
    question: Which team handles it
    options:
      billing: charges, invoices, refunds
      shipping: delivery and tracking
      returns: sending goods back
  refund_requested:
    kind: boolean
    question: Whether the customer asks for money back
  severity:
    kind: score
    question: How severe the issue is
    min: 0
    max: 9
  escalate:
    kind: boolean
    question: Whether a human must review it
    after: [severity]
    when: {department: [billing, returns]}
"""


def test_dump_quotes_labels_that_would_change_type():
    rubric = loads_rubric(
        "name: t\nfields:\n  a: {kind: choice, question: q, options: ['yes', 'no', '1', 'null', 'y', 'N', 'Off', why]}\n"
    )
    dumped = dump_rubric(rubric)
    assert loads_rubric(dumped) == rubric
    # Quoted for YAML 1.1 readers too (PyYAML's own loader, for one), y and N among them; a plain word is not.
    import yaml

    assert list(yaml.safe_load(dumped)["fields"]["a"]["options"]) == ["yes", "no", "1", "null", "y", "N", "Off", "why"]
    assert "'y':" in dumped and "'N':" in dumped and "\n      why:" in dumped


def test_save_and_load(tmp_path: Path):
    path = tmp_path / "out.yml"
    save_rubric(rubric_of(MoodCheck), path)
    assert load_rubric(path) == rubric_of(MoodCheck)


def test_explicit_condition_and_option_list_of_mappings():
    rubric = loads_rubric(
        """\
name: t
fields:
  a:
    kind: choice
    question: q
    options: [{label: x, description: the x}, {y: the y}, z]
  b: {kind: boolean, question: q, when: {field: a, values: [x]}}
"""
    )
    assert rubric.field("a").options == {"x": "the x", "y": "the y", "z": ""}
    assert rubric.field("b").when.field == "a"
