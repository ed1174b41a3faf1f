"""What a server lets its operator see: a request id on every answer, one JSON log line per request, 500s
logged with their traceback (and nothing of it sent), status codes counted right, the queue wait, the
question-set cache and the process in /metrics; and an event loop that stays free while bodies are parsed."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from pathlib import Path

import pytest
from serve_client import Client, metric, rubric_folder, running_app  # noqa: F401 - fixtures

from decisionflow.serve import Batching, Limits, ServeSettings
from decisionflow.serve import app as app_module
from decisionflow.serve.logs import LOGGER_NAME, JsonLines

SPAM = {"spam": {"type": "noul", "instructions": "Is the message spam"},
        "topic": {"type": "choice", "instructions": "What is it about", "criteria": {"money": None, "delivery": None}}}
HEX_ID = re.compile(r"[0-9a-f]{32}")


class Lines(logging.Handler):
    """Every record of the server's logger, formatted as the server writes it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonLines())
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))

    def of(self, request_id: str, message: str = "request") -> list[dict]:
        deadline = time.monotonic() + 5  # the line is written once the answer has been sent
        while time.monotonic() < deadline:
            found = [line for line in self.lines if line.get("request_id") == request_id and line["message"] == message]
            if found:
                return found
            time.sleep(0.01)
        return []


@pytest.fixture(scope="module")
def served(engine, rubric_folder):
    """One server for the module, its app, and the lines its logger writes (at INFO)."""
    with running_app(engine, rubric_folder) as (app, port):
        logger = logging.getLogger(LOGGER_NAME)
        lines, level = Lines(), logger.level
        logger.addHandler(lines)
        logger.setLevel(logging.INFO)
        try:
            yield app, port, lines
        finally:
            logger.removeHandler(lines)
            logger.setLevel(level)


@pytest.fixture(autouse=True)
def listening(request):
    """Keep the module's handler on the logger at INFO: starting another server reconfigures logging."""
    if "served" not in request.fixturenames:
        yield
        return
    lines = request.getfixturevalue("served")[2]
    logger = logging.getLogger(LOGGER_NAME)
    if lines not in logger.handlers:
        logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    yield


@pytest.fixture
def client(served):
    connection = Client(served[1])
    yield connection
    connection.close()


# -- request ids -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/v1/rubrics/tickets/decide", {"text": "refund please"}),
    ("POST", "/v1/rubrics/nope/decide", {"text": "x"}),
    ("POST", "/v1/systemone", {"state": "x"}),
    ("GET", "/v1/nothing", None),
    ("GET", "/metrics", None),
    ("GET", "/healthz", None),
])
def test_every_answer_carries_the_clients_request_id_or_a_new_one(client, method, path, body):
    mine = client.request(method, path, body, headers={"X-Request-ID": "trace-4f2a:7.1"})
    assert mine.headers["x-request-id"] == "trace-4f2a:7.1"
    for odd in ("", "x" * 129, "has space", "semi;colon", "quote\"d"):
        reply = client.request(method, path, body, headers={"X-Request-ID": odd})
        assert HEX_ID.fullmatch(reply.headers["x-request-id"]), odd
    fresh = [client.request(method, path, body).headers["x-request-id"] for _ in range(2)]
    assert all(HEX_ID.fullmatch(value) for value in fresh) and fresh[0] != fresh[1]


# -- the request log ----------------------------------------------------------------------------------------------


def test_each_request_is_one_json_log_line(served, client):
    _, _, lines = served
    reply = client.post("/v1/rubrics/tickets/decide", {"text": "where is my parcel"}, headers={"X-Request-ID": "line-1"})
    assert reply.status == 200
    (line,) = lines.of("line-1")
    assert line["level"] == "INFO" and line["logger"] == "decisionflow.serve"
    assert line["method"] == "POST" and line["route"] == "/v1/rubrics/{name}/decide" and line["rubric"] == "tickets"
    assert line["status"] == 200 and line["error"] is None
    assert line["model_ms"] > 0 and line["queue_wait_ms"] >= 0 and line["ms"] >= line["model_ms"]
    client.post("/v1/systemone", {"state": "cheap pills", "questions": SPAM}, headers={"X-Request-ID": "line-2"})
    (line,) = lines.of("line-2")
    assert line["rubric"] == "systemone" and line["route"] == "/v1/systemone" and line["model_ms"] > 0
    client.post("/v1/systemone", {"state": "x", "questions": {}}, headers={"X-Request-ID": "line-3"})
    (line,) = lines.of("line-3")
    assert line["status"] == 422 and line["error"] == "RubricError" and line["model_ms"] == 0


