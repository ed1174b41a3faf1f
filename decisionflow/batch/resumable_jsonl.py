"""Deciding input files resumably: rows in (JSONL, CSV or Parquet, see `input_files`), one JSONL record per row out.

The promise: whenever a run is interrupted (Ctrl-C, a crash, SIGKILL) and rerun with the same
arguments, the output ends up with exactly one record per input id — a decision, or an `error`
record saying why that row could not be decided — and every line of it parses.

How it is kept:
- Ids are checked up front: two input rows with the same id (`7` and `"7"` are the same id; a row
  without an id takes its line or row number) are refused, naming both rows, before anything is decided.
- The output must be this run's own: a path that is the input file, a folder, or named like another
  format (`.csv`, `.parquet`, ...) is refused, and so is an existing file holding any line that is not
  a result record of this rubric (`OutputRefused`, raised before anything is written or rewritten).
  Each record carries the rubric's name and fingerprint (`OutputIdentity`), so resuming into the
  output of another rubric, or of this rubric since changed, is refused naming both. Records written
  before records carried them are accepted when their shape fits and their `value` names no field
  this rubric lacks.
- Each record is written as one complete line in a single write to a file opened for appending, and
  the file is flushed to disk after every chunk.
- On a rerun the output is read first: a last line cut short by a kill (no newline) is dropped, blank
  lines are dropped, `error` records are dropped so their rows are tried again, and a duplicate record
  for an id keeps the first. If anything was dropped, the cleaned file replaces the old one atomically
  (written beside it, then renamed) before any new record is appended.

`ResumableOutput` is that output on its own, so another executor (the Ray Data path in
`decisionflow.scale`) writes with the same guarantees.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, NoReturn

from ..errors import DataError, DecisionflowError
from ..paths import CSV_SUFFIXES, PARQUET_SUFFIXES, UNREAD_SUFFIXES, existing_ancestor
from .input_files import TEXT_KEYS, InputRow, read_rows

if TYPE_CHECKING:
    from ..runtime.engine import Engine

__all__ = [
    "TEXT_KEYS", "BatchSummary", "InputRow", "OutputIdentity", "OutputRefused", "ResumableOutput", "check_output",
    "decide_file", "encode_record", "read_rows", "record_of", "recover_output", "rubric_fingerprint",
]

RUBRIC_KEY = "rubric"
FINGERPRINT_KEY = "rubric_fingerprint"
REFUSED_SUFFIXES = (*CSV_SUFFIXES, *PARQUET_SUFFIXES, *UNREAD_SUFFIXES)
"""Output names that promise another format (a table, a compressed file): the output is plain JSONL."""
_RECORD_START = b'{"id": '
"""How every record line begins (`encode_record` writes the id first): what a line torn by a kill starts with."""
_NEW_FILE = "use a new output file, or the output of an earlier run of this rubric to resume it; nothing was changed"


class OutputRefused(DataError):
    """The output cannot take this run's results (the input file itself, a folder, another format, or a
    file holding lines that are not this rubric's result records); nothing was written or rewritten."""


