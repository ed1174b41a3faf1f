"""`decisionflow validate` and `decisionflow plan`: checking and planning rubrics without a model."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..spec.plan import Plan, make_plan
from ..spec.rubric import FieldKind, FieldSpec, Rubric
from .common import (
    ExactOption,
    ModelOption,
    RubricRef,
    count,
    guarded,
    load_rubric_or_report,
    say,
    stderr,
)


def validate(
    ctx: typer.Context,
    rubrics: Annotated[
        list[str],
        typer.Argument(
            metavar="RUBRIC",
            help="YAML rubrics (.yaml/.yml), shipped workflow names, module:Class or path/to/file.py:Class.",
            show_default=False,
        ),
    ],
) -> None:
    """Check rubrics; print one OK line per valid rubric, or one line per problem on stderr."""
    out, err = Console(), stderr()
    failed = False
    for ref in rubrics:
        rubric = load_rubric_or_report(ctx, ref, err)
        if rubric is None:
            failed = True
            continue
        long_options = long_option_problems(rubric, err)
        if long_options:
            for problem in long_options:
                say(err, f"{ref}: {problem}")
            failed = True
            continue
        examples = f", {count(len(rubric.examples), 'in-context example')}" if rubric.examples else ""
        say(out, f"OK {ref}: {rubric.name} ({count(len(rubric), 'field')}, "
                 f"{count(make_plan(rubric).forward_passes, 'forward pass', 'forward passes')}{examples})")
    if failed:
        raise typer.Exit(1)


def long_option_problems(rubric: Rubric, err: Console) -> list[str]:
    """Options over the compiler's per-option token limit, as `run` would refuse them. Only a label of at
    least `MAX_OPTION_TOKENS` bytes can be over it, so the bundled model's tokenizer is loaded only for a
    rubric that has one (`run --model` and `plan --tokens --model` count with that model's own)."""
    from ..compiler.trie import check_option_lengths, may_exceed_option_limit

    suspects = [spec for spec in rubric
                if spec.kind is FieldKind.CHOICE and any(map(may_exceed_option_limit, spec.labels))]
    if not suspects:
        return []
    from ..compiler.tokens import TokenizerView
    from ..errors import CompileError, DecisionflowError
    from ..runtime.model.loading import load_tokenizer

    try:
        with err.status("loading the tokenizer") as status:
            view = TokenizerView(load_tokenizer(None, status=lambda message: status.update(message)))
    except (DecisionflowError, OSError):
        return []  # validate needs no model: without the tokenizer, `run` counts when it compiles
    problems = []
    for spec in suspects:
        try:
            check_option_lengths(view, spec)
        except CompileError as error:
            problems.append(str(error))
    return problems


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
    err = stderr()
    rubric = load_rubric_or_report(ctx, rubric_ref, err)
    if rubric is None:
        raise typer.Exit(1)
    result = make_plan(rubric, pin_first=pin, max_fields_per_pass=max_fields_per_pass)
    data = plan_json(result)
    if tokens or text is not None:
        data = guarded(ctx, err, lambda: add_token_view(data, rubric, model=model, text=text, exact=exact, err=err, pin=pin))
    if as_json:
        typer.echo(json.dumps(data))
        return
    # A pipe or a narrow terminal must not silently drop columns (rich would cut them to '…').
    console = Console(width=max(Console().width, 150 if "prefix_tokens" in data else 120))
    console.print(plan_table(rubric, result, data if "prefix_tokens" in data else None))
    if "prefix_tokens" in data:
        say(console,
            f"prefix {data['prefix_tokens']} tokens (cached once per rubric); per request: "
            + (f"{data['request_tokens']} input tokens, " if "request_tokens" in data else "")
            + f"{count(data['forward_passes'], 'forward pass', 'forward passes')}, {data['row_tokens']} row tokens; "
            f"layout {data['layout']}")


def add_token_view(data: dict, rubric: Rubric, *, model: str | None, text: str | None, exact: bool, err: Console,
                   pin: bool | None = None) -> dict:
    """Extend `plan --json` with what the tokenizer says: rows, their tokens, where each row ends."""
    from ..compiler import DEFAULT_CATALOG, ReadMode, compile_rubric
    from ..compiler.tokens import token_text
    from ..runtime.model.loading import load_tokenizer

    with err.status("loading the tokenizer") as status:
        tokenizer = load_tokenizer(model, status=lambda message: status.update(message))
    # The prompt `run` builds: the engine's catalog where the rubric does not choose one, its pinning.
    compiled = compile_rubric(tokenizer, rubric, mode=ReadMode.EXACT if exact else ReadMode.BRANCH,
                              catalog=DEFAULT_CATALOG, pin_first=pin)
    rows = compiled.token_view()
    for name, field in compiled.fields.items():
        # The decoded text would show a token that ends mid-character as U+FFFD; say its bytes instead.
        rows[name]["row_ends"] = token_text(tokenizer, field.stem[-3:])
    rounds = []
    for round_ in data["rounds"]:
        round_rows = [{"field": name, **rows[name]} for name in round_["fields"]]
        rounds.append({**round_, "rows": round_rows, "row_tokens": sum(r["row_tokens"] for r in round_rows)})
    view = {
        **data,
        "rounds": rounds,
        "layout": compiled.layout.name,
        "prefix_tokens": len(compiled.prefix_tokens),
        "head_tokens": len(compiled.prefix_tokens),  # deprecated: `prefix_tokens` under its earlier name
        "row_tokens": sum(r["row_tokens"] for r in rounds),
    }
    if text is not None:
        view["request_tokens"] = len(compiled.request_tokens(text))
    return view


def plan_json(result: Plan) -> dict:
    """The `plan --json` object; each round is a dict so per-round details can be added later."""
    return {**result.to_dict(), "forward_passes": result.forward_passes}


def plan_table(rubric: Rubric, result: Plan, token_view: dict | None = None) -> Table:
    """Every field: the asked ones round by round, then the derived ones (computed from the answers
    they read, in no pass of their own)."""
    derived = f"; {count(len(result.derived), 'derived field')}" if result.derived else ""
    table = Table(
        title=f"{rubric.name}: {count(result.forward_passes, 'forward pass', 'forward passes')}{derived}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    # Only the dependencies column wraps (folding its names, never cutting them); the short columns
    # keep their width.
    for column, justify in [("round", "right"), ("level", "right"), ("pinned", "left"), ("field", "left"),
                            ("kind", "left"), ("options", "right")]:
        table.add_column(column, justify=justify, no_wrap=True)
    table.add_column("depends on", overflow="fold")
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
    # A derived field sits on the level of its deepest input; `result.derived` computes inputs first.
    levels = {name: round_.level for round_ in result.rounds for name in round_.fields}
    for position, name in enumerate(result.derived):
        spec = rubric.field(name)
        levels[name] = max((levels.get(read, 0) for read in spec.dependencies), default=0)
        table.add_row(
            "derived" if position == 0 else "", str(levels[name]), "", Text(name), spec.kind.value,
            str(_option_count(spec)), Text(_dependencies(spec)), *(["", ""] if rows else []),
        )
    return table


def _option_count(spec: FieldSpec) -> int:
    if spec.kind is FieldKind.CHOICE:
        return len(spec.options or {})
    return len(spec.values)


def _dependencies(spec: FieldSpec) -> str:
    """What a field waits for: `after`, `when`, `options_by` (and `marginalize`), or what a derived field reads."""
    if spec.derive is not None:
        return f"derived from {', '.join(spec.derive.reads)}"
    parts = [f"after {', '.join(spec.after)}"] if spec.after else []
    if spec.when is not None:
        # Written as in YAML, so `true` reads the same in the table and in the rubric file.
        values = ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in spec.when.values)
        parts.append(f"when {spec.when.field} in [{values}]")
    if spec.options_by is not None:
        parts.append(f"options by {spec.options_by.field}")
    if spec.marginalize is not None and spec.parent is not None:
        parts.append(f"mixed over {spec.parent}'s top {spec.marginalize}")
    return "\n".join(parts)
