"""Generated request inputs: text in any encoding mishap, JSON of any shape, conversations with parts
missing. Each is rendered or refused exactly as `docs/input-policy.md` says, with a one-line
`InputError`; `decisionflow run --text` turns each refusal into one line and exit status 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hostile import CORPUS, ZERO_WIDTH, refused_in_text, visible
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from decisionflow.cli import app
from decisionflow.compiler.inputs import MAX_NESTING, render_input
from decisionflow.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
SENTIMENT = str(ROOT / "workflows" / "sentiment.yaml")


def outcome(payload: Any) -> str | InputError:
    try:
        return render_input(payload)
    except InputError as error:
        message = str(error)
        assert message.isprintable() and len(message) < 500, message
        return error


def strings_in(payload: Any) -> list[str]:
    if isinstance(payload, str):
        return [payload]
    if isinstance(payload, dict):
        return [s for key, value in payload.items() for s in strings_in(key) + strings_in(value)]
    if isinstance(payload, (list, tuple)):
        return [s for item in payload for s in strings_in(item)]
    return [] if payload is None else [str(payload)]


def has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


# Text as it arrives: any code point (lone surrogates from a bad decode included), invisible padding.
any_text = st.one_of(
    st.text(st.characters(codec=None), max_size=30),
    st.text(st.sampled_from(ZERO_WIDTH + " \t\n\r\u3000\u2028\x00\x85"), max_size=8),
    st.binary(max_size=30).map(lambda b: b.decode("utf-8", errors="surrogateescape")),
)


@CORPUS
@given(any_text)
def test_text_is_refused_exactly_when_it_has_a_lone_surrogate_or_nothing_visible(text: str):
    result = outcome(text)
    if has_surrogate(text):
        assert isinstance(result, InputError) and "lone surrogate" in str(result)
    elif not visible(text):
        assert isinstance(result, InputError) and "empty" in str(result)
    else:
        assert result == text.strip()


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), any_text),
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(any_text, children, max_size=4)),
    max_leaves=20,
)


@CORPUS
@given(json_values.filter(lambda v: not isinstance(v, str)))
def test_json_inputs_are_rendered_unless_their_text_is_empty_or_broken(payload: Any):
    strings = " ".join(strings_in(payload))
    looks_like_conversation = isinstance(payload, list) and any(
        isinstance(item, dict) and {"role", "content"} & set(item) for item in payload
    )
    result = outcome(payload)
    if looks_like_conversation:
        return  # the conversation corpus below decides these
    if has_surrogate(strings):
        assert isinstance(result, InputError) and "lone surrogate" in str(result)
    elif not visible(strings):
        assert isinstance(result, InputError) and "empty" in str(result)
    else:
        assert json.loads(result) == payload


messages = st.dictionaries(
    st.sampled_from(["role", "content", "name", "tool_calls"]),
    st.one_of(any_text, st.integers(), st.none(), st.lists(st.text(max_size=3), max_size=2)),
    max_size=4,
)


@CORPUS
@given(st.lists(st.one_of(messages, any_text, st.integers()), min_size=1, max_size=4))
def test_conversations_render_only_when_every_message_is_well_formed(conversation: list[Any]):
    meant = any(isinstance(m, dict) and {"role", "content"} & set(m) for m in conversation)
    if not meant:
        return
    well_formed = all(
        isinstance(m, dict)
        and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        and visible(m["role"]) and m["role"] == m["role"].strip()
        and not any(refused_in_text(ch, label=True) for ch in m["role"])
        for m in conversation
    )
    result = outcome(conversation)
    if not well_formed:
        assert isinstance(result, InputError) and "conversation message" in str(result)
        return
    strings = " ".join(s for m in conversation for s in strings_in(m))
    if has_surrogate(strings):
        assert isinstance(result, InputError) and "lone surrogate" in str(result)
    elif not visible(strings):
        assert isinstance(result, InputError)
    else:
        assert isinstance(result, str) and result.startswith("Conversation transcript:")
        assert all(f"[{m['role']}]\n{m['content'].strip()}" in result for m in conversation)


@CORPUS
@given(st.integers(1, 400), st.sampled_from(["list", "dict"]))
def test_deep_json_is_refused_beyond_the_nesting_limit_not_by_a_recursion_error(depth: int, shape: str):
    payload: Any = "leaf"
    for _ in range(depth):
        payload = [payload] if shape == "list" else {"k": payload}
    result = outcome(payload)
    if depth > MAX_NESTING:
        assert isinstance(result, InputError) and "levels deep" in str(result)
    else:
        assert isinstance(result, str) and "leaf" in result


def test_shared_and_circular_containers():
    shared = ["x"]
    assert "x" in outcome({"a": shared, "b": shared})
    doubling: Any = ["lol"]
    for _ in range(40):  # shared forty levels deep: 2**40 values once written out
        doubling = [doubling, doubling]
    assert "more than" in str(outcome(doubling))
    circular: list[Any] = ["x"]
    circular.append(circular)
    assert "circular" in str(outcome(circular))


@pytest.mark.parametrize("payload", [b"bytes", bytearray(b"x"), object(), {("a", "b"): 1}, {1, 2}])
def test_inputs_that_are_not_text_or_json_are_refused_in_one_line(payload):
    assert isinstance(outcome(payload), InputError)


# --- the command line ----------------------------------------------------------------------------

REFUSED_TEXTS = {
    "empty": "",
    "spaces": "   \t  ",
    "zero-width": "\u200b\u2060\ufeff",
    "lone surrogate": "caf\udce9 au lait",
}


@pytest.mark.model
def test_run_text_refuses_each_kind_in_one_line(engine, monkeypatch):
    """In-process, on the loaded real model (Engine.load hands back the session's engine)."""
    from decisionflow.runtime.engine import Engine

    monkeypatch.setattr(Engine, "load", classmethod(lambda cls, *args, **kwargs: engine))
    for kind, text in REFUSED_TEXTS.items():
        result = CliRunner().invoke(app, ["run", SENTIMENT, "--text", text])
        lines = result.output.strip().splitlines()
        assert result.exit_code == 1, (kind, result.output)
        assert len(lines) == 1 and lines[0].startswith("error: the input "), (kind, lines)
        assert "Traceback" not in result.output


@pytest.mark.model
def test_run_text_from_a_terminal_in_another_encoding_is_one_line():
    """A Latin-1 terminal's `café` arrives as bytes that are not UTF-8: Python hands them over as a
    lone surrogate, which must come back as one line and exit status 1, never a traceback."""
    argv = [os.fsencode(a) for a in (sys.executable, "-m", "decisionflow.cli", "run", SENTIMENT, "--text")]
    result = subprocess.run([*argv, "caf\xe9".encode("latin-1")], capture_output=True, timeout=300)
    stderr = result.stderr.decode("utf-8", errors="replace")
    assert result.returncode == 1, stderr
    assert "Traceback" not in stderr and "lone surrogate (U+DCE9)" in stderr
    assert [line for line in stderr.splitlines() if line.startswith("error:")] == [stderr.strip().splitlines()[-1]]
