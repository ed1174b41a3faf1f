"""OpenAI's Chat Completions wire format, answered by deciding: `POST /v1/chat/completions`.

A request asks for a typed answer in one of two ways, and is answered in the same shape OpenAI's API
answers it, so code written against the `openai` SDK (`chat.completions.parse`, `.stream`), instructor,
LangChain or pydantic-ai runs unchanged with only its base URL changed:

- `response_format: {"type": "json_schema", "json_schema": {"name", "schema", "strict"?, "description"?}}`
  -> `choices[0].message.content` holds the JSON object, `finish_reason: "stop"`;
- `tools: [{"type": "function", "function": {"name", "parameters", "description"?}}]` with `tool_choice`
  naming one function (or `"required"` with one tool) -> `choices[0].message.tool_calls[0].function.arguments`,
  `finish_reason: "tool_calls"`.

The schema becomes a rubric (`spec.json_schema`), planned as any rubric: its first property is pinned
(decided alone and written in before the rest). The conversation is rendered by the model's own chat
template as its own turns: the text of every `system` and `developer` message, then the schema's (or
the function's) description, are the rubric's instructions, joined by the catalog of keys and allowed
answers in one system turn; `user` and `assistant` turns follow as given; the answer object is read
after them. Nothing is generated, so `temperature`, `top_p`, `seed`, `max_tokens`,
`max_completion_tokens`, `stop`, `logprobs`, `user`, `metadata` and keys this format does not know are
accepted and change nothing: a decision is the likeliest answer. What decisionflow cannot answer is
refused (400) with a message saying what it answers: plain text, `json_object`, several tools to pick
from, `n` > 1, tool results in the conversation, image, audio and file parts.

Every field's distribution rides along under the top-level key `decisionflow` (`completion.model_extra
["decisionflow"]` in the SDK), which the SDK's own types leave alone.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Iterator

from ..errors import CompileError, ContextLengthError, DataError, InputError
from ..spec.json_schema import SchemaError, SchemaRubric, from_json_schema
from ..spec.text import has_visible
from .admission import Answering, EventStream
from .body import json_type, lone_surrogate, request_object
from .refusals import HttpRefusal, Located, Refusal, field_path
from .settings import Limits

ROUTE = "/v1/chat/completions"
TURN_ROLES = ("user", "assistant")
SYSTEM_ROLES = ("system", "developer")
WHAT_IT_ANSWERS = (
    "decisionflow decides structured outputs: send `response_format` of type `json_schema` with the answer's "
    "schema, or `tools` with `tool_choice` naming one function"
)
_TEXT_PARTS = ("text", "input_text", "output_text", "refusal")


@dataclass(frozen=True)
class ChatRequest:
    model: str
    instructions: str
    """The text of the system and developer messages, in order, then the schema's or the function's description."""
    turns: tuple[dict[str, str], ...]
    """The user and assistant turns, as `{role, content}` with the content as text."""
    schema: dict[str, Any]
    schema_name: str
    schema_field: str
    """Where the schema was sent: `response_format.json_schema.schema` or `tools[i].function.parameters`."""
    tool: str | None
    """The function whose arguments are the answer (None: the answer is the message's content)."""
    stream: bool
    include_usage: bool


def refused(message: str, field: str | None) -> Located:
    """A 400 naming the request's part at fault (`response_format.type`, `messages[2].content[0]`)."""
    return Located(DataError(message), field)


def parse_chat_request(body: Any) -> ChatRequest:
    """The request checked part by part; every refusal names where it is (`messages[1].role`)."""
    body = request_object(body)
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise refused("`model` is required: the name `GET /v1/models` lists", "model")
    n = body.get("n", 1)
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise refused(f"`n` must be a positive integer, got {json.dumps(n)}", "n")
    if n not in (None, 1):
        raise refused(f"`n` is {n}: a decision is the likeliest answer, so there is one choice (n = 1)", "n")
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise refused(f"`stream` must be true or false, got {json_type(stream)}", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise refused(f"`stream_options` must be an object, got {json_type(options)}", "stream_options")
    if "functions" in body or "function_call" in body:
        raise refused("`functions` and `function_call` are the legacy form: send `tools` with `tool_choice`",
                      "functions" if "functions" in body else "function_call")
    system, turns = _conversation(body.get("messages"))
    schema, name, where, description, tool = _answer_schema(body)
    instructions = "\n\n".join(text for text in (*system, description) if text.strip())
    return ChatRequest(model=model, instructions=instructions, turns=tuple(turns), schema=schema, schema_name=name,
                       schema_field=where, tool=tool, stream=bool(stream),
                       include_usage=bool((options or {}).get("include_usage")))


def _conversation(messages: Any) -> tuple[list[str], list[dict[str, str]]]:
    if not isinstance(messages, list) or not messages:
        what = "an empty list" if isinstance(messages, list) else "missing" if messages is None else json_type(messages)
        raise refused(f"`messages` must be a non-empty list of messages ({what})", "messages")
    system: list[str] = []
    turns: list[dict[str, str]] = []
    for index, message in enumerate(messages):
        where = field_path("messages", index)
        if not isinstance(message, dict):
            raise refused(f"a message must be an object with `role` and `content`, got {json_type(message)}", where)
        role = message.get("role")
        if role in ("tool", "function"):
            raise refused(f"a `{role}` message (a tool's result) is not read: decisionflow decides one answer from "
                          "system, developer, user and assistant messages", field_path("messages", index, "role"))
        if role not in (*SYSTEM_ROLES, *TURN_ROLES):
            raise refused(f"`role` must be one of {', '.join((*SYSTEM_ROLES, *TURN_ROLES))}, got "
                          f"{json.dumps(role) if isinstance(role, str) else json_type(role)}", field_path("messages", index, "role"))
        text = _content_text(message, index)
        if role in SYSTEM_ROLES:
            system.append(text)
        else:
            turns.append({"role": role, "content": text})
    if not turns:
        raise refused("the conversation has no user message: there is nothing to decide on", "messages")
    if turns[0]["role"] != "user":
        first = next(i for i, m in enumerate(messages) if m.get("role") in TURN_ROLES)
        raise refused("the conversation begins with an assistant turn: after the system messages, begin with a user message",
                      field_path("messages", first))
    if not any(has_visible(turn["content"]) for turn in turns if turn["role"] == "user"):
        raise refused("every user message is empty: there is nothing to decide on", "messages")
    return system, turns


def _content_text(message: dict[str, Any], index: int) -> str:
    content = message.get("content")
    where = field_path("messages", index, "content")
    if content is None and message.get("role") == "assistant" and message.get("tool_calls"):
        return _tool_calls_text(message["tool_calls"], index)
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        pieces = []
        for part_index, part in enumerate(content):
            part_where = field_path("messages", index, "content", part_index)
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in _TEXT_PARTS:
                piece = part.get(kind if kind == "refusal" else "text")
                if not isinstance(piece, str):
                    raise refused(f"a content part of type `{kind}` needs its text as a string", part_where)
                pieces.append(piece)
            elif isinstance(kind, str):
                raise refused(f"a content part of type `{kind}` is not read: decisionflow reads text only", part_where)
            else:
                raise refused("a content part must be an object with a `type` (`text`)", part_where)
        text = "\n".join(pieces)
    elif content is None:
        raise refused("the message has no `content`", where)
    else:
        raise refused(f"`content` must be text or a list of text parts, got {json_type(content)}", where)
    bad = lone_surrogate(text)
    if bad:
        raise refused(f"the content holds a lone surrogate ({bad}): it is not Unicode text", where)
    return text


def _tool_calls_text(calls: Any, index: int) -> str:
    """An earlier assistant turn that called a function, read as what it wrote: the call's arguments."""
    where = field_path("messages", index, "tool_calls")
    if not isinstance(calls, list):
        raise refused(f"`tool_calls` must be a list, got {json_type(calls)}", where)
    texts = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if not isinstance(arguments, str):
            raise refused("each tool call needs `function.arguments` as a string", where)
        texts.append(arguments)
    return "\n".join(texts)


def _answer_schema(body: dict[str, Any]) -> tuple[dict[str, Any], str, str, str, str | None]:
    """(schema, its name, where it was sent, its description, the function's name or None)."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    forced = _forced_tool(tools, choice) if tools else None
    if forced is None and choice not in (None, "none", "auto") and not tools:
        raise refused("`tool_choice` names a function but the request has no `tools`", "tool_choice")
    if forced is not None:
        index, function = forced
        where = field_path("tools", index, "function", "parameters")
        parameters = function.get("parameters")
        if not isinstance(parameters, dict):
            raise refused("the function needs `parameters`: the JSON schema of its arguments", where)
        return parameters, function["name"], where, _description(function), function["name"]
    response_format = body.get("response_format")
    if response_format is None:
        if tools:
            raise refused("`tool_choice` must name one function (or be \"required\" with one tool): decisionflow "
                          "decides the arguments of the function it is told to call, not whether or which to call",
                          "tool_choice")
        raise refused(f"the request asks for text; {WHAT_IT_ANSWERS}", "response_format")
    if not isinstance(response_format, dict):
        raise refused(f"`response_format` must be an object, got {json_type(response_format)}", "response_format")
    kind = response_format.get("type")
    if kind == "text":
        raise refused(f"`response_format` of type `text` asks for text; {WHAT_IT_ANSWERS}", "response_format.type")
    if kind == "json_object":
        raise refused("`response_format` of type `json_object` asks for any JSON object; give its schema "
                      "(type `json_schema`): decisionflow answers closed sets", "response_format.type")
    if kind != "json_schema":
        raise refused(f"`response_format.type` must be `json_schema`, got {json.dumps(kind) if isinstance(kind, str) else json_type(kind)}; "
                      f"{WHAT_IT_ANSWERS}", "response_format.type")
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict):
        raise refused("`response_format.json_schema` must be an object with `name` and `schema`", "response_format.json_schema")
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        what = "it is missing" if schema is None else f"got {json_type(schema)}"
        raise refused(f"`response_format.json_schema.schema` must be the answer's JSON schema, an object ({what})",
                      "response_format.json_schema.schema")
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip():
        raise refused("`response_format.json_schema.name` must be the schema's name", "response_format.json_schema.name")
    return schema, name, "response_format.json_schema.schema", _description(spec), None


def _forced_tool(tools: Any, choice: Any) -> tuple[int, dict[str, Any]] | None:
    if not isinstance(tools, list):
        raise refused(f"`tools` must be a list, got {json_type(tools)}", "tools")
    functions: list[tuple[int, dict[str, Any]]] = []
    for index, tool in enumerate(tools):
        where = field_path("tools", index)
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise refused("a tool must be `{\"type\": \"function\", \"function\": {...}}`", where)
        name = tool["function"].get("name")
        if not isinstance(name, str) or not name.strip():
            raise refused("the function needs a `name`", field_path("tools", index, "function", "name"))
        functions.append((index, tool["function"]))
    if choice == "required":
        if len(functions) != 1:
            raise refused(f"`tool_choice` \"required\" with {len(functions)} tools leaves the choice of function to the "
                          "model: name one function in `tool_choice` (decisionflow decides arguments, not which tool)",
                          "tool_choice")
        return functions[0]
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if choice.get("type") != "function" or not isinstance(name, str):
            raise refused("`tool_choice` must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")
        found = [entry for entry in functions if entry[1]["name"] == name]
        if not found:
            raise refused(f"`tool_choice` names {name!r}, which is not among the `tools`", "tool_choice.function.name")
        return found[0]
    if choice not in (None, "auto", "none"):
        raise refused("`tool_choice` must be \"none\", \"auto\", \"required\" or name one function", "tool_choice")
    return None


def _description(spec: dict[str, Any]) -> str:
    description = spec.get("description")
    return " ".join(description.split()) if isinstance(description, str) else ""


def schema_key(request: ChatRequest) -> str:
    """A schema's identity as a question set: its JSON as sent (key order kept: the order of `properties` is
    the order of the answer's keys), with its name and the instructions."""
    return json.dumps([request.schema_name, request.instructions, request.schema], ensure_ascii=False,
                      separators=(",", ":"))


# -- answers -----------------------------------------------------------------------------------------


def completion_id(request_id: str) -> str:
    return "chatcmpl-" + re.sub(r"[^A-Za-z0-9]", "", request_id)[:48]


def answer_text(answer: dict[str, Any]) -> str:
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"))


def completion(request: ChatRequest, schema_rubric: SchemaRubric, decision: Any, *, model: str, request_id: str,
               completion_tokens: int, text: str) -> dict[str, Any]:
    """The answer in Chat Completions' shape, with every field's distribution under `decisionflow`."""
    if request.tool is None:
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        finish = "stop"
    else:
        message = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [_tool_call(request, request_id, text)]}
        finish = "tool_calls"
    return {
        "id": completion_id(request_id), "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage(decision, completion_tokens), "decisionflow": extension(schema_rubric, decision),
    }


def chunks(request: ChatRequest, schema_rubric: SchemaRubric, decision: Any, *, model: str, request_id: str,
           completion_tokens: int, text: str) -> Iterator[bytes]:
    """The same answer as server-sent events: the role, the answer, the finish (with the distributions),
    the usage when `stream_options.include_usage` asks for it, then `data: [DONE]`."""
    head = {"id": completion_id(request_id), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    include = {"usage": None} if request.include_usage else {}

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return b"data: " + json.dumps({**head, "choices": choices, **include, **extra}, ensure_ascii=False).encode("utf-8") + b"\n\n"

    if request.tool is None:
        yield event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
        yield event([{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}])
        finish = "stop"
    else:
        call = _tool_call(request, request_id, "")
        yield event([{"index": 0, "delta": {"role": "assistant", "content": None,
                                            "tool_calls": [{"index": 0, **call}]}, "logprobs": None, "finish_reason": None}])
        yield event([{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": text}}]},
                      "logprobs": None, "finish_reason": None}])
        finish = "tool_calls"
    yield event([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish}],
                decisionflow=extension(schema_rubric, decision))
    if request.include_usage:
        yield b"data: " + json.dumps({**head, "choices": [], "usage": usage(decision, completion_tokens)}).encode("utf-8") + b"\n\n"
    yield b"data: [DONE]\n\n"


def _tool_call(request: ChatRequest, request_id: str, arguments: str) -> dict[str, Any]:
    return {"id": "call_" + re.sub(r"[^A-Za-z0-9]", "", request_id)[:24], "type": "function",
            "function": {"name": request.tool, "arguments": arguments}}


def usage(decision: Any, completion_tokens: int) -> dict[str, int]:
    """What the model read (the cached prefix, the conversation and the opener) and the answer's own tokens."""
    prompt = decision.stats.prefix_tokens + decision.stats.input_tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens, "total_tokens": prompt + completion_tokens}


