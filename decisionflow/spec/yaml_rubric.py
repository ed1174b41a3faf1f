"""Rubrics as YAML files: load (with line numbers in every error) and export (round-trips exactly).

Files are read by the bounded YAML 1.2 reader in `yaml_reader` (encodings, refused characters,
limits on depth, size and aliases, the core schema), so only `true`/`false` are booleans and labels
such as `yes`, `no`, `on` and `off` stay strings. Every problem, from a bad byte to a cycle between
fields, is one `source: location: message (line N)` line.
"""

from __future__ import annotations

import math
import re
from enum import Enum
from pathlib import Path
from typing import Any, Iterator

import yaml
from pydantic import ValidationError

from .derived import CodeRule
from .problems import (
    Problem,
    RubricError,
    problem,
    problems_from_validation,
    rubric_error,
    unknown_key,
)
from .rubric import DECLARATION, FieldKind, FieldSpec, Rubric, options_by_union
from .text import shown
from .yaml_reader import (
    MAX_FILE_BYTES,
    MERGE_TAG,
    ReadError,
    RubricLoader,
    check_characters,
    decode_rubric_bytes,
    install_core_schema,
    scalar_value,
)


class _RubricDumper(yaml.SafeDumper):
    """Block style overall; short lists (`after`, `when` values) in flow style.

    Strings that YAML 1.1 *or* the 1.2 core schema would read as another type are quoted, so the
    file reads back the same here and in other YAML tools.
    """


install_core_schema(_RubricDumper)
# YAML 1.1 also reads y, Y, n and N as booleans, which PyYAML's own resolver leaves out.
_RubricDumper.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))


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
        with Path(path).open("rb") as handle:  # never more than the reader's limit, whatever the file's size
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise rubric_error(source, "", "file not found") from None
    except OSError as error:
        raise rubric_error(source, "", f"cannot read file: {error.strerror or error}") from None
    try:
        text = decode_rubric_bytes(data)
    except ReadError as error:
        raise _read_error(error, source) from None
    return loads_rubric(text, source=source)


def loads_rubric(text: str | bytes, source: str = "<string>") -> Rubric:
    """Validate a YAML rubric given as text (or as the bytes of a file); `source` names it in errors."""
    try:
        if isinstance(text, (bytes, bytearray)):
            text = decode_rubric_bytes(bytes(text))
        if not isinstance(text, str):
            raise ReadError(f"expected the rubric's YAML text, got {type(text).__name__}")
        check_characters(text)
    except ReadError as error:
        raise _read_error(error, source) from None
    root, data = _read_yaml(text, source)
    if not isinstance(data, dict):
        found = "an empty document" if data is None else f"a {type(data).__name__}"
        message = f"expected a mapping with `name` and `fields` at the top level, found {found}"
        if root is None:
            raise rubric_error(source, "", message)
        line = root.start_mark.line + 1
        raise rubric_error(source, f"line {line}, column {root.start_mark.column + 1}", message, line=line)
    lines = _LineIndex(root)
    data, problems = _without_field_names(data, lines, source)
    try:
        rubric = Rubric.model_validate(data, context=DECLARATION)
    except ValidationError as error:
        problems += problems_from_validation(error, source=source, line_of=lines.line_of)
    if problems:
        raise RubricError(problems)
    return rubric


