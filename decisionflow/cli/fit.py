"""`decisionflow fit`: fitted decision heads from labelled rows, chosen per field on evidence.

Registered in cli.py. The data, its columns and its labels are checked against the rubric before
the model loads, so a wrong column or a label that is not an answer costs nothing and is named.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..errors import DataError
from ..quality.labelled import fit_columns, load_records, parse_slice, refuse_short_rows
from .common import (
    AdapterOption,
    DataOption,
    DeviceOption,
    DtypeOption,
    LabelColumnsOption,
    LoaderOption,
    ModelOption,
    NoAdapterOption,
    RubricRef,
    SkipUnknownLabelsOption,
    TextColumnOption,
    ThreadsOption,
    chosen_adapter,
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


def fit_command(
    ctx: typer.Context,
    rubric_ref: RubricRef,
    data: DataOption,
    label: LabelColumnsOption = None,
    text_column: TextColumnOption = "text",
    rows: Annotated[
        str | None,
        typer.Option("--rows", metavar="START:STOP", help="Only data rows START..STOP-1 (0-based; negative counts from the end).",
                     show_default=False),
    ] = None,
    layers: Annotated[
        str | None,
        typer.Option("--layers", metavar="-1,-8", help="Hidden layers a head reads, counted from the top (-1: what the LM "
                     "head reads; default -1,-8, or those of them the model has).", show_default=False),
    ] = None,
    mean_layers: Annotated[
        str | None,
        typer.Option("--mean-layers", metavar="-8", help="Hidden layers whose mean over the input's positions a fused "
                     "head's fourth member reads (default -8; 'none': no such member). Read only with --words.",
                     show_default=False),
    ] = None,
    skip_unknown_labels: SkipUnknownLabelsOption = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Where to save the heads (default: NAME.heads.safetensors beside a YAML rubric file; "
                     "required for a shipped workflow's name or module:Class).", show_default=False),
    ] = None,
    words: Annotated[bool, typer.Option(
        "--words/--no-words", help="Also try, for a choice or boolean field, a head on the input's words (n-grams) and "
                                   "its fusion with the hidden-state head and the zero-shot readout.")] = True,
    significance: Annotated[
        float, typer.Option("--significance", min=0.0, max=1.0, metavar="P",
                            help="Keep a head only where it is right on more rows than zero-shot across folds (a score "
                                 "field: nearer the gold level on average) and the paired test's p (McNemar's; "
                                 "a score's errors: Wilcoxon's) is below P (1: any win).")
    ] = 0.05,
    as_json: Annotated[bool, typer.Option("--json", help="Print the fit report as JSON instead of a table.")] = False,
    adapter_path: AdapterOption = None,
    no_adapter: NoAdapterOption = False,
    model: ModelOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    loader: LoaderOption = "auto",
    threads: ThreadsOption = None,
) -> None:
    """Fit a head per labelled field on the model's hidden states, keep it where it beats the zero-shot
    readout in cross-validation (McNemar p, a score's errors Wilcoxon p, below --significance), and save the heads beside the rubric (`run`, `eval` and `serve` apply them).
    A tuned adapter beside the rubric is merged first, so the heads read the adapted states they will be served on."""
    from ..fitting.head_fit import fit_examples
    from ..runtime.heads.fitted import Heads

    err = stderr()
    output = output or saved_beside(err, rubric_ref, "heads", Heads.path_for)
    refuse_output(err, output, folder=False, option="--output")
    if problem := Heads.save_problem(output):
        say(err, f"error: --output {problem}")
        raise typer.Exit(2)
    chosen_layers = guarded(ctx, err, lambda: _layers(layers))
    chosen_mean_layers = guarded(ctx, err, lambda: _layers(mean_layers, option="--mean-layers", none=True))
    target, rubric = load_target_and_rubric(ctx, rubric_ref, err)
    examples, skipped = guarded(ctx, err, lambda: _examples(rubric, data, label or [], text_column, rows, skip_unknown_labels))
    if skipped:
        say(err, f"left out {count(skipped, 'label')} that {'is' if skipped == 1 else 'are'} not an answer of "
                 "its field (--skip-unknown-labels)")
    adapter, _ = guarded(ctx, err, lambda: chosen_adapter(rubric_ref, adapter_path, no_adapter))
    engine = guarded(ctx, err, lambda: load_engine(err, model=model, threads=threads, device=device, dtype=dtype, loader=loader,
                                                   adapter=adapter))
    if adapter is not None:
        # Heads fitted here are keyed by the adapted model: served only with this adapter merged.
        say(err, f"adapter: {adapter.describe()} (the heads read the adapted model)")
    with progress_bars(err) as progress_for:
        progress = progress_for("reading rows")
        result = guarded(ctx, err, lambda: fit_examples(engine, target, examples, skipped=skipped, layers=chosen_layers,
                                                         progress=progress, significance=significance, words=words,
                                                         mean_layers=chosen_mean_layers))
    for line in result.warnings:
        say(err, line)
    guarded(ctx, err, lambda: result.heads.save(output))
    if as_json:
        typer.echo(json.dumps({**result.to_dict(), "saved": str(output)}, indent=2))
        return
    # As wide as `run`'s table even when piped (rich's 80 columns would cut names and intervals).
    out = Console(width=max(Console().width, 120))
    out.print(fit_table(result))
    for name, info in result.fields.items():
        # A field cross-validated and kept zero-shot says why here; one too short to fit was warned about.
        if info.readout != "fitted" and len(info.candidates) > 1 and info.note:
            say(out, f"{name} keeps the zero-shot readout: {info.note}")
    fitted = [name + (f" ({result.fields[name].head})" if result.fields[name].head != "multinomial" else "")
              for name in result.heads.fitted_fields]
    say(out, f"{len(fitted)} of {len(result.fields)} labelled fields answer with a fitted head"
             + (f" ({', '.join(fitted)})" if fitted else "")
             + f"; read {count(result.rows, 'row')} in {result.timings_s['read']:.1f} s"
             + (f" ({count(len(result.failed), 'row')} could not be read)" if result.failed else "")
             + f", fitted in {result.timings_s['fit']:.1f} s")
    say(out, f"saved {output}")


def fit_table(result: Any) -> Table:
    """One row per (field, readout): its cross-validated accuracy with its 95 % interval, and which won."""
    scores = any(figure.mean_absolute_error is not None for info in result.fields.values()
                 for figure in info.candidates.values())
    columns = ["field", "readout", "accuracy", "95 % interval", "p vs zero-shot"]
    columns += ["MAE"] if scores else []  # a score field's mean absolute error, in levels
    table = Table(title="cross-validated accuracy on the fitting rows", title_justify="left")
    for column in (*columns, "rows", "kept"):
        table.add_column(column, justify="left" if column in ("field", "readout", "kept") else "right")
    for name, info in result.fields.items():
        if not info.candidates:
            table.add_row(name, "-", "-", "-", "-", *(["-"] if scores else []), "0", "zero_shot")
        for readout, figure in info.candidates.items():
            error = [] if not scores else ["" if figure.mean_absolute_error is None else f"{figure.mean_absolute_error:.3f}"]
            table.add_row(
                name, readout, f"{figure.accuracy:.3f}", f"{figure.low:.3f}-{figure.high:.3f}",
                "" if figure.p_vs_zero_shot is None else f"{figure.p_vs_zero_shot:.3g}", *error, str(figure.rows),
                "yes" if readout == info.chosen else "",
            )
    return table


def _layers(text: str | None, *, option: str = "--layers", none: bool = False) -> tuple[int, ...] | None:
    """Layers named as `-1,-8` (None: the default); with `none`, the word `none` names no layer."""
    if text is None:
        return None
    if none and text.strip().lower() == "none":
        return ()
    try:
        chosen = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        example = "-8" if none else "-1,-8"
        raise DataError(f"{option} expects whole numbers separated by commas, e.g. {example}"
                        f"{' (or none)' if none else ''}; got {text!r}") from None
    if not chosen:
        raise DataError(f"{option} names no layer" + (" (write none for no input-mean member)" if none else ""))
    return chosen


def _examples(rubric: Any, data: Path, labels: list[str], text_column: str, rows: str | None,
              skip_unknown: bool) -> tuple[list[Any], int]:
    """The labelled rows as (text, {field: label}), checked against the rubric before the model loads."""
    from ..fitting.examples import examples_of

    given: dict[str, str] = {}
    for item in labels:
        name, equals, column = item.partition("=")
        if not equals or not name.strip() or not column.strip():
            raise DataError(f"--label expects FIELD=COLUMN, got {item!r}")
        given[name.strip()] = column.strip()
    header, records = load_records(data)
    if text_column not in header:
        raise DataError(f"{data}: no column {text_column!r} for the input text (columns: {', '.join(header)}); "
                        "name it with --text-column")
    columns = fit_columns(rubric, header, given)
    refuse_short_rows(data, records, [text_column])
    selected = parse_slice(rows)
    numbered = list(enumerate(records))
    if selected is not None:
        numbered = numbered[selected]
    if not numbered:
        raise DataError("no rows selected (check --rows)")
    pairs = [(record.get(text_column), {name: record.get(column) for name, column in columns.items()})
             for _, record in numbered]
    for (number, _), (text, _) in zip(numbered, pairs):
        if not isinstance(text, (str, dict, list)) or (isinstance(text, str) and not text.strip()):
            raise DataError(f"{data}: data row {number}: the {text_column!r} cell is empty")
    try:
        examples, skipped = examples_of(rubric, pairs,
                                        unknown_labels="skip" if skip_unknown else "error")
    except DataError as error:
        # examples_of counts the selected rows; say which data row of the file that is.
        lines = _renumbered(str(error), [n for n, _ in numbered]).split("\n")
        raise DataError("\n".join(f"{data}: {line}" for line in lines)) from None
    # Each example keeps its data row's number, so rows the engine cannot read are named as in the file.
    return [replace(example, index=numbered[example.index][0]) for example in examples], skipped


def _renumbered(message: str, numbers: list[int]) -> str:
    """Each line's `row N` (the Nth selected row) as the file's `data row M`."""
    lines = []
    for line in message.split("\n"):
        head, sep, rest = line.partition(": ")
        if head.startswith("row ") and head[4:].isdigit() and int(head[4:]) < len(numbers):
            line = f"data row {numbers[int(head[4:])]}{sep}{rest}"
        lines.append(line)
    return "\n".join(lines)
