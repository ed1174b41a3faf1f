"""Typed results: the user's object, plus a distribution and candidate mass for every field.

The core never imports rich: `__rich__` defers to `render`, so `rich.print(result)` shows a table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Generic, TypeVar

from ..spec.rubric import FieldKind, Value

T = TypeVar("T")
FITTED_METHODS = frozenset({"fitted", "ngram", "fused"})
"""The `method`s of a field a fitted head answered: on the hidden states, on the input's words, or both fused."""


@dataclass(frozen=True)
class FieldResult:
    name: str
    kind: FieldKind
    value: Value | None
    """The winning answer, or None when the field was not asked."""
    probabilities: dict[str, float]
    """Every allowed answer (as its label) -> probability; empty when not asked."""
    candidate_mass: float | None
    """Unrenormalised probability that the model's next token starts an allowed answer."""
    round: int | None
    method: str
    """`first_token`, `branch`, `exact`, `marginalized`, `derived`, `fitted` (a fitted head on the pass's
    hidden states answered), `ngram` (a head on the input's words), `fused` (both, with the zero-shot
    readout), or `not_asked`."""
    asked: bool = True
    abstained: bool = False
    """The answer fell below the calibration's minimum mass or probability: `value` is None."""
    reason: str = ""
    """Why a field was not asked (its condition was false)."""
    expected_value: float | None = None
    """Score fields: the probability-weighted mean level."""
    debias: str = "none"
    """How `probabilities` were debiased: `none`, `content_free`, `content_free_half` or `domain` (see `runtime.readout.debias`)."""
    asked_probability: float | None = None
    """A marginalised field: the probability that it is asked, over its parent's hypotheses."""
    joint: list[dict[str, Any]] | None = None
    """A marginalised field: its top joint answers with its parent (`parent`, `label`, `probability`)."""
    derived_from: str | None = None
    """A derived field: `independent` (its inputs' distributions multiplied) or `joint` (a marginalised
    field and its parent taken together)."""
    raw_probabilities: dict[str, float] | None = None
    """The model's own distribution over the offered answers, before the debiasing and the calibration
    (None for marginalised and derived fields). Not part of `to_dict`."""
    zero_shot_probabilities: dict[str, float] | None = None
    """A field a fitted head answered (`method` `fitted`): the engine's zero-shot readout (after its
    correction, before the head and the calibration), read in the same pass. Not part of `to_dict`."""

    @property
    def fitted(self) -> bool:
        """Whether a fitted head answered (on the hidden states, the words, or both fused)."""
        return self.method in FITTED_METHODS

    @property
    def probability(self) -> float | None:
        """Probability of the winning answer."""
        if not self.asked:
            return None
        return max(self.probabilities.values())

    def to_dict(self) -> dict[str, Any]:
        data = {
            "value": self.value,
            "probabilities": self.probabilities,
            "candidate_mass": self.candidate_mass,
            "round": self.round,
            "method": self.method,
        }
        if self.expected_value is not None:
            data["expected_value"] = self.expected_value
        if not self.asked:
            data["asked"] = False
            data["reason"] = self.reason
        if self.abstained:
            data["abstained"] = True
        if self.debias != "none":
            data["debias"] = self.debias
        for key in ("asked_probability", "joint", "derived_from"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        return data


@dataclass(frozen=True)
class Stats:
    forward_passes: int
    """Passes this request took part in (the prefix's one-off prefill not counted)."""
    tokens_prefilled: int
    """New tokens this request fed through the model: input, written answers and rows."""
    input_tokens: int
    prefix_tokens: int
    prefix_cache_hit: bool
    """False only for the first request of a rubric in this engine, which pays (and reports in
    `timings_ms`) its preparation: compile, prefix, content-free prior."""
    batch_size: int = 1
    """Requests that shared these passes."""
    timings_ms: dict[str, float] = field(default_factory=dict)
    prefix_source: str = "memory"
    """Where the rubric's prefix cache came from for this call: `memory`, `disk` or `prefill`."""
    device: str = ""
    dtype: str = ""
    kernels: str = ""
    """Which attention and kernel path ran the passes (e.g. `torch+cpu-flash`, `triton`, `model-forward`)."""
    path: str = ""
    """How the passes ran: `decoder` (the engine's own walk over the layers, exact for the Llama, Mistral and
    Qwen families) or `model-forward` (the model's own forward, any decoder-only family)."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update({old: data[new] for old, new in DEPRECATED_STATS_KEYS.items()})
        return data

    @property
    def head_tokens(self) -> int:
        """Deprecated: the earlier name of `prefix_tokens`."""
        return self.prefix_tokens

    @property
    def head_cache_hit(self) -> bool:
        """Deprecated: the earlier name of `prefix_cache_hit`."""
        return self.prefix_cache_hit

    @property
    def head_source(self) -> str:
        """Deprecated: the earlier name of `prefix_source`."""
        return self.prefix_source


DEPRECATED_STATS_KEYS = {"head_tokens": "prefix_tokens", "head_cache_hit": "prefix_cache_hit", "head_source": "prefix_source"}
"""Keys `Stats.to_dict` also writes under their earlier names (the same values), for readers of the old output."""


@dataclass(frozen=True)
class Decision(Generic[T]):
    rubric: str
    value: T
    """An instance of the declared class (or of the model generated for a YAML rubric)."""
    fields: dict[str, FieldResult]
    stats: Stats

    @property
    def abstained(self) -> list[str]:
        """Fields that abstained instead of guessing."""
        return [name for name, f in self.fields.items() if f.abstained]

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": {name: f.value for name, f in self.fields.items()},
            "fields": {name: f.to_dict() for name, f in self.fields.items()},
            "stats": self.stats.to_dict(),
        }

    def __rich__(self) -> Any:
        from .render import decision_table

        return decision_table(self)