def test_a_failure_inside_a_route_is_a_500_logged_with_its_traceback_and_never_sent(served, client, monkeypatch):
    app, _, lines = served

    def broken(*_):
        raise RuntimeError("secret detail at /home/operator/internal.py")

    monkeypatch.setattr(app.state.service, "_systemone_request", broken)
    before_500 = metric(client, 'decisionflow_requests_total{route="/v1/systemone",status="500"}')
    reply = client.post("/v1/systemone", {"state": "hello", "questions": SPAM}, headers={"X-Request-ID": "boom-1"})
    assert reply.status == 500, reply.body
    text = json.dumps(reply.body)
    assert "secret" not in text and "RuntimeError" not in text and "Traceback" not in text and "/home" not in text
    assert reply.body["error"]["type"] == "InternalError" and "X-Request-ID" in reply.body["error"]["message"]
    assert reply.headers["x-request-id"] == "boom-1"
    (failure,) = lines.of("boom-1", "request failed")
    assert failure["level"] == "ERROR" and "RuntimeError: secret detail" in failure["traceback"]
    assert "Traceback (most recent call last)" in failure["traceback"]
    assert lines.of("boom-1")[0]["status"] == 500
    assert metric(client, 'decisionflow_requests_total{route="/v1/systemone",status="500"}') == before_500 + 1
    assert metric(client, 'decisionflow_errors_total{route="/v1/systemone",status="500",type="InternalError"}') >= 1


def test_an_exception_nothing_caught_is_a_json_500_counted_as_500_not_499(served, client, monkeypatch):
    app, _, lines = served
    monkeypatch.setattr(app.state.service.registry, "describe", lambda **_: 1 / 0)
    before = {status: metric(client, f'decisionflow_requests_total{{route="/v1/rubrics",status="{status}"}}')
              for status in ("499", "500")}
    reply = client.get("/v1/rubrics", headers={"X-Request-ID": "boom-2"})
    assert reply.status == 500 and reply.headers["content-type"] == "application/json"
    assert reply.body["error"]["type"] == "InternalError" and "ZeroDivision" not in json.dumps(reply.body)
    assert reply.headers["x-request-id"] == "boom-2"
    (failure,) = lines.of("boom-2", "request failed")
    assert "ZeroDivisionError" in failure["traceback"]
    assert metric(client, 'decisionflow_requests_total{route="/v1/rubrics",status="500"}') == before["500"] + 1
    assert metric(client, 'decisionflow_requests_total{route="/v1/rubrics",status="499"}') == before["499"]
    assert client.get("/healthz").status == 200  # and the server goes on


# -- metrics -------------------------------------------------------------------------------------------------------


def test_queue_wait_cache_hits_errors_and_the_process_are_in_metrics(client):
    questions = {"odd": {"type": "noul", "instructions": "Does the message mention a refund (visibility)"}}
    hits, misses = metric(client, 'decisionflow_question_set_cache_total{result="hit"}'), \
        metric(client, 'decisionflow_question_set_cache_total{result="miss"}')
    waits = metric(client, "decisionflow_queue_wait_seconds_count")
    for _ in range(2):
        assert client.post("/v1/systemone", {"state": "refund me", "questions": questions}).status == 200
    assert metric(client, 'decisionflow_question_set_cache_total{result="miss"}') == misses + 1
    assert metric(client, 'decisionflow_question_set_cache_total{result="hit"}') == hits + 1
    assert metric(client, "decisionflow_queue_wait_seconds_count") == waits + 2
    errors = metric(client, 'decisionflow_errors_total{route="unmatched",status="404",type="NotFound"}')
    client.get("/v1/nothing")
    assert metric(client, 'decisionflow_errors_total{route="unmatched",status="404",type="NotFound"}') == errors + 1
    text = client.get("/metrics").body
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "python_info",
                 "decisionflow_queue_wait_seconds_bucket"):
        assert name in text, name


