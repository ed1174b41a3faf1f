"""Metrics on small inputs whose expected values were worked out by hand (shown in the comments)."""

from __future__ import annotations

import math

import pytest

from decisionflow.stats.metrics import (
    accuracy,
    agreement,
    best_abstention_threshold,
    macro_f1,
    selective_prediction,
    top_label,
)


def test_accuracy_counts_none_as_wrong():
    assert accuracy(["a", "b", "c", "a"], ["a", "b", None, "b"]) == 0.5
    assert math.isnan(accuracy([], []))
    with pytest.raises(ValueError):
        accuracy(["a"], [])


def test_macro_f1_over_gold_labels():
    # a: P 1/1, R 1/2 -> 2/3;  b: P 1/3, R 1/1 -> 1/2;  c: never predicted -> 0.  Mean = 7/18.
    assert macro_f1(["a", "a", "b", "c"], ["a", "b", "b", "b"]) == pytest.approx(7 / 18)


def test_macro_f1_ignores_labels_only_predicted():
    # `z` is not a gold label, so it is not a class: a and b both have F1 0 here.
    assert macro_f1(["a", "b"], [None, "z"]) == 0.0
    # Perfect on a, b; the stray `z` prediction only costs c its recall: c has F1 0 -> (1 + 1 + 0) / 3.
    assert macro_f1(["a", "b", "c"], ["a", "b", "z"]) == pytest.approx(2 / 3)


def test_agreement_over_shared_fields():
    assert agreement({"a": 1, "b": 2, "c": 3}, {"a": 1, "b": 5, "d": 0}) == 0.5
    assert agreement({"a": 1}, {"b": 1}) is None


def test_selective_prediction():
    confidences, correct = [0.9, 0.8, 0.3, 0.2], [True, True, False, True]
    high = selective_prediction(confidences, correct, 0.5)
    assert (high.coverage, high.accuracy) == (0.5, 1.0)
    low = selective_prediction(confidences, correct, 0.25)
    assert low.coverage == 0.75 and low.accuracy == pytest.approx(2 / 3)
    assert selective_prediction(confidences, correct, 0.95).accuracy is None


def test_top_label_breaks_ties_by_order():
    assert top_label({"a": 0.5, "b": 0.5}) == "a"
    assert top_label({}) is None


def test_best_abstention_threshold():
    # Scores with outcomes: 0.9 right, 0.6 right, 0.4 wrong, 0.3 out of scope, 0.1 out of scope.
    # Threshold 0.6 abstains on 0.4, 0.3 and 0.1: right = 2 answered + 2 out-of-scope abstained = 4/5.
    # (At 0.4: 2 + 2 = 4/5 too, since the wrong 0.4 row is answered; the lower one, 0.4, wins the tie.)
    threshold, accuracy_at = best_abstention_threshold([0.9, 0.6, 0.4, 0.3, 0.1], [True, True, False, None, None])
    assert (threshold, accuracy_at) == (0.4, 0.8)
    # Nothing out of scope: abstaining never helps, so the threshold stays 0.
    assert best_abstention_threshold([0.2, 0.8], [True, False]) == (0.0, 0.5)


def test_a_temperature_at_either_end_of_its_search_is_warned_about():
    from decisionflow.fitting.temperatures import FieldFit
    from decisionflow.runtime.readout.calibration import FieldCalibration
    from decisionflow.stats import LOG_TEMPERATURE_RANGE

    def fit(temperature: float, after_head: bool = False) -> FieldFit:
        return FieldFit(field="team", rows=40, settings=FieldCalibration(temperature=temperature, after_head=after_head),
                        ece_before=0.1, ece_after=0.05, nll_before=0.5, nll_after=0.4, accuracy=0.9, winners_unchanged=40)

    low, high = (math.exp(bound) for bound in LOG_TEMPERATURE_RANGE)
    assert fit(1.3).warning is None and fit(low * 1.01).warning is None
    assert "too few or too easy rows" in fit(low).warning
    assert fit(low, after_head=True).warning.endswith("calibrate a head on rows it was not fitted on)")
    assert "hardly better than chance" in fit(high).warning


def test_a_row_without_a_label_for_the_field_is_left_out_of_its_fit():
    from decisionflow.fitting.readings import Reading
    from decisionflow.fitting.temperatures import fit_field

    def reading(top: str, p: float, mass: float) -> Reading:
        other = "b" if top == "a" else "a"
        return Reading(predicted=top, probabilities={top: p, other: 1 - p}, candidate_mass=mass)

    readings = [reading("a", 0.9, 0.8), reading("b", 0.7, 0.2), reading("a", 0.6, 0.5), reading("b", 0.8, 0.05)]
    gold = ["a", "a", "b", "b"]
    options = ["a", "b"]
    alone = fit_field("f", gold, readings, options, min_mass=None, min_probability=None, fit_min_mass=True)
    with_gap = fit_field("f", gold + [""], readings + [reading("a", 0.99, 0.01)], options,
                         min_mass=None, min_probability=None, fit_min_mass=True)
    assert with_gap.rows == alone.rows == 4
    assert with_gap.settings == alone.settings and with_gap.fitted_mass_accuracy == alone.fitted_mass_accuracy
