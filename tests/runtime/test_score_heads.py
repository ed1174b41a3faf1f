"""A score field's fitted heads on the bundled real model: the ordinal head beside the multinomial one.

The rows are movie-review snippets with their human sentiment rating as a level 0..8
(tests/fixtures/vader_movies_sample.csv). The first 48 have no row at levels 0 and 8: the `score`
field (0..8) still gets both heads (a score's multinomial head needs rows at two levels, not at
every level), and with a minimum of 30 rows per level only the ordinal one; the `level` field (1..7)
is labelled on all 60, which have two rows or more at every one of its levels.
"""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
import torch
from suite_support import FIXTURES

from decisionflow.fitting import fit_heads
from decisionflow.fitting.choosing import MIN_ORDINAL_ROWS, _better_head, _kept_head, _wilcoxon
from decisionflow.fitting.head_fit import FitResult
from decisionflow.fitting.training import ORDINAL_PENALTIES, REGULARISATION_GRID, fit_ordinal, fit_path
from decisionflow.runtime.engine import Engine
from decisionflow.runtime.heads.fitted import Candidate, FieldHeadInfo, Heads
from decisionflow.spec.rubric import Rubric

pytestmark = pytest.mark.model

QUESTION = "How negative or positive the text is, {low} (extremely negative) to {high} (extremely positive)"
RATED = Rubric.model_validate({
    "name": "rated", "instructions": "Rate the sentiment of one short text.", "pin_first": False,
    "fields": {
        "score": {"kind": "score", "question": QUESTION.format(low=0, high=8), "min": 0, "max": 8},
        "level": {"kind": "score", "question": QUESTION.format(low=1, high=7), "min": 1, "max": 7},
    },
})

with (FIXTURES / "vader_movies_sample.csv").open(encoding="utf-8", newline="") as handle:
    ROWS = list(csv.DictReader(handle))
FITTING, HELD_OUT = 48, ROWS[48:]


@pytest.fixture(scope="module")
def fitted(engine: Engine) -> FitResult:
    rows = [(row["text"], {"score": row["score"], "level": row["score"]} if index < FITTING else {"level": row["score"]})
            for index, row in enumerate(ROWS)]
    return fit_heads(engine, RATED, rows)


@pytest.fixture(scope="module")
def ordinal_only(engine: Engine) -> FitResult:
    """No level has 30 rows, so no multinomial head; the ordinal one needs only 10 rows over two levels."""
    return fit_heads(engine, RATED, [(row["text"], {"score": row["score"]}) for row in ROWS[:FITTING]], min_rows_per_label=30)


def test_a_score_field_without_rows_at_some_levels_still_gets_both_heads(fitted: FitResult):
    info = fitted.fields["score"]
    assert info.rows == FITTING and info.rows_per_label["0"] == 0 and info.rows_per_label["8"] == 0
    # Unlike a choice field, a score needs no row at every level: both heads are cross-validated.
    assert set(info.candidates) == {"zero_shot", "fitted", "ordinal"}
    assert info.penalties == ORDINAL_PENALTIES and info.regularisation
    zero_shot = info.candidates["zero_shot"]
    for name in ("fitted", "ordinal"):
        figure = info.candidates[name]
        assert figure.rows == zero_shot.rows == FITTING
        # A score's error is a distance, compared with zero-shot on the paired errors (Wilcoxon):
        # zero-shot is levels off on these rows, either head significantly nearer.
        assert figure.mean_absolute_error < zero_shot.mean_absolute_error, info.candidates
        assert figure.p_vs_zero_shot < 0.05, info.candidates
    kept = info.chosen
    assert info.readout == "fitted" and kept in ("fitted", "ordinal") and "score" in fitted.heads.heads
    other = "ordinal" if kept == "fitted" else "fitted"
    # The nearer head, unless the other is right on (significantly) more rows.
    figures = info.candidates
    assert (figures[kept].mean_absolute_error, -figures[kept].accuracy) <= (
        figures[other].mean_absolute_error, -figures[other].accuracy) or figures[kept].accuracy > figures[other].accuracy


def test_without_enough_rows_for_a_multinomial_head_the_ordinal_one_answers(ordinal_only: FitResult):
    info = ordinal_only.fields["score"]
    assert set(info.candidates) == {"zero_shot", "ordinal"} and info.regularisation == ()
    assert info.head == "ordinal" and info.penalties == ORDINAL_PENALTIES
    assert info.readout == "fitted" and info.chosen == "ordinal" and "score" in ordinal_only.heads.heads
    assert info.candidates["ordinal"].p_vs_zero_shot < 1e-4, info.candidates
    assert info.spread is not None and 0.1 < info.spread < 8, info.spread


