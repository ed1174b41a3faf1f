"""Fitting decision heads from labelled rows, and choosing per field between a head and zero-shot.

    result = fit_heads(engine, Triage, rows)       # rows: (text, {field: label}) pairs or mappings
    result.heads.save("triage.heads.safetensors")  # the engine applies them: decide(..., heads=...)

`fit_heads` runs the labelled rows through the engine's own packed passes once (`Engine.read_features`), with each row's
gold answers written into the prompt in place of the model's (so a dependent field is read under
its right parent answer), and keeps, per labelled field, the hidden states at its answer position
and its zero-shot distribution. Per field it then fits a multinomial logistic regression
(scikit-learn) on those features at each strength of a regularisation path, averaged into one
linear head, and compares the readouts on the rows' out-of-fold answers (stratified cross-validation
on the same rows):

- `zero_shot`: the engine's readout (its correction applied), which needs no fitting;
- `fitted`: the head, reading the hidden states and the zero-shot log-probabilities;
- `ordinal` (score fields): the level regressed on the same features (ridge, averaged over a path of
  penalties), read as a normal distribution over the levels, whose width is fitted on the out-of-fold
  predictions. It is also a linear head, applied the same way.

The field keeps the head only when it is right on more rows across folds than zero-shot and McNemar's
exact p of that difference is below `significance` (0.05; 1 keeps any win); otherwise zero-shot. A
score field's head must instead be nearer the gold level on average, with Wilcoxon's signed-rank test
on the paired errors below `significance`; of its heads that do, the nearer is kept unless the other
is right on significantly more rows (`_kept_head`). Each candidate's figure comes with its 95 % Wilson
interval and its p against zero-shot on the same rows. A field with fewer than `min_rows_per_label`
rows for some answer gets no head; a score field gets its heads from `MIN_ORDINAL_ROWS` rows over two
levels (the multinomial one where two levels have `min_rows_per_label` rows, never answering a level
without rows). A field with no head to try keeps zero-shot, and the result's warnings say
how many more rows it needs.
"""

from __future__ import annotations

import difflib
import math
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from ..errors import DataError, DecisionflowError, Unavailable
from ..runtime.head_store import library_version
from ..runtime.heads.fitted import (
    DEFAULT_LAYERS,
    DEFAULT_MEAN_LAYERS,
    Candidate,
    FieldHead,
    FieldHeadInfo,
    Heads,
    HeadsMetadata,
    NgramHead,
    input_hashes,
    prompt_fingerprint,
    rubric_fingerprint,
    zero_shot_features,
)
from ..runtime.heads.lexical import Lexicon, lexical_text
from ..spec.declare import rubric_of
from ..spec.gold import cell_label, gold_label
from ..spec.kinds import FieldKind
from ..spec.rubric import Rubric
from ..stats import fit_score_temperature, mcnemar
from .lexical import fit_lexicon, fit_words, word_matrix

MIN_ROWS_PER_LABEL = 2
"""Fewer labelled rows than this for some answer of a field, and the field keeps zero-shot."""
MAX_FOLDS = 5
SIGNIFICANCE = 0.05
"""A head replaces the zero-shot readout only when it is right on more rows across folds (a score: nearer
the gold level on average) and McNemar's exact test (a score: Wilcoxon's signed-rank test on the paired
errors) puts the difference below this p: a win of a row or two is noise, not evidence."""
REGULARISATION_GRID = (0.001, 0.003, 0.01, 0.03, 0.1)
"""The inverse regularisation strengths C of the path whose heads are averaged (features are
standardised; on the development sets the best single C was 0.001-0.1: docs/fitting.md)."""
TOLERANCE = 1e-4
"""The optimiser's stopping tolerance. At 1e-3 (and 300 steps) the regressions stopped short of their
optimum, where the answers depend on the optimiser's path: two fits on features differing only in
rounding disagreed on 3.9 % of CLINC150's dev rows, against 1.2 % converged (docs/fitting.md)."""
MAX_ITERATIONS = 1000
ORDINAL_PENALTIES = (10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0)
"""The ridge penalties whose regressions a score field's ordinal head averages (standardised features;
docs/fitting.md, "Score fields")."""
UNSEEN_BIAS = -1e4
"""The bias of a score level a multinomial head saw no row of: its probability is nothing, not NaN."""
MIN_ORDINAL_ROWS = 10
"""A score field's ordinal head needs this many labelled rows, over at least two levels (no row is
needed at every level: a level is a point on a line, not a class of its own)."""
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Example:
    """One labelled row: its input and its gold label per labelled field (as the field's labels)."""

    index: int
    """The number the row is named by in messages (the command line's data row; else its position)."""
    text: Any
    labels: dict[str, str]


