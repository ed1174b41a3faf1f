"""pcd presets: the peers' closed-set schemas (`pcd_presets/*.json`) as decisionflow rubrics.

The presets ship with the package (`bench/data/pcd_presets/`); `DECISIONFLOW_DATA` or `--data`
points at another folder holding a `pcd_presets/` folder. A preset file holds an ordered `schema` (field name -> boolean or enum with `choices`) and one example
input in `context`. Field names and labels are kept verbatim so answers can be compared with the
original engine's answers on the same schema; the first field is pinned as in pcd.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..spec.rubric import AnswerFormat, Rubric

PRESET_FOLDER = "pcd_presets"
PRESET_NAMES = ("support_triage", "fintech_fraud", "code_security", "high_cardinality_255")


@dataclass(frozen=True)
class Preset:
    name: str
    rubric: Rubric
    context: str
    """The preset's example input text."""
    schema: dict[str, Any]
    """The original schema mapping, for engines that read it directly (pcd)."""


def default_data_dir() -> Path:
    """`DECISIONFLOW_DATA` when set, else the presets shipped with the package (`bench/data/`)."""
    configured = os.environ.get("DECISIONFLOW_DATA")
    if configured:
        return Path(configured).expanduser()
    return Path(__file__).resolve().parent / "data"


def preset_path(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    base = Path(data_dir) if data_dir is not None else default_data_dir()
    return base / PRESET_FOLDER / f"{name}.json"


def rubric_from_schema(name: str, schema: dict[str, Any], *, instructions: str = "") -> Rubric:
    """A rubric with one field per schema key: `boolean` -> boolean, `enum` -> choice over `choices`."""
    fields: dict[str, Any] = {}
    for key, spec in schema.items():
        kind = str(spec.get("type", "enum")).lower()
        question = (spec.get("description") or key).strip()
        if kind == "boolean":
            fields[key] = {"kind": "boolean", "question": question}
        elif kind in ("enum", "choice"):
            fields[key] = {"kind": "choice", "question": question, "options": list(spec["choices"])}
        else:
            raise ValueError(f"{name}.{key}: unsupported preset field type {kind!r} (boolean or enum)")
    return Rubric(
        name=name,
        instructions=instructions,
        fields=fields,
        answer_format=AnswerFormat.LABELS,
        pin_first=True,
    )


def load_preset(name_or_path: str | os.PathLike, data_dir: str | os.PathLike | None = None) -> Preset:
    """Load a preset by name (`support_triage`) from the data folder, or from a JSON file path."""
    path = Path(name_or_path)
    if path.suffix != ".json":
        path = preset_path(str(name_or_path), data_dir)
    data = json.loads(path.read_text(encoding="utf-8"))
    name = data.get("id") or path.stem
    # The description says what the input is; the title counts fields, which a sub-rubric would contradict.
    instructions = (data.get("description") or "").strip()
    rubric = rubric_from_schema(name, data["schema"], instructions=instructions)
    return Preset(name=name, rubric=rubric, context=data["context"], schema=data["schema"])


def first_fields(rubric: Rubric, count: int) -> Rubric:
    """The rubric cut to its first `count` fields (dependencies on dropped fields are not allowed)."""
    names = list(rubric.fields)[:count]
    data = rubric.model_dump()
    data["fields"] = {n: data["fields"][n] for n in names}
    return Rubric.model_validate({**data, "name": f"{rubric.name}_{count}"})
