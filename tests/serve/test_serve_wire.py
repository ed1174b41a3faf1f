"""The server's routes on the real model: the `/v1/systemone` wire format, rubric routes, every refusal."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from serve_client import Client, client, rubric_folder, running_server, server_port  # noqa: F401 - fixtures

from decisionflow.serve import Batching, Limits, ServeSettings
from decisionflow.serve.systemone import build_question_set, field_names, parse_request

pytestmark = pytest.mark.model

STATE = "Subject: charged twice. I was billed twice for my March invoice, please refund the duplicate charge."
QUESTIONS = {
    "is-refund?": {"type": "noul", "instructions": "Does the customer ask for money back",
                   "criteria": {"true": "asks for a refund", "false": "no refund is asked"}},
    "1st team": {"type": "choice", "instructions": "Which team handles it",
                 "criteria": {"billing": "charges and invoices", "shipping": None, "returns": "sending goods back"}},
    "sévérité": {"type": "score", "instructions": "How severe the problem is",
                 "criteria": ["trivial", "minor", "serious", "critical"]},
}


def test_systemone_answers_every_question_in_the_wire_format(client, engine):
    reply = client.post("/v1/systemone", {"state": STATE, "questions": QUESTIONS})
    assert reply.status == 200, reply.body
    body = reply.body
    assert set(body) == {"model", "answers", "usage"}
    assert body["model"] == engine.loaded.name
    assert list(body["answers"]) == list(QUESTIONS)  # keyed by the ids as given, in the request's order
    noul, choice, score = (body["answers"][qid] for qid in QUESTIONS)
    assert set(noul) == {"type", "noul"} and noul["type"] == "noul" and 0.0 < noul["noul"] < 1.0
    assert set(choice) == {"type", "choice", "probabilities", "confidence"} and choice["type"] == "choice"
    assert list(choice["probabilities"]) == ["billing", "shipping", "returns"]
    assert choice["choice"] == max(choice["probabilities"], key=choice["probabilities"].get)
    assert sum(choice["probabilities"].values()) == pytest.approx(1.0)
    assert choice["confidence"] == choice["probabilities"][choice["choice"]]  # the chosen label's probability
    assert set(score) == {"type", "score", "legend", "probabilities", "confidence"}
    assert list(score["probabilities"]) == ["0", "1", "2", "3"]
    assert score["legend"] == {"0": "trivial", "1": "minor", "2": "serious", "3": "critical"}
    assert sum(score["probabilities"].values()) == pytest.approx(1.0)
    assert score["score"] == pytest.approx(sum(int(level) * p for level, p in score["probabilities"].items()))
    assert score["confidence"] == max(score["probabilities"].values())  # the likeliest level's probability
    assert body["usage"]["output_tokens"] == 0
    assert body["usage"]["input_tokens"] > len(STATE.split())


def test_systemone_answers_are_the_engines_on_the_same_question_set(client, engine):
    """Ids map to fields and back: each answer is the engine's own distribution for that question."""
    reply = client.post("/v1/systemone", {"state": STATE, "questions": QUESTIONS})
    question_set = build_question_set(parse_request({"state": STATE, "questions": QUESTIONS}, Limits()).questions)
    decision = engine.decide(question_set.rubric, STATE)
    for qid, answer in reply.body["answers"].items():
        expected = decision.fields[question_set.field_of[qid]]
        if answer["type"] == "noul":
            assert answer["noul"] == pytest.approx(expected.probabilities["true"], abs=1e-5)
        else:
            assert answer["probabilities"] == pytest.approx(expected.probabilities, abs=1e-5)
    assert question_set.rubric.pin_first is False


def test_the_same_questions_in_another_order_get_the_same_answers(client):
    forward = client.post("/v1/systemone", {"state": STATE, "questions": QUESTIONS}).body["answers"]
    backward = client.post("/v1/systemone", {"state": STATE, "questions": dict(reversed(QUESTIONS.items()))}).body["answers"]
    assert list(backward) == list(reversed(QUESTIONS))
    for qid in QUESTIONS:
        assert json.dumps(backward[qid]) == json.dumps(forward[qid]) or backward[qid] == pytest.approx(forward[qid])


