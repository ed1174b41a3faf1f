"""A LangChain decision model answered by the engine in this process: `DecisionflowDecisions`.

    from langchain_core.decisions import Noul
    from decisionflow.integrations.langchain import DecisionflowDecisions

    decisions = DecisionflowDecisions()          # the bundled model, loaded on first use; or engine=...
    response = decisions.invoke({"state": "I was charged twice.",
                                 "questions": {"refund": Noul(instructions="Does the customer ask for money back?")}})
    response.nouls["refund"].noul                # P(yes)

How a request becomes a decision:
- the question set is a rubric read independently (`reading: independent`, see compiler/independent.py):
  each question is a row of its own after the input, so an answer does not move with the questions
  asked beside it, as LangChain's interface (like every decision API) promises; a new question set costs
  its rows and its content-free prior, never a new prefix;
- a `Noul` is a boolean field (its criteria appended to the question; the answer is P(true)), a `Choice`
  a choice over its labels (their descriptions as the options'), a `Score` an integer scale 0..n-1 whose
  levels carry the criteria. A `Box` locates something in an image, which a text model cannot do: it is
  refused, as is anything else that is not one of the three, naming the question;
- question ids become field names through `spec.names.field_names` over the ids sorted (the mapping the
  HTTP question-set format uses), so the same set in any order is one rubric: one compiled set of rows,
  one content-free prior, the same answers;
- the state is read as `compiler.inputs.render_input` reads any input: a string, a JSON object or array
  (LangChain messages inside it written as `{role, content}` objects), or a conversation (a message, or a
  list of LangChain messages or `{role, content}` objects), told as a transcript. A message's text is its
  text parts joined as LangChain's `message.text` joins them, and its tool calls are written
  after it. The engine reads text only: an image, audio, video or file block anywhere in the state, or a
  message part of any other kind, is refused naming where it is, since judging a message without its
  image would be judging another message;
- usage is what the model read for the request: the rubric's prefix, the input and the question rows
  (`Stats.prefix_tokens + Stats.tokens_prefilled`), nothing generated; the prefix counts as `cache_read` when
  it came from the engine's cache, as `cache_creation` when this request prefilled it.

`ainvoke` runs the engine on a worker thread (`asyncio.to_thread`), so the event loop keeps serving.
Calls into one engine are taken one at a time (a lock per engine), as the server takes them on its one
model thread: passes run side by side would only contend for the same device.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field, PrivateAttr, TypeAdapter, ValidationError, model_validator

from ..compiler.inputs import MAX_NESTING, MAX_VALUES
from ..errors import CompileError, InputError, Problem, RubricError
from ..runtime.model.loading import bundled_gguf
from ..spec.names import field_names
from ..spec.rubric import FieldKind, FieldSpec, Rubric
from ..spec.text import shown

if TYPE_CHECKING:
    from ..runtime.engine import Engine

try:
    from langchain_core.decisions import (
        BaseDecisionModel,
        Box,
        Choice,
        ChoiceAnswer,
        ClassifierResponse,
        Noul,
        NoulAnswer,
        NoulCriteria,
        Question,
        Score,
        ScoreAnswer,
    )
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        ChatMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        is_data_content_block,
    )
except ImportError as error:  # langchain-core before 1.8 has no decision models
    raise ImportError(
        "decisionflow.integrations.langchain needs langchain-core 1.8.1 or later (langchain_core.decisions): "
        "pip install 'decisionflow[clients]'"
    ) from error

__all__ = ["DecisionflowDecisions", "QuestionSet", "decision_input", "question_set"]

PROVIDER = "decisionflow"
BUNDLED_PREFIX = "bundled:"
"""How the bundled model is named (`LoadedModel.name`); a `model` so named loads the bundled model."""
RUBRIC_NAME = "langchain_decisions"
_TEXT_BLOCKS = ("text", "text-plain")
# Provider-shaped media blocks LangChain also passes through (OpenAI's chat and responses formats): their
# type names mean nothing but media.
_PROVIDER_MEDIA = frozenset({"image_url", "input_audio", "input_image", "input_file"})
_QUESTION = TypeAdapter(Question)


# -- the state ------------------------------------------------------------------------------------------


def decision_input(state: Any) -> str | dict[str, Any] | list[Any]:
    """LangChain's state as the engine's input: a string as it is, a message or a list of messages as a
    conversation of `{role, content}` messages, anything else as JSON with every message inside it so
    written. An `InputError` names where a state holds what the engine cannot read (media, bytes, an
    object JSON cannot hold)."""
    if isinstance(state, str):
        return state
    if isinstance(state, BaseMessage):
        return [_message(state, "state")]
    if _is_sequence(state) and state and all(_is_message(item) for item in state):
        return [_message(item, f"state[{index}]") for index, item in enumerate(state)]
    return _json_value(state, "state", 0, [0])


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _is_message(value: Any) -> bool:
    return isinstance(value, BaseMessage) or (isinstance(value, Mapping) and {"role", "content"} <= set(value))


def _message(message: Any, where: str) -> dict[str, Any]:
    """One message as `{role, content}`, its content as text (see the module)."""
    if not isinstance(message, BaseMessage):  # already {role, content}: its content may still be parts
        content = message["content"]
        if isinstance(content, str) or not _is_sequence(content):
            return dict(message)  # render_input checks what it holds
        return {**message, "content": _with_calls(*_parts_text(content, where, ""))}
    if isinstance(message.content, str):
        text, calls = message.content, []
    else:
        text, calls = _parts_text(message.content, where, f" ({message.type} message)")
    if isinstance(message, AIMessage) and not calls:
        # LangChain keeps an AI message's tool calls in `tool_calls`, and in its content parts as well when
        # they are standard blocks: written from the parts when there are some, else from the attribute.
        calls = list(message.tool_calls)
    return {"role": _role(message), "content": _with_calls(text, calls)}


def _with_calls(text: str, calls: list[Any]) -> str:
    """A message's text, then its tool calls, one `tool call: {"name": ..., "args": ...}` line each."""
    lines = ["tool call: " + json.dumps({"name": call.get("name"), "args": call.get("args", {})}, ensure_ascii=False)
             for call in calls]
    return "\n".join(([text] if text.strip() else []) + lines)


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, ToolMessage):
        return "tool"
    if isinstance(message, ChatMessage):
        return message.role
    return message.type


