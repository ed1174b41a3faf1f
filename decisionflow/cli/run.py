"""`decisionflow run`: decide one text, or a JSONL file resumably, and show per-field scores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from .common import (
    ExactOption,
    ModelOption,
    RubricRef,
    ThreadsOption,
    calibration_beside,
    guarded,
    load_engine,
    load_target,
    say,
    stderr,
)


def run(
    ctx: typer.Context,
    rubric_ref: RubricRef,
    text: Annotated[str | None, typer.Option(help="The input to decide on.", show_default=False)] = None,
    input_path: Annotated[
        Path | None,
        typer.Option("--input", help='A JSONL file, one {"id": ..., "text": ...} per line.', show_default=False),
    ] = None,
    output_path: Annotated[
        Path | None,
        typer.Option("--output", help="Where --input results go (JSONL, one per line with its id). Reruns resume.", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table (--text).")] = False,
    model: ModelOption = None,
    exact: ExactOption = False,
    pin: Annotated[
        bool | None,
        typer.Option("--pin/--no-pin", help="Decide the first field alone first (default: the rubric's pin_first).", show_default=False),
    ] = None,
    threads: ThreadsOption = None,
) -> None:
    """Decide one text (--text) or a JSONL file (--input/--output) with a model (default: the bundled SmolLM2)."""
    err = stderr()
    if (text is None) == (input_path is None):
        say(err, "run: give exactly one of --text or --input")
        raise typer.Exit(2)
    if input_path is not None and output_path is None:
        say(err, "run: --input needs --output")
        raise typer.Exit(2)
    if input_path is not None and not input_path.is_file():
        say(err, f"run: input file not found: {input_path}")
        raise typer.Exit(1)
    target = load_target(ctx, rubric_ref, err)
    calibration = guarded(ctx, err, lambda: calibration_beside(rubric_ref))
    if calibration is not None:
        from ..spec.declare import rubric_of

        guarded(ctx, err, lambda: calibration.check(rubric_of(target)))
    if input_path is not None:
        from ..runtime.resumable_jsonl import read_rows

        guarded(ctx, err, lambda: read_rows(input_path))  # a bad file is refused before the model loads
    engine = guarded(ctx, err, lambda: load_engine(err, model=model, exact=exact, pin=pin, threads=threads))
    if text is not None:
        decision = guarded(ctx, err, lambda: engine.decide(target, text, calibration=calibration))
        if as_json:
            typer.echo(json.dumps(decision.to_dict()))
        else:
            Console(width=max(Console().width, 120)).print(decision)
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from ..runtime.resumable_jsonl import decide_file

    assert output_path is not None
    with Progress(TextColumn("deciding"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err) as bar:
        task = bar.add_task("rows", total=None)
        summary = guarded(ctx, err, lambda: decide_file(
            engine, target, input_path, output_path, calibration=calibration,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        ))
    repaired = f"; {summary.repaired} stale output lines dropped" if summary.repaired else ""
    say(err, f"{summary.decided} decided, {summary.skipped} already done, {summary.failed} failed "
             f"of {summary.total} rows -> {output_path}{repaired}")
    if summary.failed:
        raise typer.Exit(1)
