"""Temperature fitting recovers the temperature synthetic answers were drawn at, and the closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from decisionflow.stats import fit_score_temperature, fit_temperature, negative_log_likelihood, temperature_scale

TRUE_TEMPERATURE = 2.0


def synthetic(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Scores, and gold answers drawn from softmax(scores / TRUE_TEMPERATURE): the scores are overconfident by 2."""
    rng = np.random.default_rng(seed)
    scores = rng.normal(scale=3.0, size=(rows, 4))
    scaled = np.exp(scores / TRUE_TEMPERATURE - (scores / TRUE_TEMPERATURE).max(axis=1, keepdims=True))
    scaled /= scaled.sum(axis=1, keepdims=True)
    gold = np.array([rng.choice(4, p=row) for row in scaled])
    return scores, gold


def test_the_score_fit_recovers_the_generating_temperature():
    scores, gold = synthetic(20000)
    assert fit_score_temperature(scores, gold) == pytest.approx(TRUE_TEMPERATURE, rel=0.05)
    # Answered at the scores' own temperature, the fit finds 1.
    rng = np.random.default_rng(1)
    probabilities = np.exp(scores - scores.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    own = np.array([rng.choice(4, p=row) for row in probabilities])
    assert fit_score_temperature(scores, own) == pytest.approx(1.0, rel=0.05)


def test_a_row_whose_gold_answer_has_no_score_is_left_out():
    scores, gold = synthetic(2000)
    unseen = scores.copy()
    unseen[:, 3] = -np.inf  # an answer no fold's head saw: its rows say nothing about the temperature
    kept = gold != 3
    assert fit_score_temperature(unseen, gold) == fit_score_temperature(unseen[kept], gold[kept])


def test_the_distribution_fit_recovers_the_generating_temperature():
    scores, gold = synthetic(3000)
    probabilities = np.exp(scores - scores.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    distributions = [{str(i): float(p) for i, p in enumerate(row)} for row in probabilities]
    temperature = fit_temperature(distributions, [str(g) for g in gold])
    assert temperature == pytest.approx(TRUE_TEMPERATURE, rel=0.1)


def test_the_distribution_fit_matches_the_closed_form():
    # p(a) = 0.9 on every row, but a is right on 3 of 4 rows: the NLL is least where the scaled
    # p(a) = 1 / (1 + 9^(-1/T)) = 0.75, i.e. 9^(-1/T) = 1/3, 1/T = ln 3 / ln 9 = 1/2, T = 2.
    distributions = [{"a": 0.9, "b": 0.1}] * 4
    gold = ["a", "a", "a", "b"]
    temperature = fit_temperature(distributions, gold)
    assert temperature == pytest.approx(2.0, rel=1e-3)
    assert negative_log_likelihood(distributions, gold, temperature) < negative_log_likelihood(distributions, gold)


def test_the_distribution_fit_sharpens_an_underconfident_readout_and_keeps_winners():
    distributions = [{"x": 0.6, "y": 0.3, "z": 0.1}, {"x": 0.2, "y": 0.5, "z": 0.3}, {"x": 0.4, "y": 0.35, "z": 0.25}]
    gold = ["x", "y", "x"]
    temperature = fit_temperature(distributions, gold)
    assert temperature < 1.0
    for distribution in distributions:
        scaled = temperature_scale(tuple(distribution.values()), temperature)
        assert scaled.index(max(scaled)) == list(distribution.values()).index(max(distribution.values()))


def test_without_usable_rows_the_temperature_is_neutral():
    assert fit_temperature([{"a": 0.5, "b": 0.5}], ["oos"]) == 1.0


def test_temperature_scaling_raises_probabilities_to_one_over_t():
    assert temperature_scale((0.2, 0.8), 1.0) == (0.2, 0.8)
    # T = 1/2 squares then renormalises: 0.04 : 0.64.
    low, high = temperature_scale((0.2, 0.8), 0.5)
    assert (low, high) == pytest.approx((0.04 / 0.68, 0.64 / 0.68))
    assert math.isclose(sum(temperature_scale((0.1, 0.3, 0.6), 3.0)), 1.0)
