"""Plain JSON generation: the strict parser, the stop-on-close tracker, and the generation cap."""

from __future__ import annotations

import json

import pytest

from decisionflow.baselines.generation import _BraceTracker, json_generate, parse_answer
from decisionflow.baselines.grammar import json_schema
from decisionflow.errors import Unavailable
from decisionflow.spec.rubric import Rubric

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


def test_json_schema_fixes_keys_and_values():
    schema = json_schema(RUBRIC)
    assert schema["required"] == list(RUBRIC.fields)
    assert schema["additionalProperties"] is False
    assert schema["properties"]["department"] == {"enum": ["BILLING", "SHIPPING", "RETURNS"]}
    assert schema["properties"]["severity"] == {"enum": list(range(10))}
    assert schema["properties"]["refund_amount"] == {"enum": ["SMALL", "LARGE", None]}
    json.dumps(schema)


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


def test_an_options_by_field_a_parent_answer_offers_nothing_may_be_null_and_appears_so_in_the_schema():
    rubric = Rubric.model_validate({"name": "areas", "fields": {
        "area": {"kind": "choice", "question": "Area", "options": ["bank", "travel", "other"]},
        "intent": {"kind": "choice", "question": "Intent",
                   "options_by": {"area": {"bank": ["balance", "transfer"], "travel": ["flight", "hotel"]}}},
    }})
    valid, values, reason = parse_answer(rubric, '{"area": "other", "intent": null}')
    assert valid, reason
    assert values == {"area": "other", "intent": None}
    valid, _, reason = parse_answer(rubric, '{"intent": "flight"}')
    assert not valid and "area" in reason
    assert None in json_schema(rubric)["properties"]["intent"]["enum"]
    assert None not in json_schema(rubric)["properties"]["area"]["enum"]


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


@pytest.mark.model
def test_json_generate_cap_makes_the_output_invalid(transformers_engine):
    engine = transformers_engine
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


@pytest.mark.model
def test_generation_on_the_engines_own_decoder_says_which_loader_it_needs(engine):
    rubric = Rubric.model_validate({"name": "t", "fields": {"refund": {"kind": "boolean", "question": "Refund?"}}})
    with pytest.raises(Unavailable, match="loader='transformers'"):
        json_generate(engine, rubric, "I was charged twice.", max_new_tokens=3)
