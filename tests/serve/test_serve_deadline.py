"""Every request has a deadline, and the work of a request that is over stops: a request past its deadline is
answered 504 in its route's shape, one whose client left is dropped, and what ran for either (its steps on the
helper threads, its call on the model thread, its rubric's preparation when nobody else waits for it) ends at
its next checkpoint, leaving nothing half prepared. On the real model, over a real server on loopback.

The model thread is held (a job queued on it waits for an event) so that a request is known to be where a test
needs it, on the model thread or behind it, when its deadline passes or its client leaves: the assertions read
counters and the engine's cache, never the clock."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid

import pytest
from serve_client import Client, metric, rubric_folder, running_app, stand_in_engine  # noqa: F401 - fixtures
from typer.testing import CliRunner

from decisionflow.cli import app as cli_app
from decisionflow.runtime.engine import Engine
from decisionflow.serve import Batching, Limits, ServeSettings
from decisionflow.serve.batcher import Cancellation, MicroBatcher, Stopped
from decisionflow.serve.metrics import Metrics
from decisionflow.serve.systemone import build_question_set, parse_request
from decisionflow.spec.yaml_rubric import load_rubric

pytestmark = pytest.mark.model

STATE = "I was charged twice for my order, please refund one of the charges."
STOPPED = "decisionflow_stopped_total"
MODEL_PHASES = ("prefix", "prior", "pass")


def new_question_set(state: str = STATE) -> dict:
    """A question set no engine has seen (its instruction carries a fresh token)."""
    word = uuid.uuid4().hex[:8]
    return {
        "state": state,
        "questions": {
            "refund": {"type": "noul", "instructions": f"Does the customer ask for a refund ({word})"},
            "team": {"type": "choice", "instructions": "Which team handles it",
                     "criteria": {"billing": "charges and invoices", "shipping": "delivery and parcels"}},
        },
    }


def new_schema_request(model: str) -> dict:
    """A `/v1/chat/completions` body whose schema no engine has seen: its rubric is read shared, so preparing
    it compiles, prefills a prefix of its own and reads its content-free prior (question sets read
    independently share one prefix and read their prior in their own pass: their first model phase is a pass)."""
    schema = {"type": "object", "properties": {"refund": {"type": "boolean", "description": f"Refund asked ({uuid.uuid4().hex[:8]})"}},
              "required": ["refund"], "additionalProperties": False}
    return {"model": model, "messages": [{"role": "user", "content": STATE}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "ticket", "schema": schema}}}


def rubric_of(body: dict):
    """The rubric the server builds for a `/v1/systemone` body."""
    return build_question_set(parse_request(body, Limits()).questions).rubric


def hold_model_thread(app) -> threading.Event:
    """Keep the model thread busy until the returned event is set: model calls queue behind it."""
    gate = threading.Event()
    app.state.service.batcher._model_thread.submit(gate.wait, 300)
    return gate


def until(condition, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(0.01)


def scraped(port: int, prefix: str) -> float:
    """`metric` on a connection of its own (uvicorn closes a keep-alive connection left idle for 5 s)."""
    client = Client(port)
    try:
        return metric(client, prefix)
    finally:
        client.close()


def stopped(port: int, *phases: str) -> float:
    return sum(scraped(port, f'{STOPPED}{{phase="{phase}"}}') for phase in phases)


def in_thread(call) -> tuple[threading.Thread, dict]:
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(reply=call()))
    thread.start()
    return thread, out


def post_and_stay(port: int, path: str, body: dict) -> socket.socket:
    """Send a request on a raw connection and leave it open, unread (close it to leave)."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def answers_match(reply_answers: dict, decision, question_set) -> None:
    """`/v1/systemone` answers against the engine's decision of the same set, field by field."""
    for qid, answer in reply_answers.items():
        field = decision.fields[question_set.field_of[qid]]
        if answer["type"] == "noul":
            assert answer["noul"] == pytest.approx(field.probabilities["true"], abs=1e-5)
        else:
            assert answer["probabilities"] == pytest.approx(dict(field.probabilities), abs=1e-5)


# -- the default and the flag --------------------------------------------------------------------------------------


def test_a_server_has_a_deadline_unless_told_otherwise(monkeypatch, rubric_folder):
    assert Limits().request_timeout_s == 60.0
    apps = []

    def serve(app, sock, *, on_started=None, **_):
        apps.append(app)
        on_started()
        sock.close()

    monkeypatch.setattr("decisionflow.cli.serve.load_engine", lambda *a, **k: stand_in_engine())
    monkeypatch.setattr("decisionflow.serve.server.serve", serve)
    for flags, expected in (((), 60.0), (("--request-timeout", "0"), None), (("--request-timeout", "1.5"), 1.5)):
        result = CliRunner().invoke(cli_app, ["serve", "--port", "0", "--rubrics", str(rubric_folder), *flags])
        assert result.exit_code == 0, result.output
        assert apps.pop().state.service.settings.limits.request_timeout_s == expected
    result = CliRunner().invoke(cli_app, ["serve", "--port", "0", "--rubrics", str(rubric_folder), "--request-timeout", "-1"])
    assert result.exit_code == 2 and not apps