def rubric_fingerprint(rubric: Any) -> str:
    """A short digest of a rubric's content (`Rubric.key`): it changes whenever the rubric's wording,
    fields, options or settings do."""
    return hashlib.sha256(rubric.key.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class OutputIdentity:
    """Which rubric an output's records belong to; each record carries `stamp`."""

    rubric: str
    fingerprint: str
    fields: tuple[str, ...]

    @classmethod
    def of(cls, target: Any) -> OutputIdentity:
        """The identity of a `Rubric` or a class decorated with `@decision`."""
        from ..spec.declare import rubric_of

        rubric = rubric_of(target)
        return cls(rubric.name, rubric_fingerprint(rubric), tuple(rubric.fields))

    @property
    def stamp(self) -> dict[str, str]:
        return {RUBRIC_KEY: self.rubric, FINGERPRINT_KEY: self.fingerprint}


@dataclass(frozen=True)
class BatchSummary:
    total: int
    decided: int
    skipped: int
    """Rows already in the output from an earlier run."""
    failed: int
    repaired: int = 0
    """Output lines dropped on resume: a torn last line, blank lines, earlier error records, duplicates."""


def check_output(path: Path, *, source: Path | None = None, identity: OutputIdentity | None = None) -> None:
    """Refuse (`OutputRefused`) an output path this run cannot resume into, changing nothing: the input
    file itself, a folder, a name promising another format, a place that cannot be written, or an
    existing file with a line that is not a result record (of the rubric `identity` names). Missing
    folders above the output are fine: they are created when the run starts."""
    path = Path(path)
    _check_path(path, source)
    _scan(path, identity)


def _check_path(path: Path, source: Path | None) -> None:
    """`check_output` without reading the file."""
    if source is not None and _same_file(Path(source), path):
        raise OutputRefused(f"{path} is the input file; the output must be another file")
    suffix = path.suffix.lower()
    if suffix in REFUSED_SUFFIXES:
        raise OutputRefused(f"{path}: the output is JSONL (one JSON object per line), not {suffix}; name it .jsonl")
    if path.is_dir():
        raise OutputRefused(f"{path} is a folder; the output must be a file (e.g. {path / 'out.jsonl'})")
    if path.exists():
        if path.is_file() and not os.access(path, os.R_OK | os.W_OK):
            raise OutputRefused(f"{path}: no permission to read and write the output")
        return
    ancestor = existing_ancestor(path)
    if not ancestor.is_dir():
        raise OutputRefused(f"{path}: cannot create the output's folder, {ancestor} is a file")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputRefused(f"{path}: no permission to create the output in {ancestor}")


def _same_file(source: Path, path: Path) -> bool:
    """Whether `path` names `source`: through links when it exists, else by its resolved name (which
    also sees through folders not created yet, as in `new/../input.jsonl`)."""
    if path.exists() and source.exists():
        return os.path.samefile(source, path)
    return os.path.realpath(source) == os.path.realpath(path)


def recover_output(path: Path, identity: OutputIdentity | None = None) -> tuple[set[str], int]:
    """Ids already decided in `path`, after dropping a torn last line, blank lines, error records and
    duplicates (rewritten atomically). A line that is not a result record (of `identity`'s rubric,
    when given) is refused with `OutputRefused` before anything is rewritten.

    Returns (done ids, lines dropped).
    """
    path = Path(path)
    if not path.exists():
        return set(), 0
    kept, done, dropped = _scan(path, identity)
    if dropped:
        _replace_atomically(path, b"".join(line + b"\n" for line in kept))
    return done, dropped


def _scan(path: Path, identity: OutputIdentity | None) -> tuple[list[bytes], set[str], int]:
    """(lines kept, their ids, lines dropped) of an existing output; refuses a line that is not a record."""
    if not path.is_file():
        return [], set(), 0
    lines = path.read_bytes().split(b"\n")
    tail = lines.pop()  # after the last newline: empty, or a record cut short by a kill
    dropped = 0
    kept: list[bytes] = []
    done: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            dropped += 1
            continue
        record = _record(path, number, line, identity)
        key = str(record["id"])
        if "error" in record or key in done:
            dropped += 1
            continue
        done.add(key)
        kept.append(line)
    if tail:
        torn = tail.startswith(_RECORD_START) or _RECORD_START.startswith(tail)
        if tail.strip() and not torn:
            _refuse_line(path, len(lines) + 1, "not a result record, nor one cut short by a kill")
        dropped += 1
    return kept, done, dropped


def _record(path: Path, number: int, line: bytes, identity: OutputIdentity | None) -> dict[str, Any]:
    """The result record on this line, or `OutputRefused` saying why it is not one (of this rubric)."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        _refuse_line(path, number, "not JSON, so not a result record")
    row_id = record.get("id") if isinstance(record, dict) else None
    is_error = isinstance(record, dict) and isinstance(record.get("error"), str)
    is_decision = isinstance(record, dict) and isinstance(record.get("value"), dict)
    if isinstance(row_id, bool) or not isinstance(row_id, (str, int)) or is_error == is_decision:
        _refuse_line(path, number, "not a result record (a JSON object with an `id` and a `value` or an `error`)")
    if identity is None:
        return record
    if RUBRIC_KEY in record or FINGERPRINT_KEY in record:
        name, fingerprint = record.get(RUBRIC_KEY), record.get(FINGERPRINT_KEY)
        if (name, fingerprint) != (identity.rubric, identity.fingerprint):
            if name == identity.rubric:
                why = (f"a result of rubric {name!r} as it was (fingerprint {fingerprint}), not as it is now "
                       f"(fingerprint {identity.fingerprint}): the rubric changed since")
            else:
                why = (f"a result of rubric {name!r} (fingerprint {fingerprint}), not of rubric {identity.rubric!r} "
                       f"(fingerprint {identity.fingerprint})")
            raise OutputRefused(f"{path}:{number}: {why}; use a new output file, or delete this one to decide every row again")
    elif is_decision:
        # Written before records carried their rubric: the fields it names must be this rubric's.
        foreign = [name for name in record["value"] if name not in identity.fields]
        if foreign:
            raise OutputRefused(
                f"{path}:{number}: a result with field {foreign[0]!r}, which rubric {identity.rubric!r} does not have; "
                f"{_NEW_FILE}"
            )
    return record


def _refuse_line(path: Path, number: int, why: str) -> NoReturn:
    raise OutputRefused(f"{path}:{number}: {why}; {_NEW_FILE}")


def _replace_atomically(path: Path, content: bytes) -> None:
    handle, scratch = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        shutil.copymode(path, scratch)  # the rewrite keeps the output's permissions, not the scratch file's
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


def record_of(row_id: str | int, outcome: Any) -> dict[str, Any]:
    """The output record of one row: its decision as `run --json` prints it, or the error that row raised.
    `row_id` is the id as the input gave it (`InputRow.output_id`)."""
    if isinstance(outcome, DecisionflowError):
        outcome.input_index = None  # the record's id names the row
        return {"id": row_id, "error": str(outcome)}
    return {"id": row_id, **outcome.to_dict()}


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view):]


class ResumableOutput:
    """A JSONL output that a rerun resumes: checked and repaired on open, appended to in whole lines,
    flushed per chunk.

        with ResumableOutput(path, OutputIdentity.of(rubric), source=input_path) as output:
            todo = output.pending(rows, progress)
            output.write_chunk(records)

    With an `identity`, every record written carries the rubric's name and fingerprint, and an output
    holding another rubric's records is refused; without one, any result records are resumed. `source`
    (the input file) is refused as the output.
    """

    def __init__(self, path: Path, identity: OutputIdentity | None = None, *, source: Path | None = None) -> None:
        self.path = Path(path)
        self.identity = identity
        self.source = source
        self.done: set[str] = set()
        """Ids already decided by an earlier run (after the repair), as strings."""
        self.repaired = 0
        """Lines the repair dropped: a torn last line, blank lines, earlier error records, duplicates."""
        self._descriptor: int | None = None

    def __enter__(self) -> ResumableOutput:
        _check_path(self.path, self.source)  # the content is checked by the recovery, next
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done, self.repaired = recover_output(self.path, self.identity)
        self._descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return self

    def pending(self, rows: list[Any], progress: Callable[[int, int], None] | None = None) -> list[Any]:
        """The rows (anything with an `id`) an earlier run has not decided; `progress` hears how many it did."""
        todo = [row for row in rows if str(row.id) not in self.done]
        if progress:
            progress(len(rows) - len(todo), len(rows))
        return todo

    def write_chunk(self, records: Iterable[dict[str, Any]]) -> None:
        """Append each record as one line (one write each; the id first, then the identity's stamp), then
        flush the file to disk."""
        assert self._descriptor is not None, "write_chunk outside `with ResumableOutput(...)`"
        stamp = self.identity.stamp if self.identity is not None else {}
        for record in records:
            rest = {key: value for key, value in record.items() if key != "id" and key not in stamp}
            _write_all(self._descriptor, encode_record({"id": record["id"], **stamp, **rest}))
        try:
            os.fsync(self._descriptor)
        except OSError as error:
            if error.errno != errno.EINVAL:  # EINVAL: a device that keeps nothing (/dev/null)
                raise

    def __exit__(self, *exc: object) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


def decide_file(
    engine: Engine,
    target: Any,
    source: Path,
    output: Path,
    *,
    chunk_size: int = 16,
    calibration: Any = None,
    heads: Any = None,
    progress: Callable[[int, int], None] | None = None,
    text_column: str | None = None,
    id_column: str | None = None,
) -> BatchSummary:
    """Decide every row of `source` (JSONL, CSV or Parquet) not yet in `output`, appending one record per
    row (stamped with the rubric's name and fingerprint). `OutputRefused` when `output` is not this
    rubric's output (see `check_output`), before anything is decided."""
    rows = read_rows(source, text_column=text_column, id_column=id_column)
    decided = failed = 0
    with ResumableOutput(output, OutputIdentity.of(target), source=Path(source)) as out:
        todo = out.pending(rows, progress)
        skipped = len(rows) - len(todo)
        for start in range(0, len(todo), chunk_size):
            chunk = todo[start : start + chunk_size]
            outcomes = engine.decide_each(target, [row.payload for row in chunk], calibration=calibration, heads=heads)
            records = [record_of(row.output_id, outcome) for row, outcome in zip(chunk, outcomes)]
            failed += sum("error" in record for record in records)
            decided += sum("error" not in record for record in records)
            out.write_chunk(records)
            if progress:
                progress(skipped + start + len(chunk), len(rows))
    return BatchSummary(total=len(rows), decided=decided, skipped=skipped, failed=failed, repaired=out.repaired)
