"""The `decisionflow` command line: one module per command group, sharing only `cli.common`.

Rich is imported here and in the result's renderer only; the core modules never print. Commands that
need no model (`validate`, `plan`) never import torch.
"""

from __future__ import annotations

from typing import Annotated

import typer

from . import bench, quality, rubrics, run, serve
from .common import Settings

app = typer.Typer(
    name="decisionflow",
    help="Typed, closed-set decisions read from a language model's next-token scores.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@app.callback()
def main(
    ctx: typer.Context,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show full tracebacks instead of one line per problem.")
    ] = False,
) -> None:
    """Declare, check and plan closed-set decisions."""
    ctx.obj = Settings(debug=debug)


app.command()(rubrics.validate)
app.command()(rubrics.plan)
app.command()(run.run)
app.command("eval")(quality.eval_command)
app.command("calibrate")(quality.calibrate_command)
app.command("bench")(bench.bench_command)
app.command("serve")(serve.serve_command)

__all__ = ["app"]