# -- the engine's checkpoints --------------------------------------------------------------------------------------


class Halt(Exception):
    pass


def test_a_stopped_call_leaves_nothing_half_prepared_and_the_next_call_does_the_rest(engine, rubric_folder):
    fresh = Engine(engine.loaded)  # no prefix store: every prefix is prefilled, every prior read
    rubric = load_rubric(rubric_folder / "tickets.yaml")
    text = "Where is my parcel? It was due last week."
    asked: list[str] = []

    def stop_before(stop: str):
        def checkpoint(phase: str) -> None:
            asked.append(phase)
            if phase == stop:
                raise Halt(phase)
        return checkpoint

    with pytest.raises(Halt):
        fresh.decide_each(rubric, [text], checkpoint=stop_before("prefix"))
    held = fresh.prepared.peek(rubric)
    assert asked == ["prefix"] and held.prefix is None and held.content_free is None
    assert fresh.prepared.counts.prefixes_prefilled == 0

    with pytest.raises(Halt):
        fresh.decide_each(rubric, [text], checkpoint=stop_before("prior"))
    assert asked[1:] == ["prefix", "prior"] and held.prefix is not None and held.content_free is None

    with pytest.raises(Halt):
        fresh.decide_each(rubric, [text], checkpoint=stop_before("pass"))
    assert len(asked) > 4 and asked[3:-1] == ["prior"] * (len(asked) - 4) and asked[-1] == "pass"
    assert held.content_free is not None

    decision = fresh.decide_each(rubric, [text], checkpoint=stop_before("never"))[0]
    assert fresh.prepared.counts.prefixes_prefilled == 1 and held.prior_source == "decided"
    alone = Engine(engine.loaded).decide(rubric, text)  # prepared in one go, never stopped
    for name, field in decision.fields.items():
        assert field.probabilities == pytest.approx(alone.fields[name].probabilities, abs=1e-6)


# -- the batcher's rule --------------------------------------------------------------------------------------------


