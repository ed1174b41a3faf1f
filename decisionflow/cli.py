"""The `decisionflow` command line. Rich is imported here only; the core modules never print."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .plan import Plan, make_plan
from .problems import RubricError
from .references import resolve_rubric
from .rubric import FieldKind, FieldSpec, Rubric

app = typer.Typer(
    name="decisionflow",
    help="Typed, closed-set decisions read from a language model's next-token scores.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

RubricRef = Annotated[
    str,
    typer.Argument(
        metavar="RUBRIC",
        help="A YAML rubric (.yaml/.yml), module:Class or path/to/file.py:Class.",
        show_default=False,
    ),
]


@dataclass(frozen=True)
class _Settings:
    debug: bool


@app.callback()
def main(
    ctx: typer.Context,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show full tracebacks instead of one line per problem.")
    ] = False,
) -> None:
    """Declare, check and plan closed-set decisions."""
    ctx.obj = _Settings(debug=debug)


@app.command()
def validate(
    ctx: typer.Context,
    rubrics: Annotated[
        list[str],
        typer.Argument(
            metavar="RUBRIC",
            help="YAML rubrics (.yaml/.yml), module:Class or path/to/file.py:Class.",
            show_default=False,
        ),
    ],
) -> None:
    """Check rubrics; print one OK line per valid rubric, or one line per problem on stderr."""
    out, err = Console(), _stderr()
    failed = False
    for ref in rubrics:
        rubric = _load(ctx, ref, err)
        if rubric is None:
            failed = True
            continue
        out.print(
            f"OK {ref}: {rubric.name} ({_count(len(rubric), 'field')}, "
            f"{_count(make_plan(rubric).forward_passes, 'forward pass', 'forward passes')})",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    if failed:
        raise typer.Exit(1)


@app.command()
def plan(
    ctx: typer.Context,
    rubric_ref: RubricRef,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
    pin: Annotated[
        bool | None,
        typer.Option(
            "--pin/--no-pin",
            help="Decide the first field alone before the rest (default: the rubric's pin_first).",
            show_default=False,
        ),
    ] = None,
    max_fields_per_pass: Annotated[
        int | None,
        typer.Option(
            min=1,
            metavar="N",
            help="At most this many fields share one forward pass (default: the rubric's setting).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Show the rounds a rubric is decided in, without loading a model."""
    rubric = _load(ctx, rubric_ref, _stderr())
    if rubric is None:
        raise typer.Exit(1)
    result = make_plan(rubric, pin_first=pin, max_fields_per_pass=max_fields_per_pass)
    if as_json:
        typer.echo(json.dumps(plan_json(result)))
    else:
        Console().print(plan_table(rubric, result))


# --- run ---------------------------------------------------------------------------------------
# The `run` command (decide texts with a model) is added here by the engine; see docs/cli.md.
# -------------------------------------------------------------------------------------------------


def plan_json(result: Plan) -> dict:
    """The `plan --json` object; each round is a dict so per-round details can be added later."""
    return {**result.to_dict(), "forward_passes": result.forward_passes}


def plan_table(rubric: Rubric, result: Plan) -> Table:
    table = Table(
        title=f"{rubric.name}: {_count(result.forward_passes, 'forward pass', 'forward passes')}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    # Only the dependencies column wraps; the short columns keep their width on a narrow terminal.
    for column, justify in [("round", "right"), ("level", "right"), ("pinned", "left"), ("field", "left"),
                            ("kind", "left"), ("options", "right")]:
        table.add_column(column, justify=justify, no_wrap=True)
    table.add_column("depends on")
    for round_ in result.rounds:
        for position, name in enumerate(round_.fields):
            spec = rubric.field(name)
            first = position == 0
            table.add_row(
                str(round_.index) if first else "",
                str(round_.level) if first else "",
                ("yes" if round_.pinned else "") if first else "",
                Text(name),
                spec.kind.value,
                str(_option_count(spec)),
                Text(_dependencies(spec)),  # Text: `[a, b]` is not rich markup
                end_section=position == len(round_.fields) - 1,
            )
    return table


def _option_count(spec: FieldSpec) -> int:
    if spec.kind is FieldKind.CHOICE:
        return len(spec.options or {})
    return len(spec.values)


def _dependencies(spec: FieldSpec) -> str:
    parts = [f"after {', '.join(spec.after)}"] if spec.after else []
    if spec.when is not None:
        # Written as in YAML, so `true` reads the same in the table and in the rubric file.
        values = ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in spec.when.values)
        parts.append(f"when {spec.when.field} in [{values}]")
    return "\n".join(parts)


def _load(ctx: typer.Context, ref: str, err: Console) -> Rubric | None:
    """The rubric, or None after printing its problems; `--debug` lets the exception through."""
    try:
        return resolve_rubric(ref)
    except RubricError as error:
        if ctx.obj.debug:
            raise
        for problem in error.problems:
            err.print(str(problem), markup=False, highlight=False, soft_wrap=True)
        return None
    except Exception as error:  # noqa: BLE001 - one line, not a traceback, unless --debug
        if ctx.obj.debug:
            raise
        err.print(
            f"{ref}: {type(error).__name__}: {error} (run with --debug for the traceback)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        return None


def _stderr() -> Console:
    return Console(stderr=True)


def _count(number: int, singular: str, plural: str | None = None) -> str:
    return f"{number} {singular if number == 1 else plural or singular + 's'}"
