"""Reading one field of many inputs through the engine, once per row, for scoring.

Each row's reading keeps what scoring needs: the top label (abstained or not), the distribution, the
candidate mass, whether the field abstained, which readout correction the engine applied, and every
field's top label (for agreement with another method). A row that cannot be decided keeps its error.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..errors import DecisionflowError
from ..runtime.calibration import Calibration
from ..spec.declare import rubric_of
from . import metrics

CHUNK_ROWS = 32
"""Rows handed to decide_many at once: small enough for a live progress bar, large enough to pack."""

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Reading:
    """What the engine said about one field of one row."""

    predicted: str | None
    """Top label, abstained or not; None when the row failed or the field was not asked."""
    probabilities: dict[str, float] = field(default_factory=dict)
    candidate_mass: float | None = None
    abstained: bool = False
    answers: dict[str, str | None] = field(default_factory=dict)
    """Every field's top label, for agreement with another method."""
    error: str = ""
    debias: str = "none"
    """The readout correction the engine applied to `probabilities` (see `runtime.debias`)."""

    @property
    def confidence(self) -> float | None:
        return self.probabilities.get(self.predicted) if self.predicted is not None else None


def read_rows(
    engine: Any, target: Any, texts: Sequence[str], field_name: str, *,
    calibration: Calibration | None = None, debias: str | None = None, progress: Progress | None = None,
) -> list[Reading]:
    """One reading of `field_name` per text."""
    rows = read_all_fields(engine, target, texts, calibration=calibration, debias=debias, progress=progress)
    return [row[field_name] for row in rows]


def read_all_fields(
    engine: Any, target: Any, texts: Sequence[str], *,
    calibration: Calibration | None = None, debias: str | None = None, progress: Progress | None = None,
) -> list[dict[str, Reading]]:
    """Field name -> reading, per text; a text that cannot be decided gets readings holding its error.

    `debias` overrides the readout correction for the call (None: the engine resolves it per field)."""
    names = list(rubric_of(target).fields)
    readings: list[dict[str, Reading]] = []
    for start in range(0, len(texts), CHUNK_ROWS):
        chunk = list(texts[start:start + CHUNK_ROWS])
        done = len(readings)
        report = (lambda finished, _total: progress(done + finished, len(texts))) if progress else None
        for outcome in engine.decide_each(target, chunk, calibration=calibration, debias=debias, progress=report):
            if isinstance(outcome, DecisionflowError):
                outcome.input_index = None
                readings.append({name: Reading(predicted=None, error=str(outcome)) for name in names})
            else:
                readings.append(_readings(outcome))
        if progress:
            progress(len(readings), len(texts))
    return readings


def _readings(decision: Any) -> dict[str, Reading]:
    answers = {name: metrics.top_label(f.probabilities) for name, f in decision.fields.items()}
    return {
        name: Reading(
            predicted=answers[name],
            probabilities=dict(result.probabilities),
            candidate_mass=result.candidate_mass,
            abstained=result.abstained,
            answers=answers,
            debias=result.debias,
        )
        for name, result in decision.fields.items()
    }


def applied_correction(readings: Sequence[Reading]) -> str:
    """The readout correction the engine applied to these readings (the commonest, should they differ)."""
    applied = Counter(r.debias for r in readings if not r.error and r.probabilities)
    return applied.most_common(1)[0][0] if applied else "none"
