"""OpenAI's Decisions API, answered by deciding: `POST /v1/decisions`.

Code written against the `openai` SDK (`client.decisions.create`) or LangChain's OpenAI decision models
(`langchain_openai.decisions.OpenAIDecisions`, `OpenAIClassifier`) runs unchanged with only its base URL
pointed here. A request asks 1-400 questions about one input; the answer lists one answer per question, in
the question's order.

The request, part by part:
- `model`: the served name (`GET /v1/models`), else 404 `model_not_found`;
- `input`: a string, or a list of items told to the model as one conversation transcript: `system`,
  `developer`, `user` and `assistant` messages (text content, or the text parts each role takes: `input_text`,
  a user's `input_json` written as indented JSON, an assistant's `output_text` and `refusal`), and tool calls
  with their outputs (`function_call` / `function_call_output`, `custom_tool_call` / `custom_tool_call_output`),
  a call written as `tool call: {"name": ..., "args": ...}` (its JSON arguments as an object; a custom tool's
  `input` as text) after the assistant's text, its output as a `tool` message naming the tool. An output
  must answer an earlier call of its kind, by `call_id`;
- `questions`: `predicate` (a yes/no statement), `choice` (2-255 distinct `choices`, each a string or a
  boolean `value` with an optional `description`) and `score` (2-101 ordered `levels`, each a `label` with an
  optional `description`), each with `instructions` (text, or `input_text` / `input_json` parts) and an
  optional `name`;
- `prompt_cache_key`, `prompt_cache_options` (and the parts' `prompt_cache_breakpoint`) are accepted and
  change nothing: every question set's prefix is cached by the engine whatever they say (see `question_sets`);
  `safety_identifier` (at most 64 characters) is accepted and not used. Keys this API does not know are
  accepted and change nothing, as on `/v1/chat/completions`.

Refused with 400 naming the part (`input[2].content[1]`, `questions[3].choices`): images (the engine reads
text), parts a role does not take, an output without its call, a question of another type, a choice with a
string and a boolean that read alike (`"true"` and `true`: the model writes both as `true`), and what a
rubric refuses (blank text, too few or too many answers). A question set the tokenizer cannot tell apart is
a 422, as on `/v1/chat/completions`.

The question set is a rubric read independently (`question_sets`): question i is field i, named from the
question's `name`, else from its content (never its position: see `_field_names`), through
`spec.names.field_names`. A choice with boolean values writes them as JSON (`literals`), so `true` and
`"true"` stay apart and come back with their JSON type; a score is a field 0..n-1 whose level descriptions
carry the level's label and description.

The answer (`Decision`): a predicate's probability of true; a choice's likeliest value, the probability of
every value (in the question's order, values keeping their JSON type) and its confidence; a score's expected
level Σ i·pᵢ, the probability of every level (its index and label) and its confidence (see
`question_sets.confidence`); or `{"type": "refusal"}` for a question whose candidate mass is below the
server's `decisions_refusal_mass` (off by default), the others still answered. `usage.input_tokens` is what
the model read (prefix, input, every question's row), of which `input_tokens_details.cached_tokens` came from
the prefix cache (`cache_write_tokens`: the prefix this request prefilled); nothing is generated.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..errors import CompileError, ContextLengthError, DataError, InputError
from ..spec.kinds import Debias
from ..spec.names import field_names
from ..spec.rubric import MAX_SCORE_LEVELS, FieldSpec, Rubric, label_of, normalise_label
from .admission import Answering
from .body import json_type, lone_surrogate, request_object
from .openai_chat import model_refused
from .question_sets import choice_field, confidence, independent_rubric, predicate_field, prefix_from_cache, score_field
from .question_sets import tokens_read as read_tokens
from .refusals import HttpRefusal, Located, field_path

ROUTE = "/v1/decisions"
RUBRIC_NAME = "decisions"
QUESTION_TYPES = ("predicate", "choice", "score")
MAX_QUESTIONS = 400
MIN_CHOICES, MAX_CHOICES = 2, 255
MIN_LEVELS, MAX_LEVELS = 2, MAX_SCORE_LEVELS
"""A score has 2 to 101 levels: as many as a rubric's score field enumerates."""
SAFETY_IDENTIFIER_CHARS = 64
"""The longest `safety_identifier` accepted (OpenAI's Responses API takes 64 characters)."""
JSON_PART_DEPTH, JSON_PART_VALUES, JSON_PART_BYTES = 32, 10_000, 256 << 10
"""An `input_json` part's bounds, as the API's types state them: container levels, values, compact UTF-8 bytes."""
DEBIAS: Debias | None = None
"""The readout correction of every question (None: the engine's default, `EngineOptions.debias`). The one
place to change it for this route."""

