"""Tuning a LoRA adapter on labelled rows, on the readout the engine serves (`decisionflow tune`).

    result = tune_adapter(engine, Triage, rows)        # rows as for fit_heads
    if result.kept:
        result.adapter.save("triage.adapter.safetensors")
    adapted = engine.with_adapter(result.adapter)      # or Engine.load(adapter=path)

What is trained is what is served. A batch of rows runs through the engine's own executor (`pack_round`,
`read_round`: the rubric's plan, its rows, each row's gold parent answers written into the prompt as
`fit` writes them) on a backend that is the model-forward path (`passes.model_forward`) with gradients on,
over a transformers copy of the engine's model with peft's LoRA layers injected. Each labelled field's
answers are scored from the log-probabilities the pass gathers for the readout, with the readout's own
arithmetic (`CompiledField.paths`: the spellings of an answer summed, the tokens along a path multiplied)
in log space and renormalised over the row's answers; the loss is the cross-entropy of the gold answer,
averaged over the labelled fields of the batch's rows. With the adapter disabled these are the engine's raw
probabilities (`decide(..., debias="none")`, tested within 1e-4 in float32); the readout's correction, a
content-free prior, is read again under the adapter when it is served. Fields read under several parent
hypotheses (`marginalize`) are not trained on (their reads mix hypotheses).

Whether the adapter is kept is decided on rows it was not trained on: a stratified part of the rows is
held out, both engines (without and with the adapter merged, as served) read them with their gold parents
written, and per field McNemar's exact test compares who is right. The adapter is kept when some field is
right on more held-out rows with p below `significance` and no field is right on significantly fewer. With
`folds` K of 2 or more every row is judged instead: K adapters, each trained on all folds but one, read their
own fold, the pairs are pooled, and a kept adapter is trained once more on every row (`fold_splits`).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import math
import random
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from ..errors import DataError, DecisionflowError, ModelError, Unavailable
from ..runtime.adapter import Adapter, AdapterFieldInfo, AdapterMetadata
from ..runtime.executor import RequestState, pack_round, read_round, read_rows, settle_derived
from ..runtime.heads.fitted import rubric_fingerprint
from ..runtime.passes.model_forward import ModelForwardBackend
from ..runtime.prefix_store import library_version
from ..runtime.readout.readout import gather_index, read_fields
from ..spec.declare import rubric_of
from ..spec.rubric import label_of
from ..stats.paired import mcnemar
from .examples import Example, examples_of
from .features import parents_to_write

Progress = Callable[[int, int], None]
DEFAULT_TARGETS = ("q_proj", "v_proj")
LEARNING_RATE = 5e-4
EPOCHS = 1
BATCH_ROWS = 4
HOLD_OUT = 0.25
FOLDS = 1
SIGNIFICANCE = 0.05
INSTALL_HINT = "decisionflow tune needs peft: pip install 'decisionflow[tune]' (or pip install 'peft>=0.21')"


@dataclass
class TuneResult:
    adapter: Adapter
    """The tuned adapter (saved by the caller only where `kept`)."""
    kept: bool
    why: str
    fields: dict[str, AdapterFieldInfo]
    rows: int
    """Rows trained on."""
    held_out: int
    steps: int
    interrupted: bool = False
    losses: list[float] = field(default_factory=list)
    """The mean training loss of each epoch (the last one partial when interrupted)."""
    held_out_losses: list[float] = field(default_factory=list)
    """With several epochs: the held-out rows' mean loss after each completed one."""
    best_epoch: int = 0
    """The epoch whose adapter is returned: with several, the one of lowest held-out loss (else the last)."""
    warnings: list[str] = field(default_factory=list)
    timings_s: dict[str, float] = field(default_factory=dict)
    heads: Any = None
    """Where the rubric is served with fitted heads (`tune_examples(heads=...)`): heads refitted on the adapted
    model: where the adapter is kept, fitted on every row (held-out ones included) on the adapter returned (saved
    with it); else the ones judged with it, fitted on the training rows. None without heads."""
    folds: int = 1
    fold_fields: list[dict[str, AdapterFieldInfo]] = field(default_factory=list)
    """With several folds: each fold's own comparison (its rows read without and with its adapter)."""
    fold_epochs: list[int] = field(default_factory=list)
    """With several folds: the epoch each fold's held-out loss chose (its last epoch with one)."""
    settings: list[dict[str, Any]] = field(default_factory=list)
    """With several ranks or learning rates: each pair tried, with its adapters' held-out accuracy (`Trial.summary`)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "rubric": self.adapter.metadata.rubric, "kept": self.kept, "why": self.why, "rows": self.rows,
            "held_out": self.held_out, "steps": self.steps, "interrupted": self.interrupted, "losses": self.losses,
            "held_out_losses": self.held_out_losses, "best_epoch": self.best_epoch,
            "warnings": self.warnings, "timings_s": self.timings_s,
            "fields": {name: info.model_dump() for name, info in self.fields.items()},
            "heads_refitted": None if self.heads is None else list(self.heads.fitted_fields),
            "folds": self.folds, "fold_epochs": self.fold_epochs, "settings": self.settings,
            "fold_fields": [{name: info.model_dump() for name, info in fold.items()} for fold in self.fold_fields],
        }


def peft_available() -> None:
    """Raise `Unavailable` with the install hint where peft cannot be imported."""
    try:
        import peft  # noqa: F401
    except ImportError:
        raise Unavailable(INSTALL_HINT) from None


def tune_adapter(
    engine: Any, target: Any, rows: Iterable[Any], *, fields: Sequence[str] | None = None,
    rank: int | Sequence[int] = 8, alpha: float = 16.0, targets: Sequence[str] = DEFAULT_TARGETS,
    learning_rate: float | Sequence[float] = LEARNING_RATE, epochs: int = EPOCHS, batch_rows: int = BATCH_ROWS,
    seed: int = 0, hold_out: float = HOLD_OUT, significance: float = SIGNIFICANCE, progress: Progress | None = None,
    unknown_labels: str = "error", keep: bool = False, heads: Any = None, folds: int = FOLDS,
) -> TuneResult:
    """Tune a LoRA adapter on `rows` (see `examples_of`); see the module. `fields`: the labelled fields to train
    and judge on (default: every labelled one). `progress(done, total)` counts training rows over the epochs (and
    the folds). Ctrl-C stops training; the adapter after the last completed step is judged and returned
    (`interrupted`). `heads`: the fitted heads the rubric is served with, if any; `folds`, and several ranks or
    learning rates to choose among: see `tune_examples`."""
    rubric = rubric_of(target)
    examples, _ = examples_of(rubric, rows, unknown_labels=unknown_labels)
    return tune_examples(engine, rubric, examples, fields=fields, rank=rank, alpha=alpha, targets=targets,
                         learning_rate=learning_rate, epochs=epochs, batch_rows=batch_rows, seed=seed, hold_out=hold_out,
                         significance=significance, progress=progress, keep=keep, heads=heads, folds=folds)


@dataclass(frozen=True)
class TrainSettings:
    rank: int
    alpha: float
    targets: tuple[str, ...]
    learning_rate: float
    epochs: int
    batch_rows: int
    seed: int


@dataclass
class Training:
    """One training run: the adapter it left and how it went."""

    adapter: Adapter
    steps: int
    done: int
    """Training rows read, over the epochs."""
    losses: list[float]
    held_out_losses: list[float]
    best_epoch: int
    interrupted: bool
    seconds: float


def tune_examples(
    engine: Any, target: Any, examples: Sequence[Example], *, fields: Sequence[str] | None = None,
    rank: int | Sequence[int] = 8, alpha: float = 16.0, targets: Sequence[str] = DEFAULT_TARGETS,
    learning_rate: float | Sequence[float] = LEARNING_RATE, epochs: int = EPOCHS, batch_rows: int = BATCH_ROWS,
    seed: int = 0, hold_out: float = HOLD_OUT, significance: float = SIGNIFICANCE, progress: Progress | None = None,
    keep: bool = False, heads: Any = None, folds: int = FOLDS,
) -> TuneResult:
    """`tune_adapter` on rows `examples_of` has already checked (the command line checks its file first). `keep`: keep
    the adapter whatever the held-out comparison says (it is still made and reported).

    `heads`: the fitted heads the rubric is served with (heads fitted without an adapter are refused beside one).
    Where given, the comparison is between heads, fitted alike on the training rows by `fit`'s own choice: on the
    model without the adapter and on the adapted one (`TuneResult.heads`, saved with the adapter where kept), both
    judged on the held-out rows, so an adapter is kept only where it wins over the heads it replaces.

    `folds`: 1 judges on one stratified held-out share (`hold_out`) and returns the adapter trained on the rest. With
    K of 2 or more, the rows are cut into K stratified folds; an adapter is trained on all folds but one and read on
    that one, K times, and the comparison pools every row's two readings (each row judged by an adapter that never
    saw it). Where the adapter is kept, it is trained once more on every row (with several epochs, for the epoch
    count the folds chose most often), and heads are refitted on every row: K + 1 training runs in all.

    `rank` and `learning_rate` may each be several values: every pair is trained and read on the same held-out rows
    (the share or the folds), and the pair whose adapters are right on the largest share of them is the one judged
    and kept (ties: the earlier pair, in the order given). The verdict then reads the rows the pair was chosen on."""
    peft_available()
    rubric = rubric_of(target)
    ranks = [rank] if isinstance(rank, int) else list(rank)
    rates = [learning_rate] if isinstance(learning_rate, (int, float)) else list(learning_rate)
    if getattr(engine, "adapter", None) is not None:
        raise ModelError("tune on an engine without an adapter (this one serves one already)")
    if not ranks or not rates or min(ranks) < 1 or epochs < 1 or batch_rows < 1 or not min(rates) > 0:
        raise DataError("rank, epochs and the rows per step must be at least 1, the learning rate above 0")
    if folds < 1:
        raise DataError(f"the folds must be at least 1, got {folds}")
    if folds == 1 and not 0 < hold_out < 1:
        raise DataError(f"the held-out share must be between 0 and 1, got {hold_out}")
    chosen, examples = labelled_for(rubric, examples, fields)
    splits = [split_held_out(examples, hold_out, seed)] if folds == 1 else fold_splits(examples, folds, seed)
    if any(not train or not held for train, held in splits):
        what = "hold out others" if folds == 1 else f"cut into {folds} folds"
        raise DataError(f"{len(examples)} labelled rows are too few to train on some and {what}")
    candidates = [TrainSettings(r, alpha, tuple(targets), lr, epochs, batch_rows, seed) for r in ranks for lr in rates]
    # Progress counts every training row to read: each candidate's folds, then (with folds) every row once more.
    total = sum(len(train) for train, _ in splits) * epochs * len(candidates) + (len(examples) * epochs if folds > 1 else 0)
    trials, judging = run_trials(engine, rubric, splits, candidates, chosen, significance, progress, total=total,
                                 heads=heads, seed=seed)
    best = max(trials, key=lambda trial: (trial.accuracy, -trials.index(trial)))
    notes: list[str] = []
    if heads is not None:
        untuned = [name for name in heads.fitted_fields if name not in chosen]
        if untuned:
            notes.append(f"warning: the heads of {', '.join(untuned)} read the model without the adapter and these rows "
                         "do not label them: fit them again on the adapted model (decisionflow fit)")
    infos, kept, why = verdict(best.before, best.after, chosen, significance)
    if heads is not None:
        why += "; both with heads fitted on the training rows"
    if folds > 1:
        judged_folds = len(best.runs)
        why += f" ({folds} folds pooled)" if judged_folds == folds else f" ({judged_folds} of {folds} folds, interrupted)"
    if len(candidates) > 1:
        why += (f"; rank {best.settings.rank} and learning rate {best.settings.learning_rate:g} chosen among "
                f"{len(trials)} settings on the same rows")
    if sum(run.steps for run in best.runs) == 0:
        kept, why = False, "no training step was taken"
    elif keep and not kept:
        kept, why = True, f"kept as asked, though {why[0].lower()}{why[1:]}"
    interrupted = any(trial.interrupted for trial in trials)
    final, adapted_heads = best.runs[-1], best.heads
    trained_rows = len(splits[len(best.runs) - 1][0])
    held_rows = sum(len(held) for _, held in splits[:len(best.runs)])
    extra: list[Training] = []
    searched = sum(run.done for trial in trials for run in trial.runs)
    if progress and not interrupted and not (folds > 1 and kept):
        progress(searched, searched)  # no run on every row follows: the bar ends where the search did
    if folds > 1 and kept and not interrupted:
        # Every row judged, the adapter that is served learns from every row, for the epochs the folds chose.
        chosen_epochs = most_common_epoch([run.best_epoch for run in best.runs])
        final = train_adapter(engine, rubric, examples, [], replace(best.settings, epochs=chosen_epochs), progress,
                              offset=searched, total=total)
        extra.append(final)
        interrupted = final.interrupted
        trained_rows = len(examples)
    if heads is not None and kept and (extra or not interrupted):
        # The heads saved learn from every row, held-out ones included, on the adapter that is saved (the last run's
        # even when cut short): the judged ones saw the training rows only. Cut short before, the judged ones stay.
        began = time.perf_counter()
        adapted_heads = heads_like(engine.with_adapter(final.adapter), rubric, examples, heads, seed)
        judging += time.perf_counter() - began
    adapter = final.adapter
    adapter.metadata = adapter.metadata.model_copy(update={
        "rows": trained_rows, "held_out": held_rows, "folds": folds, "fields": infos, "kept": kept, "why": why,
    })
    notes += [f"warning: field {name!r} has no held-out row it was read on, so it is not judged"
              for name, info in infos.items() if not info.rows]
    every_run = [run for trial in trials for run in trial.runs] + extra
    trained_s = sum(run.seconds for run in every_run)
    done = sum(run.done for run in every_run)
    return TuneResult(adapter, kept, why, infos, rows=trained_rows, held_out=held_rows,
                      steps=sum(run.steps for run in best.runs + extra), interrupted=interrupted, losses=final.losses,
                      held_out_losses=best.runs[0].held_out_losses if folds == 1 else [],
                      best_epoch=final.best_epoch, warnings=notes, heads=adapted_heads, folds=folds,
                      fold_fields=best.fold_infos if folds > 1 else [],
                      fold_epochs=[run.best_epoch for run in best.runs] if folds > 1 else [],
                      settings=[trial.summary() for trial in trials] if len(candidates) > 1 else [],
                      timings_s={"train": trained_s, "judge": judging,
                                 "rows_per_s": done / trained_s if trained_s > 0 else 0.0})


def labelled_for(rubric: Any, examples: Sequence[Example], fields: Sequence[str] | None) -> tuple[list[str], list[Example]]:
    """The fields to tune on (default: every labelled one) and the rows labelling any of them, their labels of other
    fields dropped."""
    chosen = list(fields) if fields else [name for name in rubric.fields if any(name in e.labels for e in examples)]
    for name in chosen:
        if name not in rubric.fields:
            raise DataError(f"{name!r} is not a field of rubric {rubric.name!r} (fields: {', '.join(rubric.fields)})")
    kept = [Example(e.index, e.text, {k: v for k, v in e.labels.items() if k in chosen}) for e in examples]
    kept = [e for e in kept if e.labels]
    if not kept:
        raise DataError(f"no row labels any of the fields {', '.join(chosen)}")
    return chosen, kept


def run_trials(engine: Any, rubric: Any, splits: Sequence[tuple[list[Example], list[Example]]],
               candidates: Sequence[TrainSettings], fields: Sequence[str], significance: float,
               progress: Progress | None, *, total: int, heads: Any, seed: int) -> tuple[list[Trial], float]:
    """Every candidate setting trained on each split's training rows and read on its held-out rows, beside the model
    without an adapter (read once per split; with `heads`, each model's heads fitted on the split's training rows).
    Ctrl-C ends the search after judging the run it cut short. Returns the trials and the seconds spent judging."""
    base_right: dict[int, dict[str, list[bool | None]]] = {}
    trials: list[Trial] = []
    judging = 0.0
    done = 0
    for settings in candidates:
        trial = Trial(settings, {name: [] for name in fields}, {name: [] for name in fields})
        trials.append(trial)
        for number, (train, held) in enumerate(splits):
            run = train_adapter(engine, rubric, train, held, settings, progress, offset=done, total=total)
            done += run.done
            trial.runs.append(run)
            began = time.perf_counter()
            adapted = engine.with_adapter(run.adapter)
            if number not in base_right:
                base_heads = heads_like(engine, rubric, train, heads, seed) if heads is not None else None
                base_right[number] = held_out_right(engine, rubric, held, fields, base_heads)
            trial.heads = heads_like(adapted, rubric, train, heads, seed) if heads is not None else None
            right_after = held_out_right(adapted, rubric, held, fields, trial.heads)
            trial.fold_infos.append(verdict(base_right[number], right_after, fields, significance)[0])
            for name in fields:
                trial.before[name] += base_right[number][name]
                trial.after[name] += right_after[name]
            judging += time.perf_counter() - began
            if run.interrupted:
                return trials, judging
    return trials, judging


@dataclass
class Trial:
    """One setting read on every split: its runs, and per field every judged row read without and with its adapter."""

    settings: TrainSettings
    before: dict[str, list[bool | None]]
    after: dict[str, list[bool | None]]
    runs: list[Training] = field(default_factory=list)
    fold_infos: list[dict[str, AdapterFieldInfo]] = field(default_factory=list)
    heads: Any = None

    @property
    def interrupted(self) -> bool:
        return any(run.interrupted for run in self.runs)

    @property
    def accuracy(self) -> float:
        """The share of judged (row, field) readings its adapters got right: what settings are chosen by."""
        readings = [right for values in self.after.values() for right in values if right is not None]
        return sum(readings) / len(readings) if readings else 0.0

    def summary(self) -> dict[str, Any]:
        return {"rank": self.settings.rank, "learning_rate": self.settings.learning_rate, "accuracy": self.accuracy,
                "epochs": [run.best_epoch for run in self.runs], "interrupted": self.interrupted}


def train_adapter(engine: Any, rubric: Any, train: Sequence[Example], held: Sequence[Example], settings: TrainSettings,
                  progress: Progress | None, *, offset: int = 0, total: int = 0) -> Training:
    """One training run on `train` from a fresh adapter (seeded). With several epochs and `held` rows, the adapter
    after the epoch of lowest held-out loss is returned; Ctrl-C returns the one after the last completed step."""
    began = time.perf_counter()
    model = training_model(engine, rank=settings.rank, alpha=settings.alpha, targets=settings.targets, seed=settings.seed)
    compiled, plan = engine.compile(rubric)
    backend = TrainingBackend(model.get_base_model())
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(parameters, lr=settings.learning_rate, weight_decay=0.0)
    order = random.Random(settings.seed)
    epochs, batch_rows = settings.epochs, settings.batch_rows
    done, steps = 0, 0
    losses: list[float] = []
    interrupted = False
    kept_weights = [p.detach().clone() for p in parameters]  # the adapter after the last completed step
    held_losses: list[float] = []  # per epoch, where there are several: the held-out rows' mean loss after it
    best_weights: list[torch.Tensor] | None = None
    try:
        for _ in range(epochs):
            shuffled = list(train)
            order.shuffle(shuffled)
            epoch_loss, epoch_terms = 0.0, 0
            losses.append(math.nan)
            for start in range(0, len(shuffled), batch_rows):
                batch = shuffled[start : start + batch_rows]
                terms = answer_logprobs(backend, compiled, plan, batch)
                gold = [scores[index] for _, _, scores, index in terms]
                if gold:
                    loss = -torch.stack(gold).mean()
                    optimiser.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(parameters, 1.0)
                    optimiser.step()
                    kept_weights = [p.detach().clone() for p in parameters]
                    steps += 1
                    epoch_loss += float(loss.detach()) * len(gold)
                    epoch_terms += len(gold)
                    losses[-1] = epoch_loss / epoch_terms
                done += len(batch)
                if progress:
                    progress(offset + done, total or len(train) * epochs)
            if epochs > 1 and held:
                held_losses.append(held_out_loss(backend, compiled, plan, held, batch_rows))
                if held_losses[-1] <= min(held_losses):
                    best_weights = [p.detach().clone() for p in parameters]
    except KeyboardInterrupt:
        # A step cut short may have updated some weights and not others: the last completed step's are kept.
        interrupted = True
        with torch.no_grad():
            for parameter, weight in zip(parameters, kept_weights):
                parameter.copy_(weight)
    best_epoch = epochs
    if held_losses and not interrupted:
        # Several epochs: the adapter after the epoch whose held-out loss was lowest (a task may overfit by the next).
        best_epoch = held_losses.index(min(held_losses)) + 1
        with torch.no_grad():
            for parameter, weight in zip(parameters, best_weights or kept_weights):
                parameter.copy_(weight)
    adapter = adapter_of(model, engine, rubric, rank=settings.rank, alpha=settings.alpha, targets=settings.targets,
                         seed=settings.seed, rows=len(train), held_out=len(held), epochs=best_epoch,
                         learning_rate=settings.learning_rate)
    return Training(adapter, steps, done, losses, held_losses, best_epoch, interrupted, time.perf_counter() - began)


def most_common_epoch(epochs: Sequence[int]) -> int:
    """The epoch count the folds chose most often (ties: the fewer epochs)."""
    counts = Counter(epochs)
    return min(counts, key=lambda epoch: (-counts[epoch], epoch))


def fold_splits(examples: Sequence[Example], folds: int, seed: int) -> list[tuple[list[Example], list[Example]]]:
    """K stratified folds as (train, held) pairs: every group of rows labelled alike is shuffled (seeded) and dealt
    round the folds, each group starting where the last one stopped, so folds differ in size by one row at most."""
    groups: dict[tuple[tuple[str, str], ...], list[Example]] = defaultdict(list)
    for example in examples:
        groups[tuple(sorted(example.labels.items()))].append(example)
    shuffle = random.Random(seed)
    dealt: list[list[Example]] = [[] for _ in range(folds)]
    turn = 0
    for key in sorted(groups):
        group = list(groups[key])
        shuffle.shuffle(group)
        for example in group:
            dealt[turn % folds].append(example)
            turn += 1
    order = {e.index: i for i, e in enumerate(examples)}
    splits = []
    for fold in range(folds):
        held = sorted(dealt[fold], key=lambda e: order[e.index])
        train = sorted((e for other in range(folds) if other != fold for e in dealt[other]), key=lambda e: order[e.index])
        splits.append((train, held))
    return splits


def heads_like(engine: Any, rubric: Any, rows: Sequence[Example], served: Any, seed: int) -> Any:
    """Heads fitted on `rows` by `fit`'s own choice on `engine` (with or without an adapter merged), reading the
    layers the served heads read (the default ones where those read none)."""
    from .head_fit import fit_examples

    return fit_examples(engine, rubric, rows, layers=tuple(served.layers) or None, seed=seed).heads


def split_held_out(examples: Sequence[Example], share: float, seed: int) -> tuple[list[Example], list[Example]]:
    """Stratified by each row's labels: of every group of rows labelled alike, `share` (rounded, at least one
    row of a group of two or more) is held out; a group's one row is trained on."""
    groups: dict[tuple[tuple[str, str], ...], list[Example]] = defaultdict(list)
    for example in examples:
        groups[tuple(sorted(example.labels.items()))].append(example)
    shuffle = random.Random(seed)
    train: list[Example] = []
    held: list[Example] = []
    for key in sorted(groups):
        group = list(groups[key])
        shuffle.shuffle(group)
        count = max(1, round(len(group) * share)) if len(group) > 1 else 0
        held += group[:count]
        train += group[count:]
    order = {e.index: i for i, e in enumerate(examples)}
    return sorted(train, key=lambda e: order[e.index]), sorted(held, key=lambda e: order[e.index])


