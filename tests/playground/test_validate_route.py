"""`POST /v1/rubrics/validate`, what the playground checks the YAML editor with as it is typed in: the same located
422 as `POST /v1/rubrics/decide` for a rubric that does not validate, the plan (each field's round and what it
depends on) and how its fields are read for one that does, nothing decided and no budget of new question sets
charged; the key, the body limit and the request checks of the other rubric routes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_client import TICKETS, client_of_port, rubric_folder, running_server  # noqa: E402, F401 - fixtures

from decisionflow.serve import Access, Limits, ServeSettings  # noqa: E402
from decisionflow.spec.plan import make_plan  # noqa: E402
from decisionflow.spec.yaml_rubric import loads_rubric  # noqa: E402

pytestmark = pytest.mark.model
ROUTE = "/v1/rubrics/validate"
KEY = "validate-route-key-7a31"
AUTH = {"Authorization": f"Bearer {KEY}"}
WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
ONE_OPTION = "name: broken\nfields:\n  team:\n    kind: choice\n    question: Which team handles it\n    options: [billing]\n"
DEPENDENT = """\
name: chain
fields:
  team:
    kind: choice
    question: Which team handles it
    options: [billing, shipping]
  refund:
    kind: boolean
    question: Whether the customer asks for money back
    after: [team]
  amount:
    kind: score
    question: How much is asked back, 0 to 3
    min: 0
    max: 3
    when: {refund: [true]}
