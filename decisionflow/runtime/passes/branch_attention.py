"""Branch attention: many short packed branches attend to one shared prefix that is never copied.

Every query of a packed pass sees the whole shared prefix (the rubric's cached prompt) and, through a tree
mask, only its own request's context and ancestors among the packed tokens. Attention over a union
of key sets splits exactly into one attention per set, merged by their log-sum-exps:

    out = (e^{l1} o1 + e^{l2} o2) / (e^{l1} + e^{l2})

so the prefix part runs unmasked (and, with grouped-query attention, with the query heads of one
key/value head folded into the query axis instead of repeating the keys), and only the short local
part needs the mask. The prefix keys and values stay where its prefill left them.

A long local part whose tokens see few of its keys (independent questions: a thousand row tokens, each
seeing the input and its own row) is attended in query chunks, each against the prefix and the local keys
some query of it sees (`chunk_local`), in one call per chunk: the same sums, without the masked-out
products that dominated such a pass, and without a merge (which, over every query of such a pass, cost
more than the prefix's own attention).

On CUDA the torch path runs `padded_branch_attention` instead: every request of a pass is one row of
a padded batch for torch's `scaled_dot_product_attention` (its fused kernels take the additive mask),
with the query heads of a key/value head folded into the query axis as above. It needs no
log-sum-exp, so it runs on torch's public attention; the CPU path stays the exact one above.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

# torch's CPU flash attention returns the log-sum-exp the merge needs; it is a private op, so its
# presence is checked once and the plain path below stands in where it is missing.
_CPU_FLASH = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def attention_path(device: torch.device) -> str:
    """Which implementation the torch path attends with on `device`, as stats report it: `sdpa` on CUDA
    (`padded_branch_attention`), else what `_attend` uses."""
    if device.type == "cuda":
        return "sdpa"
    return "cpu-flash" if device.type == "cpu" and _CPU_FLASH is not None else "reference"


def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float):
    """Attention with its log-sum-exp. query [1, Hkv, Q, D]; key/value [1, Hkv, K, D]; mask [1, 1, Q, K] additive."""
    if query.device.type == "cpu" and _CPU_FLASH is not None:
        out, lse = _CPU_FLASH(query, key, value, 0.0, False, attn_mask=mask, scale=scale)
        return out, lse.float()
    return attend_reference(query, key, value, mask, scale)


def attend_reference(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scale: float):
    """The same in plain fp32 matmuls: the reference any fused path is checked against."""
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores + mask.float()
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.softmax(scores, dim=-1), value.float()).to(query.dtype)
    return out, lse


def fold_mask(visible: torch.Tensor, groups: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive local mask for queries folded per key/value head: [1, 1, groups * n, L].

    `visible` [n, L] bool says which local keys each query may see. Built once per pass and shared by
    every layer (the folded query axis repeats the n queries once per query head of a group).
    """
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask.repeat(groups, 1)[None, None]


LOCAL_CHUNK = 128
"""Queries per chunk of a chunked local part: a few independent rows, against the input and those rows."""
CHUNKED_BELOW = 0.5
"""The local part is chunked when the chunks' query-key products are below this share of the dense ones."""


MAX_RUNS = 8
"""A chunk whose keys fall in at most this many contiguous runs takes them as slices (a row's keys: the
input's, then the rows its queries belong to); one scattered wider is gathered key by key."""


