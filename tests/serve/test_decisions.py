"""`POST /v1/decisions` over a real server on loopback, called by the clients users already have (the `openai`
SDK's `decisions.create`, sync and async; LangChain's `OpenAIDecisions` and `OpenAIClassifier`), on the bundled
model in float32: every answer kind typed as the SDK types it, equal to `Engine.decide` on the converted
question set, an answer that does not move with the questions beside it, and every refusal in OpenAI's error
shape naming the part at fault."""

from __future__ import annotations

import asyncio
import json
import re
import threading

import pytest
from serve_client import Client, metric, running_app, running_server

from decisionflow.runtime.engine import Engine, EngineOptions
from decisionflow.serve import Access, Limits, RubricRegistry, ServeSettings
from decisionflow.serve.decisions import build_question_set, parse_decision_request
from decisionflow.spec.kinds import Debias, Reading

openai = pytest.importorskip("openai", reason="the `clients` extra (openai, instructor, langchain-openai)")
from openai.types.decision import (  # noqa: E402
    AnswerAnswerResourceChoice,
    AnswerAnswerResourcePredicate,
    AnswerAnswerResourceRefusal,
    AnswerAnswerResourceScore,
)

pytestmark = [pytest.mark.model, pytest.mark.filterwarnings("ignore:The class `OpenAI.*` is in beta")]

KEY = "decisions-test-key"
# The route packs a question's row with other rows than a direct call does (the content-free prior, other
# requests): float32 sums them in another order, a few parts in a million. The same request twice can differ
# by as much where the CPU's matrix products do not round the same way on every call (seen on an Intel Xeon
# with AMX: a few parts in a million, now and then).
PASS_ROUNDING = 1e-5
TICKET = "I was charged twice for my March invoice. Please refund the duplicate charge or I will cancel my plan."
QUESTIONS = [
    {"type": "predicate", "name": "refund", "instructions": "Does the customer ask for money back?"},
    {"type": "choice", "name": "team", "instructions": "Which team should handle this request?",
     "choices": [{"value": "billing", "description": "Payment, invoice, or subscription issues."},
                 {"value": "technical", "description": "Product bugs or integration failures."},
                 {"value": "sales"}]},
    {"type": "choice", "name": "spam", "instructions": "Is the message spam?",
     "choices": [{"value": True, "description": "unsolicited advertising"}, {"value": False}, {"value": "maybe"}]},
    {"type": "score", "name": "frustration", "instructions": "How frustrated does the customer appear?",
     "levels": [{"label": "Calm", "description": "Calm and neutral."}, {"label": "Concerned"},
                {"label": "Angry", "description": "Very angry or using strong language."}]},
]
SETTINGS = ServeSettings(limits=Limits(new_question_set_burst=100), access=Access(api_keys=(KEY,)))
"""A budget of new question sets no test here runs out of (the budget itself is the shared path's, tested
through /v1/systemone)."""


@pytest.fixture(scope="module")
def port(engine):
    with running_server(engine, RubricRegistry({}), SETTINGS) as port:
        yield port


@pytest.fixture(scope="module")
def client(port):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


@pytest.fixture(scope="module")
def decided(client, model):
    return client.decisions.create(model=model, input=TICKET, questions=QUESTIONS)


def engine_decides(engine, questions, state):
    """What `Engine.decide` answers for the converted question set (called between requests: the server's model
    thread and this one never run the engine at once)."""
    parsed = parse_decision_request({"model": "m", "input": state, "questions": questions})
    built = build_question_set(parsed.questions)
    decision = engine.decide(built.rubric, parsed.input)
    return {name: decision.fields[field] for name, field in zip([q.get("name") for q in questions], built.fields)}, decision


