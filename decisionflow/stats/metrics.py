"""Quality metrics for closed-set decisions: accuracy, macro-F1, agreement, abstention.

Beside them in `decisionflow.stats`: the calibration metrics (ECE, reliability bins, NLL), temperature
fitting and McNemar's test, which `fitting` and `quality` share. Pure Python (no torch), so results stored as plain lists
of labels and probability dicts can be scored anywhere. Conventions:

- A prediction of `None` (an abstained or invalid answer) is never equal to a gold label.
- Macro-F1 averages the per-label F1 over the labels that occur in the gold list. A gold label that is
  never predicted has F1 0. A predicted label that never occurs in the gold list adds no class of its
  own: it only counts against the recall of the gold label it replaced.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence


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