def _parts_text(parts: Sequence[Any], where: str, what: str) -> tuple[str, list[Any]]:
    """A message's text parts joined as `BaseMessage.text` joins them, and its tool-call parts; any other
    part refused by its index."""
    texts: list[str] = []
    calls: list[Any] = []
    for index, part in enumerate(parts):
        if isinstance(part, str):
            texts.append(part)
            continue
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in _TEXT_BLOCKS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "tool_call" and isinstance(part.get("name"), str):
            calls.append(part)
        else:
            got = f"a block of type {kind!r}" if isinstance(kind, str) else shown(part, 40)
            raise InputError(f"{where}{what}, content part {index}: {got}; decisionflow reads a message's text "
                             "parts and tool calls only (no images, audio, video, files or other blocks)")
    return "".join(texts), calls


def _json_value(value: Any, where: str, depth: int, count: list[int]) -> Any:
    """`value` as JSON, messages inside it as `{role, content}`; media, bytes and foreign objects refused
    where they are. Bounded as render_input bounds JSON (depth, values), since a container that holds
    itself or is shared many times over would otherwise recurse or grow without end here first."""
    count[0] += 1
    if count[0] > MAX_VALUES:
        raise InputError(f"the state holds more than {MAX_VALUES} values")
    if isinstance(value, BaseMessage):
        return _message(value, where)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise InputError(f"{where} is bytes, not text: decode it first (e.g. `data.decode('utf-8')`)")
    if depth >= MAX_NESTING:
        raise InputError(f"the state nests lists and objects more than {MAX_NESTING} levels deep")
    if isinstance(value, Mapping):
        kind = _media_kind(value)
        if kind is not None:
            raise InputError(f"{where}: a block of type {kind!r}; decisionflow reads text, not images, audio, video or files")
        return {key: _json_value(item, f"{where}[{shown(key, 40)}]", depth + 1, count) for key, item in value.items()}
    if _is_sequence(value):
        return [_json_value(item, f"{where}[{index}]", depth + 1, count) for index, item in enumerate(value)]
    raise InputError(f"{where}: a {type(value).__name__} is not text, a number, a message, a list or an object")


