"""Gold labels as data files write them: boolean spellings, float-written scores, and a clear warning
when a gold column holds none of a field's answers (no model needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from decisionflow.cli import app
from decisionflow.errors import DataError
from decisionflow.quality.labelled import gold_label, gold_warnings, load_labelled
from decisionflow.spec.yaml_rubric import loads_rubric

RUBRIC = """\
name: inbox
fields:
  spam: {kind: boolean, question: Whether the message is spam}
  urgency: {kind: score, question: How urgent, min: 0, max: 3}
  team: {kind: choice, question: Which team, options: [billing, shipping]}
"""


@pytest.fixture
def rubric():
    return loads_rubric(RUBRIC)


@pytest.mark.parametrize("written, label", [
    ("True", "true"), ("False", "false"), ("TRUE", "true"), ("false", "false"),
    ("yes", "true"), ("No", "false"), ("1", "true"), ("0", "false"), ("maybe", "maybe"),
])
def test_a_boolean_gold_label_accepts_the_common_spellings(rubric, written, label):
    assert gold_label(rubric.field("spam"), written) == label


@pytest.mark.parametrize("written, label", [("2", "2"), ("2.0", "2"), ("2.5", "2.5"), ("high", "high")])
def test_a_score_gold_label_may_be_a_whole_float(rubric, written, label):
    assert gold_label(rubric.field("urgency"), written) == label


def test_a_choice_gold_label_is_kept_as_written(rubric):
    assert gold_label(rubric.field("team"), "Billing") == "Billing"


def _csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "data.csv"
    path.write_text(text, encoding="utf-8")
    return path


PANDAS_CSV = "text,spam\nWIN a FREE phone,True\nLunch at noon?,False\ncheap pills,True\n"


def test_loading_with_the_rubric_reads_pandas_booleans_as_the_field_answers(tmp_path, rubric):
    rows, columns = load_labelled(_csv(tmp_path, PANDAS_CSV), text_column="text", fields=["spam"], rubric=rubric)
    assert [row.gold["spam"] for row in rows] == ["true", "false", "true"]
    assert gold_warnings(rows, rubric, columns) == []
    # Without the rubric the cells stay as written (what scripts that pass `columns` rely on).
    raw, _ = load_labelled(_csv(tmp_path, PANDAS_CSV), text_column="text", fields=["spam"])
    assert [row.gold["spam"] for row in raw] == ["True", "False", "True"]


def test_a_gold_column_holding_none_of_the_answers_is_warned_about(tmp_path, rubric):
    path = _csv(tmp_path, "text,spam,team\na,maybe,Billing\nb,perhaps,SHIPPING\nc,maybe,billing\n")
    rows, columns = load_labelled(path, text_column="text", fields=["spam"], rubric=rubric)
    [line] = gold_warnings(rows, rubric, columns)
    assert line.startswith("warning: column 'spam' holds none of the answers of field 'spam' (true, false)")
    assert "'maybe', 'perhaps'" in line and "out of scope" in line and "true/false/yes/no/1/0" in line
    # One answer in the column is enough: the others are out of scope, as CLINC150's `oos` is (these
    # two, an answer but for case, are warned about as likely mistakes instead).
    rows, columns = load_labelled(path, text_column="text", fields=["team"], rubric=rubric)
    [line] = gold_warnings(rows, rubric, columns)
    assert "holds none of the answers" not in line and "'Billing' ('billing'?), 'SHIPPING' ('shipping'?)" in line
    rows, columns = load_labelled(path, text_column="text", fields=["team"], rubric=rubric)
    assert gold_warnings(rows[:2], rubric, columns)[0].endswith("differ from an answer only in case, and labels are compared exactly")


YAML = "name: spam\nfields:\n  spam: {kind: boolean, question: Is this message spam}\n"


def _stop_before_the_model(monkeypatch):
    from decisionflow.cli import quality

    def stop(*_args, **_kwargs):
        raise DataError("stopped before the model")

    monkeypatch.setattr(quality, "_engine", stop)


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_eval_and_calibrate_warn_on_stderr_before_the_model_loads(tmp_path, monkeypatch, command):
    _stop_before_the_model(monkeypatch)
    rubric = tmp_path / "spam.yaml"
    rubric.write_text(YAML)
    bad = _csv(tmp_path, "text,spam\na,maybe\nb,perhaps\n")
    result = CliRunner().invoke(app, [command, str(rubric), "--data", str(bad)])
    assert result.exit_code == 1
    warning = ("warning: column 'spam' holds none of the answers of field 'spam' (true, false) but 'maybe', 'perhaps', "
               "so every row counts as out of scope (no accuracy, macro-F1, ECE or temperature); a boolean reads "
               "true/false/yes/no/1/0 in any case")
    assert result.stderr.splitlines() == [warning, "error: stopped before the model"]
    good = _csv(tmp_path, PANDAS_CSV)
    result = CliRunner().invoke(app, [command, str(rubric), "--data", str(good)])
    assert result.stderr.splitlines() == ["error: stopped before the model"]


def test_eval_and_calibrate_take_shipped_workflow_names(monkeypatch):
    import re

    for command in ("eval", "calibrate"):
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "300"})
        assert result.exit_code == 0
        assert re.search(r"RUBRIC .*a shipped workflow's name", result.output), result.output


DERIVED_YAML = """\
name: queueing
fields:
  urgent: {kind: boolean, question: Whether it needs action today}
  queue:
    kind: choice
    question: The queue it lands in
    options: [fast, normal]
    derive:
      rules:
        - if: {field: urgent, is: true}
          then: fast
      otherwise: normal