def test_every_answer_kind_is_typed_and_is_what_the_engine_decides(engine, decided, model):
    assert decided.model == model
    refund, team, spam, frustration = decided.answers  # in question order
    assert isinstance(refund, AnswerAnswerResourcePredicate) and isinstance(team, AnswerAnswerResourceChoice)
    assert isinstance(spam, AnswerAnswerResourceChoice) and isinstance(frustration, AnswerAnswerResourceScore)
    assert [a.name for a in decided.answers] == [q["name"] for q in QUESTIONS]
    fields, decision = engine_decides(engine, QUESTIONS, TICKET)

    assert refund.probability == pytest.approx(fields["refund"].probabilities["true"], abs=PASS_ROUNDING)
    assert [p.value for p in team.probabilities] == ["billing", "technical", "sales"]  # the question's order
    assert {p.value: p.probability for p in team.probabilities} == pytest.approx(fields["team"].probabilities, abs=PASS_ROUNDING)
    assert sum(p.probability for p in team.probabilities) == pytest.approx(1, abs=1e-6)
    assert team.choice == max(team.probabilities, key=lambda p: p.probability).value == fields["team"].value
    assert team.confidence == max(p.probability for p in team.probabilities)
    assert team.choice == "billing"  # the readings are real: the ticket is about an invoice

    # A boolean and a string value stay apart, each with its JSON type.
    assert [p.value for p in spam.probabilities] == [True, False, "maybe"]
    assert [type(p.value) for p in spam.probabilities] == [bool, bool, str]
    by_label = {"true": True, "false": False, "maybe": "maybe"}
    assert {by_label[label]: p for label, p in fields["spam"].probabilities.items()} == pytest.approx(
        {p.value: p.probability for p in spam.probabilities}, abs=PASS_ROUNDING)
    assert spam.choice == by_label[fields["spam"].value] and type(spam.choice) is type(by_label[fields["spam"].value])

    levels = frustration.probabilities
    assert [(p.value, p.label) for p in levels] == [(0, "Calm"), (1, "Concerned"), (2, "Angry")]
    assert frustration.score == pytest.approx(sum(p.value * p.probability for p in levels), abs=1e-9)
    assert frustration.score == pytest.approx(fields["frustration"].expected_value, abs=PASS_ROUNDING)
    assert frustration.confidence == max(p.probability for p in levels)

    usage = decided.usage  # what the model read: the prefix, the input and every question's row
    stats = decision.stats
    assert usage.input_tokens == stats.prefix_tokens + stats.tokens_prefilled == usage.total_tokens
    assert usage.output_tokens == 0 and usage.output_tokens_details.reasoning_tokens == 0
    details = usage.input_tokens_details
    assert details.cached_tokens + details.cache_write_tokens == stats.prefix_tokens
    assert decided.model_extra["object"] == "decision" and decided.model_extra["id"].startswith("decision_")


def test_the_async_client_gets_the_same_answers(port, model, decided):
    async def ask():
        async with openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0) as client:
            return await client.decisions.create(model=model, input=TICKET, questions=QUESTIONS)

    again = asyncio.run(ask())
    assert [(a.type, a.name) for a in again.answers] == [(a.type, a.name) for a in decided.answers]
    assert _answers(again) == pytest.approx(_answers(decided), abs=PASS_ROUNDING)
    # The second request of a question set finds its prefix cached.
    assert again.usage.input_tokens_details.cached_tokens > 0 and again.usage.input_tokens_details.cache_write_tokens == 0


def _answers(decision) -> list:
    """Every answer's numbers in order, for comparing two decisions."""
    numbers = []
    for answer in decision.answers:
        if answer.type == "predicate":
            numbers.append(answer.probability)
        elif answer.type in ("choice", "score"):
            numbers.extend(p.probability for p in answer.probabilities)
    return numbers


def test_an_answer_does_not_move_with_the_questions_beside_it(client, model, decided):
    for index, question in enumerate(QUESTIONS):
        alone = client.decisions.create(model=model, input=TICKET, questions=[question])
        assert _gap(alone.answers[0], decided.answers[index]) < 1e-4, question["name"]
    unnamed = {"type": "predicate", "instructions": "Is the message written in English?"}
    first = client.decisions.create(model=model, input=TICKET, questions=[unnamed]).answers[0]
    last = client.decisions.create(model=model, input=TICKET, questions=[*QUESTIONS, unnamed]).answers[-1]
    assert first.name is None and abs(first.probability - last.probability) < 1e-4
    reordered = client.decisions.create(model=model, input=TICKET, questions=QUESTIONS[::-1])
    assert [a.name for a in reordered.answers] == [q["name"] for q in QUESTIONS[::-1]]
    for answer, together in zip(reordered.answers[::-1], decided.answers):
        assert _gap(answer, together) < 1e-4, answer.name


def _gap(first, second) -> float:
    if first.type == "predicate":
        return abs(first.probability - second.probability)
    assert [p.value for p in first.probabilities] == [p.value for p in second.probabilities]
    return max(abs(a.probability - b.probability) for a, b in zip(first.probabilities, second.probabilities))


