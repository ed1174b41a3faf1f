"""The model backend: packed passes of many short branches over one shared, never-copied prefix.

A pass packs many short branches (a request's new text, each field's row) into one sequence after
the rubric's cached prefix. Each token sees the whole prefix, its own request's context and its own
ancestors among the packed tokens (a tree described by parent pointers); its position id continues
from where its parent ends. The prefix's keys and values are computed once and read by every pass
through branch attention; logits are projected only at the requested read positions.

One pass runs as three named phases: `lay_out` (positions, and per request its block of tokens with
the tree's visibility), the decoder stack (`forward.run_layers`), and `keep_tokens` (the tokens a
request keeps join its context). A token never sees another request's keys, so the local attention
is computed block by block: its cost grows with the sum of the requests' squared sizes, not with the
square of the whole pass. Three attention paths serve a pass:

- `blockwise` (torch off CUDA): request by request, the prefix and the local part merged by their
  log-sum-exps (`branch_attention`), with an additive mask built on the host from the tree.
- `sdpa` (torch on CUDA): every request of the pass as one padded batch of
  `scaled_dot_product_attention`, its keys the prefix, the request's context and its own tokens, its
  mask built on the device from the tree's key spans (no Python loop over requests per layer).
- `fused` (Triton): the tree kernel over every request's context and tokens, described by key spans.

Whatever the path, the small integers a pass needs on the device (token ids, positions, key spans,
padding indexes, kept tokens, read positions) travel in one host-to-device copy (`_upload`), and
nothing is read back: the readout fetches the log-probs it needs once, after the pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple, Sequence

import torch

from ...compiler.tree import tree_chains, tree_depths
from .branch_attention import attention_path, branch_attention, local_attention, padded_branch_attention
from .forward import KV, Attend, Capture, DecoderParts, Pool, causal_attend, logprobs_at, run_layers
from .ops import TritonOps, choose_ops


@dataclass
class RequestContext:
    """Tokens a request has added after the prefix so far (its input, then written answers)."""

    kv: KV | None = None
    length: int = 0
    tokens: list[int] = field(default_factory=list)
    """The ids of those tokens, where a backend needs them (the plain-forward reference re-reads them)."""

    def extend(self, new: KV) -> None:
        if self.kv is None:
            self.kv = new
        else:
            self.kv = [(torch.cat([k, nk], dim=-2), torch.cat([v, nv], dim=-2)) for (k, v), (nk, nv) in zip(self.kv, new)]
        self.length += new[0][0].shape[-2]


@dataclass(frozen=True)
class PrefixCache:
    kv: KV
    length: int
    tokens: tuple[int, ...] = ()
    """The prefix's token ids (the plain-forward reference re-reads them; a prefix loaded from disk has them too)."""


class PassOutput(NamedTuple):
    logprobs: torch.Tensor
    """[reads, vocab]: log-probs over the vocabulary at the pass's read positions."""
    features: torch.Tensor | None
    """The hidden states fitted heads read (None when no layer was asked for)."""
    gathered: torch.Tensor | None
    """The log-probs at the (row, token) pairs asked for, still on the device (None when none were)."""
    means: torch.Tensor | None = None
    """[groups, hidden * pool layers] float32: the pool's rows averaged per group, still on the device
    (None when no pool was asked for)."""


