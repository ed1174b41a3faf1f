"""Baselines for the benchmark: the strict JSON parser, the preset loader, and the generation cap."""

from __future__ import annotations

import json

import pytest

from decisionflow.baselines import _BraceTracker, json_generate, json_schema, parse_answer
from decisionflow.presets import default_data_dir, first_fields, load_preset
from decisionflow.rubric import Rubric

RUBRIC = Rubric.model_validate({
    "name": "triage",
    "fields": {
        "department": {"kind": "choice", "question": "Which team", "options": ["BILLING", "SHIPPING", "RETURNS"]},
        "refund_requested": {"kind": "boolean", "question": "Refund asked"},
        "severity": {"kind": "score", "question": "How severe", "min": 0, "max": 9},
        "refund_amount": {
            "kind": "choice", "question": "Refund size", "options": ["SMALL", "LARGE"],
            "when": {"refund_requested": [True]},
        },
    },
})

VALID = '{\n  "department": "BILLING",\n  "refund_requested": true,\n  "severity": 7,\n  "refund_amount": "LARGE"\n}'


def test_parse_valid_object():
    valid, values, reason = parse_answer(RUBRIC, VALID)
    assert valid, reason
    assert values == {"department": "BILLING", "refund_requested": True, "severity": 7, "refund_amount": "LARGE"}


def test_parse_ignores_text_after_the_closing_brace():
    valid, values, _ = parse_answer(RUBRIC, VALID + "<|im_end|>\nThanks")
    assert valid and values["severity"] == 7


@pytest.mark.parametrize("conditional", ["", ',\n  "refund_amount": null'])
def test_conditional_field_may_be_absent_or_null(conditional):
    text = '{"department": "SHIPPING", "refund_requested": false, "severity": 0' + conditional + "}"
    valid, values, reason = parse_answer(RUBRIC, text)
    assert valid, reason
    assert values["refund_amount"] is None


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"department": "BILLING", "refund_requested": true, "severity": 7', "not JSON"),  # truncated
        ('{\n  "department": "BILLING",\n  "refund_requested": tr', "not JSON"),  # truncated mid-value
        ("department: BILLING", "not JSON"),
        ('["BILLING"]', "not a JSON object"),
        ('{"department": "BILLING", "severity": 7}', "missing key 'refund_requested'"),
        ('{"department": "BILLING", "refund_requested": "true", "severity": 7}', "not a JSON boolean"),
        ('{"department": "BILLING", "refund_requested": 1, "severity": 7}', "not a JSON boolean"),
        ('{"department": "billing", "refund_requested": true, "severity": 7}', "not an allowed label"),
        ('{"department": "FINANCE", "refund_requested": true, "severity": 7}', "not an allowed label"),
        ('{"department": "BILLING", "refund_requested": true, "severity": "7"}', "not an integer"),
        ('{"department": "BILLING", "refund_requested": true, "severity": 12}', "not an integer"),
        ('{"department": "BILLING", "refund_requested": true, "severity": true}', "not an integer"),
        ('{"department": "BILLING", "refund_requested": true, "severity": 7, "note": "x"}', "unknown key 'note'"),
        ('{"department": "BILLING", "department": "RETURNS", "refund_requested": true, "severity": 7}', "duplicate key"),
    ],
)
def test_parse_rejects_without_repair(text, why):
    valid, values, reason = parse_answer(RUBRIC, text)
    assert not valid
    assert values is None
    assert why in reason


def test_brace_tracker_ignores_braces_inside_strings():
    tracker = _BraceTracker()
    tracker.feed('{\n  "a": "x}{\\"}", "b": {"c": 1}')
    assert not tracker.closed and tracker.depth == 1
    tracker.feed("\n}")
    assert tracker.closed


def test_json_schema_fixes_keys_and_values():
    schema = json_schema(RUBRIC)
    assert schema["required"] == list(RUBRIC.fields)
    assert schema["additionalProperties"] is False
    assert schema["properties"]["department"] == {"enum": ["BILLING", "SHIPPING", "RETURNS"]}
    assert schema["properties"]["severity"] == {"enum": list(range(10))}
    assert schema["properties"]["refund_amount"] == {"enum": ["SMALL", "LARGE", None]}
    json.dumps(schema)


# --------------------------------------------------------------------------------------------
# Presets

needs_presets = pytest.mark.skipif(
    not (default_data_dir() / "pcd_presets").is_dir(), reason="shared/data/pcd_presets is not available"
)


@needs_presets
def test_support_triage_preset_loads_as_a_pinned_label_rubric():
    preset = load_preset("support_triage")
    raw = json.loads((default_data_dir() / "pcd_presets" / "support_triage.json").read_text())
    rubric = preset.rubric
    assert len(rubric) == 28
    assert list(rubric.fields) == list(raw["schema"])
    assert rubric.pin_first is True
    assert rubric.answer_format.value == "labels"
    for name, spec in raw["schema"].items():
        field = rubric.fields[name]
        if spec["type"] == "boolean":
            assert field.values == (True, False)
        else:
            assert list(field.values) == spec["choices"]  # verbatim, order kept
    assert preset.context == raw["context"]


@needs_presets
def test_high_cardinality_preset_keeps_its_255_labels():
    rubric = load_preset("high_cardinality_255").rubric
    customs = rubric.fields["customs_category"]
    assert len(customs.values) == 255
    assert "CAT_095_Aerospace_Titanium_Fasteners_&_Bolts" in customs.values
    assert customs.values[0] == "CAT_000_Live_Animals"


@needs_presets
def test_first_fields_cuts_a_preset():
    rubric = first_fields(load_preset("support_triage").rubric, 8)
    assert len(rubric) == 8
    assert rubric.name == "support_triage_8"


# --------------------------------------------------------------------------------------------
# The real model


@pytest.mark.model
def test_json_generate_cap_makes_the_output_invalid(engine):
    rubric = Rubric.model_validate({
        "name": "two_fields",
        "fields": {
            "refund_requested": {"kind": "boolean", "question": "Whether the customer asks for money back"},
            "department": {"kind": "choice", "question": "Which team handles it", "options": ["BILLING", "SHIPPING"]},
        },
    })
    result = json_generate(engine, rubric, "I was charged twice. Please refund me.", max_new_tokens=3)
    assert result.generated_tokens <= 3
    assert result.forward_passes == result.generated_tokens
    assert not result.valid
    assert result.values is None
    assert "cap" in result.reason
    assert result.text.startswith("{")
    assert result.prompt_tokens > 0 and result.latency_ms > 0
