"""The heads' models, fitted on one field's features:

- the multinomial head: a logistic regression (scikit-learn) at each strength of a regularisation
  path, averaged into one linear head (`fit_path`), its scores divided by one temperature fitted on
  the out-of-fold scores (`stats.fit_score_temperature`);
- the ordinal head of a score field: the level regressed on the same features (ridge, averaged over a
  path of penalties), read as a normal distribution over the levels whose width is fitted on the
  out-of-fold predictions (`fit_ordinal`, `fit_spread`); also a linear head, applied the same way;
- the fusion: non-negative weights of the members' log-probabilities (hidden-state head, n-gram head,
  zero-shot readout, input-mean head) fitted on the out-of-fold rows (`fit_fusion`).

Which of them a field keeps is chosen by cross-validation (`choosing`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ..runtime.heads.fitted import FieldHead
from ..stats import SCORE_LOG_BOUNDS, fit_score_temperature

REGULARISATION_GRID = (0.001, 0.003, 0.01, 0.03, 0.1)
"""The inverse regularisation strengths C of the path whose heads are averaged (features are
standardised; on the development sets the best single C was 0.001-0.1: docs/fitting.md)."""
TOLERANCE = 1e-4
"""The optimiser's stopping tolerance. At 1e-3 (and 300 steps) the regressions stopped short of their
optimum, where the answers depend on the optimiser's path: two fits on features differing only in
rounding disagreed on 3.9 % of CLINC150's dev rows, against 1.2 % converged (docs/fitting.md)."""
MAX_ITERATIONS = 1000
ORDINAL_PENALTIES = (10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)
"""The ridge penalties whose regressions a score field's ordinal head averages (standardised features;
docs/fitting.md, "Score fields")."""
UNSEEN_BIAS = -1e4
"""The bias of a score level a multinomial head saw no row of: its probability is nothing, not NaN."""
TEMPERATURE_LOG_BOUNDS = SCORE_LOG_BOUNDS
"""Where the head's temperature is searched (log, -4 to 4): a fit that ends at the lower end is warned about."""


@dataclass
class PathHead:
    """The logistic regressions of a regularisation path, averaged: one linear map on standardised features."""

    mean: Any
    scale: Any
    weight: Any  # [answers, features]
    bias: Any  # [answers]
    classes: Any

    def scores(self, features: Any) -> Any:
        """[rows, answers]: one column per class this path saw, in `classes` order."""
        return ((features - self.mean) / self.scale) @ self.weight.T + self.bias

    def head(self, temperature: float = 1.0, answers: int | None = None) -> FieldHead:
        """As a head over `answers` answers (default: the classes seen); an answer without rows gets no
        weight and a bias that keeps its probability at nothing."""
        import numpy as np

        weight, bias = self.weight / temperature, self.bias / temperature
        if answers is not None and answers != len(self.classes):
            weight_all, bias_all = np.zeros((answers, weight.shape[1])), np.full(answers, UNSEEN_BIAS)
            weight_all[self.classes], bias_all[self.classes] = weight, bias
            weight, bias = weight_all, bias_all

        def tensor(array: Any) -> torch.Tensor:
            return torch.tensor(array, dtype=torch.float32)

        return FieldHead(tensor(weight), tensor(bias), tensor(self.mean), tensor(self.scale))


def fit_path(features: Any, gold: Any, regularisation: Sequence[float]) -> PathHead:
    """One multinomial logistic regression per C of `regularisation`, on standardised features, each
    starting where the previous (more regularised) one stopped, and their scores averaged.

    Averaging instead of keeping the cross-validated best C: the best C's accuracy is flat near its
    peak, so which C wins moved with the folds' shuffle and with the features' last bits (a refit
    under another shuffle changed up to 10 % of dev answers, bfloat16 against float32 up to 26 %),
    while the averaged head's answers did not move, at the same accuracy (docs/fitting.md)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(features)
    standard = scaler.transform(features)
    regression = LogisticRegression(max_iter=MAX_ITERATIONS, tol=TOLERANCE, warm_start=True)
    weight, bias = 0.0, 0.0
    for c in sorted(regularisation):
        regression.set_params(C=c).fit(standard, gold)
        coef, intercept = regression.coef_, regression.intercept_
        if coef.shape[0] == 1:  # two answers: scikit-learn keeps one row; as two, the softmax is its sigmoid
            coef, intercept = np.concatenate([-coef / 2, coef / 2]), np.concatenate([-intercept / 2, intercept / 2])
        weight, bias = weight + coef, bias + intercept
    count = len(regularisation)
    return PathHead(scaler.mean_, scaler.scale_, weight / count, bias / count, regression.classes_)


@dataclass
class OrdinalHead:
    """Ridge regressions of a score's level on standardised features, averaged over `ORDINAL_PENALTIES`."""

    mean: Any
    scale: Any
    weight: Any  # [features]
    bias: float

    def predict(self, features: Any) -> Any:
        return ((features - self.mean) / self.scale) @ self.weight + self.bias

    def head(self, levels: Any, spread: float) -> FieldHead:
        """As a linear head: a normal distribution of width `spread` around the predicted level, over the
        levels, is a softmax of (level * predicted - level**2 / 2) / spread**2, linear in the features.
        Levels are centred first so the quadratic term stays small in float32."""
        centre = (float(levels.min()) + float(levels.max())) / 2
        offsets = levels - centre
        variance = spread * spread
        weight = offsets[:, None] * self.weight[None, :] / variance
        bias = (offsets * (self.bias - centre) - offsets * offsets / 2) / variance
        return FieldHead(*(torch.tensor(a, dtype=torch.float32) for a in (weight, bias, self.mean, self.scale)))


