"""Readout corrections applied to stored distributions, for measuring them side by side.

The engine applies a correction while it decides (`runtime.readout.debias`). A field read in the first
round of its plan (a rubric's pinned first field, or any field that reads no other field's answer)
has a raw distribution that no correction can change, so every correction of it can be computed
exactly from one raw run; these functions do that, on distributions stored as `{label: probability}`.

- `mean_prior` and `divide`: contextual calibration (Zhao et al., 2021) with content-free inputs,
  or domain-context calibration (Fei et al., 2023) with unlabelled in-domain inputs.
- `average_orders`: permutation debiasing by averaging the distributions read under several
  option orders (Zheng et al., 2023, the "permute" baseline of PriDe).
- `positional_prior` and `divide_by_position`: PriDe (Zheng et al., 2023): a prior over option
  positions estimated from a few rows read under cyclic orders, divided out of the rest.
- `cross_fitted_priors`: a domain prior per row from the other folds only, so a prior is never
  estimated on the row it corrects.
"""

from __future__ import annotations

import math
import random
from typing import Mapping, Sequence

from ..runtime.readout.debias import divide_by_prior

Distribution = Mapping[str, float]


def mean_prior(distributions: Sequence[Distribution]) -> dict[str, float]:
    """The mean of several distributions over the same labels (the labels of the first)."""
    if not distributions:
        raise ValueError("a prior needs at least one distribution")
    labels = list(distributions[0])
    return {label: sum(d[label] for d in distributions) / len(distributions) for label in labels}


def divide(distribution: Distribution, prior: Distribution, strength: float = 1.0) -> dict[str, float]:
    """`p(label) / prior(label)^strength`, renormalised, exactly as the engine does (`runtime.readout.debias`)."""
    labels = list(distribution)
    divided = divide_by_prior([distribution[k] for k in labels], [prior[k] for k in labels], strength)
    return dict(zip(labels, divided))


def average_orders(per_order: Sequence[Distribution]) -> dict[str, float]:
    """One row's distributions read under several option orders, averaged label by label."""
    return mean_prior(per_order)


def positional_prior(per_row_orders: Sequence[Sequence[Distribution]], orders: Sequence[Sequence[str]]) -> list[float]:
    """PriDe's prior over option positions, from rows each read under every order in `orders`.

    Per row: the log-probability found at each position, averaged over the orders (under a full
    cyclic set every label visits every position once, so the content cancels), softmax-normalised;
    then averaged over the rows. With fewer orders than labels the content cancels only in part.
    """
    if not per_row_orders:
        raise ValueError("a positional prior needs at least one row")
    width = len(orders[0])
    totals = [0.0] * width
    for readings in per_row_orders:
        logs = [
            sum(math.log(max(readings[k][order[position]], 1e-300)) for k, order in enumerate(orders)) / len(orders)
            for position in range(width)
        ]
        top = max(logs)
        weights = [math.exp(x - top) for x in logs]
        norm = sum(weights)
        for position, weight in enumerate(weights):
            totals[position] += weight / norm
    return [total / len(per_row_orders) for total in totals]


def divide_by_position(distribution: Distribution, order: Sequence[str], prior: Sequence[float]) -> dict[str, float]:
    """A distribution read with the options in `order`, divided by the prior of each label's position."""
    return divide(distribution, {label: prior[position] for position, label in enumerate(order)})


def fold_of_rows(count: int, folds: int, seed: int) -> list[int]:
    """A balanced, seeded assignment of `count` rows to `folds` folds."""
    if folds < 2:
        raise ValueError("cross-fitting needs at least two folds")
    positions = list(range(count))
    random.Random(seed).shuffle(positions)
    assignment = [0] * count
    for rank, row in enumerate(positions):
        assignment[row] = rank % folds
    return assignment


def cross_fitted_priors(
    distributions: Sequence[Distribution], folds: Sequence[int], *, sample: int | None = None, seed: int = 0
) -> list[dict[str, float]]:
    """Per row, the mean distribution over rows of the other folds (or a seeded `sample` of them)."""
    rng = random.Random(seed)
    by_fold = {}
    for fold in sorted(set(folds)):
        others = [d for d, f in zip(distributions, folds) if f != fold]
        if sample is not None and sample < len(others):
            others = rng.sample(others, sample)
        by_fold[fold] = mean_prior(others)
    return [by_fold[fold] for fold in folds]
