"""Deciding input files resumably: rows in (JSONL, CSV or Parquet, see `input_files`), one JSONL record per row out.

The promise: whenever a run is interrupted (Ctrl-C, a crash, SIGKILL) and rerun with the same
arguments, the output ends up with exactly one record per input id — a decision, or an `error`
record saying why that row could not be decided — and every line of it parses.

How it is kept:
- Ids are checked up front: two input rows with the same id (`7` and `"7"` are the same id; a row
  without an id takes its line or row number) are refused, naming both rows, before anything is decided.
- Each record is written as one complete line in a single write to a file opened for appending, and
  the file is flushed to disk after every chunk.
- On a rerun the output is read first: a last line cut short by a kill (no newline, or not JSON) is
  dropped, `error` records are dropped so their rows are tried again, and a duplicate record for an
  id keeps the first. If anything was dropped, the cleaned file replaces the old one atomically
  (written beside it, then renamed) before any new record is appended.

`ResumableOutput` is that output on its own, so another executor (the Ray Data path in
`decisionflow.scale`) writes with the same guarantees.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import DecisionflowError
from .input_files import TEXT_KEYS, InputRow, read_rows

__all__ = [
    "TEXT_KEYS", "BatchSummary", "InputRow", "ResumableOutput", "decide_file", "encode_record", "read_rows",
    "record_of", "recover_output",
]


@dataclass(frozen=True)
class BatchSummary:
    total: int
    decided: int
    skipped: int
    """Rows already in the output from an earlier run."""
    failed: int
    repaired: int = 0
    """Output lines dropped on resume: a torn last line, earlier error records, duplicates."""


def recover_output(path: Path) -> tuple[set[str], int]:
    """Ids already decided in `path`, after dropping torn, error and duplicate lines (rewritten atomically).

    Returns (done ids, lines dropped).
    """
    if not path.exists():
        return set(), 0
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # after the last newline: empty, or a record cut short
    dropped = 1 if tail.strip() else 0
    kept: list[bytes] = []
    done: set[str] = set()
    for line in lines:
        if not line.strip():
            dropped += 1
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            dropped += 1
            continue
        if not isinstance(record, dict) or "id" not in record or "error" in record or str(record["id"]) in done:
            dropped += 1
            continue
        done.add(str(record["id"]))
        kept.append(line)
    if dropped:
        _replace_atomically(path, b"".join(line + b"\n" for line in kept))
    return done, dropped


def _replace_atomically(path: Path, content: bytes) -> None:
    handle, scratch = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


# Characters that `str.splitlines` (and some readers) take for line breaks although JSON leaves them
# unescaped: escaped, a record stays one line for every reader.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as one JSON line; a lone surrogate in it is written as its `\\udXXX` escape."""
    text = json.dumps(record, ensure_ascii=False).translate(_LINE_BREAKS)
    return (text + "\n").encode("utf-8", errors="backslashreplace")


def record_of(row_id: str, outcome: Any) -> dict[str, Any]:
    """The output record of one row: its decision as `run --json` prints it, or the error that row raised."""
    if isinstance(outcome, DecisionflowError):
        outcome.input_index = None  # the record's id names the row
        return {"id": row_id, "error": str(outcome)}
    return {"id": row_id, **outcome.to_dict()}


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view):]


class ResumableOutput:
    """A JSONL output that a rerun resumes: repaired on open, appended to in whole lines, flushed per chunk.

        with ResumableOutput(path) as output:
            todo = output.pending(rows, progress)
            output.write_chunk(records)
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.done: set[str] = set()
        """Ids already decided by an earlier run (after the repair)."""
        self.repaired = 0
        """Lines the repair dropped: a torn last line, earlier error records, duplicates."""
        self._descriptor: int | None = None

    def __enter__(self) -> ResumableOutput:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done, self.repaired = recover_output(self.path)
        self._descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self

    def pending(self, rows: list[Any], progress: Callable[[int, int], None] | None = None) -> list[Any]:
        """The rows (anything with an `id`) an earlier run has not decided; `progress` hears how many it did."""
        todo = [row for row in rows if row.id not in self.done]
        if progress:
            progress(len(rows) - len(todo), len(rows))
        return todo

    def write_chunk(self, records: Iterable[dict[str, Any]]) -> None:
        """Append each record as one line (one write each), then flush the file to disk."""
        assert self._descriptor is not None, "write_chunk outside `with ResumableOutput(...)`"
        for record in records:
            _write_all(self._descriptor, encode_record(record))
        os.fsync(self._descriptor)

    def __exit__(self, *exc: object) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


def decide_file(
    engine: Any,
    target: Any,
    source: Path,
    output: Path,
    *,
    chunk_size: int = 16,
    calibration: Any = None,
    progress: Callable[[int, int], None] | None = None,
    text_column: str | None = None,
    id_column: str | None = None,
) -> BatchSummary:
    """Decide every row of `source` (JSONL, CSV or Parquet) not yet in `output`, appending one record per row."""
    rows = read_rows(source, text_column=text_column, id_column=id_column)
    decided = failed = 0
    with ResumableOutput(output) as out:
        todo = out.pending(rows, progress)
        skipped = len(rows) - len(todo)
        for start in range(0, len(todo), chunk_size):
            chunk = todo[start : start + chunk_size]
            outcomes = engine.decide_each(target, [row.payload for row in chunk], calibration=calibration)
            records = [record_of(row.id, outcome) for row, outcome in zip(chunk, outcomes)]
            failed += sum("error" in record for record in records)
            decided += sum("error" not in record for record in records)
            out.write_chunk(records)
            if progress:
                progress(skipped + start + len(chunk), len(rows))
    return BatchSummary(total=len(rows), decided=decided, skipped=skipped, failed=failed, repaired=out.repaired)
