"""The playground's routes beside deciding: `GET /v1/rubrics/{name}/yaml`, `POST /v1/rubrics/export`,
`POST /v1/rubrics/coherence` and `POST /v1/rubrics/eval`. Each takes the inline route's path (limits, keys, error
shape, budget of new question sets); markup stays data; oversize and over-limit requests are located refusals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_client import TICKETS, client_of_port, rubric_folder, running_server  # noqa: E402, F401 - fixtures

from decisionflow import rubric_of  # noqa: E402
from decisionflow.serve import Access, Limits, ServeSettings  # noqa: E402
from decisionflow.serve.workbench import MAX_EVAL_ROWS, negated_question, python_source  # noqa: E402
from decisionflow.spec.yaml_rubric import loads_rubric  # noqa: E402

pytestmark = pytest.mark.model
KEY = "workbench-routes-key-41c7"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEXT = "I was charged twice this month, please refund one of the charges"
MARKUP = "<img src=x onerror=alert(1)><script>alert(2)</script>"
WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"


@pytest.fixture(scope="module")
def port(engine, rubric_folder):
    settings = ServeSettings(access=Access(api_keys=(KEY,)), limits=Limits(new_question_set_burst=40))
    with running_server(engine, rubric_folder, settings) as port:
        yield port


def run_source(source: str) -> dict:
    """The namespace of the generated code, run as a module of its own (none of this file's `__future__` flags)."""
    scope: dict = {"__name__": "exported"}
    exec(compile(source, "exported", "exec", dont_inherit=True), scope)  # noqa: S102 - the code the route wrote
    return scope


def post(client, path, body):
    return client.post(path, body, headers=AUTH)


def test_every_new_route_asks_for_the_key(client):
    assert client.get("/v1/rubrics/tickets/yaml").status == 401
    for path in ("/v1/rubrics/export", "/v1/rubrics/coherence", "/v1/rubrics/eval"):
        assert client.post(path, {"rubric": TICKETS}).status == 401, path


def test_a_served_rubric_is_given_as_yaml_that_reads_back_equal(client):
    reply = client.get("/v1/rubrics/tickets/yaml", headers=AUTH)
    assert reply.status == 200 and reply.body["name"] == "tickets"
    assert loads_rubric(reply.body["yaml"]) == loads_rubric(TICKETS)
    missing = client.get("/v1/rubrics/nope/yaml", headers=AUTH)
    assert missing.status == 404 and missing.body["error"]["type"] == "NotFound"


def test_the_export_round_trips_and_its_requests_are_answered(client):
    reply = post(client, "/v1/rubrics/export", {"name": "tickets", "text": TEXT})
    assert reply.status == 200, reply.body
    assert loads_rubric(reply.body["yaml"]) == loads_rubric(TICKETS)
    scope = run_source(reply.body["python"])
    assert rubric_of(scope["Tickets"]) == loads_rubric(TICKETS)
    systemone = post(client, "/v1/systemone", reply.body["systemone"])
    assert systemone.status == 200, systemone.body
    assert list(systemone.body["answers"]) == ["refund", "team"]
    decisions = post(client, "/v1/decisions", reply.body["decisions"])
    assert decisions.status == 200, decisions.body
    assert [answer["name"] for answer in decisions.body["answers"]] == ["refund", "team"]


def test_the_shipped_workflow_as_a_class_reads_back_equal():
    rubric = loads_rubric((WORKFLOWS / "support_triage.yaml").read_text(encoding="utf-8"))
    scope = run_source(python_source(rubric))
    assert rubric_of(scope["SupportTriage"]) == rubric


def test_coherence_measures_each_variant_of_a_field(client):
    reply = post(client, "/v1/rubrics/coherence", {"rubric": TICKETS, "text": TEXT, "field": "team"})
    assert reply.status == 200, reply.body
    assert [(check["check"], check["variant"]) for check in reply.body["checks"]] == [
        ("order", "reversed"), ("alone", "one-field rubric")]
    for check in reply.body["checks"]:
        assert 0 <= check["gap"] <= 1 and set(check["probabilities"]) == {"billing", "shipping"}
    assert reply.body["checks"][0]["order"] == ["shipping", "billing"]
    boolean = post(client, "/v1/rubrics/coherence", {"rubric": TICKETS, "text": TEXT, "field": "refund"}).body
    negation = boolean["checks"][-1]
    assert negation["check"] == "negation"
    assert negation["question"] == negated_question("Whether the customer asks for money back")
    assert negation["question"] == "Whether it is NOT the case that the customer asks for money back"
    assert negation["gap"] == pytest.approx(abs(negation["p_true"] - (1 - negation["p_true_negated"])))
    unknown = post(client, "/v1/rubrics/coherence", {"rubric": TICKETS, "text": TEXT, "field": MARKUP})
    assert unknown.status == 400 and unknown.body["error"]["field"] == "field"


ROWS = [
    {"text": "I was charged twice, refund me", "refund": True, "team": "billing", "id": 1},
    {"text": "my parcel never arrived", "refund": "false", "team": "shipping"},
    {"text": "the invoice amount is wrong", "refund": False, "team": "billing"},
    {"text": "the courier left my box in the rain", "refund": "", "team": "shipping"},
]


def test_eval_scores_each_labelled_field_with_the_quality_figures(client):
    reply = post(client, "/v1/rubrics/eval", {"rubric": TICKETS, "rows": ROWS})
    assert reply.status == 200, reply.body
    body = reply.body
    assert body["rows"] == 4 and body["errors"] == 0 and body["ignored_columns"] == ["id"]
    team = body["fields"]["team"]
    assert team["n"] == 4 and 0 <= team["accuracy"] <= 1
    assert team["confusion"]["gold"] == ["billing", "shipping"]
    assert sum(map(sum, team["confusion"]["counts"])) == 4
    assert team["reliability"] and "coverage" in team["abstention"]
    assert [point["threshold"] for point in team["coverage_curve"]][:3] == [0.0, 0.05, 0.1]
    assert team["coverage_curve"][0]["coverage"] == 1.0
    assert body["fields"]["refund"]["n"] == 3  # the blank gold is left out


def test_eval_refuses_rows_over_the_limit_in_one_located_400(client):
    rows = [{"text": f"row {i}", "team": "billing"} for i in range(MAX_EVAL_ROWS + 1)]
    reply = post(client, "/v1/rubrics/eval", {"rubric": TICKETS, "rows": rows})
    assert reply.status == 400 and reply.body["error"]["field"] == "rows"
    assert f"at most {MAX_EVAL_ROWS} rows" in reply.body["error"]["message"]
    bad = post(client, "/v1/rubrics/eval", {"rubric": TICKETS, "rows": [{"text": 3}]})
    assert bad.status == 400 and bad.body["error"]["field"] == "rows[0].text"


@pytest.mark.parametrize("path", ["/v1/rubrics/export", "/v1/rubrics/coherence", "/v1/rubrics/eval"])
def test_hostile_requests_are_refused_as_data(client, path):
    hostile = f"name: x\nfields:\n  {MARKUP}: {{kind: boolean, question: q}}\n"
    body = {"rubric": hostile, "text": TEXT, "field": "a", "rows": [{"text": TEXT}]}
    allowed = {"/v1/rubrics/export": ("rubric", "text"), "/v1/rubrics/coherence": ("rubric", "text", "field"),
               "/v1/rubrics/eval": ("rubric", "rows")}[path]
    reply = post(client, path, {key: body[key] for key in allowed})
    assert reply.status == 422 and reply.body["error"]["type"] == "RubricError"
    assert MARKUP in json.dumps(reply.body)  # the name, quoted back as data
    oversize = client.post(path, raw=json.dumps({"rubric": "x" * 3_000_000}).encode(),
                           headers={**AUTH, "Content-Type": "application/json"})
    assert oversize.status == 413
    unknown = post(client, path, {"rubric": TICKETS, "texts": ["y"]})
    assert unknown.status == 400 and unknown.body["error"]["field"] == "texts"


def test_markup_in_labels_is_returned_as_data(client):
    rubric = (f"name: marked\nfields:\n  verdict:\n    kind: choice\n    question: 'Which {MARKUP}'\n"
              f"    options: {{'<b>x</b>': one, '<i>y</i>': two}}\n")
    reply = post(client, "/v1/rubrics/export", {"rubric": rubric, "text": MARKUP})
    assert reply.status == 200
    assert reply.body["systemone"]["state"] == MARKUP
    scope = run_source(reply.body["python"])
    assert list(rubric_of(scope["Marked"]).field("verdict").options) == ["<b>x</b>", "<i>y</i>"]
