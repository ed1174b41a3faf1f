"""Every error decisionflow raises on purpose, in one hierarchy, and what each means to a caller.

All of them derive from `DecisionflowError`, so one `except DecisionflowError` catches whatever the
library refuses, and `outcome_of` maps any of them to the CLI's exit code and the HTTP status a
server answers with, from the one table below. Errors about what a caller passed in keep
`ValueError` as a mixin, so code written against plain `ValueError` keeps working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


class DecisionflowError(Exception):
    """Base class of every error decisionflow raises on purpose."""

    input_index: int | None = None
    """Which input of a `decide_many` call the error is about, when it is about one."""

    def __str__(self) -> str:
        message = super().__str__()
        return message if self.input_index is None else f"input {self.input_index}: {message}"


@dataclass(frozen=True)
class Problem:
    """One located problem of a rubric: printed as `source: location: message (line N)`."""

    source: str
    """File path, `module:Class` reference or class name the rubric came from."""
    location: str
    """Dotted path of the offending key, e.g. `fields.severity.max` ("" for the whole source)."""
    message: str
    line: int | None = None
    """1-based line in the source file, when known."""

    def __str__(self) -> str:
        message = self.message
        if self.line is not None and not self.location.startswith("line "):
            message = f"{message} (line {self.line})"
        return ": ".join(part for part in (self.source, self.location, message) if part)


class RubricError(DecisionflowError, ValueError):
    """A rubric could not be declared, loaded or resolved; `problems` lists every reason."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(map(str, self.problems)))

    @classmethod
    def one(cls, source: str, location: str, message: str, *, line: int | None = None) -> RubricError:
        return cls([Problem(source, location, message, line)])


class InputError(DecisionflowError, ValueError):
    """The request's input cannot be decided on (empty, too long for the model, wrong type)."""


class ContextLengthError(InputError):
    """The input does not fit the model's context beside the rubric's prompt and answers."""


class ResultError(DecisionflowError, ValueError):
    """The decided answers were refused by the declared class's own validators."""


class CalibrationError(DecisionflowError, ValueError):
    """A calibration does not belong to the rubric it is applied to, or cannot be read."""


class HeadsError(CalibrationError):
    """A heads file cannot be read, or was fitted for another model, rubric, prompt or option set."""


class DataError(DecisionflowError):
    """Labelled data or an input file cannot be used: a missing file or column, a bad row, a bad slice."""


class CompileError(DecisionflowError):
    """A rubric cannot be compiled for a tokenizer (e.g. two labels tokenise identically)."""


class ModelError(DecisionflowError):
    """The model cannot be loaded or cannot serve a rubric correctly."""


class Unavailable(DecisionflowError, RuntimeError):
    """Something optional cannot run on this machine (a missing package or device); the reason says why."""


class ClusterError(DecisionflowError, RuntimeError):
    """A Ray run stopped after its bounded retries (engine actors kept dying, or a task kept failing)."""


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    """What the `decisionflow` command exits with."""
    http_status: int
    """What a server answers a request that raised it with."""


OUTCOMES: dict[type[DecisionflowError], Outcome] = {
    RubricError: Outcome(1, 422),
    InputError: Outcome(1, 422),
    ResultError: Outcome(1, 422),
    CalibrationError: Outcome(1, 422),
    CompileError: Outcome(1, 422),
    DataError: Outcome(1, 400),
    ModelError: Outcome(1, 500),
    Unavailable: Outcome(1, 503),
    DecisionflowError: Outcome(1, 500),
}


def outcome_of(error: BaseException) -> Outcome:
    """The exit code and HTTP status for an error: its own class's entry, else its nearest base's."""
    for cls in type(error).__mro__:
        if cls in OUTCOMES:
            return OUTCOMES[cls]  # type: ignore[index]
    return Outcome(1, 500)
