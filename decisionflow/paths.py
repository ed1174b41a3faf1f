"""Path helpers every step may use (below the pipeline, like `errors`): nothing here reads or writes a file."""

from __future__ import annotations

from pathlib import Path


def existing_ancestor(path: Path) -> Path:
    """The nearest folder above `path` that exists (or a file there, which blocks creating `path`)."""
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    return ancestor
