"""`decisionflow eval` and `calibrate`: labelled CSV handling, scoring, and short runs on the real model."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from suite_support import FIXTURES
from typer.testing import CliRunner

from decisionflow.cli import app
from decisionflow.quality.comparisons import score_flips, shuffled_rubric
from decisionflow.quality.evaluate import (
    Reading,
    markdown_report,
    score_abstention,
    score_baseline,
    score_readings,
)
from decisionflow.quality.labelled import (
    DataError,
    label_columns,
    label_of,
    load_labelled,
    parse_slice,
    resolve_fields,
    select_rows,
)
from decisionflow.runtime.readout.calibration import Calibration
from decisionflow.spec.yaml_rubric import load_rubric

REPO = Path(__file__).resolve().parents[2]
SENTIMENT = REPO / "workflows" / "sentiment.yaml"
runner = CliRunner()


BANKING = REPO / "workflows" / "banking77_intent.yaml"
BANKING_ROWS = FIXTURES / "banking77_sample.csv"


@pytest.fixture
def labelled_csv(tmp_path: Path) -> Path:
    path = tmp_path / "dev.csv"
    path.write_text(
        'text,label,repo\n"hello, world",positive,a/b\n"two\nlines",negative,c/d\nplain,positive,a/b\n'
        "fourth,negative,c/d\nfifth,positive,a/b\n",
        encoding="utf-8",
    )
    return path


def test_load_keeps_quoted_commas_and_newlines(labelled_csv: Path):
    rows, columns = load_labelled(labelled_csv, text_column="text", fields=["sentiment"])
    assert columns == {"sentiment": "label"}
    assert [r.text for r in rows[:2]] == ["hello, world", "two\nlines"]
    assert rows[1].gold == {"sentiment": "negative"} and rows[1].index == 1


def test_gold_columns_default_to_the_field_name_then_label():
    header = ["text", "label", "repo"]
    assert label_columns(["label", "repo"], header, None) == {"label": "label", "repo": "repo"}
    assert label_columns(["sentiment"], header, None) == {"sentiment": "label"}
    assert label_columns(["sentiment"], header, ["repo"]) == {"sentiment": "repo"}
    with pytest.raises(DataError, match="one --label-column per --field"):
        label_columns(["a", "b", "c"], header, ["label", "repo"])
    with pytest.raises(DataError, match="no gold column for field 'b'"):
        label_columns(["a", "b"], ["text", "label"], None)


def test_missing_file_and_column_are_one_line_errors(labelled_csv: Path, tmp_path: Path):
    with pytest.raises(DataError, match="data file not found"):
        load_labelled(tmp_path / "nope.csv", text_column="text", fields=["x"])
    with pytest.raises(DataError, match=r"no column 'body' \(columns: text, label, repo\)"):
        load_labelled(labelled_csv, text_column="body", fields=["sentiment"])
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="empty file"):
        load_labelled(empty, text_column="text", fields=["x"])


def test_sampling_is_reproducible_and_keeps_file_order(labelled_csv: Path):
    rows, _ = load_labelled(labelled_csv, text_column="text", fields=["sentiment"])
    first = select_rows(rows, limit=3, seed=7)
    assert [r.index for r in first] == [r.index for r in select_rows(rows, limit=3, seed=7)]
    assert [r.index for r in first] == sorted(r.index for r in first)
    assert len(first) == 3
    assert [r.index for r in select_rows(rows, rows_slice=parse_slice("1:3"))] == [1, 2]
    assert [r.index for r in select_rows(rows, rows_slice=parse_slice("3:"))] == [3, 4]
    assert len(select_rows(rows, limit=50)) == 5
    with pytest.raises(DataError, match="START:STOP"):
        parse_slice("3")
    with pytest.raises(DataError, match="no rows selected"):
        select_rows(rows, rows_slice=parse_slice("10:"))


def test_fields_default_to_the_first_and_unknown_fields_fail():
    rubric = load_rubric(REPO / "workflows" / "issue_triage.yaml")
    assert resolve_fields(rubric, None) == ["label"]
    with pytest.raises(DataError, match="has no field 'type'"):
        resolve_fields(rubric, ["type"])
    assert (label_of(True), label_of(3), label_of(None)) == ("true", "3", None)


def _reading(predicted, p, mass, abstained=False):
    probabilities = {predicted: p, ("b" if predicted == "a" else "a"): 1 - p}
    return Reading(predicted=predicted, probabilities=probabilities, candidate_mass=mass, abstained=abstained)


def test_scores_separate_in_scope_rows_from_out_of_scope_ones():
    gold = ["a", "b", "a", "oos"]
    readings = [_reading("a", 0.9, 0.8), _reading("a", 0.7, 0.5), _reading("a", 0.6, 0.2, True),
                _reading("b", 0.55, 0.1, True)]
    summary = score_readings(gold, readings, ["a", "b"])
    # In scope: rows 0-2; top labels a, a, a against a, b, a -> 2/3 (abstention ignored here).
    assert summary["n"] == 4 and summary["n_in_scope"] == 3 and summary["n_out_of_scope"] == 1
    assert summary["accuracy"] == pytest.approx(2 / 3)
    assert summary["valid_rate"] == 1.0
    # Bins: 0.9 right, 0.7 wrong, 0.6 right (one row each): (0.1 + 0.7 + 0.4) / 3 = 0.4.
    assert summary["ece"] == pytest.approx(0.4)
    assert summary["mean_candidate_mass"] == pytest.approx(0.4)
    abstention = score_abstention(gold, readings, ["a", "b"])
    # Covered in scope: rows 0 and 1 (one right); the out-of-scope row abstained.
    assert abstention["coverage"] == pytest.approx(2 / 3)
    assert abstention["covered_accuracy"] == 0.5
    assert abstention["oos_recall"] == 1.0
    assert abstention["overall_accuracy"] == 0.5  # (1 right + 1 abstained oos) / 4
    assert abstention["overall_accuracy_without_abstention"] == 0.5  # top labels: rows 0 and 2 right, of 4


def test_failed_rows_are_invalid_and_flips_are_counted():
    readings = [_reading("a", 0.9, 0.8), Reading(predicted=None, error="too long")]
    summary = score_readings(["a", "a"], readings, ["a", "b"])
    assert summary["valid_rate"] == 0.5 and summary["errors"] == 1 and summary["accuracy"] == 0.5
    original = [_reading("a", 0.9, 0.8), _reading("b", 0.9, 0.8), _reading("a", 0.9, 0.8)]
    flips = score_flips(original, [[_reading("a", 0.9, 0.8), _reading("a", 0.9, 0.8), _reading("a", 0.9, 0.8)],
                                   [_reading("b", 0.9, 0.8), _reading("b", 0.9, 0.8), _reading("a", 0.9, 0.8)]])
    assert flips["flip_rate_per_order"] == [pytest.approx(1 / 3), pytest.approx(1 / 3)]
    assert flips["rows_flipped_in_any_order"] == pytest.approx(2 / 3)


def test_baseline_scores_invalid_answers_as_wrong_and_agreement_over_valid_ones():
    from types import SimpleNamespace

    records = [
        SimpleNamespace(valid=False, values=None, latency_ms=30.0, reason="duplicate key 'x'"),
        SimpleNamespace(valid=True, values={"x": "b", "y": True}, latency_ms=10.0, reason=""),
    ]
    readings = [Reading("a", answers={"x": "a", "y": "true"}), Reading("a", answers={"x": "a", "y": "true"})]
    summary = score_baseline(["a", "b"], records, "x", ["a", "b"], readings)
    assert summary["accuracy"] == 0.5 and summary["valid_rate"] == 0.5
    assert summary["ece"] is None and summary["mean_candidate_mass"] is None
    assert summary["agreement_with_decisionflow"] == 0.5  # y agrees (True -> "true"), x does not
    assert summary["mean_latency_ms"] == 20.0
    assert summary["invalid_reasons"] == {"duplicate key 'x'": 1}


def test_shuffled_rubric_reorders_only_the_options():
    rubric = load_rubric(REPO / "workflows" / "issue_triage.yaml")
    shuffled = shuffled_rubric(rubric, "label", random.Random(0))
    assert list(shuffled.field("label").options) != list(rubric.field("label").options)
    assert shuffled.field("label").options == rubric.field("label").options  # same labels and descriptions
    assert shuffled.field("repo") == rubric.field("repo") and shuffled.instructions == rubric.instructions


def test_cli_reports_bad_columns_without_loading_a_model(labelled_csv: Path):
    result = runner.invoke(app, ["eval", str(SENTIMENT), "--data", str(labelled_csv), "--text-column", "body"])
    assert result.exit_code == 1
    assert "no column 'body'" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["calibrate", "decisionflow.nothing:Class", "--data", str(labelled_csv)])
    assert result.exit_code == 2 and "--output" in result.output


def test_calibrate_never_saves_over_a_file_that_is_not_a_calibration(labelled_csv: Path):
    before = labelled_csv.read_bytes()
    result = runner.invoke(app, ["calibrate", str(SENTIMENT), "--data", str(labelled_csv), "--output", str(labelled_csv)])
    assert result.exit_code == 2
    assert (f"error: --output {labelled_csv} exists and is not a calibration file; give another path (saving would "
            "replace it)") in " ".join(result.output.split())
    assert labelled_csv.read_bytes() == before


@pytest.mark.model
def test_eval_cli_on_six_banking77_rows(tmp_path: Path):
    out = tmp_path / "eval"
    result = runner.invoke(app, ["eval", str(BANKING), "--data", str(BANKING_ROWS), "--limit", "6", "--raw", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "eval.json").read_text(encoding="utf-8"))
    assert summary["n"] == 6 and summary["valid_rate"] == 1.0
    for key in ("accuracy", "macro_f1", "ece", "mean_candidate_mass"):
        assert 0.0 <= summary[key] <= 1.0
    assert (out / "eval.md").is_file() and len((out / "rows.jsonl").read_text().splitlines()) == 6


@pytest.mark.model
def test_eval_names_the_rows_it_could_not_decide(tmp_path: Path):
    data = tmp_path / "rows.csv"
    data.write_text("text,label\na gorgeous film,positive\n,negative\ndull and lifeless,negative\n", encoding="utf-8")
    result = runner.invoke(app, ["eval", str(SENTIMENT), "--data", str(data)])
    assert result.exit_code == 0, result.output
    assert "warning: 1 row could not be decided and count as invalid in valid_rate (data row 1: the input is empty" in result.stderr
    assert json.loads(result.stdout)["valid_rate"] == pytest.approx(2 / 3)


@pytest.mark.model
def test_calibration_fit_is_saved_beside_a_rubric_copy_and_keeps_winners(engine, tmp_path: Path):
    from decisionflow.fitting.temperatures import fit_calibration

    rubric_path = tmp_path / "banking77_intent.yaml"
    shutil.copy(BANKING, rubric_path)
    rubric = load_rubric(rubric_path)
    rows, _ = load_labelled(BANKING_ROWS, text_column="text", fields=["intent"])
    rows = select_rows(rows, limit=8, seed=1)
    calibration, fits = fit_calibration(engine, rubric, rubric, rows, ["intent"], min_probability=0.55)
    path = Calibration.path_for(rubric_path)
    calibration.save(path)
    assert path == tmp_path / "banking77_intent.calibration.json"
    saved = Calibration.load(path)
    assert saved.fields["intent"].temperature == pytest.approx(fits[0].settings.temperature)
    assert saved.fields["intent"].labels == tuple(rubric.field("intent").options)
    assert fits[0].winners_unchanged == fits[0].rows == 8
    texts = [row.text for row in rows]
    plain = engine.decide_many(rubric, texts)
    scaled = engine.decide_many(rubric, texts, calibration=saved.model_copy(
        update={"fields": {"intent": saved.fields["intent"].model_copy(update={"min_probability": None})}}))
    for before, after in zip(plain, scaled):
        assert before.fields["intent"].value == after.fields["intent"].value


def test_a_score_fields_mean_absolute_error_is_over_the_rows_it_answered():
    readings = [Reading(predicted="3"), Reading(predicted="7"), Reading(predicted=None, error="too long"),
                Reading(predicted="0")]
    summary = score_readings(["5", "7", "2", "9"], readings, [str(level) for level in range(8)], score=True)
    # Rows 0 and 1 answered in scope (9 is not a level): |3 - 5| and |7 - 7|.
    assert summary["mean_absolute_error"] == pytest.approx(1.0)
    assert "mean_absolute_error" not in score_readings(["a"], [_reading("a", 0.9, 0.8)], ["a", "b"])
    figures = {"n": 4, "accuracy": 0.25, "macro_f1": 0.2, "valid_rate": 1.0, "ece": 0.1, "mean_candidate_mass": 0.9}
    report = markdown_report({**figures, "rubric": "rated", "field": "score", "debias": "none", "readout": "zero_shot",
                              "mean_absolute_error": 1.0, "raw": {**figures, "mean_absolute_error": 2.5}}, has_plot=False)
    assert "Mean absolute error, in levels: decisionflow (none) 1.000, decisionflow raw 2.500." in report


def test_a_field_reads_fitted_answers_only_through_earlier_rounds_or_what_it_derives_from():
    """Which fields `eval` compares with a run without heads: those read after a fitted field, and
    derived fields computed (directly or through another derived field) from a fitted one."""
    from types import SimpleNamespace

    from decisionflow.fitting.readings import _reads_fitted_answers
    from decisionflow.spec.yaml_rubric import loads_rubric

    rubric = loads_rubric("""\
