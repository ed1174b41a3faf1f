"""`decisionflow run`: decide one text, or a JSONL/CSV/Parquet file resumably (here or on Ray), and show per-field scores."""

from __future__ import annotations

import json
import os
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from .common import (
    AdapterOption,
    CalibrationOption,
    DeviceOption,
    DtypeOption,
    ExactOption,
    HeadsOption,
    LoaderOption,
    ModelOption,
    NoAdapterOption,
    NoCalibrationOption,
    NoHeadsOption,
    RubricRef,
    ThreadsOption,
    check_calibration,
    chosen_adapter,
    chosen_calibration,
    chosen_heads,
    guarded,
    load_engine,
    load_target,
    say,
    stderr,
)


class Executor(str, Enum):
    plain = "plain"
    ray = "ray"


def run(
    ctx: typer.Context,
    rubric_ref: RubricRef,
    text: Annotated[str | None, typer.Option(help="The input to decide on.", show_default=False)] = None,
    input_path: Annotated[
        Path | None,
        typer.Option(
            "--input",
            help='A JSONL file (one {"id": ..., "text": ...} per line), a .csv file or a .parquet file.',
            show_default=False,
        ),
    ] = None,
    output_path: Annotated[
        Path | None,
        typer.Option("--output", help="Where --input results go (JSONL, one per line with its id and the rubric's name). Reruns resume.", show_default=False),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table (--text).")] = False,
    model: ModelOption = None,
    exact: ExactOption = False,
    pin: Annotated[
        bool | None,
        typer.Option("--pin/--no-pin", help="Decide the first field alone first (default: the rubric's pin_first).", show_default=False),
    ] = None,
    threads: ThreadsOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    loader: LoaderOption = "auto",
    text_column: Annotated[
        str | None,
        typer.Option(help="The --input column (or JSONL key) holding the input (default: text, input or messages).", show_default=False),
    ] = None,
    id_column: Annotated[
        str | None,
        typer.Option(help="The --input column (or JSONL key) holding each row's id (default: id, else the row number).", show_default=False),
    ] = None,
    executor: Annotated[
        Executor,
        typer.Option("--engine", help="Decide --input here (plain) or on a Ray cluster's actor pool (ray; needs the `ray` extra)."),
    ] = Executor.plain,
    address: Annotated[
        str | None,
        typer.Option(help="--engine ray: the Ray cluster to join (default: RAY_ADDRESS, a cluster started here, else a new local one).", show_default=False),
    ] = None,
    num_actors: Annotated[
        int | None,
        typer.Option(min=1, help="--engine ray: engine actors, each loading the model once (default 1).", show_default=False),
    ] = None,
    calibration_path: CalibrationOption = None,
    no_calibration: NoCalibrationOption = False,
    heads_path: HeadsOption = None,
    no_heads: NoHeadsOption = False,
    adapter_path: AdapterOption = None,
    no_adapter: NoAdapterOption = False,
    timings: Annotated[
        bool, typer.Option("--timings", help="Say where the time went (start-up, model load, compile, prefix, passes); with --json, also in the output.")
    ] = False,
) -> None:
    """Decide one text (--text) or a JSONL/CSV/Parquet file (--input/--output) with a model (default: the bundled SmolLM2)."""
    err = stderr()
    usage = _usage_problem(text, input_path, output_path, executor, text_column=text_column, id_column=id_column,
                           address=address, num_actors=num_actors)
    if usage:
        say(err, f"error: {usage}")
        raise typer.Exit(2)
    if input_path is not None and not input_path.is_file():
        found = "is a folder" if input_path.is_dir() else "not found"
        say(err, f"error: input file {found}: {input_path}")
        raise typer.Exit(1)
    from ..spec.declare import rubric_of

    target = load_target(ctx, rubric_ref, err)
    calibration, calibration_file = guarded(ctx, err, lambda: chosen_calibration(rubric_ref, calibration_path, no_calibration))
    heads, heads_file = guarded(ctx, err, lambda: chosen_heads(rubric_ref, heads_path, no_heads, rubric_of(target)))
    if calibration is not None:
        guarded(ctx, err, lambda: check_calibration(calibration, calibration_file, rubric_of(target), heads))
        # Probabilities and abstentions change under a calibration: say which file did it.
        say(err, f"calibration: {calibration_file} ({', '.join(calibration.fields)})")
    if heads is not None:
        # Answers change under fitted heads: say which file did it, and for which fields.
        say(err, f"heads: {heads_file} (fitted: {', '.join(heads.fitted_fields) or 'none'})")
    adapter, _ = guarded(ctx, err, lambda: chosen_adapter(rubric_ref, adapter_path, no_adapter))
    if adapter is not None:
        # Answers change under a tuned adapter: say which file does it.
        say(err, f"adapter: {adapter.describe()}")
    if input_path is not None:
        from ..batch.input_files import read_rows

        # A bad file (a missing column, a duplicate id) is refused before the model loads.
        guarded(ctx, err, lambda: read_rows(input_path, text_column=text_column, id_column=id_column))
        assert output_path is not None
        _check_output(ctx, err, target, input_path, output_path)
    if executor is Executor.ray:
        from ..scale import RayOptions

        assert input_path is not None and output_path is not None
        ray_options = RayOptions(
            address=address, num_actors=num_actors or 1, model=model, mode="exact" if exact else "branch", pin_first=pin,
            device=None if device == "auto" else device, dtype=None if dtype == "auto" else dtype,
            loader=None if loader == "auto" else loader,
        )
        _run_on_ray(ctx, err, target, calibration, heads, adapter, input_path, output_path, ray_options, text_column,
                    id_column)
        return
    loading = time.perf_counter()
    # One text: the process ends after one request, so packing the weights would not pay for itself.
    engine = guarded(ctx, err, lambda: load_engine(err, model=model, exact=exact, pin=pin, threads=threads, device=device,
                                                   dtype=dtype, loader=loader, pack_weights=text is None, adapter=adapter))
    loaded = time.perf_counter()
    if heads is not None:
        guarded(ctx, err, lambda: engine.check_heads(heads, target))
    if text is not None:
        decision = guarded(ctx, err, lambda: engine.decide(target, text, calibration=calibration, heads=heads))
        breakdown = _breakdown(loading, loaded, decision.stats.timings_ms) if timings else None
        if as_json:
            typer.echo(json.dumps({**decision.to_dict(), **({"timings_ms": breakdown} if breakdown else {})}))
        else:
            Console(width=max(Console().width, 120)).print(decision)
        if breakdown:
            say(err, "timings: " + ", ".join(f"{name} {ms:.0f} ms" for name, ms in breakdown.items()))
        return
    from ..batch.resumable_jsonl import decide_file

    assert output_path is not None
    _decide_file_with_progress(ctx, err, "deciding", lambda progress: decide_file(
        engine, target, input_path, output_path, calibration=calibration, heads=heads,
        text_column=text_column, id_column=id_column, progress=progress,
    ), output_path)


def _check_output(ctx: typer.Context, err: Any, target: Any, input_path: Path, output_path: Path) -> None:
    """Refuse an --output this run cannot resume into before the model loads (exit 2, like a usage
    error): the input file itself, a folder, another format's name, a place that cannot be written, or
    a file holding anything but this rubric's result records. Nothing is written or rewritten."""
    from ..batch.resumable_jsonl import OutputIdentity, OutputRefused, check_output

    try:
        check_output(output_path, source=input_path, identity=OutputIdentity.of(target))
    except (OutputRefused, OSError) as error:  # OSError: e.g. an existing output that cannot be read
        if ctx.obj.debug:
            raise
        say(err, f"error: {error}")
        raise typer.Exit(2) from None


def _decide_file_with_progress(ctx: typer.Context, err: Any, label: str, decide: Any, output_path: Path) -> None:
    """Run a file decision under a progress bar on stderr, then say how it went."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err) as bar:
        task = bar.add_task("rows", total=None)
        summary = guarded(ctx, err, lambda: decide(lambda done, total: bar.update(task, completed=done, total=total)))
    _report(err, summary, output_path)


def _breakdown(loading: float, loaded: float, call: dict[str, float]) -> dict[str, float]:
    """Where a one-text run's wall time went, from the process's start to the decision."""
    startup = (loading - process_started()) * 1000
    done = (time.perf_counter() - process_started()) * 1000
    parts = {"start_up": startup, "model_load": (loaded - loading) * 1000}
    parts.update({key: call[key] for key in ("compile", "prefix_load", "prefix_prefill", "prior_load", "prior_read", "passes") if key in call})
    parts["total"] = done
    return parts


def process_started() -> float:
    """This process's start on the `time.perf_counter` clock (Linux `/proc`; else the CLI's import)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.perf_counter() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return _IMPORTED