def extension(schema_rubric: SchemaRubric, decision: Any) -> dict[str, Any]:
    """Every field as decided: the JSON path it answers, its value as JSON, its distribution (by label),
    candidate mass, round and method; a multi-label field also names its option."""
    fields: dict[str, Any] = {}
    for name, result in decision.fields.items():
        entry = {"path": schema_rubric.paths[name], **result.to_dict()}
        entry["value"] = schema_rubric.json_value(name, result.value)
        if name in schema_rubric.options:
            entry["option"] = schema_rubric.options[name]
        fields[name] = entry
    stats = decision.stats
    return {"rubric": decision.rubric, "fields": fields,
            "stats": {"forward_passes": stats.forward_passes, "tokens_prefilled": stats.tokens_prefilled,
                      "prefix_tokens": stats.prefix_tokens, "prefix_cache_hit": stats.prefix_cache_hit,
                      "batch_size": stats.batch_size, "timings_ms": stats.timings_ms,
                      # deprecated: the two above under their earlier names
                      "head_tokens": stats.prefix_tokens, "head_cache_hit": stats.prefix_cache_hit}}


# -- errors --------------------------------------------------------------------------------------------


_TYPES = {401: "authentication_error", 403: "permission_error", 429: "rate_limit_error", 500: "server_error",
          503: "server_error", 504: "timeout"}