name: r
pin_first: false
fields:
  a: {kind: choice, question: q, options: [x, y]}
  b: {kind: choice, question: q, options: [x, y]}
  c: {kind: choice, question: q, options: [x, y], after: [a]}
  from_b:
    kind: choice
    question: q
    options: [low, high]
    derive: {rules: [{if: {field: b, is: x}, then: high}], otherwise: low}
  from_a:
    kind: choice
    question: q
    options: [low, high]
    derive: {rules: [{if: {field: a, is: x}, then: high}], otherwise: low}
  from_from_a:
    kind: choice
    question: q
    options: [low, high]
    derive: {rules: [{if: {field: from_a, is: high}, then: high}], otherwise: low}
""")
    field = lambda method, round_: SimpleNamespace(method=method, round=round_)  # noqa: E731
    decision = SimpleNamespace(fields={
        "a": field("fitted", 0), "b": field("branch", 0), "c": field("branch", 1),
        "from_b": field("derived", 0), "from_a": field("derived", 0), "from_from_a": field("derived", 0),
    })
    reads = {name: _reads_fitted_answers(decision, rubric, name) for name in decision.fields}
    assert reads == {"a": False, "b": False, "c": True, "from_b": False, "from_a": True, "from_from_a": True}
    decision.fields["a"] = field("branch", 0)
    assert not any(_reads_fitted_answers(decision, rubric, name) for name in decision.fields)
