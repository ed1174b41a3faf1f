"""The `/v1/systemone` wire format: a request's question set as a rubric, and the decision as its answers.

Request: `{"state": str | object | [{role, content}, ...], "questions": {id: {"type": "noul" | "choice" |
"score", "instructions": str, "criteria": ...}}}` (`noul`: optional `{"true": desc, "false": desc}`;
`choice`: `{label: description or null}`; `score`: a list of 2-10 level descriptions, level i scoring i).
Response: `{"model": ..., "answers": {id: {"type": "noul", "noul": P(true)} | {"type": "choice", "choice":
label, "probabilities": {...}, "confidence": P(label)} | {"type": "score", "score": expected level,
"legend": {"0": description, ...}, "probabilities": {"0": ...}, "confidence": P(likeliest level)}},
"usage": {"input_tokens": n, "output_tokens": 0}}`.

How a question set becomes a rubric:
- the format promises that the questions are independent, so the set is a rubric read independently
  (`question_sets`, `reading: independent`): each question is a field asked in its own turn after the
  state, reading neither the other questions nor their answers, all in one packed pass over a prefix that no
  question names. Nothing is pinned, and an answer is the same alone, among others and in any order;
- each question is one field: `noul` a boolean (its criteria appended to the question), `choice` a
  choice over its labels, `score` an integer scale 0..n-1 whose levels carry the descriptions;
- question ids may be any strings; each gets a field name the model can read as a JSON key (`is spam?`
  -> `is_spam`), unique within the set, and answers are keyed by the ids again;
- the fields are ordered by id, so the same set in any order is one rubric (one compiled set of rows, one
  content-free prior) and gets the same answers.

`usage.input_tokens` is what the model read: the prefix, the state and every question's row.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..errors import CompileError, DataError, InputError, Problem, RubricError
from ..spec.names import field_names
from ..spec.rubric import FieldSpec, Rubric, normalise_label, number_text
from .admission import Answering
from .body import input_shape_problem, json_type, lone_surrogate, request_object
from .question_sets import choice_field, confidence, independent_rubric, predicate_field, score_field, tokens_read
from .refusals import Located, field_path
from .settings import Limits

QUESTION_TYPES = ("noul", "choice", "score")
QUESTION_KEYS = ("type", "instructions", "criteria")
REQUEST_KEYS = ("state", "questions", "model")
MIN_LEVELS, MAX_LEVELS = 2, 10
RUBRIC_NAME = "systemone"
RUBRIC_INSTRUCTIONS = (
    "Answer every key from the input alone. The keys are independent questions: "
    "answer each one on its own, without regard to the others."
)
"""The system turn's instructions of every `/v1/systemone` question set: one prefix for all of them."""
SOURCE = "request"


@dataclass(frozen=True)
class Question:
    id: str
    type: str
    instructions: str
    criteria: Any
    """noul: {"true": desc, "false": desc} or None; choice: {label: desc}; score: (desc of level 0, ...)."""


@dataclass(frozen=True)
class QuestionSet:
    rubric: Rubric
    field_of: dict[str, str]
    """Question id -> the rubric's field name."""
    type_of: dict[str, str]


@dataclass(frozen=True)
class SystemOneRequest:
    state: Any
    questions: tuple[Question, ...]
    """In the request's order (answers come back in it)."""


# -- parsing ------------------------------------------------------------------------------------------