def test_with_rows_at_every_level_the_better_head_by_cross_validation_is_kept(fitted: FitResult):
    info = fitted.fields["level"]
    assert info.rows == len(ROWS) and min(info.rows_per_label.values()) >= 2
    assert set(info.candidates) == {"zero_shot", "fitted", "ordinal"}
    figures = {name: info.candidates[name] for name in ("fitted", "ordinal")}
    # The nearer head, unless the other is right on (significantly) more rows.
    nearer = min(figures, key=lambda name: (figures[name].mean_absolute_error, -figures[name].accuracy))
    better = "ordinal" if info.head == "ordinal" else "fitted"
    assert better == nearer or figures[better].accuracy > figures[nearer].accuracy
    zero_shot = info.candidates["zero_shot"]
    wins = figures[better].mean_absolute_error < zero_shot.mean_absolute_error and figures[better].p_vs_zero_shot < 0.05
    assert info.chosen == (better if wins else "zero_shot")
    assert info.regularisation and info.penalties == ORDINAL_PENALTIES


def test_an_ordinal_head_answers_in_the_engine_and_round_trips(engine: Engine, ordinal_only: FitResult, tmp_path):
    fitted = ordinal_only
    texts = [row["text"] for row in HELD_OUT]
    results = engine.decide_many(RATED, texts, heads=fitted.heads)
    for result in results:
        field = result.fields["score"]
        assert field.method == "fitted"
        assert set(field.probabilities) == {str(level) for level in range(9)}
        assert math.isclose(sum(field.probabilities.values()), 1.0, abs_tol=1e-6)
        assert field.value == int(max(field.probabilities, key=field.probabilities.get))
        assert field.zero_shot_probabilities and field.candidate_mass is not None
        # A normal around one predicted level: probabilities fall off on both sides of the answer.
        ordered = [field.probabilities[str(level)] for level in range(9)]
        peak = ordered.index(max(ordered))
        assert all(a <= b for a, b in zip(ordered[:peak], ordered[1:peak + 1]))
        assert all(a >= b for a, b in zip(ordered[peak:], ordered[peak + 1:]))
    # Held-out rows: nearer the raters' level than the zero-shot readout on average.
    gold = [int(row["score"]) for row in HELD_OUT]
    fitted_error = np.mean([abs(r.fields["score"].value - g) for r, g in zip(results, gold)])
    zero_shot = engine.decide_many(RATED, texts)
    zero_shot_error = np.mean([abs(r.fields["score"].value - g) for r, g in zip(zero_shot, gold)])
    assert fitted_error < zero_shot_error, (fitted_error, zero_shot_error)
    path = fitted.heads.save(tmp_path / "rated.heads.safetensors")
    loaded = Heads.load(path)
    assert loaded.metadata.fields["score"].head == "ordinal"
    again = engine.decide_many(RATED, texts, heads=loaded)
    for first, second in zip(results, again):
        assert second.fields["score"].probabilities == pytest.approx(first.fields["score"].probabilities, abs=1e-6)


def test_too_few_score_rows_keep_zero_shot_and_say_what_the_ordinal_head_needs(engine: Engine):
    rows = [(row["text"], {"score": row["score"]}) for row in ROWS[:MIN_ORDINAL_ROWS - 2]]
    result = fit_heads(engine, RATED, rows)
    info = result.fields["score"]
    assert info.readout == "zero_shot" and set(info.candidates) == {"zero_shot"}
    assert f"needs at least {MIN_ORDINAL_ROWS} rows over two levels" in info.note
    assert "2 more rows would let a head be fitted" in info.note
    [warning] = [w for w in result.warnings if "'score'" in w]
    assert warning.startswith("warning: field 'score' keeps the zero-shot readout") and "8 labelled rows" in warning


def test_the_ordinal_head_is_a_normal_over_the_levels_around_its_prediction():
    generator = np.random.default_rng(0)
    features = generator.normal(size=(200, 6)).astype(np.float32)
    values = np.arange(0.0, 9.0)
    target = np.clip(4 + 2 * features[:, 0] - features[:, 1], 0, 8)
    regression = fit_ordinal(features, target)
    spread = 0.8
    head = regression.head(values, spread)
    predicted = regression.predict(features[:5])
    for row, centre in zip(features[:5], predicted):
        got = torch.softmax(head.weight @ ((torch.tensor(row) - head.mean) / head.scale) + head.bias, dim=0).double()
        expected = torch.softmax(torch.tensor(-(values - centre) ** 2 / (2 * spread ** 2)), dim=0)
        assert torch.allclose(got, expected, atol=1e-4)
        assert int(got.argmax()) == int(np.abs(values - centre).argmin())
    # The regression follows the target (a linear one here), so its predictions are close to it.
    assert np.corrcoef(regression.predict(features), target)[0, 1] > 0.95


