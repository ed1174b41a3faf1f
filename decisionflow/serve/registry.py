"""The rubrics a server offers by name: every YAML file of a folder, by file stem, with its calibration,
its fitted heads and its tuned adapter.

A folder with a broken rubric, a calibration that does not fit its rubric, or a heads file that cannot
be read is refused at startup with every problem listed, and so (`check_heads`, once the model is
loaded) are heads fitted for another model, rubric, prompt or option set: a server never starts with
a route that can only fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..errors import CalibrationError, DecisionflowError, ModelError, Problem, RubricError
from ..runtime.adapter import Adapter, adapter_path_for
from ..runtime.heads.fitted import Heads, HeadsError
from ..runtime.heads.fitted import describe as describe_head
from ..runtime.readout.calibration import Calibration
from ..spec.plan import make_plan
from ..spec.references import YAML_SUFFIXES, shipped_workflows
from ..spec.rubric import FieldSpec, Rubric
from ..spec.yaml_rubric import load_rubric

if TYPE_CHECKING:
    from ..runtime.engine import Engine


@dataclass(frozen=True)
class Registered:
    name: str
    """The file stem: the `{name}` of `/v1/rubrics/{name}/decide`."""
    rubric: Rubric
    path: Path
    calibration: Calibration | None = None
    heads: Heads | None = None
    """`NAME.heads.safetensors` beside the rubric (from `decisionflow fit`); None when there is none or
    the registry was built with `heads=False`."""
    adapter: Adapter | None = None
    """`NAME.adapter.safetensors` beside the rubric (from `decisionflow tune`), merged into the model this route
    reads; None when there is none or the registry was built with `adapters=False`."""

    @property
    def fitted(self) -> list[str]:
        """The fields a fitted head answers (the others keep the zero-shot readout)."""
        return self.heads.fitted_fields if self.heads is not None else []


class RubricRegistry:
    def __init__(self, entries: dict[str, Registered]) -> None:
        self.entries = dict(sorted(entries.items()))

    @classmethod
    def from_folder(cls, folder: Path | None = None, *, heads: bool = True, adapters: bool = True) -> RubricRegistry:
        """Every `*.yaml`/`*.yml` in `folder` (default: the shipped workflows); all problems at once.

        With `heads` (the default) a heads file beside a rubric (`NAME.heads.safetensors`) is read and
        applied to its route; one that cannot be read is a problem. Without, heads files are not read and
        every field is answered zero-shot. Whether heads fit the model is `check_heads`'s to say.
        With `adapters` (the default) an adapter beside a rubric (`NAME.adapter.safetensors`) is read, and its
        route reads the model with it merged (`create_app`); one that cannot be read is a problem.
        """
        folder = Path(folder) if folder is not None else shipped_workflows()
        if folder is not None and folder.is_file():
            raise RubricError.one(str(folder), "", "is a file; give the folder of YAML rubrics it is in (each file "
                                                   "is served under its name)")
        if folder is None or not folder.is_dir():
            raise RubricError.one(str(folder), "", "rubric folder not found")
        entries: dict[str, Registered] = {}
        problems: list[Problem] = []
        for path in sorted(p for p in folder.iterdir() if p.suffix.lower() in YAML_SUFFIXES and p.is_file()):
            if path.stem in entries:
                problems.append(Problem(str(path), "", f"a second rubric named {path.stem!r} (also {entries[path.stem].path.name})"))
                continue
            broken = True
            try:
                rubric = load_rubric(path)
                calibration = _calibration_beside(path, rubric)
                broken = False
            except RubricError as error:
                problems.extend(error.problems)
            except CalibrationError as error:  # the calibration file beside is the one to mend
                source = str(Calibration.path_for(path))
                problems.append(Problem(source, "", str(error).removeprefix(f"{source}: ")))
            except DecisionflowError as error:
                problems.append(Problem(str(path), "", str(error)))
            fitted = None
            if heads:  # read even beside a broken rubric: every problem of the folder at once
                try:
                    fitted = _heads_beside(path)
                except HeadsError as error:
                    problems.append(_heads_problem(Heads.path_for(path), error))
                    broken = True
            if not broken and calibration is not None:
                try:
                    calibration.check_readouts(fitted.fitted_fields if fitted is not None else ())
                except CalibrationError as error:
                    problems.append(Problem(str(Calibration.path_for(path)), "", str(error)))
                    broken = True
            adapter = None
            if adapters and adapter_path_for(path).is_file():
                try:
                    adapter = Adapter.load(adapter_path_for(path))
                except ModelError as error:
                    problems.append(Problem(str(adapter_path_for(path)), "",
                                            str(error).removeprefix(f"{adapter_path_for(path)}: ")))
                    broken = True
            if not broken:
                entries[path.stem] = Registered(path.stem, rubric, path, calibration, fitted, adapter)
        if problems:
            raise RubricError(problems)
        return cls(entries)

    def check_heads(self, engine: Engine, engine_for: Callable[[Registered], Engine] | None = None) -> None:
        """Refuse, all problems at once, heads fitted for another model, rubric, prompt or option set
        than `engine` (or `engine_for(entry)`, the engine that reads each route) and the rubric they sit beside
        (a `RubricError` naming each heads file)."""
        problems = []
        for entry in self.entries.values():
            if entry.heads is None:
                continue
            try:
                (engine_for(entry) if engine_for is not None else engine).check_heads(entry.heads, entry.rubric)
            except HeadsError as error:
                problems.append(_heads_problem(Heads.path_for(entry.path), error))
            except DecisionflowError as error:  # the rubric does not compile for this model's tokenizer
                problems.append(Problem(str(entry.path), "", str(error)))
        if problems:
            raise RubricError(problems)

    def check_prompts(self, engine: Engine) -> None:
        """Refuse, all problems at once, served rubrics whose prompt and answers leave the model's context
        no room for an input (many long in-context examples, say): every request would be refused."""
        from ..runtime.executor import check_fits

        problems = []
        for entry in self.entries.values():
            try:
                # Compiled apart from the engine's cache: serving charges and counts what that holds.
                check_fits(engine.prepared.compile(entry.rubric), [], engine.backend.max_positions)
            except DecisionflowError as error:
                problems.append(Problem(str(entry.path), "", str(error)))
        if problems:
            raise RubricError(problems)

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


def _heads_beside(path: Path) -> Heads | None:
    heads_path = Heads.path_for(path)
    return Heads.load(heads_path) if heads_path.is_file() else None


def _heads_problem(heads_path: Path, error: HeadsError) -> Problem:
    """The heads file as the problem's source, its message without the path it already starts with."""
    message = str(error)
    return Problem(str(heads_path), "", message.removeprefix(f"{heads_path}: "))


def _description(entry: Registered, pin_first: bool | None) -> dict[str, Any]:
    plan = make_plan(entry.rubric, pin_first=pin_first)
    return {
        "name": entry.name,
        "rubric": entry.rubric.name,
        "instructions": entry.rubric.instructions,
        "calibrated": entry.calibration is not None,
        "fitted": entry.fitted,
        "heads": None if entry.heads is None else {
            name: describe_head(info) for name, info in entry.heads.metadata.fields.items()
        },
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
