"""Labelled rows as examples: each row's input and, per labelled field, its gold answer as one of the
field's labels. Every label that is not an answer is named at once (row, field, close matches), before
the model is loaded, so one pass over a file mends them all."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..errors import DataError
from ..spec.gold import cell_label, gold_label
from ..spec.rubric import Rubric

MAX_LABEL_PROBLEMS = 10
"""Labels that are not answers named in one error; the rest are counted."""


@dataclass(frozen=True)
class Example:
    """One labelled row: its input and its gold label per labelled field (as the field's labels)."""

    index: int
    """The number the row is named by in messages (the command line's data row; else its position)."""
    text: Any
    labels: dict[str, str]


def examples_of(rubric: Rubric, rows: Iterable[Any], *, unknown_labels: str = "error") -> tuple[list[Example], int]:
    """The rows as examples, each gold cell read as its field's label. A label that is not one of its
    field's answers is an error naming the row and the close matches (or, with `unknown_labels="skip"`,
    left out and counted). Returns the examples and how many labels were skipped."""
    if unknown_labels not in ("error", "skip"):
        raise DataError(f"unknown_labels must be 'error' or 'skip', got {unknown_labels!r}")
    examples: list[Example] = []
    skipped = 0
    problems: list[str] = []
    for index, row in enumerate(rows):
        text, written = _split_row(rubric, index, row)
        labels: dict[str, str] = {}
        for name, value in written.items():
            cell = cell_label(value)
            if not cell:
                continue
            spec = rubric.fields[name]
            label = gold_label(spec, cell)
            if label not in spec.labels:
                if unknown_labels == "skip":
                    skipped += 1
                    continue
                close = difflib.get_close_matches(label, spec.labels, n=3, cutoff=0.6)
                hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
                problems.append(f"row {index}: {label!r} is not an answer of field {name!r}{hint} "
                                f"(it offers {_listed(spec.labels)})")
                continue
            labels[name] = label
        if labels:
            examples.append(Example(index, text, labels))
    if problems:
        # Every bad label at once (up to a screenful), so one pass over the file mends them all.
        more = len(problems) - MAX_LABEL_PROBLEMS
        raise DataError("\n".join(problems[:MAX_LABEL_PROBLEMS]
                                  + ([f"... and {more} more labels that are not answers"] if more > 0 else [])))
    if not examples:
        raise DataError("no row labels any field of rubric "
                        f"{rubric.name!r} with one of its answers (fields: {', '.join(rubric.fields)})")
    return examples, skipped


def _split_row(rubric: Rubric, index: int, row: Any) -> tuple[Any, dict[str, Any]]:
    if isinstance(row, Mapping):
        if "text" not in row:
            raise DataError(f"row {index}: no 'text' key (a row is a mapping with 'text' and a key per labelled field)")
        written = {k: v for k, v in row.items() if k != "text"}
        text = row["text"]
    elif isinstance(row, (tuple, list)) and len(row) == 2 and isinstance(row[1], Mapping):
        text, written = row[0], dict(row[1])
    else:
        raise DataError(f"row {index}: expected (text, {{field: label}}) or a mapping with 'text', got {type(row).__name__}")
    for name in written:
        spec = rubric.fields.get(name)
        if spec is None:
            close = difflib.get_close_matches(str(name), list(rubric.fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise DataError(f"row {index}: {name!r} is not a field of rubric {rubric.name!r}{hint} "
                            f"(fields: {', '.join(rubric.fields)})")
        if spec.derive is not None:
            raise DataError(f"row {index}: field {name!r} is derived in code from {', '.join(spec.derive.reads)}, "
                            "so it cannot be fitted; label the fields it reads instead")
    return text, written


def _listed(labels: Sequence[str], shown: int = 8) -> str:
    return ", ".join(labels[:shown]) + (f", ... ({len(labels)} in all)" if len(labels) > shown else "")
