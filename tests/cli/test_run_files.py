"""`decisionflow run --input/--output`: an output that is not this run's own is refused before the model
loads, with one `error:` line, exit 2, and nothing written; ids keep their type; records name their rubric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import decisionflow.cli.run as run_command
from decisionflow.batch.resumable_jsonl import OutputIdentity, ResumableOutput
from decisionflow.cli import app
from decisionflow.spec.yaml_rubric import load_rubric

ROOT = Path(__file__).resolve().parents[2]
SENTIMENT = str(ROOT / "workflows" / "sentiment.yaml")
TRIAGE = str(ROOT / "workflows" / "support_triage.yaml")
ROWS = '{"id": 0, "text": "a gorgeous film"}\n{"id": 1, "text": "dull and lifeless"}\n'


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if the command gets as far as loading a model."""
    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the output was refused")

    monkeypatch.setattr(run_command, "load_engine", refuse)


def refused(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert message in lines[0], result.output


def test_the_input_jsonl_is_refused_as_the_output(tmp_path, no_model):
    source = tmp_path / "same.jsonl"
    source.write_text(ROWS)
    refused(invoke("run", SENTIMENT, "--input", str(source), "--output", str(source)), "is the input file")
    assert source.read_text() == ROWS


def test_the_input_csv_is_refused_as_the_output(tmp_path, no_model):
    source = tmp_path / "same.csv"
    source.write_text("id,text\n1,a gorgeous film\n2,dull\n")
    refused(invoke("run", SENTIMENT, "--input", str(source), "--output", str(source)), "is the input file")
    assert source.read_text() == "id,text\n1,a gorgeous film\n2,dull\n"


def test_an_unrelated_text_file_is_refused_and_left_alone(tmp_path, no_model):
    source = tmp_path / "in.jsonl"
    source.write_text(ROWS)
    notes = tmp_path / "notes.txt"
    notes.write_text("".join(f"note {i}\n" for i in range(143)))
    before = notes.read_bytes()
    refused(invoke("run", SENTIMENT, "--input", str(source), "--output", str(notes)), "notes.txt:1: not JSON")
    assert notes.read_bytes() == before


def test_a_copy_of_the_input_is_refused_as_the_output(tmp_path, no_model):
    source = tmp_path / "in.jsonl"
    source.write_text(ROWS)
    copy = tmp_path / "copy.jsonl"
    copy.write_text(ROWS)
    refused(invoke("run", SENTIMENT, "--input", str(source), "--output", str(copy)), "copy.jsonl:1: not a result record")
    assert copy.read_text() == ROWS


def test_another_rubrics_output_is_refused_naming_both(tmp_path, no_model):
    source = tmp_path / "in.jsonl"
    source.write_text(ROWS)
    out = tmp_path / "out.jsonl"
    with ResumableOutput(out, OutputIdentity.of(load_rubric(SENTIMENT))) as output:
        output.write_chunk([{"id": 0, "value": {"sentiment": "positive"}}, {"id": 1, "value": {"sentiment": "negative"}}])
    before = out.read_bytes()
    result = invoke("run", TRIAGE, "--input", str(source), "--output", str(out))
    refused(result, "a result of rubric 'sentiment'")
    assert "not of rubric 'support_triage'" in result.output
    assert out.read_bytes() == before


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("some/dir", "is a folder; the output must be a file"),
        ("out.csv", "the output is JSONL (one JSON object per line), not .csv; name it .jsonl"),
        ("blocker/out.jsonl", "cannot create the output's folder"),
    ],
)
def test_a_bad_output_path_is_refused_before_the_model_loads(tmp_path, no_model, output, message):
    source = tmp_path / "in.jsonl"
    source.write_text(ROWS)
    (tmp_path / "some" / "dir").mkdir(parents=True)
    (tmp_path / "blocker").write_text("a file, not a folder")
    refused(invoke("run", SENTIMENT, "--input", str(source), "--output", str(tmp_path / output)), message)
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        (["--input", "in.jsonl"], 2, "error: --input needs --output"),
        ([], 2, "error: give exactly one of --text or --input"),
        (["--input", "nope.jsonl", "--output", "o.jsonl"], 1, "error: input file not found: nope.jsonl"),
    ],
)
def test_run_errors_use_the_error_prefix(tmp_path, monkeypatch, no_model, arguments, code, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.jsonl").write_text(ROWS)
    result = invoke("run", SENTIMENT, *arguments)
    assert result.exit_code == code, result.output
    assert result.output.strip() == message


@pytest.mark.model
def test_records_keep_integer_ids_and_name_their_rubric_and_another_rubric_is_refused(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(ROWS + '{"text": "no id: the line number"}\n')
    out = tmp_path / "out.jsonl"
    first = invoke("run", SENTIMENT, "--input", str(source), "--output", str(out))
    assert first.exit_code == 0, first.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == [0, 1, 3]
    identity = OutputIdentity.of(load_rubric(SENTIMENT))
    assert all((r["rubric"], r["rubric_fingerprint"]) == (identity.rubric, identity.fingerprint) for r in records)
    again = invoke("run", SENTIMENT, "--input", str(source), "--output", str(out))
    assert again.exit_code == 0 and "0 decided, 3 already done" in again.output, again.output
    before = out.read_bytes()
    other = invoke("run", TRIAGE, "--input", str(source), "--output", str(out))
    refused(other, "a result of rubric 'sentiment'")
    assert out.read_bytes() == before


def test_the_input_reached_through_a_folder_not_yet_made_is_refused_and_nothing_is_created(tmp_path, no_model):
    source = tmp_path / "same.jsonl"
    source.write_text(ROWS)
    output = tmp_path / "new" / ".." / "same.jsonl"
    refused(invoke("run", SENTIMENT, "--input", str(source), "--output", str(output)), "is the input file")
    assert source.read_text() == ROWS
    assert not (tmp_path / "new").exists()
