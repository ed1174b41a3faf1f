"""`POST /v1/chat/completions` over a real server on loopback, called by the real clients users already
have (the `openai` SDK, instructor, LangChain), on the bundled model: a JSON schema is decided, its answer
equals `Engine.decide` on the converted rubric, and every refusal is OpenAI's error shape and status."""

from __future__ import annotations

import enum
import json
import threading
from typing import Literal, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field
from serve_client import Client, rubric_folder, running_server, server_port  # noqa: F401 - fixtures

from decisionflow.serve import Access, Batching, Limits, ServeSettings
from decisionflow.spec.json_schema import from_json_schema

openai = pytest.importorskip("openai", reason="the `clients` extra (openai, instructor, langchain-openai)")

pytestmark = pytest.mark.model

SYSTEM = "You triage customer support tickets."
TICKET_TEXT = "I was charged twice for my pro plan. Refund the duplicate charge today or I cancel."
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TICKET_TEXT}]


class Team(str, enum.Enum):
    billing = "billing"
    shipping = "shipping"
    returns = "returns"


class Level(enum.IntEnum):
    low = 1
    high = 2


class Customer(BaseModel):
    tier: Literal["free", "pro", "enterprise"] = Field(description="The customer's plan")
    churn_risk: bool = Field(description="Whether the customer may leave")


class Ticket(BaseModel):
    """Triage one ticket."""

    team: Team = Field(description="Which team handles it")
    kind: Literal["question", "complaint"]
    refund: bool = Field(description="Whether a refund is asked for")
    severity: int = Field(ge=0, le=9, description="How severe it is")
    escalate: Optional[bool] = Field(default=None, description="Whether a human must review it")
    level: Level = Field(description="The support level")
    customer: Customer
    tags: set[Literal["urgent", "legal"]] = Field(description="Labels that apply")


class Notes(BaseModel):
    summary: str
    urgent: bool


@pytest.fixture(scope="module")
def client(server_port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server_port}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def strict(model_class: type[BaseModel]) -> dict:
    from openai.lib._parsing._completions import type_to_response_format_param

    return type_to_response_format_param(model_class)["json_schema"]["schema"]


@pytest.fixture(scope="module")
def expected(engine, client, model) -> dict:
    """What `Engine.decide` answers for the converted rubric and the same conversation (decided before any
    request: the server's model thread and this one never run the engine at once)."""
    schema_rubric = from_json_schema(strict(Ticket), name="Ticket", instructions=SYSTEM, input_turns=True)
    return schema_rubric.answer(engine.decide(schema_rubric, MESSAGES[1:]))


def test_parse_with_a_pydantic_model_gives_what_the_engine_decides(client, model, expected):
    completion = client.chat.completions.parse(model=model, messages=MESSAGES, response_format=Ticket)
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    parsed = choice.message.parsed
    assert isinstance(parsed, Ticket) and isinstance(parsed.team, Team) and isinstance(parsed.level, Level)
    assert isinstance(parsed.customer, Customer) and isinstance(parsed.tags, set)
    assert choice.message.parsed == Ticket.model_validate(expected)
    assert json.loads(choice.message.content) == expected and list(json.loads(choice.message.content)) == list(Ticket.model_fields)
    assert completion.model == model and completion.id.startswith("chatcmpl-")