@dataclass
class FieldData:
    """A field's fitting rows: features, zero-shot log-probabilities, gold and zero-shot answers."""

    hidden: list[torch.Tensor] = field(default_factory=list)
    zero_shot: list[torch.Tensor] = field(default_factory=list)
    gold: list[int] = field(default_factory=list)
    zero_shot_answer: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    """Each row's words as its n-gram head reads them (`lexical.lexical_text`)."""
    input_mean: list[torch.Tensor] = field(default_factory=list)
    """Each row's input-mean hidden state (where the fit reads it)."""


@dataclass(frozen=True)
class FieldFit:
    """What a field's fit keeps: its hidden-state head, its n-gram head (None where unused)."""

    hidden: FieldHead | None = None
    words: NgramHead | None = None
    input_mean: FieldHead | None = None
    """A fused head's input-mean member."""

    @property
    def any(self) -> bool:
        return self.hidden is not None or self.words is not None


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


MAX_LABEL_PROBLEMS = 10
"""Labels that are not answers named in one error; the rest are counted."""


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
    data, unread = _field_data(rubric, examples, captured, failed)
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
        model_name=getattr(engine.loaded, "name", "") or "", prompt=prompt_fingerprint(compiled.head_tokens),
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


def parents_to_write(rubric: Rubric, labels: Mapping[str, str]) -> dict[str, str]:
    """The gold answers to write into the prompt for a row: those of the fields its labelled fields
    depend on (`after`, `when`, `options_by`, transitively). Any other field's line is the model's own
    answer, as in use, so a later field's head never learns from a gold answer it will not see."""
    ancestors: set[str] = set()
    pending = [name for name in labels]
    while pending:
        for parent in rubric.fields[pending.pop()].dependencies:
            if parent not in ancestors:
                ancestors.add(parent)
                pending.append(parent)
    return {name: label for name, label in labels.items() if name in ancestors}


def _field_data(
    rubric: Rubric, examples: Sequence[Example], captured: Sequence[Any], failed: Mapping[int, str],
) -> tuple[dict[str, FieldData], dict[str, int]]:
    """Per field, the rows where it was read and labelled with an answer its row offered; and per field,
    how many labelled rows could not be used (not asked under the row's gold answers, or its gold
    answer not offered there)."""
    data: dict[str, FieldData] = {}
    unread: dict[str, int] = {}
    for example, reads in zip(examples, captured):
        if reads is None or example.index in failed:
            continue
        for name, gold in example.labels.items():
            read = reads.get(name)
            labels = rubric.fields[name].labels
            index = labels.index(gold)
            if read is None or index not in read.offered:
                unread[name] = unread.get(name, 0) + 1
                continue
            entry = data.setdefault(name, FieldData())
            entry.texts.append(lexical_text(example.text))
            entry.hidden.append(read.features)
            entry.zero_shot.append(zero_shot_features(read.zero_shot, read.offered, len(labels)))
            entry.gold.append(index)
            if read.input_mean is not None:
                entry.input_mean.append(read.input_mean)
            best = max(range(len(read.zero_shot)), key=read.zero_shot.__getitem__)
            entry.zero_shot_answer.append(read.offered[best])
    return data, unread


