"""Rubric errors: every problem in a declaration, printed as `source: location: message`.

`location` is the dotted path of the offending key (`fields.severity.max`), so a message points at
the same place whether the rubric came from a YAML file or a decorated class.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from ..errors import Problem, RubricError
from .rubric import NAME_PATTERN, Condition, FieldSpec, Rubric

__all__ = ["Problem", "RubricError", "problems_from_validation"]

Path = tuple[str | int, ...]

# Validators in rubric.py name the key they complain about as a `fields.x.y: ` or `max: ` prefix,
# relative to where pydantic reports the error; a plain sentence never starts with `word: `.
_LOCATION_PREFIX = re.compile(r"^([A-Za-z_]\w*(?:\.\w+)*): ")
# Members of the `str | bool | int` union that pydantic appends to a location.
_UNION_MEMBERS = {"str", "bool", "int"}


def problems_from_validation(
    error: ValidationError,
    *,
    source: str,
    line_of: Callable[[Path], int | None] | None = None,
) -> list[Problem]:
    """Turn a `Rubric` validation error into problems; `line_of` maps a key path to its line."""
    details = error.errors(include_url=False)
    problems: list[Problem] = []
    seen: dict[Path, int] = {}
    for detail in details:
        if detail["type"] == "too_short" and _has_deeper_error(detail, details):
            continue  # an emptied list only because its items failed
        path, message = _locate(detail)
        if path in seen:
            # One bad `when` value fails every member of `str | bool | int`; say it once.
            continue
        seen[path] = len(problems)
        line = line_of(path) if line_of else None
        problems.append(Problem(source, ".".join(map(str, path)), message, line))
    return problems


def _locate(detail: dict[str, Any]) -> tuple[Path, str]:
    path: Path = tuple(detail["loc"])
    kind = detail["type"]
    message = _message(detail, path)
    match = _LOCATION_PREFIX.match(message)
    if kind == "value_error" and match:
        path += tuple(match.group(1).split("."))
        message = message[match.end() :]
    if path and path[-1] == "[key]":
        path = path[:-1]
        message = f"key {message}"
    if len(path) >= 2 and path[-1] in _UNION_MEMBERS and isinstance(path[-2], int):
        path = path[:-1]
        message = f"must be a string, true/false or an integer, got {detail.get('input')!r}"
    if len(path) == 3 and path[0] == "fields" and path[2] == "name":
        # The name is the mapping key; nobody wrote a `name:` entry.
        path = path[:2]
    return path, message


def _has_deeper_error(detail: dict[str, Any], details: list[dict[str, Any]]) -> bool:
    loc = tuple(detail["loc"])
    return any(len(other["loc"]) > len(loc) and tuple(other["loc"][: len(loc)]) == loc for other in details)


def _message(detail: dict[str, Any], path: Path) -> str:
    kind, text, value = detail["type"], detail["msg"], detail.get("input")
    ctx = detail.get("ctx") or {}
    if kind == "value_error":
        return text.removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return _unknown_key(path)
    if kind == "missing":
        return "required key is missing"
    if kind == "enum":
        what = "field kind" if path[-1:] == ("kind",) else "value"
        return f"unknown {what} {value!r}; expected {ctx.get('expected', 'one of the listed values')}"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == NAME_PATTERN:
        return (
            f"{value!r} is not a valid name: use letters, digits and underscores, "
            "not starting with a digit"
        )
    if kind in {"union_tag_invalid", "literal_error"} or not _is_scalar(value):
        return _lower_first(text.replace("Input should", "must"))
    return f"{_lower_first(text.replace('Input should', 'must'))}, got {value!r}"


def _unknown_key(path: Path) -> str:
    key = str(path[-1])
    model = _model_at(path[:-1])
    if model is None:
        return f"unknown key {key!r}"
    allowed = [name for name in model.model_fields if not (model is FieldSpec and name == "name")]
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown key {key!r}; {hint}(allowed: {', '.join(allowed)})"


def _model_at(path: Path) -> type[BaseModel] | None:
    if path == ():
        return Rubric
    if len(path) == 2 and path[0] == "fields":
        return FieldSpec
    if len(path) == 3 and path[0] == "fields" and path[2] == "when":
        return Condition
    return None


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]