class CheckingEngine:
    """Holds each call until released, then asks its checkpoint before a preparation step and a pass."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.ran: list[list] = []

    def decide_each(self, target, payloads, calibration=None, checkpoint=None):
        self.started.set()
        self.release.wait(30)
        checkpoint("prefix")
        checkpoint("pass")
        self.ran.append(list(payloads))
        return [(target, p) for p in payloads]


def stops(metrics: Metrics) -> dict[str, float]:
    return {phase: metrics.registry.get_sample_value(STOPPED, {"phase": phase}) for phase in MODEL_PHASES}


async def eventually(condition, what: str) -> None:
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)
    try:
        await asyncio.wait_for(poll(), 60)
    except TimeoutError:
        raise AssertionError(f"{what} did not happen") from None


def test_a_call_stops_only_when_none_of_its_inputs_is_waited_for():
    async def scenario(leave: tuple[int, ...]):
        engine = CheckingEngine()
        metrics = Metrics()
        batcher = MicroBatcher(engine, Batching(max_wait_ms=50), max_queue=10, metrics=metrics)
        await batcher.start()
        tasks = [asyncio.ensure_future(batcher.decide("g", "rubric", f"text {i}", cost=1)) for i in range(2)]
        await eventually(engine.started.is_set, "the call starting")
        for i in leave:
            tasks[i].cancel()
        await asyncio.wait([tasks[i] for i in leave])  # their requests have stopped waiting
        engine.release.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        await batcher.stop()
        return engine.ran, outcomes, stops(metrics)

    ran, outcomes, phases = asyncio.run(scenario(leave=(0,)))
    assert ran == [["text 0", "text 1"]] and outcomes[1] == ("rubric", "text 1") and not any(phases.values())
    ran, outcomes, phases = asyncio.run(scenario(leave=(0, 1)))
    assert ran == [] and phases == {"prefix": 1, "prior": 0, "pass": 0}
    assert all(isinstance(outcome, asyncio.CancelledError) for outcome in outcomes)


def test_a_preparation_goes_on_while_another_request_waits_for_its_rubric():
    async def scenario():
        engine = CheckingEngine()
        metrics = Metrics()
        batcher = MicroBatcher(engine, Batching(max_wait_ms=50), max_queue=10, metrics=metrics)
        await batcher.start()
        first = asyncio.ensure_future(batcher.decide("g", "rubric", "first", cost=1))
        await eventually(engine.started.is_set, "the call starting")
        with batcher.awaiting("rubric"):  # a second request waits for the same rubric, off the queue
            first.cancel()
            await asyncio.wait([first])
            engine.release.set()
            await eventually(lambda: stops(metrics)["pass"], "the stop before the pass")
        await batcher.stop()
        return stops(metrics)

    assert asyncio.run(scenario()) == {"prefix": 0, "prior": 0, "pass": 1}


def test_a_cancellation_stops_the_step_that_would_begin():
    cancellation = Cancellation()
    cancellation.check("compile")
    cancellation.cancel()
    with pytest.raises(Stopped) as stop:
        cancellation.check("compile")
    assert stop.value.phase == "compile" and cancellation.cancelled


# -- over a real server --------------------------------------------------------------------------------------------


def test_a_request_past_its_deadline_stops_before_its_question_set_is_compiled(engine, rubric_folder, monkeypatch):
    fresh = Engine(engine.loaded)
    with running_app(fresh, rubric_folder, ServeSettings(limits=Limits(request_timeout_s=0.3))) as (app, port):
        service = app.state.service
        entered, gate = threading.Event(), threading.Event()
        find = service.question_sets.find

        def held_find(key):  # the request's own step on a helper thread, held past its deadline
            entered.set()
            gate.wait(120)
            return find(key)

        monkeypatch.setattr(service.question_sets, "find", held_find)
        client = Client(port)
        reply = client.post("/v1/systemone", new_question_set())
        assert entered.is_set()
        assert reply.status == 504, reply.body
        assert reply.body == {"error": {"status": 504, "type": "Timeout", "field": None, "message":
                                        "the request was not answered within 0.3 s (the server's request timeout)"}}
        gate.set()
        until(lambda: stopped(port, "compile") == 1, "the stop before compiling")
        assert stopped(port, "convert", "admit", *MODEL_PHASES) == 0
        assert len(fresh.prepared) == 0  # never compiled
        assert scraped(port, "decisionflow_question_set_preparations_total") == 0  # nor charged to the budget
        assert scraped(port, 'decisionflow_rejected_total{reason="timeout"}') == 1
        assert scraped(port, 'decisionflow_errors_total{route="/v1/systemone",status="504",type="Timeout"}') == 1
        client.close()


def test_a_timed_out_preparation_stops_on_the_model_thread_and_a_prepared_request_is_answered(engine, rubric_folder):
    fresh = Engine(engine.loaded)
    known = new_question_set()
    with running_app(fresh, rubric_folder, ServeSettings(limits=Limits(request_timeout_s=5))) as (app, port):
        batcher = app.state.service.batcher
        probe = Client(port)
        assert probe.post("/v1/systemone", known).status == 200  # prepared: prefix and prior
        prefilled = fresh.prepared.counts.prefixes_prefilled
        slow = new_schema_request(app.state.service.model_name)
        gate = hold_model_thread(app)
        thread, late = in_thread(lambda: Client(port).post("/v1/chat/completions", slow))
        until(lambda: batcher._running, "the new schema's call reaching the model thread")
        thread.join(120)  # its deadline passes while the model thread is held
        assert late["reply"].status == 504 and late["reply"].body["error"]["type"] == "timeout"
        thread, prepared = in_thread(lambda: Client(port).post("/v1/systemone", known))
        until(lambda: batcher.depth == 1, "the prepared request reaching the queue")
        gate.set()
        thread.join(120)
        assert prepared["reply"].status == 200, prepared["reply"].body
        question_set = build_question_set(parse_request(known, Limits()).questions)
        answers_match(prepared["reply"].body["answers"], fresh.decide(question_set.rubric, STATE), question_set)
        # The stop was counted before the prepared request's call began (the model thread runs one call at a time).
        assert stopped(port, "prefix", "prior") == 1 and stopped(port, "pass") == 0
        assert fresh.prepared.counts.prefixes_prefilled == prefilled
        assert scraped(port, "decisionflow_cancelled_total") == 1
        assert scraped(port, 'decisionflow_rejected_total{reason="timeout"}') == 1
        probe.close()


def test_a_client_that_leaves_mid_preparation_frees_the_model_thread(engine, rubric_folder):
    fresh = Engine(engine.loaded)
    with running_app(fresh, rubric_folder) as (app, port):
        batcher = app.state.service.batcher
        probe = Client(port)
        text = "where is my parcel"
        alone = probe.post("/v1/rubrics/tickets/decide", {"text": text}).body
        prefilled = fresh.prepared.counts.prefixes_prefilled
        slow = new_schema_request(app.state.service.model_name)
        gate = hold_model_thread(app)
        leaver = post_and_stay(port, "/v1/chat/completions", slow)
        until(lambda: batcher._running, "the new schema's call reaching the model thread")
        leaver.close()
        until(lambda: scraped(port, 'decisionflow_requests_total{route="/v1/chat/completions",status="499"}') == 1,
              "the server noticing the client left")
        thread, stayer = in_thread(lambda: Client(port).post("/v1/rubrics/tickets/decide", {"text": text}))
        until(lambda: batcher.depth == 1, "the next request reaching the queue")
        gate.set()
        thread.join(120)
        reply = stayer["reply"]
        assert reply.status == 200 and reply.body["value"] == alone["value"]
        assert reply.body["fields"]["team"]["probabilities"] == pytest.approx(alone["fields"]["team"]["probabilities"], abs=1e-5)
        assert stopped(port, "prefix", "prior") == 1
        assert fresh.prepared.counts.prefixes_prefilled == prefilled
        assert scraped(port, "decisionflow_cancelled_total") == 1
        assert Client(port).get("/healthz").body["model_busy_s"] == 0
        probe.close()


def test_a_preparation_another_request_waits_for_is_finished_for_it(engine, rubric_folder):
    fresh = Engine(engine.loaded)
    with running_app(fresh, rubric_folder) as (app, port):
        batcher = app.state.service.batcher
        probe = Client(port)
        first = new_question_set()
        second = {**first, "state": "Where is my parcel? It was due last week."}
        rubric = rubric_of(first)
        gate = hold_model_thread(app)
        leaver = post_and_stay(port, "/v1/systemone", first)
        until(lambda: batcher._running, "the first call reaching the model thread")
        waiting = batcher._awaited[rubric.key]
        thread, stayer = in_thread(lambda: Client(port).post("/v1/systemone", second))
        until(lambda: batcher._awaited[rubric.key] > waiting, "the second request waiting for the same set")
        leaver.close()
        until(lambda: scraped(port, 'decisionflow_requests_total{route="/v1/systemone",status="499"}') == 1,
              "the server noticing the first client left")
        gate.set()
        thread.join(120)
        reply = stayer["reply"]
        assert reply.status == 200, reply.body
        # The first call prepared the set for the second request, and only its own pass was stopped.
        assert stopped(port, "prefix", "prior") == 0 and stopped(port, "pass") == 1
        assert fresh.prepared.peek(rubric).content_free is not None
        question_set = build_question_set(parse_request(second, Limits()).questions)
        answers_match(reply.body["answers"], fresh.decide(rubric, second["state"]), question_set)
        probe.close()


def test_each_route_answers_its_deadline_in_its_own_shape(engine, rubric_folder):
    fresh = Engine(engine.loaded)
    fresh.decide(load_rubric(rubric_folder / "tickets.yaml"), "warm")  # prepared: its request only waits in the queue
    with running_app(fresh, rubric_folder, ServeSettings(limits=Limits(request_timeout_s=3))) as (app, port):
        batcher = app.state.service.batcher
        client = Client(port)
        gate = hold_model_thread(app)
        schema = {"type": "object", "properties": {"refund": {"type": "boolean", "description": uuid.uuid4().hex[:8]}},
                  "required": ["refund"], "additionalProperties": False}
        thread, chat = in_thread(lambda: Client(port).post("/v1/chat/completions", {
            "model": app.state.service.model_name, "messages": [{"role": "user", "content": STATE}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "ticket", "schema": schema}}}))
        until(lambda: batcher._running, "the chat request's call reaching the model thread")
        native = client.post("/v1/rubrics/tickets/decide", {"text": STATE})  # queued behind it
        thread.join(120)
        assert chat["reply"].status == 504
        assert chat["reply"].body == {"error": {"message": "the request was not answered within 3 s (the server's "
                                                "request timeout)", "type": "timeout", "param": None, "code": "timeout"}}
        assert native.status == 504
        assert native.body == {"error": {"status": 504, "type": "Timeout", "field": None, "message":
                                         "the request was not answered within 3 s (the server's request timeout)"}}
        gate.set()
        until(lambda: stopped(port, *MODEL_PHASES) == 1, "the chat request's preparation stopping")
        until(lambda: batcher.busy_s == 0 and batcher.depth == 0, "the model thread going idle")
        # Only the call already on the model thread ran (and stopped); the queued input never began.
        assert scraped(port, "decisionflow_batch_size_count") == 1
        assert scraped(port, "decisionflow_cancelled_total") == 2
        assert scraped(port, 'decisionflow_rejected_total{reason="timeout"}') == 2
        assert scraped(port, 'decisionflow_errors_total{route="/v1/chat/completions",status="504",type="Timeout"}') == 1
        client.close()
