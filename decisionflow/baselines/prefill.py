"""Row scoring without decisionflow's packed passes: the same rows and readout, read the usual ways.

- `per_field_prefill`: one full forward per field over prefix + input + that field's row;
- `copied_prefix`: prefix + input prefilled once, the cache copied to one batch row per field.

Answers differ from decisionflow's only by pinning; the costs show what the shared cache and the
packed branch pass save.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..compiler.tree import tree_depths
from ..runtime.passes.backend import tree_visibility
from ..runtime.readout.readout import read_field
from ..spec.rubric import Value
from .generation import MethodResult

if TYPE_CHECKING:
    from ..runtime.engine import Engine


def _readout(compiled_field: Any, row_logprobs: dict[int, Any]) -> Value:
    reading = read_field(compiled_field, row_logprobs)
    best = max(range(len(compiled_field.values)), key=reading.probabilities.__getitem__)
    return compiled_field.values[best]


def per_field_prefill(engine: Engine, target: Any, payload: Any) -> MethodResult:
    """One full forward per field over prefix + input + that field's row (no cache, no pinning).

    The row is the field's answer trie as decisionflow compiles it, attached with a tree mask, and
    read with decisionflow's readout, so answers differ from decisionflow only by pinning and by
    the lack of a shared cache: this isolates the cost of re-reading the prefix once per field.
    """
    import torch

    compiled, _ = engine.compile(target)
    backend = engine.backend
    began = time.perf_counter()
    prefix = list(compiled.prefix_tokens) + compiled.request_tokens(payload)
    size = len(prefix)
    values: dict[str, Value | None] = {}
    passes = fed = 0
    causal = torch.ones(size, size, dtype=torch.bool).tril_()
    for name, cf in compiled.fields.items():
        rows = len(cf.row_tokens)
        visible = torch.zeros(size + rows, size + rows, dtype=torch.bool)
        visible[:size, :size] = causal
        visible[size:, :size] = True
        visible[size:, size:] = tree_visibility(cf.row_parents)
        mask = torch.zeros(visible.shape, dtype=backend.dtype).masked_fill_(~visible, torch.finfo(backend.dtype).min)
        positions = list(range(size)) + [size + d for d in tree_depths(cf.row_parents)]
        with torch.inference_mode():
            out = backend.model.model(
                input_ids=torch.tensor([prefix + list(cf.row_tokens)], device=backend.device),
                attention_mask=mask[None, None].to(backend.device),
                position_ids=torch.tensor([positions], device=backend.device),
                use_cache=False,
            )
            hidden = out.last_hidden_state[0, [size + p for p in cf.read_positions]]
            logprobs = torch.log_softmax(backend.model.lm_head(hidden).float(), dim=-1)
        values[name] = _readout(cf, dict(zip(cf.read_positions, logprobs)))
        passes += 1
        fed += size + rows
    elapsed = (time.perf_counter() - began) * 1000
    return MethodResult("per_field_prefill", True, values, passes, fed, 0, elapsed)


def copied_prefix(engine: Engine, target: Any, payload: Any) -> MethodResult:
    """Prefill prefix + input once, copy its cache to one batch row per field, run the rows as a batch.

    Each batch row holds one field's row (padded to the longest) over its own copy of the prefix
    cache; memory grows with fields x prefix. Two passes, no pinning, decisionflow's readout.
    """
    import torch
    from transformers import DynamicCache

    compiled, _ = engine.compile(target)
    backend = engine.backend
    model = backend.model
    began = time.perf_counter()
    prefix = list(compiled.prefix_tokens) + compiled.request_tokens(payload)
    size = len(prefix)
    fields = list(compiled.fields.values())
    width = max(len(cf.row_tokens) for cf in fields)
    with torch.inference_mode():
        cache = DynamicCache(config=backend.config)
        model.model(input_ids=torch.tensor([prefix], device=backend.device), cache=cache, use_cache=True)
        batch = len(fields)
        copied = DynamicCache(config=backend.config)
        for index, layer in enumerate(cache.layers):
            copied.update(layer.keys.repeat(batch, 1, 1, 1), layer.values.repeat(batch, 1, 1, 1), index)
        pad = compiled.fields[next(iter(compiled.fields))].row_tokens[0]
        ids = torch.full((batch, width), pad, dtype=torch.long)
        positions = torch.full((batch, width), size, dtype=torch.long)
        visible = torch.zeros(batch, width, size + width, dtype=torch.bool)
        visible[:, :, :size] = True
        for b, cf in enumerate(fields):
            rows = len(cf.row_tokens)
            ids[b, :rows] = torch.tensor(cf.row_tokens)
            positions[b, :rows] = torch.tensor([size + d for d in tree_depths(cf.row_parents)])
            visible[b, :rows, size : size + rows] = tree_visibility(cf.row_parents)
            # Padding tokens see only themselves and the prefix; nothing reads them.
            visible[b, rows:, size + rows :] = torch.eye(width - rows, dtype=torch.bool)
        mask = torch.zeros(visible.shape, dtype=backend.dtype).masked_fill_(~visible, torch.finfo(backend.dtype).min)
        out = model.model(
            input_ids=ids.to(backend.device),
            attention_mask=mask[:, None].to(backend.device),
            position_ids=positions.to(backend.device),
            cache=copied,
            use_cache=True,
        )
        values: dict[str, Value | None] = {}
        for b, cf in enumerate(fields):
            hidden = out.last_hidden_state[b, list(cf.read_positions)]
            logprobs = torch.log_softmax(model.lm_head(hidden).float(), dim=-1)
            values[cf.spec.name] = _readout(cf, dict(zip(cf.read_positions, logprobs)))
    elapsed = (time.perf_counter() - began) * 1000
    return MethodResult("copied_prefix", True, values, 2, size + batch * width, 0, elapsed)