@dataclass(frozen=True)
class LocalChunk:
    """Queries `start..stop-1` of a local part, attending only to the local keys `keys` under `mask`."""

    start: int
    stop: int
    keys: torch.Tensor
    """Indexes of the local keys some query of the chunk sees."""
    mask: torch.Tensor
    """The chunk's folded additive mask over those keys (`fold_mask`)."""
    runs: tuple[tuple[int, int], ...] | None = None
    """`keys` as contiguous (start, stop) ranges, in order, where they make at most `MAX_RUNS` of them."""
    prefixed: dict[int, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)
    """Per prefix length P: `mask` with P visible columns in front (`behind`), kept for every layer."""

    def behind(self, prefix_length: int) -> torch.Tensor:
        """The folded additive mask of this chunk over [prefix keys; its local keys]."""
        if prefix_length not in self.prefixed:
            self.prefixed[prefix_length] = torch.nn.functional.pad(self.mask, (prefix_length, 0))
        return self.prefixed[prefix_length]

    def gather(self, prefix: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """[prefix; the local keys (or values) this chunk sees] along the token axis: [1, Hkv, P + len(keys), D]."""
        if self.runs is not None:
            return torch.cat([prefix, *(local[:, :, begin:end] for begin, end in self.runs)], dim=2)
        return torch.cat([prefix, local.index_select(2, self.keys)], dim=2)


def contiguous_runs(indexes: list[int]) -> tuple[tuple[int, int], ...] | None:
    """Sorted `indexes` as (start, stop) ranges, or None when they make more than `MAX_RUNS`."""
    runs: list[tuple[int, int]] = []
    for index in indexes:
        if runs and runs[-1][1] == index:
            runs[-1] = (runs[-1][0], index + 1)
        else:
            if len(runs) == MAX_RUNS:
                return None
            runs.append((index, index + 1))
    return tuple(runs)


def chunk_local(visible: torch.Tensor, groups: int, dtype: torch.dtype, size: int = LOCAL_CHUNK) -> list[LocalChunk] | None:
    """The local part as query chunks against the keys each sees, or None when that saves too little
    (`CHUNKED_BELOW`) to pay for the extra calls: then the dense folded mask is the faster path.
    `visible` [n, L] bool; built once per pass, on `visible`'s device, and shared by every layer."""
    n, width = visible.shape
    if n <= size:
        return None
    chunks: list[LocalChunk] = []
    products = 0
    for start in range(0, n, size):
        stop = min(n, start + size)
        seen = visible[start:stop]
        keys = seen.any(0).nonzero().flatten()
        products += (stop - start) * len(keys)
        chunks.append(LocalChunk(start, stop, keys, fold_mask(seen.index_select(1, keys), groups, dtype),
                                 contiguous_runs(keys.tolist())))
    return chunks if products < CHUNKED_BELOW * n * width else None


def local_attention(visible: torch.Tensor, groups: int, dtype: torch.dtype) -> torch.Tensor | list[LocalChunk]:
    """What `branch_attention` takes for a local part whose tokens see `visible` [n, L]: its chunks where
    chunking saves enough (`chunk_local`), else the dense folded mask."""
    return chunk_local(visible, groups, dtype) or fold_mask(visible, groups, dtype)


def branch_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    folded_mask: torch.Tensor | list[LocalChunk],
    prefix_key: torch.Tensor,
    prefix_value: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """query [1, Hq, N, D]; key/value [1, Hkv, L, D] (contexts + packed tokens); `folded_mask` from
    `fold_mask`, or the chunks of `chunk_local`; prefix_key/value [1, Hkv, P, D] seen by every query.
    Returns [1, Hq, N, D]."""
    _, heads, n, dim = query.shape
    kv_heads = key.shape[1]
    if isinstance(folded_mask, list):
        return _chunked(query, key, value, folded_mask, prefix_key, prefix_value, scale)
    folded = query.reshape(1, kv_heads, (heads // kv_heads) * n, dim)
    out_prefix, lse_prefix = _attend(folded, prefix_key, prefix_value, None, scale)
    out_local, lse_local = _attend(folded, key, value, folded_mask, scale)
    top = torch.maximum(lse_prefix, lse_local)
    w_prefix = torch.exp(lse_prefix - top).unsqueeze(-1)
    w_local = torch.exp(lse_local - top).unsqueeze(-1)
    out = (out_prefix.float() * w_prefix + out_local.float() * w_local) / (w_prefix + w_local)
    return out.to(query.dtype).reshape(1, heads, n, dim)


def _chunked(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, chunks: list[LocalChunk],
             prefix_key: torch.Tensor, prefix_value: torch.Tensor, scale: float) -> torch.Tensor:
    """Branch attention chunk by chunk, each chunk's queries against the prefix and the local keys it sees in
    one call, laid out as `_attend` lays out folded queries (query head g of a key/value head's group, token
    i: row g * width + i). Returns [1, Hq, N, D]."""
    _, heads, n, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    out = query.new_empty(1, kv_heads, groups, n, dim)
    for chunk in chunks:
        width = chunk.stop - chunk.start
        folded = query[:, :, chunk.start : chunk.stop].reshape(1, kv_heads, groups * width, dim)
        part, _ = _attend(folded, chunk.gather(prefix_key, key), chunk.gather(prefix_value, value),
                          chunk.behind(prefix_key.shape[2]), scale)
        out[:, :, :, chunk.start : chunk.stop] = part.view(1, kv_heads, groups, width, dim)
    return out.view(1, heads, n, dim)


def padded_branch_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    prefix: tuple[torch.Tensor, torch.Tensor],
    context: tuple[torch.Tensor, torch.Tensor] | None,
    mask: torch.Tensor,
    scale: float,
    *,
    rows: torch.Tensor,
    keys: torch.Tensor,
    unpad: torch.Tensor,
    context_rows: torch.Tensor | None,
    shape: tuple[int, int, int, int],
) -> torch.Tensor:
    """Branch attention of a whole pass as one padded batch of `scaled_dot_product_attention`.

    query [1, Hq, N, D] and key/value [1, Hkv, N, D]: the pass's tokens; prefix: the cached prefix's keys and
    values [1, Hkv, P, D], seen by every query; context: every request's context keys and values side
    by side [1, Hkv, C, D] (None when no request has one). `shape` is (R, W, CW, LW): R requests, each
    padded to W queries, CW context keys and LW local keys. `rows` [R * W] and `keys` [R * LW] pick
    each row's tokens from the pass, `context_rows` [R * CW] its context from `context`, and `unpad`
    [N] each token's row back. `mask` [R, 1, groups * W, P + CW + LW] is additive, in the query's
    dtype, over the folded query axis (row g * W + i: query head g of a group, token i). Padding
    queries and keys hold any real token: the mask hides the keys, and padding rows are dropped.
    Returns [1, Hq, N, D].
    """
    count, width, context_width, local_width = shape
    _, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    groups = heads // kv_heads
    folded = (query[0].index_select(1, rows).view(kv_heads, groups, count, width, dim)
              .permute(2, 0, 1, 3, 4).reshape(count, kv_heads, groups * width, dim))

    def padded(tensor: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
        return tensor[0].index_select(1, index).view(kv_heads, count, size, dim).transpose(0, 1)

    def stacked(which: int, local: torch.Tensor) -> torch.Tensor:
        parts = [prefix[which].expand(count, -1, -1, -1)]
        if context is not None and context_rows is not None:
            parts.append(padded(context[which], context_rows, context_width))
        parts.append(padded(local, keys, local_width))
        return torch.cat(parts, dim=2)

    out = torch.nn.functional.scaled_dot_product_attention(
        folded, stacked(0, key), stacked(1, value), attn_mask=mask, scale=scale
    )
    out = out.view(count, kv_heads, groups, width, dim).permute(1, 2, 0, 3, 4).reshape(heads, count * width, dim)
    return out.index_select(1, unpad)[None]