_CODES = {"NotFound": "not_found", "ModelNotFound": "model_not_found", "PayloadTooLarge": "request_too_large",
          "Unauthorized": "invalid_api_key", "TooManyQuestionSets": "rate_limit_exceeded", "Unavailable": "overloaded",
          "SchemaError": "unsupported_schema", "InternalError": "internal_error", "Timeout": "timeout",
          "RequestTimeout": "timeout", "ContextLengthExceeded": "context_length_exceeded",
          "UnsupportedMediaType": "unsupported_media_type", "MethodNotAllowed": "method_not_allowed"}


def error_body(refusal: Refusal) -> dict[str, Any]:
    """A refusal in OpenAI's error shape, which the SDK turns into its exceptions by status (400
    `BadRequestError`, 401 `AuthenticationError`, 404 `NotFoundError`, 422, 429 `RateLimitError`, 5xx)."""
    message = refusal.message
    if refusal.problems and len(refusal.problems) > 1:
        message += "; " + "; ".join(f"{where}: {text}" if where else text for where, text in refusal.problems[1:6])
    return {"error": {"message": message, "type": _TYPES.get(refusal.status, "invalid_request_error"),
                      "param": refusal.field, "code": _CODES.get(refusal.type)}}


def conversation_refused(error: InputError) -> HttpRefusal:
    """A conversation the engine cannot read, as the 400 OpenAI's API answers (too long: `context_length_exceeded`)."""
    kind = "ContextLengthExceeded" if isinstance(error, ContextLengthError) else "InvalidConversation"
    error.input_index = None
    return HttpRefusal(400, kind, str(error), field="messages")


