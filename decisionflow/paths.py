"""Path helpers every step may use (below the pipeline, like `errors`), and the one write and one read the files the
engine saves beside a rubric (heads, adapters) share: `write_atomically` and `read_saved_tensors`."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Sequence


def write_atomically(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all: written to a temporary file beside it, then renamed over it (a
    reader never sees half a file). The file gets the umask's mode, as any file does: safetensors' save_file and
    mkstemp both make files only their owner may read, and a server running as another user could not load them."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "xb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def read_saved_tensors(path: Path, *, what: str, keys: Sequence[str], error: type[Exception], writer: str,
                       damaged_hint: str = "") -> tuple[list[str | None], dict[str, Any]]:
    """A saved safetensors file's header values under `keys` and its tensors, each refusal an `error` in one line
    naming `path`: a folder, a missing file, a file without `keys[0]` in its header ("not a {what} file"; `writer`
    says how to make one), an unreadable or damaged one (`damaged_hint` appended)."""
    from safetensors import SafetensorError, safe_open

    if path.is_dir():
        raise error(f"{path} is a folder, not a {what} file ({writer})")
    if not path.is_file():
        raise error(f"{what} file not found: {path}")
    try:
        with safe_open(str(path), framework="pt") as handle:
            header = handle.metadata() or {}
            values = [header.get(key) for key in keys]
            if values[0] is None:
                raise error(f"{path}: not a {what} file (no {keys[0]} metadata); {writer}")
            return values, {key: handle.get_tensor(key) for key in handle.keys()}
    except SafetensorError as problem:
        raise error(f"{path}: cannot read the {what} file: not a safetensors file, or a damaged one ({problem}){damaged_hint}") from None
    except OSError as problem:
        raise error(f"{path}: cannot read the {what} file: {problem.strerror or problem}") from None


def readable_copy(path: Path) -> Path:
    """Where a saved file's readable metadata goes beside it: `x.heads.safetensors` -> `x.heads.json` (any
    other name gets `.json` appended, so the copy never overwrites the file)."""
    if path.name.endswith(".safetensors"):
        return path.with_name(path.name.removesuffix(".safetensors") + ".json")
    return path.with_name(path.name + ".json")


def existing_ancestor(path: Path) -> Path:
    """The nearest folder above `path` that exists (or a file there, which blocks creating `path`)."""
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    return ancestor


CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet", ".pq")
COMPRESSED_SUFFIXES = (".gz", ".tgz", ".bz2", ".xz", ".zst", ".zip", ".7z", ".tar")
UNREAD_SUFFIXES = (".tsv", ".xls", ".xlsx", *COMPRESSED_SUFFIXES)
"""Names of a format no data reader takes (another table, a compressed file): refused by name rather
than read as JSONL, which would fail on its first line with a message about JSON."""


def data_format(path: Path) -> str:
    """How a data file is read, by its suffix: `csv`, `parquet`, `jsonl` (every other suffix), or
    `unread` for another table or a compressed file (`unread_reason` says what is read instead)."""
    suffix = path.suffix.lower()
    if suffix in UNREAD_SUFFIXES:
        return "unread"
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    return "jsonl"


def unread_reason(path: Path) -> str:
    suffix = path.suffix.lower()
    return (f"{path}: {suffix} files are not read; give JSONL, CSV (.csv) or Parquet (.parquet, .pq)"
            + (", uncompressed" if suffix in COMPRESSED_SUFFIXES else ""))
