"""Deciding JSONL files resumably: one `{"id": ..., "text": ...}` object per line in, one record per line out.

The promise: whenever a run is interrupted (Ctrl-C, a crash, SIGKILL) and rerun with the same
arguments, the output ends up with exactly one record per input id — a decision, or an `error`
record saying why that row could not be decided — and every line of it parses.

How it is kept:
- Ids are checked up front: two input lines with the same id (`7` and `"7"` are the same id; a line
  without an id takes its line number) are refused, naming both lines, before anything is decided.
- Each record is written as one complete line in a single write to a file opened for appending, and
  the file is flushed to disk after every chunk.
- On a rerun the output is read first: a last line cut short by a kill (no newline, or not JSON) is
  dropped, `error` records are dropped so their rows are tried again, and a duplicate record for an
  id keeps the first. If anything was dropped, the cleaned file replaces the old one atomically
  (written beside it, then renamed) before any new record is appended.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import DataError, DecisionflowError

TEXT_KEYS = ("text", "input", "messages")


@dataclass(frozen=True)
class BatchSummary:
    total: int
    decided: int
    skipped: int
    """Rows already in the output from an earlier run."""
    failed: int
    repaired: int = 0
    """Output lines dropped on resume: a torn last line, earlier error records, duplicates."""


@dataclass(frozen=True)
class InputRow:
    id: str
    payload: Any
    line: int


def read_rows(path: Path) -> list[InputRow]:
    """Every non-empty line as (id, payload); ids default to the line number and must be unique."""
    rows: list[InputRow] = []
    first_line: dict[str, int] = {}
    for number, line in _numbered_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: not a JSON object: {exc.msg}") from None
        if not isinstance(row, dict):
            raise DataError(f"{path}:{number}: expected a JSON object with a `text` key")
        key = next((k for k in TEXT_KEYS if k in row), None)
        if key is None:
            raise DataError(f"{path}:{number}: no `text` key (also accepted: {', '.join(TEXT_KEYS[1:])})")
        raw_id = row.get("id", number)
        if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)):
            raise DataError(f"{path}:{number}: `id` must be a string or an integer, got {raw_id!r}")
        row_id = str(raw_id)
        if row_id in first_line:
            implicit = "" if "id" in row else " (a line without an id takes its line number)"
            raise DataError(
                f"{path}:{number}: id {row_id!r} is already used on line {first_line[row_id]}{implicit}; "
                "ids must be unique so each row gets exactly one result"
            )
        first_line[row_id] = number
        rows.append(InputRow(row_id, row[key], number))
    return rows


def _numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open(encoding="utf-8") as handle:
            yield from enumerate(handle, start=1)
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None


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


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as one JSON line; a lone surrogate in it is written as its `\\udXXX` escape."""
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", errors="backslashreplace")


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view):]


def decide_file(
    engine: Any,
    target: Any,
    source: Path,
    output: Path,
    *,
    chunk_size: int = 16,
    calibration: Any = None,
    progress: Callable[[int, int], None] | None = None,
) -> BatchSummary:
    """Decide every row of `source` not yet in `output`, appending one record per row."""
    rows = read_rows(source)
    output.parent.mkdir(parents=True, exist_ok=True)
    finished, repaired = recover_output(output)
    todo = [row for row in rows if row.id not in finished]
    skipped = len(rows) - len(todo)
    decided = failed = 0
    if progress:
        progress(skipped, len(rows))
    descriptor = os.open(output, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for start in range(0, len(todo), chunk_size):
            chunk = todo[start : start + chunk_size]
            outcomes = engine.decide_each(target, [row.payload for row in chunk], calibration=calibration)
            for row, outcome in zip(chunk, outcomes):
                if isinstance(outcome, DecisionflowError):
                    outcome.input_index = None  # the record's id names the row
                    record = {"id": row.id, "error": str(outcome)}
                    failed += 1
                else:
                    record = {"id": row.id, **outcome.to_dict()}
                    decided += 1
                _write_all(descriptor, encode_record(record))
            os.fsync(descriptor)
            if progress:
                progress(skipped + start + len(chunk), len(rows))
    finally:
        os.close(descriptor)
    return BatchSummary(total=len(rows), decided=decided, skipped=skipped, failed=failed, repaired=repaired)