def model_refused(model: str, served: str) -> HttpRefusal:
    """The 404 for a `model` this server does not answer with (OpenAI's `model_not_found`)."""
    return HttpRefusal(404, "ModelNotFound", f"the model {model!r} does not exist on this server; it answers with "
                       f"{served!r} (GET /v1/models)", field="model")


class OpenAIChat:
    """The format on the shared admission path (`admission.QuestionSetFormat`): a schema with its system text
    is a question set, read into a rubric by `spec.json_schema`."""

    route = "chat"

    def __init__(self, limits: Limits, model: str) -> None:
        self.limits = limits
        self.model = model

    def label(self, built: SchemaRubric | None) -> str | None:
        return None if built is None else f"chat:{built.rubric.name}"

    def check(self, request: ChatRequest) -> None:
        if request.model != self.model:
            raise model_refused(request.model, self.model)

    def key(self, request: ChatRequest) -> str:
        return schema_key(request)

    def build(self, request: ChatRequest) -> SchemaRubric:
        try:
            return from_json_schema(request.schema, name=request.schema_name, instructions=request.instructions,
                                    input_turns=True, max_fields=self.limits.max_schema_fields,
                                    max_options=self.limits.max_schema_options)
        except SchemaError as error:
            raise HttpRefusal(400, "SchemaError", f"{error.path}: {error.problems[0].message}",
                              field=request.schema_field) from None

    def field(self, request: ChatRequest) -> str:
        return request.schema_field

    def compile_refused(self, error: CompileError, request: ChatRequest, built: SchemaRubric) -> Exception:
        return Located(error, request.schema_field)

    def payload(self, request: ChatRequest) -> Any:
        return list(request.turns)

    def input_refused(self, error: InputError, request: ChatRequest) -> Exception:
        return conversation_refused(error)

    def answer(self, request: ChatRequest, built: SchemaRubric, decision: Any, answering: Answering) -> Any:
        text = answer_text(built.answer(decision))
        shaped = dict(model=answering.model, request_id=answering.request_id,
                      completion_tokens=answering.count_tokens(text), text=text)
        if request.stream:
            return EventStream(list(chunks(request, built, decision, **shaped)))
        return completion(request, built, decision, **shaped)