ROLE_PARTS = {
    "user": ("input_text", "input_json"),
    "system": ("input_text",),
    "developer": ("input_text",),
    "assistant": ("output_text", "refusal"),
}
"""The content parts each role's message takes (images aside: the API's user messages take them, this server
reads text)."""
CALLS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}
OUTPUTS = {output: call for call, output in CALLS.items()}
_IMAGE_PARTS = ("input_image", "image_url", "image")


@dataclass(frozen=True)
class Question:
    type: str
    name: str | None
    instructions: str
    choices: tuple[tuple[str | bool, str], ...] = ()
    """A choice's values in order, each with its description ("" for none)."""
    levels: tuple[tuple[str, str], ...] = ()
    """A score's levels, lowest first, each (label, description)."""


@dataclass(frozen=True)
class DecisionRequest:
    model: str
    input: str | list[dict[str, str]]
    """What the engine reads: the text, or the transcript's `{role, content}` messages."""
    questions: tuple[Question, ...]
    safety_identifier: str | None


@dataclass(frozen=True)
class QuestionSet:
    rubric: Rubric
    fields: tuple[str, ...]
    """Question i -> its field's name."""


def refused(message: str, field: str | None) -> Located:
    """A 400 naming the request's part at fault (`input[2].content[1]`, `questions[0].choices`)."""
    return Located(DataError(message), field)


# -- the request ---------------------------------------------------------------------------------------


