"""Fitting a rubric's calibration file from labelled data (`decisionflow calibrate`).

Per field: the temperature that minimises the negative log-likelihood of the gold labels, and
optionally abstention thresholds (given, or a minimum candidate mass fitted on rows whose gold
label the field does not offer). The temperature is fitted *after* the readout correction: the
engine runs with the correction it will use later (the call's `debias`, else one already recorded in
the file, else the field's, the rubric's or the engine's default; a domain prior already in the file
is used) but without any temperature or threshold, and the file records per field which correction
the fit was made under, so `run` and `eval` apply the same one. Temperature scaling keeps every row's
winning label; the fit checks that on every row and fails loudly if it ever did not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol, Sequence

from ..runtime.readout.calibration import Calibration, FieldCalibration
from ..spec.rubric import Debias, Rubric
from ..stats import (
    LOG_TEMPERATURE_RANGE,
    expected_calibration_error,
    fit_temperature,
    metrics,
    negative_log_likelihood,
    temperature_scale,
)
from .readings import Progress, Reading, applied_correction, read_all_fields


class LabelledText(Protocol):
    """A labelled row as the fit reads it (`quality.labelled.LabelledRow` is one)."""

    text: str
    gold: Mapping[str, str]


@dataclass(frozen=True)
class FieldFit:
    field: str
    rows: int
    """Rows whose gold label the field offers (the temperature is fitted on these)."""
    settings: FieldCalibration
    ece_before: float | None
    ece_after: float | None
    nll_before: float | None
    nll_after: float | None
    accuracy: float | None
    winners_unchanged: int
    """Rows whose top label was checked to be the same after scaling (all of them)."""
    fitted_mass_accuracy: float | None = None
    """With a fitted mass threshold: accuracy counting out-of-scope rows right when they abstain."""
    debias: str = "none"
    """The readout correction the distributions were read under (and the file records)."""

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "settings": self.settings.model_dump(), "warning": self.warning}

    @property
    def warning(self) -> str | None:
        """Why the temperature is not to be trusted: it stopped at an end of the search range (the
        probabilities would be pushed to 0/1, or flattened, as far as the search allows)."""
        low, high = (math.exp(bound) for bound in LOG_TEMPERATURE_RANGE)
        temperature = self.settings.temperature
        if temperature <= low * (1 + 1e-3):
            source = ("rows its fitted head was trained on (calibrate a head on rows it was not fitted on)"
                      if self.settings.after_head else "too few or too easy rows (calibrate on more, held-out rows)")
            return (f"{self.field}: the temperature stopped at the search's lower end ({temperature:.3f}): the readout "
                    f"is right on almost every row, which makes it look surer than it is; this happens on {source}")
        if temperature >= high * (1 - 1e-3):
            return (f"{self.field}: the temperature stopped at the search's upper end ({temperature:.1f}): the readout "
                    "is hardly better than chance on these rows, so its probabilities are flattened as far as allowed; "
                    "check the gold column and the rubric's wording")
        return None


def fit_calibration(
    engine: Any, target: Any, rubric: Rubric, rows: Sequence[LabelledText], fields: Sequence[str], *,
    min_mass: float | None = None, min_probability: float | None = None, fit_min_mass: bool = False,
    base: Calibration | None = None, debias: str | None = None, progress: Progress | None = None,
    heads: Any = None,
) -> tuple[Calibration, list[FieldFit]]:
    """The calibration fitted on `rows` (other fields of `base` kept) and what each field's fit measured.

    `debias` names the readout correction to fit under (None: the one the engine resolves per field).
    With fitted `heads`, the temperature of a field a head answers is fitted on the head's distribution."""
    texts = [row.text for row in rows]
    fits = []
    settings = dict(base.fields) if base and base.rubric == rubric.name else {}
    # One pass over the data answers every field; the rest are read from the same decisions.
    readings_by_field = _read_fields(engine, target, texts, fields, _uncalibrated(rubric, settings, fields), debias, progress,
                                     heads)
    for name in fields:
        labels = list(rubric.field(name).labels)
        fit = fit_field(
            name, [row.gold[name] for row in rows], readings_by_field[name], labels,
            min_mass=min_mass, min_probability=min_probability, fit_min_mass=fit_min_mass,
        )
        applied = applied_correction(readings_by_field[name])
        settings[name] = fit.settings.model_copy(update={
            "prior": _prior_over(settings.get(name), labels), "debias": Debias(applied),
            "after_head": bool(heads is not None and name in heads.fitted_fields),
        })
        fits.append(replace(fit, settings=settings[name], debias=applied))
    return Calibration(rubric=rubric.name, fields=settings), fits


