"""Calibration metrics: how far a readout's confidence is from how often it is right.

Pure Python (no torch), so results stored as plain lists of probabilities can be scored anywhere.
Expected calibration error uses equal-width confidence bins [0, 0.1), [0.1, 0.2), ..., [0.9, 1.0];
a confidence of exactly 1.0 falls in the last bin. Confidence is the probability of the predicted
label; ECE = sum over bins of |bin| / n * |accuracy(bin) - mean confidence(bin)|. The negative
log-likelihood is of the gold label after temperature scaling (`temperature_scale`, the scaling the
engine applies to a calibrated field).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

DEFAULT_BINS = 10


@dataclass(frozen=True)
class ReliabilityBin:
    lower: float
    upper: float
    count: int
    accuracy: float | None
    """None for an empty bin."""
    confidence: float | None
    """Mean confidence of the bin's rows; None for an empty bin."""


def reliability_bins(
    confidences: Sequence[float], correct: Sequence[bool], bins: int = DEFAULT_BINS
) -> list[ReliabilityBin]:
    """Rows grouped into equal-width confidence bins: the data of a reliability diagram."""
    _same_length(confidences, correct)
    members: list[list[int]] = [[] for _ in range(bins)]
    for index, confidence in enumerate(confidences):
        members[_bin_of(confidence, bins)].append(index)
    result = []
    for b, rows in enumerate(members):
        result.append(
            ReliabilityBin(
                lower=b / bins,
                upper=(b + 1) / bins,
                count=len(rows),
                accuracy=sum(bool(correct[i]) for i in rows) / len(rows) if rows else None,
                confidence=sum(confidences[i] for i in rows) / len(rows) if rows else None,
            )
        )
    return result


def expected_calibration_error(
    confidences: Sequence[float], correct: Sequence[bool], bins: int = DEFAULT_BINS
) -> float:
    """ECE with `bins` equal-width bins; NaN for no rows."""
    if not confidences:
        return math.nan
    n = len(confidences)
    return sum(
        b.count / n * abs(b.accuracy - b.confidence)  # type: ignore[operator]
        for b in reliability_bins(confidences, correct, bins)
        if b.count
    )


def _bin_of(confidence: float, bins: int) -> int:
    if not 0.0 <= confidence <= 1.0 + 1e-9:
        raise ValueError(f"confidence {confidence!r} is outside [0, 1]")
    return min(int(confidence * bins), bins - 1)


def temperature_scale(probabilities: tuple[float, ...], temperature: float) -> tuple[float, ...]:
    """p_i^(1/T), renormalised: the order of the answers (and so the winner) never changes."""
    if temperature == 1.0:
        return probabilities
    logs = [math.log(max(p, 1e-300)) / temperature for p in probabilities]
    top = max(logs)
    weights = [math.exp(x - top) for x in logs]
    total = sum(weights)
    return tuple(w / total for w in weights)


def negative_log_likelihood(
    distributions: Sequence[Mapping[str, float]], gold: Sequence[str], temperature: float = 1.0
) -> float:
    """Mean -log p(gold) after temperature scaling; rows whose gold label is not offered are skipped."""
    _same_length(distributions, gold)
    total, counted = 0.0, 0
    for distribution, label in zip(distributions, gold):
        if label not in distribution:
            continue
        labels = list(distribution)
        scaled = temperature_scale(tuple(distribution[k] for k in labels), temperature)
        total -= math.log(max(scaled[labels.index(label)], 1e-300))
        counted += 1
    return total / counted if counted else math.nan


def _same_length(first: Sequence, second: Sequence) -> None:
    if len(first) != len(second):
        raise ValueError(f"length mismatch: {len(first)} vs {len(second)}")
