"""Fitting decision heads from labelled rows, and choosing per field between a head and zero-shot.

    result = fit_heads(engine, Triage, rows)       # rows: (text, {field: label}) pairs or mappings
    result.heads.save("triage.heads.safetensors")  # the engine applies them: decide(..., heads=...)

`fit_heads` runs the labelled rows (`examples`) through the engine's own packed passes once
(`Engine.read_features`), with each row's gold answers written into the prompt in place of the
model's, and keeps per labelled field what a head reads (`features`). Per field it then fits the heads
(`training`) and keeps one only where it beats the zero-shot readout across folds (`choosing`); the
kept heads, with what each field's choice measured, go into one `Heads` object stamped with the rubric,
model, weights, prompt and dtype they were fitted for, which `Heads.save` writes beside the rubric.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from ..errors import DataError, DecisionflowError
from ..runtime.heads.fitted import (
    DEFAULT_LAYERS,
    DEFAULT_MEAN_LAYERS,
    FieldHead,
    FieldHeadInfo,
    Heads,
    HeadsMetadata,
    NgramHead,
    input_hashes,
    prompt_fingerprint,
    rubric_fingerprint,
)
from ..runtime.heads.lexical import lexical_text
from ..runtime.prefix_store import library_version
from ..spec.declare import rubric_of
from ..spec.kinds import FieldKind
from .choosing import MAX_FOLDS, MIN_ROWS_PER_LABEL, SIGNIFICANCE, fit_field
from .examples import Example, examples_of
from .features import FieldData, field_data, parents_to_write
from .lexical import fit_lexicon
from .training import REGULARISATION_GRID

Progress = Callable[[int, int], None]


@dataclass
class FitResult:
    heads: Heads
    warnings: list[str]
    rows: int
    """Rows read (labelled for at least one field)."""
    failed: dict[int, str]
    """`Example.index` -> why the engine could not read that row (too long, empty...)."""
    skipped: int = 0
    """Labels outside a field's answers skipped (with `unknown_labels="skip"`)."""
    timings_s: dict[str, float] = field(default_factory=dict)

    @property
    def fields(self) -> dict[str, FieldHeadInfo]:
        return dict(self.heads.metadata.fields)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rubric": self.heads.metadata.rubric,
            "rows": self.rows,
            "failed_rows": {str(k): v for k, v in self.failed.items()},
            "skipped_labels": self.skipped,
            "warnings": self.warnings,
            "timings_s": self.timings_s,
            "fields": {name: info.model_dump() for name, info in self.heads.metadata.fields.items()},
        }


def fit_heads(engine: Any, target: Any, rows: Iterable[Any], *, unknown_labels: str = "error", **options: Any) -> FitResult:
    """Read `rows` (see `examples_of`) once through the engine and fit, per labelled field, a head or
    keep zero-shot. `options`: see `fit_examples`."""
    examples, skipped = examples_of(rubric_of(target), rows, unknown_labels=unknown_labels)
    return fit_examples(engine, target, examples, skipped=skipped, **options)


