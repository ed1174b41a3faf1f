"""Quality metrics for closed-set decisions: accuracy, macro-F1, calibration, agreement, abstention.

Pure Python (no torch), so results stored as plain lists of labels and probability dicts can be
scored anywhere. Conventions:

- A prediction of `None` (an abstained or invalid answer) is never equal to a gold label.
- Macro-F1 averages the per-label F1 over the labels that occur in the gold list. A gold label that is
  never predicted has F1 0. A predicted label that never occurs in the gold list adds no class of its
  own: it only counts against the recall of the gold label it replaced.
- Expected calibration error uses equal-width confidence bins [0, 0.1), [0.1, 0.2), ..., [0.9, 1.0];
  a confidence of exactly 1.0 falls in the last bin. Confidence is the probability of the predicted
  label; ECE = sum over bins of |bin| / n * |accuracy(bin) - mean confidence(bin)|.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence

from ..runtime.readout.calibration import temperature_scale

DEFAULT_BINS = 10
LOG_TEMPERATURE_RANGE = (-3.0, 3.0)


def accuracy(gold: Sequence[Hashable], predicted: Sequence[Hashable | None]) -> float:
    """Fraction of rows whose prediction equals the gold label."""
    _same_length(gold, predicted)
    if not gold:
        return math.nan
    return sum(g == p for g, p in zip(gold, predicted)) / len(gold)


def macro_f1(gold: Sequence[Hashable], predicted: Sequence[Hashable | None]) -> float:
    """Mean F1 over the labels present in `gold` (see the module docstring for the convention)."""
    _same_length(gold, predicted)
    gold_count = Counter(gold)
    if not gold_count:
        return math.nan
    predicted_count = Counter(predicted)
    hits = Counter(g for g, p in zip(gold, predicted) if g == p)
    # F1 = 2PR / (P + R) = 2 TP / (|predicted as label| + |gold label|); counted in one sweep, so
    # a paired bootstrap can score thousands of resamples.
    scores = [2 * hits[label] / (count + predicted_count[label]) for label, count in gold_count.items()]
    return sum(scores) / len(scores)


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


def agreement(first: Mapping[str, object], second: Mapping[str, object]) -> float | None:
    """Fraction of fields with equal answers, over the fields present in both; None if none are."""
    shared = [name for name in first if name in second]
    if not shared:
        return None
    return sum(first[name] == second[name] for name in shared) / len(shared)


@dataclass(frozen=True)
class Selective:
    threshold: float
    coverage: float
    """Fraction of rows answered (confidence at or above the threshold)."""
    accuracy: float | None
    """Accuracy on the answered rows; None when none is answered."""


def selective_prediction(confidences: Sequence[float], correct: Sequence[bool], threshold: float) -> Selective:
    """Coverage and accuracy when rows whose confidence is below `threshold` abstain."""
    _same_length(confidences, correct)
    kept = [bool(c) for conf, c in zip(confidences, correct) if conf >= threshold]
    return Selective(
        threshold=threshold,
        coverage=len(kept) / len(confidences) if confidences else math.nan,
        accuracy=sum(kept) / len(kept) if kept else None,
    )


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


def fit_temperature(
    distributions: Sequence[Mapping[str, float]],
    gold: Sequence[str],
    log_range: tuple[float, float] = LOG_TEMPERATURE_RANGE,
) -> float:
    """The temperature T minimising the NLL of the gold labels, searched over log T in `log_range`.

    A coarse grid first, then golden-section search around its best point: the NLL is unimodal in
    log T, and the grid guards against a flat start. Scaling never changes which label wins.
    """
    if not any(label in d for d, label in zip(distributions, gold)):
        return 1.0
    low, high = log_range

    def loss(log_t: float) -> float:
        return negative_log_likelihood(distributions, gold, math.exp(log_t))

    steps = 24
    grid = [low + (high - low) * i / steps for i in range(steps + 1)]
    best = min(range(len(grid)), key=lambda i: loss(grid[i]))
    a, b = grid[max(best - 1, 0)], grid[min(best + 1, steps)]
    ratio = (math.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    loss_c, loss_d = loss(c), loss(d)
    while b - a > 1e-4:
        if loss_c <= loss_d:
            b, d, loss_d = d, c, loss_c
            c = b - ratio * (b - a)
            loss_c = loss(c)
        else:
            a, c, loss_c = c, d, loss_d
            d = a + ratio * (b - a)
            loss_d = loss(d)
    candidates = [grid[best], (a + b) / 2]
    return math.exp(min(candidates, key=loss))


def top_label(distribution: Mapping[str, float]) -> str | None:
    """The most probable label (the first on a tie, as the engine picks it); None when empty."""
    if not distribution:
        return None
    return max(distribution, key=distribution.__getitem__)


def _same_length(first: Sequence, second: Sequence) -> None:
    if len(first) != len(second):
        raise ValueError(f"length mismatch: {len(first)} vs {len(second)}")


def best_abstention_threshold(scores: Sequence[float], outcomes: Sequence[bool | None]) -> tuple[float, float]:
    """The threshold on `scores` that maximises accuracy when rows scoring below it abstain.

    `outcomes` per row: True (in scope, answered right), False (in scope, wrong), None (out of scope:
    right only when it abstains). Returns (threshold, accuracy); on a tie the lowest threshold wins,
    so nothing abstains without a reason. Candidates are 0 and every row's own score.
    """
    _same_length(scores, outcomes)
    if not scores:
        return 0.0, math.nan
    best = (0.0, -1.0)
    for threshold in sorted({0.0, *scores}):
        right = sum(
            (outcome is None and score < threshold) or (outcome is True and score >= threshold)
            for score, outcome in zip(scores, outcomes)
        )
        if right / len(scores) > best[1]:
            best = (threshold, right / len(scores))
    return best


def mcnemar_exact(only_first: int, only_second: int) -> float:
    """McNemar's exact two-sided p for paired answers: of the rows only one method got right, how
    unlikely a split this uneven is if both were equally good (a binomial test at 1/2)."""
    discordant = only_first + only_second
    if discordant == 0:
        return 1.0
    smaller = min(only_first, only_second)
    tail = sum(math.comb(discordant, k) for k in range(smaller + 1)) / 2 ** discordant
    return min(1.0, 2 * tail)
