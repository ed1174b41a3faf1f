"""`decisionflow serve`: load the model once and answer decisions over HTTP (FastAPI on uvicorn)."""

from __future__ import annotations

import importlib.util
import ipaddress
import os
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import DataError, Unavailable
from ..serve.settings import Access, Batching, Limits, ServeSettings
from .common import (
    AdapterOption,
    DeviceOption,
    DtypeOption,
    ExactOption,
    LoaderOption,
    ModelOption,
    NoAdapterOption,
    NoHeadsOption,
    ThreadsOption,
    count,
    guarded,
    load_engine,
    say,
    stderr,
)

SERVE_PACKAGES = ("fastapi", "uvicorn", "prometheus_client")
API_KEYS_VARIABLE = "DECISIONFLOW_API_KEYS"
"""Comma-separated API keys, added to those of `--api-key` (a key on the command line shows in `ps`)."""


# The command's defaults are the settings' own: one place says what a server accepts.
LIMITS, BATCHING, ACCESS, SERVE = Limits(), Batching(), Access(), ServeSettings()


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
                     "calibration, heads or adapter file beside a rubric is applied to its route.", show_default=False),
    ] = None,
    no_heads: NoHeadsOption = False,
    adapter_path: AdapterOption = None,
    no_adapter: NoAdapterOption = False,
    model: ModelOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    loader: LoaderOption = "auto",
    threads: ThreadsOption = None,
    exact: ExactOption = False,
    batching: Annotated[bool, typer.Option("--batching/--no-batching", help="Decide concurrent requests of one rubric together.")] = BATCHING.enabled,
    batch_wait_ms: Annotated[float, typer.Option(min=0, help="How long an idle model waits for more requests to batch.")] = BATCHING.max_wait_ms,
    batch_tokens: Annotated[int, typer.Option(min=1, help="New tokens per model call (inputs and rows).")] = BATCHING.token_budget,
    max_queue: Annotated[int, typer.Option(min=1, help="Inputs waiting for the model before requests get 503 (at least --max-texts).")] = LIMITS.max_queue,
    max_body_bytes: Annotated[
        int | None,
        typer.Option(min=1, help="Largest request body accepted (default: 16 bytes per position of the model's "
                     "context, at least 64 KiB).", show_default=False),
    ] = None,
    max_questions: Annotated[int, typer.Option(min=1, help="Questions per /v1/systemone request.")] = LIMITS.max_questions,
    max_options: Annotated[int, typer.Option(min=2, help="Labels per choice question.")] = LIMITS.max_options,
    max_texts: Annotated[int, typer.Option(min=1, help="Inputs per rubric request with `texts`.")] = LIMITS.max_texts,
    max_schema_fields: Annotated[int, typer.Option(
        min=1, help="Fields a /v1/chat/completions schema may ask (a multi-label array asks one per option).")] = LIMITS.max_schema_fields,
    max_schema_options: Annotated[int, typer.Option(
        min=2, help="Answers one property of a /v1/chat/completions schema may offer.")] = LIMITS.max_schema_options,
    new_question_sets_per_minute: Annotated[float, typer.Option(
        min=0, help="New question sets (/v1/systemone and /v1/decisions questions, /v1/chat/completions schemas) each client (API key; all clients without keys) may have "
                    "prepared per minute; beyond it 429. Sets the engine still holds prepared are never limited.")] = LIMITS.new_question_sets_per_minute,
    new_question_set_burst: Annotated[int, typer.Option(
        min=1, help="New question sets a client may have prepared at once.")] = LIMITS.new_question_set_burst,
    max_question_set_prefix_tokens: Annotated[int, typer.Option(
        min=1, help="Longest prompt (tokens before the input) of a new question set.")] = LIMITS.max_question_set_prefix_tokens,
    max_question_set_head_tokens: Annotated[int | None, typer.Option(
        min=1, hidden=True, help="Deprecated: --max-question-set-prefix-tokens.")] = None,
    max_question_set_row_tokens: Annotated[int, typer.Option(
        min=1, help="Most tokens of rows (each question with its answers, read after the input) of a new question "
                    "set.")] = LIMITS.max_question_set_row_tokens,
    decisions_refusal_mass: Annotated[float, typer.Option(
        min=0, max=1, help="/v1/decisions: refuse a question whose candidate mass (the model's probability of "
                           "beginning an allowed answer) is below this (0: answer every question).")] = SERVE.decisions_refusal_mass,
    body_timeout: Annotated[float, typer.Option(
        min=0.001, help="Seconds a request body may take to arrive (408 after).")] = LIMITS.body_timeout_s,
    request_timeout: Annotated[float, typer.Option(
        min=0, help="Seconds a request may take from its arrival to its answer: 504 after, and the work done for it "
                    "stops (0: no limit).")] = LIMITS.request_timeout_s or 0,
    limit_concurrency: Annotated[int, typer.Option(
        min=1, help="Connections and requests held at once (a plain 503 beyond).")] = SERVE.limit_concurrency,
    work_threads: Annotated[int, typer.Option(
        min=1, help="Threads parsing bodies and tokenising inputs off the event loop.")] = SERVE.work_threads,
    api_key: Annotated[
        list[str] | None,
        typer.Option("--api-key", help=f"Accept `Authorization: Bearer KEY`; repeat for several. Keys in "
                     f"${API_KEYS_VARIABLE} (comma-separated) are added. Without any, every route is open.",
                     show_default=False),
    ] = None,
    protect_health: Annotated[bool, typer.Option(
        "--protect-health", help="Ask for the key on /healthz and /readyz too.")] = ACCESS.protect_health,
    protect_metrics: Annotated[bool, typer.Option("--protect-metrics", help="Ask for the key on /metrics too.")] = ACCESS.protect_metrics,
    docs: Annotated[bool, typer.Option("--docs", help="Serve /docs, /redoc and /openapi.json.")] = ACCESS.docs,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option("--cors-origin", help="An origin browsers may call the API from (`*`: any); repeat for several. "
                     "Default: no CORS.", show_default=False),
    ] = None,
    served_model_name: Annotated[
        str | None,
        typer.Option(help="The model's name in answers and /v1/models (default: the model's, a local path cut to "
                     "its last part).", show_default=False),
    ] = None,
    graceful_shutdown: Annotated[float, typer.Option(
        min=0, help="Seconds accepted requests get to finish on SIGTERM.")] = SERVE.graceful_shutdown_s,
    log_level: Annotated[LogLevel, typer.Option(help="Log level of uvicorn and of the request log.")] = LogLevel.info,
) -> None:
    """Serve /v1/chat/completions (OpenAI structured outputs), /v1/decisions (OpenAI's Decisions API), /v1/systemone,
    /v1/rubrics/{name}/decide, /v1/rubrics, /v1/models, /healthz, /readyz and /metrics (needs the `serve` extra)."""
    err = stderr()
    if max_queue < max_texts:
        say(err, f"error: --max-queue {max_queue} is below --max-texts {max_texts}: a `texts` request of more inputs "
                 "than the queue holds could never be answered; raise --max-queue or lower --max-texts to match")
        raise typer.Exit(2)
    keys = _api_keys(api_key or [], os.environ.get(API_KEYS_VARIABLE, ""))
    if isinstance(keys, str):
        say(err, f"error: {keys}")
        raise typer.Exit(2)
    if served_model_name is not None and not served_model_name.strip():
        say(err, "error: --served-model-name is blank")
        raise typer.Exit(2)
    guarded(ctx, err, _check_installed)
    from ..serve import RubricRegistry, create_app
    from ..serve.server import bind, serve

    adapter = guarded(ctx, err, lambda: served_adapter(adapter_path, no_adapter))
    # Without --adapter or --no-adapter, each rubric's route reads the model with the adapter beside it, if any.
    registry = guarded(ctx, err, lambda: RubricRegistry.from_folder(
        rubrics, heads=not no_heads, adapters=adapter_path is None and not no_adapter))
    settings = ServeSettings(
        limits=Limits(max_body_bytes=max_body_bytes, max_questions=max_questions, max_options=max_options,
                      max_texts=max_texts, max_queue=max_queue, body_timeout_s=body_timeout,
                      request_timeout_s=request_timeout or None, new_question_sets_per_minute=new_question_sets_per_minute,
                      new_question_set_burst=new_question_set_burst,
                      max_question_set_prefix_tokens=max_question_set_head_tokens or max_question_set_prefix_tokens,
                      max_question_set_row_tokens=max_question_set_row_tokens, max_schema_fields=max_schema_fields,
                      max_schema_options=max_schema_options),
        batching=Batching(enabled=batching, max_wait_ms=batch_wait_ms, token_budget=batch_tokens),
        access=Access(api_keys=keys, protect_health=protect_health, protect_metrics=protect_metrics, docs=docs,
                      cors_origins=tuple(cors_origin or ())),
        served_model_name=served_model_name.strip() if served_model_name else None,
        graceful_shutdown_s=graceful_shutdown,
        limit_concurrency=limit_concurrency,
        work_threads=work_threads,
        decisions_refusal_mass=decisions_refusal_mass,
    )
    engine = guarded(ctx, err, lambda: load_engine(err, model=model, exact=exact, threads=threads, device=device, dtype=dtype,
                                                   loader=loader, adapter=adapter))
    if adapter is not None:
        say(err, f"adapter: {adapter.describe()} (merged for every route)")
    # Checks the heads against the model, and gives the engine --batch-tokens (EngineOptions.max_batch_tokens).
    app = guarded(ctx, err, lambda: create_app(engine, registry, settings))
    for entry in registry.entries.values():
        if entry.adapter is not None:
            say(err, f"adapter: {entry.adapter.describe()} ({entry.name}: its route reads the model with it merged)")
        if entry.heads is not None:
            # Answers change under fitted heads: say which file does it, and for which fields (as `run` does).
            say(err, f"heads: {entry.heads.path} ({entry.name}; fitted: {', '.join(entry.fitted) or 'none'})")
    if not keys and not _loopback(host):
        say(err, f"warning: serving on {host} without --api-key: whoever reaches the port can use the model "
                 "(see docs/serving.md, Access)")
    sock = guarded(ctx, err, lambda: bind(host, port))
    bound_host, bound_port = sock.getsockname()[:2]
    shown_host = f"[{bound_host}]" if ":" in bound_host else bound_host

    def announce() -> None:
        say(err, f"decisionflow serving http://{shown_host}:{bound_port} ({engine.loaded.name}; "
                 f"{count(len(registry.entries), 'rubric')}: {', '.join(registry.entries) or 'none'})")

    serve(app, sock, log_level=log_level.value, on_started=announce)


def served_adapter(path: Path | None, off: bool) -> Any:
    """The adapter the server's engine merges for every route: `path` when given, else none (with `off`, or where each
    rubric's own adapter beside it is read by its route: `RubricRegistry.from_folder(adapters=True)`)."""
    from ..runtime.adapter import Adapter

    if off and path is not None:
        raise DataError("give --adapter or --no-adapter, not both")
    return Adapter.load(path) if path is not None else None


def _api_keys(given: list[str], variable: str) -> tuple[str, ...] | str:
    """The keys of `--api-key` and of the variable, or what is wrong with one (never quoting a key)."""
    keys = [*given, *(part.strip() for part in variable.split(",") if part.strip())]
    for index, key in enumerate(keys, 1):
        where = f"API key {index} of {len(keys)}"
        if not key:
            return f"{where} is empty"
        if not key.isascii() or not key.isprintable() or any(character.isspace() for character in key):
            return f"{where} holds a space, a control or a non-ASCII character (a key must be one printable ASCII token)"
    return tuple(dict.fromkeys(keys))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_installed() -> None:
    missing = [name for name in SERVE_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise Unavailable(f"serving needs {', '.join(missing)}: pip install 'decisionflow[serve]'")

