"""A bounded YAML 1.2 reader for rubric files: what a hostile or broken file can cost, and how it is read.

- **Encodings:** UTF-8, with or without a byte-order mark; UTF-16 and UTF-32 only with one. A file
  of NUL bytes (UTF-16 saved without a BOM) or bytes that are not UTF-8 is refused with its line.
- **Characters:** what YAML forbids (NUL, other C0 and C1 controls, lone surrogates, U+FFFE/U+FFFF)
  and the line breaks YAML 1.1 would read where an editor shows none (U+0085, U+2028, U+2029) are
  refused with their line and column before any parsing.
- **Limits:** at most `MAX_CHARACTERS` characters, values nested at most `MAX_DEPTH` deep, at most
  `MAX_VALUES` values once aliases are expanded, of which aliases may repeat at most
  `MAX_REPEATED_VALUES` values and `MAX_CHARACTERS` characters of text; an alias inside the value it
  names (a recursive structure) is refused. Each is checked while the file is read, so a "billion
  laughs" file stops after a few hundred values, and the work every later step does is bounded.
- **Schema:** the YAML 1.2 core schema: `true`/`false` are the only booleans, integers are decimal,
  `0o` octal or `0x` hex, and everything else (`yes`, `on`, `1_000`, `1:30`, `2024-01-01`) is a
  string. Explicit tags are limited to `!!str`, `!!int`, `!!float`, `!!bool`, `!!null`, `!!seq` and
  `!!map`, and their values must fit the tag.

Every refusal is a `yaml.MarkedYAMLError` (or `ReadError`) carrying a position, so the caller
reports it as one located line.
"""

from __future__ import annotations

import codecs
import math
import re
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent

from .text import UNUSUAL_LINE_BREAKS, code_point

MAX_CHARACTERS = 1 << 20
MAX_FILE_BYTES = 4 * MAX_CHARACTERS
"""Bytes read from a file at most: `MAX_CHARACTERS` characters of UTF-32."""
MAX_DEPTH = 32
MAX_VALUES = 100_000
MAX_REPEATED_VALUES = 10_000

_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_NULL_TAG = "tag:yaml.org,2002:null"
MERGE_TAG = "tag:yaml.org,2002:merge"

_TRUE = ("true", "True", "TRUE")
_FALSE = ("false", "False", "FALSE")
_NULL = ("", "~", "null", "Null", "NULL")
_DECIMAL = re.compile(r"[-+]?[0-9]+")
_OCTAL = re.compile(r"0o[0-7]+")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_SPECIAL_FLOATS = {
    ".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan,
}

