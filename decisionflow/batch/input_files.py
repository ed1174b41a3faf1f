"""Input files for batch runs: JSONL, CSV and Parquet rows as (id, payload), with one id rule for all.

- **JSONL** (any suffix but `.csv` and `.parquet`): one JSON object per line; the input is the first
  of `text`, `input`, `messages` present (or `text_column`), the id is `id` (or `id_column`) — a
  string or an integer — and defaults to the line number.
- **CSV** (`.csv`, UTF-8, a header row): the input is the `text` column (or `input`, `messages`, or
  `text_column`); ids come from the `id` column (or `id_column`) when there is one, else the row
  number (1 for the first row after the header).
- **Parquet** (`.parquet`, `.pq`; needs pyarrow): columns as for CSV; a text cell may also be a
  struct (decided as a JSON object) or a list of `{role, content}` structs (a conversation). Read
  in record batches, so the file is never held twice.

Ids are compared as strings (`7` and `"7"` are the same id), and every file is checked up front: a
duplicate id is refused naming both rows, before anything is decided, so each row gets exactly one
result. Each row also keeps its id as the file gave it (`InputRow.given_id`: an integer stays an
integer, a row without an id has its line or row number, an integer), which is what output records carry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..errors import DataError, Unavailable
from ..paths import data_format, unread_reason
from ..records import DuplicateKey, csv_records, json_record

TEXT_KEYS = ("text", "input", "messages")
ID_KEY = "id"


@dataclass(frozen=True)
class InputRow:
    id: str
    """The id as ids are compared (`7` and `"7"` are the same id): always a string."""
    payload: Any
    line: int
    """The JSONL line, or the CSV/Parquet row number (1 = the first row of data)."""
    given_id: str | int | None = None
    """The id with the type the file gave it (a JSONL or Parquet integer stays an integer; a row
    without an id has its line or row number); None means `id`."""

    @property
    def output_id(self) -> str | int:
        """The id an output record carries: the id as the input gave it."""
        return self.id if self.given_id is None else self.given_id


@dataclass(frozen=True)
class _Cell:
    """One row as read from a file, before the id rules: where it is, its id (if any) and its input."""

    number: int
    where: str
    """How messages name the row: `in.jsonl:3` or `in.csv: row 3`."""
    ordinal: str
    """The row among the others: `line 3` or `row 3`."""
    raw_id: Any
    has_id: bool
    payload: Any


def input_format(path: Path) -> str:
    """`csv`, `parquet`, or `jsonl` (every other suffix, as `run --input` always read); a name of another
    table or a compressed file (`paths.UNREAD_SUFFIXES`) is a `DataError` saying what is read."""
    found = data_format(path)
    if found == "unread":
        raise DataError(unread_reason(path))
    return found


def read_rows(path: Path, *, text_column: str | None = None, id_column: str | None = None) -> list[InputRow]:
    """Every row of a JSONL, CSV or Parquet file as (id, payload); ids must be unique (checked first)."""
    path = Path(path)
    readers = {"jsonl": _jsonl_cells, "csv": _csv_cells, "parquet": _parquet_cells}
    cells = readers[input_format(path)](path, text_column, id_column)
    return _with_unique_ids(cells)


def _with_unique_ids(cells: Iterable[_Cell]) -> list[InputRow]:
    rows: list[InputRow] = []
    first_seen: dict[str, str] = {}
    for cell in cells:
        raw_id = cell.raw_id if cell.has_id else cell.number
        if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
            raise DataError(f"{cell.where}: `id` must be a string or an integer, got {_as_json(raw_id)}")
        if isinstance(raw_id, str) and not raw_id.strip():
            raise DataError(f"{cell.where}: the id is empty")
        row_id = str(raw_id)
        if row_id in first_seen:
            unit = cell.ordinal.split()[0]
            implicit = "" if cell.has_id else f" (a {unit} without an id takes its {unit} number)"
            raise DataError(
                f"{cell.where}: id {row_id!r} is already used on {first_seen[row_id]}{implicit}; "
                "ids must be unique so each row gets exactly one result"
            )
        first_seen[row_id] = cell.ordinal
        rows.append(InputRow(row_id, cell.payload, cell.number, raw_id))
    return rows


# -- JSONL ----------------------------------------------------------------------------------------


def _jsonl_cells(path: Path, text_column: str | None, id_column: str | None) -> Iterator[_Cell]:
    id_key = id_column or ID_KEY
    for number, line in _numbered_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json_record(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: not a JSON object: {exc.msg} (a file not named .csv, .parquet or .pq is "
                            "read as JSONL)") from None
        except DuplicateKey as error:
            raise DataError(f"{where}: {error}") from None
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object with a `{text_column or 'text'}` key")
        key = _text_name(list(row), text_column, where, "key")
        if id_column is not None and id_key not in row:
            raise DataError(f"{where}: no `{id_key}` key (the --id-column)")
        yield _Cell(number, where, f"line {number}", row.get(id_key), id_key in row, row[key])


def _numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    # A byte that is not UTF-8 becomes a lone surrogate in that line's text, so only its row fails
    # (the input policy refuses lone surrogates per row) instead of the whole file.
    with path.open(encoding="utf-8", errors="surrogateescape") as handle:
        yield from enumerate(handle, start=1)


def _text_name(names: list[str], text_column: str | None, where: str, noun: str) -> str:
    """The key or column holding the input: the one named, else the first of `TEXT_KEYS` present."""
    if text_column is not None:
        if text_column not in names:
            raise DataError(f"{where}: no {noun} {text_column!r} (the --text-column); {noun}s: {', '.join(names) or 'none'}")
        return text_column
    found = next((k for k in TEXT_KEYS if k in names), None)
    if found is None:
        raise DataError(
            f"{where}: no `text` {noun} (also accepted: {', '.join(TEXT_KEYS[1:])}; or name one with --text-column); "
            f"{noun}s: {', '.join(names) or 'none'}"
        )
    return found


# -- CSV and Parquet: columns --------------------------------------------------------------------


def _columns(path: Path, names: list[str], text_column: str | None, id_column: str | None) -> tuple[str, str | None]:
    """The text column and the id column (None: ids are row numbers), checked against the header."""
    available = ", ".join(names) or "none"
    text = _text_name(names, text_column, str(path), "column")
    if id_column is not None and id_column not in names:
        raise DataError(f"{path}: no column {id_column!r} (the --id-column); columns: {available}")
    identifier = id_column or (ID_KEY if ID_KEY in names else None)
    if identifier == text:
        raise DataError(f"{path}: column {text!r} cannot be both the text and the id")
    return text, identifier


def _as_json(value: Any) -> str:
    """A value as the input file wrote it (`true`, `null`, `1.5`), for messages."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def _csv_cells(path: Path, text_column: str | None, id_column: str | None) -> Iterator[_Cell]:
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            records = csv_records(handle, str(path))
            header = next(records, None)
            if header is None:
                raise DataError(f"{path}: the CSV file is empty (a header row is needed)")
            text, identifier = _columns(path, header, text_column, id_column)
            text_at = header.index(text)
            id_at = header.index(identifier) if identifier is not None else None
            for number, record in enumerate(records, start=1):
                if not record:
                    continue
                where = f"{path}: row {number}"
                if len(record) != len(header):
                    raise DataError(f"{where}: {len(record)} cells, but the header has {len(header)} columns")
                raw_id = record[id_at] if id_at is not None else None
                yield _Cell(number, where, f"row {number}", raw_id, id_at is not None, record[text_at])
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


def _parquet_cells(path: Path, text_column: str | None, id_column: str | None) -> Iterator[_Cell]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise Unavailable(
            "reading Parquet files needs pyarrow: pip install pyarrow (the `ray` extra installs it)"
        ) from None
    try:
        parquet = pq.ParquetFile(path)
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types for a file it cannot read
        raise DataError(f"{path}: not a readable Parquet file: {error}") from None
    text, identifier = _columns(path, list(parquet.schema_arrow.names), text_column, id_column)
    wanted = [text] + ([identifier] if identifier is not None else [])
    number = 0
    for batch in parquet.iter_batches(columns=wanted, batch_size=4096):
        ids = batch.column(identifier).to_pylist() if identifier is not None else None
        for position, payload in enumerate(batch.column(text).to_pylist()):
            number += 1
            raw_id = ids[position] if ids is not None else None
            yield _Cell(number, f"{path}: row {number}", f"row {number}", raw_id, ids is not None, payload)
