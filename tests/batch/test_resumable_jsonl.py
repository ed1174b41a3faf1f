"""Resumable JSONL runs: whatever is killed when, the output ends with exactly one record per input id."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from decisionflow.batch.resumable_jsonl import (
    OutputIdentity,
    OutputRefused,
    ResumableOutput,
    check_output,
    decide_file,
    read_rows,
    recover_output,
)
from decisionflow.errors import DataError
from decisionflow.spec.yaml_rubric import load_rubric

ROOT = Path(__file__).resolve().parents[2]
SENTIMENT = ROOT / "workflows" / "sentiment.yaml"
TRIAGE = ROOT / "workflows" / "support_triage.yaml"


def write_lines(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def records(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    assert text == "" or text.endswith("\n"), "the output ends mid-line"
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"id": 7, "text": "a"}, {"id": "7", "text": "b"}], "in.jsonl:2: id '7' is already used on line 1"),
        ([{"text": "a"}, {"id": 1, "text": "b"}], "in.jsonl:2: id '1' is already used on line 1"),
        ([{"id": 2, "text": "a"}, {"text": "b"}], "(a line without an id takes its line number)"),
        ([{"id": [1], "text": "a"}], "`id` must be a string or an integer"),
    ],
)
def test_duplicate_or_odd_ids_are_refused_up_front(tmp_path, rows, message):
    with pytest.raises(DataError, match=re.escape(message)):
        read_rows(write_lines(tmp_path / "in.jsonl", rows))


def test_recovery_drops_a_torn_tail_errors_and_duplicates(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_bytes(
        b'{"id": "1", "value": {}}\n'
        b'{"id": "2", "error": "the input is empty"}\n'
        b'{"id": "1", "value": {"again": true}}\n'
        b'\n'
        b'{"id": 3, "value": {}}\n'
        b'{"id": "4", "val'
    )
    done, dropped = recover_output(out)
    assert done == {"1", "3"} and dropped == 4
    assert [r["id"] for r in records(out)] == ["1", 3]
    assert recover_output(out) == ({"1", "3"}, 0)  # a clean file is left as it is


def test_recovery_keeps_the_outputs_permissions(tmp_path):
    # The rewrite goes through an owner-only scratch file; the output must come back as readable as it was.
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"id": "1", "value": {}}\n{"id": "2", "val')
    out.chmod(0o644)
    assert recover_output(out) == ({"1"}, 1)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


# -- the output must be this run's own -----------------------------------------------------------

SENTIMENT_RECORD = {"id": "a", "value": {"sentiment": "positive"}}


def identity_of(path: Path) -> OutputIdentity:
    return OutputIdentity.of(load_rubric(path))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a note\nanother note\n", "out.jsonl:1: not JSON"),
        (b'{"id": "1", "value": {}}\ngarbage that is not json\n{"id": "3", "value": {}}\n', "out.jsonl:2: not JSON"),
        (b'{"id": 1, "text": "an input line, not a result"}\n', "out.jsonl:1: not a result record"),
        (b'{"id": 1, "value": {}, "error": "both"}\n', "out.jsonl:1: not a result record"),
        (b'[1, 2]\n', "out.jsonl:1: not a result record"),
        (b'{"id": "1", "value": {}}\na last line, not a record cut short', "out.jsonl:2: not a result record, nor one cut short"),
    ],
)
def test_an_output_holding_other_lines_is_refused_and_left_alone(tmp_path, content, message):
    out = tmp_path / "out.jsonl"
    out.write_bytes(content)
    with pytest.raises(OutputRefused, match=re.escape(message)):
        recover_output(out)
    with pytest.raises(OutputRefused, match=re.escape(message)):
        check_output(out)
    assert out.read_bytes() == content


def test_output_records_of_another_rubric_are_refused_naming_both(tmp_path):
    sentiment, triage = identity_of(SENTIMENT), identity_of(TRIAGE)
    out = tmp_path / "out.jsonl"
    with ResumableOutput(out, sentiment) as output:
        output.write_chunk([SENTIMENT_RECORD])
    line = json.loads(out.read_text())
    assert line["rubric"] == "sentiment" and line["rubric_fingerprint"] == sentiment.fingerprint
    assert list(line)[:3] == ["id", "rubric", "rubric_fingerprint"]
    before = out.read_bytes()
    with pytest.raises(OutputRefused) as refused:
        recover_output(out, triage)
    message = str(refused.value)
    assert "'sentiment'" in message and "'support_triage'" in message
    assert sentiment.fingerprint in message and triage.fingerprint in message
    assert out.read_bytes() == before
    assert recover_output(out, sentiment) == ({"a"}, 0)


def test_a_changed_rubric_is_refused_as_it_was_and_as_it_is(tmp_path):
    changed = tmp_path / "sentiment.yaml"
    changed.write_text(SENTIMENT.read_text().replace("options: [negative, positive]", "options: [negative, neutral, positive]"))
    before, after = identity_of(SENTIMENT), identity_of(changed)
    assert before.rubric == after.rubric and before.fingerprint != after.fingerprint
    out = tmp_path / "out.jsonl"
    with ResumableOutput(out, before) as output:
        output.write_chunk([SENTIMENT_RECORD])
    with pytest.raises(OutputRefused, match="as it was .* not as it is now .*the rubric changed"):
        check_output(out, identity=after)


def test_records_written_before_they_named_their_rubric_still_resume(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "value": {"sentiment": "positive"}}\n{"id": "b", "error": "the input is empty"}\n')
    assert recover_output(out, identity_of(SENTIMENT)) == ({"a"}, 1)
    # ... unless they name a field the rubric does not have: another rubric's output.
    with pytest.raises(OutputRefused, match="field 'sentiment', which rubric 'support_triage' does not have"):
        recover_output(out, identity_of(TRIAGE))


def test_the_input_file_a_folder_or_another_format_is_refused_as_output(tmp_path):
    source = write_lines(tmp_path / "in.jsonl", [{"id": 1, "text": "a"}])
    with pytest.raises(OutputRefused, match="is the input file"):
        check_output(source, source=source)
    (tmp_path / "link.jsonl").symlink_to(source)
    with pytest.raises(OutputRefused, match="is the input file"):
        check_output(tmp_path / "link.jsonl", source=source)
    with pytest.raises(OutputRefused, match="is a folder"):
        check_output(tmp_path, source=source)
    for name in ("out.csv", "out.parquet", "out.jsonl.gz"):
        with pytest.raises(OutputRefused, match="the output is JSONL"):
            check_output(tmp_path / name)
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputRefused, match="is a file"):
        check_output(tmp_path / "file" / "deeper" / "out.jsonl")
    check_output(tmp_path / "new" / "folders" / "out.jsonl")  # missing folders are created when the run starts
    check_output(tmp_path / "out.ndjson")
    assert source.read_text() == '{"id": 1, "text": "a"}\n'


def test_an_output_that_cannot_be_written_is_refused(tmp_path, monkeypatch):
    import decisionflow.batch.resumable_jsonl as resumable

    monkeypatch.setattr(resumable.os, "access", lambda *args, **kwargs: False)  # as a user without permission
    with pytest.raises(OutputRefused, match="no permission to create the output in"):
        check_output(tmp_path / "out.jsonl")
    (tmp_path / "out.jsonl").write_text("")
    with pytest.raises(OutputRefused, match="no permission to read and write the output"):
        check_output(tmp_path / "out.jsonl")


def test_decide_file_refuses_its_input_as_output_before_deciding(tmp_path):
    source = write_lines(tmp_path / "in.jsonl", [{"id": 1, "text": "a"}])

    class NoEngine:
        def decide_each(self, *args, **kwargs):
            raise AssertionError("nothing is decided into a refused output")

    with pytest.raises(OutputRefused, match="is the input file"):
        decide_file(NoEngine(), load_rubric(SENTIMENT), source, source)
    assert source.read_text() == '{"id": 1, "text": "a"}\n'


def test_output_ids_keep_the_type_the_input_gave_them(tmp_path):
    source = write_lines(tmp_path / "in.jsonl", [{"id": 0, "text": "a"}, {"id": "x", "text": "b"}, {"text": "c"}])
    assert [row.output_id for row in read_rows(source)] == [0, "x", 3]
    assert [row.id for row in read_rows(source)] == ["0", "x", "3"]


@pytest.mark.model
def test_a_rerun_leaves_one_record_per_id_after_errors(engine, tmp_path):
    rubric = load_rubric(SENTIMENT)
    source = write_lines(tmp_path / "in.jsonl", [
        {"id": "a", "text": "a gorgeous, witty film"}, {"id": "b", "text": "   "}, {"id": "c", "text": "dull and long"},
    ])
    out = tmp_path / "out.jsonl"
    first = decide_file(engine, rubric, source, out)
    assert (first.decided, first.failed) == (2, 1)
    second = decide_file(engine, rubric, source, out)
    assert (second.skipped, second.failed, second.repaired) == (2, 1, 1)
    kept = records(out)
    assert sorted(r["id"] for r in kept) == ["a", "b", "c"]
    assert "empty" in next(r for r in kept if r["id"] == "b")["error"]


@pytest.mark.model
def test_a_lone_surrogate_fails_its_row_only(engine, tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": 1, "text": "fine film"}\n{"id": 2, "text": "bad \\ud800 text"}\n', encoding="utf-8")
    out = tmp_path / "out.jsonl"
    summary = decide_file(engine, load_rubric(SENTIMENT), source, out)
    assert (summary.decided, summary.failed) == (1, 1)
    assert "surrogate" in records(out)[1]["error"]


def _run(source: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "decisionflow.cli", "run", str(SENTIMENT), "--input", str(source), "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
    )


@pytest.mark.model
@pytest.mark.slow
def test_sigkill_at_random_points_then_resume(tmp_path):
    rng = random.Random(20261130)
    texts = ["a gorgeous, witty film", "dull and long", "", "the cast is wonderful", "a mess from start to end"]
    rows = [{"id": f"r{i}", "text": texts[i % len(texts)] + f" (take {i})" * bool(texts[i % len(texts)])}
            for i in range(48)]
    rows[5]["text"] = ""  # an error record on every run until it is the only thing left
    source = write_lines(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    kills = 0
    for _ in range(3):
        process = _run(source, out)
        deadline = time.monotonic() + 120
        while process.poll() is None and (not out.exists() or out.stat().st_size == 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 1.5))
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            kills += 1
        process.wait()
    assert kills >= 1
    final = _run(source, out)
    _, err = final.communicate(timeout=300)
    assert final.returncode == 1, err  # the empty row fails, and says so
    kept = records(out)
    ids = [r["id"] for r in kept]
    assert sorted(ids) == sorted(row["id"] for row in rows), err
    assert len(ids) == len(set(ids))
    assert sorted(r["id"] for r in kept if "error" in r) == sorted(row["id"] for row in rows if not row["text"])
