"""`decisionflow fit`, and `run` / `eval` applying the heads it saves (real bundled model).

The heads `run` and `eval` apply here are fitted through the Python API (`fit_heads`) and saved
beside a YAML rubric copied into a temporary folder, exactly where `fit` saves them.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import yaml
from suite_support import FIXTURES
from typer.testing import CliRunner

from decisionflow.cli import app
from decisionflow.fitting import fit_heads
from decisionflow.runtime.heads.fitted import Heads
from decisionflow.runtime.result import FITTED_METHODS
from decisionflow.spec.yaml_rubric import load_rubric

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
SENTIMENT = str(ROOT / "workflows" / "sentiment.yaml")
CODE = {"negative": "k1", "positive": "k2"}
REVIEW_YAML = """\
name: review
instructions: Classify one sentence from a movie review.
answer_format: labels
pin_first: false
fields:
  sentiment:
    kind: choice
    question: Whether the sentence is negative or positive about the film
    options: [negative, positive]
  code:
    kind: choice
    question: Which code the sentence gets
    options: [k1, k2]
"""
TEXT = "a gorgeous , witty , seductive movie ."


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


def error_lines(result) -> list[str]:
    """stderr's `error:` lines (a command that loaded the model may also show a progress bar there)."""
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def only_lines(result) -> list[str]:
    """All of stderr, for refusals that come before the model loads: nothing but the error."""
    return result.stderr.strip().splitlines()