def parse_request(body: Any, limits: Limits) -> SystemOneRequest:
    """The request checked field by field; every problem is located (`questions.spam.criteria`)."""
    body = request_object(body, allowed=REQUEST_KEYS, repeated_key=_repeated_key_error)
    for key in ("state", "questions"):
        if key not in body:
            raise Located(DataError(f"the request has no `{key}`"), key)
    if "model" in body and not isinstance(body["model"], str):
        raise Located(DataError("`model` must be a string (this server answers with the model it has loaded)"), "model")
    state = body["state"]
    _check_state_shape(state)
    raw = body["questions"]
    if not isinstance(raw, dict) or not raw:
        what = "an empty object" if isinstance(raw, dict) else json_type(raw)
        raise _problems([Problem(SOURCE, "questions", f"must be an object of at least one question, got {what}")])
    if len(raw) > limits.max_questions:
        raise _problems([Problem(SOURCE, "questions", f"{len(raw)} questions; at most {limits.max_questions} per request")])
    problems: list[Problem] = []
    for qid in raw:
        bad = lone_surrogate(qid)
        if bad:
            problems.append(Problem(SOURCE, field_path("questions", qid), f"the question id holds a lone surrogate "
                                                                          f"({bad}): it is not Unicode text"))
    if problems:
        raise _problems(problems)
    questions = [_question(str(qid), spec, limits, problems) for qid, spec in raw.items()]
    if problems:
        raise _problems(problems)
    return SystemOneRequest(state, tuple(q for q in questions if q is not None))


def _check_state_shape(state: Any) -> None:
    if isinstance(state, (str, dict)):
        return
    if isinstance(state, list) and state and all(isinstance(m, dict) and {"role", "content"} & set(m) for m in state):
        return  # a conversation: each message's role and content are checked when the input is rendered
    what = input_shape_problem(state) or json_type(state)
    raise Located(
        DataError(f"`state` must be a string, an object or a list of {{role, content}} messages, got {what}"), "state"
    )


def _question(qid: str, spec: Any, limits: Limits, problems: list[Problem]) -> Question | None:
    where = ("questions", qid)
    if not isinstance(spec, dict):
        problems.append(Problem(SOURCE, field_path(*where), f"must be an object with {', '.join(QUESTION_KEYS)}, got {json_type(spec)}"))
        return None
    before = len(problems)
    for key in spec:
        if key not in QUESTION_KEYS:
            problems.append(Problem(SOURCE, field_path(*where, key), f"unknown key (allowed: {', '.join(QUESTION_KEYS)})"))
    if not isinstance(spec.get("type", ""), str):
        problems.append(Problem(SOURCE, field_path(*where, "type"), f"must be one of {', '.join(QUESTION_TYPES)} "
                                                                   f"(got {json_type(spec['type'])})"))
        return None
    kind = spec.get("type")
    if kind not in QUESTION_TYPES:
        got = "missing" if "type" not in spec else f"{kind!r} is not one"
        problems.append(Problem(SOURCE, field_path(*where, "type"), f"must be one of {', '.join(QUESTION_TYPES)} ({got})"))
    instructions = spec.get("instructions")
    if not isinstance(instructions, str) or not instructions.strip():
        got = "missing" if "instructions" not in spec else f"got {json_type(instructions)}" if not isinstance(instructions, str) else "got blank text"
        problems.append(Problem(SOURCE, field_path(*where, "instructions"), f"must be the question as non-blank text ({got})"))
    elif bad := lone_surrogate(instructions):
        problems.append(Problem(SOURCE, field_path(*where, "instructions"), f"holds a lone surrogate ({bad}): it is not Unicode text"))
    criteria = None
    if kind in QUESTION_TYPES:
        criteria = _CRITERIA[kind](spec.get("criteria"), "criteria" in spec, field_path(*where, "criteria"), limits, problems)
    if len(problems) > before:
        return None
    return Question(qid, kind, instructions.strip(), criteria)  # type: ignore[union-attr]


def _noul_criteria(value: Any, given: bool, where: str, limits: Limits, problems: list[Problem]) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict) or not value:
        what = "an empty object" if isinstance(value, dict) else json_type(value)
        problems.append(Problem(SOURCE, where, f"a noul question's criteria are an object {{\"true\": ..., \"false\": ...}} or absent, got {what}"))
        return None
    described: dict[str, str] = {}
    for key, description in value.items():
        if key not in ("true", "false"):
            problems.append(Problem(SOURCE, f"{where}.{key}" if key.isidentifier() and key.isascii() else where,
                                    f"unknown answer {key!r} (a noul question answers true or false)"))
        elif description is not None:
            text = _description(description, f"{where}.{key}", problems)
            if text:
                described[key] = text
    return described or None