def fit_examples(
    engine: Any, target: Any, examples: Sequence[Example], *, skipped: int = 0, layers: Sequence[int] | None = None,
    zero_shot_features: bool = True, min_rows_per_label: int = MIN_ROWS_PER_LABEL,
    regularisation: Sequence[float] = REGULARISATION_GRID, folds: int = MAX_FOLDS,
    progress: Progress | None = None, seed: int = 0, significance: float = SIGNIFICANCE, words: bool = True,
    mean_layers: Sequence[int] | None = None,
) -> FitResult:
    """`fit_heads` on rows `examples_of` has already checked against the rubric (the command line checks
    its file before the model loads); `skipped`: the labels it left out, for the report.

    `layers`: the hidden layers a head reads (from the top: -1 is what the LM head reads; default
    `heads.DEFAULT_LAYERS`, those of them the model has).
    `progress(done, total)` is called as rows are read. `words`: also try a choice or boolean field's
    n-gram head, and its fusion with the hidden-state head and the zero-shot readout.
    `mean_layers`: the layers whose mean over the input's positions the fusion's fourth member reads
    (default `heads.DEFAULT_MEAN_LAYERS`, those of them the model has; empty: no such member). Read only
    where the fusion is tried (`words`, and a labelled choice or boolean field).
    """
    count = engine.backend.layer_count
    if layers is None:
        layers = tuple(layer for layer in DEFAULT_LAYERS if -count <= layer < count)
    if not layers:
        raise DataError("a head needs at least one hidden layer to read")
    rubric = rubric_of(target)
    labelled = [name for name in rubric.fields if any(name in e.labels for e in examples)]
    # Words and the fusion are tried for choice and boolean fields; the input means serve only the fusion.
    fuses = words and any(rubric.fields[name].kind is not FieldKind.SCORE for name in labelled)
    if mean_layers is None:
        mean_layers = tuple(layer for layer in DEFAULT_MEAN_LAYERS if -count <= layer < count)
    mean_layers = tuple(mean_layers) if fuses else ()
    bad = [layer for layer in (*layers, *mean_layers) if not -count <= layer < count]
    if bad:
        raise DataError(f"layer {bad[0]} does not exist: the model has {count} layers (use -1 .. -{count})")
    began = time.perf_counter()
    outcomes, captured = engine.read_features(
        rubric, [e.text for e in examples], layers=tuple(layers), progress=progress,
        write=[parents_to_write(rubric, e.labels) for e in examples], mean_layers=mean_layers,
    )
    read_s = time.perf_counter() - began
    failed = {}
    for example, outcome in zip(examples, outcomes):
        if isinstance(outcome, DecisionflowError):
            outcome.input_index = None  # the row's own number names it
            failed[example.index] = str(outcome)
    data, unread = field_data(rubric, examples, captured, failed)
    began = time.perf_counter()
    notes: list[str] = []
    infos: dict[str, FieldHeadInfo] = {}
    heads: dict[str, FieldHead] = {}
    ngram: dict[str, NgramHead] = {}
    input_mean: dict[str, FieldHead] = {}
    lexicon = None
    if fuses:
        # The rows read, each once (a row labelling several fields counts once towards a gram's frequency).
        lexicon = fit_lexicon([lexical_text(e.text) for e, reads in zip(examples, captured)
                               if reads is not None and e.index not in failed])
    for name in labelled:
        info, fitted, warning = fit_field(
            rubric, name, data.get(name, FieldData()), layers=tuple(layers), zero_shot_features=zero_shot_features,
            min_rows_per_label=min_rows_per_label, regularisation=regularisation, folds=folds, seed=seed,
            significance=significance, lexicon=lexicon, mean_layers=mean_layers,
        )
        corrections = Counter(o.fields[name].debias for o in outcomes
                              if not isinstance(o, DecisionflowError) and o.fields[name].asked)
        infos[name] = info.model_copy(update={"debias": corrections.most_common(1)[0][0] if corrections else None})
        if fitted.hidden is not None:
            heads[name] = fitted.hidden
        if fitted.words is not None:
            ngram[name] = fitted.words
        if fitted.input_mean is not None:
            input_mean[name] = fitted.input_mean
        if warning:
            notes.append(warning)
    compiled, _ = engine.compile(rubric)
    metadata = HeadsMetadata(
        rubric=rubric.name, rubric_fingerprint=rubric_fingerprint(rubric), model=engine.model_fingerprint,
        weights=engine.weights_fingerprint,
        model_name=getattr(engine.loaded, "name", "") or "", prompt=prompt_fingerprint(compiled.prefix_tokens),
        dtype=str(engine.backend.dtype).removeprefix("torch."), library=library_version(), fields=infos,
    )
    if failed:
        index, why = next(iter(failed.items()))
        notes.append(f"warning: {len(failed)} of {len(examples)} rows could not be read and were left out "
                        f"(first: row {index}: {why})")
    for name, count in unread.items():
        notes.append(f"warning: field {name!r}: {count} labelled rows were left out because the field is not asked "
                        "(or does not offer the row's answer) under the row's gold answers of the fields it depends on")
    fitted_on = torch.unique(input_hashes([e.text for e in examples]))
    kept = Heads(metadata, heads, fitted_on=fitted_on, ngram=ngram, lexicon=lexicon if ngram else None,
                 input_mean=input_mean)
    return FitResult(kept, notes, rows=len(examples) - len(failed), failed=failed, skipped=skipped,
                     timings_s={"read": read_s, "fit": time.perf_counter() - began})