@dataclass
class PackedPass:
    """Tokens of one forward pass. A parent of -1 attaches a token to the end of its request's context."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    keep: list[bool] = field(default_factory=list)
    """Whether a token's keys and values join its request's context after the pass."""
    sees: list[int | None] = field(default_factory=list)
    """For a root token: how many of its request's context tokens it sees (None: all of them). A
    branch that replaces an earlier answer sees the context up to where that answer began."""
    _shared: dict[tuple[int, int, int, int | None], int] = field(default_factory=dict, repr=False)

    def add(
        self, token: int, *, parent: int, request: int, keep: bool = False, share: bool = False, sees: int | None = None
    ) -> int:
        """Append a token and return its index. With `share`, a token already added under the same
        parent is reused: same token, same context, so the same keys, values and logits (rows of
        different fields all start with the same indentation and quote)."""
        key = (request, parent, token, sees if parent < 0 else None)
        if share and key in self._shared:
            return self._shared[key]
        if share:
            self._shared[key] = len(self.tokens)
        self.tokens.append(token)
        self.parents.append(parent)
        self.requests.append(request)
        self.keep.append(keep)
        self.sees.append(sees if parent < 0 else None)
        return len(self.tokens) - 1

    def context_seen(self, index: int, contexts: Sequence[RequestContext]) -> int:
        """How many context tokens root token `index` sees."""
        sees = self.sees[index]
        return contexts[self.requests[index]].length if sees is None else sees

    def __len__(self) -> int:
        return len(self.tokens)


def tree_visibility(
    parents: Sequence[int], roots_see: Sequence[tuple[int, int]] | None = None, width: int = 0
) -> torch.Tensor:
    """[n, width + n] bool: may token i attend to key j of [earlier keys (width), the n tokens]?

    A token sees itself, its ancestors and, through its tree's root, the earlier keys `roots_see[i]`
    (a `[start, stop)` span) of the root token i it descends from. Built one chain at a time.
    """
    n = len(parents)
    visible = torch.zeros(n, width + n, dtype=torch.bool)
    for start, end, parent in tree_chains(parents):
        if parent >= 0:
            visible[start:end] = visible[parent]
        elif roots_see is not None:
            low, high = roots_see[start]
            visible[start:end, low:high] = True
        visible[start:end, width + start : width + end] |= torch.ones(end - start, end - start, dtype=torch.bool).tril_()
    return visible


@dataclass(frozen=True)
class RequestBlock:
    """One request's share of a pass: its tokens are `start..stop-1` of the pass, contiguous."""

    request: int
    start: int
    stop: int
    visible: torch.Tensor | None
    """[tokens, context + tokens] bool: its whole context, then the tree among its own tokens (None
    when the layout was made without masks, for the paths that read key spans instead)."""
    parents: list[int]
    """Each token's parent within the block (-1: it hangs off the request's context)."""
    roots_see: list[tuple[int, int]]
    """Per token, the `[0, seen)` span of the request's context its root sees."""


@dataclass(frozen=True)
class PassLayout:
    positions: list[int]
    blocks: list[RequestBlock]
    """Per request present in the pass; a token sees only its own request's keys (and the prefix)."""


DECODER_PATH = "decoder"
"""The engine's own walk over the layers (this module): exact for the Llama, Mistral, Qwen2 and Qwen3 families."""