def fit_field(
    rubric: Rubric, name: str, data: FieldData, *, layers: tuple[int, ...], zero_shot_features: bool,
    min_rows_per_label: int, regularisation: Sequence[float], folds: int, seed: int,
    significance: float = SIGNIFICANCE, lexicon: Lexicon | None = None, mean_layers: tuple[int, ...] = (),
) -> tuple[FieldHeadInfo, FieldFit, str]:
    """One field's fit: its info (candidates, choice), its heads when a fitted one wins, and a warning line.

    With a `lexicon`, a choice or boolean field also cross-validates an n-gram head on the rows' words
    (`fitting.lexical`) and the fusion of the hidden-state head's, the n-gram head's and the zero-shot
    readout's log-probabilities, weighted as fitted on the out-of-fold log-probabilities (`_fusion`);
    of the heads that beat zero-shot, the most accurate answers. With `mean_layers` (and every row's
    input mean read there), the fusion has a fourth member: the same multinomial head on the input's
    mean hidden state at those layers (with the zero-shot log-probabilities as the hidden-state head has them).

    A score field cross-validates an ordinal head beside the multinomial one (and alone, where fewer
    than two levels have rows enough for the multinomial one); of those that beat zero-shot, the nearer
    the gold levels is kept unless the other is right on significantly more rows (`_better_head`). A
    score's head is compared with zero-shot by distance to the gold level: a smaller mean absolute
    error, with Wilcoxon's signed-rank test on the paired errors significant. An answer four levels off is worse than one level off; exact
    agreement alone cannot see that (ranked by exact agreement, 30 rated tweets kept zero-shot, 3.7
    levels off on average, against a head 0.9 levels off: docs/fitting.md)."""
    spec = rubric.fields[name]
    labels = spec.labels
    score = spec.kind is FieldKind.SCORE
    levels = [int(label) for label in labels] if score else None
    counts = {label: 0 for label in labels}
    for index in data.gold:
        counts[labels[index]] += 1
    base = dict(labels=tuple(labels), layers=layers, zero_shot_features=zero_shot_features, rows=len(data.gold),
                rows_per_label=counts)
    zero_shot_right = [a == g for a, g in zip(data.zero_shot_answer, data.gold)]
    candidates = {"zero_shot": _candidate(zero_shot_right, errors=_errors(levels, data.zero_shot_answer, data.gold))
                  } if data.gold else {}
    short = {label: n for label, n in counts.items() if n < min_rows_per_label}
    ordinal = score and _ordinal_fits(counts)
    # A score's multinomial head needs rows at two levels; the levels without them are never answered
    # (a level is a point on a line: the data of a 0-9 scale rarely has a 9). Any other field's needs
    # rows at every answer.
    multinomial = (not short) if not score else (
        ordinal and sum(1 for n in counts.values() if n >= min_rows_per_label) >= 2)
    if not (multinomial or ordinal):
        note = _too_few_rows(labels, counts, short, min_rows_per_label, score=score)
        return (FieldHeadInfo(readout="zero_shot", candidates=candidates, note=note, **base), FieldFit(),
                f"warning: field {name!r} keeps the zero-shot readout: {note}")
    words = word_matrix(lexicon, data.texts) if lexicon is not None and not score and multinomial else None
    try:
        import numpy as np
        from sklearn.model_selection import KFold, StratifiedKFold
        from threadpoolctl import threadpool_limits
    except ImportError as error:
        raise Unavailable(f"fitting heads needs scikit-learn ({error.name} is missing): pip install scikit-learn") from None
    features = _head_features(data.hidden, data.zero_shot if zero_shot_features else None)
    mean_features = None
    if words is not None and mean_layers and len(data.input_mean) == len(data.gold):
        mean_features = _head_features(data.input_mean, data.zero_shot if zero_shot_features else None)
    gold = np.asarray(data.gold)
    if short:  # some level has too few rows to stratify on (a score field)
        splits = min(folds, len(gold))
        cv: Any = KFold(n_splits=splits, shuffle=True, random_state=seed)
    else:
        splits = max(2, min(folds, min(counts.values())))
        cv = StratifiedKFold(n_splits=splits, shuffle=True, random_state=seed)
    folded = list(cv.split(features, gold))
    tried: dict[str, Any] = {}
    # One BLAS thread: these products are small, and two threads made the fits three times slower
    # (15.4 s against 5.1 s for BANKING77's 1,540 rows on two cores).
    with warnings.catch_warnings(), threadpool_limits(1):
        # Folds with one row of some answer, or a fold stopped at max_iter, are expected with few rows:
        # the cross-validated figure is the evidence, not the optimiser's warnings.
        warnings.simplefilter("ignore")
        def path(x: Any, y: Any) -> _PathHead:
            return _fit_path(x, y, regularisation)

        if multinomial:
            held_out = _held_out(path, features, gold, folded, len(labels))
            tried["fitted"] = held_out
        if words is not None:
            held_words = _held_out(fit_words, words, gold, folded, len(labels))
            tried["ngram"] = held_words
            temperatures = {"fitted": fit_score_temperature(held_out, gold), "ngram": fit_score_temperature(held_words, gold)}
            parts = [_log_softmax(held_out / temperatures["fitted"]), _log_softmax(held_words / temperatures["ngram"]),
                     torch.stack(data.zero_shot).double().numpy()]
            start = list(FUSION_START)
            if mean_features is not None:
                held_means = _held_out(path, mean_features, gold, folded, len(labels))
                temperatures["input_mean"] = fit_score_temperature(held_means, gold)
                parts.append(_log_softmax(held_means / temperatures["input_mean"]))
                start.append(MEAN_FUSION_START)
            fusion = _fusion(parts, gold, start=start)
            tried["fused"] = _fused(fusion, *parts)
        if ordinal:
            values = np.asarray(levels, dtype=float)
            predicted = np.zeros(len(gold))
            for train, test in folded:
                predicted[test] = _fit_ordinal(features[train], values[gold[train]]).predict(features[test])
            tried["ordinal"] = predicted
        zero_shot_errors = _errors(levels, data.zero_shot_answer, data.gold)
        errors: dict[str, list[int] | None] = {}
        for readout, held in tried.items():
            answers = (held.argmax(axis=1) if readout != "ordinal"
                       else np.abs(held[:, None] - values[None, :]).argmin(axis=1))
            errors[readout] = _errors(levels, answers.tolist(), data.gold)
            candidates[readout] = _candidate((answers == gold).tolist(), zero_shot_right, errors=errors[readout],
                                             zero_shot_errors=zero_shot_errors)
        best, wins = _kept_head(candidates, errors, score=score, significance=significance)
        chosen_figure = candidates[best]
        better = _rank(chosen_figure, score=score) < _rank(candidates["zero_shot"], score=score)
        head, word_head, mean_head, spread, temperature = None, None, None, None, 1.0
        if wins and best in ("fitted", "fused"):
            temperature = fit_score_temperature(tried["fitted"], gold, log_bounds=TEMPERATURE_LOG_BOUNDS)
            head = path(features, gold).head(temperature, len(labels))
        if wins and best in ("ngram", "fused"):
            word_head = NgramHead(*fit_words(words, gold).tensors(temperatures["ngram"], len(labels), UNSEEN_BIAS))
        elif wins and best == "ordinal":
            spread = _spread(tried["ordinal"], gold, values)
            head = _fit_ordinal(features, values[gold]).head(values, spread)
        if wins and best == "fused" and mean_features is not None:
            mean_head = path(mean_features, gold).head(temperatures["input_mean"], len(labels))
    test = "Wilcoxon" if score else "McNemar"
    note = "" if wins else (
        (f"the zero-shot readout was at least as {'near the gold level' if score else 'accurate'} "
         "across folds") if not better
        else f"the head's gain across folds was not significant ({test} p = {chosen_figure.p_vs_zero_shot:.2g}, "
             f"needs < {significance})")
    kinds = {"ordinal": "ordinal", "ngram": "ngram", "fused": "fused"}
    info = FieldHeadInfo(
        readout="fitted" if wins else "zero_shot", head=kinds.get(best, "multinomial"),
        regularisation=tuple(regularisation) if multinomial else (),
        penalties=ORDINAL_PENALTIES if ordinal else (), temperature=temperature, spread=spread, folds=splits,
        fusion=tuple(float(w) for w in fusion) if wins and best == "fused" else None,
        mean_layers=tuple(mean_layers) if mean_head is not None else (),
        why=_why(best, candidates, score=score) if wins else "",
        candidates=candidates, **base, note=note)
    fitted = FieldFit(head, word_head, mean_head)
    return info, fitted, _overconfidence_warning(name, fitted.any and candidates[best].accuracy == 1.0,
                                                 head is not None and best in ("fitted", "fused") and temperature
                                                 <= math.exp(TEMPERATURE_LOG_BOUNDS[0]) * (1 + 1e-3))