"""


@pytest.fixture(scope="module")
def port(engine, rubric_folder):
    # One new question set a client may have prepared, refilled about never: a validation charging it would show.
    settings = ServeSettings(access=Access(api_keys=(KEY,)),
                             limits=Limits(new_question_set_burst=1, new_question_sets_per_minute=0.001))
    with running_server(engine, rubric_folder, settings) as port:
        yield port


def post(client, body, path=ROUTE):
    return client.post(path, body, headers=AUTH)


def test_it_asks_for_the_key(client):
    reply = client.post(ROUTE, {"rubric": TICKETS})
    assert reply.status == 401 and reply.body["error"]["field"] == "authorization"


def test_a_valid_rubric_gives_its_plan_each_fields_round_and_dependencies(client):
    reply = post(client, {"rubric": DEPENDENT})
    assert reply.status == 200, reply.body
    body = reply.body
    plan = make_plan(loads_rubric(DEPENDENT))
    assert body["valid"] is True and body["rubric"] == "chain"
    assert body["summary"] == f"valid: 3 fields, {plan.forward_passes} rounds"
    assert body["plan"]["forward_passes"] == plan.forward_passes == len(body["plan"]["rounds"]) == 3
    assert [r["fields"] for r in body["plan"]["rounds"]] == [["team"], ["refund"], ["amount"]]
    fields = {field["name"]: field for field in body["fields"]}
    assert [name for name in fields] == ["team", "refund", "amount"]
    assert {name: field["round"] for name, field in fields.items()} == {"team": 0, "refund": 1, "amount": 2}
    assert fields["refund"]["depends_on"] == ["team"] and fields["refund"]["when"] is None
    assert fields["amount"]["depends_on"] == ["refund"]
    assert fields["amount"]["when"] == {"field": "refund", "values": [True]}
    assert fields["amount"]["labels"] == ["0", "1", "2", "3"] and fields["team"]["kind"] == "choice"
    assert body["readout"] == {"by": "yaml", "name": None, "fitted": [], "calibrated": [], "adapter": None}


def test_the_shipped_workflow_plans_as_decisionflow_plan_does(client):
    text = (WORKFLOWS / "support_triage.yaml").read_text(encoding="utf-8")
    by_yaml = post(client, {"rubric": text})
    by_name = post(client, {"name": "sentiment"})
    assert by_yaml.status == 200 and by_name.status == 200, (by_yaml.body, by_name.body)
    plan = make_plan(loads_rubric(text))
    assert [r["fields"] for r in by_yaml.body["plan"]["rounds"]] == [list(r.fields) for r in plan.rounds]
    assert by_yaml.body["summary"] == f"valid: {len(loads_rubric(text))} fields, {plan.forward_passes} rounds"
    assert by_name.body["readout"]["by"] == "name" and by_name.body["readout"]["name"] == "sentiment"


def test_a_broken_rubric_is_the_located_422_the_decide_route_answers(client):
    reply = post(client, {"rubric": ONE_OPTION})
    decided = post(client, {"rubric": ONE_OPTION, "text": "hello"}, path="/v1/rubrics/decide")
    assert reply.status == decided.status == 422
    error = reply.body["error"]
    assert error == decided.body["error"]
    assert error["type"] == "RubricError" and error["field"] == "rubric.fields.team.options"
    assert error["message"] == "a choice field needs at least two options, got 1 (line 6)"
    syntax = post(client, {"rubric": "name: x\nfields:\n  team: [\n"})
    assert syntax.status == 422 and syntax.body["error"]["field"] == "rubric"
    assert syntax.body["error"]["message"].startswith("line 4, column 1: ")
    several = post(client, {"rubric": "name: x\nfields:\n  a: {kind: choice, question: q, options: [one]}\n"
                                      "  b: {kind: score, question: q, min: 3, max: 1}\n"})
    assert several.status == 422
    assert [problem["field"] for problem in several.body["error"]["problems"]] == ["rubric.fields.a.options",
                                                                                    "rubric.fields.b.max"]
    assert all("(line " in problem["message"] for problem in several.body["error"]["problems"])


def test_validating_charges_no_budget_and_decides_nothing(client):
    for index in range(5):  # five new rubrics with a budget of one new question set
        rubric = TICKETS.replace("name: tickets", f"name: checked_{index}")
        reply = post(client, {"rubric": rubric})
        assert reply.status == 200, reply.body
        assert "stats" not in reply.body and "value" not in reply.body
    fresh = TICKETS.replace("name: tickets", "name: decided_after_checks")
    decided = post(client, {"rubric": fresh, "text": "refund my duplicate charge"}, path="/v1/rubrics/decide")
    assert decided.status == 200, decided.body  # the one new question set was still there to spend
    spent = post(client, {"rubric": TICKETS.replace("name: tickets", "name: one_too_many"), "text": "hi"},
                 path="/v1/rubrics/decide")
    assert spent.status == 429  # and the budget does bite: validating simply never drew on it
    assert post(client, {"rubric": TICKETS.replace("name: tickets", "name: still_checked")}).status == 200


def test_bad_requests_are_located_refusals(client):
    missing = post(client, {"name": "<b>nope</b>"})
    assert missing.status == 404 and missing.body["error"]["field"] == "name"
    assert "<b>nope</b>" in json.dumps(missing.body)  # quoted back as data
    both = post(client, {"name": "tickets", "rubric": TICKETS})
    assert both.status == 400 and both.body["error"]["field"] == "name"
    nothing = post(client, {})
    assert nothing.status == 400 and nothing.body["error"]["field"] == "rubric"
    extra = post(client, {"rubric": TICKETS, "text": "x"})
    assert extra.status == 400 and extra.body["error"]["field"] == "text"
    blank = post(client, {"rubric": "  "})
    assert blank.status == 400 and "blank" in blank.body["error"]["message"]
    oversize = client.post(ROUTE, raw=json.dumps({"rubric": "x" * 3_000_000}).encode(),
                           headers={**AUTH, "Content-Type": "application/json"})
    assert oversize.status == 413
    crowded = "name: x\nfields:\n  a:\n    kind: choice\n    question: q\n    options: [" + ", ".join(
        f"o{i}" for i in range(Limits().max_options + 1)) + "]\n"
    too_many = post(client, {"rubric": crowded})
    assert too_many.status == 422 and too_many.body["error"]["field"] == "rubric.fields.a"
