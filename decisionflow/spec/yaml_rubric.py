"""Rubrics as YAML files: load (with line numbers in every error) and export (round-trips exactly).

Booleans follow YAML 1.2: only `true`/`false` are booleans, so labels such as `yes`, `no`, `on` and
`off` stay strings instead of silently turning into True/False.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .problems import Problem, RubricError, problems_from_validation
from .rubric import FieldKind, FieldSpec, Rubric

_BOOL_TAG = "tag:yaml.org,2002:bool"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _RubricLoader(yaml.SafeLoader):
    """SafeLoader that reads only true/false as booleans."""


_RubricLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_RubricLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


class _RubricDumper(yaml.SafeDumper):
    """Block style overall; short lists (`after`, `when` values) in flow style."""


class _FlowList(list):
    pass


class _FlowMap(dict):
    pass


_RubricDumper.add_representer(
    _FlowList, lambda dumper, data: dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)
)
_RubricDumper.add_representer(
    _FlowMap, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True)
)
# An option without a description is written as `label:` rather than `label: ''`.
_RubricDumper.add_representer(
    type(None), lambda dumper, data: dumper.represent_scalar("tag:yaml.org,2002:null", "")
)


def load_rubric(path: str | Path) -> Rubric:
    """Read and validate a YAML rubric file; raises `RubricError`."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RubricError.one(source, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RubricError.one(source, "", f"cannot read file: {error}") from None
    return loads_rubric(text, source=source)


def loads_rubric(text: str, source: str = "<string>") -> Rubric:
    """Validate a YAML rubric given as text; `source` names it in error messages."""
    loader = _RubricLoader(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            duplicates = list(_duplicate_keys(root, (), source))
            if duplicates:
                raise RubricError(duplicates)
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as error:
        raise _syntax_error(error, source) from None
    except yaml.YAMLError as error:
        raise RubricError.one(source, "", f"invalid YAML: {error}") from None
    finally:
        loader.dispose()

    if not isinstance(data, dict):
        found = "an empty document" if data is None else f"a {type(data).__name__}"
        raise RubricError.one(
            source, "", f"expected a mapping with `name` and `fields` at the top level, found {found}"
        )
    try:
        return Rubric.model_validate(data)
    except ValidationError as error:
        raise RubricError(
            problems_from_validation(error, source=source, line_of=lambda path: _line_of(root, path))
        ) from None


def dump_rubric(rubric: Rubric) -> str:
    """The rubric as YAML, defaults omitted, field order kept; `loads_rubric` reads it back equal."""
    return yaml.dump(
        _rubric_data(rubric),
        Dumper=_RubricDumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )


def save_rubric(rubric: Rubric, path: str | Path) -> None:
    Path(path).write_text(dump_rubric(rubric), encoding="utf-8")


def _rubric_data(rubric: Rubric) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, info in Rubric.model_fields.items():
        value = getattr(rubric, key)
        if key != "fields" and value != info.default:
            data[key] = _plain(value)
    # Fields last: the settings above read as a header.
    data["fields"] = {name: _field_data(spec) for name, spec in rubric.fields.items()}
    return data


def _field_data(spec: FieldSpec) -> dict[str, Any]:
    data: dict[str, Any] = {}
    keys = sorted(FieldSpec.model_fields, key=lambda key: _FIELD_KEY_ORDER.get(key, len(_FIELD_KEY_ORDER)))
    for key in keys:
        info = FieldSpec.model_fields[key]
        value = getattr(spec, key)
        if key == "name" or (not info.is_required() and value == info.default):
            continue
        if key == "options":
            value = {
                (int(label) if spec.kind is FieldKind.SCORE else label): (description or None)
                for label, description in value.items()
            }
        elif key == "after":
            value = _FlowList(value)
        elif key == "when":
            value = _FlowMap({value.field: _FlowList(value.values)})
        data[key] = _plain(value)
    return data


# The order a person reads a field in: what it is, the question, its range, then its options.
_FIELD_KEY_ORDER = {key: index for index, key in enumerate(["kind", "question", "min", "max", "options"])}


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _syntax_error(error: yaml.MarkedYAMLError, source: str) -> RubricError:
    mark = error.problem_mark or error.context_mark
    problem = error.problem or error.context or "invalid YAML"
    if error.context and error.problem:
        problem = f"{problem} ({error.context})"
    if mark is None:
        return RubricError.one(source, "", problem)
    line = mark.line + 1
    return RubricError.one(source, f"line {line}, column {mark.column + 1}", problem, line=line)


def _duplicate_keys(node: yaml.Node, path: tuple[str, ...], source: str):
    """Yield a problem for every mapping key written twice (PyYAML would keep the last silently)."""
    if isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key, line = key_node.value, key_node.start_mark.line + 1
            if key in first_line:
                yield Problem(
                    source,
                    ".".join((*path, key)),
                    f"duplicate key {key!r} (first written on line {first_line[key]})",
                    line,
                )
            else:
                first_line[key] = line
            yield from _duplicate_keys(value_node, (*path, key), source)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _duplicate_keys(item, (*path, str(index)), source)


def _line_of(root: yaml.Node | None, path: tuple[str | int, ...]) -> int | None:
    """Line of the deepest node on `path` that exists in the file (keys a validator added have none)."""
    node, line = root, None
    for part in path:
        if isinstance(node, yaml.MappingNode):
            match = next(
                ((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(part)),
                None,
            )
            if match is None:
                break
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
