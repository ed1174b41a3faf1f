"""The `decisionflow` command line. Rich is imported here only; the core modules never print."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .plan import Plan, make_plan
from .problems import RubricError
from .cli_options import ExactOption, ModelOption, ThreadsOption
from .errors import DecisionflowError
from .references import resolve_rubric, resolve_target
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
    tokens: Annotated[
        bool,
        typer.Option("--tokens", help="Add the token view: rows, their token counts and where each row ends (loads only the tokenizer)."),
    ] = False,
    model: ModelOption = None,
    text: Annotated[
        str | None, typer.Option(help="A sample input, to count a request's own tokens (with --tokens).", show_default=False)
    ] = None,
    exact: ExactOption = False,
) -> None:
    """Show the rounds a rubric is decided in, without running a model."""
    err = _stderr()
    rubric = _load(ctx, rubric_ref, err)
    if rubric is None:
        raise typer.Exit(1)
    result = make_plan(rubric, pin_first=pin, max_fields_per_pass=max_fields_per_pass)
    data = plan_json(result)
    if tokens or text is not None:
        data = _guarded(ctx, err, lambda: add_token_view(data, rubric, result, model=model, text=text, exact=exact, err=err))
    if as_json:
        typer.echo(json.dumps(data))
        return
    # The token view is wide; a pipe or a narrow terminal must not silently drop its columns.
    console = Console(width=max(Console().width, 150)) if "head_tokens" in data else Console()
    console.print(plan_table(rubric, result, data if "head_tokens" in data else None))
    if "head_tokens" in data:
        console.print(
            f"head {data['head_tokens']} tokens (cached once per rubric); per request: "
            + (f"{data['request_tokens']} input tokens, " if "request_tokens" in data else "")
            + f"{data['forward_passes']} forward passes, {data['row_tokens']} row tokens; layout {data['layout']}",
            highlight=False, markup=False,
        )


@app.command()
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
    err = _stderr()
    if (text is None) == (input_path is None):
        err.print("run: give exactly one of --text or --input", markup=False)
        raise typer.Exit(2)
    if input_path is not None and output_path is None:
        err.print("run: --input needs --output", markup=False)
        raise typer.Exit(2)
    if input_path is not None and not input_path.is_file():
        err.print(f"run: input file not found: {input_path}", markup=False)
        raise typer.Exit(1)
    target = load_target(ctx, rubric_ref, err)
    calibration = _guarded(ctx, err, lambda: _calibration_beside(rubric_ref))
    engine = _guarded(ctx, err, lambda: _load_engine(err, model=model, exact=exact, pin=pin, threads=threads))
    if text is not None:
        decision = _guarded(ctx, err, lambda: engine.decide(target, text, calibration=calibration))
        if as_json:
            typer.echo(json.dumps(decision.to_dict()))
        else:
            Console(width=max(Console().width, 120)).print(decision)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from .batch import decide_file

    with Progress(TextColumn("deciding"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err) as bar:
        task = bar.add_task("rows", total=None)
        summary = _guarded(ctx, err, lambda: decide_file(
            engine, target, input_path, output_path, calibration=calibration,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        ))
    err.print(
        f"{summary.decided} decided, {summary.skipped} already done, {summary.failed} failed "
        f"of {summary.total} rows -> {output_path}",
        markup=False, highlight=False,
    )
    if summary.failed:
        raise typer.Exit(1)


def load_target(ctx: typer.Context, ref: str, err: Console):
    """The decorated class or rubric `ref` names; its problems on stderr and exit 1 otherwise."""
    try:
        return resolve_target(ref)
    except RubricError as error:
        _report(ctx, error, err)
        raise typer.Exit(1) from None


def _report(ctx: typer.Context, error: RubricError, err: Console) -> None:
    """One line per problem on stderr; `--debug` lets the exception through instead."""
    if ctx.obj.debug:
        raise error
    for problem in error.problems:
        err.print(str(problem), markup=False, highlight=False, soft_wrap=True)


def _calibration_beside(rubric_ref: str):
    """The calibration file saved beside a YAML rubric by `decisionflow calibrate`, if any."""
    from .calibration import Calibration

    if not rubric_ref.lower().endswith((".yaml", ".yml")):
        return None
    path = Calibration.path_for(rubric_ref)
    return Calibration.load(path) if path.is_file() else None


def _load_engine(err: Console, *, model: str | None, exact: bool, pin: bool | None, threads: int | None):
    from transformers.utils import logging as transformers_logging

    from .engine import Engine

    transformers_logging.disable_progress_bar()  # the status line below says what is loading
    with err.status("loading the model") as status:
        return Engine.load(
            model, threads=threads, mode="exact" if exact else "branch", pin_first=pin,
            status=lambda message: status.update(message),
        )


def add_token_view(data: dict, rubric: Rubric, result: Plan, *, model: str | None, text: str | None, exact: bool, err: Console) -> dict:
    """Extend `plan --json` with what the tokenizer says: rows, their tokens, where each row ends."""
    from .compiler import ReadMode, compile_rubric
    from .models import load_tokenizer

    with err.status("loading the tokenizer") as status:
        tokenizer = load_tokenizer(model, status=lambda message: status.update(message))
    compiled = compile_rubric(tokenizer, rubric, mode=ReadMode.EXACT if exact else ReadMode.BRANCH)
    rows = compiled.token_view()
    rounds = []
    for round_ in data["rounds"]:
        round_rows = [{"field": name, **rows[name]} for name in round_["fields"]]
        rounds.append({**round_, "rows": round_rows, "row_tokens": sum(r["row_tokens"] for r in round_rows)})
    view = {
        **data,
        "rounds": rounds,
        "layout": compiled.layout.name,
        "head_tokens": len(compiled.head_tokens),
        "row_tokens": sum(r["row_tokens"] for r in rounds),
    }
    if text is not None:
        view["request_tokens"] = len(compiled.request_tokens(text))
    return view


def _guarded(ctx: typer.Context, err: Console, action):
    """Run `action`; a decisionflow error becomes one line on stderr and exit 1, unless --debug."""
    try:
        return action()
    except (DecisionflowError, RubricError, OSError) as error:
        if ctx.obj.debug:
            raise
        err.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


def plan_json(result: Plan) -> dict:
    """The `plan --json` object; each round is a dict so per-round details can be added later."""
    return {**result.to_dict(), "forward_passes": result.forward_passes}


def plan_table(rubric: Rubric, result: Plan, token_view: dict | None = None) -> Table:
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
    rows = {}
    if token_view is not None:
        table.add_column("row tokens", justify="right")
        table.add_column("row ends")
        rows = {r["field"]: r for round_ in token_view["rounds"] for r in round_["rows"]}
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
                *([str(rows[name]["row_tokens"]), Text(repr(rows[name]["row_ends"]))] if rows else []),
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
        _report(ctx, error, err)
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


from .cli_quality import calibrate_command, eval_command  # noqa: E402 - registered after the helpers it reuses

app.command("eval")(eval_command)
app.command("calibrate")(calibrate_command)


from .bench import bench_command  # noqa: E402 - registered last, like the other optional commands

app.command("bench")(bench_command)
