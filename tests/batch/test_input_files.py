"""Input files for batch runs: JSONL, CSV and Parquet under one id rule, checked before anything is decided."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from decisionflow.batch.input_files import input_format, read_rows
from decisionflow.cli import app
from decisionflow.errors import DataError

ROOT = Path(__file__).resolve().parents[2]
SENTIMENT = str(ROOT / "workflows" / "sentiment.yaml")


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def parquet(path: Path, **columns) -> Path:
    pq.write_table(pyarrow.table(columns), path)
    return path


def test_formats_follow_the_suffix_and_anything_else_is_jsonl():
    assert [input_format(Path(p)) for p in ("a.csv", "a.CSV", "a.parquet", "a.pq", "a.jsonl", "a.txt")] == [
        "csv", "csv", "parquet", "parquet", "jsonl", "jsonl",
    ]


def test_csv_rows_take_the_text_and_id_columns(tmp_path):
    source = write(tmp_path / "in.csv", '\ufeffid,text,other\n7,"hello, world",x\nb,"two\nlines",y\n')
    rows = read_rows(source)
    assert [(r.id, r.payload, r.line) for r in rows] == [("7", "hello, world", 1), ("b", "two\nlines", 2)]


def test_csv_without_an_id_column_numbers_its_rows(tmp_path):
    source = write(tmp_path / "in.csv", "input\nfirst\nsecond\n")
    assert [(r.id, r.payload) for r in read_rows(source)] == [("1", "first"), ("2", "second")]


def test_named_columns_are_used_and_missing_ones_are_named(tmp_path):
    source = write(tmp_path / "in.csv", "key,body\nk1,hello\nk2,bye\n")
    assert [(r.id, r.payload) for r in read_rows(source, text_column="body", id_column="key")] == [("k1", "hello"), ("k2", "bye")]
    with pytest.raises(DataError, match=re.escape("no `text` column (also accepted: input, messages; or name one with --text-column); columns: key, body")):
        read_rows(source)
    with pytest.raises(DataError, match=re.escape("no column 'ident' (the --id-column); columns: key, body")):
        read_rows(source, text_column="body", id_column="ident")
    with pytest.raises(DataError, match="cannot be both the text and the id"):
        read_rows(source, text_column="body", id_column="body")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("id,text\na,x\nb,y\na,z\n", "in.csv: row 3: id 'a' is already used on row 1"),
        ("text\nx\n", None),
        ("id,text\n,x\n", "in.csv: row 1: the id is empty"),
        ("id,text\na,x,extra\n", "in.csv: row 1: 3 cells, but the header has 2 columns"),
        ("", "the CSV file is empty"),
        # a quote opened and never closed would swallow every later row into one text
        ('id,text\n1,good\n2,"the ""special"" was bad\n3,great\n4,cold\n',
         "in.csv: line 3: a quoted cell opens in the record there and is never closed (the file ends inside it, at line 5)"),
        ('id,text\n1,"great" food\n2,x\n', "in.csv: line 2: text follows a closing quote in a cell"),
    ],
)
def test_csv_problems_are_refused_up_front_naming_the_rows(tmp_path, text, message):
    source = write(tmp_path / "in.csv", text)
    if message is None:
        assert len(read_rows(source)) == 1
        return
    with pytest.raises(DataError, match=re.escape(message)):
        read_rows(source)


def test_quotes_written_as_rfc_4180_asks_are_read_strictly_without_complaint(tmp_path):
    source = write(tmp_path / "in.csv", 'id,text\n1,"it\nspans"\n2,"said ""hi"""\n3,a "bare" quote\n')
    assert [row.payload for row in read_rows(source)] == ["it\nspans", 'said "hi"', 'a "bare" quote']


def test_a_cell_longer_than_the_csv_default_limit_is_read_for_the_model_to_refuse_alone(tmp_path):
    long_text = "word " * 60_000  # 300 KB: past Python's 128 KiB default cell limit
    source = write(tmp_path / "in.csv", f'id,text\n1,short\n2,"{long_text}"\n3,short again\n')
    assert [(row.id, len(row.payload)) for row in read_rows(source)] == [("1", 5), ("2", len(long_text)), ("3", 11)]


def test_a_jsonl_object_writing_a_key_twice_is_refused_naming_the_line_and_key(tmp_path):
    source = write(tmp_path / "in.jsonl", '{"id": "a", "text": "x"}\n{"id": "b", "text": "first", "text": "second"}\n')
    with pytest.raises(DataError, match=re.escape('in.jsonl:2: the key "text" is written twice in one object')):
        read_rows(source)
    nested = write(tmp_path / "nested.jsonl", '{"text": {"subject": "a", "subject": "b"}}\n')
    with pytest.raises(DataError, match=re.escape('nested.jsonl:1: the key "subject" is written twice')):
        read_rows(nested)


