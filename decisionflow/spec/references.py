"""Rubric references as the CLI takes them: a YAML file, a shipped workflow, `package.module:Class` or `file.py:Class`.

The workflows in the repository's `workflows/` folder ship inside the package, so a reference such
as `workflows/support_triage.yaml` (or just `support_triage`) works from any directory once
decisionflow is installed; a file of that name in the current directory always wins.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

from pydantic import BaseModel

from ..errors import RubricError
from .declare import is_decision, rubric_of
from .rubric import Rubric
from .yaml_rubric import load_rubric

YAML_SUFFIXES = (".yaml", ".yml")


def resolve_rubric(ref: str) -> Rubric:
    """The rubric a reference names; raises `RubricError` saying why it cannot be found."""
    return rubric_of(resolve_target(ref))


def shipped_workflows() -> Path | None:
    """The folder of the shipped workflows: inside an installed package, or the source tree's `workflows/`."""
    package = Path(__file__).resolve().parent.parent
    for folder in (package / "workflows", package.parent / "workflows"):
        if folder.is_dir():
            return folder
    return None


def shipped_workflow(name: str) -> Path:
    """The shipped workflow file called `name` (`support_triage`); raises `RubricError` if there is none."""
    folder = shipped_workflows()
    path = folder / f"{name}.yaml" if folder is not None else None
    if path is None or not path.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml"))) if folder is not None else "none found"
        raise RubricError.one(name, "", f"no shipped workflow of that name (shipped: {known})")
    return path


def _yaml_path(ref: str) -> Path:
    """`ref` itself when it exists; else the shipped workflow of that file name, when `ref` names one."""
    path = Path(ref)
    if path.exists() or path.parent.name not in ("", "workflows"):
        return path
    folder = shipped_workflows()
    if folder is not None and (folder / path.name).is_file():
        return folder / path.name
    return path


def resolve_target(ref: str) -> type | Rubric:
    """The decorated class a reference names, or the rubric for a YAML file or a Rubric object."""
    if ref.lower().endswith(YAML_SUFFIXES):
        path = _yaml_path(ref)
        return load_rubric(path) if path.exists() else load_rubric(ref)
    if ":" not in ref and not Path(ref).exists() and "/" not in ref and ref.isidentifier():
        folder = shipped_workflows()
        if folder is not None and (folder / f"{ref}.yaml").is_file():
            return load_rubric(folder / f"{ref}.yaml")
    module_ref, colon, attribute = ref.rpartition(":")
    if not colon or not module_ref or not attribute:
        kind = "file" if Path(ref).exists() else "reference"
        raise RubricError.one(
            ref, "", f"not a rubric {kind}: expected a .yaml/.yml file, module:Class or file.py:Class"
        )
    target: Any = _import(module_ref, ref)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise RubricError.one(ref, "", f"{module_ref!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if isinstance(target, Rubric) or is_decision(target):
        return target
    what = "a pydantic model not decorated with @decision" if _is_model(target) else repr(target)
    raise RubricError.one(ref, "", f"{attribute} is {what}; expected a @decision class or a Rubric")


def _import(module_ref: str, ref: str) -> ModuleType:
    try:
        if module_ref.endswith(".py") or os.sep in module_ref or "/" in module_ref:
            return _import_file(Path(module_ref), ref)
        with _on_path(Path.cwd()):
            return importlib.import_module(module_ref)
    except RubricError:
        raise  # a declaration error inside the module already says where it is
    except ModuleNotFoundError as error:
        if error.name and module_ref.split(".")[0] == error.name.split(".")[0]:
            raise RubricError.one(ref, "", f"module {module_ref!r} not found") from error
        raise RubricError.one(ref, "", f"importing {module_ref!r} failed: {error}") from error
    except Exception as error:  # noqa: BLE001 - any failure of user code becomes a clear message
        raise RubricError.one(
            ref, "", f"importing {module_ref!r} failed: {type(error).__name__}: {error}"
        ) from error


def _import_file(path: Path, ref: str) -> ModuleType:
    if not path.is_file():
        raise RubricError.one(ref, "", f"file not found: {path}")
    resolved = path.resolve()
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) and Path(module.__file__).resolve() == resolved:
            return module  # importing a file twice would create a second, unequal class
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    name = f"_decisionflow_file_{digest}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise RubricError.one(ref, "", f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # pydantic resolves the class's annotations through sys.modules, so register before running it.
    sys.modules[name] = module
    try:
        with _on_path(resolved.parent):  # so the file can import its neighbours
            spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


@contextmanager
def _on_path(directory: Path) -> Iterator[None]:
    entry = str(directory)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added and entry in sys.path:
            sys.path.remove(entry)


def _is_model(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)