def _head_features(hidden: Sequence[torch.Tensor], zero_shot: Sequence[torch.Tensor] | None) -> Any:
    """[rows, features] float32: the hidden states a linear head reads, then the zero-shot log-probabilities
    where it reads them."""
    x = torch.stack(list(hidden))
    if zero_shot is not None:
        x = torch.cat([x, torch.stack(list(zero_shot))], dim=1)
    return x.float().numpy()


def _held_out(fit: Callable[[Any, Any], Any], x: Any, gold: Any, folded: Sequence[tuple[Any, Any]], answers: int) -> Any:
    """[rows, answers]: each row's scores from the model `fit(x, gold)` fitted without its fold (anything with
    `classes` and `scores`); an answer the fold's rows lacked scores -inf."""
    import numpy as np

    held = np.full((len(gold), answers), -np.inf)
    for train, test in folded:
        model = fit(x[train], gold[train])
        held[np.ix_(test, model.classes)] = model.scores(x[test])
    return held


def _why(best: str, candidates: Mapping[str, Candidate], *, score: bool) -> str:
    """Why the head that answers was kept: its figure against zero-shot's and the other heads'."""
    figure = candidates[best]
    measure = "mean absolute error" if score else "accuracy"

    def shown(candidate: Candidate) -> str:
        return f"{candidate.mean_absolute_error:.3f}" if score and candidate.mean_absolute_error is not None else f"{candidate.accuracy:.3f}"

    others = ", ".join(f"{name} {shown(c)}" for name, c in candidates.items() if name != best)
    p = f", p = {figure.p_vs_zero_shot:.2g} against zero-shot" if figure.p_vs_zero_shot is not None else ""
    return f"the best cross-validated {measure}: {best} {shown(figure)}{p} ({others})"