def test_every_fields_distribution_rides_under_one_extension_key(client, model, engine):
    completion = client.chat.completions.create(model=model, messages=MESSAGES,
                                                response_format=openai.lib._parsing._completions.type_to_response_format_param(Ticket))
    extension = completion.model_extra["decisionflow"]
    fields = extension["fields"]
    assert set(fields) == {"team", "kind", "refund", "severity", "escalate", "level", "customer_tier",
                           "customer_churn_risk", "tags_urgent", "tags_legal"}
    assert fields["customer_tier"]["path"] == "customer.tier" and fields["team"]["round"] == 0
    assert fields["tags_legal"]["path"] == "tags[]" and fields["tags_legal"]["option"] == "legal"
    answer = json.loads(completion.choices[0].message.content)
    assert answer["tags"] == [tag for tag in ("urgent", "legal") if fields[f"tags_{tag}"]["value"] is True]
    assert answer["level"] in (1, 2) and fields["level"]["value"] == answer["level"]
    for field in fields.values():
        assert sum(field["probabilities"].values()) == pytest.approx(1.0)
        assert 0 < field["candidate_mass"] <= 1
    assert fields["escalate"]["value"] == answer["escalate"] and set(fields["escalate"]["probabilities"]) == {"true", "false", "null"}
    assert fields["severity"]["value"] == answer["severity"] and "expected_value" in fields["severity"]
    usage = completion.usage
    assert usage.completion_tokens == len(engine.view.encode(completion.choices[0].message.content))
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens and usage.prompt_tokens > 100
    assert extension["stats"]["forward_passes"] >= 2


def test_a_forced_function_call_answers_its_arguments(client, model, expected):
    tool = openai.pydantic_function_tool(Ticket)
    completion = client.chat.completions.parse(model=model, messages=MESSAGES, tools=[tool],
                                               tool_choice={"type": "function", "function": {"name": "Ticket"}})
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "Ticket" and call.id.startswith("call_")
    assert call.function.parsed_arguments == Ticket.model_validate(expected)
    required = client.chat.completions.create(model=model, messages=MESSAGES, tools=[tool], tool_choice="required")
    assert json.loads(required.choices[0].message.tool_calls[0].function.arguments) == expected


def test_streaming_with_the_sdks_helper(client, model, expected, server_port):
    with client.chat.completions.stream(model=model, messages=MESSAGES, response_format=Ticket) as stream:
        events = list(stream)
        final = stream.get_final_completion()
    kinds = [event.type for event in events]
    assert "content.done" in kinds and final.choices[0].message.parsed == Ticket.model_validate(expected)
    # The extension rides on the finishing chunk (the helper's final completion does not keep it: openai.md).
    finishing = [e.chunk for e in events if e.type == "chunk" and e.chunk.choices and e.chunk.choices[0].finish_reason]
    assert finishing and finishing[-1].model_extra["decisionflow"]["fields"]["team"]["value"] == expected["team"]
    body = {"model": model, "messages": MESSAGES, "stream": True, "stream_options": {"include_usage": True},
            "response_format": openai.lib._parsing._completions.type_to_response_format_param(Ticket)}
    raw = Client(server_port).post("/v1/chat/completions", body)
    assert raw.status == 200 and raw.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in raw.body.split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == json.dumps(expected, separators=(",", ":"))


def test_streaming_a_forced_function_call(client, model, expected):
    tool = openai.pydantic_function_tool(Ticket)
    with client.chat.completions.stream(model=model, messages=MESSAGES, tools=[tool],
                                        tool_choice={"type": "function", "function": {"name": "Ticket"}}) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.choices[0].message.tool_calls[0].function.parsed_arguments == Ticket.model_validate(expected)


def test_instructor_in_its_default_mode(client, model, expected):
    instructor = pytest.importorskip("instructor")
    answer = instructor.from_openai(client).chat.completions.create(model=model, messages=MESSAGES,
                                                                    response_model=Ticket, max_retries=0)
    assert answer.model_dump() == Ticket.model_validate(expected).model_dump()  # instructor answers its own subclass


def test_langchain_with_structured_output(model, expected, server_port):
    chat_openai = pytest.importorskip("langchain_openai").ChatOpenAI
    llm = chat_openai(model=model, base_url=f"http://127.0.0.1:{server_port}/v1", api_key="unused", max_retries=0)
    for method in ("json_schema", "function_calling"):
        answer = llm.with_structured_output(Ticket, method=method).invoke(MESSAGES)
        assert answer.model_dump() == Ticket.model_validate(expected).model_dump(), method


