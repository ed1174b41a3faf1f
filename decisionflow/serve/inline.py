"""The inline rubric route: `POST /v1/rubrics/decide`, a YAML rubric sent with the input.

Request: `{"rubric": "<the rubric's YAML text>", "text": input}`. The answer is what
`POST /v1/rubrics/{name}/decide` answers for one input (`value`, `fields`, `stats`, as `decisionflow run
--json` prints them), read zero-shot: no calibration and no fitted heads apply to a rubric sent inline.

The rubric is a question set on the shared admission path (`admission`), as `/v1/systemone` questions are:
found among the sets already built by its text, or read by the same bounded YAML reader as rubric files
(`spec.yaml_rubric.loads_rubric`); a rubric the engine has not prepared is charged to the client's budget
of new question sets (429 beyond it), compiled and checked against the prompt limit and the model's context
before anything is cached; the input is admitted, queued and batched with the other inputs of the same
rubric. A rubric that does not validate is a 422 `RubricError` at `rubric`, each problem located in the
YAML (`rubric.fields.team.options`, with its line), and costs no budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import CompileError, DataError, InputError, Problem, RubricError
from ..spec.rubric import Rubric
from ..spec.yaml_rubric import loads_rubric
from .admission import Answering
from .body import input_shape_problem, json_type, request_object
from .refusals import Located
from .settings import Limits

ROUTE = "/v1/rubrics/decide"
REQUEST_KEYS = ("rubric", "text")
SOURCE = "rubric"
"""Where a problem of the rubric is placed in the request (`rubric`, `rubric.fields.<name>...`)."""


@dataclass(frozen=True)
class InlineRequest:
    rubric: str
    """The rubric's YAML text, as sent."""
    text: Any


@dataclass(frozen=True)
class InlineRubric:
    rubric: Rubric


def parse_inline_request(body: Any, limits: Limits) -> InlineRequest:
    """The request checked key by key: a JSON object of a non-blank `rubric` string and one input `text`."""
    body = request_object(body, shape=' ({"rubric": "<YAML>", "text": ...})', allowed=REQUEST_KEYS)
    for key in REQUEST_KEYS:
        if key not in body:
            raise Located(DataError(f"the request has no `{key}`"), key)
    rubric = body["rubric"]
    if not isinstance(rubric, str) or not rubric.strip():
        got = "blank text" if isinstance(rubric, str) else json_type(rubric)
        raise Located(DataError(f"`rubric` must be the rubric's YAML text, got {got}"), "rubric")
    what = input_shape_problem(body["text"])
    if what is not None:
        raise Located(DataError(f"an input must be a string, an object or a list (a conversation of {{role, content}} "
                                f"messages, or structured data), got {what}"), "text")
    return InlineRequest(rubric, body["text"])


def read_rubric(text: str, limits: Limits) -> Rubric:
    """The rubric the YAML text declares, or a `RubricError` whose every problem is placed in the request:
    `rubric.<path in the rubric>` with its line, or `rubric` with the line and column of a syntax error."""
    try:
        rubric = loads_rubric(text, source=SOURCE)
    except RubricError as error:
        raise RubricError([_placed(problem) for problem in error.problems]) from None
    crowded = [spec for spec in rubric if len(spec.labels) > limits.max_options]
    if crowded:
        raise RubricError([Problem(SOURCE, f"{SOURCE}.fields.{spec.name}", f"{len(spec.labels)} answers; at most "
                                                                            f"{limits.max_options} per field") for spec in crowded])
    return rubric


def _placed(problem: Problem) -> Problem:
    location, message = problem.location, problem.message
    if location.startswith("line "):  # a syntax error: its line and column lead the message
        return Problem(SOURCE, SOURCE, f"{location}: {message}")
    if problem.line is not None:
        message = f"{message} (line {problem.line})"
    return Problem(SOURCE, f"{SOURCE}.{location}" if location else SOURCE, message)


class InlineRubricFormat:
    """The format on the shared admission path (`admission.QuestionSetFormat`)."""

    route = "inline"

    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    def label(self, built: InlineRubric | None) -> str:
        return "inline" if built is None else f"inline:{built.rubric.name}"

    def check(self, request: InlineRequest) -> None:
        """Nothing to check before the set is looked up."""

    def key(self, request: InlineRequest) -> str:
        return request.rubric

    def build(self, request: InlineRequest) -> InlineRubric:
        return InlineRubric(read_rubric(request.rubric, self.limits))

    def field(self, request: InlineRequest) -> str:
        return "rubric"

    def compile_refused(self, error: CompileError, request: InlineRequest, built: InlineRubric) -> Exception:
        return Located(error, "rubric")

    def payload(self, request: InlineRequest) -> Any:
        return request.text

    def input_refused(self, error: InputError, request: InlineRequest) -> Exception:
        return Located(error, "text")

    def answer(self, request: InlineRequest, built: InlineRubric, decision: Any, answering: Answering) -> dict[str, Any]:
        return decision.to_dict()
