"""Rubric errors: every problem in a declaration, printed as `source: location: message`.

`location` is the dotted path of the offending key (`fields.severity.max`), so a message points at
the same place whether the rubric came from a YAML file or a decorated class.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Callable, Iterator

from pydantic import BaseModel, ValidationError

from ..errors import Problem, RubricError
from .rubric import NAME_PATTERN, Condition, FieldSpec, Rubric
from .rubric_checks import RubricProblems
from .text import one_line, shown

__all__ = ["Problem", "RubricError", "problem", "problems_from_validation", "rubric_error"]

Path = tuple[str | int, ...]

# Validators in rubric.py name the key they complain about as a `fields.x.y: ` or `max: ` prefix,
# relative to where pydantic reports the error; a plain sentence never starts with `word: `.
_LOCATION_PREFIX = re.compile(r"^([A-Za-z_]\w*(?:\.\w+)*): ")
# Members of the `str | bool | int` union that pydantic appends to a location.
_UNION_MEMBERS = {"str", "bool", "int"}
# Unknown keys beyond this many get no "did you mean" hint: the hint's fuzzy match is the one costly
# step per problem, and a file of a hundred thousand unknown keys must still be reported in linear time.
_HINTED_UNKNOWN_KEYS = 200


def problem(source: str, location: str, message: str, line: int | None = None) -> Problem:
    """A problem whose every part prints on one line, whatever characters the file or key held."""
    return Problem(one_line(source), one_line(location), one_line(message), line)


def rubric_error(source: str, location: str, message: str, *, line: int | None = None) -> RubricError:
    return RubricError([problem(source, location, message, line)])


def problems_from_validation(
    error: ValidationError,
    *,
    source: str,
    line_of: Callable[[Path], int | None] | None = None,
    each_field_alone: bool = False,
) -> list[Problem]:
    """Turn a `Rubric` validation error into problems; `line_of` maps a key path to its line.

    `each_field_alone`: the rubric was validated without some of its fields, so only each field's own
    problems and the settings' count; the checks across fields (and an emptied `fields`) are dropped.
    """
    details = error.errors(include_url=False)
    if each_field_alone:
        details = [detail for detail in details if tuple(detail["loc"]) not in {(), ("fields",)}]
    failed_inside = {tuple(d["loc"][:end]) for d in details for end in range(len(d["loc"]))}
    problems: list[Problem] = []
    seen: set[Path | tuple[Path, str]] = set()
    hints = _HINTED_UNKNOWN_KEYS
    for detail, several in _expanded(details):
        if detail["type"] == "too_short" and tuple(detail["loc"]) in failed_inside:
            continue  # an emptied list only because its items failed
        hint = detail["type"] == "extra_forbidden" and hints > 0
        hints -= hint
        path, message = _locate(detail, hint=hint)
        # One bad `when` value fails every member of `str | bool | int`; say it once. A check that
        # reports several problems may report more than one at a place; those differ in their message.
        identity = (path, message) if several else path
        if identity in seen:
            continue
        seen.add(identity)
        line = line_of(path) if line_of else None
        problems.append(problem(source, ".".join(map(str, path)), message, line))
    return problems


def _expanded(details: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], bool]]:
    """Each error detail, with a `RubricProblems` (a check reporting several problems at once) split
    into one detail per problem; the flag marks those."""
    for detail in details:
        error = (detail.get("ctx") or {}).get("error")
        if detail["type"] == "value_error" and isinstance(error, RubricProblems):
            for message in error.messages:
                yield {**detail, "msg": f"Value error, {message}"}, True
        else:
            yield detail, False


_RULE_TAGS = {"test", "any", "all", "not", "table", "code"}
_RULE_PARENTS = {"derive", "if", "not"} | set(range(1000))


def _locate(detail: dict[str, Any], *, hint: bool = True) -> tuple[Path, str]:
    path: Path = tuple(detail["loc"])
    kind = detail["type"]
    message = _message(detail, path, hint=hint)
    match = _LOCATION_PREFIX.match(message)
    if kind == "value_error" and match:
        path += tuple(match.group(1).split("."))
        message = message[match.end() :]
    if path and path[-1] == "[key]":
        path = path[:-1]
        message = f"key {message}"
    if len(path) >= 2 and path[-1] in _UNION_MEMBERS and isinstance(path[-2], int):
        path = path[:-1]
        message = f"must be a string, true/false or an integer, got {shown(detail.get('input'))}"
    # Tags of the rule unions (`test`, `any`, ...) name a branch of the type, not a key anyone wrote.
    path = tuple(part for i, part in enumerate(path) if not (part in _RULE_TAGS and i > 0 and path[i - 1] in _RULE_PARENTS))
    if len(path) == 3 and path[0] == "fields" and path[2] == "name":
        # The name is the mapping key; nobody wrote a `name:` entry.
        path = path[:2]
    return path, message


def _message(detail: dict[str, Any], path: Path, *, hint: bool = True) -> str:
    kind, text, value = detail["type"], detail["msg"], detail.get("input")
    ctx = detail.get("ctx") or {}
    if kind == "value_error":
        return text.removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return unknown_key(path, hint=hint)
    if kind == "missing":
        return "required key is missing"
    if kind == "enum":
        what = "field kind" if path[-1:] == ("kind",) else "value"
        return f"unknown {what} {shown(value)}; expected {ctx.get('expected', 'one of the listed values')}"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == NAME_PATTERN:
        return (
            f"{shown(value)} is not a valid name: use ASCII letters (a-z, A-Z), digits and underscores, "
            "not starting with a digit"
        )
    if kind == "too_short" and "min_length" in ctx:
        least = ctx["min_length"]
        return f"needs at least {least} item{'' if least == 1 else 's'}, got {ctx.get('actual_length', 'fewer')}"
    if kind in {"model_type", "dict_type"} and _is_scalar(value):
        if len(path) == 2 and path[0] == "fields":
            name = str(path[1])
            if name in FieldSpec.model_fields:
                return (f"{shown(value)} is not a field: {name!r} is a key of a field; indent it under the field "
                        "it belongs to")
            return (f"{shown(value)} is not a field: a field is a mapping of its keys, e.g. "
                    f"`{name}: {{kind: choice, question: ..., options: [...]}}`")
        return f"must be a mapping of keys, got {shown(value)}"
    if kind in {"union_tag_invalid", "literal_error"} or not _is_scalar(value):
        return _lower_first(text.replace("Input should", "must"))
    return f"{_lower_first(text.replace('Input should', 'must'))}, got {shown(value)}"


def unknown_key(path: Path, *, hint: bool = True) -> str:
    """`unknown key 'questoin'; did you mean 'question'? (allowed: ...)` for the key at `path`."""
    key = str(path[-1])
    model = _model_at(path[:-1])
    if model is None:
        return f"unknown key {shown(key)}"
    allowed = [name for name in model.model_fields if not (model is FieldSpec and name == "name")]
    close = difflib.get_close_matches(key, allowed, n=1) if hint and len(key) < 100 else []
    suggestion = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key {shown(key)}{suggestion} (allowed: {', '.join(allowed)})"


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
