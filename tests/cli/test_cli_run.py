"""`decisionflow run` and `plan --tokens` as a user runs them (real bundled model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decisionflow.cli import app

ROOT = Path(__file__).resolve().parents[2]
TRIAGE = str(ROOT / "workflows" / "support_triage.yaml")
SENTIMENT = str(ROOT / "workflows" / "sentiment.yaml")
TICKET = (
    "Subject: charged twice for my March invoice. I was billed twice ($49 each). "
    "Please refund the duplicate charge within 12 hours or I will cancel. -- Dana"
)

pytestmark = pytest.mark.model


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_run_json_takes_one_pass_per_round_of_the_plan():
    planned = invoke("plan", TRIAGE, "--json")
    assert planned.exit_code == 0, planned.output
    rounds = json.loads(planned.stdout)["rounds"]
    result = invoke("run", TRIAGE, "--json", "--text", TICKET)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["value"]) >= 20
    assert data["stats"]["forward_passes"] == len(rounds)
    for name, field in data["fields"].items():
        if field.get("asked", True):
            assert sum(field["probabilities"].values()) == pytest.approx(1.0)
            assert field["value"] == data["value"][name]
            assert field["round"] == next(r["index"] for r in rounds if name in r["fields"])


def test_run_prints_a_score_table():
    result = invoke("run", SENTIMENT, "--text", "a gorgeous , witty , seductive movie .")
    assert result.exit_code == 0, result.output
    assert "sentiment" in result.stdout and "forward pass" in result.stdout
    assert "positive" in result.stdout and "negative" in result.stdout
    assert "p debiased (content_free_half)" in result.stdout  # the table says its p are corrected


def test_run_file_resumes_without_redoing_rows(tmp_path: Path):
    source = tmp_path / "in.jsonl"
    rows = [{"id": "a", "text": "a gorgeous film"}, {"id": "b", "text": "dull and lifeless"}, {"id": "c", "text": "  "}]
    source.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    output = tmp_path / "out.jsonl"
    first = invoke("run", SENTIMENT, "--input", str(source), "--output", str(output))
    assert first.exit_code == 1  # one row could not be decided
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["id"] for r in records] == ["a", "b", "c"]
    assert "error" in records[2] and "empty" in records[2]["error"]
    assert records[0]["value"]["sentiment"] in ("positive", "negative")
    source.write_text(source.read_text().replace('"  "', '"an uneven but moving drama"'))
    second = invoke("run", SENTIMENT, "--input", str(source), "--output", str(output))
    assert second.exit_code == 0, second.output
    assert "2 already done" in second.output
    records = [json.loads(line) for line in output.read_text().splitlines()]
    decided = [r["id"] for r in records if "error" not in r]
    assert sorted(decided) == ["a", "b", "c"]


def test_run_errors_are_one_line_not_a_traceback(tmp_path: Path):
    empty = invoke("run", SENTIMENT, "--text", "   ")
    assert empty.exit_code == 1
    assert "empty" in empty.output and "Traceback" not in empty.output
    both = invoke("run", SENTIMENT, "--text", "x", "--input", "in.jsonl")
    assert both.exit_code == 2 and "exactly one of --text or --input" in both.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nfields:\n  x: {kind: score, question: q, min: 3, max: 1}\n")
    broken = invoke("run", str(bad), "--text", "hello")
    assert broken.exit_code == 1
    assert "fields.x" in broken.output and "Traceback" not in broken.output


def test_plan_token_view_counts_rows_and_passes():
    result = invoke("plan", SENTIMENT, "--json", "--tokens", "--text", "a gorgeous film")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["forward_passes"] == 1 and data["prefix_tokens"] > 50
    row = data["rounds"][0]["rows"][0]
    assert row["field"] == "sentiment" and row["row_tokens"] >= row["stem_tokens"] >= 3
    assert row["row_ends"].endswith('"')
    assert 3 <= data["request_tokens"] < 20


def test_plan_counts_the_prefix_run_builds_where_the_catalog_is_left_to_the_engine():
    # 77 options: the engine's `auto` catalog lists none of them, so the prefix is a fraction of a full catalog's.
    rubric = str(Path(SENTIMENT).parent / "banking77_intent.yaml")
    planned = invoke("plan", rubric, "--json", "--tokens")
    ran = invoke("run", rubric, "--json", "--text", "my card is lost")
    assert planned.exit_code == 0 and ran.exit_code == 0, planned.output + ran.output
    assert json.loads(planned.stdout)["prefix_tokens"] == json.loads(ran.stdout)["stats"]["prefix_tokens"] < 500


def test_run_refuses_a_calibration_file_of_another_rubric(tmp_path: Path):
    rubric = tmp_path / "mood.yaml"
    rubric.write_text(Path(SENTIMENT).read_text().replace("name: sentiment", "name: mood"))
    (tmp_path / "mood.calibration.json").write_text(json.dumps({"rubric": "sentiment", "fields": {}}))
    result = invoke("run", str(rubric), "--text", "a gorgeous film")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: {tmp_path / 'mood.calibration.json'}: the calibration is for rubric 'sentiment', not 'mood'"
    ]


PICKY = '''\
from typing import Annotated, Literal
from pydantic import BaseModel, field_validator
from decisionflow import ask, decision

@decision(instructions="Judge one review.")
class Review(BaseModel):
    sentiment: Annotated[Literal["positive", "negative"], ask("The review's sentiment")]

    @field_validator("sentiment")
    @classmethod
    def _refuse(cls, value):
        raise ValueError("sentiment needs a second opinion")
'''


def test_a_validator_that_refuses_answers_is_an_error_line_and_a_row_record(tmp_path: Path):
    module = tmp_path / "picky.py"
    module.write_text(PICKY)
    single = invoke("run", f"{module}:Review", "--text", "a gorgeous film")
    assert single.exit_code == 1
    assert "Review refused the decided answers" in single.output and "second opinion" in single.output
    assert "Traceback" not in single.output
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "text": "a gorgeous film"}\n{"id": 2, "text": "dull"}\n')
    output = tmp_path / "out.jsonl"
    batch = invoke("run", f"{module}:Review", "--input", str(source), "--output", str(output))
    assert batch.exit_code == 1 and "0 decided" in batch.output and "2 failed" in batch.output
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["id"] for r in records] == [1, 2]  # integer ids stay integers
    assert all("second opinion" in r["error"] for r in records)


def test_shipped_workflows_resolve_by_name_from_any_directory(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert invoke("validate", "workflows/sentiment.yaml", "sentiment").exit_code == 0
    missing = invoke("validate", "workflows/nope.yaml")
    assert missing.exit_code == 1 and "file not found" in missing.output


def test_run_timings_say_where_the_time_went():
    result = invoke("run", SENTIMENT, "--json", "--timings", "--text", "a gorgeous, witty film")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    timings = data["timings_ms"]
    assert {"start_up", "model_load", "passes", "total"} <= set(timings)
    assert all(value >= 0 for value in timings.values())
    assert timings["total"] >= timings["model_load"] + timings["passes"]
    assert "timings: start_up" in result.stderr


def test_either_loader_gives_the_same_decision_and_an_unknown_one_is_one_line():
    own = invoke("run", SENTIMENT, "--json", "--text", "a gorgeous, witty film")
    built = invoke("run", SENTIMENT, "--json", "--loader", "transformers", "--text", "a gorgeous, witty film")
    assert own.exit_code == 0 and built.exit_code == 0, own.output + built.output
    a, b = json.loads(own.stdout), json.loads(built.stdout)
    assert a["value"] == b["value"]
    assert a["fields"]["sentiment"]["probabilities"] == pytest.approx(b["fields"]["sentiment"]["probabilities"], abs=2e-5)
    unknown = invoke("run", SENTIMENT, "--loader", "fast", "--text", "a gorgeous, witty film")
    assert unknown.exit_code == 1
    assert "unknown loader 'fast'" in unknown.output and "Traceback" not in unknown.output


def test_run_applies_a_calibration_file_given_by_name_and_says_so(tmp_path):
    from decisionflow.runtime.readout.calibration import Calibration, FieldCalibration

    path = tmp_path / "flat.calibration.json"
    Calibration(rubric="sentiment", fields={"sentiment": FieldCalibration(temperature=4.0)}).save(path)
    plain = invoke("run", "sentiment", "--json", "--text", "a gorgeous, moving film")
    calibrated = invoke("run", "sentiment", "--json", "--text", "a gorgeous, moving film", "--calibration", str(path))
    assert plain.exit_code == 0 and calibrated.exit_code == 0, calibrated.output
    top = max(json.loads(plain.stdout)["fields"]["sentiment"]["probabilities"].values())
    flattened = max(json.loads(calibrated.stdout)["fields"]["sentiment"]["probabilities"].values())
    assert 0.5 < flattened < top  # a temperature above 1 flattens the distribution
    assert f"calibration: {path} (sentiment)" in calibrated.stderr
    assert "calibration:" not in plain.stderr
    missing = invoke("run", "sentiment", "--text", "fine", "--calibration", str(tmp_path / "none.json"))
    assert missing.exit_code == 1
    assert missing.stderr.strip().splitlines() == [f"error: calibration file not found: {tmp_path / 'none.json'}"]
