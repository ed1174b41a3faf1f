"""Limits, refusals, metrics, the rubric listing and the ready line, without the model: a stand-in engine
is enough for everything decided before an input reaches the model."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from serve_client import ROOT, Client, metric, running_server, stand_in_engine
from typer.testing import CliRunner

from decisionflow.cli import app as cli_app
from decisionflow.errors import DataError, RubricError
from decisionflow.serve import Limits, RubricRegistry, ServeSettings
from decisionflow.serve.batcher import MicroBatcher
from decisionflow.serve.body import parse_json
from decisionflow.serve.refusals import Located
from decisionflow.serve.systemone import parse_request

runner = CliRunner()
MODEL_NAME = "bundled:SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def sentiment_only(tmp_path) -> Path:
    folder = tmp_path / "rubrics"
    folder.mkdir()
    shutil.copy(ROOT / "workflows" / "sentiment.yaml", folder / "sentiment.yaml")
    return folder


# -- a texts request larger than the queue ---------------------------------------------------------------


@pytest.mark.parametrize("args", [["--max-queue", "1", "--max-texts", "3"], ["--max-queue", "32"]])
def test_serve_refuses_a_queue_smaller_than_a_texts_request_before_loading_the_model(args, monkeypatch):
    loaded = []
    monkeypatch.setattr("decisionflow.cli.serve.load_engine", lambda *a, **k: loaded.append(1))
    result = runner.invoke(cli_app, ["serve", "--port", "0", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --max-queue"), result.output
    assert "--max-texts" in lines[0]
    assert loaded == []


def test_a_texts_request_the_queue_could_never_hold_is_refused_for_good_not_503(sentiment_only):
    settings = ServeSettings(limits=Limits(max_queue=2))  # from Python, max_texts stays 64
    with running_server(stand_in_engine(MODEL_NAME), sentiment_only, settings) as port:
        client = Client(port)
        reply = client.post("/v1/rubrics/sentiment/decide", {"texts": ["a good film", "a bad film", "c"]})
        assert reply.status == 400, reply.body
        assert "retry-after" not in reply.headers
        error = reply.body["error"]
        assert error["type"] == "DataError" and error["field"] == "texts"
        assert "3 inputs; at most 2 per request" in error["message"] and "queue" in error["message"]
        assert metric(client, "decisionflow_rejected_total") == 0  # refused as too large, not for a full queue
        client.close()


# -- a full queue: the metric counts inputs, the message counts grammatically --------------------------


def test_a_full_queue_counts_every_refused_input_and_says_how_many_wait(sentiment_only, monkeypatch):
    waiting = {"n": 2}
    monkeypatch.setattr(MicroBatcher, "depth", property(lambda self: waiting["n"]))
    settings = ServeSettings(limits=Limits(max_queue=4, max_texts=4))
    with running_server(stand_in_engine(MODEL_NAME), sentiment_only, settings) as port:
        client = Client(port)
        reply = client.post("/v1/rubrics/sentiment/decide", {"texts": ["a", "b", "c"]})
        assert reply.status == 503 and reply.headers["retry-after"] == "1", reply.body
        assert "(2 inputs are waiting)" in reply.body["error"]["message"]
        assert metric(client, "decisionflow_rejected_total") == 3  # the request's three inputs
        waiting["n"] = 1
        reply = client.post("/v1/rubrics/sentiment/decide", {"texts": ["a", "b", "c", "d"]})
        assert reply.status == 503
        assert "(1 input is waiting)" in reply.body["error"]["message"]
        assert metric(client, "decisionflow_rejected_total") == 7
        client.close()


def test_the_metrics_doc_says_what_rejected_counts():
    text = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `decisionflow_rejected_total"))
    assert "inputs" in row and "each of its inputs" in row


# -- JSON types are named in the request's terms ---------------------------------------------------------


BAD_TYPES = {
    "score criteria as an object": (b'{"state": "x", "questions": {"a": {"type": "score", "instructions": "q", '
                                    b'"criteria": {"a": 1}}}}', "an object"),
    "noul criteria as a list": (b'{"state": "x", "questions": {"a": {"type": "noul", "instructions": "q", '
                                b'"criteria": ["yes"]}}}', "a list"),
    "choice criteria as a list": (b'{"state": "x", "questions": {"a": {"type": "choice", "instructions": "q", '
                                  b'"criteria": ["x", "y"]}}}', "a list"),
    "a label description as an object": (b'{"state": "x", "questions": {"a": {"type": "choice", "instructions": "q", '
                                         b'"criteria": {"x": {"d": 1}, "y": null}}}}', "an object"),
    "a score level as an object": (b'{"state": "x", "questions": {"a": {"type": "score", "instructions": "q", '
                                   b'"criteria": [{"d": 1}, "high"]}}}', "an object"),
    "instructions as an object": (b'{"state": "x", "questions": {"a": {"type": "noul", "instructions": {"q": 1}}}}',
                                  "an object"),
    "a question as a list": (b'{"state": "x", "questions": {"a": [1]}}', "a list"),
    "questions as a list": (b'{"state": "x", "questions": [{"type": "noul"}]}', "a list"),
    "a number as a description": (b'{"state": "x", "questions": {"a": {"type": "noul", "instructions": "q", '
                                  b'"criteria": {"true": 1.5}}}}', "a number"),
    "a boolean state": (b'{"state": true, "questions": {"a": {"type": "noul", "instructions": "q"}}}', "a boolean"),
    "a body that is a list": (b'[{"state": "x"}]', "a list"),
}


@pytest.mark.parametrize("case", list(BAD_TYPES))
def test_refusals_name_json_types_never_python_classes(case):
    body, expected = BAD_TYPES[case]
    with pytest.raises((RubricError, Located)) as caught:
        parse_request(parse_json(body), Limits())
    error = caught.value
    messages = [p.message for p in error.problems] if isinstance(error, RubricError) else [str(error.error)]
    assert isinstance(error, RubricError) or isinstance(error.error, DataError)
    assert any(expected in message for message in messages), messages
    assert not any("ParsedObject" in message or "dict" in message for message in messages), messages


# -- GET /v1/rubrics: the same keys on every field --------------------------------------------------------


FIELD_KEYS = {"name", "kind", "question", "labels", "depends_on", "when", "options_by", "derived"}
ROUTED = """\
name: routed
instructions: Route one short customer message.
fields:
  domain:
    kind: choice
    question: Which area it is about
    options: [money, travel]
  intent:
    kind: choice
    question: What the writer wants
    options_by:
      domain:
        money: [refund, balance]
        travel: [booking, luggage]
  severity: {kind: score, question: How severe it is, min: 0, max: 9}
  legal_threat: {kind: boolean, question: Whether the writer threatens legal action}
  needs_human:
    kind: boolean
    question: Whether a person must look at it
    derive:
      rules:
        - if: {any: [{field: severity, at_least: 7}, {field: legal_threat, is: true}]}
          then: true
      otherwise: false
  callback:
    kind: boolean
    question: Whether to call the writer back
    when: {field: needs_human, values: [true]}
