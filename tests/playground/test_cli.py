"""`decisionflow playground RUBRIC`: a server on a free loopback port serving RUBRIC beside the shipped workflows,
its address printed, a browser opened only where one is available, and its options documented."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import typer
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_client import TICKETS, Client, stand_in_engine  # noqa: E402

from decisionflow.cli import app, playground  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_every_option_is_in_the_playground_doc():
    command = typer.main.get_command(app).commands["playground"]  # type: ignore[attr-defined]
    options = [name for param in command.params for name in param.opts if name.startswith("--") and name != "--help"]
    text = (ROOT / "docs" / "playground.md").read_text(encoding="utf-8")
    assert [name for name in options if not re.search(re.escape(name) + r"(?![a-z-])", text)] == []


def test_a_rubric_that_cannot_be_read_stops_the_command_before_the_model_loads(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: broken\nfields:\n  team: {kind: choice, question: Which team, options: [billing]}\n")
    result = runner.invoke(app, ["playground", str(broken), "--no-open"])
    assert result.exit_code == 1
    assert "fields.team.options" in result.stderr and "line 3" in result.stderr
    missing = runner.invoke(app, ["playground", str(tmp_path / "nothing.yaml"), "--no-open"])
    assert missing.exit_code == 1


def test_a_browser_is_opened_only_where_there_is_one(monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url, new=0: opened.append(url) or True)
    monkeypatch.setattr(sys, "platform", "linux")
    for variable in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"):
        monkeypatch.delenv(variable, raising=False)
    assert playground.open_in_browser("http://127.0.0.1:1/") is False and opened == []
    monkeypatch.setenv("DISPLAY", ":0")
    assert playground.open_in_browser("http://127.0.0.1:1/") is True and opened == ["http://127.0.0.1:1/"]

    def fails(url, new=0):
        raise RuntimeError("no runnable browser")

    monkeypatch.setattr("webbrowser.open", fails)
    assert playground.open_in_browser("http://127.0.0.1:1/") is False


@pytest.mark.model
def test_the_command_serves_the_rubric_and_prints_the_address(tmp_path):
    rubric = tmp_path / "my_tickets.yaml"
    rubric.write_text(TICKETS, encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "decisionflow.cli", "playground", str(rubric), "--no-open"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 180
        url = ""
        while time.monotonic() < deadline and not url:
            url = process.stdout.readline().strip()
            if not url and process.poll() is not None:
                break
        assert url, process.stderr.read()
        address = urlsplit(url)
        assert address.scheme == "http" and address.hostname == "127.0.0.1" and address.port
        assert address.path == "/" and address.query == "rubric=my_tickets"
        client = Client(address.port)
        try:
            page = client.get("/")
            assert page.status == 200 and page.headers["content-type"].startswith("text/html")
            names = [entry["name"] for entry in client.get("/v1/rubrics").body["rubrics"]]
            assert "my_tickets" in names and "support_triage" in names
            decided = client.post("/v1/rubrics/my_tickets/decide", {"text": "please refund the double charge"})
            assert decided.status == 200 and set(decided.body["value"]) == {"refund", "team"}
        finally:
            client.close()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert "decisionflow playground at " + url in process.stderr.read()


def adapter_file(path: Path) -> Path:
    """A small adapter file, as `decisionflow tune` writes one (read, never merged: the model is a stand-in here)."""
    import torch

    from decisionflow.runtime.adapter import Adapter, AdapterMetadata

    metadata = AdapterMetadata(rubric="my_tickets", rubric_fingerprint="f", model="m", weights="w", rank=1, alpha=1.0,
                               targets=["q_proj"])
    weights = {"model.layers.0.self_attn.q_proj": (torch.zeros(1, 4), torch.zeros(4, 1))}
    return Adapter(metadata, weights).save(path)


def invoke_playground(monkeypatch, *args: str):
    """`decisionflow playground ARGS --no-open` with the model load and the server stubbed: the adapter each load
    was given, and the result."""
    given = []

    def load_engine(*_, adapter=None, **__):
        given.append(adapter)
        return stand_in_engine()

    def serve(app, sock, *, on_started=None, **_):
        on_started()
        sock.close()

    monkeypatch.setattr("decisionflow.cli.playground.load_engine", load_engine)
    monkeypatch.setattr("decisionflow.serve.server.serve", serve)
    return runner.invoke(app, ["playground", *args, "--no-open"]), given


def test_the_adapter_beside_the_rubric_is_merged_unless_no_adapter_says_otherwise(tmp_path, monkeypatch):
    rubric = tmp_path / "my_tickets.yaml"
    rubric.write_text(TICKETS, encoding="utf-8")
    beside = adapter_file(tmp_path / "my_tickets.adapter.safetensors")
    result, given = invoke_playground(monkeypatch, str(rubric))
    assert result.exit_code == 0, result.output
    assert [adapter.path for adapter in given] == [beside]
    assert f"adapter: {beside} (rank 1, q_proj; tuned for 'my_tickets') (merged for every rubric served)" in result.stderr
    plain, given = invoke_playground(monkeypatch, str(rubric), "--no-adapter")
    assert plain.exit_code == 0 and given == [None] and "adapter: " not in plain.stderr
    elsewhere = adapter_file(tmp_path / "other" / "tuned.adapter.safetensors")
    chosen, given = invoke_playground(monkeypatch, "support_triage", "--adapter", str(elsewhere))
    assert chosen.exit_code == 0 and [adapter.path for adapter in given] == [elsewhere], chosen.output


def test_adapter_options_that_cannot_hold_stop_before_the_model_loads(tmp_path, monkeypatch):
    rubric = tmp_path / "my_tickets.yaml"
    rubric.write_text(TICKETS, encoding="utf-8")
    both, given = invoke_playground(monkeypatch, str(rubric), "--adapter", str(adapter_file(tmp_path / "a.adapter.safetensors")),
                                    "--no-adapter")
    assert both.exit_code != 0 and given == []
    assert both.stderr.strip().splitlines() == ["error: give --adapter or --no-adapter, not both"]
    missing, given = invoke_playground(monkeypatch, str(rubric), "--adapter", str(tmp_path / "none.adapter.safetensors"))
    assert missing.exit_code != 0 and given == []
    assert "none.adapter.safetensors" in missing.stderr and missing.stderr.startswith("error: ")
    damaged = tmp_path / "damaged.adapter.safetensors"
    damaged.write_bytes(b"not an adapter")
    broken, given = invoke_playground(monkeypatch, str(rubric), "--adapter", str(damaged))
    assert broken.exit_code != 0 and given == [] and "damaged.adapter.safetensors" in broken.stderr
