"""Debiased readout: each field's distribution divided by the model's prior for that field, renormalised.

A small model's next-token scores carry a prior toward some labels and positions regardless of the
input. Contextual calibration (Zhao et al., 2021, "Calibrate Before Use") estimates that prior as the
field's distribution for content-free inputs (`N/A`, `[MASK]`, `...`), once per rubric, and divides
every request's distribution by it: `p(label) ∝ p(label | input) / prior(label)`. Domain-context
calibration (Fei et al., 2023) uses the mean distribution over a sample of real, unlabelled inputs
instead; `decisionflow calibrate --unlabelled` fits it into the rubric's calibration file.
`content_free_half` divides by the square root of the content-free prior: half the correction in
log space, for models whose content-free prior overstates their bias on real inputs.

The division happens before the answer is chosen, so a pinned field's debiased answer is what later
fields read. Candidate mass is not touched: abstention by mass still uses the model's raw mass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ...spec.kinds import Reading
from ...spec.rubric import Debias

__all__ = ["CONTENT_FREE_BY_READING", "CONTENT_FREE_INPUTS", "DEFAULT_BY_READING", "Debias", "Priors", "divide_by_prior", "mean_distribution"]

CONTENT_FREE_INPUTS = ("N/A", "[MASK]", "...")
CONTENT_FREE_BY_READING = {Reading.SHARED: CONTENT_FREE_INPUTS, Reading.INDEPENDENT: ("N/A",)}
"""The content-free inputs a rubric's prior is the mean reading of, per reading. Independent questions read
theirs beside the request, one row per question per input, so each input costs as much as the request's own
rows: one input there, measured to lose no accuracy against the shared reading on any development set
(docs/engine.md, "Independent questions"), where the three cost the shared reading's prefix nothing extra."""
DEFAULT_BY_READING = {Reading.SHARED: Debias.CONTENT_FREE_HALF, Reading.INDEPENDENT: Debias.CONTENT_FREE}
"""The correction a field gets where neither it, its rubric, the call nor the engine names one: the one that lost
accuracy on no development set against the shared reading's default, per reading (docs/evaluation.md; for
independent questions docs/engine.md, "Independent questions": half the correction lost on BANKING77 there)."""
PRIOR_FLOOR = 1e-6
"""A prior is never taken below this, so a label the model never gives content-free is not blown up."""


@dataclass(frozen=True)
class Priors:
    """Per field, the prior its distribution is divided by and how it was estimated."""

    fields: dict[str, tuple[Debias, tuple[float, ...]]] = field(default_factory=dict)

    def apply(
        self, name: str, probabilities: tuple[float, ...], indexes: Sequence[int] | None = None
    ) -> tuple[tuple[float, ...], Debias]:
        """The field's distribution divided by its prior. `indexes` places a distribution over some of the
        field's labels (a row offering a parent answer's options) among all of them: the prior is then
        taken over those labels, and not applied when it has no mass there."""
        entry = self.fields.get(name)
        if entry is None:
            return probabilities, Debias.NONE
        method, prior = entry
        if indexes is not None:
            prior = tuple(prior[i] for i in indexes)
            total = sum(prior)
            if total < PRIOR_FLOOR:
                return probabilities, Debias.NONE
            prior = tuple(q / total for q in prior)
        return divide_by_prior(probabilities, prior, method.strength), method


def divide_by_prior(probabilities: Sequence[float], prior: Sequence[float], strength: float = 1.0) -> tuple[float, ...]:
    """p / prior^strength, renormalised; falls back to `probabilities` if nothing is left."""
    ratios = [p / max(q, PRIOR_FLOOR) ** strength for p, q in zip(probabilities, prior)]
    total = sum(ratios)
    if total <= 0.0:
        return tuple(probabilities)
    return tuple(r / total for r in ratios)


def mean_distribution(distributions: Sequence[Sequence[float]]) -> tuple[float, ...] | None:
    """The average of several distributions over the same labels (None for none)."""
    if not distributions:
        return None
    width = len(distributions[0])
    return tuple(sum(d[i] for d in distributions) / len(distributions) for i in range(width))
