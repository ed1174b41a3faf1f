"""The text policy: which characters a rubric's strings and a request's input may hold.

One module so the rubric checks, the YAML reader, the input renderer and the error reporter agree on
what "invisible", "a line break" and "one line" mean. Pure `unicodedata`; no third-party imports.
"""

from __future__ import annotations

import unicodedata
from typing import Any

# Characters `str.splitlines` breaks on besides `\n`: editors, terminals and JSONL readers each treat
# some of them as a line end, so a label or a catalog line holding one is read differently by each.
UNUSUAL_LINE_BREAKS = frozenset("\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")

# Categories that draw nothing: controls, format characters (zero-width spaces and joiners, the BOM,
# tag characters), separators and unassigned code points.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Cn"})
# Letters and symbols that render as blank space although their category says otherwise (Hangul
# fillers, the Braille blank, the combining grapheme joiner, variation selectors).
_BLANK_CODE_POINTS = frozenset(
    [0x034F, 0x115F, 0x1160, 0x2800, 0x3164, 0xFFA0]
    + list(range(0xFE00, 0xFE10))
    + list(range(0xE0100, 0xE01F0))
)


def is_visible(ch: str) -> bool:
    """True for a character that draws something (a letter, a digit, a mark, a symbol, an emoji)."""
    return (
        not ch.isspace()
        and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES
        and ord(ch) not in _BLANK_CODE_POINTS
    )


def has_visible(text: str) -> bool:
    return any(is_visible(ch) for ch in text)


def without_invisible(text: str) -> str:
    """`text` with zero-width and other format characters removed (for comparing labels)."""
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf" and ord(ch) not in _BLANK_CODE_POINTS)


def is_lone_surrogate(ch: str) -> bool:
    return "\ud800" <= ch <= "\udfff"


def is_noncharacter(ch: str) -> bool:
    """U+FDD0..U+FDEF and the last two code points of every plane (U+FFFE, U+FFFF, U+1FFFE, ...)."""
    point = ord(ch)
    return 0xFDD0 <= point <= 0xFDEF or point & 0xFFFE == 0xFFFE


def first_lone_surrogate(text: str) -> int | None:
    return next((i for i, ch in enumerate(text) if is_lone_surrogate(ch)), None)


def refused_character(text: str, *, multiline: bool) -> tuple[int, str] | None:
    """The first character a rubric text may not hold, as (index, "U+XXXX: why"); None when all are allowed.

    Refused everywhere: lone surrogates (not Unicode text), noncharacters, control characters other
    than tab and line feed, and the line breaks other than `\\n`. With `multiline=False` (labels), tab
    and line feed are refused too: a label is one line.
    """
    for index, ch in enumerate(text):
        reason = _refusal(ch, multiline=multiline)
        if reason is not None:
            return index, f"{code_point(ch)}: {reason}"
    return None


def _refusal(ch: str, *, multiline: bool) -> str | None:
    if is_lone_surrogate(ch):
        return "a lone surrogate, not valid Unicode text (was it decoded with the wrong encoding?)"
    if is_noncharacter(ch):
        return "a Unicode noncharacter"
    if ch in UNUSUAL_LINE_BREAKS:
        return "a line break other than \\n" if multiline else "a line break"
    if ch in "\t\n":
        return None if multiline else ("a tab" if ch == "\t" else "a line break")
    if unicodedata.category(ch) == "Cc":
        return "a control character"
    return None


def code_point(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else "")


def one_line(text: str) -> str:
    """`text` safe to print as one line: every character `repr` would escape is escaped the same way."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def shown(value: object, limit: int = 80) -> str:
    """`repr(value)` for a message: one line, cut to about `limit` characters."""
    text = one_line(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def listing(items: Any, show: Any, limit: int = 20) -> str:
    """The first `limit` items, shown one way, and how many there are in all when that is more."""
    items = list(items)
    text = ", ".join(one_line(show(item)) for item in items[:limit])
    return text if len(items) <= limit else f"{text}, ... ({len(items)} in all)"
