"""The rubrics a server offers by name: every YAML file of a folder, by file stem, with its calibration.

A folder with a broken rubric, or a calibration that does not fit its rubric, is refused at startup
with every problem listed: a server never starts with a route that can only fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import DecisionflowError, Problem, RubricError
from ..runtime.calibration import Calibration
from ..spec.plan import make_plan
from ..spec.references import YAML_SUFFIXES, shipped_workflows
from ..spec.rubric import FieldSpec, Rubric
from ..spec.yaml_rubric import load_rubric


@dataclass(frozen=True)
class Registered:
    name: str
    """The file stem: the `{name}` of `/v1/rubrics/{name}/decide`."""
    rubric: Rubric
    path: Path
    calibration: Calibration | None = None


class RubricRegistry:
    def __init__(self, entries: dict[str, Registered]) -> None:
        self.entries = dict(sorted(entries.items()))

    @classmethod
    def from_folder(cls, folder: Path | None = None) -> RubricRegistry:
        """Every `*.yaml`/`*.yml` in `folder` (default: the shipped workflows); all problems at once."""
        folder = Path(folder) if folder is not None else shipped_workflows()
        if folder is None or not folder.is_dir():
            raise RubricError.one(str(folder), "", "rubric folder not found")
        entries: dict[str, Registered] = {}
        problems: list[Problem] = []
        for path in sorted(p for p in folder.iterdir() if p.suffix.lower() in YAML_SUFFIXES and p.is_file()):
            if path.stem in entries:
                problems.append(Problem(str(path), "", f"a second rubric named {path.stem!r} (also {entries[path.stem].path.name})"))
                continue
            try:
                rubric = load_rubric(path)
                calibration = _calibration_beside(path, rubric)
            except RubricError as error:
                problems.extend(error.problems)
                continue
            except DecisionflowError as error:
                problems.append(Problem(str(path), "", str(error)))
                continue
            entries[path.stem] = Registered(path.stem, rubric, path, calibration)
        if problems:
            raise RubricError(problems)
        return cls(entries)

    def get(self, name: str) -> Registered | None:
        return self.entries.get(name)

    def describe(self, *, pin_first: bool | None = None) -> list[dict[str, Any]]:
        """Names, fields and plans, as `GET /v1/rubrics` shows them."""
        return [_description(entry, pin_first) for entry in self.entries.values()]


def _calibration_beside(path: Path, rubric: Rubric) -> Calibration | None:
    calibration_path = Calibration.path_for(path)
    if not calibration_path.is_file():
        return None
    calibration = Calibration.load(calibration_path)
    calibration.check(rubric)
    return calibration


def _description(entry: Registered, pin_first: bool | None) -> dict[str, Any]:
    plan = make_plan(entry.rubric, pin_first=pin_first)
    return {
        "name": entry.name,
        "rubric": entry.rubric.name,
        "instructions": entry.rubric.instructions,
        "calibrated": entry.calibration is not None,
        "fields": [field_description(spec) for spec in entry.rubric],
        "plan": {**plan.to_dict(), "forward_passes": plan.forward_passes},
    }


def field_description(spec: FieldSpec) -> dict[str, Any]:
    """One field as `GET /v1/rubrics` lists it: every key on every field, null (or []) where it does not apply.

    `depends_on`: the fields settled before this one (`after`, the `when` field, the `options_by` parent,
    what a derived rule reads). `when`: `{field, values}`, asked only when that field's answer is one of
    `values`. `options_by`: `{field, options: {parent answer: [labels]}}`, the labels offered under each
    answer of the parent (`labels` is their union). `derived`: `{reads: [fields]}` for a field computed
    from other answers by its rule, never asked of the model.
    """
    return {
        "name": spec.name,
        "kind": spec.kind.value,
        "question": spec.question,
        "labels": list(spec.labels),
        "depends_on": list(spec.dependencies),
        "when": None if spec.when is None else {"field": spec.when.field, "values": list(spec.when.values)},
        "options_by": None if spec.options_by is None else {
            "field": spec.options_by.field,
            "options": {answer: list(options) for answer, options in spec.options_by.options.items()},
        },
        "derived": None if spec.derive is None else {"reads": list(spec.derive.reads)},
    }