class TrainingBackend(ModelForwardBackend):
    """The model-forward path with gradients kept: the same passes (`ModelForwardBackend`), outside inference mode.

    With `blocks` (the default, where the model's attention is transformers' SDPA), each request's tokens attend
    only to the keys its mask can let through (the prefix, its own context, its own tokens) instead of every key
    of the packed pass: the packed sequence, its positions, its 4-D mask and every projection stay as served, but a
    pass of B requests costs attention linear in B instead of quadratic. The keys left out are the ones the mask
    hides, so the answers are the packed pass's within float rounding (`tests/fitting/test_tune.py`)."""

    def __init__(self, model: Any, *, blocks: bool = True) -> None:
        super().__init__(model)
        self.blocks = blocks and use_block_attention(model)

    def prefill_prefix(self, tokens: list[int]) -> Any:
        with block_attention_registered():
            return ModelForwardBackend.prefill_prefix.__wrapped__(self, tokens)  # type: ignore[attr-defined]

    def run_pass_with_features(self, *args: Any, **kwargs: Any) -> Any:
        plan = key_blocks(*args[:3]) if self.blocks else None
        token = BLOCKS.set(plan)
        try:
            with block_attention_registered():
                return ModelForwardBackend.run_pass_with_features.__wrapped__(self, *args, **kwargs)  # type: ignore[attr-defined]
        finally:
            BLOCKS.reset(token)