def _media_kind(value: Mapping[Any, Any]) -> str | None:
    """The block type of a media block (LangChain's standard image, audio, video and file blocks, and the
    provider-shaped ones LangChain passes through), else None. A text-plain block carrying its text is text."""
    kind = value.get("type")
    if not isinstance(kind, str):
        return None
    if kind in _PROVIDER_MEDIA or (kind == "file" and isinstance(value.get("file"), Mapping)):
        return kind
    if kind == "text-plain" and isinstance(value.get("text"), str):
        return None
    return kind if is_data_content_block(dict(value)) else None


def _first_media(value: Any, where: str) -> str | None:
    """Where the first media block inside a question's JSON content is, if there is one."""
    pending = [(value, where)]
    seen = 0
    while pending and seen < MAX_VALUES:
        item, at = pending.pop()
        seen += 1
        if isinstance(item, Mapping):
            if _media_kind(item) is not None:
                return at
            pending.extend((child, f"{at}[{shown(key, 40)}]") for key, child in item.items())
        elif isinstance(item, list):
            pending.extend((child, f"{at}[{index}]") for index, child in enumerate(item))
    return None


# -- the questions --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuestionSet:
    """A request's questions as the rubric that answers them."""

    rubric: Rubric
    questions: dict[str, Noul | Choice | Score]
    """By question id, in the request's order (answers come back in it)."""
    field_of: dict[str, str]
    """Question id -> the rubric's field name."""


def question_set(questions: Mapping[Any, Any]) -> QuestionSet:
    """The rubric read independently that answers `questions` (`Noul`, `Choice`, `Score`, or their wire
    dicts). Every problem is reported in one `RubricError`, each located at `questions[<id>]`."""
    problems: list[Problem] = []
    if not isinstance(questions, Mapping) or not questions:
        got = "an empty mapping" if isinstance(questions, Mapping) else type(questions).__name__
        raise RubricError.one("", "questions", f"must map question ids to at least one question, got {got}")
    typed: dict[str, Noul | Choice | Score] = {}
    for qid, value in questions.items():
        question = _typed_question(qid, value, problems)
        if question is not None:
            typed[qid] = question
    ordered = sorted(typed)
    names = field_names(ordered)
    fields: dict[str, FieldSpec] = {}
    for qid in ordered:
        data = _field_data(qid, typed[qid], problems)
        if data is None:
            continue
        try:
            fields[names[qid]] = FieldSpec(name=names[qid], **data)
        except ValidationError as error:
            for detail in error.errors(include_url=False):
                part = "instructions" if detail["loc"][:1] == ("question",) else "criteria"
                problems.append(Problem("", f"{_where(qid)}.{part}", str(detail["msg"]).removeprefix("Value error, ")))
    if problems:
        raise RubricError(problems)
    rubric = Rubric(name=RUBRIC_NAME, reading="independent", fields=fields)
    return QuestionSet(rubric, typed, {qid: names[qid] for qid in typed})


def _where(qid: str) -> str:
    return f"questions[{shown(qid, 60)}]"


