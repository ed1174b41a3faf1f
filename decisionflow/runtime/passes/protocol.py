"""What the engine asks of a backend: the one interface every pass runner offers.

Three classes run passes: `backend.DecoderBackend` (the engine's own walk over the layers),
`model_forward.ModelForwardBackend` (a model's own forward, the generic path) and
`model_forward.PlainForwardBackend` (the reference `check-model` compares with). The engine, the executor,
the prepared-rubric cache and the engine's users (fitting, the baselines, the bench, the server) hold any
of them as a `Backend`, and the members below are all they read or call: a new path needs these and
nothing else. A structural type rather than a base class, because the implementations share no code
through it (the two forward-based backends share theirs through their own base).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch

from .backend import PackedPass, PassOutput, PrefixCache, RequestContext
from .forward import Pool


class Backend(Protocol):
    path: str
    """Which path runs the passes (`backend.DECODER_PATH`, `model_forward.PATH` or `REFERENCE_PATH`):
    what `Stats.path` reports, and part of the prefix store's fingerprint."""
    model: Any
    """The model the passes read (a transformers model or the engine's own decoder); only read, never changed."""
    config: Any
    """The model's (text) configuration: `hidden_size` and the rest fingerprints and baselines read."""
    device: torch.device
    dtype: torch.dtype
    layer_count: int
    max_positions: int
    """The model's context length (0 when its configuration names none): `executor.check_fits` refuses past it."""
    kernels: str
    """What `Stats.kernels` reports: the kernels the passes take."""
    attention: str
    """The attention path passes take (`fused`, `sdpa`, `blockwise`, or the forward path's name)."""

    def prefill_prefix(self, tokens: list[int]) -> PrefixCache:
        """The prefix's keys and values, computed once and read by every later pass."""
        ...

    def forward_plain(self, tokens: list[int]) -> torch.Tensor:
        """The model's own forward over `tokens`: the last position's log-probs (the independent reference)."""
        ...

    def run_pass(
        self, prefix: PrefixCache, contexts: list[RequestContext], packed: PackedPass, read_positions: list[int],
    ) -> torch.Tensor:
        """One packed pass: log-probs at `read_positions`, each request's context extended with its kept tokens."""
        ...

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
        """`run_pass`, also returning hidden states, gathered log-probs and pooled means (`PassOutput`)."""
        ...
