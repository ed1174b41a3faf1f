"""`decisionflow playground RUBRIC`: serve the shipped workflows and RUBRIC on a free loopback port, print the
playground's address (the page at `GET /`, see `serve.page`), and open it in a browser where there is one.

`--adapter PATH` / `--no-adapter` are `serve`'s and `run`'s: by default the LoRA adapter saved beside RUBRIC (a YAML
file) is merged into the model; the engine is one, so the shipped workflows served beside it read through it too."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from ..serve.settings import Access, Limits, ServeSettings
from .common import (
    AdapterOption,
    DeviceOption,
    DtypeOption,
    ExactOption,
    LoaderOption,
    ModelOption,
    NoAdapterOption,
    NoHeadsOption,
    RubricRef,
    ThreadsOption,
    chosen_adapter,
    chosen_calibration,
    chosen_heads,
    guarded,
    load_engine,
    say,
    stderr,
)
from .serve import API_KEYS_VARIABLE, _api_keys, _check_installed

PLAYGROUND_LIMITS = Limits(max_question_set_prefix_tokens=4096, new_question_set_burst=40)
"""One person on the loopback edits rubrics as big as the shipped workflows (support_triage's prompt is about 2,400
tokens) and checks a field in several variants at once: Compare, the coherence checks and eval send them inline."""


def playground_command(
    ctx: typer.Context,
    rubric: RubricRef,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Loopback port to listen on (0: a free one).")] = 0,
    open_browser: Annotated[bool, typer.Option(
        "--open/--no-open", help="Open the page in a browser when one is available (never an error when none is).")] = True,
    no_heads: NoHeadsOption = False,
    adapter_path: AdapterOption = None,
    no_adapter: NoAdapterOption = False,
    model: ModelOption = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    loader: LoaderOption = "auto",
    threads: ThreadsOption = None,
    exact: ExactOption = False,
    api_key: Annotated[
        list[str] | None,
        typer.Option("--api-key", help=f"Ask for `Authorization: Bearer KEY` on the API routes (the page types it); "
                     f"repeat for several. Keys in ${API_KEYS_VARIABLE} are added.", show_default=False),
    ] = None,
) -> None:
    """Open the playground: a page to run RUBRIC (or any served or pasted YAML rubric) on inputs and see every
    field's answer and probabilities. Serves on 127.0.0.1 only; Ctrl-C stops it (needs the `serve` extra)."""
    err = stderr()
    keys = _api_keys(api_key or [], os.environ.get(API_KEYS_VARIABLE, ""))
    if isinstance(keys, str):
        say(err, f"error: {keys}")
        raise typer.Exit(2)
    guarded(ctx, err, _check_installed)
    from ..serve import RubricRegistry, create_app
    from ..serve.server import bind, serve

    name, entries = guarded(ctx, err, lambda: _served(rubric, heads=not no_heads))
    adapter, _ = guarded(ctx, err, lambda: chosen_adapter(rubric, adapter_path, no_adapter))
    engine = guarded(ctx, err, lambda: load_engine(err, model=model, exact=exact, threads=threads, device=device,
                                                   dtype=dtype, loader=loader, adapter=adapter))
    if adapter is not None:
        # Answers change under a tuned adapter: say which file does it (one engine, so every rubric served reads through it).
        say(err, f"adapter: {adapter.describe()} (merged for every rubric served)")
    app = guarded(ctx, err, lambda: create_app(engine, RubricRegistry(entries),
                                               ServeSettings(access=Access(api_keys=keys), limits=PLAYGROUND_LIMITS)))
    sock = guarded(ctx, err, lambda: bind("127.0.0.1", port))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/?rubric={quote(name)}"

    def announce() -> None:
        typer.echo(url)
        say(err, f"decisionflow playground at {url} ({engine.loaded.name}; {name} with {len(entries) - 1} "
                 "shipped workflows; Ctrl-C stops it)")
        if open_browser:
            threading.Thread(target=open_in_browser, args=(url,), daemon=True, name="decisionflow-browser").start()

    serve(app, sock, log_level="warning", on_started=announce)


def _served(ref: str, *, heads: bool) -> tuple[str, dict[str, Any]]:
    """RUBRIC's name (its file stem, or its rubric's name for a class) and the rubrics served: RUBRIC with the
    calibration and heads saved beside it, and every shipped workflow of another name."""
    from ..serve.registry import Registered, RubricRegistry
    from ..spec.declare import rubric_of
    from ..spec.references import resolve_target, rubric_file

    target = resolve_target(ref)
    rubric = rubric_of(target)
    path = rubric_file(ref)
    calibration, _ = chosen_calibration(ref, None)
    if calibration is not None:
        calibration.check(rubric)
    fitted, _ = chosen_heads(ref, None, not heads, rubric)
    name = path.stem if path is not None else rubric.name
    shipped = RubricRegistry.from_folder(heads=heads).entries
    entries = {key: entry for key, entry in shipped.items() if key != name}
    entries[name] = Registered(name, rubric, path if path is not None else Path(ref), calibration, fitted)
    return name, entries


def browser_available() -> bool:
    """Whether a graphical browser can be opened here: macOS and Windows, or a display (X11, Wayland), or
    `$BROWSER` set. A terminal without one never gets a text browser started in it."""
    if sys.platform in ("darwin", "win32") or os.environ.get("BROWSER"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def open_in_browser(url: str) -> bool:
    """Open `url` in a browser when one is available; False (never an error) when none is or it fails."""
    if not browser_available():
        return False
    import webbrowser

    try:
        return bool(webbrowser.open(url, new=2))
    except Exception:  # noqa: BLE001 - a browser that cannot start leaves the printed address
        return False
