"""What every command shares: option types, the rubric and engine loaders, and the one error reporter.

Command modules import this module and nothing else of `cli`, so no command depends on another.
Errors reach the user as one line on stderr (no traceback unless `--debug`), with the exit code the
error table in `decisionflow.errors` gives.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, TypeVar

import typer
from rich.console import Console

from ..errors import DataError, DecisionflowError, HeadsError, RubricError, outcome_of
from ..paths import existing_ancestor
from ..spec.references import resolve_rubric, resolve_target, rubric_file
from ..spec.rubric import Rubric
from ..spec.text import one_line

T = TypeVar("T")

RubricRef = Annotated[
    str,
    typer.Argument(
        metavar="RUBRIC",
        help="A YAML rubric (.yaml/.yml), a shipped workflow's name, module:Class or path/to/file.py:Class.",
        show_default=False,
    ),
]
ModelOption = Annotated[
    str | None,
    typer.Option(help="A local model folder, a .gguf file or a hub id (default: the bundled SmolLM2-135M-Instruct).", show_default=False),
]
ThreadsOption = Annotated[int | None, typer.Option(min=1, help="CPU threads for torch.", show_default=False)]
DeviceOption = Annotated[
    str, typer.Option(help="auto (a CUDA device when there is one, else the CPU), cpu, cuda or cuda:N.")
]
DtypeOption = Annotated[
    str, typer.Option(help="auto (bfloat16 on CUDA and on a CPU that multiplies it in hardware, else float32; "
                     "$DECISIONFLOW_DTYPE overrides auto), "
                     "float32, bfloat16 or float16.")
]
LoaderOption = Annotated[
    str,
    typer.Option(help="auto (the engine's own decoder where it reproduces the checkpoint exactly, else transformers: "
                      "its decoder path for Llama, Mistral and Qwen, the model's own forward for other families), "
                      "transformers (always build the transformers model) or generic (the transformers model run "
                      "through its own forward, whatever the family)."),
]
ExactOption = Annotated[bool, typer.Option("--exact", help="Score whole answers, line ending included, instead of reading only where answers fork.")]


@dataclass(frozen=True)
class Settings:
    debug: bool


def stderr() -> Console:
    return Console(stderr=True)


def say(console: Console, message: str) -> None:
    """Print plain text: no markup, no emoji codes (`file.py:V:` stays as written), no highlighting,
    never cut at the terminal's width."""
    console.print(message, markup=False, highlight=False, emoji=False, soft_wrap=True)


def count(number: int, singular: str, plural: str | None = None) -> str:
    return f"{number} {singular if number == 1 else plural or singular + 's'}"


def guarded(ctx: typer.Context, err: Console, action: Callable[[], T]) -> T:
    """Run `action`; a decisionflow error becomes its lines on stderr and its exit code, unless --debug."""
    try:
        return action()
    except RubricError as error:
        report_problems(ctx, error, err)
        raise typer.Exit(outcome_of(error).exit_code) from None
    except (DecisionflowError, OSError) as error:
        if ctx.obj.debug:
            raise
        # Heads found beside the rubric that no longer fit stop a command that can go on without them: say how.
        found_beside = "no_heads" in ctx.params and ctx.params.get("heads_path") is None
        hint = " (or answer zero-shot with --no-heads)" if isinstance(error, HeadsError) and found_beside else ""
        say(err, f"error: {error}{hint}")
        raise typer.Exit(outcome_of(error).exit_code if isinstance(error, DecisionflowError) else 1) from None


PROBLEMS_SHOWN = 20
"""Problems printed per rubric; a broken file can hold thousands, and the first ones say what to fix."""


def report_problems(ctx: typer.Context, error: RubricError, err: Console) -> None:
    """One line per problem on stderr, at most `PROBLEMS_SHOWN` per rubric and then a count of the
    rest; `--debug` lets the exception through instead."""
    if ctx.obj.debug:
        raise error
    for problem in error.problems[:PROBLEMS_SHOWN]:
        say(err, one_line(str(problem)))
    rest = len(error.problems) - PROBLEMS_SHOWN
    if rest > 0:
        source = one_line(error.problems[0].source)
        say(err, f"{source}: {count(rest, 'more problem')} not shown (fix the ones above and validate again)")


def load_target(ctx: typer.Context, ref: str, err: Console) -> Any:
    """The decorated class or rubric `ref` names; its problems on stderr and exit 1 otherwise."""
    return guarded(ctx, err, lambda: resolve_target(ref))


