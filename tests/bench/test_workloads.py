"""Benchmark workloads: the shipped presets and texts."""

from __future__ import annotations

import json

from decisionflow.bench.presets import default_data_dir, first_fields, load_preset
from decisionflow.bench.workloads import build_workloads, workload_text

# --------------------------------------------------------------------------------------------
# Presets

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


def test_high_cardinality_preset_keeps_its_255_labels():
    rubric = load_preset("high_cardinality_255").rubric
    customs = rubric.fields["customs_category"]
    assert len(customs.values) == 255
    assert "CAT_095_Aerospace_Titanium_Fasteners_&_Bolts" in customs.values
    assert customs.values[0] == "CAT_000_Live_Animals"


def test_first_fields_cuts_a_preset():
    rubric = first_fields(load_preset("support_triage").rubric, 8)
    assert len(rubric) == 8
    assert rubric.name == "support_triage_8"


def test_workloads_come_from_shipped_files():
    quick = build_workloads(default_data_dir(), quick=True)
    assert [w.name for w in quick] == ["model_routing_route", "support_triage_first_4"]
    assert quick[0].payload == workload_text("routing_prompt") and "MemoryError" in quick[0].payload
    full = {w.name: w for w in build_workloads(default_data_dir())}
    assert "Priya Raman" in full["workflow_support_triage"].payload
    assert len(full["workflow_support_triage"].rubric) == 32


def test_the_openai_workloads_are_the_presets_as_a_client_sends_them():
    from decisionflow.bench.workloads import OPENAI_PRESETS
    from decisionflow.spec.json_schema import from_json_schema

    full = {w.name: w for w in build_workloads(default_data_dir())}
    for name in OPENAI_PRESETS:
        workload, preset = full[f"openai_{name}"], load_preset(name)
        request = workload.openai
        assert list(request.schema["properties"]) == list(preset.schema) == list(workload.rubric.fields)
        assert request.schema["required"] == list(preset.schema) and request.schema["additionalProperties"] is False
        # The rubric is the one the server reads from the same schema and system message: one prepared rubric.
        assert workload.rubric == from_json_schema(request.schema, name=request.name, instructions=request.system,
                                                   input_turns=True).rubric
        for key, spec in preset.schema.items():
            field = workload.rubric.fields[key]
            assert field.values == ((True, False) if spec["type"] == "boolean" else tuple(spec["choices"]))
        assert workload.payload == preset.context and workload.group == "openai"