def test_a_repeated_schema_pays_no_preparation(client, model):
    class Repeated(BaseModel):
        urgent: bool
        topic: Literal["billing", "delivery"]

    first = client.chat.completions.parse(model=model, messages=MESSAGES, response_format=Repeated)
    # The system text is the rubric's instructions: the same schema and system text are one question set.
    second = client.chat.completions.parse(model=model, messages=[MESSAGES[0], {"role": "user", "content": "Where is my parcel?"}],
                                           response_format=Repeated)
    other_system = client.chat.completions.parse(model=model, messages=[{"role": "user", "content": "Where is my parcel?"}],
                                                 response_format=Repeated)
    assert not first.model_extra["decisionflow"]["stats"]["prefix_cache_hit"]
    assert second.model_extra["decisionflow"]["stats"]["prefix_cache_hit"]
    assert "prefix_prefill" not in second.model_extra["decisionflow"]["stats"]["timings_ms"]
    assert not other_system.model_extra["decisionflow"]["stats"]["prefix_cache_hit"]


def test_the_answer_keeps_each_schemas_own_key_order(client, model):
    urgent, topic = {"type": "boolean"}, {"type": "string", "enum": ["billing", "delivery"]}
    for properties in ({"urgent": urgent, "topic": topic}, {"topic": topic, "urgent": urgent}):
        completion = client.chat.completions.create(model=model, messages=MESSAGES, response_format={
            "type": "json_schema", "json_schema": {"name": "order", "schema": {"type": "object", "properties": properties}}})
        assert list(json.loads(completion.choices[0].message.content)) == list(properties)


def bad_request(client, model, **overrides):
    arguments = {"model": model, "messages": MESSAGES, **overrides}
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(**arguments)
    error = raised.value
    assert error.status_code == 400 and error.type == "invalid_request_error"
    return error


def test_an_open_ended_property_is_refused_by_name(client, model):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.parse(model=model, messages=MESSAGES, response_format=Notes)
    error = raised.value
    assert error.param == "response_format.json_schema.schema" and error.code == "unsupported_schema"
    assert error.body["message"].startswith("summary: a string without `enum` is open-ended")


@pytest.mark.parametrize(("overrides", "param", "says"), [
    ({}, "response_format", "asks for text"),
    ({"response_format": {"type": "text"}}, "response_format.type", "asks for text"),
    ({"response_format": {"type": "json_object"}}, "response_format.type", "give its schema"),
    ({"n": 2, "response_format": {"type": "json_schema", "json_schema": {"name": "T", "schema": strict(Ticket)}}}, "n",
     "one choice"),
    ({"tools": [{"type": "function", "function": {"name": "a", "parameters": strict(Ticket)}},
                {"type": "function", "function": {"name": "b", "parameters": strict(Ticket)}}]}, "tool_choice",
     "not whether or which to call"),
    ({"tools": [{"type": "function", "function": {"name": "a", "parameters": strict(Ticket)}},
                {"type": "function", "function": {"name": "b", "parameters": strict(Ticket)}}], "tool_choice": "required"},
     "tool_choice", "name one function"),
    ({"tools": [{"type": "function", "function": {"name": "a", "parameters": strict(Notes)}}],
      "tool_choice": {"type": "function", "function": {"name": "a"}}}, "tools[0].function.parameters", "summary:"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "Look:"},
                                                {"type": "image_url", "image_url": {"url": "data:,"}}]}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "T", "schema": strict(Ticket)}}},
     "messages[0].content[1]", "part of type `image_url` is not read"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42", "tool_call_id": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "T", "schema": strict(Ticket)}}},
     "messages[1].role", "tool's result"),
    ({"messages": [{"role": "system", "content": "Be brief."}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "T", "schema": strict(Ticket)}}},
     "messages", "no user message"),
])
def test_forms_decisionflow_does_not_answer_are_bad_requests_naming_why(client, model, overrides, param, says):
    error = bad_request(client, model, **overrides)
    assert error.param == param and says in error.body["message"]


