"""`decisionflow serve` as a process: it announces its port, and SIGTERM lets accepted requests finish."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from serve_client import Client, rubric_folder  # noqa: F401 - fixtures

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
IN_FLIGHT = 6


def start_server(folder: Path) -> tuple[subprocess.Popen, int]:
    # A long batching window keeps the requests of the test in flight when the signal arrives.
    process = subprocess.Popen(
        [sys.executable, "-m", "decisionflow.cli", "serve", "--port", "0", "--rubrics", str(folder),
         "--batch-wait-ms", "500", "--log-level", "info"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    lines: list[str] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        lines.append(line)
        match = re.search(r"serving http://127\.0\.0\.1:(\d+)", line)
        if match:
            return process, int(match.group(1))
    process.kill()
    raise AssertionError("the server never said it was serving:\n" + "".join(lines))


def in_flight(client: Client) -> float:
    line = next(line for line in client.get("/metrics").body.splitlines() if line.startswith("decisionflow_requests_in_flight "))
    return float(line.split()[-1]) - 1  # not counting the metrics request itself


def test_sigterm_finishes_the_requests_in_flight_then_exits(rubric_folder):
    process, port = start_server(rubric_folder)
    try:
        probe = Client(port)
        assert probe.post("/v1/rubrics/tickets/decide", {"text": "warm the head"}).status == 200
        replies: list = [None] * IN_FLIGHT

        def send(index: int) -> None:
            replies[index] = Client(port).post("/v1/rubrics/tickets/decide", {"text": f"refund my order number {index}"})

        threads = [threading.Thread(target=send, args=(i,)) for i in range(IN_FLIGHT)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while in_flight(probe) < IN_FLIGHT and time.monotonic() < deadline:
            time.sleep(0.01)
        assert in_flight(probe) == IN_FLIGHT
        probe.close()
        process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(120)
        for reply in replies:
            assert reply is not None and reply.status == 200, reply
            assert set(reply.body["value"]) == {"refund", "team"}
        returncode = process.wait(60)
        log = process.stderr.read()
        assert returncode in (0, -signal.SIGTERM), log
        assert "Traceback" not in log
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
