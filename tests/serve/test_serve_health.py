"""Whether a server can answer, and how long it waits: /healthz follows the dispatcher and the model thread,
/readyz says when to send traffic, a request over its deadline is a 504 whose queued input is dropped, a body
that trickles in is a 408, and uvicorn holds no more than `limit_concurrency` connections."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from types import SimpleNamespace

import pytest
from serve_client import Client, metric, rubric_folder, running_app, stand_in_engine  # noqa: F401 - fixtures

from decisionflow.serve import Batching, Limits, ServeSettings, create_app


def on_loop(app, call) -> None:
    """Run `call()` on the server's event loop (the dispatcher's), from the test's thread."""
    loop = app.state.service.batcher._dispatcher.get_loop()
    done = threading.Event()
    loop.call_soon_threadsafe(lambda: (call(), done.set()))
    assert done.wait(10)


def test_a_running_server_is_healthy_and_ready(rubric_folder):
    with running_app(stand_in_engine(), rubric_folder) as (_, port):
        client = Client(port)
        health = client.get("/healthz")
        assert health.status == 200
        assert health.body["status"] == "ok" and health.body["dispatcher"] == "running"
        assert health.body["model_thread"] == "alive" and health.body["queue_depth"] == 0 and health.body["model_busy_s"] == 0
        ready = client.get("/readyz")
        assert ready.status == 200 and ready.body == {"status": "ready", "model": "stand-in"}
        client.close()


def test_before_it_starts_an_app_is_not_ready(rubric_folder):
    app = create_app(stand_in_engine(), _registry(rubric_folder))
    ready, body = app.state.service.readiness()
    healthy, _ = app.state.service.health()
    assert not ready and body["status"] == "starting" and not healthy


def _registry(folder):
    from decisionflow.serve import RubricRegistry

    return RubricRegistry.from_folder(folder)


def test_a_dead_dispatcher_fails_health_and_readiness_and_requests_get_503_not_a_hang(engine, rubric_folder):
    with running_app(engine, rubric_folder) as (app, port):
        client = Client(port)
        on_loop(app, app.state.service.batcher._dispatcher.cancel)
        deadline = time.monotonic() + 10
        while client.get("/healthz").status == 200 and time.monotonic() < deadline:
            time.sleep(0.01)
        health = client.get("/healthz")
        assert health.status == 503 and health.body["status"] == "failing" and health.body["dispatcher"] == "stopped"
        assert client.get("/readyz").status == 503
        reply = client.post("/v1/rubrics/tickets/decide", {"text": "refund please"})
        assert reply.status == 503 and reply.body["error"]["type"] == "Unavailable", reply.body
        assert "dispatcher" in reply.body["error"]["message"]
        client.close()


def test_a_dead_model_thread_fails_health(rubric_folder):
    with running_app(stand_in_engine(), rubric_folder) as (app, port):
        client = Client(port)
        batcher = app.state.service.batcher
        batcher._model_thread.shutdown(wait=True)  # its worker thread ends
        health = client.get("/healthz")
        assert health.status == 503 and health.body["model_thread"] == "stopped" and health.body["dispatcher"] == "running"
        assert client.get("/readyz").status == 503
        client.close()


def test_inputs_waiting_when_the_dispatcher_dies_are_answered_503():
    from decisionflow.serve.batcher import MicroBatcher
    from decisionflow.serve.metrics import Metrics

    async def scenario():
        batcher = MicroBatcher(SimpleNamespace(), Batching(max_wait_ms=5000), max_queue=10, metrics=Metrics())
        await batcher.start()
        waiting = asyncio.ensure_future(batcher.decide("g", "r", "text", cost=1))
        await asyncio.sleep(0.05)
        batcher._dispatcher.cancel()
        outcome = await asyncio.wait_for(waiting, 5)
        await batcher.stop()
        return outcome, batcher.alive

    outcome, alive = asyncio.run(scenario())
    assert type(outcome).__name__ == "Unavailable" and not alive


# -- deadlines -----------------------------------------------------------------------------------------------------


def test_a_request_over_its_deadline_is_a_504_and_its_queued_input_is_dropped(engine, rubric_folder):
    # A long batching window keeps the input queued past the 0.3 s deadline: the model never starts on it.
    from decisionflow.spec.yaml_rubric import load_rubric

    engine.decide(load_rubric(rubric_folder / "tickets.yaml"), "warm")  # compiled and cached: admission is quick
    settings = ServeSettings(limits=Limits(request_timeout_s=0.3), batching=Batching(max_wait_ms=1500))
    with running_app(engine, rubric_folder, settings) as (_, port):
        client = Client(port)
        calls = metric(client, "decisionflow_batch_size_count")
        began = time.monotonic()
        reply = client.post("/v1/rubrics/tickets/decide", {"text": "refund my duplicate charge"})
        assert reply.status == 504, reply.body
        assert time.monotonic() - began < 1.2
        assert reply.body["error"]["type"] == "Timeout" and "0.3 s" in reply.body["error"]["message"]
        time.sleep(1.6)  # past the batching window: the dropped input would have run by now
        assert metric(client, "decisionflow_batch_size_count") == calls
        assert metric(client, "decisionflow_cancelled_total") == 1
        assert metric(client, 'decisionflow_rejected_total{reason="timeout"}') == 1
        assert metric(client, 'decisionflow_errors_total{route="/v1/rubrics/{name}/decide",status="504",type="Timeout"}') == 1
        assert client.get("/healthz").status == 200
        client.close()


def test_a_body_that_trickles_in_is_a_408_and_the_connection_is_closed(rubric_folder):
    with running_app(stand_in_engine(), rubric_folder, ServeSettings(limits=Limits(body_timeout_s=0.4))) as (_, port):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"POST /v1/rubrics/tickets/decide HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"text\": ")  # and nothing more
        began = time.monotonic()
        received = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break  # the server closed the connection
            received += chunk
        sock.close()
        assert 0.3 < time.monotonic() - began < 5
        head, _, body = received.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408"), received
        assert b"connection: close" in head.lower() and b'"RequestTimeout"' in body


def test_uvicorn_refuses_connections_beyond_limit_concurrency(rubric_folder):
    with running_app(stand_in_engine(), rubric_folder, ServeSettings(limit_concurrency=2)) as (_, port):
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        time.sleep(0.2)
        third = Client(port)
        reply = third.get("/healthz")
        assert reply.status == 503
        third.close()
        for sock in idle:
            sock.close()
        time.sleep(0.2)
        later = Client(port)
        assert later.get("/healthz").status == 200
        later.close()


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_requests_within_their_deadline_are_answered(engine, rubric_folder, timeout):
    settings = ServeSettings(limits=Limits(request_timeout_s=timeout))
    with running_app(engine, rubric_folder, settings) as (_, port):
        client = Client(port)
        reply = client.post("/v1/rubrics/tickets/decide", {"text": "where is my parcel"})
        assert reply.status == 200 and set(reply.body["value"]) == {"refund", "team"}
        client.close()
