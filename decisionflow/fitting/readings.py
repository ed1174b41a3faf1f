"""Reading one field of many inputs through the engine, once per row, for scoring.

Each row's reading keeps what scoring needs: the top label (abstained or not), the distribution, the
candidate mass, whether the field abstained, which readout correction the engine applied, and every
field's top label (for agreement with another method). A row that cannot be decided keeps its error.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from ..errors import DecisionflowError
from ..runtime.readout.calibration import Calibration
from ..runtime.result import FITTED_METHODS
from ..spec.declare import rubric_of
from ..stats import metrics

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
    heads: Any = None,
) -> list[Reading]:
    """One reading of `field_name` per text."""
    return read_rows_and_raw(engine, target, texts, field_name, calibration=calibration, debias=debias,
                             progress=progress, heads=heads)[0]


def read_all_fields(
    engine: Any, target: Any, texts: Sequence[str], *,
    calibration: Calibration | None = None, debias: str | None = None, progress: Progress | None = None,
    heads: Any = None,
) -> list[dict[str, Reading]]:
    """Field name -> reading, per text; a text that cannot be decided gets readings holding its error.

    `debias` overrides the readout correction for the call (None: the engine resolves it per field)."""
    names = list(rubric_of(target).fields)
    return [_readings(outcome) if not isinstance(outcome, DecisionflowError) else _failed(names, outcome)
            for outcome in _decide(engine, target, texts, calibration, debias, progress, heads)]


def read_rows_and_raw(
    engine: Any, target: Any, texts: Sequence[str], field_name: str, *,
    calibration: Calibration | None = None, debias: str | None = None, progress: Progress | None = None,
    heads: Any = None,
) -> tuple[list[Reading], list[Reading] | None]:
    """`read_rows`, and from the same passes the field's raw readings (no correction, no calibration)
    where a raw run would read exactly the same: when the field is decided in the first round, before
    any answer is written into the prompt. Otherwise None: a raw run could write different earlier
    answers, so it must be read on its own."""
    read = read_rows_raw_and_zero_shot(engine, target, texts, field_name, calibration=calibration,
                                       debias=debias, progress=progress, heads=heads)
    return read.readings, read.raw


@dataclass(frozen=True)
class FieldReadings:
    """One field's readings of many rows, and what the same passes can say about other readouts."""

    readings: list[Reading]
    raw: list[Reading] | None
    """The raw readings (no correction, no head, no calibration) where a raw run would read exactly
    these passes: the field is decided in the first round. Otherwise None (read them apart)."""
    zero_shot: list[Reading] | None
    """Where a fitted head answered the field: its zero-shot readings (after the correction, before the
    head and the calibration). None when no head answered it."""
    reads_fitted_answers: bool = False
    """Some row's field read answers a fitted head gave (written into its prompt, or a derived field
    computed from them): a run without heads could read it differently, so its zero-shot readings
    here are not the engine's without heads."""


def read_rows_raw_and_zero_shot(
    engine: Any, target: Any, texts: Sequence[str], field_name: str, *,
    calibration: Calibration | None = None, debias: str | None = None, progress: Progress | None = None,
    heads: Any = None,
) -> FieldReadings:
    """`read_rows_and_raw`, and, where a fitted head answered the field, its zero-shot readings from
    the same passes (see `FieldReadings`)."""
    rubric = rubric_of(target)
    names = list(rubric.fields)
    readings: list[Reading] = []
    raw: list[Reading] | None = []
    zero_shot: list[Reading] = []
    fitted = reads_fitted = False
    for outcome in _decide(engine, target, texts, calibration, debias, progress, heads):
        if isinstance(outcome, DecisionflowError):
            failed = _failed(names, outcome)[field_name]
            readings.append(failed)
            zero_shot.append(failed)
            if raw is not None:
                raw.append(failed)
            continue
        readings.append(_readings(outcome)[field_name])
        result = outcome.fields[field_name]
        if result.zero_shot_probabilities is not None:
            fitted = True
            zero_shot.append(_readings(outcome, view="zero_shot")[field_name])
        else:
            zero_shot.append(readings[-1])
        reads_fitted = reads_fitted or _reads_fitted_answers(outcome, rubric, field_name)
        if raw is not None and result.round == 0 and result.raw_probabilities is not None:
            raw.append(_readings(outcome, view="raw")[field_name])
        else:
            raw = None
    return FieldReadings(readings, raw, zero_shot if fitted else None, reads_fitted)


def _reads_fitted_answers(decision: Any, rubric: Any, field_name: str) -> bool:
    """Whether `field_name` was read after another field a head answered (every later round's prompt
    carries the earlier rounds' answers) or, derived, is computed from such a field or from one."""
    spec = rubric.fields[field_name]
    if spec.derive is not None:
        return any(decision.fields[read].method in FITTED_METHODS or _reads_fitted_answers(decision, rubric, read)
                   for read in spec.derive.reads)
    result = decision.fields[field_name]
    return any(name != field_name and other.method in FITTED_METHODS and (other.round or 0) < (result.round or 0)
               for name, other in decision.fields.items())


def _decide(
    engine: Any, target: Any, texts: Sequence[str], calibration: Calibration | None, debias: str | None,
    progress: Progress | None, heads: Any = None,
) -> Iterator[Any]:
    """Each text's Decision or error, in chunks of CHUNK_ROWS under one progress count."""
    for start in range(0, len(texts), CHUNK_ROWS):
        chunk = list(texts[start:start + CHUNK_ROWS])
        report = (lambda finished, _total, done=start: progress(done + finished, len(texts))) if progress else None
        yield from engine.decide_each(target, chunk, calibration=calibration, debias=debias, progress=report,
                                      **({"heads": heads} if heads is not None else {}))
        if progress:
            progress(min(start + CHUNK_ROWS, len(texts)), len(texts))


def _failed(names: Sequence[str], error: DecisionflowError) -> dict[str, Reading]:
    error.input_index = None
    return {name: Reading(predicted=None, error=str(error)) for name in names}


def _readings(decision: Any, *, view: str = "readout") -> dict[str, Reading]:
    """Each field's reading: `readout` (what the engine answered), `raw` (the distributions before
    correction, head and calibration) or `zero_shot` (after the correction, before a fitted head)."""
    raw = view == "raw"
    distributions = {}
    for name, f in decision.fields.items():
        chosen = f.raw_probabilities if raw else f.zero_shot_probabilities if view == "zero_shot" else None
        distributions[name] = chosen if chosen is not None else f.probabilities
    answers = {name: metrics.top_label(p) for name, p in distributions.items()}
    return {
        name: Reading(
            predicted=answers[name],
            probabilities=dict(distributions[name]),
            candidate_mass=result.candidate_mass,
            abstained=result.abstained and view == "readout",
            answers=answers,
            debias="none" if raw else result.debias,
        )
        for name, result in decision.fields.items()
    }


def applied_correction(readings: Sequence[Reading]) -> str:
    """The readout correction the engine applied to these readings (the commonest, should they differ)."""
    applied = Counter(r.debias for r in readings if not r.error and r.probabilities)
    return applied.most_common(1)[0][0] if applied else "none"
