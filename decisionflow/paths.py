"""Path helpers every step may use (below the pipeline, like `errors`): nothing here reads or writes a file."""

from __future__ import annotations

from pathlib import Path


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
