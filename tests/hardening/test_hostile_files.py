"""Generated input and output files for `run --input`: a record torn at any byte, error records,
duplicates, and rows whose text is broken. Whatever the file holds, every id ends up exactly once
and every line parses; a bad row costs only its own record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hostile import CORPUS
from hypothesis import given
from hypothesis import strategies as st

from decisionflow.batch.resumable_jsonl import (
    ResumableOutput,
    decide_file,
    encode_record,
    read_rows,
    recover_output,
)
from decisionflow.errors import DataError
from decisionflow.spec.yaml_rubric import load_rubric

ROOT = Path(__file__).resolve().parents[2]

texts = st.one_of(
    st.text(st.characters(codec=None), max_size=12),  # lone surrogates included
    st.sampled_from(["", "  ", "\u200b", "line\nbreak", "\u2028", 'quote " and \\ backslash']),
)
records = st.builds(
    lambda rid, error, text: {"id": rid, "error": text} if error else {"id": rid, "value": {"label": text}},
    st.integers(0, 6).map(str), st.booleans(), texts,
)


def lines_of(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL file, split on `\n` only (JSON strings may hold U+2028 and friends)."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), "the file does not end with a complete line"
    return [json.loads(line) for line in data.split(b"\n") if line.strip()]


@CORPUS
@given(st.lists(records, max_size=8), st.data())
def test_a_record_torn_at_any_byte_is_dropped_and_every_kept_line_parses(tmp_path_factory, written, data):
    path = tmp_path_factory.mktemp("out") / "out.jsonl"
    content = b"".join(encode_record(record) for record in written)
    cut = data.draw(st.integers(0, len(content)))
    path.write_bytes(content[:cut])
    done, _ = recover_output(path)
    complete = content[:cut].count(b"\n")
    expected: list[str] = []
    for record in written[:complete]:
        if "error" not in record and record["id"] not in expected:
            expected.append(record["id"])
    assert done == set(expected)
    kept = lines_of(path)
    assert [r["id"] for r in kept] == expected and not any("error" in r for r in kept)
    assert recover_output(path) == (done, 0)  # a second resume changes nothing


@CORPUS
@given(st.lists(st.lists(records, max_size=4), min_size=1, max_size=4))
def test_appending_after_each_resume_keeps_one_record_per_id(tmp_path_factory, chunks):
    path = tmp_path_factory.mktemp("out") / "out.jsonl"
    for chunk in chunks:
        with ResumableOutput(path) as output:
            output.write_chunk([r for r in chunk if r["id"] not in output.done])
    recover_output(path)
    ids = [r["id"] for r in lines_of(path)]
    assert len(ids) == len(set(ids))


@CORPUS
@given(st.lists(st.one_of(st.integers(0, 5), st.integers(0, 5).map(str), st.none()), min_size=2, max_size=6))
def test_duplicate_ids_are_refused_up_front_naming_both_lines(tmp_path_factory, ids):
    path = tmp_path_factory.mktemp("in") / "in.jsonl"
    rows = [{"text": f"row {i}"} if rid is None else {"id": rid, "text": f"row {i}"} for i, rid in enumerate(ids)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    effective = [str(i + 1) if rid is None else str(rid) for i, rid in enumerate(ids)]
    if len(set(effective)) == len(effective):
        assert [row.id for row in read_rows(path)] == effective
        return
    with pytest.raises(DataError) as caught:
        read_rows(path)
    # The first row whose id an earlier row already has, and that earlier row.
    second = next(i for i, rid in enumerate(effective) if rid in effective[:i])
    first = effective.index(effective[second])
    message = str(caught.value).replace(str(path), "FILE")
    assert message.isprintable() and str(first + 1) in message and str(second + 1) in message, message


@pytest.mark.model
def test_a_file_with_broken_rows_decides_the_good_ones_and_records_each_row_once(engine, tmp_path):
    source, output = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    payloads = {
        "good": "a gorgeous, witty film", "empty": "", "invisible": "\u200b \u2060", "surrogate": "caf\udce9",
        "conversation": [{"role": "user", "content": "a dull film"}], "bad conversation": [{"role": "user"}],
    }
    # `ensure_ascii` writes the lone surrogate as the `\udce9` escape a JSON file from elsewhere would hold.
    source.write_text("".join(json.dumps({"id": kind, "text": text}) + "\n" for kind, text in payloads.items()))
    rubric = load_rubric(ROOT / "workflows" / "sentiment.yaml")
    summary = decide_file(engine, rubric, source, output)
    records = {r["id"]: r for r in lines_of(output)}
    assert sorted(records) == sorted(payloads) and summary.failed == 4
    for kind, record in records.items():
        assert ("error" in record) == (kind not in ("good", "conversation")), record
    rerun = decide_file(engine, rubric, source, output)  # the failed rows are tried again, nothing doubles
    assert rerun.skipped == 2 and rerun.failed == 4
    assert sorted(r["id"] for r in lines_of(output)) == sorted(payloads)
