"""Helpers the test modules share (test modules import this; pytest's own fixtures live in conftest.py).

Named uniquely on purpose: every test folder is put on the import path, so a shared `conftest` module
name would be ambiguous.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def shared_data() -> Path | None:
    """The full development data (`$DECISIONFLOW_DATA`, else `../shared/data`), when present."""
    for candidate in (os.environ.get("DECISIONFLOW_DATA"), ROOT.parent / "shared" / "data"):
        if candidate and (Path(candidate) / "banking77" / "dev.csv").is_file():
            return Path(candidate)
    return None


def packed_and_alone(engine, compiled, text: str):
    """Run one request's input and every field's row in one packed pass; return, per read position,
    the packed log-probs and the same log-probs from a plain forward over the row's path alone."""
    from decisionflow.runtime.passes.backend import PackedPass, RequestContext

    prefix = engine.backend.prefill_prefix(list(compiled.prefix_tokens))
    request = compiled.request_tokens(text)
    packed, last, reads = PackedPass(), -1, []
    for token in request:
        last = packed.add(token, parent=last, request=0, keep=True)
    for field in compiled.fields.values():
        base = len(packed)
        for token, parent in zip(field.row_tokens, field.row_parents):
            packed.add(token, parent=last if parent < 0 else base + parent, request=0)
        for local in field.read_positions:
            path, position = [], local
            while position >= 0:
                path.append(field.row_tokens[position])
                position = field.row_parents[position]
            reads.append((base + local, path[::-1]))
    logprobs = engine.backend.run_pass(prefix, [RequestContext()], packed, [g for g, _ in reads])
    prefix = list(compiled.prefix_tokens) + request
    return [(logprobs[i], engine.backend.forward_plain(prefix + path)) for i, (_, path) in enumerate(reads)]