def fit_ordinal(features: Any, values: Any) -> OrdinalHead:
    """The ordinal head's regression: one ridge regression of the level per penalty, averaged (as the
    multinomial head averages its path)."""
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(features)
    standard = scaler.transform(features)
    weight, bias = 0.0, 0.0
    for penalty in ORDINAL_PENALTIES:
        regression = Ridge(alpha=penalty).fit(standard, values)
        weight, bias = weight + regression.coef_, bias + float(regression.intercept_)
    count = len(ORDINAL_PENALTIES)
    return OrdinalHead(scaler.mean_, scaler.scale_, weight / count, bias / count)


def fit_spread(predicted: Any, gold: Any, values: Any) -> float:
    """The ordinal head's width in levels: the normal around each out-of-fold prediction, taken over the
    levels, is a softmax of -(level - predicted)**2 / 2 at temperature width**2, fitted as the
    multinomial head's temperature is (`stats.fit_score_temperature`)."""
    import numpy as np

    distance = (values[None, :] - predicted[:, None]) ** 2
    return math.sqrt(fit_score_temperature(-distance / 2, np.asarray(gold), log_bounds=(-8.0, 12.0)))


def out_of_fold(fit: Callable[[Any, Any], Any], x: Any, gold: Any, folded: Sequence[tuple[Any, Any]], answers: int) -> Any:
    """[rows, answers]: each row's scores from the model `fit(x, gold)` fitted without its fold (anything with
    `classes` and `scores`); an answer the fold's rows lacked scores -inf."""
    import numpy as np

    held = np.full((len(gold), answers), -np.inf)
    for train, test in folded:
        model = fit(x[train], gold[train])
        held[np.ix_(test, model.classes)] = model.scores(x[test])
    return held


FUSION_START = (1.0, 1.0, 0.1)
"""Where the search for the hidden-state head's, the n-gram head's and the zero-shot readout's weights starts."""
MEAN_FUSION_START = 1.0
"""Where the search for the input-mean head's weight starts (as the benchmarks' members study started it)."""
FUSION_ITERATIONS_PER_MEMBER = 200


def fit_fusion(parts: Sequence[Any], gold: Any, *, start: Sequence[float] | None = None) -> tuple[float, ...]:
    """The weights of the members' log-probabilities (`parts`, each [rows, answers]) whose weighted sum has
    the lowest log-loss on the out-of-fold rows (non-negative, fitted together; a row some member gives
    no finite score to is left out). The fit fuses the hidden-state head, the n-gram head, the zero-shot
    readout and the input-mean head: on BANKING77's training rows 0.58, 0.34, 0.03, 0.14 (without the
    input-mean head 0.67, 0.38, 0.03)."""
    import numpy as np
    from scipy.optimize import minimize

    rows = np.arange(len(gold))
    finite = np.all([np.isfinite(part[rows, gold]) for part in parts], axis=0)
    kept, gold = [part[finite] for part in parts], gold[finite]
    picked = np.arange(len(gold))

    def loss(weights: Any) -> float:
        combined = fused(np.abs(weights), *kept)
        return float(-row_log_softmax(combined)[picked, gold].mean())

    found = minimize(loss, x0=np.array(start if start is not None else [1.0] * len(parts)), method="Nelder-Mead",
                     options={"maxiter": FUSION_ITERATIONS_PER_MEMBER * len(parts), "xatol": 1e-4})
    return tuple(float(weight) for weight in np.abs(found.x))


def fused(weights: Sequence[float], *parts: Any) -> Any:
    """The members' log-probabilities weighted and summed; an answer no member can give stays impossible."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        combined = sum(weight * part for weight, part in zip(weights, parts))
    return np.nan_to_num(combined, nan=-np.inf)


def row_log_softmax(scores: Any) -> Any:
    from scipy.special import log_softmax

    return log_softmax(scores, axis=1)