def load_target_and_rubric(ctx: typer.Context, ref: str, err: Console) -> tuple[Any, Rubric]:
    """The decorated class or rubric `ref` names, and its rubric (problems on stderr, exit 1)."""
    from ..spec.declare import rubric_of

    target = load_target(ctx, ref, err)
    return target, rubric_of(target)


def load_rubric_or_report(ctx: typer.Context, ref: str, err: Console) -> Rubric | None:
    """The rubric, or None after printing its problems (validate goes on with the next reference)."""
    try:
        return resolve_rubric(ref)
    except RubricError as error:
        report_problems(ctx, error, err)
        return None
    except Exception as error:  # noqa: BLE001 - one line, not a traceback, unless --debug
        if ctx.obj.debug:
            raise
        say(err, one_line(f"{ref}: cannot load the rubric: {type(error).__name__}: {error} (run with --debug for the traceback)"))
        return None


CalibrationOption = Annotated[
    Path | None,
    typer.Option("--calibration", help="A calibration file from `decisionflow calibrate` (default: the one saved "
                 "beside a YAML rubric, if any).", show_default=False),
]


NoCalibrationOption = Annotated[
    bool, typer.Option("--no-calibration", help="Apply no calibration file, even where one is found beside the rubric.")
]


def chosen_calibration(rubric_ref: str, path: Path | None, off: bool = False) -> tuple[Any, Path | None]:
    """The calibration a command applies, and its file: none with `off`, `path` when given (it must
    exist), else the one saved beside a YAML rubric, else none."""
    from ..runtime.readout.calibration import Calibration

    if off:
        if path is not None:
            raise DataError("give --calibration or --no-calibration, not both")
        return None, None
    if path is None:
        found = rubric_file(rubric_ref)
        beside = Calibration.path_for(found) if found is not None else None
        return (Calibration.load(beside), beside) if beside is not None and beside.is_file() else (None, None)
    if not path.is_file():
        raise DataError(f"calibration file not found: {path}")
    return Calibration.load(path), path


DataOption = Annotated[
    Path, typer.Option("--data", help="Labelled rows: a CSV (header row), JSONL or Parquet file.", show_default=False)
]
TextColumnOption = Annotated[str, typer.Option("--text-column", help="Column holding the input text.")]
LabelColumnsOption = Annotated[
    list[str] | None,
    typer.Option("--label", metavar="FIELD=COLUMN", help="The column holding FIELD's labels; repeat for several "
                 "(default: a column named after each field, else `label` for a rubric with one field).",
                 show_default=False),
]
SkipUnknownLabelsOption = Annotated[
    bool, typer.Option("--skip-unknown-labels", help="Leave out labels that are not an answer of their field (e.g. an "
                       "out-of-scope class) instead of refusing the file.")
]
"""The options of the commands that learn from labelled rows (`fit`, `tune`) and score on them (`eval`)."""

HeadsOption = Annotated[
    Path | None,
    typer.Option("--heads", help="A heads file from `decisionflow fit` (default: NAME.heads.safetensors beside a YAML "
                 "rubric, if any).", show_default=False),
]
NoHeadsOption = Annotated[
    bool, typer.Option("--no-heads", help="Answer every field with the zero-shot readout, even where fitted heads are found.")
]


def chosen_heads(rubric_ref: str, path: Path | None, off: bool, rubric: Rubric | None = None) -> tuple[Any, Path | None]:
    """The fitted heads a command applies, and their file: none with `off`, `path` when given (it must
    exist), else the file saved beside a YAML rubric, else none. With `rubric`, heads fitted for another
    rubric (or version, or option set) are refused here, before the model loads and before any check
    of a calibration against them."""
    from ..runtime.heads.fitted import Heads

    if off:
        if path is not None:
            raise DataError("give --heads or --no-heads, not both")
        return None, None
    if path is None:
        found = rubric_file(rubric_ref)
        beside = Heads.path_for(found) if found is not None else None
        path = beside if beside is not None and beside.is_file() else None
        if path is None:
            return None, None
    heads = Heads.load(path)
    if rubric is not None:
        heads.check_rubric(rubric)
    return heads, path


AdapterOption = Annotated[
    Path | None,
    typer.Option("--adapter", help="A LoRA adapter from `decisionflow tune` (default: NAME.adapter.safetensors beside a "
                 "YAML rubric, if any), merged into the model's weights.", show_default=False),
]
NoAdapterOption = Annotated[
    bool, typer.Option("--no-adapter", help="Read the model as it is, even where a tuned adapter is found.")
]


