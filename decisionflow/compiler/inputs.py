"""A request's input as the text the model reads, and the input policy: what is refused, and why.

An input is a string, a JSON-able object (rendered as indented JSON) or a conversation (a list of
`{"role", "content"}` messages, rendered as a delimited transcript). Whatever it holds is data to
judge, never instructions that replace the rubric's. The policy is written out in
`docs/input-policy.md`; the character classes come from `spec.text`, shared with the rubric checks.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from ..errors import InputError
from ..spec.text import (
    code_point,
    first_lone_surrogate,
    has_visible,
    one_line,
    refused_character,
    shown,
)

MAX_NESTING = 100
"""JSON inputs may nest lists and objects this deep; deeper ones are refused rather than overflow."""
MAX_VALUES = 100_000
"""JSON inputs may hold this many values (far more than any model's context window takes), counted
as they are written out, so an object that shares one list many times over cannot blow up."""


def render_input(payload: Any) -> str:
    """The request's input as text: a string, a JSON-able object, or a conversation transcript.

    Whatever it holds is data to judge, never instructions that replace the rubric's. Refused with
    an `InputError`: text that is empty or made only of invisible characters, a lone surrogate (text
    decoded with the wrong encoding), bytes (decode them first), a list of messages that is not a
    well-formed conversation, and objects JSON cannot represent or nested deeper than `MAX_NESTING`.
    """
    if isinstance(payload, str):
        text = payload.strip()
        _check_text(payload)
        return text
    if isinstance(payload, (bytes, bytearray, memoryview)):
        raise InputError("the input is bytes, not text: decode it first (e.g. `data.decode('utf-8')`)")
    strings = _strings_of(payload)
    if _looks_like_conversation(payload):
        _check_conversation(payload)
        turns = [f"[{m['role']}]\n{m['content'].strip()}" for m in payload]
        text = "Conversation transcript:\n" + "\n\n".join(turns) + "\n[end of transcript]"
    else:
        try:
            text = json.dumps(payload, ensure_ascii=False, indent=2)
        except (TypeError, ValueError) as exc:
            raise InputError(
                f"input of type {type(payload).__name__} is not text, a conversation or JSON-able: {one_line(str(exc))}"
            ) from None
    _check_text(strings)
    return text


TURN_ROLES = ("user", "assistant")


def conversation_turns(payload: Any) -> list[dict[str, str]]:
    """The turns of a conversation told to a rubric that reads turns (`Rubric.input_turns`): a text is one
    user turn; a list of `{"role": "user" | "assistant", "content": text}` messages is taken as it is. The
    first turn is the user's, and some user turn says something visible. System text is the rubric's
    instructions (it joins the catalog in the system turn), so a system message here is refused."""
    if isinstance(payload, str):
        _check_text(payload)
        return [{"role": "user", "content": payload.strip()}]
    if isinstance(payload, (bytes, bytearray, memoryview)):
        raise InputError("the input is bytes, not text: decode it first (e.g. `data.decode('utf-8')`)")
    if not isinstance(payload, Sequence) or isinstance(payload, Mapping) or not payload:
        raise InputError(f"a rubric that reads turns decides a text or a non-empty list of {{role, content}} messages, "
                         f"got {shown(payload)}")
    _check_conversation(payload)
    for index, message in enumerate(payload):
        if message["role"] not in TURN_ROLES:
            if message["role"] in ("system", "developer"):
                raise InputError(f"conversation message {index} is a {message['role']} message: in a rubric that reads "
                                 "turns, system text is the rubric's instructions; give it there")
            raise InputError(f"conversation message {index}: the role {shown(message['role'])} is not one a turn may "
                             f"have ({', '.join(TURN_ROLES)})")
        _check_lone_surrogate(message["content"])
    if payload[0]["role"] != "user":
        raise InputError("conversation message 0 is an assistant turn: a conversation begins with a user turn")
    _check_text(" ".join(m["content"] for m in payload if m["role"] == "user"))
    return [{"role": m["role"], "content": m["content"]} for m in payload]


def _check_lone_surrogate(text: str) -> None:
    surrogate = first_lone_surrogate(text)
    if surrogate is not None:
        raise InputError(
            f"the input holds a lone surrogate ({code_point(text[surrogate])}) at character {surrogate}: it is not "
            "valid Unicode text (was it decoded with the wrong encoding?)"
        )


def _check_text(text: str) -> None:
    _check_lone_surrogate(text)
    if not has_visible(text):
        raise InputError("the input is empty (or only spaces and invisible characters): there is nothing to decide on")


def _strings_of(payload: Any) -> str:
    """Every string inside a JSON-able payload, joined: what the model will actually read.

    Walked with an explicit stack, so depth costs no Python recursion. Refused here, before
    `json.dumps` would overflow or run for ever: nesting deeper than `MAX_NESTING`, more than
    `MAX_VALUES` values, and a container that holds itself.
    """
    parts: list[str] = []
    pending: list[tuple[Any, int]] = [(payload, 0)]
    on_path: set[int] = set()  # containers being walked: meeting one again inside itself is a cycle
    values = 0
    while pending:
        item, depth = pending.pop()
        if depth < 0:  # the marker pushed below: the walk has left this container
            on_path.discard(id(item))
            continue
        values += 1
        if values > MAX_VALUES:
            raise InputError(f"the input holds more than {MAX_VALUES} values")
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, (Mapping, list, tuple)):
            if depth >= MAX_NESTING:
                raise InputError(f"the input nests lists and objects more than {MAX_NESTING} levels deep")
            if id(item) in on_path:
                raise InputError("the input contains itself (a circular reference); it cannot be written as JSON")
            on_path.add(id(item))
            children = [part for pair in item.items() for part in pair] if isinstance(item, Mapping) else list(item)
            pending.append((item, -1))
            pending.extend((child, depth + 1) for child in reversed(children))
        elif item is not None:
            parts.append(str(item))
    return " ".join(parts)


def _looks_like_conversation(payload: Any) -> bool:
    """A list in which some object has a `role` or `content` key: meant as a conversation."""
    return (
        isinstance(payload, Sequence)
        and not isinstance(payload, (str, bytes))
        and any(isinstance(m, Mapping) and ({"role", "content"} & set(m)) for m in payload)
    )


def _check_conversation(payload: Sequence[Any]) -> None:
    for index, message in enumerate(payload):
        if not isinstance(message, Mapping):
            raise InputError(
                f"conversation message {index} is {shown(message)}, not an object; every message is "
                '{"role": ..., "content": ...}'
            )
        missing = [key for key in ("role", "content") if key not in message]
        if missing:
            raise InputError(f"conversation message {index} has no {' or '.join(repr(k) for k in missing)} key; "
                             "every message needs a `role` and a `content`")
        for key in ("role", "content"):
            if not isinstance(message[key], str):
                raise InputError(f"conversation message {index}: `{key}` must be a string, got {shown(message[key])}")
        role = message["role"]
        if not has_visible(role) or refused_character(role, multiline=False) or role != role.strip():
            raise InputError(
                f"conversation message {index}: the role {shown(role)} must be a short name on one line "
                "(user, assistant, agent, ...)"
            )