def _typed_question(qid: Any, value: Any, problems: list[Problem]) -> Noul | Choice | Score | None:
    if not isinstance(qid, str):
        problems.append(Problem("", f"questions[{shown(qid, 60)}]", f"a question id is a string, got {type(qid).__name__}"))
        return None
    if isinstance(value, Box) or (isinstance(value, Mapping) and value.get("type") == "box"):
        problems.append(Problem("", _where(qid), "a Box question locates something in an image, which decisionflow "
                                                 "cannot answer: it answers Noul, Choice and Score questions about text"))
        return None
    if isinstance(value, (Noul, Choice, Score)):
        return value
    if isinstance(value, Mapping):
        try:
            return _QUESTION.validate_python(value)
        except ValidationError as error:
            first = error.errors(include_url=False)[0]
            at = "".join(f"[{step!r}]" if isinstance(step, int) else f".{step}" for step in first["loc"][1:])
            problems.append(Problem("", f"{_where(qid)}{at}", f"{first['msg']}; a question is a Noul, a Choice or a Score"))
            return None
    problems.append(Problem("", _where(qid), f"a {type(value).__name__} is not a question decisionflow answers: "
                                             "it answers Noul, Choice and Score questions about text"))
    return None


def _field_data(qid: str, question: Noul | Choice | Score, problems: list[Problem]) -> dict[str, Any] | None:
    criteria = question.criteria.model_dump() if isinstance(question.criteria, NoulCriteria) else question.criteria
    media = (_first_media(question.instructions, f"{_where(qid)}.instructions")
             or _first_media(criteria, f"{_where(qid)}.criteria"))
    if media is not None:
        problems.append(Problem("", media, "a media block; decisionflow reads questions as text"))
        return None
    text = _text(question.instructions)
    if isinstance(question, Noul):
        criteria = question.criteria
        described = [] if criteria is None else [(answer, _description(getattr(criteria, answer)))
                                                 for answer in ("true", "false")]
        said = "; ".join(f"{answer}: {description}" for answer, description in described if description)
        return {"kind": FieldKind.BOOLEAN, "question": f"{text.rstrip()} ({said})" if said else text}
    if isinstance(question, Choice):
        return {"kind": FieldKind.CHOICE, "question": text,
                "options": {label: _description(description) for label, description in question.criteria.items()}}
    return {"kind": FieldKind.SCORE, "question": text, "min": 0, "max": len(question.criteria) - 1,
            "options": {str(level): _description(description) for level, description in enumerate(question.criteria)}}


def _text(content: Any) -> str:
    """A question's instructions as text: text as it is, structured content as its JSON."""
    if isinstance(content, str):
        return content.strip() or content  # a blank question is left for the rubric to refuse as such
    return json.dumps(content, ensure_ascii=False)


