"""`decisionflow check-model`: whether a model is served exactly, in one command."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from .common import DeviceOption, DtypeOption, LoaderOption, ThreadsOption, guarded, load_engine, say, stderr


def check_model_command(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Argument(
        help="A local model folder, a .gguf file or a hub id (default: the bundled SmolLM2-135M-Instruct).",
        show_default=False)] = None,
    device: DeviceOption = "auto",
    dtype: DtypeOption = "auto",
    loader: LoaderOption = "auto",
    threads: ThreadsOption = None,
    tolerance: Annotated[float | None, typer.Option(
        min=0, help="Largest |difference of log-probabilities| accepted (default: 1e-3 in float32, 0.5 in "
                    "bfloat16, 0.15 in float16).", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
) -> None:
    """Decide a built-in rubric (a choice with multi-token labels, a boolean, a score, a dependent field)
    through the packed pass the engine takes for MODEL, and again with one plain forward of the model per
    branch (its own causal mask, no packing, no cache); per field, the largest difference of
    log-probabilities and whether the answers agree. Exit 1 past the tolerance."""
    from ..runtime.model.model_check import check_model
    from ..runtime.passes.decoder import DecoderModel

    err = stderr()
    engine = guarded(ctx, err, lambda: load_engine(err, model=model, threads=threads, device=device, dtype=dtype, loader=loader))
    reference = None
    if isinstance(engine.loaded.model, DecoderModel):
        # The engine's own decoder has no forward to compare with: the reference is transformers' model.
        from ..runtime.model.loading import load_model

        with err.status("loading the transformers model for the reference"):
            reference = guarded(ctx, err, lambda: load_model(model, device=device, dtype=dtype, loader="transformers"))
    with err.status("deciding through the packed pass and through the plain forward"):
        report = guarded(ctx, err, lambda: check_model(engine, reference, tolerance=tolerance))
    if as_json:
        typer.echo(json.dumps(report.to_dict()))
    else:
        _print(Console(), report)
    if not report.exact:
        say(err, f"error: {report.model} is not served exactly on the {report.path} path: a difference of "
                 f"{max(f.max_difference for f in report.fields):.3g} in log-probability exceeds {report.tolerance:g}")
        raise typer.Exit(1)


def _print(out: Console, report) -> None:
    table = Table(title=f"{report.model_type}, {report.dtype}: the {report.path} path against the plain forward",
                  box=box.SIMPLE_HEAD)
    for column, justify in (("field", "left"), ("kind", "left"), ("max |Δ log p|", "right"), ("answers agree", "left")):
        table.add_column(column, justify=justify)
    for field in report.fields:
        within = field.max_difference <= report.tolerance
        table.add_row(field.name, field.kind, f"[{'green' if within else 'red'}]{field.max_difference:.2e}[/]",
                      "yes" if field.agree else "no")
    out.print(table)
    verdict = "exact" if report.exact else "NOT exact"
    out.print(f"{report.model}: {verdict} within {report.tolerance:g} on {report.texts} texts; packed pass "
              f"{report.packed_ms:.0f} ms, plain forward per branch {report.reference_ms:.0f} ms")
    for note in report.notes:
        out.print(f"note: {note}")
