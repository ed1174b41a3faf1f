"""Talking to a real server on a loopback port: a keep-alive client, the server run in a thread of the
test process (sharing the session's engine), and the fixtures built on them.

The test modules import the fixtures by name (a `conftest.py` here would shadow the top-level one for
modules that import from `conftest`).
"""

from __future__ import annotations

import http.client
import json
import shutil
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]

TICKETS = """\
name: tickets
instructions: Triage one short customer message.
pin_first: false
fields:
  refund: {kind: boolean, question: Whether the customer asks for money back}
  team:
    kind: choice
    question: Which team handles it
    options: {billing: charges and invoices, shipping: delivery and parcels}
"""


DESK = """\
name: desk
instructions: Route one short customer message.
pin_first: false
fields:
  refund: {kind: boolean, question: Whether the customer asks for money back}
  queue:
    kind: choice
    question: Which queue the message goes to
    options: [red, green, blue]
"""

DESK_ROWS = {
    "red": ["I was charged twice for my order", "My invoice shows the wrong amount",
            "Why is there an extra fee on my card statement?", "Please refund the duplicate payment",
            "The subscription price went up without notice", "I was billed after cancelling",
            "My credit card was charged the wrong total", "Can I get a receipt for last month's payment?"],
    "green": ["My parcel has not arrived yet", "The courier left the package at the wrong address",
              "Tracking says delivered but nothing came", "How long does delivery to Canada take?",
              "The box arrived crushed and late", "Can you ship it express instead?",
              "My order is stuck in transit for two weeks", "The delivery driver never showed up"],
    "blue": ["I cannot log into my account", "The password reset email never arrives",
             "My account is locked after three tries", "Two-factor code is not accepted", "I forgot my username",
             "The app keeps signing me out", "Login page shows an error 500", "How do I change my password?"],
}
"""Eight messages a queue: enough for heads fitted in a few seconds to answer `queue` (tests that fit heads)."""


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: Any


class Client:
    """One keep-alive HTTP/1.1 connection to the server (one per thread)."""

    def __init__(self, port: int, timeout: float = 120.0) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                headers: dict[str, str | None] | None = None) -> Reply:
        """`headers` are added to (or, given as None, taken from) the default `Content-Type: application/json`
        of a request with a body."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"Content-Type": "application/json"} if data is not None else {}
        for name, value in (headers or {}).items():
            sent.pop(name, None)
            if value is not None:
                sent[name] = value
        self.connection.request(method, path, body=data, headers=sent)
        response = self.connection.getresponse()
        payload = response.read()
        kind = response.getheader("content-type", "")
        parsed = json.loads(payload) if "json" in kind else payload.decode()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, parsed)

    def post(self, path: str, body: Any = None, *, raw: bytes | None = None,
             headers: dict[str, str | None] | None = None) -> Reply:
        return self.request("POST", path, body, raw=raw, headers=headers)

    def get(self, path: str, *, headers: dict[str, str | None] | None = None) -> Reply:
        return self.request("GET", path, headers=headers)

    def close(self) -> None:
        self.connection.close()


def stand_in_engine(name: str = "stand-in") -> SimpleNamespace:
    """What the app and the command read of an engine when no input reaches the model."""
    from decisionflow.runtime.engine import EngineOptions

    # check_heads: the shipped workflows carry heads, which serve checks against the engine at startup.
    return SimpleNamespace(loaded=SimpleNamespace(name=name), options=EngineOptions(), check_heads=lambda heads, target: None)


def metric(client: Client, prefix: str) -> float:
    """The sum of every /metrics sample whose line starts with `prefix`."""
    lines = [line for line in client.get("/metrics").body.splitlines() if line.startswith(prefix)]
    return sum(float(line.split()[-1]) for line in lines)


@contextmanager
def running_server(engine: Any, folder: Any, settings: Any = None) -> Iterator[int]:
    """Start the app on 127.0.0.1 (a free port) in a thread; yield the port; stop it gracefully.
    `folder`: the rubric folder served, or a `RubricRegistry` built already."""
    with running_app(engine, folder, settings) as (_, port):
        yield port


@contextmanager
def running_app(engine: Any, folder: Any, settings: Any = None) -> Iterator[tuple[Any, int]]:
    """`running_server`, yielding the app with the port (for tests that look inside the running app)."""
    from decisionflow.serve import RubricRegistry, create_app
    from decisionflow.serve.server import bind, server_for

    registry = folder if isinstance(folder, RubricRegistry) else RubricRegistry.from_folder(folder)
    app = create_app(engine, registry, settings)
    sock = bind("127.0.0.1", 0)
    started = threading.Event()
    server = server_for(app, log_level="warning", on_started=started.set)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert started.wait(60), "the server did not start"
    try:
        yield app, sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


@pytest.fixture(scope="session")
def rubric_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("rubrics")
    shutil.copy(ROOT / "workflows" / "sentiment.yaml", folder / "sentiment.yaml")
    (folder / "tickets.yaml").write_text(TICKETS, encoding="utf-8")
    return folder


@pytest.fixture(scope="session")
def server_port(engine, rubric_folder) -> Iterator[int]:
    with running_server(engine, rubric_folder) as port:
        yield port


@pytest.fixture
def client(server_port) -> Iterator[Client]:
    connection = Client(server_port)
    yield connection
    connection.close()


@pytest.fixture(name="client")
def client_of_port(port) -> Iterator[Client]:
    """`client` for a module whose server fixture is `port` (its own rubrics or settings): import this one instead."""
    connection = Client(port)
    yield connection
    connection.close()
