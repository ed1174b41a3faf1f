"""Calibration metrics on inputs whose values were worked out by hand, and on synthetic sets whose
calibration is known by construction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from decisionflow.stats import expected_calibration_error, negative_log_likelihood, reliability_bins


def test_expected_calibration_error_four_rows():
    # Bins: 0.95 -> [0.9, 1.0] (acc 1, conf 0.95); 0.85 -> [0.8, 0.9) (acc 0, conf 0.85);
    # 0.65 and 0.62 -> [0.6, 0.7) (acc 0.5, conf 0.635).
    # ECE = 1/4 * 0.05 + 1/4 * 0.85 + 2/4 * 0.135 = 0.0125 + 0.2125 + 0.0675 = 0.2925.
    ece = expected_calibration_error([0.95, 0.85, 0.65, 0.62], [True, False, True, False])
    assert ece == pytest.approx(0.2925)
    assert math.isnan(expected_calibration_error([], []))


def test_perfectly_calibrated_bins_have_zero_error():
    # Ten rows at 0.7 with seven right: the bin's accuracy equals its confidence.
    assert expected_calibration_error([0.7] * 10, [True] * 7 + [False] * 3) == pytest.approx(0.0)


def test_a_synthetic_calibrated_set_is_near_zero_and_an_overconfident_one_is_not():
    rng = np.random.default_rng(0)
    confidences = rng.uniform(0.3, 1.0, size=50000)
    right = rng.random(50000) < confidences  # right exactly as often as it is sure
    assert expected_calibration_error(confidences.tolist(), right.tolist()) < 0.01
    # As sure, but right half as often as it claims: the gap is half the mean confidence (0.65 / 2).
    half = rng.random(50000) < confidences / 2
    assert expected_calibration_error(confidences.tolist(), half.tolist()) == pytest.approx(0.325, abs=0.01)


def test_reliability_bins_edges():
    bins = reliability_bins([0.0, 0.1, 1.0, 0.95], [False, True, True, False])
    assert len(bins) == 10
    assert [b.count for b in bins] == [1, 1, 0, 0, 0, 0, 0, 0, 0, 2]
    assert bins[2].accuracy is None and bins[2].confidence is None
    assert bins[9].accuracy == 0.5 and bins[9].confidence == pytest.approx(0.975)
    assert (bins[0].lower, bins[0].upper) == (0.0, 0.1)
    with pytest.raises(ValueError):
        reliability_bins([1.5], [True])


def test_negative_log_likelihood_of_the_gold_label():
    # -log 0.25 and -log 0.5, averaged.
    assert negative_log_likelihood([{"a": 0.25, "b": 0.75}, {"a": 0.5, "b": 0.5}], ["a", "b"]) == pytest.approx(
        (math.log(4) + math.log(2)) / 2
    )
    # At T = 1/2 the first row's p(a) is 0.0625 / (0.0625 + 0.5625) = 0.1.
    assert negative_log_likelihood([{"a": 0.25, "b": 0.75}], ["a"], 0.5) == pytest.approx(-math.log(0.1))


def test_negative_log_likelihood_skips_unoffered_gold():
    assert negative_log_likelihood([{"a": 0.5, "b": 0.5}, {"a": 0.5, "b": 0.5}], ["a", "oos"]) == pytest.approx(
        math.log(2)
    )
    assert math.isnan(negative_log_likelihood([{"a": 1.0}], ["oos"]))
