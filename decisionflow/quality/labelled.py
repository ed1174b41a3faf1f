"""Labelled data for `decisionflow eval`, `calibrate` and `fit`: loading, columns, sampling.

The suffix picks the format: `.csv` is read strictly by `csv_records` (RFC 4180 quoting, so texts may hold
commas and newlines), `.parquet`/`.pq` with pyarrow, anything else as JSONL. Each evaluated field reads
its gold label from one column: the column given for it, else a column named after the field, else
`label`; `spec.gold.cell_label` reads a cell of any format as a CSV cell would be written (as `fit` does).

Gold cells are compared with the labels a field answers (`FieldSpec.labels`: `billing`, `true`, `7`).
Given the rubric, a boolean field's cell may be spelt any way `BOOLEAN_GOLD` lists, in any case (pandas
and `str(bool)` write `True`), and a score's whole number may be written as a float (`7.0`, as pandas
writes an integer column with gaps); a choice label must match exactly. `gold_warnings` says when a
gold column holds none of a field's answers, which would otherwise leave every row out of scope.
"""

from __future__ import annotations

import difflib
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import DataError, Unavailable
from ..paths import data_format, unread_reason
from ..records import DuplicateKey, csv_records, json_record
from ..spec.gold import BOOLEAN_GOLD, cell_label, gold_label
from ..spec.rubric import FieldKind, FieldSpec, Rubric, Value
from ..spec.rubric import label_of as spec_label_of
from ..spec.text import shown

DEFAULT_LABEL_COLUMN = "label"
@dataclass(frozen=True)
class LabelledRow:
    index: int
    """0-based data row in the file (the header not counted)."""
    text: str
    gold: dict[str, str]
    """Field name -> gold label, as written in the file."""


def resolve_fields(rubric: Rubric, fields: Sequence[str] | None) -> list[str]:
    """The fields to evaluate: those named, or the rubric's first field."""
    if not fields:
        return [next(iter(rubric.fields))]
    unknown = [name for name in fields if name not in rubric.fields]
    if unknown:
        raise DataError(f"rubric {rubric.name!r} has no field {unknown[0]!r} (fields: {', '.join(rubric.fields)})")
    return list(dict.fromkeys(fields))


def label_columns(fields: Sequence[str], header: Sequence[str], given: Sequence[str] | None) -> dict[str, str]:
    """Field -> gold column. `given` holds one column (one field) or one per field, in field order."""
    if given:
        if len(given) == 1 and len(fields) == 1:
            return {fields[0]: given[0]}
        if len(given) != len(fields):
            raise DataError(f"give one --label-column per --field ({len(fields)} fields, {len(given)} columns)")
        return dict(zip(fields, given))
    columns = {}
    for name in fields:
        if name in header:
            columns[name] = name
        elif DEFAULT_LABEL_COLUMN in header and DEFAULT_LABEL_COLUMN not in columns.values():
            columns[name] = DEFAULT_LABEL_COLUMN
        else:
            raise DataError(f"no gold column for field {name!r}: name it with --label-column")
    return columns


def load_labelled(
    path: str | Path, *, text_column: str, columns: dict[str, str] | None = None,
    fields: Sequence[str] = (), given_columns: Sequence[str] | None = None, rubric: Rubric | None = None,
) -> tuple[list[LabelledRow], dict[str, str]]:
    """Every row of a labelled CSV, JSONL or Parquet file (`load_records`) and the field -> column
    mapping used.

    Pass `columns` to fix the mapping, or `fields` (and optionally `given_columns`) to derive it.
    With `rubric`, each gold cell is read as its field's label (`gold_label`: `True` -> `true`).
    """
    path = Path(path)
    header, records = load_records(path)
    if columns is None:
        columns = label_columns(fields, header, given_columns)
    for column in [text_column, *columns.values()]:
        if column not in header:
            raise DataError(f"{path}: no column {column!r} (columns: {', '.join(header)})")
    refuse_short_rows(path, records, [text_column])
    rows = []
    for index, record in enumerate(records):
        text = record.get(text_column)
        if text is None:
            raise DataError(f"{path}: data row {index} has no {text_column!r}")
        if not isinstance(text, str):
            raise DataError(f"{path}: data row {index}: the {text_column!r} cell holds a {type(text).__name__}, "
                            "not a text (eval and calibrate score text inputs)")
        gold = {name: cell_label(record.get(column)) for name, column in columns.items()}
        if rubric is not None:
            gold = {name: gold_label(rubric.field(name), value) if value else value for name, value in gold.items()}
        rows.append(LabelledRow(index=index, text=text, gold=gold))
    return rows, columns


