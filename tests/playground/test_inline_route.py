"""`POST /v1/rubrics/decide`, the route the playground sends a YAML rubric to: the answer of the same rubric
served by name, the shared error shape with every problem located in the YAML, the shared budget of new
question sets, and the request checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_client import TICKETS, client_of_port, rubric_folder, running_server  # noqa: E402, F401 - fixtures

from decisionflow.errors import RubricError  # noqa: E402
from decisionflow.serve import Limits, ServeSettings  # noqa: E402
from decisionflow.serve.inline import parse_inline_request, read_rubric  # noqa: E402
from decisionflow.serve.refusals import Located  # noqa: E402

pytestmark = pytest.mark.model
ROUTE = "/v1/rubrics/decide"
TEXT = "I was charged twice this month, please refund one of the charges"


@pytest.fixture(scope="module")
def port(engine, rubric_folder):
    settings = ServeSettings(limits=Limits(new_question_set_burst=2, new_question_sets_per_minute=0.001))
    with running_server(engine, rubric_folder, settings) as port:
        yield port


def test_an_inline_rubric_answers_what_the_same_rubric_served_by_name_answers(client):
    named = client.post("/v1/rubrics/tickets/decide", {"text": TEXT})
    inline = client.post(ROUTE, {"rubric": TICKETS, "text": TEXT})
    assert named.status == inline.status == 200, inline.body
    assert inline.body["value"] == named.body["value"]
    assert set(inline.body) == {"value", "fields", "stats"}
    for name, field in named.body["fields"].items():
        got = inline.body["fields"][name]
        assert got["round"] == field["round"] and got["method"] == field["method"]
        assert got["probabilities"].keys() == field["probabilities"].keys()
        for label, p in field["probabilities"].items():
            assert got["probabilities"][label] == pytest.approx(p, abs=1e-5)
        assert got["candidate_mass"] == pytest.approx(field["candidate_mass"], abs=1e-5)
    again = client.post(ROUTE, {"rubric": TICKETS, "text": TEXT})  # the same text: the set already built
    assert again.status == 200 and again.body["value"] == inline.body["value"]


def test_a_broken_rubric_is_a_422_with_each_problem_located_in_the_yaml(client):
    one_option = "name: x\nfields:\n  team: {kind: choice, question: Which team, options: [billing]}\n"
    reply = client.post(ROUTE, {"rubric": one_option, "text": TEXT})
    assert reply.status == 422
    error = reply.body["error"]
    assert error["type"] == "RubricError" and error["field"] == "rubric.fields.team.options"
    assert error["message"] == "a choice field needs at least two options, got 1 (line 3)"
    syntax = client.post(ROUTE, {"rubric": "name: x\nfields: [\n", "text": TEXT}).body["error"]
    assert syntax["field"] == "rubric" and syntax["message"].startswith("line 3, column 1: ")
    several = "name: x\nfields:\n  a: {kind: nope, question: q}\n  b: {kind: boolean}\n"
    problems = client.post(ROUTE, {"rubric": several, "text": TEXT}).body["error"]["problems"]
    assert [p["field"] for p in problems] == ["rubric.fields.a.kind", "rubric.fields.b.question"]
    assert all("(line " in p["message"] for p in problems)


@pytest.mark.parametrize("body, field, says", [
    ([], "body", "JSON object"),
    ({"text": "x"}, "rubric", "has no `rubric`"),
    ({"rubric": TICKETS}, "text", "has no `text`"),
    ({"rubric": TICKETS, "text": "x", "texts": ["y"]}, "texts", "unknown key"),
    ({"rubric": "  ", "text": "x"}, "rubric", "blank text"),
    ({"rubric": {"name": "x"}, "text": "x"}, "rubric", "YAML text"),
    ({"rubric": TICKETS, "text": 3}, "text", "an input must be"),
])
def test_a_malformed_request_is_a_400_naming_its_key(client, body, field, says):
    reply = client.post(ROUTE, body)
    assert reply.status == 400, reply.body
    assert reply.body["error"]["field"] == field and says in reply.body["error"]["message"]


def test_an_input_the_model_cannot_read_is_a_422_at_text(client):
    reply = client.post(ROUTE, {"rubric": TICKETS, "text": "   "})
    assert reply.status == 422 and reply.body["error"]["type"] == "InputError"
    assert reply.body["error"]["field"] == "text"


def test_new_rubrics_are_charged_to_the_clients_budget_and_refused_beyond_it(client):
    # The module's server allows a burst of 2 new question sets. `tickets`, decided by name first, is prepared.
    assert client.post("/v1/rubrics/tickets/decide", {"text": TEXT}).status == 200
    answered = []
    for index in range(3):
        rubric = TICKETS.replace("name: tickets", f"name: budget_{index}")
        answered.append(client.post(ROUTE, {"rubric": rubric, "text": TEXT}))
    statuses = [reply.status for reply in answered]
    assert statuses[0] == 200 and 429 in statuses, statuses
    refused = next(reply for reply in answered if reply.status == 429)
    assert refused.body["error"]["type"] == "TooManyQuestionSets" and refused.body["error"]["field"] == "rubric"
    assert int(refused.headers["retry-after"]) >= 1
    # The same rubric sent inline is the rubric the engine holds prepared: never limited.
    assert client.post(ROUTE, {"rubric": TICKETS, "text": "where is my parcel"}).status == 200
    # A rubric that does not validate is refused before the budget is asked.
    assert client.post(ROUTE, {"rubric": "name: x\nfields: {}\n", "text": TEXT}).status == 422


def test_the_parts_without_a_server():
    with pytest.raises(Located) as refused:
        parse_inline_request({"rubric": "x", "text": None}, Limits())
    assert refused.value.field == "text"
    many = "name: x\nfields:\n  a:\n    kind: choice\n    question: q\n    options: [" + ", ".join(f"o{i}" for i in range(5)) + "]\n"
    with pytest.raises(RubricError) as crowded:
        read_rubric(many, Limits(max_options=4))
    assert [(p.location, p.message) for p in crowded.value.problems] == [("rubric.fields.a", "5 answers; at most 4 per field")]