FUSION_START = (1.0, 1.0, 0.1)
"""Where the search for the hidden-state head's, the n-gram head's and the zero-shot readout's weights starts."""
MEAN_FUSION_START = 1.0
"""Where the search for the input-mean head's weight starts (as the benchmarks' members study started it)."""
FUSION_ITERATIONS_PER_MEMBER = 200


def _fusion(parts: Sequence[Any], gold: Any, *, start: Sequence[float] | None = None) -> tuple[float, ...]:
    """The weights of the members' log-probabilities (`parts`, each [rows, answers]) whose weighted sum has
    the lowest log-loss on the out-of-fold rows (non-negative, fitted together; a row some member gives
    no finite score to is left out). The fit fuses the hidden-state head, the n-gram head, the zero-shot
    readout and the input-mean head: on BANKING77's training rows 0.58, 0.34, 0.03, 0.14 (without the
    input-mean head 0.67, 0.38, 0.03)."""
    import numpy as np
    from scipy.optimize import minimize

    rows = np.arange(len(gold))
    finite = np.all([np.isfinite(part[rows, gold]) for part in parts], axis=0)
    kept, gold = [part[finite] for part in parts], gold[finite]
    picked = np.arange(len(gold))

    def loss(weights: Any) -> float:
        combined = _fused(np.abs(weights), *kept)
        return float(-_log_softmax(combined)[picked, gold].mean())

    found = minimize(loss, x0=np.array(start if start is not None else [1.0] * len(parts)), method="Nelder-Mead",
                     options={"maxiter": FUSION_ITERATIONS_PER_MEMBER * len(parts), "xatol": 1e-4})
    return tuple(float(weight) for weight in np.abs(found.x))