def _csv_records(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """A labelled CSV's header and rows (a short row's missing cells are None; read strictly, `csv_records`);
    a file that is missing, empty, not UTF-8, not CSV or without data rows is a `DataError` naming it."""
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            rows = csv_records(handle, str(path))
            header = next(rows, [])
            if not header:
                raise DataError(f"{path}: empty file, expected a CSV header row")
            # as csv.DictReader reads them: blank lines skipped, a short row's missing cells None
            records = [dict(zip(header, [*record, *[None] * (len(header) - len(record))])) for record in rows if record]
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error.reason})") from None
    if not records:
        raise DataError(f"{path}: no data rows")
    return header, records


def parse_slice(text: str | None) -> slice | None:
    """`START:STOP` (0-based data rows, STOP excluded; either may be empty, and a negative one counts
    from the end, as in a Python slice) -> a slice."""
    if text is None:
        return None
    start, colon, stop = text.partition(":")
    try:
        if not colon:
            raise ValueError
        return slice(int(start) if start.strip() else None, int(stop) if stop.strip() else None)
    except ValueError:
        raise DataError(f"--rows expects START:STOP, e.g. 0:400, got {text!r}") from None


def select_rows(
    rows: Sequence[LabelledRow], *, rows_slice: slice | None = None, limit: int | None = None, seed: int = 0
) -> list[LabelledRow]:
    """The rows to use: a slice of the file, then a reproducible sample of `limit` rows in file order."""
    chosen = list(rows[rows_slice] if rows_slice is not None else rows)
    if not chosen:
        raise DataError("no rows selected (check --rows)")
    if limit is not None and limit < len(chosen):
        picked = set(random.Random(seed).sample(range(len(chosen)), limit))
        chosen = [row for position, row in enumerate(chosen) if position in picked]
    return chosen


def label_of(value: Value | None) -> str | None:
    """An answer as the label a CSV would hold (None stays None)."""
    return None if value is None else spec_label_of(value)


def offered_labels(spec: FieldSpec) -> list[str]:
    """The labels a field can answer; gold labels outside them are out of scope."""
    return list(spec.labels)


def gold_warnings(rows: Sequence[LabelledRow], rubric: Rubric, columns: dict[str, str]) -> list[str]:
    """One line per field whose gold column holds none of the field's answers in `rows`: every row
    would count as out of scope, leaving no accuracy, macro-F1, ECE or temperature to measure."""
    lines = []
    for name, column in columns.items():
        spec = rubric.field(name)
        labels = offered_labels(spec)
        written = Counter(row.gold[name] for row in rows if row.gold.get(name))
        if not written:
            continue
        if any(value in labels for value in written):
            near = {value: answer for value in written if value not in labels
                    and (answer := _near_answer(value, labels)) is not None}
            if near:
                rows_near = sum(written[value] for value in near)
                pairs = ", ".join(f"{shown(value, 40)} ({answer!r}?)" for value, answer in list(near.items())[:5])
                lines.append(
                    f"warning: column {column!r} has {rows_near} row{'s' if rows_near != 1 else ''} whose label is "
                    f"not an answer of field {name!r} but close to one: {pairs}"
                    f"{' and more' if len(near) > 5 else ''}; labels are compared exactly, so these rows count "
                    "as out of scope")
            continue
        found = ", ".join(shown(value, 40) for value, _ in written.most_common(3))
        more = f" and {len(written) - 3} more" if len(written) > 3 else ""
        answers = ", ".join(labels[:8]) + (f", ... ({len(labels)} in all)" if len(labels) > 8 else "")
        hint = ""
        if spec.kind is FieldKind.BOOLEAN:
            hint = f"; a boolean reads {'/'.join(dict.fromkeys(BOOLEAN_GOLD))} in any case"
        elif {value.casefold() for value in written} & {label.casefold() for label in labels}:
            hint = "; some differ from an answer only in case, and labels are compared exactly"
        lines.append(
            f"warning: column {column!r} holds none of the answers of field {name!r} ({answers}) but {found}{more}, "
            f"so every row counts as out of scope (no accuracy, macro-F1, ECE or temperature){hint}"
        )
    return lines