def test_systemone_questions_are_read_independently_too(port, engine):
    """/v1/systemone's sets are independent rubrics: an answer alone equals it among others, and usage counts
    the rows the model read."""
    from decisionflow.serve.systemone import build_question_set as systemone_set
    from decisionflow.serve.systemone import parse_request

    http = Client(port)
    auth = {"Authorization": f"Bearer {KEY}"}
    questions = {
        "refund": {"type": "noul", "instructions": "Does the customer ask for money back",
                   "criteria": {"true": "asks for a refund"}},
        "team": {"type": "choice", "instructions": "Which team handles it",
                 "criteria": {"billing": "charges and invoices", "shipping": None}},
        "urgency": {"type": "score", "instructions": "How urgent it is", "criteria": ["can wait", "this week", "today"]},
    }
    together = http.post("/v1/systemone", {"state": TICKET, "questions": questions}, headers=auth)
    assert together.status == 200, together.body
    for qid, question in questions.items():
        alone = http.post("/v1/systemone", {"state": TICKET, "questions": {qid: question}}, headers=auth).body["answers"][qid]
        answer = together.body["answers"][qid]
        if answer["type"] == "noul":
            assert abs(alone["noul"] - answer["noul"]) < 1e-4, qid
        else:
            assert max(abs(alone["probabilities"][k] - p) for k, p in answer["probabilities"].items()) < 1e-4, qid
    built = systemone_set(parse_request({"state": TICKET, "questions": questions}, Limits()).questions)
    assert built.rubric.reading is Reading.INDEPENDENT and built.rubric.pin_first is False
    assert list(built.rubric.fields) == sorted(built.rubric.fields)  # fields in id order, as before
    stats = engine.decide(built.rubric, TICKET).stats
    assert together.body["usage"] == {"input_tokens": stats.prefix_tokens + stats.tokens_prefilled, "output_tokens": 0}
    assert stats.tokens_prefilled > stats.input_tokens  # the rows are counted, not only the state
    http.close()