"""


def test_calibrating_a_derived_field_is_refused_before_the_model_loads(tmp_path, monkeypatch):
    _stop_before_the_model(monkeypatch)
    rubric = tmp_path / "queueing.yaml"
    rubric.write_text(DERIVED_YAML)
    data = _csv(tmp_path, "text,queue\na,fast\nb,normal\n")
    result = CliRunner().invoke(app, ["calibrate", str(rubric), "--data", str(data), "--field", "queue"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: field 'queue' is derived from urgent, not read from the model, so there is nothing to calibrate; "
        "calibrate the fields it reads"
    ]


def test_a_calibration_holding_a_derived_field_is_refused():
    from decisionflow.errors import CalibrationError
    from decisionflow.runtime.readout.calibration import Calibration, FieldCalibration

    rubric = loads_rubric(DERIVED_YAML)
    calibration = Calibration(rubric="queueing", fields={"queue": FieldCalibration(temperature=0.5)})
    with pytest.raises(CalibrationError, match="'queue', which rubric 'queueing' derives from urgent"):
        calibration.check(rubric)


def test_labels_one_typo_or_case_away_from_an_answer_are_warned_about(tmp_path, rubric):
    path = _csv(tmp_path, "text,team\na,billing\nb,Shipping\nc,biling\nd,returns\ne,Shipping\n")
    rows, columns = load_labelled(path, text_column="text", fields=["team"], rubric=rubric)
    assert gold_warnings(rows, rubric, columns) == [
        "warning: column 'team' has 3 rows whose label is not an answer of field 'team' but close to one: "
        "'Shipping' ('shipping'?), 'biling' ('billing'?); labels are compared exactly, so these rows count as "
        "out of scope"]
    # A deliberate out-of-scope class, far from every answer, is not a typo.
    clean = _csv(tmp_path, "text,team\na,billing\nb,oos\nc,shipping\n")
    rows, columns = load_labelled(clean, text_column="text", fields=["team"], rubric=rubric)
    assert gold_warnings(rows, rubric, columns) == []


@pytest.mark.parametrize("command", ["eval", "calibrate"])
def test_eval_and_calibrate_read_jsonl_and_leave_out_rows_without_a_label(tmp_path, monkeypatch, command):
    """JSONL as `fit` reads it (JSON booleans are labels); a row with no label for the field is left
    out with a line saying which, before the model loads; none labelled at all is an error."""
    import json

    _stop_before_the_model(monkeypatch)
    rubric = tmp_path / "spam.yaml"
    rubric.write_text(YAML)
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in [
        {"text": "WIN a FREE phone", "spam": True}, {"text": "Lunch at noon?", "spam": None},
        {"text": "cheap pills", "spam": "yes"}, {"text": "See you", "spam": ""},
    ]) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, [command, str(rubric), "--data", str(data)])
    assert result.stderr.splitlines() == [
        "left out 2 rows with no label for 'spam' in column 'spam' (data rows 1, 3); 2 left for it",
        "error: stopped before the model"]
    data.write_text(json.dumps({"text": "Lunch at noon?", "spam": None}) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, [command, str(rubric), "--data", str(data)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"error: {data}: none of the 1 selected row has a label for 'spam' (column 'spam')"]


def test_every_format_reads_cells_alike_and_names_a_bad_row(tmp_path):
    import json

    from decisionflow.quality.labelled import cell_label

    assert [cell_label(v) for v in (True, False, 3, " billing ", None, float("nan"), 7.0)] == \
        ["true", "false", "3", "billing", "", "", "7.0"]
    # A CSV row short of a column no field reads is still read.
    short = tmp_path / "short.csv"
    short.write_text("text,spam,notes\nWIN a phone,true,kept\nLunch?,false\n", encoding="utf-8")
    rows, _ = load_labelled(short, text_column="text", fields=["spam"])
    assert [row.gold["spam"] for row in rows] == ["true", "false"]
    # A row short of its text is malformed, named; one short of its label labels nothing.
    shifted = tmp_path / "shifted.csv"
    shifted.write_text("spam,text\ntrue,WIN a phone\nfalse\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"shifted\.csv: data row 1 has fewer cells than the header$"):
        load_labelled(shifted, text_column="text", fields=["spam"])
    unlabelled = tmp_path / "unlabelled.csv"
    unlabelled.write_text("text,spam\nWIN a phone,true\nLunch?\n", encoding="utf-8")
    rows, _ = load_labelled(unlabelled, text_column="text", fields=["spam"])
    assert [row.gold["spam"] for row in rows] == ["true", ""]
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text(json.dumps({"text": "hi", "spam": False}) + "\n" + json.dumps({"spam": True}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"rows\.jsonl: data row 1 has no 'text'$"):
        load_labelled(jsonl, text_column="text", fields=["spam"])
    jsonl.write_text(json.dumps({"text": {"subject": "hi"}, "spam": False}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"data row 0: the 'text' cell holds a dict, not a text"):
        load_labelled(jsonl, text_column="text", fields=["spam"])
    jsonl.write_text('{"text": "hi", "spam": false, "spam": true}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r'rows\.jsonl:1: the key "spam" is written twice in one object$'):
        load_labelled(jsonl, text_column="text", fields=["spam"])
    csv_named_txt = tmp_path / "rows.txt"
    csv_named_txt.write_text("text,spam\nhi,true\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"rows\.txt:1: not a JSON object .*; a file not named \.csv, \.parquet or \.pq is read as JSONL"):
        load_labelled(csv_named_txt, text_column="text", fields=["spam"])


def test_a_labelled_csv_is_read_strictly_and_its_long_cells_and_byte_order_mark_are_taken(tmp_path):
    opened = tmp_path / "opened.csv"
    opened.write_text('text,spam\nWIN a phone,true\n"Lunch ""today"",false\nhello,false\nbye,false\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"opened\.csv: line 3: a quoted cell opens in the record there and is never closed"):
        load_labelled(opened, text_column="text", fields=["spam"])
    long_text = "word " * 60_000  # past Python's 128 KiB default cell limit
    taken = tmp_path / "taken.csv"
    taken.write_text(f'\ufefftext,spam\n"{long_text}",true\nLunch?,false\n', encoding="utf-8")
    rows, columns = load_labelled(taken, text_column="text", fields=["spam"])
    assert columns == {"spam": "spam"}
    assert [(len(row.text), row.gold["spam"]) for row in rows] == [(len(long_text), "true"), (6, "false")]


def test_calibrating_several_fields_leaves_a_row_out_only_of_the_field_it_does_not_label(tmp_path, monkeypatch):
    _stop_before_the_model(monkeypatch)
    rubric = tmp_path / "inbox.yaml"
    rubric.write_text(RUBRIC)
    data = _csv(tmp_path, "text,spam,team\na,true,billing\nb,false,\nc,,shipping\nd,,\ne,true,shipping\n")
    result = CliRunner().invoke(app, ["calibrate", str(rubric), "--data", str(data), "--field", "spam", "--field", "team"])
    assert result.stderr.splitlines() == [
        "left out 2 rows with no label for 'spam' in column 'spam' (data rows 2, 3); 3 left for it",
        "left out 2 rows with no label for 'team' in column 'team' (data rows 1, 3); 3 left for it",
        "error: stopped before the model"]


@pytest.mark.parametrize("name", ["rows.jsonl.gz", "rows.tsv", "rows.xlsx"])
def test_a_compressed_file_or_another_table_is_refused_by_name(tmp_path, name):
    from decisionflow.batch.input_files import read_rows

    path = tmp_path / name
    path.write_bytes(b"\x1f\x8b\x08 not text")
    suffix = path.suffix
    for read in (lambda: load_labelled(path, text_column="text", fields=["spam"]), lambda: read_rows(path)):
        with pytest.raises(DataError, match=rf"{name}: \{suffix} files are not read; give JSONL, CSV \(\.csv\) or Parquet"):
            read()