def test_a_conversation_and_an_object_are_states_too(client):
    questions = {"refund": QUESTIONS["is-refund?"]}
    conversation = [{"role": "user", "content": "Refund my duplicate charge"}, {"role": "assistant", "content": "Looking"}]
    for state in (conversation, {"subject": "refund", "body": "charged twice"}):
        reply = client.post("/v1/systemone", {"state": state, "questions": questions})
        assert reply.status == 200, reply.body
        assert 0.0 < reply.body["answers"]["refund"]["noul"] < 1.0


def test_question_ids_become_distinct_readable_field_names():
    names = field_names(["is-spam?", "is spam", "1st", "", "ünïcode", "__x__", "a" * 80])
    assert names["is-spam?"] == "is_spam" and names["is spam"] == "is_spam_2"
    assert names["1st"] == "q_1st" and names[""] == "q" and names["ünïcode"] == "unicode" and names["__x__"] == "x"
    assert len(names["a" * 80]) <= 48
    assert len(set(names.values())) == len(names)


def test_the_rubric_route_prints_what_run_json_prints(client, engine, rubric_folder):
    from decisionflow.spec.yaml_rubric import load_rubric

    reply = client.post("/v1/rubrics/sentiment/decide", {"text": "a gorgeous, witty film"})
    assert reply.status == 200, reply.body
    expected = engine.decide(load_rubric(rubric_folder / "sentiment.yaml"), "a gorgeous, witty film").to_dict()
    assert set(reply.body) == set(expected) == {"value", "fields", "stats"}
    assert reply.body["value"] == expected["value"]
    assert reply.body["fields"]["sentiment"]["probabilities"] == pytest.approx(
        expected["fields"]["sentiment"]["probabilities"], abs=1e-5
    )


def test_texts_get_one_result_each_and_a_bad_one_fails_alone(client):
    reply = client.post("/v1/rubrics/tickets/decide", {"texts": ["refund my charge", "   ", "where is my parcel"]})
    assert reply.status == 200, reply.body
    first, bad, last = reply.body["results"]
    assert set(first["value"]) == {"refund", "team"} and set(last["value"]) == {"refund", "team"}
    assert bad["error"]["status"] == 422 and bad["error"]["field"] == "texts[1]" and "empty" in bad["error"]["message"]


def test_listing_health_and_metrics(client):
    listed = client.get("/v1/rubrics").body["rubrics"]
    assert [r["name"] for r in listed] == ["sentiment", "tickets"]
    tickets = listed[1]
    assert [f["name"] for f in tickets["fields"]] == ["refund", "team"]
    assert tickets["fields"][1]["labels"] == ["billing", "shipping"]
    assert tickets["plan"]["forward_passes"] == 1 and tickets["plan"]["rounds"][0]["fields"] == ["refund", "team"]
    health = client.get("/healthz")
    assert health.status == 200 and health.body["status"] == "ok"
    client.post("/v1/rubrics/tickets/decide", {"text": "refund please"})
    metrics = client.get("/metrics")
    assert metrics.status == 200 and metrics.headers["content-type"].startswith("text/plain")
    text = metrics.body
    for name in ("decisionflow_requests_total", "decisionflow_batch_size_bucket", "decisionflow_pass_seconds_bucket",
                 "decisionflow_queue_depth", "decisionflow_requests_in_flight"):
        assert name in text
    assert 'decisionflow_requests_total{route="/v1/rubrics/{name}/decide",status="200"}' in text


