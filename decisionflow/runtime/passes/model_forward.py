"""Packed passes through the model's own `forward`: every decoder-only model transformers loads.

The engine's decoder path (`backend.DecoderBackend`) walks the layers itself and is exact only for
the families it reproduces (Llama, Mistral, Qwen2, Qwen3). Every other decoder — soft-capped logits and
scaled embeddings (Gemma), parallel blocks (GPT-NeoX, Cohere), learned positions, expert routing
(Mixtral, Qwen-MoE), per-layer norms (OLMo 2, Granite) — runs here through its own modules, so whatever
the family does comes from its own code. A pass is the same packed sequence: the prefix's keys and values
and the contexts of the pass's requests are laid in a fresh cache, the pass's tokens follow with explicit
position ids, and a 4-D additive mask says what each token sees (the prefix, the part of its request's
context its root sees, its ancestors in the tree); logits are projected only at the read positions.

Two backends share this: `ModelForwardBackend`, the generic path, and `PlainForwardBackend`, the
reference `check-model` compares it with, which runs one plain forward of the model per read position
(its own causal mask over the whole sequence: no packing, no cache).

Sliding-window layers are exact while every sequence of a pass fits the window (the 4-D mask replaces the
model's own, which would cut keys older than the window); a request that needs more positions than the
window is refused with both numbers named.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import torch

from ...errors import ContextLengthError, ModelError
from .backend import DecoderBackend, PackedPass, PassOutput, PrefixCache, RequestContext, tree_visibility
from .forward import KV, Pool, average_groups

PATH = "model-forward"
REFERENCE_PATH = "plain-forward"


def text_config(config: Any) -> Any:
    """The language model's own configuration (a multimodal checkpoint nests it: `text_config`)."""
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def sliding_window(config: Any) -> int | None:
    """The window of the model's sliding-window layers (None when every layer attends to everything)."""
    config = text_config(config)
    window = getattr(config, "sliding_window", None)
    if not window:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return int(window) if "sliding_attention" in layer_types else None
    if getattr(config, "use_sliding_window", True) is False:  # Qwen2 declares a window it does not use
        return None
    return int(window)


def forward_refusal(model: Any) -> str | None:
    """Why the model's forward cannot run a packed pass (None when it can): it must take position ids,
    a 4-D attention mask and a cache."""
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "its forward's signature cannot be read"
    missing = [name for name in ("position_ids", "attention_mask") if name not in parameters]
    if not {"cache", "past_key_values"} & set(parameters):
        missing.append("cache")
    if missing:
        return f"its forward takes no {' and no '.join(missing)} (positions, masks and a cache are how branches are packed)"
    return None


def cache_keyword(model: Any) -> str:
    """The name the model's forward takes its cache by (`cache` since transformers 5.25, `past_key_values` before)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class _ForwardBase:
    """What both forward-based backends share: the model, its dtype and device, limits, features."""

    path = PATH

    def __init__(self, model: Any) -> None:
        problem = forward_refusal(model)
        if problem:
            raise ModelError(f"model type {getattr(model.config, 'model_type', '?')!r} cannot be served: {problem}")
        self.model = model
        self.config = text_config(model.config)
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype
        self.max_positions = int(getattr(self.config, "max_position_embeddings", 0) or 0)
        self.window = sliding_window(model.config)
        self.layer_count = int(self.config.num_hidden_layers)
        self.kernels = self.path
        self.attention = self.path
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._cache_keyword = cache_keyword(model)
        decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
        self._final_norm = next((getattr(decoder, name) for name in ("norm", "final_layernorm", "ln_f", "final_layer_norm")
                                 if decoder is not None and isinstance(getattr(decoder, name, None), torch.nn.Module)), None)

    def check_window(self, positions: int) -> None:
        if self.window is not None and positions > self.window:
            raise ContextLengthError(
                f"this request needs {positions} positions, but the model's sliding-window layers see {self.window}: "
                f"decisionflow reads such a model exactly only while every sequence fits its window (shorten the "
                "input or the rubric, or use a model whose layers all see the whole context)")

    def run_pass(self, prefix: PrefixCache, contexts: list[RequestContext], packed: PackedPass, read_positions: list[int]) -> torch.Tensor:
        return self.run_pass_with_features(prefix, contexts, packed, read_positions).logprobs  # type: ignore[attr-defined]

    @torch.inference_mode()
    def forward_plain(self, tokens: list[int]) -> torch.Tensor:
        """The model's own forward over `tokens`, last position's log-probs."""
        out = self.model(input_ids=torch.tensor([tokens], device=self.device), use_cache=False,
                         **({"logits_to_keep": 1} if self._keeps_logits else {}))
        return torch.log_softmax(out.logits[0, -1].float(), dim=-1)

    def _features(self, hidden_states: Sequence[torch.Tensor], layers: Sequence[int], rows: Any) -> torch.Tensor:
        """[rows, hidden * layers] float32: the residual stream after each layer (counted from the top as
        Python indexes), through the final norm, as `forward.Capture` gives the engine's decoder path."""
        count = self.layer_count
        kept = []
        for layer in layers:
            index = count + layer if layer < 0 else layer
            if index == count - 1:
                kept.append(hidden_states[count][0, rows].float())  # the model's last state, already normed
                continue
            state = hidden_states[index + 1][0, rows]
            kept.append((self._final_norm(state) if self._final_norm is not None else state).float())
        return torch.cat(kept, dim=-1)