def _choice_criteria(value: Any, given: bool, where: str, limits: Limits, problems: list[Problem]) -> Any:
    if not isinstance(value, dict) or not value:
        what = "missing" if not given else "an empty object" if isinstance(value, dict) else json_type(value)
        problems.append(Problem(SOURCE, where, f"a choice question's criteria map each label to a description or null ({what})"))
        return None
    if len(value) < 2:
        problems.append(Problem(SOURCE, where, f"a choice needs at least two labels, got {len(value)}"))
        return None
    if len(value) > limits.max_options:
        problems.append(Problem(SOURCE, where, f"{len(value)} labels; at most {limits.max_options} per question"))
        return None
    options: dict[str, str] = {}
    seen: dict[str, str] = {}
    for label, description in value.items():
        if bad := lone_surrogate(label):
            problems.append(Problem(SOURCE, where, f"label {label!r} holds a lone surrogate ({bad}): it is not Unicode text"))
            continue
        if not label.strip() or label != label.strip() or any(unicodedata.category(ch)[0] == "C" for ch in label):
            problems.append(Problem(SOURCE, where, f"label {label!r} is blank, has leading or trailing spaces, or holds control characters"))
            continue
        same = seen.get(normalise_label(label))
        if same is not None:
            alike = ("are the same number" if number_text(same) is not None and number_text(label) is not None
                     else "are the same label once case, spaces and separators are ignored")
            problems.append(Problem(SOURCE, where, f"duplicate labels: {same!r} and {label!r} {alike}"))
            continue
        seen[normalise_label(label)] = label
        options[label] = "" if description is None else _description(description, where, problems)
    return options


def _score_criteria(value: Any, given: bool, where: str, limits: Limits, problems: list[Problem]) -> Any:
    if not isinstance(value, list) or not value:
        what = "missing" if not given else "an empty list" if isinstance(value, list) else json_type(value)
        problems.append(Problem(SOURCE, where, f"a score question's criteria are a list of {MIN_LEVELS}-{MAX_LEVELS} level descriptions ({what})"))
        return None
    if not MIN_LEVELS <= len(value) <= MAX_LEVELS:
        problems.append(Problem(SOURCE, where, f"{len(value)} levels; a score has {MIN_LEVELS} to {MAX_LEVELS}"))
        return None
    levels = tuple(_description(text, f"{where}[{index}]", problems, required=True) for index, text in enumerate(value))
    return levels


def _description(value: Any, where: str, problems: list[Problem], *, required: bool = False) -> str:
    if not isinstance(value, str) or (required and not value.strip()):
        problems.append(Problem(SOURCE, where, f"must be a description as text, got {json_type(value) if not isinstance(value, str) else 'blank text'}"))
        return ""
    if bad := lone_surrogate(value):
        problems.append(Problem(SOURCE, where, f"the description holds a lone surrogate ({bad}): it is not Unicode text"))
        return ""
    return " ".join(value.split())  # one line in the prompt's catalog


_CRITERIA = {"noul": _noul_criteria, "choice": _choice_criteria, "score": _score_criteria}


def _repeated_key_error(where: str, key: str) -> Exception:
    if re.fullmatch(r"questions(\.[A-Za-z_]\w*|\[.*\])\.criteria", where):
        return _problems([Problem(SOURCE, where, f"duplicate labels: {key!r} appears twice")])
    if where == "questions":
        return _problems([Problem(SOURCE, where, f"question id {key!r} appears twice")])
    return Located(DataError(f"key {key!r} appears twice in the same object"), where)


def _problems(problems: list[Problem]) -> RubricError:
    return RubricError(problems)


# -- the rubric -----------------------------------------------------------------------------------------


def question_set_key(questions: tuple[Question, ...]) -> str:
    """The set's identity: its questions' content in id order (the same set in any order is one set)."""
    return json.dumps(sorted([q.id, q.type, q.instructions, q.criteria] for q in questions), ensure_ascii=False)