LONG_STATE = "please refund my duplicate charge " * 2000  # far beyond the model's 8,192 positions
OK = {"type": "noul", "instructions": "Is it about money"}
BAD_REQUESTS = {
    "malformed JSON": ("/v1/systemone", b'{"state": "x", "questions": {', 400, "body"),
    "empty body": ("/v1/systemone", b"", 400, "body"),
    "not an object": ("/v1/systemone", [1, 2], 400, "body"),
    "body too large": ("/v1/systemone", {"state": "x" * (1 << 20), "questions": {"q": OK}}, 413, "body"),
    "no state": ("/v1/systemone", {"questions": {"q": OK}}, 400, "state"),
    "state of a wrong type": ("/v1/systemone", {"state": 12, "questions": {"q": OK}}, 400, "state"),
    "empty state": ("/v1/systemone", {"state": "  ", "questions": {"q": OK}}, 422, "state"),
    "state over the context": ("/v1/systemone", {"state": LONG_STATE, "questions": {"q": OK}}, 422, "state"),
    "a message without content": ("/v1/systemone", {"state": [{"role": "user"}], "questions": {"q": OK}}, 422, "state"),
    "a list that is no conversation": ("/v1/systemone", {"state": [{"text": "hi"}], "questions": {"q": OK}}, 400, "state"),
    "unknown top-level key": ("/v1/systemone", {"state": "x", "questions": {"q": OK}, "temperature": 0}, 400, "temperature"),
    "no questions": ("/v1/systemone", {"state": "x", "questions": {}}, 422, "questions"),
    "too many questions": ("/v1/systemone", {"state": "x", "questions": {f"q{i}": OK for i in range(33)}}, 422, "questions"),
    "duplicate question ids": ("/v1/systemone", b'{"state": "x", "questions": {"q": {"type": "noul", "instructions": "a"}, '
                               b'"q": {"type": "noul", "instructions": "b"}}}', 422, "questions"),
    "unknown type": ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "multi", "instructions": "a"}}}, 422, "questions.q.type"),
    "no instructions": ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "noul"}}}, 422, "questions.q.instructions"),
    "unknown question key": ("/v1/systemone", {"state": "x", "questions": {"q": {**OK, "weight": 2}}}, 422, "questions.q.weight"),
    "empty choice criteria": ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "choice", "instructions": "a", "criteria": {}}}}, 422, "questions.q.criteria"),
    "empty score criteria": ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "score", "instructions": "a", "criteria": []}}}, 422, "questions.q.criteria"),
    "empty noul criteria": ("/v1/systemone", {"state": "x", "questions": {"q": {**OK, "criteria": {}}}}, 422, "questions.q.criteria"),
    "one label": ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "choice", "instructions": "a", "criteria": {"yes": None}}}}, 422, "questions.q.criteria"),
    "too many options": ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "choice", "instructions": "a",
                         "criteria": {f"label{i}": None for i in range(65)}}}}, 422, "questions.q.criteria"),
    "duplicate labels": ("/v1/systemone", b'{"state": "x", "questions": {"q": {"type": "choice", "instructions": "a", '
                         b'"criteria": {"spam": null, "ham": null, "spam": "again"}}}}', 422, "questions.q.criteria"),
    "labels equal but for case": ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "choice", "instructions": "a",
                                  "criteria": {"Spam": None, "spam": None}}}}, 422, "questions.q.criteria"),
    "eleven score levels": ("/v1/systemone", {"state": "x", "questions": {"q": {"type": "score", "instructions": "a",
                            "criteria": [str(i) for i in range(11)]}}}, 422, "questions.q.criteria"),
    "noul criteria for maybe": ("/v1/systemone", {"state": "x", "questions": {"q": {**OK, "criteria": {"maybe": "?"}}}}, 422, "questions.q.criteria.maybe"),
    "odd id located": ("/v1/systemone", {"state": "x", "questions": {"a.b": {"type": "noul"}}}, 422, 'questions["a.b"].instructions'),
    "unknown rubric": ("/v1/rubrics/nope/decide", {"text": "x"}, 404, "name"),
    "neither text nor texts": ("/v1/rubrics/sentiment/decide", {}, 400, "text"),
    "both text and texts": ("/v1/rubrics/sentiment/decide", {"text": "a", "texts": ["b"]}, 400, "text"),
    "empty texts": ("/v1/rubrics/sentiment/decide", {"texts": []}, 400, "texts"),
    "too many texts": ("/v1/rubrics/sentiment/decide", {"texts": ["a"] * 65}, 400, "texts"),
    "empty text": ("/v1/rubrics/sentiment/decide", {"text": ""}, 422, "text"),
    "unknown route": ("/v1/nothing", {"text": "x"}, 404, "path"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_every_bad_request_gets_a_located_4xx_and_the_server_keeps_serving(client, case):
    path, body, status, field = BAD_REQUESTS[case]
    reply = client.post(path, raw=body) if isinstance(body, bytes) else client.post(path, body)
    assert reply.status == status, reply.body
    error = reply.body["error"]
    assert error["status"] == status and error["field"] == field, error
    assert error["message"] and error["type"]
    after = Client(client.connection.port)
    try:
        good = after.post("/v1/systemone", {"state": "refund please", "questions": {"q": OK}})
        assert good.status == 200, good.body
    finally:
        after.close()


def test_a_full_queue_answers_503_with_retry_after(engine, rubric_folder):
    settings = ServeSettings(limits=Limits(max_queue=2), batching=Batching(max_wait_ms=300))
    with running_server(engine, rubric_folder, settings) as port:
        replies: list = [None] * 6
        start = threading.Barrier(6)

        def send(index: int) -> None:
            client = Client(port)
            start.wait()
            replies[index] = client.post("/v1/rubrics/tickets/decide", {"text": f"refund my order {index}"})
            client.close()

        threads = [threading.Thread(target=send, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        statuses = sorted(reply.status for reply in replies)
        assert 200 in statuses and 503 in statuses, statuses
        for reply in replies:
            if reply.status == 503:
                assert reply.headers["retry-after"] == "1" and reply.body["error"]["type"] == "Unavailable"
        later = Client(port)
        assert later.post("/v1/rubrics/tickets/decide", {"text": "refund please"}).status == 200
        later.close()


def test_a_client_that_leaves_is_dropped_and_the_others_are_answered(engine, rubric_folder):
    settings = ServeSettings(batching=Batching(max_wait_ms=400))  # the leaving request is still queued
    with running_server(engine, rubric_folder, settings) as port:
        probe = Client(port)
        text = "where is my parcel"
        alone = probe.post("/v1/rubrics/tickets/decide", {"text": text}).body
        body = json.dumps({"text": "refund my duplicate charge"}).encode()
        leaver = socket.create_connection(("127.0.0.1", port))
        leaver.sendall(b"POST /v1/rubrics/tickets/decide HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        deadline = time.monotonic() + 30
        while queue_depth(probe) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert queue_depth(probe) == 1, "the leaving request never reached the queue"
        stayer: dict = {}
        thread = threading.Thread(target=lambda: stayer.update(reply=Client(port).post("/v1/rubrics/tickets/decide", {"text": text})))
        thread.start()
        leaver.close()
        thread.join(120)
        reply = stayer["reply"]
        assert reply.status == 200, reply.body
        assert reply.body["value"] == alone["value"]
        assert reply.body["fields"]["team"]["probabilities"] == pytest.approx(alone["fields"]["team"]["probabilities"], abs=1e-5)
        metrics = probe.get("/metrics").body
        cancelled = next(line for line in metrics.splitlines() if line.startswith("decisionflow_cancelled_total"))
        assert float(cancelled.split()[-1]) == 1.0
        assert probe.get("/healthz").status == 200
        probe.close()


def queue_depth(client: Client) -> float:
    line = next(line for line in client.get("/metrics").body.splitlines() if line.startswith("decisionflow_queue_depth "))
    return float(line.split()[-1])
