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
import traceback
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Iterator

from pydantic import BaseModel

from ..errors import RubricError
from .declare import is_decision, name_file_module, rubric_of
from .problems import rubric_error
from .rubric import Rubric
from .text import shown
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
        raise rubric_error(name, "", f"no shipped workflow of that name (shipped: {known})")
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


def rubric_file(ref: str) -> Path | None:
    """The YAML file a reference reads: the file itself, or the shipped workflow a `workflows/NAME.yaml`
    or bare `NAME` reference finds from any directory; None for a class reference. The heads and the
    calibration saved beside a rubric are looked for beside this file."""
    if "\x00" in ref:
        return None
    if ref.lower().endswith(YAML_SUFFIXES):
        return _yaml_path(ref)
    if ":" not in ref and not Path(ref).exists() and "/" not in ref and ref.isidentifier():
        folder = shipped_workflows()
        if folder is not None and (folder / f"{ref}.yaml").is_file():
            return folder / f"{ref}.yaml"
    return None


def resolve_target(ref: str) -> type | Rubric:
    """The decorated class a reference names, or the rubric for a YAML file or a Rubric object."""
    if "\x00" in ref:
        raise rubric_error(ref, "", "not a rubric reference: it holds a NUL character")
    path = rubric_file(ref)
    if path is not None:
        return load_rubric(path) if path.exists() else load_rubric(ref)
    module_ref, colon, attribute = ref.rpartition(":")
    if not colon or not module_ref or not attribute:
        kind = "file" if Path(ref).exists() else "reference"
        raise rubric_error(
            ref, "", f"not a rubric {kind}: expected a .yaml/.yml file, module:Class or file.py:Class"
        )
    target: Any = _import(module_ref, ref)
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise rubric_error(ref, "", f"{module_ref!r} has no attribute {attribute!r}") from None
        except Exception as error:  # noqa: BLE001 - a module's __getattr__ is user code
            raise rubric_error(ref, "", f"reading {attribute!r} from {module_ref!r} failed: {_described(error)}") from None
    if isinstance(target, Rubric) or is_decision(target):
        return target
    what = "a pydantic model not decorated with @decision" if _is_model(target) else shown(target)
    raise rubric_error(ref, "", f"{attribute} is {what}; expected a @decision class or a Rubric")


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
            raise rubric_error(ref, "", f"module {module_ref!r} not found") from error
        raise _import_failed(ref, module_ref, error) from error
    # Whatever the module's code does while it is imported is reported, including sys.exit() and an
    # interrupt it raises itself: a validation must never end quietly, let alone with exit status 0.
    except (Exception, SystemExit, KeyboardInterrupt) as error:  # noqa: BLE001
        raise _import_failed(ref, module_ref, error) from None


def _import_failed(ref: str, module_ref: str, error: BaseException) -> RubricError:
    """One located line for a module whose import raised: where in the user's code, and what."""
    if isinstance(error, SystemExit):
        what = f"the module called sys.exit({'' if error.code is None else shown(error.code)}) while being imported"
    elif isinstance(error, KeyboardInterrupt):
        what = "the module raised KeyboardInterrupt while being imported"
    else:
        what = _described(error)
    location, line = _where(error, module_ref)
    return rubric_error(ref, location, f"importing {module_ref!r} failed: {what}", line=line)


def _described(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _where(error: BaseException, module_ref: str) -> tuple[str, int | None]:
    """Where the user's code raised, from the traceback: `line N` in the referenced file itself,
    `other/file.py, line N` elsewhere."""
    if isinstance(error, SyntaxError) and error.lineno:
        return _place(error.filename, error.lineno, module_ref)
    frames = traceback.extract_tb(error.__traceback__) if isinstance(error.__traceback__, TracebackType) else []
    user = [frame for frame in frames if not _is_own(frame.filename)]
    if not user or user[-1].lineno is None:
        return "", None
    return _place(user[-1].filename, user[-1].lineno, module_ref)


def _place(filename: str | None, line: int, module_ref: str) -> tuple[str, int | None]:
    if not filename or _same_file(filename, module_ref):
        return f"line {line}", line
    return f"{filename}, line {line}", None


def _same_file(filename: str, module_ref: str) -> bool:
    try:
        return Path(filename).resolve() == Path(module_ref).resolve()
    except (OSError, ValueError):
        return False


def _is_own(filename: str) -> bool:
    """Frames of decisionflow itself and of Python's import machinery are not where the user looks."""
    return filename.startswith(str(Path(__file__).resolve().parent.parent)) or "importlib" in filename


def _import_file(path: Path, ref: str) -> ModuleType:
    if not path.is_file():
        raise rubric_error(ref, "", f"file not found: {path}")
    resolved = path.resolve()
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) and Path(module.__file__).resolve() == resolved:
            return module  # importing a file twice would create a second, unequal class
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    name = f"_decisionflow_file_{digest}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise rubric_error(ref, "", f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # pydantic resolves the class's annotations through sys.modules, so register before running it;
    # errors in its classes name the file as written, not this internal module name.
    sys.modules[name] = module
    name_file_module(name, str(path))
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
