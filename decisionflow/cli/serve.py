"""`decisionflow serve`: load the model once and answer decisions over HTTP (FastAPI on uvicorn)."""

from __future__ import annotations

import importlib.util
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ..errors import Unavailable
from .common import (
    DeviceOption,
    DtypeOption,
    ExactOption,
    LoaderOption,
    ModelOption,
    NoHeadsOption,
    ThreadsOption,
    count,
    guarded,
    load_engine,
    say,
    stderr,
)

SERVE_PACKAGES = ("fastapi", "uvicorn", "prometheus_client")


class LogLevel(str, Enum):
    """uvicorn's log levels; checked with the other options, before the model loads."""

    critical = "critical"
    error = "error"
    warning = "warning"
    info = "info"
    debug = "debug"
    trace = "trace"


def serve_command(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0 for every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0: a free one, printed when ready).")] = 8000,
    rubrics: Annotated[
        Path | None,
        typer.Option("--rubrics", help="Folder of YAML rubrics served by file stem (default: the shipped workflows); a "
                     "calibration or heads file beside a rubric is applied to its route.", show_default=False),
    ] = None,
    no_heads: NoHeadsOption = False,
    model: ModelOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    loader: LoaderOption = "auto",
    threads: ThreadsOption = None,
    exact: ExactOption = False,
    batching: Annotated[bool, typer.Option("--batching/--no-batching", help="Decide concurrent requests of one rubric together.")] = True,
    batch_wait_ms: Annotated[float, typer.Option(min=0, help="How long an idle model waits for more requests to batch.")] = 5.0,
    batch_tokens: Annotated[int, typer.Option(min=1, help="New tokens per model call (inputs and rows).")] = 4096,
    max_queue: Annotated[int, typer.Option(min=1, help="Inputs waiting for the model before requests get 503 (at least --max-texts).")] = 256,
    max_body_bytes: Annotated[int, typer.Option(min=1, help="Largest request body accepted.")] = 1 << 20,
    max_questions: Annotated[int, typer.Option(min=1, help="Questions per /v1/systemone request.")] = 32,
    max_options: Annotated[int, typer.Option(min=2, help="Labels per choice question.")] = 64,
    max_texts: Annotated[int, typer.Option(min=1, help="Inputs per rubric request with `texts`.")] = 64,
    graceful_shutdown: Annotated[float, typer.Option(min=0, help="Seconds accepted requests get to finish on SIGTERM.")] = 30.0,
    log_level: Annotated[LogLevel, typer.Option(help="uvicorn's log level.")] = LogLevel.info,
) -> None:
    """Serve /v1/systemone, /v1/rubrics/{name}/decide, /v1/rubrics, /healthz and /metrics (needs the `serve` extra)."""
    err = stderr()
    if max_queue < max_texts:
        say(err, f"error: --max-queue {max_queue} is below --max-texts {max_texts}: a `texts` request of more inputs "
                 "than the queue holds could never be answered; raise --max-queue or lower --max-texts to match")
        raise typer.Exit(2)
    guarded(ctx, err, _check_installed)
    from ..serve import Batching, Limits, RubricRegistry, ServeSettings, create_app
    from ..serve.server import bind, serve

    registry = guarded(ctx, err, lambda: RubricRegistry.from_folder(rubrics, heads=not no_heads))
    settings = ServeSettings(
        limits=Limits(max_body_bytes=max_body_bytes, max_questions=max_questions, max_options=max_options,
                      max_texts=max_texts, max_queue=max_queue),
        batching=Batching(enabled=batching, max_wait_ms=batch_wait_ms, token_budget=batch_tokens),
        graceful_shutdown_s=graceful_shutdown,
    )
    engine = guarded(ctx, err, lambda: load_engine(err, model=model, exact=exact, threads=threads, device=device, dtype=dtype,
                                                   loader=loader))
    app = guarded(ctx, err, lambda: create_app(engine, registry, settings))  # checks the heads against the model
    for entry in registry.entries.values():
        if entry.heads is not None:
            # Answers change under fitted heads: say which file does it, and for which fields (as `run` does).
            say(err, f"heads: {entry.heads.path} ({entry.name}; fitted: {', '.join(entry.fitted) or 'none'})")
    sock = guarded(ctx, err, lambda: bind(host, port))
    bound_host, bound_port = sock.getsockname()[:2]
    shown_host = f"[{bound_host}]" if ":" in bound_host else bound_host

    def announce() -> None:
        say(err, f"decisionflow serving http://{shown_host}:{bound_port} ({engine.loaded.name}; "
                 f"{count(len(registry.entries), 'rubric')}: {', '.join(registry.entries) or 'none'})")

    serve(app, sock, graceful_shutdown_s=graceful_shutdown, log_level=log_level.value, on_started=announce)


def _check_installed() -> None:
    missing = [name for name in SERVE_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise Unavailable(f"serving needs {', '.join(missing)}: pip install 'decisionflow[serve]'")

