"""Fitting a domain prior from unlabelled inputs (`decisionflow calibrate --unlabelled`).

Domain-context calibration (Fei et al., 2023): a field's prior is its mean raw distribution over a
sample of real, unlabelled inputs of the task, and every later distribution is divided by it. The
prior is saved in the rubric's calibration file with the labels it is ordered by, and the field is
marked `debias: domain`, so `run` and `eval` apply it. The model is run without any correction, so
the prior is the model's own; a field read after others sees their raw answers while the prior is
estimated. A temperature fitted earlier under another correction no longer fits the new
distributions and is reset to 1 (fit it again with `calibrate --data`, which then fits after the
division); abstention thresholds are kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import DataError
from ..runtime.readout.calibration import Calibration, FieldCalibration
from ..spec.rubric import Debias, Rubric
from ..stats import metrics
from . import corrections
from .readings import Progress, read_all_fields


@dataclass(frozen=True)
class PriorFit:
    field: str
    rows: int
    """Unlabelled rows the prior was averaged over."""
    prior: dict[str, float]
    answers_changed: int
    """Rows whose top label differs once the prior is divided out."""
    labels_predicted_raw: int
    labels_predicted_debiased: int
    temperature_reset: bool
    """An existing temperature, fitted under another correction, was reset to 1."""

    def favoured(self, count: int = 3) -> list[tuple[str, float]]:
        """The labels the model gives most mass to regardless of the input."""
        return sorted(self.prior.items(), key=lambda item: -item[1])[:count]

    @property
    def effective_labels(self) -> float:
        """exp(entropy) of the prior: the number of labels it spreads over (all of them when flat)."""
        return math.exp(-sum(p * math.log(p) for p in self.prior.values() if p > 0))


def fit_domain_priors(
    engine: Any, target: Any, rubric: Rubric, texts: Sequence[str], fields: Sequence[str], *,
    base: Calibration | None = None, progress: Progress | None = None,
) -> tuple[Calibration, list[PriorFit]]:
    """The calibration with a domain prior for each of `fields` (other settings of `base` kept)."""
    if not texts:
        raise DataError("no unlabelled rows to fit a domain prior on")
    rows = read_all_fields(engine, target, texts, debias=Debias.NONE.value, progress=progress)
    settings = dict(base.fields) if base and base.rubric == rubric.name else {}
    fits = []
    for name in fields:
        distributions = [row[name].probabilities for row in rows if row[name].probabilities]
        if not distributions:
            raise DataError(f"field {name!r} was not decided on any unlabelled row (every row failed or was not asked)")
        prior = corrections.mean_prior(distributions)
        labels = list(rubric.field(name).labels)
        current = settings.get(name, FieldCalibration())
        reset = current.temperature != 1.0 and current.debias is not Debias.DOMAIN
        settings[name] = current.model_copy(update={
            "labels": tuple(labels), "prior": tuple(prior[label] for label in labels), "debias": Debias.DOMAIN,
            "temperature": 1.0 if reset else current.temperature,
        })
        debiased = [corrections.divide(d, prior) for d in distributions]
        raw_top = [metrics.top_label(d) for d in distributions]
        new_top = [metrics.top_label(d) for d in debiased]
        fits.append(PriorFit(
            field=name, rows=len(distributions), prior=prior,
            answers_changed=sum(a != b for a, b in zip(raw_top, new_top)),
            labels_predicted_raw=len(set(raw_top)), labels_predicted_debiased=len(set(new_top)),
            temperature_reset=reset,
        ))
    return Calibration(rubric=rubric.name, fields=settings), fits
