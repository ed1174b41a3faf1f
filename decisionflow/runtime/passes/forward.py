"""The decoder forward pass, run by the engine over the model's own modules.

The engine does not hand its packed passes to the model's `forward`: it walks the layers itself —
embedding, norms, projections, rotary embedding, MLP and LM head are the model's own modules, called
as they are, or fused kernels reading the same weights (`ops.py`) — and does attention itself. That
keeps every effect on the engine's side: no attention function is registered with transformers, the
model's configuration is never switched, and a model passed to `Engine(model)` stays usable exactly
as before by whoever else holds it.

Shapes: one sequence at a time, `n` tokens; hidden states [1, n, hidden]; per layer queries
[1, heads, n, head_dim], keys and values [1, kv_heads, n, head_dim].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import torch

from .ops import TorchOps, TritonOps

Ops = TorchOps | TritonOps

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer (keys, values), each [1, kv_heads, tokens, head_dim]."""

Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]
"""(layer, queries, keys, values, scale) -> attention output [1, heads, n, head_dim]."""


@dataclass(frozen=True)
class DecoderParts:
    """The modules of a Llama-, Qwen2- or Qwen3-style causal LM that one forward pass needs."""

    embed: Any
    layers: tuple[Any, ...]
    norm: Any
    rotary: Any
    lm_head: Any
    heads: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, model: Any) -> DecoderParts:
        config = model.config
        base = model.model
        heads = config.num_attention_heads
        return cls(
            embed=base.embed_tokens,
            layers=tuple(base.layers[: config.num_hidden_layers]),
            norm=base.norm,
            rotary=base.rotary_emb,
            lm_head=model.lm_head,
            heads=heads,
            kv_heads=config.num_key_value_heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
        )


