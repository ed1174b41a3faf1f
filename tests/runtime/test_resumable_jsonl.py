"""Resumable JSONL runs: whatever is killed when, the output ends with exactly one record per input id."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from decisionflow.errors import DataError
from decisionflow.runtime.resumable_jsonl import decide_file, read_rows, recover_output
from decisionflow.spec.yaml_rubric import load_rubric

ROOT = Path(__file__).resolve().parents[2]
SENTIMENT = ROOT / "workflows" / "sentiment.yaml"


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
        b'garbage that is not json\n'
        b'{"id": "3", "value": {}}\n'
        b'{"id": "4", "val'
    )
    done, dropped = recover_output(out)
    assert done == {"1", "3"} and dropped == 4
    assert [r["id"] for r in records(out)] == ["1", "3"]
    assert recover_output(out) == ({"1", "3"}, 0)  # a clean file is left as it is


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