_IMPORTED = time.perf_counter()


def _usage_problem(
    text: str | None, input_path: Path | None, output_path: Path | None, executor: Executor, **options: Any
) -> str | None:
    """What is wrong with how the options are combined (exit 2), or None."""
    if (text is None) == (input_path is None):
        return "give exactly one of --text or --input"
    if input_path is not None and output_path is None:
        return "--input needs --output"
    file_only = {"--output": output_path, "--text-column": options["text_column"], "--id-column": options["id_column"]}
    if executor is Executor.ray:
        file_only["--engine ray"] = executor.value
    given = [name for name, value in file_only.items() if value is not None]
    if input_path is None and given:
        return f"{given[0]} applies to --input files only"
    ray_only = [name for name in ("address", "num_actors") if options[name] is not None]
    if ray_only and executor is not Executor.ray:
        return f"--{ray_only[0].replace('_', '-')} applies to --engine ray only"
    return None


def _run_on_ray(
    ctx: typer.Context, err: Any, target: Any, calibration: Any, heads: Any, adapter: Any, input_path: Path,
    output_path: Path, options: Any, text_column: str | None, id_column: str | None,
) -> None:
    """The same resumable file run, decided by an actor pool on a Ray cluster (the model loads in each actor, the
    adapter, if any, merged into it there)."""
    from ..scale import decide_file_on_ray

    _decide_file_with_progress(ctx, err, "deciding on ray", lambda progress: decide_file_on_ray(
        target, input_path, output_path, options, calibration=calibration, heads=heads, adapter=adapter,
        text_column=text_column, id_column=id_column, progress=progress,
    ), output_path)


def _report(err: Any, summary: Any, output_path: Path) -> None:
    repaired = f"; {summary.repaired} stale output lines dropped" if summary.repaired else ""
    say(err, f"{summary.decided} decided, {summary.skipped} already done, {summary.failed} failed "
             f"of {summary.total} rows -> {output_path}{repaired}")
    if summary.failed:
        raise typer.Exit(1)
