"""Records of data files read strictly (below the pipeline, like `errors`): `run --input`, `eval`,
`calibrate` and `fit` read CSV rows and JSON lines through it.

CSV: Python's reader is lenient by default: a cell that opens a quote and never closes it
swallows every row after it into one text, silently. Read strictly, that is an error naming the line the
record starts on. Cells may be any length: a text too long for the model is refused row by row, as in JSONL,
not by the reader's 128 KiB default limit for the whole file."""

from __future__ import annotations

import csv
import json
import sys
from typing import Any, Iterator, TextIO

from .errors import DataError

CELL_LIMIT = min(sys.maxsize, 2**31 - 1)
"""The largest cell the reader takes (the C reader's limit is a C long)."""


def csv_records(handle: TextIO, where: str) -> Iterator[list[str]]:
    """Each record of an open CSV file (RFC 4180, opened with `newline=""`; a quoted cell may span lines).
    A quote left open, text after a closing quote, or a NUL is a `DataError` naming `where` and the line
    the record starts on."""
    csv.field_size_limit(CELL_LIMIT)
    reader = csv.reader(handle, strict=True)
    while True:
        first_line = reader.line_num + 1
        try:
            record = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise DataError(f"{where}: {_explain(str(error), first_line, reader.line_num)}") from None
        yield record


def _explain(error: str, first_line: int, last_line: int) -> str:
    span = f"line {first_line}" if last_line <= first_line else f"lines {first_line}-{last_line}"
    if error == "unexpected end of data":
        return (f"line {first_line}: a quoted cell opens in the record there and is never closed (the file ends "
                f"inside it, at line {last_line}); close the quote, and write a quote inside a quoted cell twice (\"\")")
    if "expected after" in error:
        return (f"{span}: text follows a closing quote in a cell; a quote inside a quoted cell is written twice "
                "(\"\"), and a cell that opens a quote closes it before its comma")
    return f"{span}: not readable as CSV ({error})"


class DuplicateKey(ValueError):
    """A JSON object that writes one key twice (`json.loads` would keep the last silently)."""

    def __init__(self, key: str):
        super().__init__(f"the key {json.dumps(key, ensure_ascii=False)} is written twice in one object")


def json_record(line: str) -> Any:
    """One JSON line, parsed; an object that repeats a key raises `DuplicateKey` (as YAML rubrics and the
    server's bodies refuse it) rather than keeping one of the two values."""
    return json.loads(line, object_pairs_hook=_unique_keys)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKey(key)
        found[key] = value
    return found
