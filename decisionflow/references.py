"""Rubric references as the CLI takes them: a YAML file, `package.module:Class` or `file.py:Class`."""

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

from .declare import is_decision, rubric_of
from .problems import RubricError
from .rubric import Rubric
from .rubric_yaml import load_rubric

YAML_SUFFIXES = (".yaml", ".yml")


def resolve_rubric(ref: str) -> Rubric:
    """The rubric a reference names; raises `RubricError` saying why it cannot be found."""
    return rubric_of(resolve_target(ref))


def resolve_target(ref: str) -> type | Rubric:
    """The decorated class a reference names, or the rubric for a YAML file or a Rubric object."""
    if ref.lower().endswith(YAML_SUFFIXES):
        return load_rubric(ref)
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