# The YAML 1.2 core schema's implicit types: (tag, pattern, first characters). Order matters: `1`
# matches both the integer and the float pattern and is an integer.
CORE_SCHEMA = [
    (_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")),
    (_NULL_TAG, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]),
    (_INT_TAG, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")),
    (
        _FLOAT_TAG,
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+.0123456789"),
    ),
    (MERGE_TAG, re.compile(r"^(?:<<)$"), ["<"]),
]

# Characters YAML itself refuses, plus the line breaks only YAML 1.1 honours (see the module docstring).
_REFUSED_CHARACTER = re.compile(
    "[^\t\n\r\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|["
    + "".join(sorted(UNUSUAL_LINE_BREAKS - set("\r\v\f\x1c\x1d\x1e")))
    + "]"
)


class ReadError(Exception):
    """A file that cannot be read as rubric text; `line` and `column` are 1-based when known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


class LimitError(yaml.MarkedYAMLError):
    """A file beyond one of the reader's limits (depth, values, aliases)."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)


# --- bytes and characters -----------------------------------------------------------------------


_BOMS = [
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
]


def decode_rubric_bytes(data: bytes) -> str:
    """The text of a rubric file: UTF-8 (a BOM allowed), or UTF-16/UTF-32 announced by their BOM."""
    if len(data) > MAX_FILE_BYTES:
        raise ReadError(f"the file has more than {MAX_FILE_BYTES} bytes; a rubric file may have at most {MAX_CHARACTERS} characters")
    encoding = next((name for bom, name in _BOMS if data.startswith(bom)), None)
    if encoding is None and b"\x00" in data:
        index = data.index(b"\x00")
        line, column = _position(data, index)
        raise ReadError(
            "the file holds NUL bytes: it looks like UTF-16 or UTF-32 saved without a byte-order mark; "
            "save it as UTF-8",
            line, column,
        )
    try:
        text = data.decode(encoding or "utf-8")
    except UnicodeDecodeError as error:
        if encoding is not None:
            raise ReadError(f"the file starts with a {encoding.upper()} byte-order mark but is not {encoding.upper()}: {error.reason}") from None
        line, column = _position(data, error.start)
        raise ReadError(
            f"byte 0x{data[error.start]:02x} is not UTF-8 ({error.reason}); save the file as UTF-8", line, column
        ) from None
    return text.removeprefix("\ufeff")


def check_characters(text: str) -> None:
    """Refuse text YAML cannot read faithfully, naming the first bad character's line and column."""
    if len(text) > MAX_CHARACTERS:
        raise ReadError(f"the text has {len(text)} characters; a rubric file may have at most {MAX_CHARACTERS}")
    found = _REFUSED_CHARACTER.search(text)
    if found is None:
        return
    index = found.start()
    ch = text[index]
    line, column = _position(text, index)
    if ch == "\x00":
        reason = "a NUL character (is the file UTF-16 or UTF-32? save it as UTF-8)"
    elif "\ud800" <= ch <= "\udfff":
        reason = f"a lone surrogate ({code_point(ch)}), which is not valid Unicode text"
    elif ch in UNUSUAL_LINE_BREAKS:
        reason = f"{code_point(ch)}, a line break only some readers honour; use a plain line break or \\u escapes in a quoted string"
    else:
        reason = f"{code_point(ch)}, which YAML does not allow in a file; write it as an escape in a double-quoted string"
    raise ReadError(f"the file holds {reason}", line, column)


def _position(text: str | bytes, index: int) -> tuple[int, int]:
    newline = "\n" if isinstance(text, str) else b"\n"
    line_start = text.rfind(newline, 0, index) + 1  # type: ignore[arg-type]
    return text.count(newline, 0, index) + 1, index - line_start + 1  # type: ignore[arg-type]


# --- scalars of the core schema -------------------------------------------------------------------


def scalar_value(tag: str, text: str) -> Any:
    """The value of a scalar with a core-schema tag; ValueError saying why when `text` does not fit it."""
    if tag == _STR_TAG:
        return text
    if tag == _INT_TAG:
        return _integer(text)
    if tag == _FLOAT_TAG:
        if text.lower() in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[text.lower()]
        if _FLOAT.fullmatch(text) or _DECIMAL.fullmatch(text):
            return float(text)
        raise ValueError(f"{text!r} is not a number")
    if tag == _BOOL_TAG:
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError(f"{text!r} is not a boolean (YAML 1.2: true or false)")
    if tag == _NULL_TAG:
        if text in _NULL:
            return None
        raise ValueError(f"{text!r} is not null")
    raise ValueError(f"unsupported tag {_short_tag(tag)!r}")


def _integer(text: str) -> int:
    digits = len(text.lstrip("+-"))
    if digits > 100:
        raise ValueError(f"an integer of {digits} digits is too large")
    if _DECIMAL.fullmatch(text):
        return int(text, 10)
    if _OCTAL.fullmatch(text):
        return int(text[2:], 8)
    if _HEX.fullmatch(text):
        return int(text[2:], 16)
    raise ValueError(f"{text!r} is not an integer (YAML 1.2: decimal digits, 0o octal or 0x hex)")


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


# --- the loader -------------------------------------------------------------------------------------


class RubricLoader(yaml.SafeLoader):
    """SafeLoader with the YAML 1.2 core schema and the limits above, checked while composing."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = 0
        self._values = 0
        self._repeated = _Size(0, 0)
        self._sizes: dict[int, _Size] = {}
        """What each finished node stands for once its aliases are expanded, by node id."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            return self._compose_alias(parent, index)
        mark = self.peek_event().start_mark
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise LimitError(f"values are nested more than {MAX_DEPTH} levels deep; a rubric needs a handful", mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        own = _Size(1, len(node.value) if isinstance(node, yaml.ScalarNode) else 0)
        self._sizes[id(node)] = own.plus(*(self._sizes[id(child)] for child in _children(node)))
        self._count(1, mark)
        return node

    def _compose_alias(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        anchored = self.anchors.get(event.anchor)
        if anchored is not None and id(anchored) not in self._sizes:
            raise LimitError(f"alias *{event.anchor} is used inside the value it names (a recursive structure)", event.start_mark)
        node = super().compose_node(parent, index)  # an undefined alias raises here
        size = self._sizes[id(node)]
        self._repeated = self._repeated.plus(size)
        if self._repeated.values > MAX_REPEATED_VALUES or self._repeated.characters > MAX_CHARACTERS:
            what = (f"{MAX_REPEATED_VALUES} values" if self._repeated.values > MAX_REPEATED_VALUES
                    else f"{MAX_CHARACTERS} characters")
            raise LimitError(
                f"aliases repeat more than {what} in all (nested aliases multiply); write the values out "
                "or share fewer",
                event.start_mark,
            )
        self._count(size.values, event.start_mark)
        return node

    def _count(self, values: int, mark: Any) -> None:
        self._values += values
        if self._values > MAX_VALUES:
            raise LimitError(f"the file holds more than {MAX_VALUES} values (aliases expanded)", mark)

    def construct_core_scalar(self, node: yaml.ScalarNode) -> Any:
        try:
            return scalar_value(node.tag, self.construct_scalar(node))
        except ValueError as error:
            raise ConstructorError(None, None, str(error), node.start_mark) from None

    def construct_unsupported(self, node: yaml.Node) -> Any:
        raise ConstructorError(
            None, None,
            f"unsupported tag {_short_tag(node.tag)!r}: a rubric holds only strings, integers, true/false, "
            "null, lists and mappings",
            node.start_mark,
        )


@dataclass(frozen=True)
class _Size:
    values: int
    characters: int

    def plus(self, *others: _Size) -> _Size:
        return _Size(self.values + sum(o.values for o in others), self.characters + sum(o.characters for o in others))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def install_core_schema(cls: type) -> None:
    """Add the YAML 1.2 core schema's implicit types to a loader or dumper class."""
    for tag, pattern, first in CORE_SCHEMA:
        cls.add_implicit_resolver(tag, pattern, first)


RubricLoader.yaml_implicit_resolvers = {}
install_core_schema(RubricLoader)
RubricLoader.yaml_constructors = {}
for _tag in (_INT_TAG, _FLOAT_TAG, _BOOL_TAG, _NULL_TAG):
    RubricLoader.add_constructor(_tag, RubricLoader.construct_core_scalar)
RubricLoader.add_constructor(_STR_TAG, yaml.SafeLoader.construct_yaml_str)
RubricLoader.add_constructor("tag:yaml.org,2002:seq", yaml.SafeLoader.construct_yaml_seq)
RubricLoader.add_constructor("tag:yaml.org,2002:map", yaml.SafeLoader.construct_yaml_map)
RubricLoader.add_constructor(None, RubricLoader.construct_unsupported)
