"""How a refused request is answered: one JSON error shape, statuses from the one error table.

    {"error": {"status": 422, "type": "RubricError", "field": "questions.spam.criteria",
               "message": "...", "problems": [{"field": ..., "message": ...}, ...]}}

`field` names the offending part of the request (`body`, `state`, `questions.<id>.<key>`, `text`,
`texts[3]`; null when no single field is at fault, e.g. a full queue). Errors the library raises on
purpose get their status from `decisionflow.errors.outcome_of`; the refusals that exist only in HTTP
(no or a wrong API key: 401; an unknown route or rubric name: 404; a body too slow to arrive: 408; a
body over the size limit: 413; a body that is not JSON: 415; a request over its deadline: 504) are
`HttpRefusal`s. Anything else a request raises is a 500 whose message names no internals: the traceback
goes to the server's log, under the request's id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from ..errors import DecisionflowError, RubricError, Unavailable, outcome_of
from ..spec.text import first_lone_surrogate


@dataclass(frozen=True)
class Refusal:
    status: int
    type: str
    message: str
    field: str | None = None
    problems: tuple[tuple[str | None, str], ...] = ()
    headers: dict[str, str] = dataclass_field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"status": self.status, "type": self.type, "field": self.field, "message": self.message}
        if self.problems:
            error["problems"] = [{"field": where, "message": message} for where, message in self.problems]
        return {"error": error}


class HttpRefusal(Exception):
    """A refusal that exists only in HTTP (404, 413), not in the library's error table."""

    def __init__(self, status: int, type_: str, message: str, *, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.refusal = Refusal(status, type_, message, field, headers=headers or {})


class Located(Exception):
    """A library error together with the request field it is about (the library does not know the wire)."""

    def __init__(self, error: DecisionflowError, field: str | None) -> None:
        super().__init__(str(error))
        self.error = error
        self.field = field


def refusal_of(error: BaseException, *, field: str | None = None, retry_after_s: int = 1) -> Refusal:
    """The answer for any error: its HTTP status from the error table, the field it names, its message."""
    if isinstance(error, HttpRefusal):
        return error.refusal
    if isinstance(error, Located):
        return refusal_of(error.error, field=error.field, retry_after_s=retry_after_s)
    if not isinstance(error, DecisionflowError):
        return internal_error()
    status = outcome_of(error).http_status
    headers = {"Retry-After": str(retry_after_s)} if isinstance(error, Unavailable) else {}
    if isinstance(error, RubricError) and error.problems:
        problems = tuple((p.location or field, p.message) for p in error.problems)
        first_field, first_message = problems[0]
        message = first_message if len(problems) == 1 else f"{first_message} (and {len(problems) - 1} more problems)"
        return Refusal(status, type(error).__name__, message, first_field, problems, headers)
    message = str(error)
    return Refusal(status, type(error).__name__, message, field, headers=headers)


def internal_error() -> Refusal:
    """The answer for a failure of the server's own: nothing about it but that it happened (the log has the rest)."""
    return Refusal(500, "InternalError", "the server failed on this request; its log has the details under "
                                         "this request's X-Request-ID")


def field_path(*parts: str | int) -> str:
    """A request location: `questions.spam.criteria`; a key that is not a plain name is quoted, `questions["a.b"]`."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.isidentifier():
            path += f".{part}" if path else part
        else:
            # A lone surrogate cannot be written as UTF-8: such a key is shown escaped (`["\\ud800"]`).
            printable = first_lone_surrogate(part) is None
            path += f"[{json.dumps(part, ensure_ascii=not printable)}]"
    return path