def chosen_adapter(rubric_ref: str, path: Path | None, off: bool) -> tuple[Any, Path | None]:
    """The LoRA adapter a command merges, and its file: none with `off`, `path` when given (it must exist),
    else the file saved beside a YAML rubric, else none. Read (and a damaged file refused) before the model loads."""
    from ..runtime.adapter import Adapter, adapter_path_for

    if off:
        if path is not None:
            raise DataError("give --adapter or --no-adapter, not both")
        return None, None
    if path is None:
        found = rubric_file(rubric_ref)
        beside = adapter_path_for(found) if found is not None else None
        path = beside if beside is not None and beside.is_file() else None
        if path is None:
            return None, None
    return Adapter.load(path), path


def saved_beside(err: Console, rubric_ref: str, what: str, path_for: Callable[[Path], Path]) -> Path:
    """Where `fit` or `calibrate` saves `what` when no --output is given: beside the YAML rubric the
    reference names (`path_for(file)`). Exit 2 with one `error:` line where there is no such folder to
    write in: a class, or a shipped workflow found in the installed package from another directory."""
    found = rubric_file(rubric_ref)
    if found is None:
        say(err, f"error: {rubric_ref} is not a YAML file, so there is no folder to save the {what} beside; "
                 "give --output PATH")
        raise typer.Exit(2)
    if found.exists() and not Path(rubric_ref).exists():
        say(err, f"error: {rubric_ref} names the shipped workflow {found}, whose folder is the installed package's; "
                 f"give --output PATH (other commands then take the {what} with --{what} PATH)")
        raise typer.Exit(2)
    return path_for(found)


def output_problem(path: Path, *, folder: bool) -> str | None:
    """Why a command could not write `path` (a folder it fills when `folder`, else a file), checked
    before any work so a long run does not end in an errno; None when it can."""
    if folder and path.exists() and not path.is_dir():
        return f"{path} is a file; give a folder (it is created when missing)"
    if not folder and path.is_dir():
        return f"{path} is a folder; give a file name"
    # A file written again (a calibration or heads refitted) needs its folder to take the new file.
    ancestor = path if folder and path.exists() else existing_ancestor(path)
    if not ancestor.is_dir():
        return f"{path}: cannot be created, {ancestor} is a file"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"{path}: no permission to write in {ancestor}"
    return None


def refuse_output(err: Console, path: Path | None, *, folder: bool, option: str) -> None:
    """Exit 2 with one `error:` line when `path` cannot be written (see `output_problem`)."""
    problem = None if path is None else output_problem(path, folder=folder)
    if problem:
        say(err, f"error: {option} {problem}")
        raise typer.Exit(2)


def check_calibration(calibration: Any, file: Path | None, rubric: Rubric, heads: Any = None) -> None:
    """`Calibration.check`, and `check_readouts` against the `heads` the command applies (None: none),
    its refusal naming the file (one found beside a rubric was not named by the user)."""
    from ..errors import CalibrationError

    try:
        calibration.check(rubric)
    except CalibrationError as error:
        raise CalibrationError(f"{file}: {error}" if file is not None else str(error)) from None
    try:
        calibration.check_readouts(heads.fitted_fields if heads is not None else ())
    except CalibrationError as error:
        raise CalibrationError((f"{file}: {error}" if file is not None else str(error))
                               + ", or leave the calibration out (--no-calibration)") from None


def load_engine(
    err: Console, *, model: str | None, exact: bool = False, pin: bool | None = None, threads: int | None = None,
    device: str = "auto", dtype: str = "auto", loader: str = "auto", pack_weights: bool = True, adapter: Any = None,
) -> Any:
    """Load the engine with a status line saying what is happening (converting, reading the cache).
    `loader="transformers"` where the command generates text with the model (see `Engine.load`)."""
    from transformers.utils import logging as transformers_logging

    from ..runtime.engine import Engine

    transformers_logging.disable_progress_bar()  # the status line says what is loading
    with err.status("loading the model") as status:
        return Engine.load(
            model, device=device, dtype=dtype, threads=threads, mode="exact" if exact else "branch", pin_first=pin,
            status=lambda message: status.update(message), loader=loader, pack_weights=pack_weights, adapter=adapter,
        )


@contextlib.contextmanager
def progress_bars(err: Console) -> Iterator[Callable[[str], Callable[[int, int], None]]]:
    """A factory of progress callbacks, one bar per phase (deciding, each shuffled order, the baseline, the
    rows a fit reads)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err) as bar:
        def factory(label: str) -> Callable[[int, int], None]:
            task = bar.add_task(label, total=None)
            return lambda done, total: bar.update(task, completed=done, total=total)

        yield factory