BLOCK_ATTENTION = "decisionflow_request_blocks"
BLOCKS: contextvars.ContextVar[list[tuple[int, int, torch.Tensor]] | None] = contextvars.ContextVar("blocks", default=None)
"""The pass in flight's blocks: per request, its rows of the packed pass (start, stop) and the key columns its
mask can let through. None outside `TrainingBackend.run_pass_with_features` (the prefix: plain causal SDPA)."""


def key_blocks(prefix: Any, contexts: Sequence[Any], packed: Any) -> list[tuple[int, int, torch.Tensor]]:
    """Per request block of a packed pass (laid out as `ModelForwardBackend.run_pass_with_features` lays out its
    cache: the prefix, then the contexts of the requests present in order, then the pass's tokens): its rows and
    the key columns its tokens may see."""
    from ..runtime.passes.backend import DecoderBackend

    layout = DecoderBackend.lay_out(prefix, list(contexts), packed, visibility=False)
    present = sorted({block.request for block in layout.blocks})
    starts, width = {}, prefix.length
    for request in present:
        starts[request] = width
        width += contexts[request].length
    plan = []
    for block in layout.blocks:
        start = starts[block.request]
        columns = torch.cat([torch.arange(prefix.length), torch.arange(start, start + contexts[block.request].length),
                             torch.arange(width + block.start, width + block.stop)])
        plan.append((block.start, block.stop, columns))
    return plan


