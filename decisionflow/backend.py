"""The model backend: the only module that touches transformers' cache and attention-mask conventions.

One physical prefix: the head's keys and values are computed once and every packed token of a pass
attends to that same copy through branch attention (never concatenated into a per-pass cache). A pass packs many short branches (a request's new text, each field's row)
into one sequence after the cached prefix; a tree-shaped additive mask lets each token see the
head, its own request's context and its own ancestors, and explicit position ids restart each
branch where its parent ends. Logits are projected only at the requested read positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

KV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer (keys, values), each [1, kv_heads, tokens, head_dim]."""


@dataclass
class RequestContext:
    """Tokens a request has added after the head so far (its input, then written answers)."""

    kv: KV | None = None
    length: int = 0

    def extend(self, new: KV) -> None:
        if self.kv is None:
            self.kv = new
        else:
            self.kv = [(torch.cat([k, nk], dim=-2), torch.cat([v, nv], dim=-2)) for (k, v), (nk, nv) in zip(self.kv, new)]
        self.length += new[0][0].shape[-2]


@dataclass(frozen=True)
class HeadCache:
    kv: KV
    length: int


@dataclass
class PackedPass:
    """Tokens of one forward pass. A parent of -1 attaches a token to the end of its request's context."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    keep: list[bool] = field(default_factory=list)
    """Whether a token's keys and values join its request's context after the pass."""
    _shared: dict[tuple[int, int, int], int] = field(default_factory=dict, repr=False)

    def add(self, token: int, *, parent: int, request: int, keep: bool = False, share: bool = False) -> int:
        """Append a token and return its index. With `share`, a token already added under the same
        parent is reused: same token, same context, so the same keys, values and logits (rows of
        different fields all start with the same indentation and quote)."""
        key = (request, parent, token)
        if share and key in self._shared:
            return self._shared[key]
        if share:
            self._shared[key] = len(self.tokens)
        self.tokens.append(token)
        self.parents.append(parent)
        self.requests.append(request)
        self.keep.append(keep)
        return len(self.tokens) - 1

    def __len__(self) -> int:
        return len(self.tokens)


class TransformersBackend:
    """Runs packed passes on a transformers causal LM (Llama, Qwen2, Qwen3 families)."""

    def __init__(self, model: Any):
        from .branch_attention import install

        self.model = model.eval()
        install(self.model)
        self.config = model.config
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 0) or 0)

    def _cache(self, prefix: KV | None) -> Any:
        from transformers import DynamicCache

        cache = DynamicCache(config=self.config)
        if prefix is not None:
            for layer, (k, v) in enumerate(prefix):
                cache.update(k, v, layer)
        return cache

    @torch.inference_mode()
    def prefill_head(self, tokens: list[int]) -> HeadCache:
        ids = torch.tensor([tokens], device=self.device)
        cache = self._cache(None)
        self.model.model(input_ids=ids, cache=cache, use_cache=True)
        kv = [(layer.keys, layer.values) for layer in cache.layers]
        return HeadCache(kv=kv, length=len(tokens))

    @torch.inference_mode()
    def forward_plain(self, tokens: list[int]) -> torch.Tensor:
        """One ordinary forward over `tokens`, last position's log-probs: the reference a pass is compared with."""
        ids = torch.tensor([tokens], device=self.device)
        out = self.model(input_ids=ids, logits_to_keep=1)
        return torch.log_softmax(out.logits[0, -1].float(), dim=-1)

    @torch.inference_mode()
    def run_pass(
        self,
        head: HeadCache,
        contexts: list[RequestContext],
        packed: PackedPass,
        read_positions: list[int],
    ) -> torch.Tensor:
        """Run one packed pass; extend each request's context with its kept tokens.

        Returns log-probs over the vocabulary at `read_positions`: [len(read_positions), vocab].
        """
        n = len(packed)
        context_lengths = [c.length for c in contexts]
        offsets = [0]
        for length in context_lengths:
            offsets.append(offsets[-1] + length)
        context_total = offsets[-1]

        # visible[i, j]: may packed token i attend to key j of [contexts..., packed tokens]?
        # (The head is not in this matrix: every token sees all of it.)
        visible = torch.zeros(n, context_total + n, dtype=torch.bool)
        depth = [0] * n
        for i, (parent, request) in enumerate(zip(packed.parents, packed.requests)):
            if parent >= 0:
                visible[i] = visible[parent]
                depth[i] = depth[parent] + 1
            else:
                visible[i, offsets[request] : offsets[request + 1]] = True
            visible[i, context_total + i] = True
        positions = [head.length + context_lengths[r] + d for r, d in zip(packed.requests, depth)]

        mask = torch.zeros(visible.shape, dtype=self.dtype)
        mask.masked_fill_(~visible, torch.finfo(self.dtype).min)
        with_context = [c for c in contexts if c.kv is not None]
        context_kv = [
            (torch.cat([c.kv[i][0] for c in with_context], dim=-2), torch.cat([c.kv[i][1] for c in with_context], dim=-2))
            for i in range(len(head.kv))
        ] if with_context else None
        cache = self._cache(context_kv)
        out = self.model.model(
            input_ids=torch.tensor([packed.tokens], device=self.device),
            attention_mask=mask[None, None].to(self.device),
            position_ids=torch.tensor([positions], device=self.device),
            cache=cache,
            use_cache=True,
            shared_prefix=head.kv,
        )
        hidden = out.last_hidden_state[0, read_positions]  # [reads, hidden]
        logits = self.model.lm_head(hidden).float()
        logprobs = torch.log_softmax(logits, dim=-1)

        for request, context in enumerate(contexts):
            kept = [context_total + i for i in range(n) if packed.keep[i] and packed.requests[i] == request]
            if kept:
                index = torch.tensor(kept, device=self.device)
                context.extend([
                    (layer.keys.index_select(-2, index), layer.values.index_select(-2, index))
                    for layer in cache.layers
                ])
        return logprobs