def _log_softmax(scores: Any) -> Any:
    from scipy.special import log_softmax

    return log_softmax(scores, axis=1)


def _fused(weights: Sequence[float], *parts: Any) -> Any:
    """The members' log-probabilities weighted and summed; an answer no member can give stays impossible."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        combined = sum(weight * part for weight, part in zip(weights, parts))
    return np.nan_to_num(combined, nan=-np.inf)


def _overconfidence_warning(name: str, all_right: bool, at_bound: bool) -> str:
    """Every out-of-fold answer right: the log-loss falls without end as the temperature (or an ordinal
    head's spread) does, so the search stops where it flattens and the head is as sure as it can be;
    a temperature at its search's lower end says the same of the rows it was fitted on."""
    if not (all_right or at_bound):
        return ""
    why = ("every cross-validated answer of its head was right, so nothing limits its confidence" if all_right
           else "its temperature stopped at the lower end of its search")
    return (f"warning: field {name!r}: {why}: its probabilities sit near 0 and 1 and overstate its certainty on "
            "inputs unlike its rows; fit on more varied rows, or calibrate on rows held out from the fit")


def _kept_head(candidates: Mapping[str, Candidate], errors: Mapping[str, list[int] | None], *, score: bool,
               significance: float) -> tuple[str, bool]:
    """The head to keep and whether it replaces zero-shot: the better (`_better_head`) of the heads that
    beat zero-shot; where none does, the better of all, which the report says fell short."""
    beating = {readout: e for readout, e in errors.items()
               if _beats(candidates[readout], candidates["zero_shot"], score=score, significance=significance)}
    return _better_head(candidates, beating or errors, significance), bool(beating)


def _beats(figure: Candidate, zero_shot: Candidate, *, score: bool, significance: float) -> bool:
    """Better than zero-shot across folds (a score: nearer on average; else more often right), and
    significantly so (`significance` 1 keeps any win: the p of a narrow win can be exactly 1)."""
    better = _rank(figure, score=score) < _rank(zero_shot, score=score)
    return better and (significance >= 1 or (figure.p_vs_zero_shot is not None and figure.p_vs_zero_shot < significance))


def _ordinal_fits(counts: Mapping[str, int]) -> bool:
    """Enough rows for an ordinal head: MIN_ORDINAL_ROWS over at least two levels."""
    return sum(counts.values()) >= MIN_ORDINAL_ROWS and sum(1 for n in counts.values() if n) >= 2


def _too_few_rows(labels: Sequence[str], counts: Mapping[str, int], short: Mapping[str, int], minimum: int,
                  *, score: bool) -> str:
    if score:
        rows, levels = sum(counts.values()), sum(1 for n in counts.values() if n)
        more = max(MIN_ORDINAL_ROWS - rows, 0)
        fix = (f"{more} more rows" if more else "rows") + (" at another level" if levels < 2 else "")
        return (f"{rows} labelled rows at {levels} of {len(labels)} levels; a score's head needs at least "
                f"{MIN_ORDINAL_ROWS} rows over two levels or more: {fix} would let a head be fitted")
    needed = sum(minimum - n for n in short.values())
    worst = ", ".join(f"{label} ({n})" for label, n in list(short.items())[:5])
    more = f" and {len(short) - 5} more" if len(short) > 5 else ""
    return (f"{len(short)} of {len(labels)} answers have fewer than {minimum} labelled rows: "
            f"{worst}{more}; {needed} more rows would let a head be fitted")


def _better_head(candidates: Mapping[str, Candidate], errors: Mapping[str, list[int] | None], significance: float) -> str:
    """Of the heads tried, a score's the one nearer the gold levels (ties: the more accurate), unless
    the other is right on significantly more rows (McNemar's exact test on the paired rows); any other
    field's, the more accurate. Measured on rated sentiment: with 30-100 rows the ordinal head was
    nearer on all four sets, and from 300 rows the two were equally near while the multinomial head
    was right on up to 13 points more rows on three of them (docs/fitting.md)."""
    def rank(readout: str) -> tuple[float, float]:
        return _rank(candidates[readout], score=errors[readout] is not None)

    heads = sorted(errors, key=rank)
    best = heads[0]
    for other in heads[1:]:
        mine, theirs = errors[best], errors[other]
        if mine is None or theirs is None or candidates[other].accuracy <= candidates[best].accuracy:
            continue
        if significance >= 1 or mcnemar([t == 0 for t in theirs], [m == 0 for m in mine]).p < significance:
            best = other
    return best


def _wilcoxon(errors: Sequence[int], baseline: Sequence[int]) -> float:
    """Wilcoxon's signed-rank p of paired absolute errors (rows where they are equal left out)."""
    from scipy.stats import wilcoxon

    differences = [a - b for a, b in zip(errors, baseline) if a != b]
    return float(wilcoxon(differences).pvalue) if differences else 1.0


def _rank(figure: Candidate, *, score: bool) -> tuple[float, float]:
    """Smaller is better: a score's mean absolute error then its accuracy; any other field's accuracy."""
    if score:
        return (figure.mean_absolute_error or 0.0, -figure.accuracy)
    return (-figure.accuracy, 0.0)


def _errors(levels: Sequence[int] | None, answers: Sequence[int], gold: Sequence[int]) -> list[int] | None:
    """A score field's absolute error per row, in levels (None for other kinds)."""
    if levels is None:
        return None
    return [abs(levels[a] - levels[g]) for a, g in zip(answers, gold)]


@dataclass
class _PathHead:
    """The logistic regressions of a regularisation path, averaged: one linear map on standardised features."""

    mean: Any
    scale: Any
    weight: Any  # [answers, features]
    bias: Any  # [answers]
    classes: Any

    def scores(self, features: Any) -> Any:
        """[rows, answers]: one column per class this path saw, in `classes` order."""
        return ((features - self.mean) / self.scale) @ self.weight.T + self.bias

    def head(self, temperature: float = 1.0, answers: int | None = None) -> FieldHead:
        """As a head over `answers` answers (default: the classes seen); an answer without rows gets no
        weight and a bias that keeps its probability at nothing."""
        import numpy as np

        weight, bias = self.weight / temperature, self.bias / temperature
        if answers is not None and answers != len(self.classes):
            weight_all, bias_all = np.zeros((answers, weight.shape[1])), np.full(answers, UNSEEN_BIAS)
            weight_all[self.classes], bias_all[self.classes] = weight, bias
            weight, bias = weight_all, bias_all

        def tensor(array: Any) -> torch.Tensor:
            return torch.tensor(array, dtype=torch.float32)

        return FieldHead(tensor(weight), tensor(bias), tensor(self.mean), tensor(self.scale))


TEMPERATURE_LOG_BOUNDS = (-4.0, 4.0)
"""Where the head's temperature is searched (log): a fit that ends at the lower end is warned about."""


def _fit_path(features: Any, gold: Any, regularisation: Sequence[float]) -> _PathHead:
    """One multinomial logistic regression per C of `regularisation`, on standardised features, each
    starting where the previous (more regularised) one stopped, and their scores averaged.

    Averaging instead of keeping the cross-validated best C: the best C's accuracy is flat near its
    peak, so which C wins moved with the folds' shuffle and with the features' last bits (a refit
    under another shuffle changed up to 10 % of dev answers, bfloat16 against float32 up to 26 %),
    while the averaged head's answers did not move, at the same accuracy (docs/fitting.md)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(features)
    standard = scaler.transform(features)
    regression = LogisticRegression(max_iter=MAX_ITERATIONS, tol=TOLERANCE, warm_start=True)
    weight, bias = 0.0, 0.0
    for c in sorted(regularisation):
        regression.set_params(C=c).fit(standard, gold)
        coef, intercept = regression.coef_, regression.intercept_
        if coef.shape[0] == 1:  # two answers: scikit-learn keeps one row; as two, the softmax is its sigmoid
            coef, intercept = np.concatenate([-coef / 2, coef / 2]), np.concatenate([-intercept / 2, intercept / 2])
        weight, bias = weight + coef, bias + intercept
    count = len(regularisation)
    return _PathHead(scaler.mean_, scaler.scale_, weight / count, bias / count, regression.classes_)


@dataclass
class _OrdinalHead:
    """Ridge regressions of a score's level on standardised features, averaged over `ORDINAL_PENALTIES`."""

    mean: Any
    scale: Any
    weight: Any  # [features]
    bias: float

    def predict(self, features: Any) -> Any:
        return ((features - self.mean) / self.scale) @ self.weight + self.bias

    def head(self, levels: Any, spread: float) -> FieldHead:
        """As a linear head: a normal distribution of width `spread` around the predicted level, over the
        levels, is a softmax of (level * predicted - level**2 / 2) / spread**2, linear in the features.
        Levels are centred first so the quadratic term stays small in float32."""
        centre = (float(levels.min()) + float(levels.max())) / 2
        offsets = levels - centre
        variance = spread * spread
        weight = offsets[:, None] * self.weight[None, :] / variance
        bias = (offsets * (self.bias - centre) - offsets * offsets / 2) / variance
        return FieldHead(*(torch.tensor(a, dtype=torch.float32) for a in (weight, bias, self.mean, self.scale)))


def _fit_ordinal(features: Any, values: Any) -> _OrdinalHead:
    """The ordinal head's regression: one ridge regression of the level per penalty, averaged (as the
    multinomial head averages its path)."""
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(features)
    standard = scaler.transform(features)
    weight, bias = 0.0, 0.0
    for penalty in ORDINAL_PENALTIES:
        regression = Ridge(alpha=penalty).fit(standard, values)
        weight, bias = weight + regression.coef_, bias + float(regression.intercept_)
    count = len(ORDINAL_PENALTIES)
    return _OrdinalHead(scaler.mean_, scaler.scale_, weight / count, bias / count)


def _spread(predicted: Any, gold: Any, values: Any) -> float:
    """The ordinal head's width in levels: the normal around each out-of-fold prediction, taken over the
    levels, is a softmax of -(level - predicted)**2 / 2 at temperature width**2, fitted as the
    multinomial head's temperature is (`stats.fit_score_temperature`)."""
    import numpy as np

    distance = (values[None, :] - predicted[:, None]) ** 2
    return math.sqrt(fit_score_temperature(-distance / 2, np.asarray(gold), log_bounds=(-8.0, 12.0)))


def _candidate(right: Sequence[bool], zero_shot_right: Sequence[bool] | None = None, *,
               errors: Sequence[int] | None = None, zero_shot_errors: Sequence[int] | None = None) -> Candidate:
    """A readout's figure. Its p against zero-shot: McNemar's exact test on right and wrong, or for a
    score field (`errors` given) Wilcoxon's signed-rank test on the paired absolute errors."""
    from scipy.stats import binomtest

    n, k = len(right), sum(right)
    interval = binomtest(k, n).proportion_ci(method="wilson") if n else None
    p = None
    if zero_shot_right is not None and errors is not None and zero_shot_errors is not None:
        p = _wilcoxon(errors, zero_shot_errors)
    elif zero_shot_right is not None:
        p = mcnemar(right, zero_shot_right).p
    return Candidate(accuracy=k / n if n else 0.0, low=interval.low if interval else 0.0,
                     high=interval.high if interval else 0.0, rows=n, p_vs_zero_shot=p,
                     mean_absolute_error=sum(errors) / len(errors) if errors else None)
