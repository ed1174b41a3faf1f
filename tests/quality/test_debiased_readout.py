"""Domain priors from unlabelled rows, temperatures fitted after the correction, and `eval`'s side-by-side
figures (raw vs debiased, option-order flips with and without, wording ablation) on the bundled model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from suite_support import FIXTURES
from typer.testing import CliRunner

from decisionflow.cli import app
from decisionflow.errors import CalibrationError
from decisionflow.fitting import corrections
from decisionflow.fitting.domain_prior import fit_domain_priors
from decisionflow.fitting.temperatures import fit_calibration
from decisionflow.quality.labelled import load_labelled
from decisionflow.runtime.readout.calibration import Calibration
from decisionflow.spec.rubric import Debias
from decisionflow.spec.yaml_rubric import load_rubric
from decisionflow.stats import metrics, negative_log_likelihood, temperature_scale

REPO = Path(__file__).resolve().parents[2]
BANKING = REPO / "workflows" / "banking77_intent.yaml"
BANKING_ROWS = FIXTURES / "banking77_sample.csv"
SENTIMENT = REPO / "workflows" / "sentiment.yaml"
REVIEWS = [
    ("a warm , funny and beautifully acted film", "positive"),
    ("the plot is a mess and the jokes fall flat", "negative"),
    ("one of the best movies of the year", "positive"),
    ("i wanted to leave after twenty minutes", "negative"),
    ("a moving story told with real care", "positive"),
    ("dull , predictable and far too long", "negative"),
    ("the cast clearly had a great time , and so did i", "positive"),
    ("a lazy sequel that nobody asked for", "negative"),
]
runner = CliRunner()


@pytest.fixture
def reviews_csv(tmp_path: Path) -> Path:
    path = tmp_path / "reviews.csv"
    path.write_text("text,label\n" + "".join(f'"{text}",{label}\n' for text, label in REVIEWS), encoding="utf-8")
    return path


def _banking_rows(rows: str) -> list:
    loaded, _ = load_labelled(BANKING_ROWS, text_column="text", fields=["intent"])
    start, stop = (int(x) for x in rows.split(":"))
    return loaded[start:stop]


@pytest.mark.model
def test_a_domain_prior_fitted_on_unlabelled_rows_is_saved_with_its_labels_and_applied(engine, tmp_path: Path):
    rubric = load_rubric(BANKING)
    unlabelled = [row.text for row in _banking_rows("0:8")]
    calibration, fits = fit_domain_priors(engine, rubric, rubric, unlabelled, ["intent"])
    path = tmp_path / "banking77_intent.calibration.json"
    calibration.save(path)
    saved = Calibration.load(path)
    settings = saved.fields["intent"]
    assert settings.labels == rubric.field("intent").labels and settings.debias is Debias.DOMAIN
    assert sum(settings.prior) == pytest.approx(1.0) and len(settings.prior) == 77
    assert fits[0].rows == 8 and 0 <= fits[0].answers_changed <= 8

    texts = [row.text for row in _banking_rows("8:11")]
    raw = engine.decide_many(rubric, texts, debias="none")
    debiased = engine.decide_many(rubric, texts, calibration=saved)  # the file says which correction applies
    prior = dict(zip(settings.labels, settings.prior))
    for before, after in zip(raw, debiased):
        assert after.fields["intent"].debias == "domain"
        expected = corrections.divide(before.fields["intent"].probabilities, prior)
        # Two calls: where the CPU's products do not round alike on every call, a few parts in a million apart.
        assert after.fields["intent"].probabilities == pytest.approx(expected, abs=1e-5)
        assert after.fields["intent"].value == max(expected, key=expected.__getitem__)
        # Abstention by candidate mass keeps reading the raw mass.
        assert after.fields["intent"].candidate_mass == pytest.approx(before.fields["intent"].candidate_mass)
    # A call's own correction still wins over the file's.
    assert engine.decide(rubric, texts[0], calibration=saved, debias="none").fields["intent"].probabilities == \
        pytest.approx(raw[0].fields["intent"].probabilities)


@pytest.mark.model
def test_the_temperature_is_fitted_after_the_correction_and_the_file_says_which(engine, reviews_csv: Path):
    rubric = load_rubric(SENTIMENT)
    rows, _ = load_labelled(reviews_csv, text_column="text", fields=["sentiment"])
    calibration, fits = fit_calibration(engine, rubric, rubric, rows, ["sentiment"], debias="content_free")
    settings = calibration.fields["sentiment"]
    assert fits[0].debias == "content_free" and settings.debias is Debias.CONTENT_FREE
    texts = [row.text for row in rows]
    # The fit read the debiased distributions: its NLL before scaling is the content-free readout's.
    debiased = engine.decide_many(rubric, texts, debias="content_free")
    nll = negative_log_likelihood([d.fields["sentiment"].probabilities for d in debiased],
                                  [row.gold["sentiment"] for row in rows])
    raw = engine.decide_many(rubric, texts, debias="none")
    raw_nll = negative_log_likelihood([d.fields["sentiment"].probabilities for d in raw],
                                      [row.gold["sentiment"] for row in rows])
    assert fits[0].nll_before == pytest.approx(nll) and nll != pytest.approx(raw_nll)
    # Applied with the file alone (no --debias), the same correction and then the temperature.
    applied = engine.decide_many(rubric, texts, calibration=calibration)
    for plain, calibrated in zip(debiased, applied):
        assert calibrated.fields["sentiment"].debias == "content_free"
        labels = list(plain.fields["sentiment"].probabilities)
        scaled = temperature_scale(tuple(plain.fields["sentiment"].probabilities[k] for k in labels), settings.temperature)
        assert [calibrated.fields["sentiment"].probabilities[k] for k in labels] == pytest.approx(list(scaled))


@pytest.mark.model
def test_a_domain_correction_without_a_prior_is_refused_by_name(engine):
    rubric = load_rubric(BANKING)
    with pytest.raises(CalibrationError, match="asks for a domain prior"):
        engine.decide(rubric, "my card was declined", debias="domain")


@pytest.mark.model
def test_calibrate_unlabelled_then_eval_reports_raw_debiased_flips_and_both_wordings(tmp_path: Path, reviews_csv: Path):
    rubric_path = tmp_path / "sentiment.yaml"
    shutil.copy(SENTIMENT, rubric_path)
    result = runner.invoke(app, ["calibrate", str(rubric_path), "--unlabelled", str(reviews_csv), "--rows", "0:4"])
    assert result.exit_code == 0, result.output
    assert "sentiment: domain prior from 4 unlabelled rows" in result.output
    saved = Calibration.load(tmp_path / "sentiment.calibration.json")
    assert saved.fields["sentiment"].debias is Debias.DOMAIN and saved.fields["sentiment"].temperature == 1.0

    out = tmp_path / "eval"
    result = runner.invoke(app, ["eval", str(rubric_path), "--data", str(reviews_csv), "--rows", "4:8",
                                 "--shuffle-options", "1", "--ablate", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "eval.json").read_text(encoding="utf-8"))
    assert summary["debias"] == "domain" and summary["n"] == 4
    assert set(summary["raw"]) >= {"accuracy", "macro_f1", "ece"}
    assert summary["shuffle"]["orders"] == 1 and summary["shuffle"]["raw"]["orders"] == 1
    ablate = summary["ablate"]
    # A domain prior belongs to the written wording: both wordings are compared content-free.
    assert ablate["correction"] == "content_free" and set(ablate["variants"]) == {"as_written", "minimal"}
    assert ablate["variants"]["as_written"]["none"]["accuracy"] == summary["raw"]["accuracy"]
    printed = json.loads(result.output[result.output.index("{"):])
    assert set(printed["ablate"]["variants"]) == {"as_written", "minimal"}
    assert "raw" in printed and printed["debias"] == "domain"
    report = (out / "eval.md").read_text(encoding="utf-8")
    assert "## Wording" in report and "| minimal |" in report and "| raw |" in report


def test_calibrate_needs_some_data_and_thresholds_need_labels(tmp_path: Path):
    result = runner.invoke(app, ["calibrate", str(BANKING)])
    assert result.exit_code == 2 and "--data" in result.output and "--unlabelled" in result.output
    result = runner.invoke(app, ["calibrate", str(BANKING), "--unlabelled", str(BANKING_ROWS), "--fit-min-mass"])
    assert result.exit_code == 2 and "fitted with --data" in result.output
    result = runner.invoke(app, ["eval", str(BANKING), "--data", str(BANKING_ROWS), "--debias", "sideways"])
    assert result.exit_code == 1 and "--debias must be one of none, content_free, content_free_half, domain" in result.output


@pytest.mark.model
def test_eval_takes_the_raw_readout_from_the_same_passes_when_the_field_reads_no_answer(engine, monkeypatch):
    from decisionflow.quality.evaluate import evaluate, read_rows
    from decisionflow.quality.labelled import LabelledRow

    rubric = load_rubric(SENTIMENT)
    rows = [LabelledRow(index=i, text=text, gold={"sentiment": label}) for i, (text, label) in enumerate(REVIEWS[:6])]
    separate = read_rows(engine, rubric, [r.text for r in rows], "sentiment", debias="none")
    calls: list[int] = []
    original = engine.decide_each
    monkeypatch.setattr(engine, "decide_each", lambda *a, **k: calls.append(1) or original(*a, **k))
    run = evaluate(engine, rubric, rubric, rows, "sentiment")
    assert run.summary["debias"] == "content_free_half"
    assert len(calls) == 1  # one read of the rows, not a second raw one
    calls.clear()
    both = evaluate(engine, rubric, rubric, rows, "sentiment", shuffle_orders=1, seed=3, ablate=True)
    # The rows as written, one shuffled order and the minimal wording: one read each, raw included.
    assert len(calls) == 3
    assert both.summary["shuffle"]["orders"] == 1 and both.summary["shuffle"]["raw"]["orders"] == 1
    assert set(both.summary["ablate"]["variants"]["minimal"]) == {"none", "content_free_half"}
    assert both.summary["raw"] == run.summary["raw"]
    raw = run.summary["raw"]
    assert raw["accuracy"] == metrics.accuracy([r.gold["sentiment"] for r in rows], [s.predicted for s in separate])
    for reading, decision in zip(separate, engine.decide_many(rubric, [r.text for r in rows])):
        assert decision.fields["sentiment"].raw_probabilities == pytest.approx(reading.probabilities, abs=1e-5)
        assert decision.fields["sentiment"].probabilities != pytest.approx(reading.probabilities, abs=1e-6)


@pytest.mark.model
def test_a_field_that_reads_an_earlier_answer_has_its_raw_readout_read_apart(engine):
    from decisionflow.fitting.readings import read_rows_and_raw

    rubric = load_rubric(REPO / "workflows" / "issue_triage.yaml")  # `label` pinned, then `repo`
    readings, raw = read_rows_and_raw(engine, rubric, ["The app crashes when I open settings."], "repo")
    assert readings[0].predicted is not None
    assert raw is None
    first, raw_first = read_rows_and_raw(engine, rubric, ["The app crashes when I open settings."], "label")
    assert raw_first is not None and raw_first[0].debias == "none" and first[0].debias != "none"