def test_a_row_number_id_clashing_with_a_given_id_names_both_rows(tmp_path):
    source = write(tmp_path / "in.jsonl", '{"id": 2, "text": "a"}\n{"text": "b"}\n')
    with pytest.raises(DataError, match=re.escape("in.jsonl:2: id '2' is already used on line 1 (a line without an id takes its line number)")):
        read_rows(source)


def test_jsonl_takes_named_keys(tmp_path):
    source = write(tmp_path / "in.jsonl", '{"ref": "x1", "body": "hello", "text": "not this"}\n')
    assert [(r.id, r.payload) for r in read_rows(source, text_column="body", id_column="ref")] == [("x1", "hello")]
    with pytest.raises(DataError, match=re.escape("in.jsonl:1: no `ref2` key (the --id-column)")):
        read_rows(source, text_column="body", id_column="ref2")


def test_parquet_cells_may_be_text_objects_or_conversations(tmp_path):
    source = parquet(
        tmp_path / "in.parquet",
        id=[10, 11, 12],
        text=["plain text", "more text", "third"],
        ticket=[{"subject": "refund", "body": "twice"}, {"subject": "parcel", "body": "late"}, {"subject": "x", "body": "y"}],
        chat=[[{"role": "user", "content": "hi"}], [{"role": "user", "content": "refund"}], []],
    )
    assert [(r.id, r.payload) for r in read_rows(source)] == [("10", "plain text"), ("11", "more text"), ("12", "third")]
    assert read_rows(source, text_column="ticket")[0].payload == {"subject": "refund", "body": "twice"}
    assert read_rows(source, text_column="chat")[1].payload == [{"role": "user", "content": "refund"}]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"id": [1, 2, 1], "text": ["a", "b", "c"]}, "in.parquet: row 3: id '1' is already used on row 1"),
        ({"id": [1, None], "text": ["a", "b"]}, "in.parquet: row 2: `id` must be a string or an integer, got null"),
        ({"id": [1.5, 2.5], "text": ["a", "b"]}, "`id` must be a string or an integer, got 1.5"),
        ({"body": ["a"]}, "no `text` column"),
    ],
)
def test_parquet_problems_are_refused_up_front(tmp_path, columns, message):
    source = parquet(tmp_path / "in.parquet", **columns)
    with pytest.raises(DataError, match=re.escape(message)):
        read_rows(source)


def test_a_file_that_is_not_parquet_is_named(tmp_path):
    with pytest.raises(DataError, match="not a readable Parquet file"):
        read_rows(write(tmp_path / "in.parquet", "id,text\n1,a\n"))


@pytest.mark.model
def test_run_decides_a_csv_file_by_its_own_ids(tmp_path):
    source = write(tmp_path / "in.csv", "ref,review\nr1,a gorgeous film\nr2,dull and lifeless\n")
    output = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["run", SENTIMENT, "--input", str(source), "--output", str(output),
                                      "--text-column", "review", "--id-column", "ref"])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["id"] for r in records] == ["r1", "r2"]
    assert all(r["value"]["sentiment"] in ("negative", "positive") for r in records)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--text", "x", "--output", "o.jsonl"], "--output applies to --input files only"),
        (["--text", "x", "--text-column", "t"], "--text-column applies to --input files only"),
        (["--text", "x", "--engine", "ray"], "--engine ray applies to --input files only"),
        (["--input", "in.csv", "--output", "o.jsonl", "--address", "127.0.0.1:6379"], "--address applies to --engine ray only"),
        (["--input", "in.csv", "--output", "o.jsonl", "--num-actors", "2"], "--num-actors applies to --engine ray only"),
    ],
)
def test_run_refuses_options_that_do_not_apply(arguments, message):
    result = CliRunner().invoke(app, ["run", SENTIMENT, *arguments])
    assert result.exit_code == 2
    assert message in result.output


def test_run_refuses_a_bad_csv_before_loading_a_model(tmp_path):
    source = write(tmp_path / "in.csv", "id,text\na,x\na,y\n")
    result = CliRunner().invoke(app, ["run", SENTIMENT, "--input", str(source), "--output", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 1
    assert "row 2: id 'a' is already used on row 1" in result.output


def test_a_byte_that_is_not_utf8_fails_its_row_only(tmp_path):
    from decisionflow.compiler.inputs import render_input
    from decisionflow.errors import InputError

    source = tmp_path / "in.jsonl"
    source.write_bytes(b'{"id": 1, "text": "good one"}\n{"id": 2, "text": "caf\xe9"}\n')
    good, bad = read_rows(source)
    assert render_input(good.payload) == "good one"
    with pytest.raises(InputError, match="lone surrogate"):
        render_input(bad.payload)