def project_qkv(attention: Any, x: torch.Tensor, heads: int, kv_heads: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Queries, keys and values of `x` [1, n, hidden]; Qwen3's per-head q/k norms when the layer has them."""
    n = x.shape[1]
    q = attention.q_proj(x).view(1, n, heads, head_dim)
    k = attention.k_proj(x).view(1, n, kv_heads, head_dim)
    v = attention.v_proj(x).view(1, n, kv_heads, head_dim)
    if hasattr(attention, "q_norm"):
        q, k = attention.q_norm(q), attention.k_norm(k)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def run_layers(
    parts: DecoderParts, token_ids: torch.Tensor, positions: torch.Tensor, attend: Attend, ops: Ops | None = None,
    capture: Capture | None = None,
) -> tuple[torch.Tensor, KV]:
    """The decoder stack over `token_ids` [n] at `positions` [n]; `attend` decides what each token sees.

    Returns the last layer's hidden states [1, n, hidden] (before the final norm) and every layer's
    keys and values of these tokens (after rotary embedding), for the caller to keep what it needs.
    Each residual add is fused with the norm that follows it (`ops.add_norm`). With `capture`, the
    residual stream after each of its layers is kept at its rows (`Capture.features`) or averaged over
    its pool (`Capture.pooled_means`).
    """
    ops = ops or TorchOps()
    hidden = parts.embed(token_ids[None])
    rotary = ops.prepare_rotary(parts.rotary, hidden, positions)
    new_kv: KV = []
    pending: torch.Tensor | None = None  # the previous layer's MLP output, not yet added
    for index, layer in enumerate(parts.layers):
        attention = layer.self_attn
        if pending is None:
            x = ops.norm(layer.input_layernorm, hidden)
        else:
            x, hidden = ops.add_norm(pending, hidden, layer.input_layernorm)
        q, k, v = project_qkv(attention, x, parts.heads, parts.kv_heads, parts.head_dim)
        q, k = ops.rotate(rotary, q, k)
        new_kv.append((k, v))
        out = attend(index, q, k, v, attention.scaling)  # [1, H, n, D]
        out = out.transpose(1, 2).reshape(1, q.shape[2], parts.heads * parts.head_dim)
        x, hidden = ops.add_norm(attention.o_proj(out), hidden, layer.post_attention_layernorm)
        pending = ops.mlp(layer.mlp, x)
        if capture is not None and index in capture.layers:
            capture.keep(index, hidden, pending)
    if pending is not None:
        hidden = hidden + pending
    return hidden, new_kv


class Capture:
    """The residual stream after some layers, at some rows of a pass: the features fitted heads read.

    `layers` are counted from the top as Python indexes (-1: the last layer's output, which the LM
    head reads after the final norm; -4: the output of the fourth layer from the top). Each layer's
    rows pass through the model's final norm (`norm`), so every layer is on the scale the LM head sees.
    With `pool`, the rows of its layers are also averaged in groups (each request's input) as soon as a
    layer is done, so a pass holds one hidden-size vector per group and layer, not one per input token.
    """

    def __init__(self, layers: Sequence[int], layer_count: int, rows: torch.Tensor,
                 norm: Callable[[torch.Tensor], torch.Tensor], pool: Pool | None = None):
        self.wanted = {_index(layer, layer_count): i for i, layer in enumerate(layers)} if len(rows) else {}
        self.rows = rows
        self.norm = norm
        self.kept: list[torch.Tensor | None] = [None] * len(self.wanted)
        self.pool = pool
        self.pooled = {_index(layer, layer_count): i for i, layer in enumerate(pool.layers)} if pool is not None else {}
        self.means: list[torch.Tensor | None] = [None] * len(self.pooled)
        self.layers = set(self.wanted) | set(self.pooled)

    def keep(self, index: int, hidden: torch.Tensor, pending: torch.Tensor) -> None:
        if index in self.wanted:
            self.kept[self.wanted[index]] = hidden[0, self.rows] + pending[0, self.rows]
        if index in self.pooled:
            assert self.pool is not None
            rows = self.norm(hidden[0, self.pool.rows] + pending[0, self.pool.rows]).float()
            self.means[self.pooled[index]] = average_groups(rows, self.pool.sizes)

    def features(self) -> torch.Tensor | None:
        """[rows, hidden * layers] float32: each kept layer after the final norm, side by side (None: no rows)."""
        if not self.wanted:
            return None
        return torch.cat([self.norm(kept).float() for kept in self.kept if kept is not None], dim=-1)

    def pooled_means(self) -> torch.Tensor | None:
        """[groups, hidden * pool layers] float32: each group's rows averaged per pooled layer, side by side."""
        if not self.pooled:
            return None
        return torch.cat([mean for mean in self.means if mean is not None], dim=-1)


class Pool(NamedTuple):
    """Rows of a pass to average in groups at some layers: each request's input positions, for the heads
    that read the input's mean hidden state. A backend is handed host lists; the decoder's pass holds the
    same as device tensors. The executor passes a pool only with a layer and a row to average."""

    layers: tuple[int, ...]
    rows: Sequence[int] | torch.Tensor
    """Positions in the pass, group after group."""
    sizes: Sequence[int] | torch.Tensor
    """How many of `rows` each group has (each at least 1)."""


def average_groups(rows: torch.Tensor, sizes: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """[len(sizes), width]: `rows` [sum(sizes), width] averaged group by group, in order, on their device."""
    sizes = torch.as_tensor(sizes, dtype=torch.long, device=rows.device)
    # output_size: the group of every row is known without reading `sizes` back from the device
    groups = torch.repeat_interleave(torch.arange(len(sizes), device=rows.device), sizes, output_size=rows.shape[0])
    sums = torch.zeros(len(sizes), rows.shape[1], dtype=rows.dtype, device=rows.device).index_add_(0, groups, rows)
    return sums / sizes[:, None].to(rows.dtype)


def _index(layer: int, layer_count: int) -> int:
    return layer_count + layer if layer < 0 else layer


def logprobs_at(
    parts: DecoderParts, hidden: torch.Tensor, positions: list[int] | torch.Tensor, ops: Ops | None = None
) -> torch.Tensor:
    """Log-probs over the vocabulary at the given positions of `hidden` [1, n, hidden]: [len, vocab] fp32.

    The final norm and the LM head run only on those rows: nothing else is projected.
    """
    selected = hidden[0, positions]
    logits = parts.lm_head((ops or TorchOps()).norm(parts.norm, selected)).float()
    return torch.log_softmax(logits, dim=-1)


def causal_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Plain causal attention of a sequence over itself (the prefix's prefill)."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