class ModelForwardBackend(_ForwardBase):
    """The generic path: one packed pass is one call of the model's own forward (see the module)."""

    @torch.inference_mode()
    def prefill_prefix(self, tokens: list[int]) -> PrefixCache:
        self.check_window(len(tokens))
        from transformers import DynamicCache

        cache = DynamicCache()  # full layers: a sliding one would drop keys the 4-D masks still name
        self.model(input_ids=torch.tensor([tokens], device=self.device), **{self._cache_keyword: cache}, use_cache=True,
                   **({"logits_to_keep": 1} if self._keeps_logits else {}))
        return PrefixCache(kv=_cache_kv(cache, self.layer_count), length=len(tokens), tokens=tuple(tokens))

    @torch.inference_mode()
    def run_pass_with_features(
        self, prefix: PrefixCache, contexts: list[RequestContext], packed: PackedPass, read_positions: list[int],
        feature_layers: Sequence[int] = (), feature_positions: Sequence[int] = (),
        gather: tuple[Sequence[int], Sequence[int]] | None = None, pool: Pool | None = None,
    ) -> PassOutput:
        from transformers import DynamicCache

        layout = DecoderBackend.lay_out(prefix, contexts, packed, visibility=False)
        self.check_window(max(layout.positions) + 1 if layout.positions else prefix.length)
        present = sorted({block.request for block in layout.blocks})
        starts, width = {}, prefix.length
        for request in present:
            starts[request] = width
            width += contexts[request].length
        n = len(packed)
        visible = torch.zeros(n, width + n, dtype=torch.bool)
        visible[:, : prefix.length] = True
        for block in layout.blocks:
            length = contexts[block.request].length
            local = tree_visibility(block.parents, block.roots_see, length)
            rows = slice(block.start, block.stop)
            start = starts[block.request]
            visible[rows, start : start + length] = local[:, :length]
            visible[rows, width + block.start : width + block.stop] = local[:, length:]
        mask = torch.zeros(1, 1, n, width + n, dtype=self.dtype)
        mask.masked_fill_(~visible[None, None], torch.finfo(self.dtype).min)
        cache = DynamicCache()
        for layer in range(self.layer_count):
            keys = [prefix.kv[layer][0], *(contexts[r].kv[layer][0] for r in present if contexts[r].kv is not None)]
            values = [prefix.kv[layer][1], *(contexts[r].kv[layer][1] for r in present if contexts[r].kv is not None)]
            cache.update(torch.cat(keys, dim=-2), torch.cat(values, dim=-2), layer)
        reads = torch.tensor(list(read_positions), dtype=torch.long, device=self.device)
        wants_features = bool(feature_layers) and bool(feature_positions)
        out = self.model(
            input_ids=torch.tensor([packed.tokens], device=self.device),
            position_ids=torch.tensor([layout.positions], device=self.device),
            attention_mask=mask.to(self.device), **{self._cache_keyword: cache}, use_cache=True,
            output_hidden_states=wants_features or pool is not None, **({"logits_to_keep": reads} if self._keeps_logits else {}),
        )
        logits = out.logits[0] if self._keeps_logits else out.logits[0, reads]
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        new_kv = [(k[:, :, width:], v[:, :, width:]) for k, v in _cache_kv(cache, self.layer_count)]
        kept = [i for request in range(len(contexts)) for i, (keep, r) in enumerate(zip(packed.keep, packed.requests))
                if keep and r == request]
        counts = [sum(1 for keep, r in zip(packed.keep, packed.requests) if keep and r == request) for request in range(len(contexts))]
        _keep(contexts, new_kv, torch.tensor(kept, dtype=torch.long, device=self.device), counts, packed, kept)
        features = None
        if wants_features:
            features = self._features(out.hidden_states, feature_layers, list(feature_positions))
        means = None
        if pool is not None:
            means = average_groups(self._features(out.hidden_states, pool.layers, list(pool.rows)), pool.sizes)
        gathered = logprobs[list(gather[0]), list(gather[1])] if gather else None
        return PassOutput(logprobs, features, gathered, means)


