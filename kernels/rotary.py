"""Rotary position embedding of queries and keys in one Triton kernel (one program per token).

Each token's angles come from its own position id, so packed rows that restart positions need no
table: the kernel reads `positions` [n], the module's `inv_freq` [D/2] and `attention_scaling`. It
rounds where transformers' rotary module and `apply_rotary` round: the cos/sin tables to the model's
dtype, each product, then the sum. Reference: `reference.rotary_embedding`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import check_last_dim_contiguous, check_tensors, on_device
from .rounding import round_to


@triton.jit
def _rotate_heads(
    X, OUT, token, head_stride, token_stride, out_head_stride, out_token_stride, n_heads, half, cos, sin,
    BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
):
    heads = tl.arange(0, BLOCK_H)
    dims = tl.arange(0, BLOCK_HALF)
    valid = (heads[:, None] < n_heads) & (dims[None, :] < half)
    first = X + token * token_stride + heads[:, None] * head_stride + dims[None, :]
    x1 = tl.load(first, mask=valid, other=0.0)
    x2 = tl.load(first + half, mask=valid, other=0.0)
    dtype = x1.dtype
    x1, x2 = x1.to(tl.float32), x2.to(tl.float32)
    cos, sin = cos[None, :], sin[None, :]
    # x * cos + rotate_half(x) * sin, rounding each product and the sum to x's dtype as torch does.
    low = round_to(x1 * cos, dtype).to(tl.float32) - round_to(x2 * sin, dtype).to(tl.float32)
    high = round_to(x2 * cos, dtype).to(tl.float32) + round_to(x1 * sin, dtype).to(tl.float32)
    out = OUT + token * out_token_stride + heads[:, None] * out_head_stride + dims[None, :]
    tl.store(out, round_to(low, dtype), mask=valid)
    tl.store(out + half, round_to(high, dtype), mask=valid)


@triton.jit
def _rotary_kernel(
    Q, K, QO, KO, POSITIONS, INV_FREQ,
    q_head_stride, q_token_stride, k_head_stride, k_token_stride,
    qo_head_stride, qo_token_stride, ko_head_stride, ko_token_stride,
    n_q_heads, n_k_heads, half, attention_scaling,
    BLOCK_QH: tl.constexpr, BLOCK_KH: tl.constexpr, BLOCK_HALF: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    dims = tl.arange(0, BLOCK_HALF)
    position = tl.load(POSITIONS + token).to(tl.float32)
    inv_freq = tl.load(INV_FREQ + dims, mask=dims < half, other=0.0).to(tl.float32)
    angle = position * inv_freq
    dtype = Q.dtype.element_ty
    cos = round_to(tl.cos(angle) * attention_scaling, dtype).to(tl.float32)
    sin = round_to(tl.sin(angle) * attention_scaling, dtype).to(tl.float32)
    _rotate_heads(Q, QO, token, q_head_stride, q_token_stride, qo_head_stride, qo_token_stride, n_q_heads, half,
                  cos, sin, BLOCK_QH, BLOCK_HALF)
    _rotate_heads(K, KO, token, k_head_stride, k_token_stride, ko_head_stride, ko_token_stride, n_k_heads, half,
                  cos, sin, BLOCK_KH, BLOCK_HALF)


def _check(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or q.shape[0] != 1 or k.shape[0] != 1:
        raise ValueError(f"rotary_embedding: q and k must be [1, heads, n, head_dim], got {tuple(q.shape)} and {tuple(k.shape)}")
    n, dim = q.shape[2], q.shape[3]
    if k.shape[2] != n or k.shape[3] != dim:
        raise ValueError(f"rotary_embedding: k {tuple(k.shape)} must have q's tokens and head_dim {(n, dim)}")
    if q.dtype != k.dtype:
        raise ValueError(f"rotary_embedding: q is {q.dtype} but k is {k.dtype}")
    if positions.shape != (n,) or positions.is_floating_point():
        raise ValueError(f"rotary_embedding: positions must be [{n}] integers, got {tuple(positions.shape)} {positions.dtype}")
    if dim % 2 or inv_freq.shape != (dim // 2,):
        raise ValueError(
            f"rotary_embedding: inv_freq {tuple(inv_freq.shape)} must hold head_dim / 2 frequencies for head_dim {dim}"
            " (partial rotary embeddings are not supported)"
        )


def rotary_embedding(
    q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor, attention_scaling: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [1, H, n, D], k [1, Hkv, n, D] rotated for token positions [n]; new tensors, q's and k's layouts."""
    _check(q, k, positions, inv_freq)
    check_tensors("rotary_embedding", _rotary_kernel, q=q, k=k, positions=positions, inv_freq=inv_freq)
    check_last_dim_contiguous("rotary_embedding", q=q, k=k)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    n, half = q.shape[2], q.shape[3] // 2
    if n == 0:
        return q_out, k_out
    positions, inv_freq = positions.contiguous(), inv_freq.contiguous()
    with on_device(q.device):
        _rotary_kernel[(n,)](
            q, k, q_out, k_out, positions, inv_freq,
            q.stride(1), q.stride(2), k.stride(1), k.stride(2),
            q_out.stride(1), q_out.stride(2), k_out.stride(1), k_out.stride(2),
            q.shape[1], k.shape[1], half, float(attention_scaling),
            BLOCK_QH=triton.next_power_of_2(q.shape[1]),
            BLOCK_KH=triton.next_power_of_2(k.shape[1]),
            BLOCK_HALF=triton.next_power_of_2(half),
            num_warps=4,
            enable_fp_fusion=False,  # torch rounds each product and the sum on its own
        )
    return q_out, k_out
