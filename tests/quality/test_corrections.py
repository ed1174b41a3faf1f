"""Offline readout corrections, rubric variants and the paired bootstrap (no model)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decisionflow.errors import DataError
from decisionflow.fitting import corrections
from decisionflow.quality.significance import paired_difference
from decisionflow.quality.variants import cyclic_orders, minimal_rubric, reordered_rubric
from decisionflow.runtime.readout.calibration import Calibration, FieldCalibration
from decisionflow.runtime.readout.debias import divide_by_prior
from decisionflow.spec.rubric import Debias
from decisionflow.spec.yaml_rubric import load_rubric
from decisionflow.stats import metrics

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / "workflows").glob("*.yaml"))


def test_dividing_a_stored_distribution_matches_the_engine_arithmetic():
    raw = {"a": 0.7, "b": 0.2, "c": 0.1}
    prior = {"a": 0.6, "b": 0.3, "c": 0.1}
    expected = divide_by_prior([0.7, 0.2, 0.1], [0.6, 0.3, 0.1])
    assert list(corrections.divide(raw, prior).values()) == pytest.approx(list(expected))
    # The label the model favours regardless of the input loses its head start: a 1.17, b 0.67, c 1.0.
    assert metrics.top_label(corrections.divide(raw, prior)) == "a"
    assert metrics.top_label(corrections.divide({"a": 0.5, "b": 0.3, "c": 0.2}, prior)) == "c"


def test_a_pure_position_bias_is_recovered_by_pride_and_cancelled_by_averaging_orders():
    labels = ["x", "y", "z"]
    bias = [0.6, 0.3, 0.1]  # by position
    content = [{"x": 0.2, "y": 0.5, "z": 0.3}, {"x": 0.4, "y": 0.25, "z": 0.35}]
    orders = cyclic_orders(labels, 3)
    assert orders == [["x", "y", "z"], ["y", "z", "x"], ["z", "x", "y"]]

    def observed(row: dict[str, float], order: list[str]) -> dict[str, float]:
        weights = {label: row[label] * bias[order.index(label)] for label in labels}
        total = sum(weights.values())
        return {label: w / total for label, w in weights.items()}

    per_row = [[observed(row, order) for order in orders] for row in content]
    prior = corrections.positional_prior(per_row, orders)
    assert prior == pytest.approx(bias, rel=1e-9)
    for row, readings in zip(content, per_row):
        debiased = corrections.divide_by_position(readings[0], orders[0], prior)
        assert debiased == pytest.approx(row)
        # Averaging over a full cyclic set gives every label every position once: the winner is the content's.
        assert metrics.top_label(corrections.average_orders(readings)) == metrics.top_label(row)


def test_cross_fitted_priors_never_use_the_row_they_correct():
    distributions = [{"a": float(i), "b": 1.0} for i in range(10)]
    folds = corrections.fold_of_rows(10, 2, seed=3)
    assert sorted(folds) == [0] * 5 + [1] * 5
    priors = corrections.cross_fitted_priors(distributions, folds)
    for i, prior in enumerate(priors):
        others = [float(j) for j in range(10) if folds[j] != folds[i]]
        assert prior["a"] == pytest.approx(sum(others) / len(others))
    sampled = corrections.cross_fitted_priors(distributions, folds, sample=2, seed=0)
    assert all(p["b"] == 1.0 for p in sampled)
    with pytest.raises(ValueError, match="two folds"):
        corrections.fold_of_rows(4, 1, seed=0)


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.stem for p in WORKFLOWS])
def test_the_minimal_variant_keeps_fields_labels_and_structure_and_drops_the_prose(path: Path):
    rubric = load_rubric(path)
    minimal = minimal_rubric(rubric)
    assert minimal.instructions == ""
    assert list(minimal.fields) == list(rubric.fields)
    for name, spec in rubric.fields.items():
        assert minimal.field(name).labels == spec.labels
        assert minimal.field(name).question == spec.question
        assert not any(minimal.field(name).description_of(v) for v in minimal.field(name).values)
        assert (minimal.field(name).after, minimal.field(name).when) == (spec.after, spec.when)
    assert (minimal.name, minimal.pin_first, minimal.answer_format) == (rubric.name, rubric.pin_first, rubric.answer_format)


def test_reordering_keeps_descriptions_and_refuses_what_is_not_a_permutation():
    rubric = load_rubric(REPO / "workflows" / "issue_triage.yaml")
    order = ["question", "bug", "feature"]
    reordered = reordered_rubric(rubric, "label", order)
    assert list(reordered.field("label").options) == order
    assert reordered.field("label").options == rubric.field("label").options
    with pytest.raises(DataError, match="each of its 3 labels once"):
        reordered_rubric(rubric, "label", ["bug", "bug", "feature"])


def test_cyclic_orders_spread_each_label_over_positions():
    labels = [f"l{i}" for i in range(77)]
    orders = cyclic_orders(labels, 4)
    assert len(orders) == 4 and orders[0] == labels
    assert [order.index("l0") for order in orders] == [0, 58, 39, 19]  # shifts of 0, 19, 38, 58
    assert cyclic_orders(["a", "b"], 4) == [["a", "b"], ["b", "a"]]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from("abcde")), min_size=1, max_size=40))
def test_the_counted_macro_f1_is_the_textbook_one(pairs):
    gold, predicted = zip(*pairs)

    def textbook(label: str) -> float:
        true_positive = sum(g == p == label for g, p in zip(gold, predicted))
        if not true_positive:
            return 0.0
        precision = true_positive / sum(p == label for p in predicted)
        recall = true_positive / sum(g == label for g in gold)
        return 2 * precision * recall / (precision + recall)

    labels = set(gold)
    assert metrics.macro_f1(gold, predicted) == pytest.approx(sum(map(textbook, labels)) / len(labels))


def test_the_bootstrap_calls_a_clear_gain_a_win_and_noise_a_tie():
    rng = random.Random(0)
    gold = [rng.choice("ab") for _ in range(300)]
    reference = [g if rng.random() < 0.5 else ("b" if g == "a" else "a") for g in gold]
    better = [g if rng.random() < 0.9 else ("b" if g == "a" else "a") for g in gold]
    assert paired_difference(gold, better, reference).verdict == "win"
    assert paired_difference(gold, reference, better).verdict == "loss"
    assert paired_difference(gold, reference, reference).verdict == "tie"
    small = paired_difference(gold[:12], better[:12], reference[:12])
    assert small.low <= small.difference <= small.high


def test_a_calibration_records_its_correction_and_a_domain_prior_needs_labels():
    rubric = load_rubric(REPO / "workflows" / "sentiment.yaml")
    calibration = Calibration(rubric="sentiment", fields={"sentiment": FieldCalibration(
        labels=("positive", "negative"), prior=(0.3, 0.7), debias=Debias.DOMAIN)})
    # Stored in its own label order, read back in the rubric's.
    assert calibration.priors(rubric) == {"sentiment": (0.7, 0.3)}
    assert calibration.corrections() == {"sentiment": Debias.DOMAIN}
    with pytest.raises(ValueError, match="needs a `prior`"):
        FieldCalibration(labels=("a", "b"), debias=Debias.DOMAIN)
    with pytest.raises(ValueError, match="`labels` of the same length"):
        FieldCalibration(prior=(0.5, 0.5))