def _description(value: Any) -> str:
    """A criterion as one line of the question's listing: text with its spaces folded, other JSON as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return " ".join(value.split())
    return json.dumps(value, ensure_ascii=False)


# -- the answers ----------------------------------------------------------------------------------------


def answers_of(decision: Any, questions: QuestionSet) -> dict[str, NoulAnswer | ChoiceAnswer | ScoreAnswer]:
    """The decision as LangChain's answers, keyed by question id in the request's order."""
    answers: dict[str, NoulAnswer | ChoiceAnswer | ScoreAnswer] = {}
    for qid, question in questions.questions.items():
        result = decision.fields[questions.field_of[qid]]
        probabilities = {label: _unit(p) for label, p in result.probabilities.items()}
        if isinstance(question, Noul):
            answers[qid] = NoulAnswer(type="noul", noul=probabilities["true"])
        elif isinstance(question, Choice):
            answers[qid] = ChoiceAnswer(type="choice", choice=result.value, probabilities=probabilities,
                                        confidence=probabilities[result.value])
        else:
            answers[qid] = ScoreAnswer(
                type="score", score=result.expected_value, legend=dict(enumerate(question.criteria)),
                probabilities={int(level): p for level, p in probabilities.items()},
                confidence=probabilities[str(result.value)],
            )
    return answers


def _unit(probability: float) -> float:
    # A renormalised distribution may overshoot 1 in its last bit; the answer types bound it to [0, 1].
    return min(1.0, max(0.0, float(probability)))


def usage_of(decision: Any) -> dict[str, Any]:
    """What the model read for this request (prefix, input, question rows); nothing is generated."""
    stats = decision.stats
    read = stats.prefix_tokens + stats.tokens_prefilled
    cached = "cache_creation" if stats.prefix_source == "prefill" else "cache_read"
    return {"input_tokens": read, "output_tokens": 0, "total_tokens": read,
            "input_token_details": {cached: stats.prefix_tokens}}


def _relocated(error: CompileError, questions: QuestionSet) -> CompileError:
    """A compile error that names a field (`fields.<name>: ...`) said of the question instead."""
    match = re.match(r"fields\.(\w+):\s*", str(error))
    if match is None:
        return error
    for qid, name in questions.field_of.items():
        if name == match.group(1):
            return CompileError(f"{_where(qid)}.criteria: {str(error)[match.end():]}")
    return error


# -- the model ------------------------------------------------------------------------------------------

_ENGINE_LOCKS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


def _lock_of(engine: Engine) -> threading.Lock:
    with _LOCKS_LOCK:
        lock = _ENGINE_LOCKS.get(engine)
        if lock is None:
            lock = _ENGINE_LOCKS[engine] = threading.Lock()
        return lock


class DecisionflowDecisions(BaseDecisionModel):
    """LangChain's decision model (`Noul`, `Choice` and `Score` questions) answered by a decisionflow engine.

    `DecisionflowDecisions(engine=engine)` answers with an engine already loaded;
    `DecisionflowDecisions(model=...)` (a model folder, a .gguf file or a hub id) or `DecisionflowDecisions()`
    (the bundled model) loads one on first use, with `device` and `dtype` as `Engine.load` takes them.
    """

    model: str = ""
    """The model answering, as `Engine.load` names it (default: the bundled model, `bundled:<file>`)."""
    engine: Any = Field(default=None, exclude=True, repr=False)
    """A `decisionflow.Engine` to answer with (None: load `model` on first use)."""
    device: str = "auto"
    """Where a model loaded on first use goes (`Engine.load`'s `device`)."""
    dtype: str = "auto"
    """The number format of a model loaded on first use (`Engine.load`'s `dtype`)."""

    _loaded: Any = PrivateAttr(default=None)
    _load_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @model_validator(mode="after")
    def _named(self) -> DecisionflowDecisions:
        if self.engine is not None:
            from ..runtime.engine import Engine

            if not isinstance(self.engine, Engine):
                raise ValueError(f"engine: a decisionflow Engine (Engine.load()), got {type(self.engine).__name__}")
            if not self.model:
                self.model = self.engine.loaded.name
        elif not self.model:
            self.model = BUNDLED_PREFIX + bundled_gguf().name
        return self

    @property
    def _provider(self) -> str:
        return PROVIDER

    def get_engine(self) -> Any:
        """The engine answering: the one given, else the one loaded on first use (loaded now if not yet)."""
        if self.engine is not None:
            return self.engine
        with self._load_lock:
            if self._loaded is None:
                from ..runtime.engine import Engine

                target = None if self.model.startswith(BUNDLED_PREFIX) else self.model
                self._loaded = Engine.load(target, device=self.device, dtype=self.dtype)
            return self._loaded

    def _classify(self, state: Any, questions: dict[str, Any]) -> ClassifierResponse:
        asked = question_set(questions)
        payload = decision_input(state)
        engine = self.get_engine()
        with _lock_of(engine):
            try:
                decision = engine.decide(asked.rubric, payload)
            except CompileError as error:
                raise _relocated(error, asked) from None
        return ClassifierResponse(model=self.model, answers=answers_of(decision, asked), usage=usage_of(decision))

    async def _aclassify(self, state: Any, questions: dict[str, Any]) -> ClassifierResponse:
        return await asyncio.to_thread(self._classify, state, questions)
