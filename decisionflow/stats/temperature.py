"""Temperature fitting: the one factor T that scores are divided by (probabilities raised to 1/T) to
minimise the negative log-likelihood of the gold answers. Scaling never changes which answer wins.

Two entry points, one per form the callers hold, each keeping the search its figures were measured with:

- `fit_temperature`: probability distributions as label -> probability mappings (`decisionflow
  calibrate`, on the engine's readout). A coarse grid over log T, then golden-section search around its
  best point, in pure Python.
- `fit_score_temperature`: a [rows, answers] array of scores with the gold answers' indices (a fitted
  head's out-of-fold scores, `decisionflow fit`). scipy's bounded scalar search over log T; a row whose
  gold answer has no finite score (an answer no fold's head had seen) is left out.

Both minimise the same loss over log T: on 36 synthetic sets of scores (2-7 answers, 5-200 rows) the
two searches' temperatures were within 3e-5 of each other in log T. They stay apart all the same:
folding them into one search would move, in their last digits, the temperatures `calibrate` and `fit`
have written and the figures measured with them.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from .calibration import negative_log_likelihood

LOG_TEMPERATURE_RANGE = (-3.0, 3.0)
"""Where `fit_temperature` searches log T: `calibrate` warns of a temperature at either end."""
SCORE_LOG_BOUNDS = (-4.0, 4.0)
"""Where `fit_score_temperature` searches log T by default."""


def fit_temperature(
    distributions: Sequence[Mapping[str, float]],
    gold: Sequence[str],
    log_range: tuple[float, float] = LOG_TEMPERATURE_RANGE,
) -> float:
    """The temperature T minimising the NLL of the gold labels, searched over log T in `log_range`.

    A coarse grid first, then golden-section search around its best point: the NLL is unimodal in
    log T, and the grid guards against a flat start. Rows whose gold label is not offered are left
    out; with none left, 1.0.
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


def fit_score_temperature(scores: Any, gold: Any, *, log_bounds: tuple[float, float] = SCORE_LOG_BOUNDS) -> float:
    """The temperature with the lowest log-loss of softmax(`scores` / T) at the `gold` indices, searched
    over log T within `log_bounds` (numpy arrays: scores [rows, answers], -inf for an answer a row
    cannot give; gold [rows] of answer indices)."""
    import numpy as np
    from scipy.optimize import minimize_scalar
    from scipy.special import log_softmax

    # A row whose answer no fold's head had seen (a score level with one row) has no finite score to rescale.
    rows = np.flatnonzero(np.isfinite(scores[np.arange(len(gold)), gold]))
    scores, gold = scores[rows], gold[rows]
    rows = np.arange(len(gold))

    def loss(log_temperature: float) -> float:
        return float(-log_softmax(scores / math.exp(log_temperature), axis=1)[rows, gold].mean())

    return math.exp(minimize_scalar(loss, bounds=log_bounds, method="bounded").x)
