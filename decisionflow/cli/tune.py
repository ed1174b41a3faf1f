"""`decisionflow tune`: a LoRA adapter fitted on labelled rows, kept where it wins on held-out rows.

Registered in cli.py. As for `fit`, the data, its columns and its labels are checked against the rubric before
the model loads, and peft's absence is named with the install hint before anything heavy is read.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..errors import DataError
from .common import (
    DataOption,
    DeviceOption,
    DtypeOption,
    HeadsOption,
    LabelColumnsOption,
    LoaderOption,
    ModelOption,
    NoHeadsOption,
    RubricRef,
    SkipUnknownLabelsOption,
    TextColumnOption,
    ThreadsOption,
    chosen_heads,
    count,
    guarded,
    load_engine,
    load_target_and_rubric,
    progress_bars,
    refuse_output,
    saved_beside,
    say,
    stderr,
)
from .fit import _examples


def tune_command(
    ctx: typer.Context,
    rubric_ref: RubricRef,
    data: DataOption,
    fields: Annotated[
        str | None,
        typer.Option("--fields", metavar="a,b", help="The labelled fields to train and judge on (default: every labelled one).",
                     show_default=False),
    ] = None,
    label: LabelColumnsOption = None,
    text_column: TextColumnOption = "text",
    max_rows: Annotated[int | None, typer.Option("--max-rows", min=2, metavar="N", help="Only the first N data rows.",
                                                 show_default=False)] = None,
    rank: Annotated[str, typer.Option("--rank", metavar="R[,R...]", help="The LoRA rank; several (8,16) are each "
                                      "tried on the held-out rows and the best kept (see --learning-rate).")] = "8",
    alpha: Annotated[float, typer.Option("--alpha", min=0.0, help="The LoRA alpha (the update is scaled by alpha / rank).")] = 16.0,
    targets: Annotated[str, typer.Option("--targets", metavar="q_proj,v_proj",
                                         help="The projections the adapter adapts, by name.")] = "q_proj,v_proj",
    epochs: Annotated[int, typer.Option("--epochs", min=1, metavar="N", help="Passes over the training rows; with "
                                        "several, the adapter after the epoch of lowest held-out loss is kept.")] = 1,
    learning_rate: Annotated[str, typer.Option("--learning-rate", metavar="X[,X...]", help="AdamW's learning rate; "
                                               "with several (5e-4,2e-3), every rank and rate pair is trained and read "
                                               "on the same held-out rows (or folds), and the pair right on most of them "
                                               "is judged and kept.")] = "5e-4",
    batch_rows: Annotated[int, typer.Option("--batch-rows", min=1, metavar="N", help="Rows per optimiser step.")] = 4,
    hold_out: Annotated[float, typer.Option("--hold-out", min=0.0, max=1.0, metavar="SHARE",
                                            help="The share of rows held out (stratified) to judge the adapter on.")] = 0.25,
    folds: Annotated[int, typer.Option("--folds", min=1, metavar="K", help="1: judge on one held-out share "
                                       "(--hold-out). K >= 2: train K adapters, each on all folds but one and read on that "
                                       "one, pool every row's comparison, and where kept train once more on every row "
                                       "(K + 1 training runs).")] = 1,
    significance: Annotated[
        float, typer.Option("--significance", min=0.0, max=1.0, metavar="P",
                            help="Keep the adapter only where some field is right on more held-out rows with it, McNemar's "
                                 "p below P, and none on significantly fewer (1: any win).")
    ] = 0.05,
    keep: Annotated[bool, typer.Option("--keep", help="Save the adapter whatever the held-out comparison says (it is "
                                       "still reported).")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seeds the adapter's start, the shuffles and the held-out rows.")] = 0,
    skip_unknown_labels: SkipUnknownLabelsOption = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Where to save the adapter (default: NAME.adapter.safetensors beside a YAML rubric "
                     "file; required for a shipped workflow's name or module:Class).", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON instead of a table.")] = False,
    heads_path: HeadsOption = None,
    no_heads: NoHeadsOption = False,
    model: ModelOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    loader: LoaderOption = "auto",
    threads: ThreadsOption = None,
) -> None:
    """Fit a LoRA adapter on labelled rows (each field's gold answer over its answers, read as the engine reads them),
    keep it where it beats the model without it on held-out rows (McNemar p below --significance), and save it beside
    the rubric (`run`, `eval`, `calibrate`, `fit` and `serve` merge it). Where the rubric has fitted heads, the comparison is between heads
    fitted on the training rows without and with the adapter, and the adapted heads are saved with the adapter."""
    from ..fitting.tuning import peft_available, tune_examples
    from ..runtime.adapter import adapter_path_for, save_problem
    from ..runtime.heads.fitted import Heads

    err = stderr()
    given = ctx.get_parameter_source("hold_out")
    if folds > 1 and given is not None and given.name == "COMMANDLINE":
        # Folds hold every row out once: a held-out share given beside them would be silently unread.
        say(err, "error: give --hold-out (one held-out share) or --folds K (every row held out once), not both")
        raise typer.Exit(2)
    guarded(ctx, err, peft_available)
    output = output or saved_beside(err, rubric_ref, "adapter", adapter_path_for)
    refuse_output(err, output, folder=False, option="--output")
    if problem := save_problem(output):
        say(err, f"error: --output {problem}")
        raise typer.Exit(2)
    target, rubric = load_target_and_rubric(ctx, rubric_ref, err)
    chosen = guarded(ctx, err, lambda: _fields(rubric, fields))
    ranks = guarded(ctx, err, lambda: _values(rank, int, "--rank", above=0))
    rates = guarded(ctx, err, lambda: _values(learning_rate, float, "--learning-rate", above=0.0))
    chosen_targets = [t.strip() for t in targets.split(",") if t.strip()]
    if not chosen_targets:
        say(err, "error: --targets names no projection")
        raise typer.Exit(1)
    rows = f"0:{max_rows}" if max_rows is not None else None
    examples, skipped = guarded(ctx, err, lambda: _examples(rubric, data, label or [], text_column, rows, skip_unknown_labels))
    if chosen is not None:
        unlabelled = [name for name in chosen if not any(name in e.labels for e in examples)]
        if unlabelled:
            say(err, f"error: --fields: no row labels {', '.join(map(repr, unlabelled))} (label columns are named after "
                     "fields, or mapped with --label FIELD=COLUMN)")
            raise typer.Exit(1)
    if skipped:
        say(err, f"left out {count(skipped, 'label')} that {'is' if skipped == 1 else 'are'} not an answer of its field")
    heads, heads_file = guarded(ctx, err, lambda: chosen_heads(rubric_ref, heads_path, no_heads, rubric))
    heads_output = heads_beside(output)
    if heads is not None and (problem := Heads.save_problem(heads_output)):
        say(err, f"error: the heads refitted with the adapter go beside it: {problem}")
        raise typer.Exit(2)
    engine = guarded(ctx, err, lambda: load_engine(err, model=model, threads=threads, device=device, dtype=dtype, loader=loader))
    if heads is not None:
        guarded(ctx, err, lambda: engine.check_heads(heads, target))
        say(err, f"heads: {heads_file} (the adapter is judged against heads fitted on the training rows, and heads are "
                 "fitted again on the adapted model)")
    began = time.perf_counter()
    with progress_bars(err) as progress_for:
        progress = progress_for("training rows")
        result = guarded(ctx, err, lambda: tune_examples(
            engine, target, examples, fields=chosen, rank=ranks, alpha=alpha, targets=chosen_targets,
            learning_rate=rates, epochs=epochs, batch_rows=batch_rows, seed=seed, hold_out=hold_out,
            significance=significance, progress=progress, keep=keep, heads=heads, folds=folds))
    took = time.perf_counter() - began
    if result.interrupted:
        say(err, f"interrupted after {count(result.steps, 'step')}: the adapter after the last one is "
                 f"{'judged' if result.folds == 1 else 'returned, judged by the folds read so far'}")
    for line in result.warnings:
        say(err, line)
    saved = guarded(ctx, err, lambda: result.adapter.save(output)) if result.kept else None
    size = saved.stat().st_size if saved is not None else 0
    # Heads fitted without the adapter are refused beside it: the ones judged with it take their place.
    saved_heads = guarded(ctx, err, lambda: result.heads.save(heads_output)) if saved and result.heads else None
    if as_json:
        typer.echo(json.dumps({**result.to_dict(), "saved": str(saved) if saved else None, "bytes": size,
                               "heads_saved": str(saved_heads) if saved_heads else None, "seconds": took}, indent=2))
        return
    out = Console(width=max(Console().width, 120))
    out.print(tune_table(result))
    rate = result.timings_s.get("rows_per_s", 0.0)
    if result.held_out_losses:
        losses = ", ".join(f"{loss:.3f}" for loss in result.held_out_losses)
        say(out, f"epoch {result.best_epoch} of {len(result.held_out_losses)} chosen: the lowest held-out loss ({losses})")
    if result.settings:
        out.print(settings_table(result))
    if result.fold_fields:
        out.print(folds_table(result))
    judged = (count(result.held_out, 'held-out row') if result.folds == 1
              else f"{count(result.held_out, 'row')} in {count(len(result.fold_fields), 'fold')}")
    say(out, f"adapter {'kept' if result.kept else 'not kept'}: {result.why}; trained on {count(result.rows, 'row')} "
             f"({count(result.steps, 'step')}, {rate:.2f} rows/s), judged on {judged}; {took:.1f} s in all")
    if saved is not None:
        say(out, f"saved {saved} ({size / 1024:.0f} KiB)")
        if saved_heads is not None:
            say(out, f"saved {saved_heads}: heads fitted on the adapted model ({', '.join(result.heads.fitted_fields) or 'none'}"
                     " fitted), in place of the heads fitted without it")
    else:
        say(out, "nothing saved")


def heads_beside(adapter_path: Path) -> Path:
    """Where heads fitted on an adapted model go: `NAME.heads.safetensors` beside `NAME.adapter.safetensors` (beside a
    rubric, the heads `run` reads with its adapter)."""
    from ..runtime.adapter import SUFFIX
    from ..runtime.heads.fitted import Heads

    stem = adapter_path.name.removesuffix(SUFFIX) if adapter_path.name.endswith(SUFFIX) else adapter_path.stem
    return Heads.path_for(adapter_path.with_name(stem + ".yaml"))


def tune_table(result: Any) -> Table:
    pooled = "" if result.folds == 1 else f", pooled over {result.folds} folds"
    table = Table(title=f"accuracy on the held-out rows{pooled}", title_justify="left")
    for column in ("field", "rows", "without adapter", "with adapter", "McNemar p"):
        table.add_column(column, justify="left" if column == "field" else "right")
    for name, info in result.fields.items():
        table.add_row(name, str(info.rows), _figure(info.accuracy_base), _figure(info.accuracy_adapted),
                      "-" if info.p_value is None else f"{info.p_value:.3g}")
    return table


def settings_table(result: Any) -> Table:
    """Each rank and learning-rate pair tried, with its adapters' share right on the held-out rows."""
    table = Table(title="settings tried on the same rows", title_justify="left")
    for column in ("rank", "learning rate", "right", "epochs chosen"):
        table.add_column(column, justify="right")
    for tried in result.settings:
        cut = " (interrupted)" if tried["interrupted"] else ""
        table.add_row(str(tried["rank"]), f"{tried['learning_rate']:g}", f"{tried['accuracy']:.3f}{cut}",
                      ", ".join(map(str, tried["epochs"])))
    return table


def _values(text: str, kind: type, option: str, *, above: float) -> list[Any]:
    """A comma-separated list of numbers, each above `above`, without repeats: one value or the ones to try."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    try:
        values = [kind(part) for part in parts]
    except ValueError:
        raise DataError(f"{option}: {text!r} is not a {'whole number' if kind is int else 'number'} or a comma-separated "
                        "list of them") from None
    if not values:
        raise DataError(f"{option} names no value")
    if any(not (value > above and math.isfinite(value)) for value in values):
        raise DataError(f"{option}: every value must be above {above:g}, got {text}")
    if len(set(values)) != len(values):
        raise DataError(f"{option}: {text} names a value twice")
    return values


def folds_table(result: Any) -> Table:
    """Each fold's own comparison and the epoch its held-out loss chose, beside the pooled one above."""
    table = Table(title="each fold: its rows without and with its adapter", title_justify="left")
    for column in ("fold", "field", "rows", "without adapter", "with adapter", "McNemar p", "epoch"):
        table.add_column(column, justify="left" if column == "field" else "right")
    for number, (fold, epoch) in enumerate(zip(result.fold_fields, result.fold_epochs), start=1):
        for name, info in fold.items():
            table.add_row(str(number), name, str(info.rows), _figure(info.accuracy_base), _figure(info.accuracy_adapted),
                          "-" if info.p_value is None else f"{info.p_value:.3g}", str(epoch))
    return table


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _fields(rubric: Any, text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise DataError("--fields names no field")
    for name in names:
        if name not in rubric.fields:
            raise DataError(f"--fields: rubric {rubric.name!r} has no field {name!r} (fields: {', '.join(rubric.fields)})")
        if rubric.fields[name].derive is not None:
            raise DataError(f"--fields: field {name!r} is derived in code, so it cannot be tuned on")
    return names
