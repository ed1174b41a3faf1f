"""Tree branch attention: packed queries over one shared prefix and their own tree, in one Triton kernel.

One program takes a block of folded query rows of one key/value head — the query heads sharing that
head folded into the query axis, row g * N + i being group head g at token i, as the CPU path folds
them — so each prefix key block is read once for all the query heads of its group. It first runs over
the whole prefix unmasked, then over each of the rows' key spans (`tree_spans.spans_from_tree`: the
request's context and the chains on the path to the root) with an online softmax, which is the
log-sum-exp merge of the two parts done as it goes. No N x N mask exists anywhere.

A key in several spans of one query counts once: slot s skips keys an earlier slot of that query
already covered. A query that sees no key at all gets zeros. Reference: `reference.tree_attention`.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .launch import check_last_dim_contiguous, check_tensors, interpreted, on_device
from .reference import tree_attention as tree_attention_reference
from .reference import visibility_from_spans
from .rounding import round_to
from .tree_spans import spans_from_tree

__all__ = ["spans_from_tree", "tree_attention", "tree_attention_reference", "visibility_from_spans"]


@triton.jit
def _attend_block(
    q, acc, m_i, l_i, K_BASE, V_BASE, k_stride, v_stride, cols, col_valid, visible, dims, dim_valid, qk_scale,
    PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):
    """One key block folded into the running softmax (base-2 exponent; `visible` [BLOCK_M, BLOCK_N])."""
    k = tl.load(K_BASE + cols[None, :] * k_stride + dims[:, None], mask=col_valid[None, :] & dim_valid[:, None], other=0.0)
    v = tl.load(V_BASE + cols[:, None] * v_stride + dims[None, :], mask=col_valid[:, None] & dim_valid[None, :], other=0.0)
    if WIDEN:
        k = k.to(tl.float32)
    scores = tl.dot(q, k, input_precision=PRECISION) * qk_scale
    scores = tl.where(visible, scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    # Rows that have seen nothing yet keep m = -inf; shift them by 0 so exp2 gives 0, never NaN.
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    p = tl.math.exp2(scores - shift[:, None])
    alpha = tl.math.exp2(m_i - shift)
    l_i = l_i * alpha + tl.sum(p, 1)
    # The probabilities meet the values in the values' dtype, as in flash attention.
    p = p.to(v.dtype)
    if WIDEN:
        p, v = p.to(tl.float32), v.to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
    return acc, m_new, l_i


@triton.jit
def _tree_attention_kernel(
    Q, K, V, PK, PV, SPANS, OUT,
    q_head_stride, q_token_stride, k_head_stride, k_token_stride, v_head_stride, v_token_stride,
    pk_head_stride, pk_token_stride, pv_head_stride, pv_token_stride, o_head_stride, o_token_stride,
    n_queries, groups, local_len, prefix_len, n_slots, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr, WIDEN: tl.constexpr,
):
    kv_head = tl.program_id(0).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_valid = rows < groups * n_queries
    token = (rows % n_queries).to(tl.int64)
    q_head = kv_head * groups + rows // n_queries
    dims = tl.arange(0, BLOCK_D)
    dim_valid = dims < HEAD_DIM
    q = tl.load(Q + q_head[:, None] * q_head_stride + token[:, None] * q_token_stride + dims[None, :],
                mask=row_valid[:, None] & dim_valid[None, :], other=0.0)
    if WIDEN:
        q = q.to(tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    offsets = tl.arange(0, BLOCK_N)

    # The shared prefix: every query sees every key.
    pk_base = PK + kv_head * pk_head_stride
    pv_base = PV + kv_head * pv_head_stride
    for start in range(0, prefix_len, BLOCK_N):
        cols = start + offsets
        col_valid = cols < prefix_len
        visible = row_valid[:, None] & col_valid[None, :]
        acc, m_i, l_i = _attend_block(q, acc, m_i, l_i, pk_base, pv_base, pk_token_stride, pv_token_stride,
                                      cols, col_valid, visible, dims, dim_valid, qk_scale, PRECISION, WIDEN)

    # The local keys, one span slot at a time, over the key blocks some row of this block needs.
    k_base = K + kv_head * k_head_stride
    v_base = V + kv_head * v_head_stride
    span_row = SPANS + token * (n_slots * 2)
    for slot in range(n_slots):
        lows = tl.load(span_row + slot * 2, mask=row_valid, other=0)
        highs = tl.load(span_row + slot * 2 + 1, mask=row_valid, other=0)
        used = highs > lows
        first = tl.min(tl.where(used, lows, local_len), 0)
        last = tl.max(tl.where(used, highs, 0), 0)
        for start in range((first // BLOCK_N) * BLOCK_N, last, BLOCK_N):
            cols = start + offsets
            col_valid = cols < local_len
            visible = (cols[None, :] >= lows[:, None]) & (cols[None, :] < highs[:, None]) & col_valid[None, :]
            for earlier in range(0, slot):
                seen_low = tl.load(span_row + earlier * 2, mask=row_valid, other=0)
                seen_high = tl.load(span_row + earlier * 2 + 1, mask=row_valid, other=0)
                visible = visible & ((cols[None, :] < seen_low[:, None]) | (cols[None, :] >= seen_high[:, None]))
            acc, m_i, l_i = _attend_block(q, acc, m_i, l_i, k_base, v_base, k_token_stride, v_token_stride,
                                          cols, col_valid, visible, dims, dim_valid, qk_scale, PRECISION, WIDEN)

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(OUT + q_head[:, None] * o_head_stride + token[:, None] * o_token_stride + dims[None, :],
             round_to(out, OUT.dtype.element_ty), mask=row_valid[:, None] & dim_valid[None, :])


def _check(query, key, value, prefix_key, prefix_value, spans) -> None:
    tensors = {"query": query, "key": key, "value": value, "prefix_key": prefix_key, "prefix_value": prefix_value}
    for label, tensor in tensors.items():
        if tensor.dim() != 4 or tensor.shape[0] != 1:
            raise ValueError(f"tree_attention: {label} must be [1, heads, tokens, head_dim], got {tuple(tensor.shape)}")
        if tensor.dtype != query.dtype:
            raise ValueError(f"tree_attention: {label} is {tensor.dtype}, query is {query.dtype}")
    _, heads, n, dim = query.shape
    kv_heads = key.shape[1]
    if heads % kv_heads:
        raise ValueError(f"tree_attention: {heads} query heads do not split into groups over {kv_heads} key/value heads")
    shapes_fit = (
        value.shape == key.shape
        and prefix_value.shape == prefix_key.shape
        and key.shape[3] == prefix_key.shape[3] == dim
        and prefix_key.shape[1] == kv_heads
    )
    if not shapes_fit:
        raise ValueError(
            f"tree_attention: query {tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}, "
            f"prefix_key {tuple(prefix_key.shape)} and prefix_value {tuple(prefix_value.shape)} do not fit together: "
            "keys and values must match, and share query's head_dim and key's key/value heads"
        )
    if spans.dim() != 3 or spans.shape[0] != n or spans.shape[2] != 2 or spans.is_floating_point():
        raise ValueError(f"tree_attention: spans must be [{n}, slots, 2] integers, got {tuple(spans.shape)} {spans.dtype}")


def _blocks(head_dim: int, element_size: int) -> tuple[int, int, int]:
    """(BLOCK_D, BLOCK_M, BLOCK_N), sized so two stages of key and value blocks fit in shared memory on
    an A100 as on an H100; tl.dot needs every side >= 16."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    block_m = 64 if element_size <= 2 else 32
    block_n = 64 if block_d * element_size <= 256 else 32
    return block_d, block_m, block_n


