"""The `decisionflow` command line: one module per command group, sharing only `cli.common`.

Rich is imported here and in the result's renderer only; the core modules never print. Commands that
need no model (`validate`, `plan`) never import torch.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from typing import Annotated

import typer

from . import bench, fit, models, playground, quality, rubrics, run, serve, tune
from .common import Settings

app = typer.Typer(
    name="decisionflow",
    help="Typed, closed-set decisions read from a language model's next-token scores.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        typer.echo(f"decisionflow {version('decisionflow')}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show full tracebacks instead of one line per problem.")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_print_version, help="Print decisionflow's version and exit.")
    ] = False,
) -> None:
    """Declare, check and plan closed-set decisions."""
    ctx.obj = Settings(debug=debug)


app.command()(rubrics.validate)
app.command()(rubrics.plan)
app.command()(run.run)
app.command("eval")(quality.eval_command)
app.command("calibrate")(quality.calibrate_command)
app.command("fit")(fit.fit_command)
app.command("tune")(tune.tune_command)
app.command("bench")(bench.bench_command)
app.command("serve")(serve.serve_command)
app.command("playground")(playground.playground_command)
app.command("check-model")(models.check_model_command)



def entry() -> None:
    """The `decisionflow` script: run the command, then leave without tearing the interpreter down.

    Finalising the modules of torch and transformers one by one takes about half a second after the
    answer is printed, which a one-text `run` would otherwise pay on every call. Everything a command
    writes is closed by the command itself; exit handlers still run and the streams are flushed.

    The cyclic garbage collector runs its youngest generation every 50,000 net allocations instead of
    700: importing torch and transformers and decoding a vocabulary allocate millions of long-lived
    objects, and the default threshold spent about 0.35 s of a cold `run` rescanning them (measured
    in docs/benchmarks.md). Garbage is still collected, in fewer, larger sweeps.
    """
    gc.set_threshold(50_000, 20, 10)
    try:
        app(prog_name="decisionflow")
        code: int = 0
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            code = done.code or 0
        else:
            print(done.code, file=sys.stderr)
            code = 1
    atexit._run_exitfuncs()  # the handlers a normal exit runs (log flushes, temporary folders)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


__all__ = ["app", "entry"]