def _uncalibrated(rubric: Rubric, settings: dict[str, FieldCalibration], fields: Sequence[str]) -> Calibration | None:
    """The calibration to read under: the fitted fields keep their prior and correction but lose their
    temperature and thresholds, so the fit starts from the debiased distributions; other fields keep all."""
    kept = {
        name: (FieldCalibration(labels=s.labels, prior=s.prior, debias=s.debias) if name in fields else s)
        for name, s in settings.items()
    }
    return Calibration(rubric=rubric.name, fields=kept) if kept else None


def _prior_over(settings: FieldCalibration | None, labels: Sequence[str]) -> tuple[float, ...] | None:
    """An existing domain prior, reordered to `labels` (the order the new settings record)."""
    if settings is None or settings.prior is None or settings.labels is None:
        return None
    by_label = dict(zip(settings.labels, settings.prior))
    return tuple(by_label[label] for label in labels)


def _read_fields(
    engine: Any, target: Any, texts: list[str], fields: Sequence[str], calibration: Calibration | None,
    debias: str | None, progress: Progress | None, heads: Any = None,
) -> dict[str, list[Reading]]:
    rows = read_all_fields(engine, target, texts, calibration=calibration, debias=debias, progress=progress, heads=heads)
    return {name: [row[name] for row in rows] for name in fields}


def fit_field(
    name: str, gold: Sequence[str], readings: Sequence[Reading], options: Sequence[str], *,
    min_mass: float | None, min_probability: float | None, fit_min_mass: bool,
) -> FieldFit:
    offered = set(options)
    usable = [i for i, g in enumerate(gold) if g in offered and readings[i].probabilities]
    distributions = [readings[i].probabilities for i in usable]
    gold_in = [gold[i] for i in usable]
    temperature = fit_temperature(distributions, gold_in)
    scaled = [_scaled(d, temperature) for d in distributions]
    unchanged = sum(metrics.top_label(a) == metrics.top_label(b) for a, b in zip(distributions, scaled))
    if unchanged != len(distributions):
        raise AssertionError(f"temperature scaling changed the winning label of {name!r} on "
                             f"{len(distributions) - unchanged} rows")
    mass_accuracy = None
    if fit_min_mass:
        # A row without a label for this field (calibrating several fields) says nothing about it.
        answered = [i for i, r in enumerate(readings) if r.candidate_mass is not None and gold[i]]
        outcomes: list[bool | None] = [
            (readings[i].predicted == gold[i]) if gold[i] in offered else None for i in answered
        ]
        min_mass, mass_accuracy = metrics.best_abstention_threshold(
            [readings[i].candidate_mass for i in answered], outcomes  # type: ignore[misc]
        )
    return FieldFit(
        field=name,
        rows=len(usable),
        settings=FieldCalibration(
            temperature=temperature, min_candidate_mass=min_mass, min_probability=min_probability, labels=tuple(options)
        ),
        ece_before=_ece(distributions, gold_in),
        ece_after=_ece(scaled, gold_in),
        nll_before=_finite(negative_log_likelihood(distributions, gold_in)),
        nll_after=_finite(negative_log_likelihood(distributions, gold_in, temperature)),
        accuracy=_finite(metrics.accuracy(gold_in, [metrics.top_label(d) for d in distributions])),
        winners_unchanged=unchanged,
        fitted_mass_accuracy=mass_accuracy,
    )


def _scaled(distribution: dict[str, float], temperature: float) -> dict[str, float]:
    labels = list(distribution)
    return dict(zip(labels, temperature_scale(tuple(distribution[k] for k in labels), temperature)))


def _ece(distributions: Sequence[dict[str, float]], gold: Sequence[str]) -> float | None:
    tops = [metrics.top_label(d) for d in distributions]
    confidences = [d[t] for d, t in zip(distributions, tops)]  # type: ignore[index]
    return _finite(expected_calibration_error(confidences, [t == g for t, g in zip(tops, gold)]))


def _finite(value: float) -> float | None:
    return None if value != value else value  # NaN (no rows) -> None