def tree_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    prefix_key: torch.Tensor,
    prefix_value: torch.Tensor,
    spans: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """query [1, Hq, N, D]; key/value [1, Hkv, L, D]; prefix_key/value [1, Hkv, P, D]; spans [N, K, 2].

    Query i sees every prefix key and the local keys j with `spans[i, s, 0] <= j < spans[i, s, 1]`
    for some s. Returns [1, Hq, N, D] in query's dtype.
    """
    _check(query, key, value, prefix_key, prefix_value, spans)
    check_tensors("tree_attention", _tree_attention_kernel, query=query, key=key, value=value,
                  prefix_key=prefix_key, prefix_value=prefix_value, spans=spans)
    check_last_dim_contiguous("tree_attention", query=query, key=key, value=value,
                              prefix_key=prefix_key, prefix_value=prefix_value)
    _, heads, n, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    out = torch.empty_like(query)
    if n == 0:
        return out
    spans = spans.contiguous()
    block_d, block_m, block_n = _blocks(dim, query.element_size())
    # Triton's interpreter cannot multiply bf16 (it holds bf16 as raw bit patterns), so there the
    # operands are widened to fp32 first; a GPU multiplies them as they are.
    widen = interpreted(_tree_attention_kernel) and query.dtype == torch.bfloat16
    # fp32 operands keep full fp32 products: Triton's default on NVIDIA GPUs would round them to TF32.
    precision = "ieee" if query.dtype == torch.float32 or widen else "tf32"
    with on_device(query.device):
        _tree_attention_kernel[(kv_heads, triton.cdiv(groups * n, block_m))](
            query, key, value, prefix_key, prefix_value, spans, out,
            query.stride(1), query.stride(2), key.stride(1), key.stride(2), value.stride(1), value.stride(2),
            prefix_key.stride(1), prefix_key.stride(2), prefix_value.stride(1), prefix_value.stride(2),
            out.stride(1), out.stride(2),
            n, groups, key.shape[2], prefix_key.shape[2], spans.shape[1], float(scale) * math.log2(math.e),
            HEAD_DIM=dim, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n, PRECISION=precision, WIDEN=widen,
            num_warps=4, num_stages=2, enable_fp_fusion=True,
        )
    return out