def sst_rows() -> list[dict[str, str]]:
    with (FIXTURES / "sst2_sample.csv").open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def write_rows(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def labelled() -> list[dict[str, str]]:
    """The SST-2 sample with the sentiment in `label` and an opaque code (k1/k2) in `code`."""
    return [{"text": r["text"], "label": r["label"], "code": CODE[r["label"]]} for r in sst_rows()]


def project(folder: Path) -> tuple[Path, Path]:
    rubric = folder / "review.yaml"
    rubric.write_text(REVIEW_YAML, encoding="utf-8")
    return rubric, write_rows(folder / "rows.csv", labelled())


@pytest.fixture(scope="module")
def fitted_project(engine, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """review.yaml, its rows, and heads fitted through the API and saved beside the rubric."""
    rubric, rows = project(tmp_path_factory.mktemp("fitted"))
    result = fit_heads(engine, load_rubric(rubric), [(r["text"], {"sentiment": r["label"], "code": r["code"]}) for r in labelled()])
    assert result.fields["code"].readout == "fitted"
    return rubric, rows, result.heads.save(Heads.path_for(rubric))


# -- fit: what it writes and prints -----------------------------------------------------------


def test_fit_saves_heads_beside_the_rubric_and_prints_the_table(tmp_path: Path):
    rubric, rows = project(tmp_path)
    result = invoke("fit", rubric, "--data", rows, "--label", "sentiment=label")
    assert result.exit_code == 0, result.output
    saved = tmp_path / "review.heads.safetensors"
    assert saved.is_file() and (tmp_path / "review.heads.json").is_file()
    heads = Heads.load(saved)
    assert heads.metadata.rubric == "review" and set(heads.metadata.fields) == {"sentiment", "code"}
    assert "code" in heads.fitted_fields and heads.metadata.fields["code"].rows == 40
    out = result.stdout
    assert "cross-validated accuracy on the fitting rows" in out
    for word in ("sentiment", "code", "zero_shot", "fitted", "yes"):
        assert word in out
    assert "labelled fields answer with a fitted head" in out and "read 40 rows" in out
    assert f"saved {saved}" in out
    assert not error_lines(result)


def test_fit_json_reports_every_readout_it_compared(tmp_path: Path):
    rubric, rows = project(tmp_path)
    output = tmp_path / "elsewhere.heads.safetensors"
    result = invoke("fit", rubric, "--data", rows, "--label", "sentiment=label", "--rows", "0:24",
                    "--output", output, "--json", "--significance", "1")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["rubric"] == "review" and report["rows"] == 24 and report["saved"] == str(output)
    assert output.is_file() and not (tmp_path / "review.heads.safetensors").exists()
    assert set(report["fields"]) == {"sentiment", "code"}
    code = report["fields"]["code"]
    assert code["readout"] == "fitted" and code["rows"] == 24 and code["rows_per_label"] == {"k1": 12, "k2": 12}
    assert set(code["candidates"]) == {"zero_shot", "fitted", "ngram", "fused"}
    for figure in code["candidates"].values():
        assert figure["low"] <= figure["accuracy"] <= figure["high"] and figure["rows"] == 24
    assert code["candidates"]["fitted"]["accuracy"] > code["candidates"]["zero_shot"]["accuracy"]
    assert code["candidates"]["zero_shot"]["p_vs_zero_shot"] is None


def test_fit_can_skip_labels_that_are_not_answers(tmp_path: Path):
    rubric, _ = project(tmp_path)
    rows = labelled()[:12]
    rows[3]["label"] = "neutral"
    data = write_rows(tmp_path / "rows.csv", rows)
    result = invoke("fit", rubric, "--data", data, "--label", "sentiment=label", "--skip-unknown-labels", "--json")
    assert result.exit_code == 0, result.output
    assert "left out 1 label" in result.stderr
    report = json.loads(result.stdout)
    assert report["skipped_labels"] == 1 and report["fields"]["sentiment"]["rows"] == 11
    assert report["fields"]["code"]["rows"] == 12


# -- fit: refusals, all before the model is read ----------------------------------------------


def test_fit_refuses_bad_label_mappings_with_one_line(tmp_path: Path):
    rubric, rows = project(tmp_path)
    cases = {
        ("--label", "sentiment=nope"): "error: --label sentiment=nope: no column 'nope' (columns: text, label, code)",
        ("--label", "mood=label"): "error: --label mood=label: rubric 'review' has no field 'mood' (fields: sentiment, code)",
        ("--label", "sentiment"): "error: --label expects FIELD=COLUMN, got 'sentiment'",
        ("--text-column", "body"): f"error: {rows}: no column 'body' for the input text (columns: text, label, code); name it with --text-column",
        ("--layers", "-1,x"): "error: --layers expects whole numbers separated by commas, e.g. -1,-8; got '-1,x'",
        ("--mean-layers", "mean"): "error: --mean-layers expects whole numbers separated by commas, e.g. -8 (or none); "
                                   "got 'mean'",
        ("--mean-layers", ","): "error: --mean-layers names no layer (write none for no input-mean member)",
    }
    for extra, expected in cases.items():
        result = invoke("fit", rubric, "--data", rows, *extra)
        assert result.exit_code == 1, (extra, result.output)
        assert only_lines(result) == [expected], (extra, result.stderr)
        assert "Traceback" not in result.output
    assert not (tmp_path / "review.heads.safetensors").exists()


def test_fit_names_the_data_row_of_a_label_that_is_not_an_answer(tmp_path: Path):
    rubric, _ = project(tmp_path)
    rows = labelled()[:6]
    rows[2]["label"] = "postive"
    data = write_rows(tmp_path / "rows.csv", rows)
    expected = (f"error: {data}: data row 2: 'postive' is not an answer of field 'sentiment'; did you mean "
                "'positive'? (it offers negative, positive)")
    result = invoke("fit", rubric, "--data", data, "--label", "sentiment=label")
    assert result.exit_code == 1 and only_lines(result) == [expected], result.output
    # With --rows the row is still counted in the file, not in the selection.
    sliced = invoke("fit", rubric, "--data", data, "--label", "sentiment=label", "--rows", "1:4")
    assert sliced.exit_code == 1 and only_lines(sliced) == [expected], sliced.output
    # A column named after a field is read without --label; its bad cell is named the same way.
    rows[2]["label"], rows[4]["code"] = "positive", "k3"
    write_rows(data, rows)
    code = invoke("fit", rubric, "--data", data)
    assert code.exit_code == 1
    assert only_lines(code) == [f"error: {data}: data row 4: 'k3' is not an answer of field 'code' (it offers k1, k2)"]
    assert not (tmp_path / "review.heads.safetensors").exists()


def test_fit_refuses_empty_texts_and_unlabelled_files(tmp_path: Path):
    rubric, _ = project(tmp_path)
    rows = labelled()[:4]
    rows[1]["text"] = "  "
    data = write_rows(tmp_path / "rows.csv", rows)
    empty = invoke("fit", rubric, "--data", data)
    assert empty.exit_code == 1
    assert only_lines(empty) == [f"error: {data}: data row 1: the 'text' cell is empty"]
    unlabelled = write_rows(tmp_path / "plain.csv", [{"text": r["text"], "note": "x"} for r in labelled()[:3]])
    none = invoke("fit", rubric, "--data", unlabelled)
    assert none.exit_code == 1 and len(only_lines(none)) == 1
    assert "no label column for any field of rubric 'review'" in none.stderr
    missing = invoke("fit", rubric, "--data", tmp_path / "none.csv")
    assert missing.exit_code == 1 and only_lines(missing) == [f"error: data file not found: {tmp_path / 'none.csv'}"]


def test_fit_needs_an_output_for_a_class_or_a_shipped_workflow_found_in_the_package(tmp_path: Path, monkeypatch):
    _, rows = project(tmp_path)
    from decisionflow.spec.references import shipped_workflows

    triage = str(Path(__file__).resolve().parents[2] / "examples" / "triage.py") + ":Triage"
    result = invoke("fit", triage, "--data", rows)
    assert result.exit_code == 2
    assert only_lines(result) == [f"error: {triage} is not a YAML file, so there is no folder to save the heads "
                                   "beside; give --output PATH"]
    monkeypatch.chdir(tmp_path)
    for shipped in ("sentiment", "workflows/sentiment.yaml"):
        result = invoke("fit", shipped, "--data", rows)
        assert result.exit_code == 2
        assert only_lines(result) == [f"error: {shipped} names the shipped workflow {shipped_workflows() / 'sentiment.yaml'}, "
                                       "whose folder is the installed package's; give --output PATH (other commands then "
                                       "take the heads with --heads PATH)"]
    assert not (tmp_path / "workflows").exists()
    folder = invoke("fit", "sentiment", "--data", rows, "--output", tmp_path)
    assert folder.exit_code == 2 and only_lines(folder) == [f"error: --output {tmp_path} is a folder; give a file name"]


# -- run and eval apply the heads found beside the rubric --------------------------------------


def test_the_heads_shipped_beside_a_workflow_are_found_from_any_directory(tmp_path: Path, monkeypatch):
    from decisionflow.cli.common import chosen_calibration, chosen_heads
    from decisionflow.spec.references import shipped_workflows

    monkeypatch.chdir(tmp_path)
    shipped = shipped_workflows() / "banking77_intent.heads.safetensors"
    for ref in ("banking77_intent", "workflows/banking77_intent.yaml"):
        heads, path = chosen_heads(ref, None, False)
        assert path == shipped and heads.fitted_fields == ["intent"]
    # A file of that name here wins, and so do the heads (or their absence) beside it.
    (tmp_path / "workflows").mkdir()
    shutil.copy(shipped_workflows() / "banking77_intent.yaml", tmp_path / "workflows")
    assert chosen_heads("workflows/banking77_intent.yaml", None, False) == (None, None)
    (tmp_path / "workflows" / "sentiment.calibration.json").write_text("{}", encoding="utf-8")
    assert chosen_calibration("workflows/sentiment.yaml", None) == (None, None)  # not beside the shipped file



def test_run_applies_the_heads_beside_the_rubric_and_says_so(fitted_project):
    rubric, _, saved = fitted_project
    fitted = Heads.load(saved).fitted_fields
    headed = invoke("run", rubric, "--text", TEXT, "--json")
    assert headed.exit_code == 0, headed.output
    assert f"heads: {saved} (fitted: {', '.join(fitted)})" in headed.stderr
    data = json.loads(headed.stdout)
    assert data["fields"]["code"]["method"] in FITTED_METHODS
    for name, field in data["fields"].items():
        assert (field["method"] in FITTED_METHODS) == (name in fitted)
        assert sum(field["probabilities"].values()) == pytest.approx(1.0)

    plain = invoke("run", rubric, "--text", TEXT, "--json", "--no-heads")
    assert plain.exit_code == 0, plain.output
    assert "heads:" not in plain.stderr
    zero_shot = json.loads(plain.stdout)
    assert all(field["method"] not in FITTED_METHODS for field in zero_shot["fields"].values())
    assert zero_shot["stats"]["forward_passes"] == data["stats"]["forward_passes"]
    assert zero_shot["fields"]["code"]["probabilities"] != pytest.approx(data["fields"]["code"]["probabilities"], abs=1e-3)

    explicit = invoke("run", rubric, "--text", TEXT, "--json", "--heads", saved)
    assert explicit.exit_code == 0 and json.loads(explicit.stdout)["fields"]["code"]["method"] in FITTED_METHODS
    both = invoke("run", rubric, "--text", TEXT, "--heads", saved, "--no-heads")
    assert both.exit_code == 1 and error_lines(both) == ["error: give --heads or --no-heads, not both"]


def test_run_refuses_heads_fitted_for_another_rubric(fitted_project, tmp_path: Path):
    _, _, saved = fitted_project
    result = invoke("run", SENTIMENT, "--text", TEXT, "--heads", saved)
    assert result.exit_code == 1, result.output
    assert error_lines(result) == [f"error: {saved}: the heads are for rubric 'review', not 'sentiment'"]
    # Heads found beside a rubric that has since changed are refused too, naming the file.
    changed = tmp_path / "review.yaml"
    changed.write_text(REVIEW_YAML.replace("options: [k1, k2]", "options: [k1, k2, k3]"), encoding="utf-8")
    Heads.load(saved).save(Heads.path_for(changed))
    stale = invoke("run", changed, "--text", TEXT)
    assert stale.exit_code == 1
    [line] = error_lines(stale)
    assert line.startswith(f"error: {Heads.path_for(changed)}: the head of field 'code' was fitted for other answers")
    assert "the rubric adds k3" in line and line.endswith("; fit again (or answer zero-shot with --no-heads)")
    # Named before the model loads, and before a calibration is checked against them: the heads are at fault.
    from decisionflow.runtime.readout.calibration import Calibration, FieldCalibration

    shutil.copy(SENTIMENT, tmp_path / "sentiment.yaml")
    Calibration(rubric="sentiment", fields={"sentiment": FieldCalibration(
        temperature=2.0, labels=("negative", "positive"), after_head=True)}).save(
        Calibration.path_for(tmp_path / "sentiment.yaml"))
    foreign = invoke("run", tmp_path / "sentiment.yaml", "--text", TEXT, "--heads", saved)
    assert foreign.exit_code == 1
    assert only_lines(foreign) == [f"error: {saved}: the heads are for rubric 'review', not 'sentiment'"]
    missing = invoke("run", SENTIMENT, "--text", TEXT, "--heads", tmp_path / "none.heads.safetensors")
    assert missing.exit_code == 1
    assert error_lines(missing) == [f"error: heads file not found: {tmp_path / 'none.heads.safetensors'}"]


def test_a_calibration_applies_only_to_the_readout_it_was_fitted_on(fitted_project, tmp_path: Path):
    """A temperature fitted on a head's distribution is refused where the field is answered zero-shot
    (`--no-heads`), and one fitted zero-shot where a head answers, before the model loads; a
    calibration fitted under the heads that apply runs."""
    from decisionflow.runtime.readout.calibration import Calibration, FieldCalibration

    rubric, rows, saved = fitted_project
    here = tmp_path / "review.yaml"
    shutil.copy(rubric, here)
    shutil.copy(saved, Heads.path_for(here))
    calibration_file = Calibration.path_for(here)

    def calibrated(after_head: bool) -> None:
        Calibration(rubric="review", fields={"code": FieldCalibration(
            temperature=2.0, labels=("k1", "k2"), after_head=after_head)}).save(calibration_file)

    calibrated(after_head=True)
    headed = invoke("run", here, "--text", TEXT, "--json")
    assert headed.exit_code == 0, headed.output
    assert json.loads(headed.stdout)["fields"]["code"]["method"] in FITTED_METHODS
    zero_shot = invoke("run", here, "--text", TEXT, "--no-heads")
    assert zero_shot.exit_code == 1
    assert only_lines(zero_shot) == [
        f"error: {calibration_file}: the calibration of field 'code' was fitted on its fitted head's distribution, "
        "but here the field is answered zero-shot (no heads apply): calibrate again with the heads this command "
        "applies, or apply the heads it was fitted with, or leave the calibration out (--no-calibration)"]
    both_off = invoke("run", here, "--text", TEXT, "--no-heads", "--no-calibration", "--json")
    assert both_off.exit_code == 0, both_off.output
    assert json.loads(both_off.stdout)["fields"]["code"]["method"] not in FITTED_METHODS
    assert "calibration:" not in both_off.stderr
    clash = invoke("run", here, "--text", TEXT, "--no-calibration", "--calibration", calibration_file)
    assert clash.exit_code == 1 and only_lines(clash) == ["error: give --calibration or --no-calibration, not both"]
    calibrated(after_head=False)
    evaluated = invoke("eval", here, "--data", rows, "--field", "code", "--rows", "0:4")
    assert evaluated.exit_code == 1
    assert "was fitted on its zero-shot distribution" in " ".join(error_lines(evaluated))
    refused = invoke("run", here, "--text", TEXT)
    assert refused.exit_code == 1
    [line] = only_lines(refused)
    assert "field 'code' was fitted on its zero-shot distribution, but here the field is answered by a fitted head" in line
    assert invoke("run", here, "--text", TEXT, "--no-heads").exit_code == 0


def test_eval_with_heads_reports_zero_shot_beside_the_fitted_readout(fitted_project):
    rubric, rows, saved = fitted_project
    result = invoke("eval", rubric, "--data", rows, "--field", "code", "--rows", "0:12")
    assert result.exit_code == 0, result.output
    assert f"heads: {saved}" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["readout"] == "fitted" and summary["n"] == 12
    # Every one of these rows was a fitting row: said on stderr and in the summary.
    assert summary["rows_heads_were_fitted_on"] == 12
    assert "warning: 12 of the 12 rows scored were used to fit the heads" in result.stderr
    zero_shot = summary["zero_shot"]
    assert zero_shot["n"] == 12
    paired = zero_shot["fitted_vs_zero_shot"]
    assert paired["rows"] == 12 and 0.0 <= paired["mcnemar_p"] <= 1.0
    # On rows it was fitted on, the head is right where zero-shot (near chance on k1/k2) is not.
    assert summary["accuracy"] > zero_shot["accuracy"]
    assert paired["only_fitted_right"] > paired["only_zero_shot_right"]
    plain = invoke("eval", rubric, "--data", rows, "--field", "code", "--rows", "0:12", "--no-heads")
    assert plain.exit_code == 0, plain.output
    unheaded = json.loads(plain.stdout)
    assert unheaded["readout"] == "zero_shot" and "zero_shot" not in unheaded
    assert unheaded["accuracy"] == pytest.approx(zero_shot["accuracy"])


def test_an_existing_output_file_may_be_written_again(tmp_path: Path):
    """Refitting (fit --output, calibrate --output) rewrites the file it wrote before; a file standing
    where a folder is needed, or a folder given for a file, is still refused."""
    from decisionflow.cli.common import output_problem

    existing = tmp_path / "review.heads.safetensors"
    existing.write_bytes(b"old")
    assert output_problem(existing, folder=False) is None
    assert output_problem(tmp_path / "new.heads.safetensors", folder=False) is None
    assert "is a file" in output_problem(existing / "inside.safetensors", folder=False)
    assert "is a folder" in output_problem(tmp_path, folder=False)


def test_fit_a_score_field_reports_both_heads_and_their_errors(tmp_path: Path):
    rubric = tmp_path / "rated.yaml"
    rubric.write_text("name: rated\ninstructions: Rate the sentiment of one short text.\nfields:\n  score:\n"
                      "    kind: score\n    question: How negative or positive the text is, 0 (extremely negative) to 8\n"
                      "    min: 0\n    max: 8\n")
    result = invoke("fit", rubric, "--data", FIXTURES / "vader_movies_sample.csv")
    assert result.exit_code == 0, result.output
    info = json.loads((tmp_path / "rated.heads.json").read_text())["fields"]["score"]
    # No row at levels 0 and 8: a score still gets both heads, each far nearer than zero-shot.
    assert set(info["candidates"]) == {"zero_shot", "fitted", "ordinal"} and info["readout"] == "fitted"
    for name in ("fitted", "ordinal"):
        assert info["candidates"][name]["mean_absolute_error"] < info["candidates"]["zero_shot"]["mean_absolute_error"]
    kept = "score (ordinal)" if info["head"] == "ordinal" else "score"
    assert f"1 of 1 labelled fields answer with a fitted head ({kept})" in result.stdout
    assert "MAE" in result.stdout and "ordinal" in result.stdout
    assert (info["spread"] is not None) == (info["head"] == "ordinal")


def pinned_yaml() -> str:
    """The review rubric with `code` first and pinned: `sentiment` is then read after a fitted field."""
    data = yaml.safe_load(REVIEW_YAML)
    data.update(name="pinned_review", pin_first=True, fields={"code": data["fields"]["code"],
                                                              "sentiment": data["fields"]["sentiment"]})
    return yaml.safe_dump(data, sort_keys=False)


def test_eval_compares_a_field_read_after_a_fitted_one_with_a_run_without_heads(engine, tmp_path: Path):
    """`sentiment` is read after the pinned `code`, which only a head answers: its zero-shot side is the
    engine without heads (a second run), not the same passes, whose prompts carry the head's codes."""
    rubric = tmp_path / "pinned_review.yaml"
    rubric.write_text(pinned_yaml(), encoding="utf-8")
    rows = write_rows(tmp_path / "rows.csv", labelled())
    # Read first, before the sentiment question, the code's head is better than zero-shot but not
    # significantly on 40 rows: kept anyway, as `--significance 1` would.
    result = fit_heads(engine, load_rubric(rubric), [(r["text"], {"code": r["code"]}) for r in labelled()], significance=1.0)
    assert result.fields["code"].readout == "fitted"
    result.heads.save(Heads.path_for(rubric))

    after = invoke("eval", rubric, "--data", rows, "--field", "sentiment", "--rows", "0:16")
    assert after.exit_code == 0, after.output
    headed = json.loads(after.stdout)
    assert headed["readout"] == "zero_shot_after_fitted"
    plain = invoke("eval", rubric, "--data", rows, "--field", "sentiment", "--rows", "0:16", "--no-heads")
    assert plain.exit_code == 0, plain.output
    unheaded = json.loads(plain.stdout)
    assert unheaded["readout"] == "zero_shot" and "zero_shot" not in unheaded
    for figure in ("accuracy", "ece", "mean_candidate_mass"):
        assert headed["zero_shot"][figure] == pytest.approx(unheaded[figure], abs=1e-6)
    # The head's codes written into the prompt moved sentiment's distributions.
    assert headed["ece"] != pytest.approx(unheaded["ece"], abs=1e-6)
    assert headed["zero_shot"]["fitted_vs_zero_shot"]["rows"] == 16

    pinned = invoke("eval", rubric, "--data", rows, "--field", "code", "--rows", "0:16")
    assert pinned.exit_code == 0, pinned.output
    code = json.loads(pinned.stdout)
    assert code["readout"] == "fitted" and code["accuracy"] > code["zero_shot"]["accuracy"]

    # With a calibration beside (domain priors: `debias: domain` for both fields), the run without heads
    # keeps it, as `--no-heads` does: the two sides differ by the heads alone.
    primed = invoke("calibrate", rubric, "--unlabelled", rows, "--field", "code", "--field", "sentiment", "--rows", "16:40")
    assert primed.exit_code == 0, primed.output
    assert ("warning: the domain prior corrects the zero-shot readout, but code is answered by "
            f"{Path(rubric).stem}.heads.safetensors, whose head keeps its own correction") in " ".join(primed.stderr.split())
    after = invoke("eval", rubric, "--data", rows, "--field", "sentiment", "--rows", "0:16")
    plain = invoke("eval", rubric, "--data", rows, "--field", "sentiment", "--rows", "0:16", "--no-heads")
    assert after.exit_code == 0 and plain.exit_code == 0, after.output + plain.output
    headed, unheaded = json.loads(after.stdout), json.loads(plain.stdout)
    assert headed["debias"] == unheaded["debias"] == "domain"
    for figure in ("accuracy", "ece", "mean_candidate_mass"):
        assert headed["zero_shot"][figure] == pytest.approx(unheaded[figure], abs=1e-6)


def test_fit_never_saves_over_a_file_that_is_not_a_heads_file(tmp_path: Path):
    """The data file, the rubric, or the readable metadata copy's name holding another file (`--json >
    X.json` beside `--output X.safetensors`) are refused before the model loads, their bytes kept."""
    rubric, rows = project(tmp_path)
    data_bytes, rubric_bytes = rows.read_bytes(), rubric.read_bytes()
    for output in (rows, rubric):
        result = invoke("fit", rubric, "--data", rows, "--output", output)
        assert result.exit_code == 2
        assert only_lines(result) == [f"error: --output {output} exists and is not a heads file; give another path "
                                      "(saving would replace it)"]
    report = tmp_path / "b3.json"
    report.write_text("", encoding="utf-8")
    result = invoke("fit", rubric, "--data", rows, "--output", tmp_path / "b3.safetensors", "--json")
    assert result.exit_code == 2
    assert only_lines(result) == [f"error: --output {report}, where the heads' readable metadata goes beside "
                                  "b3.safetensors, holds another file; give another path (saving would replace it)"]
    assert rows.read_bytes() == data_bytes and rubric.read_bytes() == rubric_bytes and report.read_text() == ""


def test_saving_heads_refuses_to_replace_another_file_and_rewrites_its_own(fitted_project, tmp_path: Path):
    from decisionflow.runtime.heads.fitted import HeadsError

    _, _, saved = fitted_project
    heads = Heads.load(saved)
    target = tmp_path / "copy.heads.safetensors"
    assert heads.save(target) == target and heads.save(target) == target  # a refit rewrites its own files
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}', encoding="utf-8")
    with pytest.raises(HeadsError, match="notes.json, where the heads' readable metadata goes"):
        heads.save(tmp_path / "notes.safetensors")
    assert notes.read_text(encoding="utf-8") == '{"mine": true}'
    assert not (tmp_path / "notes.safetensors").exists()
    with pytest.raises(HeadsError, match="is a folder; give a file name"):
        heads.save(tmp_path)


def test_fit_names_every_label_that_is_not_an_answer_at_once(tmp_path: Path):
    rubric, _ = project(tmp_path)
    rows = labelled()[:8]
    rows[1]["label"], rows[3]["code"], rows[6]["label"] = "Positive", "k9", "yes"
    data = write_rows(tmp_path / "rows.csv", rows)
    result = invoke("fit", rubric, "--data", data, "--label", "sentiment=label", "--rows", "1:8")
    assert result.exit_code == 1
    assert only_lines(result) == [
        f"error: {data}: data row 1: 'Positive' is not an answer of field 'sentiment'; did you mean 'positive'? "
        "(it offers negative, positive)",
        f"{data}: data row 3: 'k9' is not an answer of field 'code' (it offers k1, k2)",
        f"{data}: data row 6: 'yes' is not an answer of field 'sentiment' (it offers negative, positive)",
    ]


def test_calibrating_a_head_on_the_rows_it_was_fitted_on_is_warned_about(fitted_project, tmp_path: Path):
    """On its own training rows a head is right nearly everywhere, so the temperature runs to the end of
    its search; the command says so and why, instead of reporting a better ECE silently."""
    rubric, rows, saved = fitted_project
    here = tmp_path / "review.yaml"
    shutil.copy(rubric, here)
    shutil.copy(saved, Heads.path_for(here))
    result = invoke("calibrate", here, "--data", rows, "--field", "code")
    assert result.exit_code == 0, result.output
    overlap, warning = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert overlap.startswith(f"warning: 40 of the 40 rows calibrated on were used to fit the heads in "
                              f"{Heads.path_for(here)} (data rows 0, 1, 2, 3, 4, ... (40 in all))")
    assert warning.startswith("warning: code: the temperature stopped at the search's lower end (0.050)")
    assert warning.endswith("rows its fitted head was trained on (calibrate a head on rows it was not fitted on)")


def test_heads_remember_their_fitting_rows_without_their_text(fitted_project, tmp_path: Path):
    """Saved and loaded, heads recognise the rows they were fitted on (by a hash of each input) and no
    other; rows they were not fitted on are scored without a warning."""
    _, _, saved = fitted_project
    heads = Heads.load(saved)
    texts = [row["text"] for row in labelled()]
    assert heads.fitted_on is not None and len(heads.fitted_on) == len(set(texts))
    assert heads.fitted_on_rows([texts[3], "a sentence nobody fitted on", texts[0]]) == [0, 2]
    assert heads.fitted_on_rows([]) == []
    assert all(text not in saved.read_bytes().decode("latin-1") for text in texts)
    rubric = tmp_path / "review.yaml"
    rubric.write_text(REVIEW_YAML, encoding="utf-8")
    shutil.copy(saved, Heads.path_for(rubric))
    fresh = write_rows(tmp_path / "fresh.csv", [{"text": "an utterly charming film .", "label": "positive", "code": "k2"},
                                                 {"text": "a dull , lifeless mess .", "label": "negative", "code": "k1"}])
    result = invoke("eval", rubric, "--data", fresh, "--field", "code")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["n"] == 2 and "were used to fit the heads" not in result.stderr
    assert invoke("eval", rubric, "--data", fresh, "--field", "code", "--out", tmp_path / "out").exit_code == 0
    assert json.loads((tmp_path / "out" / "eval.json").read_text())["rows_heads_were_fitted_on"] == 0


def test_the_fitting_rows_warning_is_given_only_where_a_head_bears_on_the_scored_field(engine, tmp_path: Path):
    """Heads fitting `code` only, read in the same pass as `sentiment` (no pinning): scoring `sentiment`
    on the fitting rows says nothing about them; scoring `code` does."""
    rubric, rows = project(tmp_path)
    result = fit_heads(engine, load_rubric(rubric), [(r["text"], {"code": r["code"]}) for r in labelled()])
    assert result.heads.fitted_fields == ["code"]
    result.heads.save(Heads.path_for(rubric))
    untouched = invoke("eval", rubric, "--data", rows, "--field", "sentiment", "--label-column", "label", "--rows", "0:6")
    assert untouched.exit_code == 0, untouched.output
    summary = json.loads(untouched.stdout)
    assert summary["readout"] == "zero_shot" and "rows_heads_were_fitted_on" not in summary
    assert "were used to fit the heads" not in untouched.stderr
    fitted = invoke("eval", rubric, "--data", rows, "--field", "code", "--rows", "0:6")
    assert fitted.exit_code == 0, fitted.output
    assert json.loads(fitted.stdout)["rows_heads_were_fitted_on"] == 6
    assert "warning: 6 of the 6 rows scored were used to fit the heads" in fitted.stderr


def test_fit_reads_a_csv_row_short_of_a_label_as_unlabelled_and_refuses_one_short_of_its_text(tmp_path: Path):
    """Checked before the model loads: `code` is the last column, so a row that stops early labels nothing
    there; a row that stops before its text (the last column here) is malformed."""
    from decisionflow.cli.fit import _examples
    from decisionflow.errors import DataError

    rubric = load_rubric(project(tmp_path)[0])
    data = tmp_path / "short.csv"
    data.write_text("text,label,code\na gorgeous film,positive,k2\na dull film,negative\n", encoding="utf-8")
    examples, _ = _examples(rubric, data, ["sentiment=label"], "text", None, False)
    assert [e.labels for e in examples] == [{"sentiment": "positive", "code": "k2"}, {"sentiment": "negative"}]
    shifted = tmp_path / "shifted.csv"
    shifted.write_text("label,code,text\npositive,k2,a gorgeous film\nnegative,k1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"shifted\.csv: data row 1 has fewer cells than the header$"):
        _examples(rubric, shifted, ["sentiment=label"], "text", None, False)