def test_the_nearer_head_is_kept_unless_the_other_is_right_significantly_more_often():
    def figure(errors: list[int]) -> Candidate:
        return Candidate(accuracy=errors.count(0) / len(errors), low=0.0, high=1.0, rows=len(errors),
                         mean_absolute_error=sum(errors) / len(errors))

    # Nearer on average, and right on about as many rows: the nearer head stays.
    errors = {"fitted": [0] * 14 + [3] * 26, "ordinal": [0] * 12 + [1] * 28}
    candidates = {name: figure(e) for name, e in errors.items()}
    assert candidates["fitted"].accuracy > candidates["ordinal"].accuracy
    assert _better_head(candidates, errors, 0.05) == "ordinal"
    assert _better_head(candidates, errors, 1.0) == "fitted"  # --significance 1: any win
    # As near, and right on 8 more rows with no row the other gets right: significantly more accurate.
    errors = {"fitted": [0] * 20 + [2] * 10 + [3] * 10, "ordinal": [0] * 12 + [1] * 8 + [2] * 20}
    candidates = {name: figure(e) for name, e in errors.items()}
    assert candidates["ordinal"].mean_absolute_error < candidates["fitted"].mean_absolute_error
    assert _better_head(candidates, errors, 0.05) == "fitted"
    # A choice field's only head is its head.
    assert _better_head({"fitted": figure([0, 1])}, {"fitted": None}, 0.05) == "fitted"


def test_a_multinomial_score_head_never_answers_a_level_it_saw_no_row_of():
    generator = np.random.default_rng(0)
    features = generator.normal(size=(60, 4))
    gold = np.repeat([1, 2, 4], 20)  # levels 0, 3 and 5..8 have no rows
    features[:, 0] += gold
    head = fit_path(features, gold, REGULARISATION_GRID).head(1.0, 9)
    assert tuple(head.weight.shape) == (9, 4)
    for row in features[:5]:
        probabilities = head.probabilities(torch.tensor(row, dtype=torch.float32), None, range(9))
        assert math.isclose(sum(probabilities), 1.0, abs_tol=1e-6)
        assert all(probabilities[level] < 1e-12 for level in (0, 3, 5, 6, 7, 8))


def test_the_kept_head_is_one_that_beats_zero_shot():
    def figure(errors: list[int], baseline: list[int] | None = None) -> Candidate:
        p = None if baseline is None else _wilcoxon(errors, baseline)
        return Candidate(accuracy=errors.count(0) / len(errors), low=0.0, high=1.0, rows=len(errors),
                         mean_absolute_error=sum(errors) / len(errors), p_vs_zero_shot=p)

    zero_shot = [0] * 10 + [2] * 30
    # The multinomial head is more often right but no nearer than zero-shot; the ordinal one is nearer.
    errors = {"fitted": [0] * 16 + [3] * 24, "ordinal": [0] * 12 + [1] * 28}
    candidates = {"zero_shot": figure(zero_shot), **{name: figure(e, zero_shot) for name, e in errors.items()}}
    assert candidates["fitted"].accuracy > candidates["ordinal"].accuracy
    assert candidates["fitted"].mean_absolute_error > candidates["zero_shot"].mean_absolute_error
    assert _kept_head(candidates, errors, score=True, significance=0.05) == ("ordinal", True)
    # Neither beats zero-shot: the more accurate is reported as the one that fell short.
    errors = {"fitted": [0] * 16 + [3] * 24, "ordinal": [0] * 8 + [2] * 32}
    candidates = {"zero_shot": figure(zero_shot), **{name: figure(e, zero_shot) for name, e in errors.items()}}
    assert _kept_head(candidates, errors, score=True, significance=0.05) == ("fitted", False)


def test_metadata_of_heads_without_score_additions_is_written_as_before_them():
    # A reader from before the ordinal head refuses unknown keys: a file with no score field must not
    # carry them, and a file with one round-trips them.
    plain = FieldHeadInfo(labels=("a", "b"), readout="fitted", candidates={
        "zero_shot": Candidate(accuracy=0.5, low=0.1, high=0.9, rows=4)})
    written = json.loads(plain.model_dump_json())
    assert not {"head", "penalties", "spread"} & set(written)
    assert "mean_absolute_error" not in written["candidates"]["zero_shot"]
    ordinal = plain.model_copy(update={"head": "ordinal", "penalties": ORDINAL_PENALTIES, "spread": 1.5})
    assert FieldHeadInfo.model_validate_json(ordinal.model_dump_json()) == ordinal
    assert FieldHeadInfo.model_validate_json(plain.model_dump_json()) == plain
