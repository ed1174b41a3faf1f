"""Hostile JSON schemas sent to `POST /v1/chat/completions` over a real server on loopback, with the `openai`
SDK: each is refused with a 400 naming the keyword and the property, or, where the schema is honoured,
answered with an object the schema accepts (judged by the `jsonschema` library); never a 5xx. The schema of
ten million paths is refused at the node budget (tests/spec/test_json_schema.py counts the reader's steps)."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator
from serve_client import Client, rubric_folder, running_server  # noqa: F401 - fixtures

from decisionflow.serve import Limits, ServeSettings

openai = pytest.importorskip("openai", reason="the `clients` extra (openai, instructor, langchain-openai)")

pytestmark = pytest.mark.model

MESSAGES = [{"role": "user", "content": "I was charged twice for my March invoice; refund the duplicate now."}]
B = {"type": "boolean"}


def obj(properties: dict, **extra) -> dict:
    return {"type": "object", "properties": properties, **extra}


def many_paths(levels: int, fan: int) -> dict:
    definitions: dict = {f"L{levels}": {"enum": ["a", "b"]}}
    for level in range(levels - 1, 0, -1):
        definitions[f"L{level}"] = {"anyOf": [{"$ref": f"#/$defs/L{level + 1}"}] * fan}
    return {"$defs": definitions, **obj({"refund": B, "x": {"$ref": "#/$defs/L1"}})}


REFUSED = [
    ("ten million paths", many_paths(8, 10), "x", "expands to more than 10,000 schema objects"),
    ("root not", obj({"refund": B}, **{"not": {"required": ["refund"]}}), "$", "`not` on an object"),
    ("root if/then", obj({"refund": B}, **{"if": {"required": ["refund"]}, "then": {"required": ["x"]}}), "$", "`if` on an object"),
    ("root oneOf", obj({"refund": B}, oneOf=[{"required": ["refund"]}, {"required": ["refund"]}]), "$", "`oneOf` on an object"),
    ("root minProperties", obj({"refund": B}, minProperties=2), "$", "`minProperties` 2 cannot hold"),
    ("root dependentRequired", obj({"refund": B}, dependentRequired={"refund": ["reason"]}), "$", "`dependentRequired` asks for 'reason'"),
    ("root enum", obj({"refund": B}, enum=[{"refund": True}]), "$", "`enum` on an object"),
    ("root const", obj({"refund": B}, const={"refund": True}), "$", "`const` on an object"),
    ("root anyOf", {"anyOf": [obj({"refund": B}), obj({"team": {"enum": ["billing"]}})]}, "$", "`anyOf` at the root"),
    ("root patternProperties", obj({"refund": B}, patternProperties={"^x_": B}), "$", "`patternProperties`"),
    ("nested maxProperties", obj({"refund": B, "c": obj({"a": B, "b": B}, maxProperties=1)}), "c", "`maxProperties` 1 cannot hold"),
    ("no value left", obj({"refund": B, "n": {"enum": [7, 9], "maximum": 5}}), "n", "allows no value here"),
    ("backtracking pattern", obj({"refund": B, "code": {"enum": ["a" * 40 + "!", "b"], "pattern": "(a|a)+$"}}), "code",
     "matching `pattern`"),
    ("dynamic reference", obj({"refund": B, "x": {"$dynamicRef": "#node"}}), "x", "`$dynamicRef`"),
    ("remote reference", obj({"refund": B, "x": {"$ref": "https://example.com/x.json"}}), "x", "points outside the schema"),
]

HONOURED = [
    ("allOf enum meets its sibling", obj({"team": {"enum": ["billing", "shipping", "returns"],
                                                   "allOf": [{"enum": ["shipping", "returns", "legal"]}]}, "refund": B})),
    ("enum beside anyOf", obj({"team": {"enum": ["billing", "shipping"], "anyOf": [{"const": "shipping"}, {"const": "legal"}]},
                               "refund": B})),
    ("enum beside maximum", obj({"severity": {"enum": [1, 5, 10], "maximum": 5}, "refund": B})),
    ("enum beside a draft-4 exclusive maximum", obj({"severity": {"enum": [1, 5, 10], "maximum": 5, "exclusiveMaximum": True},
                                                     "refund": B})),
    ("enum beside maxLength", obj({"team": {"enum": ["ops", "billing", "shipping"], "maxLength": 7}, "refund": B})),
    ("oneOf exactly one", obj({"team": {"oneOf": [{"enum": ["billing", "shipping"]}, {"enum": ["shipping", "returns"]}]},
                               "refund": B})),
    ("score with a hole", obj({"severity": {"type": "integer", "minimum": 0, "maximum": 5, "not": {"const": 3}}, "refund": B})),
    ("key constraints met", obj({"refund": B, "team": {"enum": ["billing", "returns"]}}, minProperties=2, maxProperties=2,
                                dependentRequired={"refund": ["team"]}, propertyNames={"pattern": "^[a-z]+$"})),
]


@pytest.fixture(scope="module")
def client(engine, rubric_folder):
    # Each honoured schema is a new question set: a budget large enough for all of them.
    settings = ServeSettings(limits=Limits(new_question_set_burst=len(HONOURED) + 4, new_question_sets_per_minute=600.0))
    with running_server(engine, rubric_folder, settings) as port:
        yield openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0), port


def sent(client, schema: dict) -> object:
    sdk, _ = client
    model = sdk.models.list().data[0].id
    return sdk.chat.completions.create(model=model, messages=MESSAGES,
                                       response_format={"type": "json_schema", "json_schema": {"name": "hostile", "schema": schema}})


@pytest.mark.parametrize(("schema", "path", "says"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_a_hostile_schema_is_refused_with_a_400_naming_the_keyword_and_path(client, schema, path, says):
    with pytest.raises(openai.BadRequestError) as raised:
        sent(client, schema)
    error = raised.value
    assert error.status_code == 400 and error.code == "unsupported_schema"
    assert error.param == "response_format.json_schema.schema"
    message = error.body["message"]
    assert message.startswith(f"{path}: ") and says in message, message


@pytest.mark.parametrize("schema", [case[1] for case in HONOURED], ids=[case[0] for case in HONOURED])
def test_an_honoured_schema_is_answered_with_an_object_it_accepts(client, schema):
    completion = sent(client, schema)
    answer = json.loads(completion.choices[0].message.content)
    assert list(answer) == list(schema["properties"])
    later = json.loads(json.dumps(schema).replace('"maximum": 5, "exclusiveMaximum": true', '"exclusiveMaximum": 5'))
    errors = [error.message for error in Draft202012Validator(later).iter_errors(answer)]
    assert not errors, (answer, errors)


def test_every_hostile_schema_sent_raw_is_answered_below_500(client):
    _, port = client
    raw = Client(port)
    model = raw.get("/v1/models").body["data"][0]["id"]
    for _, schema, *_ in REFUSED + HONOURED:
        body = {"model": model, "messages": MESSAGES,
                "response_format": {"type": "json_schema", "json_schema": {"name": "hostile", "schema": schema}}}
        reply = raw.post("/v1/chat/completions", body)
        assert reply.status in (200, 400), (reply.status, reply.body)