class DecoderBackend:
    """Runs packed passes on a transformers causal LM (Llama, Qwen2, Qwen3 families) or the engine's own
    decoder, walking the layers itself (`forward.run_layers`).

    The model is only read: its modules are called, never replaced or reconfigured.
    """

    path = DECODER_PATH

    def __init__(self, model: Any, *, kernels: str = "torch"):
        self.model = model
        self.parts = DecoderParts.of(model)
        self.layer_count = len(self.parts.layers)
        self.config = model.config
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 0) or 0)
        self.ops = choose_ops(kernels, model, self.device)
        self.attention = "fused" if isinstance(self.ops, TritonOps) else "sdpa" if self.device.type == "cuda" else "blockwise"
        """Which attention path passes take: `fused`, `sdpa` or `blockwise` (see the module's docstring)."""
        self.kernels = "triton" if isinstance(self.ops, TritonOps) else "torch+" + attention_path(self.device)

    @torch.inference_mode()
    def prefill_prefix(self, tokens: list[int]) -> PrefixCache:
        ids = torch.tensor(tokens, device=self.device)
        positions = torch.arange(len(tokens), device=self.device)
        _, kv = run_layers(self.parts, ids, positions, lambda _layer, q, k, v, scale: causal_attend(q, k, v, scale), self.ops)
        return PrefixCache(kv=kv, length=len(tokens), tokens=tuple(tokens))

    @torch.inference_mode()
    def forward_plain(self, tokens: list[int]) -> torch.Tensor:
        """The model's own forward over `tokens`, last position's log-probs: the independent reference
        every packed pass is checked against."""
        ids = torch.tensor([tokens], device=self.device)
        out = self.model(input_ids=ids, logits_to_keep=1)
        return torch.log_softmax(out.logits[0, -1].float(), dim=-1)

    @torch.inference_mode()
    def run_pass(
        self,
        prefix: PrefixCache,
        contexts: list[RequestContext],
        packed: PackedPass,
        read_positions: list[int],
    ) -> torch.Tensor:
        """Run one packed pass; extend each request's context with its kept tokens.

        Returns log-probs over the vocabulary at `read_positions`: [len(read_positions), vocab].
        """
        return self.run_pass_with_features(prefix, contexts, packed, read_positions).logprobs

    @torch.inference_mode()
    def run_pass_with_features(
        self,
        prefix: PrefixCache,
        contexts: list[RequestContext],
        packed: PackedPass,
        read_positions: list[int],
        feature_layers: Sequence[int] = (),
        feature_positions: Sequence[int] = (),
        gather: tuple[Sequence[int], Sequence[int]] | None = None,
        pool: Pool | None = None,
    ) -> PassOutput:
        """`run_pass`, also returning the hidden states of `feature_layers` at `feature_positions` of the
        pass ([len(feature_positions), hidden * layers] float32, see `forward.Capture`; None when no
        layer is asked for): the features fitted heads read, from the same pass. `gather`: (rows,
        tokens) of the log-probs the readout needs (`readout.gather_index`), gathered on the device; its
        index travels in the pass's one upload. `pool`: rows averaged per group inside the pass
        (`PassOutput.means`)."""
        path = self.attention
        layout = self.lay_out(prefix, contexts, packed, visibility=path == "blockwise")
        # Everything the pass needs on the device goes in one host tensor: one copy, made up front.
        sections: dict[str, list[int] | torch.Tensor] = {
            "ids": packed.tokens, "positions": layout.positions, "reads": list(read_positions),
            "features": list(feature_positions) if feature_layers and feature_positions else [],
            "gather": torch.tensor([list(gather[0]), list(gather[1])]) if gather else torch.empty(2, 0),
            "pool_rows": list(pool.rows) if pool is not None else [],
            "pool_sizes": list(pool.sizes) if pool is not None else [],
        }
        kept_counts = self._kept(contexts, packed, sections)
        padding = (0, 0, 0, 0)
        if path == "fused":
            sections["spans"] = self._fused_spans(contexts, packed)
        elif path == "sdpa":
            padding = self._padded_sections(prefix, contexts, layout, sections)
        on_device = self._upload(sections)
        if path == "fused":
            attend = self._fused_attention(prefix, contexts, on_device)
        elif path == "sdpa":
            attend = self._padded_attention(prefix, contexts, padding, on_device)
        else:
            attend = self._blockwise_attention(prefix, contexts, layout)
        capture = None
        pooled = pool._replace(rows=on_device["pool_rows"], sizes=on_device["pool_sizes"]) if pool is not None else None
        if len(on_device["features"]) or pooled is not None:
            capture = Capture(feature_layers, len(self.parts.layers), on_device["features"],
                              partial(self.ops.norm, self.parts.norm), pooled)
        hidden, new_kv = run_layers(self.parts, on_device["ids"], on_device["positions"], attend, self.ops, capture)
        logprobs = logprobs_at(self.parts, hidden, on_device["reads"], self.ops)
        self.keep_tokens(contexts, new_kv, on_device["kept"], kept_counts)
        gathered = logprobs[on_device["gather"][0], on_device["gather"][1]] if gather else None
        if capture is None:
            return PassOutput(logprobs, None, gathered)
        return PassOutput(logprobs, capture.features(), gathered, capture.pooled_means())

    def _upload(self, sections: dict[str, list[int] | torch.Tensor]) -> dict[str, torch.Tensor]:
        """The pass's integers on the device, by section (a list, or a host tensor keeping its shape):
        one int64 host tensor, one copy (pinned and asynchronous on CUDA, so the host goes on queueing
        the pass without waiting for the device), then views of it."""
        pieces = [torch.as_tensor(values, dtype=torch.int64).reshape(-1) for values in sections.values()]
        host = torch.empty(sum(len(piece) for piece in pieces), dtype=torch.int64, pin_memory=self.device.type == "cuda")
        torch.cat(pieces, out=host)  # straight into the (pinned) buffer: no second host copy
        device = host.to(self.device, non_blocking=True)
        views: dict[str, torch.Tensor] = {}
        start = 0
        for (name, values), piece in zip(sections.items(), pieces):
            view = device[start : start + len(piece)]
            views[name] = view.view(values.shape) if isinstance(values, torch.Tensor) else view
            start += len(piece)
        return views

    @staticmethod
    def _kept(contexts: list[RequestContext], packed: PackedPass, sections: dict[str, list[int] | torch.Tensor]) -> list[int]:
        """The tokens each request keeps, grouped by request (a section of the upload); their counts."""
        by_request: list[list[int]] = [[] for _ in contexts]
        for index, (keep, request) in enumerate(zip(packed.keep, packed.requests)):
            if keep:
                by_request[request].append(index)
        sections["kept"] = [index for kept in by_request for index in kept]
        return [len(kept) for kept in by_request]

    @staticmethod
    def _fused_spans(contexts: list[RequestContext], packed: PackedPass) -> torch.Tensor:
        """The tree kernel's key spans (a host tensor) over [every request's context, the pass's tokens]."""
        from decisionflow_kernels.tree_spans import spans_from_tree

        starts = [0]
        for context in contexts:
            starts.append(starts[-1] + context.length)
        roots_see = [(starts[r], starts[r] + packed.context_seen(i, contexts)) for i, r in enumerate(packed.requests)]
        return spans_from_tree(packed.parents, roots_see, starts[-1])

    @staticmethod
    def _padded_sections(
        prefix: PrefixCache, contexts: list[RequestContext], layout: PassLayout, sections: dict[str, list[int] | torch.Tensor]
    ) -> tuple[int, int, int, int]:
        """The padded batch of the `sdpa` path, as sections of the upload: per request (batch row b) its
        tokens padded to `width` query rows, its keys [prefix, its context padded to `context_width`,
        its tokens padded to `local_width`], and each token's key spans over [context, tokens] in the
        row's own coordinates. Returns (requests, width, context_width, local_width)."""
        from decisionflow_kernels.tree_spans import spans_from_tree

        blocks = layout.blocks
        width = max(block.stop - block.start for block in blocks)
        context_width = max(contexts[block.request].length for block in blocks)
        # Keys padded to a multiple of 16, so the additive mask is aligned and needs no copy per layer.
        local_width = width + (-(prefix.length + context_width + width)) % 16
        begins = [0]
        for context in contexts:
            begins.append(begins[-1] + context.length)
        rows: list[int] = []
        keys: list[int] = []
        context_rows: list[int] = []
        unpad = [0] * sum(block.stop - block.start for block in blocks)
        spans: list[torch.Tensor] = []
        for b, block in enumerate(blocks):
            n = block.stop - block.start
            rows += [*range(block.start, block.stop), *[0] * (width - n)]
            keys += [*range(block.start, block.stop), *[0] * (local_width - n)]
            unpad[block.start : block.stop] = range(b * width, b * width + n)
            length, begin = contexts[block.request].length, begins[block.request]
            context_rows += [*range(begin, begin + length), *[0] * (context_width - length)]
            spans.append(spans_from_tree(block.parents, block.roots_see, context_width))
        slots = max(s.shape[1] for s in spans)
        # Unused slots and padding rows hold (0, 0): an empty span.
        padded = torch.zeros(len(blocks), width, slots, 2, dtype=torch.int32)
        for b, s in enumerate(spans):
            padded[b, : s.shape[0], : s.shape[1]] = s
        sections.update(query_rows=rows, key_rows=keys, unpad=unpad, context_rows=context_rows,
                        spans=padded.view(len(blocks) * width, slots, 2))
        return len(blocks), width, context_width, local_width

    def _blockwise_attention(self, prefix: PrefixCache, contexts: list[RequestContext], layout: PassLayout) -> Attend:
        """Torch attention, request by request, each block merged with the shared prefix by log-sum-exp."""
        groups = self.parts.heads // self.parts.kv_heads
        masks = [local_attention(block.visible.to(self.device), groups, self.dtype)  # type: ignore[union-attr]
                 for block in layout.blocks]

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
            # Request by request: a token never attends to another request's keys, so the local part
            # costs the sum of each request's size squared, not the whole pass's size squared.
            prefix_key, prefix_value = prefix.kv[layer]
            if len(layout.blocks) == 1 and contexts[layout.blocks[0].request].kv is None:
                return branch_attention(q, k, v, masks[0], prefix_key, prefix_value, scale)
            out = torch.empty_like(q)
            for block, mask in zip(layout.blocks, masks):
                keys, values = k[:, :, block.start : block.stop], v[:, :, block.start : block.stop]
                context = contexts[block.request].kv
                if context is not None:
                    keys = torch.cat([context[layer][0], keys], dim=-2)
                    values = torch.cat([context[layer][1], values], dim=-2)
                query = q[:, :, block.start : block.stop].contiguous()
                out[:, :, block.start : block.stop] = branch_attention(
                    query, keys, values, mask, prefix_key, prefix_value, scale
                )
            return out

        return attend

    def _padded_attention(
        self, prefix: PrefixCache, contexts: list[RequestContext], padding: tuple[int, int, int, int],
        on_device: dict[str, torch.Tensor],
    ) -> Attend:
        """Torch's `scaled_dot_product_attention` over every request of the pass as one padded batch
        (`padded_branch_attention`); the additive mask is built on the device once per pass."""
        from decisionflow_kernels.reference import visibility_from_spans

        count, width, context_width, local_width = padding
        groups = self.parts.heads // self.parts.kv_heads
        local = visibility_from_spans(on_device["spans"], context_width + local_width).view(count, width, -1)
        visible = torch.cat([local.new_ones(count, width, prefix.length), local], dim=-1)
        mask = torch.zeros(visible.shape, dtype=self.dtype, device=self.device)
        mask.masked_fill_(~visible, torch.finfo(self.dtype).min)
        # The folded query axis repeats each request's rows once per query head of a group.
        mask = mask[:, None].expand(count, groups, width, visible.shape[-1]).reshape(count, 1, groups * width, -1)
        with_context = [c.kv for c in contexts if c.kv is not None]
        rows, keys, unpad, context_rows = (on_device[name] for name in ("query_rows", "key_rows", "unpad", "context_rows"))

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
            context = None
            if with_context:
                context = (torch.cat([kv[layer][0] for kv in with_context], dim=-2),
                           torch.cat([kv[layer][1] for kv in with_context], dim=-2))
            return padded_branch_attention(
                q, k, v, prefix.kv[layer], context, mask, scale, rows=rows, keys=keys, unpad=unpad,
                context_rows=context_rows if context is not None else None,
                shape=(count, width, context_width, local_width),
            )

        return attend

    def _fused_attention(self, prefix: PrefixCache, contexts: list[RequestContext], on_device: dict[str, torch.Tensor]) -> Attend:
        """The Triton tree kernel over every request's context and the pass's tokens, described by key
        spans (no mask is built); the prefix is read once per key block for all queries of a KV head."""
        from decisionflow_kernels.tree_attention import tree_attention

        spans = on_device["spans"].to(torch.int32)
        with_context = [c.kv for c in contexts if c.kv is not None]

        def attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
            if with_context:
                k = torch.cat([kv[layer][0] for kv in with_context] + [k], dim=-2)
                v = torch.cat([kv[layer][1] for kv in with_context] + [v], dim=-2)
            prefix_key, prefix_value = prefix.kv[layer]
            return tree_attention(q, k.contiguous(), v.contiguous(), prefix_key, prefix_value, spans, scale)

        return attend

    @staticmethod
    def lay_out(prefix: PrefixCache, contexts: list[RequestContext], packed: PackedPass, *, visibility: bool = True) -> PassLayout:
        """Position ids, and per request its block of tokens with their visibility (roots hang off the
        request's context; every other token off its parent). `visibility=False` skips the boolean
        masks, which only the blockwise path reads."""
        depths = tree_depths(packed.parents)
        bases: list[int] = []
        for index, parent in enumerate(packed.parents):
            bases.append(bases[parent] if parent >= 0 else prefix.length + packed.context_seen(index, contexts))
        positions = [base + depth for base, depth in zip(bases, depths)]
        blocks: list[RequestBlock] = []
        start = 0
        while start < len(packed):
            request = packed.requests[start]
            stop = start
            while stop < len(packed) and packed.requests[stop] == request:
                stop += 1
            if any(b.request == request for b in blocks):
                raise ValueError(f"request {request}'s tokens are not contiguous in the pass")
            width = contexts[request].length
            local = [p - start if p >= 0 else -1 for p in packed.parents[start:stop]]
            if any(p >= 0 and not start <= p < stop for p in packed.parents[start:stop]):
                raise ValueError(f"a token of request {request} has a parent in another request")
            roots_see = [(0, packed.context_seen(i, contexts)) for i in range(start, stop)]
            visible = tree_visibility(local, roots_see, width) if visibility else None
            blocks.append(RequestBlock(request, start, stop, visible, local, roots_see))
            start = stop
        return PassLayout(positions, blocks)

    @staticmethod
    def keep_tokens(contexts: list[RequestContext], new_kv: KV, kept: torch.Tensor, counts: list[int]) -> None:
        """Append each request's kept tokens (its input, written answers) to its context. `kept`: the
        kept tokens' indexes on the device, grouped by request; `counts`: how many each request keeps."""
        if not len(kept):
            return
        selected = [(k.index_select(-2, kept), v.index_select(-2, kept)) for k, v in new_kv]
        start = 0
        for context, count in zip(contexts, counts):
            if count:
                context.extend([(k[:, :, start : start + count], v[:, :, start : start + count]) for k, v in selected])
            start += count