# -- the event loop stays free ----------------------------------------------------------------------------------------


def test_parsing_runs_off_the_event_loop_so_probes_answer_meanwhile(served, client, monkeypatch):
    real = app_module.parse_json

    def slow(raw):
        time.sleep(1.5)  # a body that takes long to parse
        return real(raw)

    monkeypatch.setattr(app_module, "parse_json", slow)
    slow_reply: dict = {}
    thread = threading.Thread(target=lambda: slow_reply.update(
        reply=Client(served[1]).post("/v1/rubrics/tickets/decide", {"text": "refund please"})))
    thread.start()
    time.sleep(0.2)  # the slow parse has begun
    began = time.monotonic()
    assert client.get("/healthz").status == 200
    assert client.get("/metrics").status == 200
    assert time.monotonic() - began < 0.75, "the probes waited for the parse"
    thread.join(30)
    assert slow_reply["reply"].status == 200


def test_a_full_queue_is_refused_before_the_body_is_parsed(engine, rubric_folder, monkeypatch):
    parsed = []
    real = app_module.parse_request
    monkeypatch.setattr(app_module, "parse_request", lambda *a: parsed.append(1) or real(*a))
    with running_app(engine, rubric_folder, ServeSettings(limits=Limits(max_queue=1))) as (app, port):
        monkeypatch.setattr(type(app.state.service.batcher), "depth", property(lambda self: 1))
        client = Client(port)
        reply = client.post("/v1/systemone", {"state": "x", "questions": SPAM})
        assert reply.status == 503 and reply.headers["retry-after"] == "1", reply.body
        assert parsed == []
        client.close()


def test_the_default_body_limit_follows_the_models_context(served, client, engine):
    from decisionflow.serve.settings import body_limit_for

    app = served[0]
    positions = engine.backend.max_positions
    assert app.state.service.limits.max_body_bytes == max(64 << 10, positions * 16) < 1 << 20
    limit = app.state.service.limits.max_body_bytes
    reply = client.post("/v1/rubrics/tickets/decide", raw=b'{"text": "' + b"a" * limit + b'"}')
    assert reply.status == 413 and str(limit) in reply.body["error"]["message"]

    class Backend:
        max_positions = 0

    class Engine:
        backend = Backend()

    assert body_limit_for(Engine(), Limits()) == 1 << 20  # a model that does not say: the old default
    Backend.max_positions = 512
    assert body_limit_for(Engine(), Limits()) == 64 << 10  # the floor
    assert body_limit_for(Engine(), Limits(max_body_bytes=10)) == 10
    assert Batching().token_budget == engine.options.max_batch_tokens


def test_the_log_formatter_writes_one_ascii_json_line_with_the_traceback():
    try:
        raise ValueError("bad \ud800 value\nsecond line")
    except ValueError as error:
        record = logging.LogRecord(LOGGER_NAME, logging.ERROR, __file__, 1, "request failed", None,
                                   (type(error), error, error.__traceback__))
    record.fields = {"request_id": "r-1", "path": "/v1/\u00e9"}
    line = JsonLines().format(record)
    assert "\n" not in line and line.isascii()
    parsed = json.loads(line)
    assert parsed["request_id"] == "r-1" and parsed["path"] == "/v1/\u00e9" and "ValueError" in parsed["traceback"]


def test_the_server_writes_its_log_to_stderr_through_uvicorns_logging(tmp_path: Path):
    from uvicorn.config import LOGGING_CONFIG

    from decisionflow.serve.logs import log_config

    config = log_config("warning", LOGGING_CONFIG)
    assert config["loggers"][LOGGER_NAME] == {"handlers": ["decisionflow_json"], "level": logging.WARNING, "propagate": False}
    assert LOGGER_NAME not in LOGGING_CONFIG["loggers"]  # uvicorn's own is left as it was
