"""Is one readout better than another on the same rows, or within noise?

A paired bootstrap: the rows are resampled with replacement (seeded), both methods are scored on
each resample, and the 2.5th and 97.5th percentiles of the difference form a 95 % interval. A
method *wins* when the whole interval is above zero, *loses* when it is below, and otherwise the two
*tie*: a difference inside the noise of the sample is not a win.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

from ..stats import metrics

Score = Callable[[Sequence[Hashable], Sequence[Hashable | None]], float]
RESAMPLES = 1000


@dataclass(frozen=True)
class Difference:
    """`score(method) - score(reference)` on the rows, with its bootstrap 95 % interval."""

    difference: float
    low: float
    high: float

    @property
    def verdict(self) -> str:
        if self.low > 0:
            return "win"
        if self.high < 0:
            return "loss"
        return "tie"

    def to_dict(self) -> dict[str, float | str]:
        return {"difference": self.difference, "low": self.low, "high": self.high, "verdict": self.verdict}


def paired_difference(
    gold: Sequence[Hashable], method: Sequence[Hashable | None], reference: Sequence[Hashable | None], *,
    score: Score = metrics.accuracy, resamples: int = RESAMPLES, seed: int = 0,
) -> Difference:
    """The difference of `score` between two methods' predictions on the same rows, with its 95 % interval."""
    n = len(gold)
    if not (n == len(method) == len(reference)) or n == 0:
        raise ValueError(f"paired predictions need the same non-zero number of rows ({n}, {len(method)}, {len(reference)})")
    rng = random.Random(seed)
    differences = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        sample_gold = [gold[i] for i in picks]
        differences.append(score(sample_gold, [method[i] for i in picks]) - score(sample_gold, [reference[i] for i in picks]))
    differences.sort()
    low = differences[int(0.025 * (resamples - 1))]
    high = differences[int(round(0.975 * (resamples - 1)))]
    return Difference(score(gold, method) - score(gold, reference), low, high)