def test_an_unknown_model_is_not_found_and_the_served_one_is_listed(client, model):
    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.parse(model="gpt-4o", messages=MESSAGES, response_format=Ticket)
    assert raised.value.code == "model_not_found" and raised.value.param == "model"
    assert client.models.retrieve(model).id == model
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")


def test_sampling_options_and_unknown_keys_change_nothing(client, model, expected):
    completion = client.chat.completions.parse(
        model=model, messages=MESSAGES, response_format=Ticket, temperature=1.7, top_p=0.2, seed=7, max_tokens=3,
        max_completion_tokens=3, user="someone", metadata={"k": "v"}, stop=["}"], extra_body={"not_a_key": [1, 2]})
    assert completion.choices[0].message.parsed == Ticket.model_validate(expected)


def test_a_conversation_too_long_for_the_context_is_a_bad_request(client, model):
    error = bad_request(client, model, messages=[{"role": "user", "content": "refund " * 9000}],
                        response_format={"type": "json_schema", "json_schema": {"name": "T", "schema": strict(Ticket)}})
    assert error.code == "context_length_exceeded" and error.param == "messages"


def test_keys_budget_and_body_limit_answer_in_openais_shape(engine, rubric_folder):
    limits = Limits(new_question_set_burst=1, new_question_sets_per_minute=0.01, max_body_bytes=200_000)
    settings = ServeSettings(limits=limits, access=Access(api_keys=("secret-key-0123456789",)))
    with running_server(engine, rubric_folder, settings) as port:
        base = f"http://127.0.0.1:{port}/v1"
        with pytest.raises(openai.AuthenticationError) as raised:
            openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).chat.completions.parse(
                model="m", messages=MESSAGES, response_format=Ticket)
        assert raised.value.code == "invalid_api_key" and raised.value.body["type"] == "authentication_error"
        with pytest.raises(openai.AuthenticationError) as listed:
            openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
        assert listed.value.code == "invalid_api_key"
        client = openai.OpenAI(base_url=base, api_key="secret-key-0123456789", max_retries=0)
        model = client.models.list().data[0].id

        class FirstNew(BaseModel):
            spam: bool

        class SecondNew(BaseModel):
            ham: bool

        client.chat.completions.parse(model=model, messages=MESSAGES, response_format=FirstNew)
        with pytest.raises(openai.RateLimitError) as limited:
            client.chat.completions.parse(model=model, messages=MESSAGES, response_format=SecondNew)
        assert int(limited.value.response.headers["retry-after"]) >= 1
        assert limited.value.code == "rate_limit_exceeded" and limited.value.param == "response_format.json_schema.schema"
        client.chat.completions.parse(model=model, messages=MESSAGES, response_format=FirstNew)  # prepared: never charged
        with pytest.raises(openai.APIStatusError) as too_large:
            client.chat.completions.parse(model=model, messages=[{"role": "user", "content": "x" * 300_000}],
                                          response_format=Ticket)
        assert too_large.value.status_code == 413 and too_large.value.code == "request_too_large"


def test_concurrent_requests_with_one_schema_share_passes(engine, rubric_folder):
    settings = ServeSettings(batching=Batching(max_wait_ms=400))
    with running_server(engine, rubric_folder, settings) as port:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        model = client.models.list().data[0].id
        client.chat.completions.parse(model=model, messages=MESSAGES, response_format=Ticket)  # prepared first
        texts = ["My parcel never came.", "Refund my duplicate charge.", "How do I return shoes?", "Invoice is wrong."]
        results: list = [None] * len(texts)

        def ask(index: int) -> None:
            results[index] = client.chat.completions.parse(
                model=model, messages=[{"role": "user", "content": texts[index]}], response_format=Ticket)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        sizes = [r.model_extra["decisionflow"]["stats"]["batch_size"] for r in results]
        assert max(sizes) >= 2, sizes
        for text, result in zip(texts, results):
            alone = from_json_schema(strict(Ticket), name="Ticket", input_turns=True)
            assert result.choices[0].message.parsed == Ticket.model_validate(alone.answer(
                engine.decide(alone, [{"role": "user", "content": text}]))), text