def parse_decision_request(body: Any) -> DecisionRequest:
    """The request checked part by part; every refusal names where it is."""
    body = request_object(body)
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise refused("`model` is required: the name `GET /v1/models` lists", "model")
    for key in ("prompt_cache_key", "safety_identifier"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise refused(f"`{key}` must be a string, got {json_type(body[key])}", key)
    safety_identifier = body.get("safety_identifier")
    if safety_identifier is not None and len(safety_identifier) > SAFETY_IDENTIFIER_CHARS:
        raise refused(f"`safety_identifier` is {len(safety_identifier)} characters; at most {SAFETY_IDENTIFIER_CHARS}",
                      "safety_identifier")
    options = body.get("prompt_cache_options")
    if options is not None and not isinstance(options, dict):
        raise refused(f"`prompt_cache_options` must be an object, got {json_type(options)}", "prompt_cache_options")
    if "input" not in body:
        raise refused("`input` is required: the text, or the list of messages and tool calls, to judge", "input")
    questions = _questions(body.get("questions"))
    return DecisionRequest(model=model, input=_input(body["input"]), questions=questions,
                           safety_identifier=safety_identifier)


def _text(value: Any, where: str, what: str) -> str:
    """A string that is Unicode text, else refused at `where`."""
    if not isinstance(value, str):
        raise refused(f"{what} must be a string, got {json_type(value)}", where)
    bad = lone_surrogate(value)
    if bad:
        raise refused(f"{what} holds a lone surrogate ({bad}): it is not Unicode text", where)
    return value


def _input(value: Any) -> str | list[dict[str, str]]:
    if isinstance(value, str):
        return _text(value, "input", "`input`")  # blank text is the engine's to refuse, as for any input
    if not isinstance(value, list) or not value:
        what = "an empty list" if isinstance(value, list) else json_type(value)
        raise refused(f"`input` must be text or a non-empty list of messages and tool calls, got {what}", "input")
    messages: list[dict[str, str]] = []
    calls: dict[str, tuple[str, str]] = {}  # call_id -> (the call's item type, the tool's name)
    for index, item in enumerate(value):
        where = field_path("input", index)
        if not isinstance(item, dict):
            raise refused(f"an input item must be an object (a message or a tool call), got {json_type(item)}", where)
        kind = item.get("type", "message")
        if kind == "message":
            role, text = _message(item, where)
            messages.append({"role": role, "content": text})
        elif kind in CALLS:
            call_id = _call_id(item, where)
            if call_id in calls:
                raise refused(f"`call_id` {call_id!r} names an earlier call too: each call needs its own",
                              field_path("input", index, "call_id"))
            name = _text(item.get("name"), field_path("input", index, "name"), "the tool's `name`")
            calls[call_id] = (kind, name)
            line = "tool call: " + json.dumps({"name": name, **_call_arguments(item, kind, index)}, ensure_ascii=False)
            if messages and messages[-1]["role"] == "assistant":
                messages[-1]["content"] += "\n" + line  # the calls an assistant turn makes follow its text
            else:
                messages.append({"role": "assistant", "content": line})
        elif kind in OUTPUTS:
            call_id = _call_id(item, where)
            call = calls.get(call_id)
            if call is None or call[0] != OUTPUTS[kind]:
                earlier = "no earlier item" if call is None else f"an earlier `{call[0]}`, not a `{OUTPUTS[kind]}`"
                raise refused(f"`call_id` {call_id!r} of this `{kind}` names {earlier}: an output answers an earlier "
                              "call of its kind", field_path("input", index, "call_id"))
            output = _parts_text(item.get("output"), field_path("input", index, "output"), ("input_text",), "a tool output")
            messages.append({"role": "tool", "content": f"{call[1]} returned:\n{output}"})
        else:
            got = json.dumps(kind) if isinstance(kind, str) else json_type(kind)
            raise refused(f"an input item's `type` must be `message`, {', '.join(f'`{k}`' for k in (*CALLS, *OUTPUTS))}; "
                          f"got {got}", field_path("input", index, "type"))
    return messages


def _message(item: dict[str, Any], where: str) -> tuple[str, str]:
    role = item.get("role")
    if role not in ROLE_PARTS:
        got = json.dumps(role) if isinstance(role, str) else "missing" if role is None else json_type(role)
        raise refused(f"a message's `role` must be one of {', '.join(ROLE_PARTS)} ({got})", f"{where}.role")
    if "content" not in item:
        raise refused("the message has no `content`", f"{where}.content")
    return role, _parts_text(item["content"], f"{where}.content", ROLE_PARTS[role], f"a {role} message")


def _parts_text(content: Any, where: str, allowed: tuple[str, ...], what: str) -> str:
    """Text content as it is; a list of parts as their texts, one after another on lines of their own."""
    if isinstance(content, str):
        return _text(content, where, "the text")
    if not isinstance(content, list):
        raise refused(f"the content must be text or a list of parts, got {json_type(content)}", where)
    pieces: list[str] = []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _IMAGE_PARTS:
            raise refused(f"an image part (`{kind}`) is not read: decisionflow reads text only, and what is judged "
                          "without its image is not what was asked", at)
        if not isinstance(kind, str):
            raise refused("a content part must be an object with a `type`", at)
        if kind not in allowed:
            takes = ", ".join(f"`{name}`" for name in allowed)
            raise refused(f"a content part of type `{kind}` is not one {what} takes ({takes})", at)
        if kind == "input_json":
            pieces.append(_json_part(part.get("data"), f"{at}.data"))
        else:
            key = "refusal" if kind == "refusal" else "text"
            pieces.append(_text(part.get(key), f"{at}.{key}", f"a `{kind}` part's `{key}`"))
    return "\n".join(pieces)


def _json_part(data: Any, where: str) -> str:
    """An `input_json` part's data (an object or a list of objects) as indented JSON, within the API's bounds."""
    if not (isinstance(data, dict) or (isinstance(data, list) and data and all(isinstance(item, dict) for item in data))):
        raise refused(f"an `input_json` part's `data` is an object or a list of objects, got {json_type(data)}", where)
    depth, values = _json_size(data)
    if depth > JSON_PART_DEPTH or values > JSON_PART_VALUES:
        raise refused(f"an `input_json` part holds at most {JSON_PART_DEPTH} levels of containers and {JSON_PART_VALUES} "
                      f"values, got {depth} and {values}", where)
    compact = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    if len(compact.encode("utf-8", errors="surrogatepass")) > JSON_PART_BYTES:
        raise refused(f"an `input_json` part is at most {JSON_PART_BYTES >> 10} KiB of compact JSON", where)
    bad = lone_surrogate(compact)
    if bad:
        raise refused(f"the JSON holds a lone surrogate ({bad}): it is not Unicode text", where)
    return json.dumps(data, ensure_ascii=False, indent=2)


def _json_size(data: Any) -> tuple[int, int]:
    """(deepest container level, values), walked without recursion (the body parser bounds nesting already)."""
    deepest, values = 0, 0
    pending = [(data, 1)]
    while pending:
        item, depth = pending.pop()
        values += 1
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in item)
    return deepest, values