def _read_yaml(text: str, source: str) -> tuple[yaml.Node | None, Any]:
    """The document's node tree and its value; duplicate keys and every reader refusal are problems."""
    loader = RubricLoader(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            duplicates = list(_duplicate_keys(root, source))
            if duplicates:
                raise RubricError(duplicates)
        return root, (loader.construct_document(root) if root is not None else None)
    except yaml.MarkedYAMLError as error:
        raise _syntax_error(error, source) from None
    except yaml.YAMLError as error:
        raise rubric_error(source, "", f"invalid YAML: {error}") from None
    finally:
        loader.dispose()


def _without_field_names(data: dict[str, Any], lines: _LineIndex, source: str) -> tuple[dict[str, Any], list[Problem]]:
    """A field's name is its key under `fields`; a `name:` written inside a field is an unknown key,
    even when it repeats the key (it would otherwise pass as the rubric-level `name`)."""
    fields = data.get("fields")
    if not isinstance(fields, dict) or not any(isinstance(spec, dict) and "name" in spec for spec in fields.values()):
        return data, []
    problems = []
    cleaned = {}
    for key, spec in fields.items():
        if isinstance(spec, dict) and "name" in spec:
            path = ("fields", key, "name")
            problems.append(problem(source, ".".join(map(str, path)), unknown_key(path), lines.line_of(path)))
            spec = {k: v for k, v in spec.items() if k != "name"}
        cleaned[key] = spec
    return {**data, "fields": cleaned}, problems


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
        if key not in ("fields", "examples") and value != info.default:
            data[key] = _plain(value)
    # Fields after the settings (which read as a header), then the examples that answer them.
    data["fields"] = {name: _field_data(spec, rubric) for name, spec in rubric.fields.items()}
    if rubric.examples:
        data["examples"] = [{"text": example.text, "answers": _FlowMap(example.answers)} for example in rubric.examples]
    return data


def _field_data(spec: FieldSpec, rubric: Rubric) -> dict[str, Any]:
    data: dict[str, Any] = {}
    keys = sorted(FieldSpec.model_fields, key=lambda key: _FIELD_KEY_ORDER.get(key, len(_FIELD_KEY_ORDER)))
    for key in keys:
        info = FieldSpec.model_fields[key]
        value = getattr(spec, key)
        if key == "name" or (not info.is_required() and value == info.default):
            continue
        if key == "options" and spec.options_by is not None:
            union = options_by_union(spec.options_by.options)
            if list(union.items()) == list(value.items()):
                continue  # the union of `options_by`, which is written instead
        if key == "options_by":
            value = {value.field: {answer: list(options) if not any(options.values()) else {k: v or None for k, v in options.items()}
                                   for answer, options in value.options.items()}}
        elif key == "derive":
            if isinstance(value, CodeRule):
                # Named by the class that declares it (the rubric's name when the rule was built elsewhere).
                raise RubricError.one(
                    value.declared_in or rubric.name, f"fields.{spec.name}.derive",
                    f"the field {spec.name!r} is derived by the Python function {value.function_name}, which "
                    "cannot be written as YAML; write its rule as a rule table",
                )
            value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
        elif key == "options":
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
    problem_text = error.problem or error.context or "invalid YAML"
    if error.context and error.problem:
        problem_text = f"{problem_text} ({error.context})"
    if mark is None:
        return rubric_error(source, "", problem_text)
    line = mark.line + 1
    return rubric_error(source, f"line {line}, column {mark.column + 1}", problem_text, line=line)


def _read_error(error: ReadError, source: str) -> RubricError:
    if error.line is None:
        return rubric_error(source, "", error.message)
    return rubric_error(source, f"line {error.line}, column {error.column}", error.message, line=error.line)


def _duplicate_keys(root: yaml.Node, source: str) -> Iterator[Problem]:
    """Yield a problem for every mapping key written twice (PyYAML would keep the last silently).

    Keys are compared as the values they are read as, so `1`, `01`, `0x1` and `1.0` are one key.
    Each mapping is checked once where it is written, however often aliases repeat it.
    """
    visited: set[int] = set()
    pending: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())]
    while pending:
        node, path = pending.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, tuple[str, int]] = {}
            for key_node, value_node in node.value:
                if key_node.tag == MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    pending.append((value_node, path))
                    continue
                key, line = key_node.value, key_node.start_mark.line + 1
                identity = _key_identity(key_node)
                if identity in first:
                    written, first_line = first[identity]
                    same = "" if written == key else f" ({shown(written)} and {shown(key)} are the same key once read)"
                    yield problem(
                        source, ".".join((*path, key)),
                        f"duplicate key {shown(key)}{same} (first written on line {first_line})", line,
                    )
                else:
                    first[identity] = (key, line)
                pending.append((value_node, (*path, key)))
        elif isinstance(node, yaml.SequenceNode):
            pending.extend((item, (*path, str(index))) for index, item in enumerate(node.value))


def _key_identity(node: yaml.ScalarNode) -> Any:
    """What a key is read as (a Python dict would merge equal ones: 1, 1.0 and true); its text when
    it cannot be read, since the constructor reports that with its line."""
    try:
        value = scalar_value(node.tag, node.value)
    except ValueError:
        return ("text", node.value)
    if isinstance(value, float) and math.isnan(value):  # nan never equals itself, so it is its text
        return ("text", node.value)
    return ("value", value)


def _index_of(part: str | int) -> int | None:
    """A path part as a list index: an int, or the digits a message's dotted location writes."""
    if isinstance(part, int):
        return part if part >= 0 else None
    return int(part) if part.isdigit() and part.isascii() else None


class _LineIndex:
    """Lines of key paths in the file, each mapping indexed once when first asked about (linear time
    for any number of problems)."""

    def __init__(self, root: yaml.Node | None) -> None:
        self.root = root
        self._keys: dict[int, dict[str, tuple[int, yaml.Node]]] = {}

    def line_of(self, path: tuple[str | int, ...]) -> int | None:
        """Line of the deepest node on `path` that exists in the file (keys a validator added have none)."""
        node, line = self.root, None
        for part in path:
            if isinstance(node, yaml.MappingNode):
                match = self._index(node).get(str(part))
                if match is None:
                    break
                line, node = match
            elif isinstance(node, yaml.SequenceNode) and (index := _index_of(part)) is not None and index < len(node.value):
                # An item's index, also as a check's message names it (`derive.rules.2`).
                node = node.value[index]
                line = node.start_mark.line + 1
            else:
                break
        return line

    def _index(self, node: yaml.MappingNode) -> dict[str, tuple[int, yaml.Node]]:
        index = self._keys.get(id(node))
        if index is None:
            index = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    index.setdefault(key.value, (key.start_mark.line + 1, value))
            self._keys[id(node)] = index
        return index
