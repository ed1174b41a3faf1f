"""`decisionflow bench`: decisionflow against the usual baselines, side by side in one process."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Sequence

import typer

from ..bench.presets import default_data_dir
from ..bench.runner import METHODS
from ..bench.workloads import build_workloads
from .common import DeviceOption, DtypeOption, guarded, refuse_output, say, stderr

if TYPE_CHECKING:
    from ..runtime.engine import Engine


def bench_command(
    ctx: typer.Context,
    data: Annotated[Path | None, typer.Option(help="A folder holding pcd_presets/ (default: $DECISIONFLOW_DATA, else the presets shipped with decisionflow).", show_default=False)] = None,
    out: Annotated[Path | None, typer.Option(help="Write bench.json, bench.md and PNG plots to this folder.", show_default=False)] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Two small workloads, one repeat of the slow baselines (a few minutes on 2 cores).")] = False,
    repeats: Annotated[int | None, typer.Option(min=1, help="Timed runs per method and workload (default 5, quick 3).", show_default=False)] = None,
    slow_repeats: Annotated[int | None, typer.Option(min=1, help="Timed runs of the generation and per-field baselines (default 2, quick 1).", show_default=False)] = None,
    methods: Annotated[str | None, typer.Option(help=f"Comma-separated subset of: {', '.join(METHODS)}.", show_default=False)] = None,
    workloads: Annotated[str | None, typer.Option(help="Comma-separated workload names to keep.", show_default=False)] = None,
    model: Annotated[str | None, typer.Option(help="A local model folder, a .gguf file or a hub id (default: the bundled model).", show_default=False)] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads (default: torch's own choice; use 1 on a machine shared with other CPU-heavy jobs).", show_default=False)] = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
) -> None:
    """Compare decisionflow with JSON generation, grammar-constrained generation and row-scoring baselines."""
    err = stderr()
    refuse_output(err, out, folder=True, option="--out")
    data_dir = data if data is not None else default_data_dir()
    if not (data_dir / "pcd_presets").is_dir():
        say(err, f"error: no pcd_presets folder in {data_dir}: pass --data DIR or set DECISIONFLOW_DATA")
        raise typer.Exit(2)
    repeats = repeats or (3 if quick else 5)
    slow_repeats = min(slow_repeats or (1 if quick else 2), repeats)
    # An empty list (`--methods ""`) names nothing: refused, never read as "all" (the full run takes an hour).
    chosen = _listed(methods, "--methods", "method", METHODS) if methods is not None else list(METHODS)
    selected = build_workloads(data_dir, quick=quick)
    if workloads is not None:
        known = [w.name for w in selected]
        keep = _listed(workloads, "--workloads", "workload", known, " with --quick" if quick else "")
        selected = [w for w in selected if w.name in keep]

    import warnings

    from transformers.utils import logging as transformers_logging

    # pcd passes `past_key_values=`, which transformers 5 still accepts with a FutureWarning per call.
    warnings.filterwarnings("ignore", category=FutureWarning)

    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    import torch

    from ..bench.report import markdown_table, print_table, write_plots
    from ..bench.runner import conditions, run_bench
    from ..runtime.engine import Engine

    with err.status("loading the model"):
        engine = guarded(ctx, err, lambda: Engine.load(model, device=device, dtype=dtype, threads=threads))

    def baseline_engine() -> Engine:
        # The generation and per-field baselines call the transformers model itself.
        with err.status("loading the transformers model for the baselines"):
            return guarded(ctx, err, lambda: Engine.load(model, device=device, dtype=dtype, threads=threads,
                                                         loader="transformers"))

    log = lambda message: say(err, message)  # noqa: E731
    settings = conditions(engine, threads=torch.get_num_threads(), dtype=str(engine.backend.dtype).removeprefix("torch."),
                          repeats=repeats, slow_repeats=slow_repeats)

    def save(rows: list[dict[str, Any]], *, complete: bool = False) -> None:
        # Written after every workload, so a long run interrupted midway still leaves its results.
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            report = {"conditions": {**settings, "complete": complete}, "results": rows}
            (out / "bench.json").write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
            (out / "bench.md").write_text(markdown_table(rows), encoding="utf-8")

    began = time.perf_counter()
    with contextlib.ExitStack() as running:
        rows = run_bench(engine, selected, chosen, repeats=repeats, slow_repeats=slow_repeats, log=log, on_workload=save,
                         baseline_engine=baseline_engine, openai_server=_in_process_server(engine, running))
    log(f"bench finished in {time.perf_counter() - began:.0f} s")
    print_table(rows)
    if out is not None:
        save(rows, complete=True)
        plots = write_plots(rows, out)
        log(f"wrote {out / 'bench.json'}, bench.md and {', '.join(p.name for p in plots)}")


def _in_process_server(engine: Engine, running: contextlib.ExitStack) -> Any:
    """What starts `decisionflow serve`'s app on a loopback port of this process, with the bench's own engine,
    for the `openai_route` method (None without the `serve` extra: the method is then reported unavailable)."""
    if importlib.util.find_spec("fastapi") is None or importlib.util.find_spec("uvicorn") is None:
        return None

    def start() -> tuple[str, str]:
        from ..serve import create_app
        from ..serve.server import serving_in_thread

        app = create_app(engine)
        port = running.enter_context(serving_in_thread(app))
        return f"http://127.0.0.1:{port}/v1", app.state.service.model_name

    return start


def _listed(given: str, option: str, noun: str, known: Sequence[str], known_when: str = "") -> list[str]:
    """The comma-separated names of `given`, each one of `known` (blanks around a comma ignored)."""
    names = [name.strip() for name in given.split(",") if name.strip()]
    if not names:
        raise typer.BadParameter(f"names no {noun}: give one or more of {', '.join(known)}", param_hint=option)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise typer.BadParameter(f"unknown {noun} {unknown[0]!r} (known{known_when}: {', '.join(known)})", param_hint=option)
    return names