def _call_id(item: dict[str, Any], where: str) -> str:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise refused("a tool call and its output need a `call_id` (a non-empty string)", f"{where}.call_id")
    return call_id


def _call_arguments(item: dict[str, Any], kind: str, index: int) -> dict[str, Any]:
    """A function call's JSON arguments as an object (as written when they are not JSON); a custom tool's input."""
    if kind == "custom_tool_call":
        return {"input": _text(item.get("input"), field_path("input", index, "input"), "a custom tool call's `input`")}
    arguments = _text(item.get("arguments"), field_path("input", index, "arguments"), "a function call's `arguments`")
    try:
        return {"args": json.loads(arguments)}
    except ValueError:
        return {"args": arguments}


def _questions(value: Any) -> tuple[Question, ...]:
    if not isinstance(value, list) or not value:
        what = "missing" if value is None else "an empty list" if isinstance(value, list) else json_type(value)
        raise refused(f"`questions` must be a list of 1 to {MAX_QUESTIONS} questions ({what})", "questions")
    if len(value) > MAX_QUESTIONS:
        raise refused(f"{len(value)} questions; at most {MAX_QUESTIONS} per request", "questions")
    return tuple(_question(spec, field_path("questions", index)) for index, spec in enumerate(value))


def _question(spec: Any, where: str) -> Question:
    if not isinstance(spec, dict):
        raise refused(f"a question must be an object with a `type`, got {json_type(spec)}", where)
    kind = spec.get("type")
    if kind not in QUESTION_TYPES:
        got = json.dumps(kind) if isinstance(kind, str) else "missing" if kind is None else json_type(kind)
        raise refused(f"a question's `type` must be one of {', '.join(QUESTION_TYPES)} ({got})", f"{where}.type")
    name = spec.get("name")
    if name is not None:
        name = _text(name, f"{where}.name", "a question's `name`")
    if "instructions" not in spec:
        raise refused("the question has no `instructions`", f"{where}.instructions")
    instructions = _parts_text(spec["instructions"], f"{where}.instructions", ("input_text", "input_json"),
                               "a question's instructions").strip()
    if not instructions:
        raise refused("the question's instructions are blank", f"{where}.instructions")
    if kind == "choice":
        return Question(kind, name, instructions, choices=_choices(spec.get("choices"), f"{where}.choices", where))
    if kind == "score":
        return Question(kind, name, instructions, levels=_levels(spec.get("levels"), f"{where}.levels"))
    return Question(kind, name, instructions)


def _choices(value: Any, where: str, question: str) -> tuple[tuple[str | bool, str], ...]:
    if not isinstance(value, list) or not MIN_CHOICES <= len(value) <= MAX_CHOICES:
        what = f"{len(value)} choices" if isinstance(value, list) else "missing" if value is None else json_type(value)
        raise refused(f"a choice question has {MIN_CHOICES} to {MAX_CHOICES} `choices` ({what})", where)
    choices: list[tuple[str | bool, str]] = []
    seen: set[tuple[type, str | bool]] = set()
    alike: dict[str, str | bool] = {}  # `true`/`false` -> the first value written so: a boolean, or a string alike
    for index, choice in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(choice, dict) or "value" not in choice:
            raise refused("a choice is an object with a `value` (and an optional `description`)", at)
        answer = choice["value"]
        if not isinstance(answer, (str, bool)):
            raise refused(f"a choice's `value` is a string or a boolean, got {json_type(answer)}", f"{at}.value")
        if isinstance(answer, str):
            _text(answer, f"{at}.value", "a choice's `value`")
        if (type(answer), answer) in seen:
            raise refused(f"the choice {json.dumps(answer)} is listed twice: each choice must be unique", where)
        seen.add((type(answer), answer))
        written = label_of(answer) if isinstance(answer, bool) else normalise_label(answer)
        other = alike.get(written) if written in ("true", "false") else None
        if other is not None and type(other) is not type(answer):
            text, boolean = (other, answer) if isinstance(other, str) else (answer, other)
            raise refused(f"the choices {json.dumps(text)} (a string) and {json.dumps(boolean)} (a boolean) read alike: "
                          "the model writes both the same way, so it cannot tell them apart; use other words for "
                          "the string", question)
        alike.setdefault(written, answer)
        choices.append((answer, _description(choice.get("description"), f"{at}.description")))
    return tuple(choices)