@pytest.mark.parametrize(("status", "kind", "type_", "code"), [
    (400, "SchemaError", "invalid_request_error", "unsupported_schema"), (401, "Unauthorized", "authentication_error", "invalid_api_key"),
    (404, "ModelNotFound", "invalid_request_error", "model_not_found"), (413, "PayloadTooLarge", "invalid_request_error", "request_too_large"),
    (422, "CompileError", "invalid_request_error", None), (429, "TooManyQuestionSets", "rate_limit_error", "rate_limit_exceeded"),
    (503, "Unavailable", "server_error", "overloaded"), (500, "InternalError", "server_error", "internal_error"),
])
def test_every_refusal_has_openais_error_shape(status, kind, type_, code):
    from decisionflow.serve.openai_chat import error_body
    from decisionflow.serve.refusals import Refusal

    body = error_body(Refusal(status, kind, "why", "where", problems=(("where", "why"), ("there", "also"))))
    assert body == {"error": {"message": "why; there: also", "type": type_, "param": "where", "code": code}}


HOSTILE = [
    b"[]", b"null", b'"text"', b"{}", b'{"model": 3}', b'{"model": "m", "messages": "hi"}',
    b'{"model": "m", "messages": [3]}', b'{"model": "m", "messages": [{"role": 7, "content": "x"}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": {"a": 1}}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": [7]}]}',
    b'{"model": "m", "messages": [{"role": "assistant", "content": null, "tool_calls": 5}], "response_format": {}}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "response_format": []}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": 5}}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": {}, "tool_choice": "required"}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "tool_choice": {"type": "function", "function": 3}}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": true, "stream": "yes"}',
    b'{"model": "m", "model": "n"}', b'{"model": "m", "messages": [{"role": "user", "content": "\\ud800"}]}',
]


@pytest.mark.parametrize("raw", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_bodies_are_answered_4xx_in_openais_shape(server_port, raw):
    reply = Client(server_port).post("/v1/chat/completions", raw=raw)
    assert 400 <= reply.status < 500, reply.body
    assert set(reply.body["error"]) == {"message", "type", "param", "code"}


json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 200), st.floats(allow_nan=False, allow_infinity=False),
                         st.text(max_size=8))
schemas = st.recursive(
    st.fixed_dictionaries({}, optional={"type": st.sampled_from(["string", "integer", "number", "boolean", "null",
                                                                 "object", "array", ["string", "null"], "nope"]),
                                        "enum": st.lists(json_scalars, max_size=5), "const": json_scalars,
                                        "minimum": st.integers(-3, 3), "maximum": st.integers(-3, 200),
                                        "multipleOf": st.one_of(st.integers(-1, 5), st.floats(0.1, 3)),
                                        "$ref": st.sampled_from(["#", "#/$defs/x", "#/properties", "http://x"])}),
    lambda inner: st.one_of(
        st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(st.text(max_size=6), inner, max_size=3)}),
        st.fixed_dictionaries({"type": st.just("array"), "items": inner}),
        st.fixed_dictionaries({"anyOf": st.lists(inner, max_size=3)}),
        st.fixed_dictionaries({"allOf": st.lists(inner, max_size=2)}),
    ),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=schemas)
def test_generated_schemas_are_decided_or_refused_never_a_server_failure(server_port, model, schema):
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "generated", "schema": schema}}}
    reply = Client(server_port).post("/v1/chat/completions", body)
    assert reply.status == 200 or 400 <= reply.status < 500, reply.body