TRANSCRIPT = [
    {"role": "system", "content": "You are a support agent for an online shop."},
    {"role": "user", "content": [{"type": "input_text", "text": "Where is my order A17? I want a refund if it is lost."},
                                 {"type": "input_json", "data": {"order": "A17", "paid": 42.5}}]},
    {"role": "assistant", "content": [{"type": "output_text", "text": "Let me look it up."}]},
    {"type": "function_call", "call_id": "call_1", "name": "lookup_order", "arguments": '{"order_id": "A17"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": '{"status": "lost in transit"}'},
    {"type": "custom_tool_call", "call_id": "call_2", "name": "refund", "input": "A17 42.50"},
    {"type": "custom_tool_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "refunded"}]},
    {"role": "assistant", "content": "Your parcel was lost; I have refunded you 42.50."},
]
TOOL_QUESTIONS = [
    {"type": "predicate", "name": "refunded", "instructions": "Did the agent call a tool that refunded the customer?"},
    QUESTIONS[1],
]


def test_tool_calls_and_their_outputs_are_read_as_a_transcript(engine, client, model):
    decided = client.decisions.create(model=model, input=TRANSCRIPT, questions=TOOL_QUESTIONS)
    fields, _ = engine_decides(engine, TOOL_QUESTIONS, TRANSCRIPT)
    assert decided.answers[0].probability == pytest.approx(fields["refunded"].probabilities["true"], abs=PASS_ROUNDING)
    assert {p.value: p.probability for p in decided.answers[1].probabilities} == pytest.approx(
        fields["team"].probabilities, abs=PASS_ROUNDING)
    parsed = parse_decision_request({"model": "m", "input": TRANSCRIPT, "questions": TOOL_QUESTIONS})
    assert parsed.input == [
        {"role": "system", "content": "You are a support agent for an online shop."},
        {"role": "user", "content": 'Where is my order A17? I want a refund if it is lost.\n{\n  "order": "A17",\n  "paid": 42.5\n}'},
        {"role": "assistant", "content": 'Let me look it up.\ntool call: {"name": "lookup_order", "args": {"order_id": "A17"}}'},
        {"role": "tool", "content": 'lookup_order returned:\n{"status": "lost in transit"}'},
        {"role": "assistant", "content": 'tool call: {"name": "refund", "input": "A17 42.50"}'},
        {"role": "tool", "content": "refund returned:\nrefunded"},
        {"role": "assistant", "content": "Your parcel was lost; I have refunded you 42.50."},
    ]


@pytest.mark.parametrize(("body", "param", "says"), [
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "look"},
                                            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}]},
     "input[0].content[1]", "image"),
    ({"input": [{"type": "function_call_output", "call_id": "nobody", "output": "done"}]}, "input[0].call_id", "no earlier item"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "custom_tool_call_output", "call_id": "c", "output": "done"}]}, "input[1].call_id", "of its kind"),
    ({"input": [{"role": "system", "content": [{"type": "output_text", "text": "x"}]}]}, "input[0].content[0]",
     "not one a system message takes"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "must be one of"),
    ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type", "`message`"),
    ({"input": []}, "input", "non-empty"),
    ({"questions": [{"type": "box", "instructions": "where"}]}, "questions[0].type", "predicate, choice, score"),
    ({"questions": [{"type": "choice", "instructions": "x", "choices": [{"value": "true"}, {"value": True}]}]},
     "questions[0]", "read alike"),
    ({"questions": [{"type": "choice", "instructions": "x", "choices": [{"value": "a"}, {"value": "a"}]}]},
     "questions[0].choices", "listed twice"),
    ({"questions": [{"type": "choice", "instructions": "x", "choices": [{"value": "a"}]}]}, "questions[0].choices", "2 to 255"),
    ({"questions": [{"type": "choice", "instructions": "x", "choices": [{"value": "Billing"}, {"value": "billing"}]}]},
     "questions[0].choices", "identical after normalisation"),
    ({"questions": [{"type": "choice", "instructions": "x", "choices": [{"value": 1}, {"value": 2}]}]},
     "questions[0].choices[0].value", "a string or a boolean"),
    ({"questions": [{"type": "score", "instructions": "x", "levels": [{"label": str(i)} for i in range(102)]}]},
     "questions[0].levels", "2 to 101"),
    ({"questions": [{"type": "predicate", "instructions": [{"type": "input_image", "image_url": "https://x/y.png"}]}]},
     "questions[0].instructions[0]", "image"),
    ({"questions": [{"type": "predicate", "instructions": "   "}]}, "questions[0].instructions", "blank"),
    ({"questions": [{"type": "predicate", "instructions": "x"}] * 401}, "questions", "at most 400"),
    ({"questions": []}, "questions", "1 to 400"),
    ({"safety_identifier": "x" * 65}, "safety_identifier", "at most 64"),
])
def test_what_is_not_read_is_a_400_naming_the_part(client, model, body, param, says):
    request = {"input": TICKET, "questions": [QUESTIONS[0]], **body}
    with pytest.raises(openai.BadRequestError) as raised:
        client.decisions.create(model=model, **request)
    error = raised.value
    assert error.status_code == 400 and error.param == param, error.body
    assert says in error.body["message"] and error.body["type"] == "invalid_request_error"


def test_a_wrong_key_an_unknown_model_and_a_long_input_are_refused_as_openai_refuses_them(port, client, model):
    stranger = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as raised:
        stranger.decisions.create(model=model, input=TICKET, questions=QUESTIONS)
    assert raised.value.code == "invalid_api_key"
    with pytest.raises(openai.NotFoundError) as raised:
        client.decisions.create(model="gpt-6-luna", input=TICKET, questions=QUESTIONS)
    assert raised.value.code == "model_not_found" and raised.value.param == "model"
    with pytest.raises(openai.BadRequestError) as raised:
        client.decisions.create(model=model, input="please refund me " * 3000, questions=QUESTIONS)
    assert raised.value.code == "context_length_exceeded" and raised.value.param == "input"
    with pytest.raises(openai.BadRequestError) as raised:
        client.decisions.create(model=model, input="   ", questions=QUESTIONS)
    assert raised.value.param == "input" and "empty" in raised.value.body["message"]


def test_cache_options_safety_identifier_and_unknown_keys_change_nothing(client, model, decided):
    again = client.decisions.create(
        model=model, input=TICKET, questions=QUESTIONS, prompt_cache_key="tenant-7",
        prompt_cache_options={"mode": "explicit", "ttl": "30m"}, safety_identifier="user-1234",
        extra_body={"temperature": 0, "metadata": {"a": "b"}})
    assert _answers(again) == pytest.approx(_answers(decided), abs=PASS_ROUNDING)


