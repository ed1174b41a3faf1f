"""Labelled answers as people write them, read as the labels a field answers.

Gold labels come from spreadsheets and exports: a boolean written `True`, `yes` or `1`, a score
written `7.0`. `gold_label` reads such a cell as the field's own label (`true`, `7`); a choice label
must match exactly. Used wherever labelled rows meet a rubric: evaluation, calibration, fitting heads.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from .rubric import FieldKind, FieldSpec

BOOLEAN_GOLD = {"true": "true", "false": "false", "yes": "true", "no": "false", "1": "true", "0": "false"}
"""A boolean field's gold spellings (compared in lower case) -> its labels: `true`/`True`/`TRUE` (YAML,
JSON, pandas, `str(bool)`), `yes`/`no` and `1`/`0`."""


def gold_label(spec: FieldSpec, written: str) -> str:
    """A gold cell as the label `spec` would answer: a boolean's `BOOLEAN_GOLD` spellings in any case
    (and 1.0/0.0) and a score's whole number written as a float (`7.0`) become `true`/`false` and `7`; anything
    else is kept as written (and is out of scope unless it is one of the field's labels)."""
    if spec.kind is FieldKind.BOOLEAN:
        spelt = written.lower()
        # A boolean column with gaps is a float column in pandas and Parquet: 1.0 and 0.0.
        spelt = {"1.0": "1", "0.0": "0"}.get(spelt, spelt)
        return BOOLEAN_GOLD.get(spelt, written)
    if spec.kind is FieldKind.SCORE and written not in spec.labels:
        try:
            number = float(written)
        except ValueError:
            return written
        return str(int(number)) if number.is_integer() else written
    return written


def cell_label(value: Any) -> str:
    """A label cell of any format as a CSV cell would be written: JSON's and Parquet's `true` and `3`
    as `true` and `3`, an Enum member as its value, `null` and NaN (a gap in a Parquet or pandas column)
    as empty, which labels nothing."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        value = value.value
    return str(value).strip()