def _levels(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not MIN_LEVELS <= len(value) <= MAX_LEVELS:
        what = f"{len(value)} levels" if isinstance(value, list) else "missing" if value is None else json_type(value)
        raise refused(f"a score question has {MIN_LEVELS} to {MAX_LEVELS} ordered `levels`, lowest first ({what})", where)
    levels: list[tuple[str, str]] = []
    for index, level in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(level, dict) or "label" not in level:
            raise refused("a level is an object with a `label` (and an optional `description`)", at)
        label = " ".join(_text(level["label"], f"{at}.label", "a level's `label`").split())
        if not label:
            raise refused("a level's `label` is blank", f"{at}.label")
        levels.append((label, _description(level.get("description"), f"{at}.description")))
    return tuple(levels)


def _description(value: Any, where: str) -> str:
    """A description as one line of the question's listing ("" when there is none)."""
    return "" if value is None else " ".join(_text(value, where, "a description").split())


# -- the question set ----------------------------------------------------------------------------------


def question_set_key(questions: tuple[Question, ...]) -> str:
    """The set's identity: every question's content, in order (values keep their JSON type)."""
    return json.dumps([[q.type, q.name, q.instructions, [list(c) for c in q.choices], [list(lv) for lv in q.levels]]
                       for q in questions], ensure_ascii=False)


def build_question_set(questions: tuple[Question, ...]) -> QuestionSet:
    """The rubric read independently that answers `questions`: question i is field i, in order. Every
    problem the rubric finds is reported at once, each naming its question."""
    fields_in_order = _field_names(questions)
    problems: list[tuple[str, str]] = []
    fields: dict[str, FieldSpec] = {}
    for index, (question, name) in enumerate(zip(questions, fields_in_order)):
        try:
            fields[name] = FieldSpec(name=name, **_field_data(question))
        except ValidationError as error:
            for detail in error.errors(include_url=False):
                part = "instructions" if detail["loc"][:1] == ("question",) else {"choice": "choices", "score": "levels"}.get(
                    question.type, "instructions")
                problems.append((field_path("questions", index, part), str(detail["msg"]).removeprefix("Value error, ")))
    if problems:
        (where, message), *more = problems
        more_text = "".join(f"; {at}: {text}" for at, text in more[:5])
        raise refused(message + more_text, where)
    return QuestionSet(independent_rubric(RUBRIC_NAME, fields, debias=DEBIAS), tuple(fields_in_order))


def _field_names(questions: tuple[Question, ...]) -> list[str]:
    """Each question's field name, through `spec.names.field_names`: from its `name`, else from its content
    (`q_` and six hex digits of its digest), never from its position. The name is the key the model reads in
    the question's row and answer, so a key that changed with the question's place (`q_0` alone, `q_12` among
    others) would move its answer: a predicate read 0.56 as `q_0` and 0.69 as `q_12` on the bundled model. A
    name that repeats gets a field of its own (`team`, `team_2`)."""
    ids: list[str] = []
    taken: set[str] = set()
    for question in questions:
        base = question.name if question.name is not None else "q_" + hashlib.sha256(
            question_set_key((question,)).encode("utf-8", errors="surrogatepass")).hexdigest()[:6]
        qid, count = base, 1
        while qid in taken:
            count += 1
            qid = f"{base} {count}"
        taken.add(qid)
        ids.append(qid)
    names = field_names(ids)
    return [names[qid] for qid in ids]


def _field_data(question: Question) -> dict[str, Any]:
    if question.type == "predicate":
        return predicate_field(question.instructions)
    if question.type == "choice":
        options = {label_of(value): description for value, description in question.choices}
        literals = {label_of(value): value for value, _ in question.choices if isinstance(value, bool)}
        return choice_field(question.instructions, options, literals)
    levels = [f"{label} \u2014 {description}" if description else label for label, description in question.levels]
    return score_field(question.instructions, levels)


def located_compile_error(error: CompileError, question_set: QuestionSet) -> Located:
    """A compile error that names a field (`fields.<name>: ...`) said of its question (`questions[3]`)."""
    match = re.match(r"fields\.(\w+):\s*", str(error))
    if match and match.group(1) in question_set.fields:
        index = question_set.fields.index(match.group(1))
        return Located(CompileError(str(error)[match.end():]), field_path("questions", index))
    return Located(error, "questions")


# -- the answer ----------------------------------------------------------------------------------------


def answers_of(decision: Any, request: DecisionRequest, question_set: QuestionSet, *, refusal_mass: float = 0.0) -> list[dict[str, Any]]:
    """The decision as the `Decision` type's `answers`, in question order."""
    answers: list[dict[str, Any]] = []
    for question, name in zip(request.questions, question_set.fields):
        result = decision.fields[name]
        if refusal_mass and (result.candidate_mass is None or result.candidate_mass < refusal_mass):
            answers.append({"type": "refusal", "name": question.name})
            continue
        probabilities = {label: _unit(p) for label, p in result.probabilities.items()}
        if question.type == "predicate":
            answers.append({"type": "predicate", "name": question.name, "probability": probabilities["true"]})
        elif question.type == "choice":
            spec = question_set.rubric.fields[name]
            answers.append({
                "type": "choice", "name": question.name, "choice": spec.json_value(result.value),
                "confidence": _unit(confidence(result)),
                "probabilities": [{"value": value, "probability": probabilities[label_of(value)]}
                                  for value, _ in question.choices],
            })
        else:
            answers.append({
                "type": "score", "name": question.name, "score": result.expected_value,
                "confidence": _unit(confidence(result)),
                "probabilities": [{"value": level, "label": label, "probability": probabilities[str(level)]}
                                  for level, (label, _) in enumerate(question.levels)],
            })
    return answers


def _unit(probability: float) -> float:
    # A renormalised distribution may overshoot 1 in its last bit; clients' types bound it to [0, 1].
    return min(1.0, max(0.0, float(probability)))


def usage_of(decision: Any) -> dict[str, Any]:
    """What the model read (see `question_sets.tokens_read`); the prefix counts as cached when a cache served it."""
    stats = decision.stats
    read = read_tokens(stats)
    cached = stats.prefix_tokens if prefix_from_cache(stats) else 0
    return {"input_tokens": read, "input_tokens_details": {"cached_tokens": cached,
                                                          "cache_write_tokens": stats.prefix_tokens - cached},
            "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": read}


def decision_id(request_id: str) -> str:
    return "decision_" + re.sub(r"[^A-Za-z0-9]", "", request_id)[:48]


class Decisions:
    """The format on the shared admission path (`admission.QuestionSetFormat`)."""

    route = RUBRIC_NAME

    def __init__(self, model: str, *, refusal_mass: float = 0.0) -> None:
        self.model = model
        self.refusal_mass = refusal_mass

    def label(self, built: QuestionSet | None) -> str:
        return RUBRIC_NAME

    def check(self, request: DecisionRequest) -> None:
        if request.model != self.model:
            raise model_refused(request.model, self.model)

    def key(self, request: DecisionRequest) -> str:
        return question_set_key(request.questions)

    def build(self, request: DecisionRequest) -> QuestionSet:
        return build_question_set(request.questions)

    def field(self, request: DecisionRequest) -> str:
        return "questions"

    def compile_refused(self, error: CompileError, request: DecisionRequest, built: QuestionSet) -> Exception:
        return located_compile_error(error, built)

    def payload(self, request: DecisionRequest) -> Any:
        return request.input

    def input_refused(self, error: InputError, request: DecisionRequest) -> Exception:
        kind = "ContextLengthExceeded" if isinstance(error, ContextLengthError) else "InvalidInput"
        error.input_index = None
        return HttpRefusal(400, kind, str(error), field="input")

    def answer(self, request: DecisionRequest, built: QuestionSet, decision: Any, answering: Answering) -> dict[str, Any]:
        return {"id": decision_id(answering.request_id), "object": "decision", "created": int(time.time()),
                "model": answering.model,
                "answers": answers_of(decision, request, built, refusal_mass=self.refusal_mass),
                "usage": usage_of(decision)}