def test_concurrent_requests_of_one_question_set_share_passes_and_keep_their_own_answers(port, client, model):
    texts = [f"{TICKET} (order {n})" for n in range(6)] + ["Where is my parcel? It has been three weeks.",
                                                          "Your app crashes whenever I open the settings page."]
    alone = [_answers(client.decisions.create(model=model, input=text, questions=QUESTIONS)) for text in texts]
    batched_before = _batched(port)
    results: list = [None] * len(texts)
    start = threading.Barrier(len(texts))

    def ask(index: int) -> None:
        own = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
        start.wait(30)
        results[index] = _answers(own.decisions.create(model=model, input=texts[index], questions=QUESTIONS))

    threads = [threading.Thread(target=ask, args=(index,)) for index in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    for mine, expected in zip(results, alone):
        assert mine == pytest.approx(expected, abs=1e-4)
    assert _batched(port) > batched_before, "no model call carried more than one request"


def _batched(port: int) -> float:
    """Model calls that carried more than one input so far (on a connection of its own: uvicorn closes one left
    idle for 5 s)."""
    http = Client(port)
    try:
        return metric(http, "decisionflow_batch_size_count") - metric(http, 'decisionflow_batch_size_bucket{le="1.0"}')
    finally:
        http.close()


def test_the_request_is_logged_counted_and_named_like_the_other_routes(port, client, model):
    http = Client(port)
    before = metric(http, 'decisionflow_requests_total{route="/v1/decisions",status="200"}')
    raw = client.decisions.with_raw_response.create(model=model, input=TICKET, questions=QUESTIONS,
                                                     extra_headers={"X-Request-ID": "decide-1"})
    assert raw.headers["x-request-id"] == "decide-1" and raw.parse().model_extra["id"] == "decision_decide1"
    assert metric(http, 'decisionflow_requests_total{route="/v1/decisions",status="200"}') == before + 1
    http.close()


def test_a_question_below_the_refusal_mass_is_refused_and_the_others_answered(engine, decided):
    masses = {name: result.candidate_mass for name, result in engine_decides(engine, QUESTIONS, TICKET)[0].items()}
    low, high = sorted(masses.values())[:2]
    assert low < high
    settings = ServeSettings(decisions_refusal_mass=(low + high) / 2)
    with running_server(engine, RubricRegistry({}), settings) as port:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        answers = client.decisions.create(model=decided.model, input=TICKET, questions=QUESTIONS).answers
    refused = [q["name"] for q, answer in zip(QUESTIONS, answers) if isinstance(answer, AnswerAnswerResourceRefusal)]
    assert refused == [name for name, mass in masses.items() if mass == low]
    kept = [a for a in answers if not isinstance(a, AnswerAnswerResourceRefusal)]
    assert len(kept) == len(QUESTIONS) - 1
    for answer in kept:
        assert _gap(answer, decided.answers[[q["name"] for q in QUESTIONS].index(answer.name)]) < 1e-6


def test_a_question_set_over_the_row_limit_is_refused_naming_questions_on_both_routes(engine):
    fresh = Engine(engine.loaded)
    with running_app(fresh, RubricRegistry({}), ServeSettings(limits=Limits(max_question_set_row_tokens=100))) as (app, port):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError) as raised:
            client.decisions.create(model=app.state.service.model_name, input=TICKET, questions=QUESTIONS)
        assert raised.value.param == "questions"
        assert "at most 100 (max_question_set_row_tokens)" in raised.value.body["message"]
        http = Client(port)
        reply = http.post("/v1/systemone", {"state": TICKET, "questions": {
            f"q{i}": {"type": "noul", "instructions": f"Is it about topic {i}"} for i in range(8)}})
        assert reply.status == 400 and reply.body["error"]["field"] == "questions", reply.body
        assert "(max_question_set_row_tokens)" in reply.body["error"]["message"]
        assert len(fresh.prepared) == 0 and len(app.state.service.question_sets) == 0  # nothing cached
        http.close()


