"""A request's input as the text the model reads, and the input policy: what is refused, and why.

An input is a string, a JSON-able object (rendered as indented JSON) or a conversation (a list of
`{"role", "content"}` messages, rendered as a delimited transcript). Whatever it holds is data to
judge, never instructions that replace the rubric's.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any, Mapping, Sequence

from ..errors import InputError


def render_input(payload: Any) -> str:
    """The request's input as text: a string, a JSON-able object, or a conversation transcript.

    Whatever it holds is data to judge, never instructions that replace the rubric's. Refused with
    an `InputError`: text that is empty or made only of invisible characters, a lone surrogate (text
    decoded with the wrong encoding), and a list of messages that is not a well-formed conversation.
    """
    if isinstance(payload, str):
        text = payload.strip()
    elif _looks_like_conversation(payload):
        _check_conversation(payload)
        turns = [f"[{m['role']}]\n{m['content'].strip()}" for m in payload]
        text = "Conversation transcript:\n" + "\n\n".join(turns) + "\n[end of transcript]"
    else:
        try:
            text = json.dumps(payload, ensure_ascii=False, indent=2)
        except (TypeError, ValueError) as exc:
            raise InputError(f"input of type {type(payload).__name__} is not text, a conversation or JSON-able: {exc}") from None
    _check_text(text if isinstance(payload, str) else _strings_of(payload))
    return text


def _check_text(text: str) -> None:
    surrogate = next((i for i, ch in enumerate(text) if "\ud800" <= ch <= "\udfff"), None)
    if surrogate is not None:
        raise InputError(
            f"the input holds a lone surrogate (U+{ord(text[surrogate]):04X}) at character {surrogate}: it is not "
            "valid Unicode text (was it decoded with the wrong encoding?)"
        )
    if not any(_visible(ch) for ch in text):
        raise InputError("the input is empty (or only spaces and invisible characters): there is nothing to decide on")


def _visible(ch: str) -> bool:
    return not ch.isspace() and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES


# Controls, format characters (zero-width spaces and joiners, BOM), separators, unassigned code points.
_INVISIBLE_CATEGORIES = {"Cc", "Cf", "Zs", "Zl", "Zp", "Cn"}


def _strings_of(payload: Any) -> str:
    """Every string inside a JSON-able payload, joined: what the model will actually read."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, Mapping):
        return " ".join(_strings_of(k) + " " + _strings_of(v) for k, v in payload.items())
    if isinstance(payload, (list, tuple)):
        return " ".join(_strings_of(item) for item in payload)
    return "" if payload is None else str(payload)


def _looks_like_conversation(payload: Any) -> bool:
    return (
        isinstance(payload, Sequence)
        and not isinstance(payload, (str, bytes))
        and len(payload) > 0
        and all(isinstance(m, Mapping) for m in payload)
        and any({"role", "content"} & set(m) for m in payload)
    )


def _check_conversation(payload: Sequence[Mapping[str, Any]]) -> None:
    for index, message in enumerate(payload):
        missing = [key for key in ("role", "content") if key not in message]
        if missing:
            raise InputError(f"conversation message {index} has no {' or '.join(repr(k) for k in missing)} key; "
                             "every message needs a `role` and a `content`")
        for key in ("role", "content"):
            if not isinstance(message[key], str):
                raise InputError(f"conversation message {index}: `{key}` must be a string, got {message[key]!r}")
