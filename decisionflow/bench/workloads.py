"""The benchmark's workloads: the peers' presets, the shipped workflows and a field-count sweep.

Every input text is a data file shipped with the package (`bench/data/`), so the benchmark runs the
same from a source tree and from an installed wheel.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..spec.json_schema import from_json_schema
from ..spec.references import shipped_workflow
from ..spec.rubric import Rubric
from ..spec.yaml_rubric import load_rubric
from .presets import PRESET_NAMES, Preset, first_fields, load_preset

OPENAI_PRESETS = ("support_triage", "fintech_fraud", "code_security")
"""The presets also sent as OpenAI structured outputs (`openai_<preset>` workloads)."""

SWEEP_COUNTS = (1, 4, 8, 16, 28)
SWEEP_PRESET = "support_triage"


def workload_text(name: str) -> str:
    """A shipped input text (`bench/data/NAME.txt`)."""
    return resources.files(__package__).joinpath("data", f"{name}.txt").read_text(encoding="utf-8").strip()


@dataclass
class Workload:
    name: str
    rubric: Rubric
    payload: str
    group: str
    """`preset`, `workflow`, `routing`, `sweep` or `openai`."""
    pcd_schema: dict[str, Any] | None = None
    """The preset's own schema, handed to pcd as is."""
    openai: OpenAIRequest | None = None
    """What a Chat Completions client sends for this workload (the `openai_route` method; None: not sent)."""

    @property
    def fields(self) -> int:
        return len(self.rubric)


@dataclass(frozen=True)
class OpenAIRequest:
    """A workload as Chat Completions structured outputs: the JSON schema, its name and the system message."""

    schema: dict[str, Any]
    name: str
    system: str


def preset_json_schema(preset: Preset) -> dict[str, Any]:
    """A preset as the JSON schema a client would send: its keys in order, each boolean or a string enum,
    described by the preset's own description, all required, nothing else allowed."""
    properties: dict[str, Any] = {}
    for key, spec in preset.schema.items():
        described = {"description": spec["description"].strip()} if spec.get("description") else {}
        if str(spec.get("type", "enum")).lower() == "boolean":
            properties[key] = {"type": "boolean", **described}
        else:
            properties[key] = {"type": "string", "enum": list(spec["choices"]), **described}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def openai_workload(preset: Preset) -> Workload:
    """The preset sent as structured outputs: the rubric the server reads from its schema and system message
    (the conversation as the template's own turns), so every method answers the same prompt."""
    request = OpenAIRequest(preset_json_schema(preset), preset.name, preset.rubric.instructions)
    rubric = from_json_schema(request.schema, name=request.name, instructions=request.system, input_turns=True).rubric
    return Workload(f"openai_{preset.name}", rubric, preset.context, "openai", openai=request)


def build_workloads(data_dir: Path, *, quick: bool = False) -> list[Workload]:
    """The benchmark's inputs; `quick` keeps the one-field routing case and 4 support_triage fields."""
    routing = load_rubric(shipped_workflow("model_routing"))
    routing_one = first_fields(routing, 1)
    routing_case = Workload("model_routing_route", routing_one, workload_text("routing_prompt"), "routing")
    sweep = load_preset(SWEEP_PRESET, data_dir)

    def sweep_case(count: int) -> Workload:
        sub = first_fields(sweep.rubric, count)
        schema = {k: sweep.schema[k] for k in sub.fields}
        return Workload(f"{SWEEP_PRESET}_first_{count}", sub, sweep.context, "sweep", schema)

    if quick:
        return [routing_case, sweep_case(4)]

    workloads: list[Workload] = []
    for name in PRESET_NAMES:
        preset = load_preset(name, data_dir)
        workloads.append(Workload(preset.name, preset.rubric, preset.context, "preset", preset.schema))
    workloads.append(Workload("workflow_support_triage", load_rubric(shipped_workflow("support_triage")), workload_text("support_ticket"), "workflow"))
    workloads.append(Workload("workflow_fintech_fraud", load_rubric(shipped_workflow("fintech_fraud")), workload_text("fraud_alert"), "workflow"))
    workloads.append(routing_case)
    for count in SWEEP_COUNTS:
        if count < len(sweep.rubric):  # the full preset is already a workload: the sweep's last point
            workloads.append(sweep_case(count))
    workloads.extend(openai_workload(load_preset(name, data_dir)) for name in OPENAI_PRESETS)
    return workloads