def _near_answer(value: str, labels: Sequence[str]) -> str | None:
    """The answer `value` was likely meant as: the same but for case, or a near spelling; None if none."""
    folded = {label.casefold(): label for label in labels}
    if value.casefold() in folded:
        return folded[value.casefold()]
    close = difflib.get_close_matches(value, labels, n=1, cutoff=NEAR_LABEL_CUTOFF)
    return close[0] if close else None


NEAR_LABEL_CUTOFF = 0.85
"""difflib's similarity above which a gold label that is not an answer is warned about as a likely typo
(`postive`); loose enough for one wrong letter in a short label, strict enough to leave a deliberate
out-of-scope class (CLINC150's `oos`) alone."""


def load_records(path: str | Path) -> tuple[list[str], list[dict[str, Any]]]:
    """Every row of a labelled CSV, JSONL or Parquet file as a mapping, and the columns seen (in order).

    CSV (`.csv`): a header row, RFC 4180 quoting; a row with fewer cells than the header holds None in
    the missing ones (`refuse_short_rows` refuses those a command reads); JSONL (any other suffix): one
    JSON object per line; Parquet (`.parquet`, `.pq`; needs pyarrow)."""
    path = Path(path)
    found = data_format(path)
    if found == "unread":  # a compressed file or another table, refused by name
        raise DataError(unread_reason(path))
    if found == "csv":
        return _csv_records(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    header, records = _parquet_records(path) if found == "parquet" else _jsonl_records(path)
    if not records:
        raise DataError(f"{path}: no data rows")
    return header, records


def refuse_short_rows(path: Path, records: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """A CSV row that lacks a cell of one of `columns` (the commands pass the text column; a row short of
    a label cell labels nothing) is malformed, its cells perhaps shifted: refused, naming it. Other
    formats have no cells to lack."""
    if data_format(Path(path)) != "csv":
        return
    short = next((number for number, record in enumerate(records) if any(record.get(c) is None for c in columns)), None)
    if short is not None:
        raise DataError(f"{path}: data row {short} has fewer cells than the header")


def _parquet_records(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise Unavailable("reading Parquet files needs pyarrow: pip install pyarrow") from None
    try:
        table = pq.read_table(path)
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types for a file it cannot read
        raise DataError(f"{path}: not a readable Parquet file: {error}") from None
    return list(table.column_names), table.to_pylist()


def _jsonl_records(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    header: list[str] = []
    records: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json_record(line)
                except json.JSONDecodeError as error:
                    raise DataError(f"{path}:{number}: not a JSON object ({error.msg}); a file not named .csv, "
                                    ".parquet or .pq is read as JSONL") from None
                except DuplicateKey as error:
                    raise DataError(f"{path}:{number}: {error}") from None
                if not isinstance(record, dict):
                    raise DataError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
                header += [key for key in record if key not in header]
                records.append(record)
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error.reason})") from None
    return header, records


def fit_columns(rubric: Rubric, header: Sequence[str], given: dict[str, str]) -> dict[str, str]:
    """Field -> label column for fitting: the columns `given` (`--label FIELD=COLUMN`), then a column
    named after each field, then `label` for a rubric with one field read from the model."""
    asked = [name for name, spec in rubric.fields.items() if spec.derive is None]
    for name, column in given.items():
        if name not in rubric.fields:
            raise DataError(f"--label {name}={column}: rubric {rubric.name!r} has no field {name!r} "
                            f"(fields: {', '.join(rubric.fields)})")
        if column not in header:
            raise DataError(f"--label {name}={column}: no column {column!r} (columns: {', '.join(header)})")
    columns = dict(given)
    for name in asked:
        if name not in columns and name in header:
            columns[name] = name
    if not columns and len(asked) == 1 and DEFAULT_LABEL_COLUMN in header:
        columns[asked[0]] = DEFAULT_LABEL_COLUMN
    if not columns:
        raise DataError(f"no label column for any field of rubric {rubric.name!r}: name a column after a field "
                        f"({', '.join(asked)}), or map one with --label FIELD=COLUMN (columns: {', '.join(header)})")
    return columns
