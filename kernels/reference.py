"""Torch references for the kernels: the exact operations a fused kernel must reproduce.

Each function has the signature its fused counterpart's launcher has (same name, in the kernel's own
module), so a test runs both on the same tensors and compares, and the runtime calls the reference
wherever the fused path is unavailable. This module needs only torch: the runtime may import it on a
machine without Triton.

Each reference computes what the runtime computes today with the model's own modules, rounding where
they round: Llama's RMSNorm normalises in fp32 and rounds before the weight, SiLU rounds before the
product with `up`, rotary tables are rounded to the model's dtype before they multiply.
"""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., hidden], weight [hidden]: normalised in fp32, scaled by `weight` in x's dtype (as Llama does)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual sum `x + residual` and its RMSNorm: (normed, summed), as a decoder layer computes them."""
    summed = x + residual
    return rms_norm(summed, weight, eps), summed


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up: the activation product of a Llama-style MLP, between its projections."""
    return torch.nn.functional.silu(gate) * up


def rotary_tables(positions: torch.Tensor, inv_freq: torch.Tensor, attention_scaling: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [n, head_dim] for each position, as transformers' rotary module returns them (in `dtype`)."""
    freqs = positions[:, None].float() * inv_freq.float()
    angles = torch.cat((freqs, freqs), dim=-1)
    return (angles.cos() * attention_scaling).to(dtype), (angles.sin() * attention_scaling).to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_embedding(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, attention_scaling: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [1, H, n, D], k [1, Hkv, n, D] rotated for token positions [n] (any order: packed rows restart them).

    `inv_freq` [D/2] and `attention_scaling` are what the model's rotary module holds.
    """
    cos, sin = rotary_tables(positions, inv_freq, attention_scaling, q.dtype)
    cos, sin = cos[None, None], sin[None, None]
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def visibility_from_spans(spans: torch.Tensor, keys: int) -> torch.Tensor:
    """[N, keys] bool: query i sees key j when `spans[i, s, 0] <= j < spans[i, s, 1]` for some slot s."""
    j = torch.arange(keys, device=spans.device)
    starts, ends = spans[..., 0, None], spans[..., 1, None]
    return ((j >= starts) & (j < ends)).any(dim=1)


def _softmax_part(scores: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax-weighted values and log-sum-exp of fp32 `scores` [..., Q, K]; a row seeing nothing gives 0 and -inf."""
    lse = torch.logsumexp(scores, dim=-1)
    finite = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    return torch.matmul(torch.exp(scores - finite.unsqueeze(-1)), values), lse


def tree_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    prefix_key: torch.Tensor,
    prefix_value: torch.Tensor,
    spans: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Branch attention over one shared prefix and a tree of packed tokens described by key spans.

    query [1, Hq, N, D]; key/value [1, Hkv, L, D] (every request's earlier context, then the pass's own
    N tokens); prefix_key/value [1, Hkv, P, D], seen by every query; spans [N, K, 2]: query i sees the
    local keys j with `spans[i, s, 0] <= j < spans[i, s, 1]` for some s. Returns [1, Hq, N, D].

    The query heads sharing one key/value head are folded into the query axis (row g * N + i is query
    head g of that group, token i); the prefix part runs unmasked, the local part under the spans, and
    the two are merged by their log-sum-exps in fp32. A query that sees no key at all gets zeros.
    """
    _, heads, n, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    folded = query.reshape(1, kv_heads, groups * n, dim).float()
    visible = visibility_from_spans(spans, key.shape[2]).repeat(groups, 1)
    prefix_scores = torch.matmul(folded, prefix_key.float().transpose(-1, -2)) * scale
    local_scores = torch.matmul(folded, key.float().transpose(-1, -2)) * scale
    local_scores = local_scores.masked_fill(~visible, float("-inf"))
    out_prefix, lse_prefix = _softmax_part(prefix_scores, prefix_value.float())
    out_local, lse_local = _softmax_part(local_scores, value.float())
    top = torch.maximum(lse_prefix, lse_local)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    w_prefix = torch.exp(lse_prefix - top).unsqueeze(-1)
    w_local = torch.exp(lse_local - top).unsqueeze(-1)
    total = w_prefix + w_local
    out = (out_prefix * w_prefix + out_local * w_local) / torch.where(total > 0, total, torch.ones_like(total))
    return out.to(query.dtype).reshape(1, heads, n, dim)