class PlainForwardBackend(_ForwardBase):
    """The reference: every read position is one plain forward of the model over its whole sequence (the
    prefix, the part of its request's context it sees, its ancestors): no packing, no cache, the model's own
    causal mask. Slow by design; `check-model` compares a packed path with it."""

    path = REFERENCE_PATH

    def prefill_prefix(self, tokens: list[int]) -> PrefixCache:
        return PrefixCache(kv=[], length=len(tokens), tokens=tuple(tokens))

    @torch.inference_mode()
    def run_pass_with_features(
        self, prefix: PrefixCache, contexts: list[RequestContext], packed: PackedPass, read_positions: list[int],
        feature_layers: Sequence[int] = (), feature_positions: Sequence[int] = (),
        gather: tuple[Sequence[int], Sequence[int]] | None = None, pool: Pool | None = None,
    ) -> PassOutput:
        def sequence(index: int) -> list[int]:
            chain = []
            while index >= 0:
                chain.append(index)
                root, index = index, packed.parents[index]
            seen = packed.context_seen(root, contexts)
            return [*prefix.tokens, *contexts[packed.requests[root]].tokens[:seen], *(packed.tokens[i] for i in reversed(chain))]

        rows, features, pooled = [], [], []
        wanted = list(feature_positions) if feature_layers else []
        pooled_rows = list(pool.rows) if pool is not None else []
        for position in [*read_positions, *wanted, *pooled_rows]:
            tokens = sequence(position)
            self.check_window(len(tokens))
            out = self.model(input_ids=torch.tensor([tokens], device=self.device), use_cache=False,
                             output_hidden_states=bool(wanted or pooled_rows))
            if len(rows) < len(read_positions):
                rows.append(torch.log_softmax(out.logits[0, -1].float(), dim=-1))
            elif len(features) < len(wanted):
                features.append(self._features(out.hidden_states, feature_layers, [-1])[0])
            else:
                assert pool is not None
                pooled.append(self._features(out.hidden_states, pool.layers, [-1])[0])
        for index, (keep, request) in enumerate(zip(packed.keep, packed.requests)):
            if keep:
                contexts[request].tokens.append(packed.tokens[index])
                contexts[request].length += 1
        logprobs = torch.stack(rows) if rows else torch.empty(0, self.model.config.vocab_size)
        gathered = logprobs[list(gather[0]), list(gather[1])] if gather else None
        means = average_groups(torch.stack(pooled), pool.sizes) if pool is not None else None
        return PassOutput(logprobs, torch.stack(features) if features else None, gathered, means)


def _cache_kv(cache: Any, layers: int) -> KV:
    """Per layer (keys, values) of a transformers cache; a cache of another shape (shared or recurrent
    layers) cannot hold packed branches."""
    found = getattr(cache, "layers", None)
    if found is None or len(found) != layers or any(getattr(layer, "keys", None) is None for layer in found):
        raise ModelError("the model's cache is not one set of keys and values per layer (shared or recurrent layers): "
                         "its passes cannot be packed")
    return [(layer.keys, layer.values) for layer in found]


def _keep(contexts: list[RequestContext], new_kv: KV, kept: torch.Tensor, counts: list[int], packed: PackedPass,
          kept_indexes: list[int]) -> None:
    """Each request's kept tokens join its context: their keys and values (as the decoder path keeps them),
    and their ids."""
    DecoderBackend.keep_tokens(contexts, new_kv, kept, counts)
    start = 0
    for context, count in zip(contexts, counts):
        context.tokens.extend(packed.tokens[i] for i in kept_indexes[start : start + count])
        start += count