def build_question_set(questions: tuple[Question, ...]) -> QuestionSet:
    ordered = sorted(questions, key=lambda q: q.id)
    names = field_names([q.id for q in ordered])
    problems: list[Problem] = []
    fields: dict[str, FieldSpec] = {}
    for question in ordered:
        name = names[question.id]
        try:
            fields[name] = FieldSpec(name=name, **_field_data(question))
        except ValidationError as error:
            for detail in error.errors(include_url=False):
                message = str(detail["msg"]).removeprefix("Value error, ")
                key = "instructions" if message.startswith("question") or detail["loc"][:1] == ("question",) else "criteria"
                problems.append(Problem(SOURCE, field_path("questions", question.id, key), message))
    if problems:
        raise RubricError(problems)
    rubric = independent_rubric(RUBRIC_NAME, fields, instructions=RUBRIC_INSTRUCTIONS)
    return QuestionSet(rubric, dict(names), {q.id: q.type for q in ordered})


def _field_data(question: Question) -> dict[str, Any]:
    if question.type == "noul":
        return predicate_field(question.instructions, question.criteria)
    if question.type == "choice":
        return choice_field(question.instructions, dict(question.criteria))
    return score_field(question.instructions, list(question.criteria))


# -- answers --------------------------------------------------------------------------------------------


def answers_of(decision: Any, request: SystemOneRequest, question_set: QuestionSet) -> dict[str, Any]:
    """The decision as the wire format's `answers`, keyed by question id in the request's order."""
    answers: dict[str, Any] = {}
    for question in request.questions:
        result = decision.fields[question_set.field_of[question.id]]
        probabilities = dict(result.probabilities)
        if question.type == "noul":
            answers[question.id] = {"type": "noul", "noul": probabilities["true"]}
        elif question.type == "choice":
            answers[question.id] = {"type": "choice", "choice": result.value, "probabilities": probabilities,
                                    "confidence": confidence(result)}
        else:
            answers[question.id] = {
                "type": "score", "score": result.expected_value,
                "legend": {str(level): text for level, text in enumerate(question.criteria)},
                "probabilities": probabilities, "confidence": confidence(result),
            }
    return answers


def usage_of(decision: Any) -> dict[str, int]:
    """What the model read (the prefix, the state and every question's row); nothing is generated."""
    return {"input_tokens": tokens_read(decision.stats), "output_tokens": 0}


def located_compile_error(message: str, question_set: QuestionSet) -> str:
    """`questions.<id>.criteria` for a compile error that names a field (`fields.<name>: ...`), else `questions`."""
    match = re.match(r"fields\.(\w+):", message)
    if match:
        for qid, name in question_set.field_of.items():
            if name == match.group(1):
                return field_path("questions", qid, "criteria")
    return "questions"



class SystemOne:
    """The format on the shared admission path (`admission.QuestionSetFormat`)."""

    route = RUBRIC_NAME

    def label(self, built: QuestionSet | None) -> str:
        return RUBRIC_NAME

    def check(self, request: SystemOneRequest) -> None:
        """`model` is ignored: the answer names the model the server has."""

    def key(self, request: SystemOneRequest) -> str:
        return question_set_key(request.questions)

    def build(self, request: SystemOneRequest) -> QuestionSet:
        return build_question_set(request.questions)

    def field(self, request: SystemOneRequest) -> str:
        return "questions"

    def compile_refused(self, error: CompileError, request: SystemOneRequest, built: QuestionSet) -> Exception:
        return Located(error, located_compile_error(str(error), built))

    def payload(self, request: SystemOneRequest) -> Any:
        return request.state

    def input_refused(self, error: InputError, request: SystemOneRequest) -> Exception:
        return Located(error, "state")

    def answer(self, request: SystemOneRequest, built: QuestionSet, decision: Any, answering: Answering) -> dict[str, Any]:
        return {"model": answering.model, "answers": answers_of(decision, request, built), "usage": usage_of(decision)}