def test_the_budget_of_new_sets_and_the_deadline_answer_in_openais_shape(engine, decided):
    fresh = Engine(engine.loaded)
    settings = ServeSettings(limits=Limits(new_question_set_burst=1, new_question_sets_per_minute=0))
    with running_server(fresh, RubricRegistry({}), settings) as port:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        client.decisions.create(model=decided.model, input=TICKET, questions=QUESTIONS[:1])
        client.decisions.create(model=decided.model, input="another input", questions=QUESTIONS[:1])  # a set known
        with pytest.raises(openai.RateLimitError) as raised:
            client.decisions.create(model=decided.model, input=TICKET, questions=QUESTIONS[1:2])
        assert raised.value.code == "rate_limit_exceeded" and raised.value.param == "questions"
        assert raised.value.response.headers["retry-after"]
    with running_server(engine, RubricRegistry({}), ServeSettings(limits=Limits(request_timeout_s=1e-9))) as port:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError) as raised:
            client.decisions.create(model=decided.model, input=TICKET, questions=QUESTIONS)
        assert raised.value.status_code == 504 and raised.value.code == "timeout"


@pytest.mark.slow
def test_400_questions_are_answered_and_401_refused(engine):
    """The format's most. Rows of 400 questions are read in several passes; the readout correction is left out
    here so the set is read once, not also for its content-free prior."""
    plain = Engine(engine.loaded, options=EngineOptions(debias=Debias.NONE))
    questions = [{"type": "predicate", "name": str(index), "instructions": "Q?"} for index in range(400)]
    # About 12,000 row tokens: far beyond the default row limit, and more than a minute on 2 busy cores.
    settings = ServeSettings(limits=Limits(max_question_set_row_tokens=1 << 16, request_timeout_s=None))
    with running_app(plain, RubricRegistry({}), settings) as (app, port):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=600)
        model = app.state.service.model_name
        decided = client.decisions.create(model=model, input="refund me", questions=questions)
        assert len(decided.answers) == 400 and all(isinstance(a, AnswerAnswerResourcePredicate) for a in decided.answers)
        assert [a.name for a in decided.answers] == [str(index) for index in range(400)]
        assert all(0 < a.probability < 1 for a in decided.answers)
        with pytest.raises(openai.BadRequestError) as raised:
            client.decisions.create(model=model, input="refund me", questions=[*questions, questions[0]])
        assert raised.value.param == "questions"


# -- LangChain's OpenAI decision models, pointed here ---------------------------------------------------------------