"""


def test_every_listed_field_has_every_key_and_derived_and_options_by_fields_say_so(tmp_path):
    (tmp_path / "routed.yaml").write_text(ROUTED, encoding="utf-8")
    (listed,) = RubricRegistry.from_folder(tmp_path).describe()
    fields = {field["name"]: field for field in listed["fields"]}
    assert all(set(field) == FIELD_KEYS for field in fields.values()), [sorted(f) for f in fields.values()]
    plain = fields["domain"]
    assert plain["depends_on"] == [] and plain["when"] is None and plain["options_by"] is None and plain["derived"] is None
    intent = fields["intent"]
    assert intent["kind"] == "choice" and intent["depends_on"] == ["domain"] and intent["derived"] is None
    assert intent["options_by"] == {"field": "domain", "options": {"money": ["refund", "balance"], "travel": ["booking", "luggage"]}}
    assert intent["labels"] == ["refund", "balance", "booking", "luggage"]
    needs_human = fields["needs_human"]
    assert needs_human["derived"] == {"reads": ["severity", "legal_threat"]}
    assert needs_human["depends_on"] == ["severity", "legal_threat"] and needs_human["options_by"] is None
    assert fields["callback"]["when"] == {"field": "needs_human", "values": [True]}
    assert fields["callback"]["derived"] is None
    assert listed["plan"]["derived"] == ["needs_human"]


def test_the_shipped_rubrics_list_every_key_on_every_field():
    listed = {entry["name"]: entry for entry in RubricRegistry.from_folder().describe()}
    for entry in listed.values():
        for field in entry["fields"]:
            assert set(field) == FIELD_KEYS, (entry["name"], field["name"])
    intent = next(f for f in listed["clinc150_hierarchical"]["fields"] if f["name"] == "intent")
    assert intent["options_by"]["field"] == "domain" and len(intent["options_by"]["options"]) == 10


def test_the_listing_doc_names_every_field_key():
    text = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    section = text[text.index("### `GET /v1/rubrics`"):text.index("/metrics` is the Prometheus")]
    assert all(f"`{key}`" in section for key in FIELD_KEYS)


# -- the ready line ----------------------------------------------------------------------------------------


def ready_line(monkeypatch, *args: str) -> str:
    """What `decisionflow serve` prints once it accepts requests (the stand-in engine; nothing served)."""
    def serve(app, sock, *, on_started=None, **_):
        on_started()
        sock.close()

    monkeypatch.setattr("decisionflow.cli.serve.load_engine", lambda *a, **k: stand_in_engine(MODEL_NAME))
    monkeypatch.setattr("decisionflow.serve.server.serve", serve)
    result = runner.invoke(cli_app, ["serve", "--port", "0", *args])
    assert result.exit_code == 0, result.output
    return next(line for line in result.output.splitlines() if "serving http://" in line)


def test_the_ready_line_counts_rubrics_grammatically(monkeypatch, sentiment_only):
    line = ready_line(monkeypatch, "--rubrics", str(sentiment_only))
    assert re.fullmatch(rf"decisionflow serving http://127\.0\.0\.1:\d+ \({re.escape(MODEL_NAME)}; 1 rubric: sentiment\)", line), line


def test_the_ready_line_in_the_docs_is_what_serve_prints(monkeypatch):
    line = ready_line(monkeypatch)
    text = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    documented = re.search(r"\$ decisionflow serve --port 8000\n(.*)\n", text).group(1)
    assert re.sub(r":\d+ \(", ":8000 (", line) == documented

