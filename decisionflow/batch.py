"""Deciding JSONL files: one `{"id": ..., "text": ...}` object per line in, one result per line out.

The output is appended after every chunk and flushed, and rows whose id is already in the output
are skipped, so an interrupted run resumes without redoing or losing rows. A row that cannot be
decided (empty text, too long) gets an `error` record instead of stopping the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from .errors import DecisionflowError, InputError

TEXT_KEYS = ("text", "input", "messages")


@dataclass(frozen=True)
class BatchSummary:
    total: int
    decided: int
    skipped: int
    """Rows already in the output from an earlier run."""
    failed: int


def read_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(id, payload) per non-empty line; an id defaults to the line number."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{number}: not a JSON object: {exc.msg}") from None
            if not isinstance(row, dict):
                raise InputError(f"{path}:{number}: expected a JSON object with a `text` key")
            key = next((k for k in TEXT_KEYS if k in row), None)
            if key is None:
                raise InputError(f"{path}:{number}: no `text` key (also accepted: {', '.join(TEXT_KEYS[1:])})")
            yield str(row.get("id", number)), row[key]


def done_ids(path: Path) -> set[str]:
    if not path.exists():
        return set()
    ids = set()
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by an interruption is redone
            if isinstance(record, dict) and "id" in record and "error" not in record:
                ids.add(str(record["id"]))
    return ids


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
    rows = list(read_rows(source))
    finished = done_ids(output)
    todo = [(i, p) for i, p in rows if i not in finished]
    skipped = len(rows) - len(todo)
    decided = failed = 0
    if progress:
        progress(skipped, len(rows))
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("a", encoding="utf-8") as sink:
        for start in range(0, len(todo), chunk_size):
            chunk = todo[start : start + chunk_size]
            records = _decide_chunk(engine, target, chunk, calibration)
            for record in records:
                sink.write(json.dumps(record, ensure_ascii=False) + "\n")
                failed += "error" in record
                decided += "error" not in record
            sink.flush()
            if progress:
                progress(skipped + start + len(chunk), len(rows))
    return BatchSummary(total=len(rows), decided=decided, skipped=skipped, failed=failed)


def _decide_chunk(engine: Any, target: Any, chunk: list[tuple[str, Any]], calibration: Any) -> list[dict]:
    try:
        decisions = engine.decide_many(target, [payload for _, payload in chunk], calibration=calibration)
        return [{"id": i, **d.to_dict()} for (i, _), d in zip(chunk, decisions)]
    except DecisionflowError:
        # One bad row must not sink its neighbours: decide them one at a time to isolate it.
        records = []
        for row_id, payload in chunk:
            try:
                records.append({"id": row_id, **engine.decide(target, payload, calibration=calibration).to_dict()})
            except DecisionflowError as exc:
                records.append({"id": row_id, "error": str(exc)})
        return records