def test_langchain_openai_decisions_reads_the_answers(port, model, decided):
    decisions_module = pytest.importorskip("langchain_openai.decisions")
    lc = decisions_module.OpenAIDecisions(model=model, api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    questions = {
        "refund": decisions_module.Predicate(instructions=QUESTIONS[0]["instructions"]),
        "team": decisions_module.Choice(instructions=QUESTIONS[1]["instructions"],
                                        choices={c["value"]: c.get("description") for c in QUESTIONS[1]["choices"]}),
        "spam": decisions_module.Choice(instructions=QUESTIONS[2]["instructions"],
                                        choices={c["value"]: c.get("description") for c in QUESTIONS[2]["choices"]}),
        "frustration": decisions_module.Score(instructions=QUESTIONS[3]["instructions"], levels=[
            decisions_module.Level(**level) for level in QUESTIONS[3]["levels"]]),
    }
    response = lc.invoke({"input": TICKET, "questions": questions})
    assert response.model == model and response.request_id
    refund, team, spam, frustration = decided.answers
    assert response.predicates["refund"].probability == pytest.approx(refund.probability, abs=PASS_ROUNDING)
    assert response.choices["team"].choice == team.choice
    assert response.choices["spam"].probabilities == pytest.approx({p.value: p.probability for p in spam.probabilities}, abs=PASS_ROUNDING)
    assert set(response.choices["spam"].probabilities) == {True, False, "maybe"}
    assert response.scores["frustration"].score == pytest.approx(frustration.score, abs=PASS_ROUNDING)
    assert response.scores["frustration"].legend == {0: "Calm", 1: "Concerned", 2: "Angry"}
    assert response.usage.input_tokens > 0 and response.usage.output_tokens == 0
    later = asyncio.run(lc.ainvoke({"input": TICKET, "questions": questions}))
    assert later.predicates["refund"].probability == pytest.approx(refund.probability, abs=PASS_ROUNDING)


def test_langchain_openai_classifier_sends_messages_and_tool_calls_natively(engine, port, model):
    pytest.importorskip("langchain_openai.decisions")
    from langchain_core.decisions import Choice, Noul, Score
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_openai.decisions import OpenAIClassifier
    from langchain_openai.decisions._classifier_input import _to_classifier_input, _to_classifier_questions

    classifier = OpenAIClassifier(model=model, api_key=KEY, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    state = [HumanMessage("Where is my order A17?"),
             AIMessage("", tool_calls=[{"id": "call_9", "name": "lookup_order", "args": {"order_id": "A17"}}]),
             ToolMessage('{"status": "delivered"}', tool_call_id="call_9"),
             AIMessage("It was delivered yesterday.")]
    questions = {"delivered": Noul(instructions="Was the order delivered?", criteria={"true": "the tool says delivered"}),
                 "team": Choice(instructions="Which team handles it?", criteria={"shipping": "parcels", "billing": None}),
                 "tone": Score(instructions="How polite is the agent?", criteria=["rude", "neutral", "polite"])}
    response = classifier.invoke({"state": state, "questions": questions})
    assert set(response.answers) == set(questions)
    sent = _to_classifier_questions(questions)
    fields, decision = engine_decides(engine, sent, _to_classifier_input(state))
    assert response.nouls["delivered"].noul == pytest.approx(fields["delivered"].probabilities["true"], abs=PASS_ROUNDING)
    assert response.choices["team"].probabilities == pytest.approx(fields["team"].probabilities, abs=PASS_ROUNDING)
    assert response.scores["tone"].score == pytest.approx(fields["tone"].expected_value, abs=PASS_ROUNDING)
    assert response.usage["input_tokens"] == decision.stats.prefix_tokens + decision.stats.tokens_prefilled


def test_the_docs_example_prints_what_the_docs_say(port, capsys):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "decisions.md").read_text(encoding="utf-8")
    section = text.split("## OpenAI's Decisions API over HTTP", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    printed = re.search(r"prints `(.*?)`", section).group(1)
    code = code.replace("http://127.0.0.1:8000/v1", f"http://127.0.0.1:{port}/v1").replace('"secret"', repr(KEY))
    exec(compile(code, "docs/decisions.md", "exec"), {"__name__": "docs_example"})
    assert capsys.readouterr().out.strip() == printed


# -- the question set, without a model ------------------------------------------------------------------------------


def test_the_converted_question_set_is_a_plain_independent_rubric():
    parsed = parse_decision_request({"model": "m", "input": TICKET, "questions": [*QUESTIONS, QUESTIONS[0],
                                                                                 {"type": "predicate", "instructions": "Q?"}]})
    built = build_question_set(parsed.questions)
    rubric = built.rubric
    assert rubric.reading is Reading.INDEPENDENT and rubric.instructions == "" and rubric.debias is None
    assert built.fields[:5] == ("refund", "team", "spam", "frustration", "refund_2") and tuple(rubric.fields) == built.fields
    # An unnamed question is keyed by its content, not its place: the same key alone as among others.
    alone = build_question_set(parse_decision_request({"model": "m", "input": TICKET, "questions": [
        {"type": "predicate", "instructions": "Q?"}]}).questions)
    assert built.fields[5] == alone.fields[0] and built.fields[5].startswith("q_")
    spam = rubric.fields["spam"]
    assert spam.options == {"true": "unsolicited advertising", "false": "", "maybe": ""}
    assert spam.literals == {"true": True, "false": False}
    frustration = rubric.fields["frustration"]
    assert (frustration.min, frustration.max) == (0, 2)
    assert frustration.options == {"0": "Calm \u2014 Calm and neutral.", "1": "Concerned",
                                   "2": "Angry \u2014 Very angry or using strong language."}
    assert rubric.fields["refund"].kind.value == "boolean" and rubric.fields["team"].options["sales"] == ""


def test_json_parts_are_bounded_as_the_types_say():
    deep: dict = {}
    inner = deep
    for _ in range(40):
        inner["x"] = {}
        inner = inner["x"]
    for data, says in ((deep, "levels"), ({"v": list(range(10_001))}, "values"), ([1, 2], "a list of objects")):
        with pytest.raises(Exception) as raised:
            parse_decision_request({"model": "m", "questions": [QUESTIONS[0]],
                                    "input": [{"role": "user", "content": [{"type": "input_json", "data": data}]}]})
        assert raised.value.field == "input[0].content[0].data" and says in str(raised.value)
    assert json.loads(parse_decision_request({"model": "m", "questions": [QUESTIONS[0]], "input": [
        {"role": "user", "content": [{"type": "input_json", "data": [{"a": 1}, {"b": [True, None]}]}]}]}).input[0]["content"]) \
        == [{"a": 1}, {"b": [True, None]}]