def use_block_attention(model: Any) -> bool:
    """Route the training copy's attention through `block_attention`; False where its attention is not
    transformers' SDPA (another kernel: the packed pass runs as served)."""
    config = model.config
    if getattr(config, "_attn_implementation", None) not in ("sdpa", BLOCK_ATTENTION):
        return False
    with block_attention_registered():
        config._attn_implementation = BLOCK_ATTENTION
    return config._attn_implementation == BLOCK_ATTENTION


@contextlib.contextmanager
def block_attention_registered() -> Iterator[None]:
    """`block_attention` registered with transformers for the training copy's passes only (a copy routed to it
    finds it there, with `BLOCKS` unset it is plain SDPA): outside them the process's registry of attention
    functions holds nothing of decisionflow's (a served engine leaves transformers as it found it)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(BLOCK_ATTENTION, block_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(BLOCK_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    try:
        yield
    finally:
        # No public way to unregister: the class-level mappings `register` wrote to.
        AttentionInterface._global_mapping.pop(BLOCK_ATTENTION, None)
        AttentionMaskInterface._global_mapping.pop(BLOCK_ATTENTION, None)


def block_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention run per request block of the pass in flight (`BLOCKS`): the block's queries
    against the key columns its mask can let through, the mask cut to them; outside a pass, SDPA itself."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    plan = BLOCKS.get()
    if plan is None or attention_mask is None or query.shape[0] != 1 or not plan or plan[-1][1] != query.shape[2]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    outputs = []
    for start, stop, columns in plan:
        columns = columns.to(key.device)
        mask = attention_mask[:, :, start:stop].index_select(-1, columns)
        out, _ = sdpa_attention_forward(module, query[:, :, start:stop], key.index_select(2, columns),
                                        value.index_select(2, columns), mask, **kwargs)
        outputs.append(out)
    return torch.cat(outputs, dim=1), None


def held_out_loss(backend: Any, compiled: Any, plan: Any, held: Sequence[Example], batch_rows: int) -> float:
    """The training objective on the held-out rows, without gradients: the mean cross-entropy of each gold answer."""
    total, terms = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(held), batch_rows):
            for _, _, scores, index in answer_logprobs(backend, compiled, plan, held[start : start + batch_rows]):
                total -= float(scores[index])
                terms += 1
    return total / terms if terms else math.nan


def answer_logprobs(backend: Any, compiled: Any, plan: Any, batch: Sequence[Example]) -> list[tuple[int, str, torch.Tensor, int]]:
    """Per row of `batch` and labelled field read under a single parent hypothesis: (row, field, the log-probabilities
    of the row's answers as the readout reads them [answers], the gold answer's index among them). The rows run
    as the engine runs them (`executor.pack_round`, `read_round`), their gold parent answers written; gradients
    flow where `backend` keeps them."""
    rubric = compiled.rubric
    states = [RequestState(input_tokens=compiled.request_tokens(e.text), forced=parents_to_write(rubric, e.labels))
              for e in batch]
    prefix = backend.prefill_prefix(list(compiled.prefix_tokens))
    terms: list[tuple[int, str, torch.Tensor, int]] = []
    for round_ in plan.rounds:
        packed, reads = pack_round(compiled, round_, states)
        settle_derived(compiled, plan, states, round_.index)
        if not reads:
            continue
        rows = read_rows(reads)
        out = backend.run_pass_with_features(prefix, [s.context for s in states], packed,
                                             [p for r in reads for p in r.positions], (), (), gather_index(rows), None)
        start = 0
        for read, (row, _) in zip(reads, rows):
            masses, edges = len(row.mass_tokens), len(row.edges)
            edge_logprobs = out.gathered[start + masses : start + masses + edges]
            start += masses + edges
            gold = batch[read.request].labels.get(read.field)
            if gold is None or read.hypothesis is not None or gold not in row.labels:
                continue
            terms.append((read.request, read.field, answer_scores(row, edge_logprobs), row.labels.index(gold)))
        readings = read_fields(out.logprobs.detach(), rows, out.gathered.detach())
        read_round(compiled, round_, states, reads, readings, None)
        settle_derived(compiled, plan, states, round_.index)
    return terms


def answer_scores(row: Any, edge_logprobs: torch.Tensor) -> torch.Tensor:
    """The readout's distribution over a row's answers in log space (`readout._reading`): each answer's paths'
    probabilities (products of their edges') summed, then renormalised over the answers."""
    floor = torch.tensor(-math.inf, dtype=torch.float64)
    per_answer: list[list[torch.Tensor]] = [[] for _ in row.values]
    for answer, path in row.paths:
        per_answer[answer].append(edge_logprobs[list(path)].double().sum() if path else torch.zeros((), dtype=torch.float64))
    scores = torch.stack([torch.logsumexp(torch.stack(paths), 0) if paths else floor for paths in per_answer])
    return torch.log_softmax(scores, 0)


def training_model(engine: Any, *, rank: int, alpha: float, targets: Sequence[str], seed: int) -> Any:
    """A float32 transformers copy of the engine's model with peft's LoRA layers on `targets` (dropout 0; A seeded,
    B zero, so it starts as the model itself). The engine's own model is not changed."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()

    base = engine.base_loaded.model
    # Copied even where the engine already holds float32: a weight shared with the engine's model would follow
    # whatever is done to the training copy (peft's merge_and_unload writes into the base weights).
    state = {name: tensor.detach().to(torch.float32, copy=True) for name, tensor in base.state_dict().items()}
    if isinstance(base, PreTrainedModel):
        config = copy.deepcopy(base.config)  # the copy's attention is routed apart (`TrainingBackend`)
    else:
        values = dict(base.config.to_dict())
        config = AutoConfig.for_model(values.pop("model_type"), **values)
    with torch.device("meta"):  # no random initialisation: every weight is assigned from the engine's model
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    for name, module in model.named_modules():
        # Buffers computed from the configuration (the rotary table) are built again off the meta device.
        if any(buffer.is_meta for buffer in module.buffers(recurse=False)) and "config" in module.__init__.__code__.co_varnames:
            parent, _, leaf = name.rpartition(".")
            model.get_submodule(parent).__setattr__(leaf, type(module)(config=config))
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        raise ModelError("the model cannot be tuned: some of its weights are not in the engine's model")
    missing = [name for name in missing if not (name == "lm_head.weight" and getattr(config, "tie_word_embeddings", False))]
    if missing or unexpected:
        raise ModelError(f"the model cannot be tuned: its weights do not match the transformers model "
                         f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.eval()
    present = {name.rpartition(".")[2] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    absent = [t for t in targets if t not in present]
    if absent:
        raise DataError(f"the model has no projection named {', '.join(map(repr, absent))} to adapt "
                        f"(its projections: {', '.join(sorted(present))})")
    torch.manual_seed(seed)
    lora = LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0, bias="none")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers' deprecations peft still calls
        return get_peft_model(model, lora)


def adapter_of(model: Any, engine: Any, rubric: Any, *, rank: int, alpha: float, targets: Sequence[str], seed: int,
               rows: int, held_out: int, epochs: int, learning_rate: float) -> Adapter:
    """The peft model's LoRA weights as an `Adapter` stamped with the engine's model and the rubric."""
    import peft
    from peft.tuners.lora import LoraLayer

    weights = {}
    for name, module in model.get_base_model().named_modules():
        if isinstance(module, LoraLayer) and "default" in module.lora_A:
            weights[name] = (module.lora_A["default"].weight.detach().float().clone(),
                             module.lora_B["default"].weight.detach().float().clone())
    metadata = AdapterMetadata(
        rubric=rubric.name, rubric_fingerprint=rubric_fingerprint(rubric), model=engine.model_fingerprint,
        weights=engine.weights_fingerprint, model_name=getattr(engine.loaded, "name", "") or "", rank=rank,
        alpha=float(alpha), targets=list(targets), library=library_version(), peft=peft.__version__, seed=seed,
        rows=rows, held_out=held_out, epochs=epochs, learning_rate=learning_rate,
    )
    return Adapter(metadata, weights)


def held_out_right(engine: Any, rubric: Any, examples: Sequence[Example], fields: Sequence[str],
                   heads: Any = None) -> dict[str, list[bool | None]]:
    """Per field, per held-out row: whether the engine's answer (its readout as served, with `heads` where given,
    the row's gold parent answers written) is the gold one; None where the field was not read or not labelled."""
    write = [parents_to_write(rubric, e.labels) for e in examples]
    texts = [e.text for e in examples]
    if heads is None:
        outcomes, _ = engine.read_features(rubric, texts, layers=(-1,), write=write)
    else:
        outcomes = engine._decide(rubric, texts, progress=None, calibration=None, debias=None, fail_fast=False,
                                  heads=heads, forced=write)
    right: dict[str, list[bool | None]] = {name: [] for name in fields}
    for example, outcome in zip(examples, outcomes):
        for name in fields:
            gold = example.labels.get(name)
            result = None if isinstance(outcome, DecisionflowError) else outcome.fields.get(name)
            if gold is None or result is None or not result.asked or result.value is None:
                right[name].append(None if gold is None or result is None or not result.asked else False)
                continue
            right[name].append(label_of(result.value) == gold)
    return right


def verdict(before: dict[str, list[bool | None]], after: dict[str, list[bool | None]], fields: Sequence[str],
            significance: float) -> tuple[dict[str, AdapterFieldInfo], bool, str]:
    """The paired comparison of rows read without (`before`) and with (`after`) the adapter: per field, accuracy
    and McNemar's p over the rows read both ways; kept where some field wins significantly and none loses."""
    infos: dict[str, AdapterFieldInfo] = {}
    wins, losses = [], []
    for name in fields:
        pairs = [(a, b) for a, b in zip(before[name], after[name]) if a is not None and b is not None]
        if not pairs:
            infos[name] = AdapterFieldInfo()
            continue
        first, second = [a for a, _ in pairs], [b for _, b in pairs]
        test = mcnemar(first, second)
        infos[name] = AdapterFieldInfo(rows=len(pairs), accuracy_base=sum(first) / len(pairs),
                                       accuracy_adapted=sum(second) / len(pairs), p_value=test.p)
        if test.only_second > test.only_first and test.p < significance:
            wins.append(name)
        elif test.only_first > test.only_second and test.p < significance:
            losses.append(name)
    if losses:
        return infos, False, f"right on significantly fewer held-out rows for {', '.join(losses)}"
    if wins:
        return infos, True, f"right on significantly more held-out rows for {', '.join(wins)} (p < {significance:g})"
    return infos, False, f"no field is right on significantly more held-out rows (p < {significance:g})"
