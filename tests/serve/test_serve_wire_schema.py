"""Real `/v1/systemone` answers against a JSON schema written from the response-field table of
docs/serving.md: every field the shared format declares required is there (`confidence` on choice and
score answers, `legend` on score answers), with its type and range, and nothing else is added."""

from __future__ import annotations

import importlib.util
import math
import re
from typing import Any

import pytest
from serve_client import ROOT, client, rubric_folder, server_port  # noqa: F401 - fixtures

pytestmark = pytest.mark.model

PROBABILITY = {"type": "number", "minimum": 0, "maximum": 1}
LEVEL = {"pattern": "^[0-9]$"}
NOUL = {
    "type": "object", "required": ["type", "noul"], "additionalProperties": False,
    "properties": {"type": {"const": "noul"}, "noul": PROBABILITY},
}
CHOICE = {
    "type": "object", "required": ["type", "choice", "probabilities", "confidence"], "additionalProperties": False,
    "properties": {
        "type": {"const": "choice"},
        "choice": {"type": "string", "minLength": 1},
        "probabilities": {"type": "object", "minProperties": 2, "additionalProperties": PROBABILITY},
        "confidence": PROBABILITY,
    },
}
SCORE = {
    "type": "object", "required": ["type", "score", "legend", "probabilities", "confidence"], "additionalProperties": False,
    "properties": {
        "type": {"const": "score"},
        "score": {"type": "number", "minimum": 0, "maximum": 9},
        "legend": {"type": "object", "minProperties": 2, "maxProperties": 10, "propertyNames": LEVEL,
                   "additionalProperties": {"type": "string", "minLength": 1}},
        "probabilities": {"type": "object", "minProperties": 2, "maxProperties": 10, "propertyNames": LEVEL,
                          "additionalProperties": PROBABILITY},
        "confidence": PROBABILITY,
    },
}
RESPONSE = {
    "type": "object", "required": ["model", "answers", "usage"], "additionalProperties": False,
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "answers": {"type": "object", "minProperties": 1, "additionalProperties": {"oneOf": [NOUL, CHOICE, SCORE]}},
        "usage": {
            "type": "object", "required": ["input_tokens", "output_tokens"], "additionalProperties": False,
            "properties": {"input_tokens": {"type": "integer", "minimum": 1}, "output_tokens": {"type": "integer", "const": 0}},
        },
    },
}
ERROR = {
    "type": "object", "required": ["error"], "additionalProperties": False,
    "properties": {"error": {
        "type": "object", "required": ["status", "type", "field", "message"], "additionalProperties": False,
        "properties": {
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "type": {"type": "string", "minLength": 1},
            "field": {"type": ["string", "null"]},
            "message": {"type": "string", "minLength": 1},
            "problems": {"type": "array", "items": {
                "type": "object", "required": ["field", "message"], "additionalProperties": False,
                "properties": {"field": {"type": ["string", "null"]}, "message": {"type": "string"}},
            }},
        },
    }},
}

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def problems(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """What is wrong with `value` under `schema` (the keywords the schemas above use), as located messages."""
    found: list[str] = []
    types = schema.get("type")
    if types is not None and not any(_is(value, kind) for kind in ([types] if isinstance(types, str) else types)):
        return [f"{where}: {value!r} is not of type {types}"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "oneOf" in schema:
        passing = [option for option in schema["oneOf"] if not problems(value, option, where)]
        if len(passing) != 1:
            found.append(f"{where}: matches {len(passing)} of the oneOf schemas, not one")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{where}: {value} < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            found.append(f"{where}: {value} > {schema['maximum']}")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        found.append(f"{where}: shorter than {schema['minLength']}")
    if isinstance(value, dict):
        if len(value) < schema.get("minProperties", 0) or len(value) > schema.get("maxProperties", math.inf):
            found.append(f"{where}: {len(value)} properties")
        found += [f"{where}: no {key!r}" for key in schema.get("required", []) if key not in value]
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if "propertyNames" in schema and not re.search(schema["propertyNames"]["pattern"], key):
                found.append(f"{where}: key {key!r} does not match {schema['propertyNames']['pattern']}")
            if key in properties:
                found += problems(item, properties[key], f"{where}.{key}")
            elif extra is False:
                found.append(f"{where}: unexpected key {key!r}")
            elif isinstance(extra, dict):
                found += problems(item, extra, f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += problems(item, schema["items"], f"{where}[{index}]")
    return found


def _is(value: Any, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, _TYPES[kind])


def assert_valid(value: Any, schema: dict[str, Any]) -> None:
    assert problems(value, schema) == [], problems(value, schema)
    if importlib.util.find_spec("jsonschema") is not None:  # the same verdict from a full implementation, when present
        import jsonschema

        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator)


REQUESTS = [
    ("I was charged twice for my March invoice, please refund the duplicate", {
        "refund": {"type": "noul", "instructions": "Does the customer ask for money back"},
        "bare": {"type": "noul", "instructions": "Is the customer angry", "criteria": {"true": "angry words"}},
        "team": {"type": "choice", "instructions": "Which team handles it",
                 "criteria": {"billing": "charges", "shipping": None, "returns": "sending goods back"}},
        "two": {"type": "choice", "instructions": "Is it about money", "criteria": {"money": None, "other": None}},
        "urgency": {"type": "score", "instructions": "How urgent it is", "criteria": ["can wait", "today"]},
        "severity": {"type": "score", "instructions": "How severe it is",
                     "criteria": [f"level   {i}\n described" for i in range(10)]},
    }),
    ([{"role": "user", "content": "my parcel never came"}, {"role": "assistant", "content": "Checking"}], {
        "topic": {"type": "choice", "instructions": "What is it about",
                  "criteria": {label: None for label in ("money", "delivery", "account", "film", "other")}},
    }),
    ({"subject": "refund", "body": "charged twice", "amount": 12.5}, {
        "tone": {"type": "score", "instructions": "How polite is it", "criteria": ["rude", "neutral", "polite"]},
    }),
]


@pytest.mark.parametrize("index", range(len(REQUESTS)))
def test_real_answers_follow_the_documented_schema(client, index):
    state, questions = REQUESTS[index]
    reply = client.post("/v1/systemone", {"state": state, "questions": questions})
    assert reply.status == 200, reply.body
    assert_valid(reply.body, RESPONSE)
    for qid, answer in reply.body["answers"].items():
        question = questions[qid]
        assert answer["type"] == question["type"]
        if answer["type"] == "choice":
            assert list(answer["probabilities"]) == list(question["criteria"]) and answer["choice"] in question["criteria"]
            assert answer["confidence"] == answer["probabilities"][answer["choice"]]
        elif answer["type"] == "score":
            levels = [str(level) for level in range(len(question["criteria"]))]
            assert list(answer["legend"]) == list(answer["probabilities"]) == levels
            assert list(answer["legend"].values()) == [" ".join(text.split()) for text in question["criteria"]]
            assert answer["confidence"] == max(answer["probabilities"].values())
            assert answer["score"] <= len(levels) - 1
        if "probabilities" in answer:
            assert sum(answer["probabilities"].values()) == pytest.approx(1.0)


def test_refusals_follow_the_documented_error_schema(client):
    for path, body in (("/v1/systemone", {"state": "x", "questions": {}}),
                       ("/v1/systemone", {"state": 1, "questions": {"q": {"type": "noul", "instructions": "a"}}}),
                       ("/v1/rubrics/nope/decide", {"text": "x"}),
                       ("/v1/rubrics/sentiment/decide", {"texts": []})):
        reply = client.post(path, body)
        assert reply.status >= 400
        assert_valid(reply.body, ERROR)


def test_the_schema_is_the_documented_table():
    text = (ROOT / "docs" / "serving.md").read_text(encoding="utf-8")
    table = text[text.index("**Response fields.**"):text.index("### `GET /v1/models`")]
    documented = set(re.findall(r"^\| `([a-z_.<>]+)`", table, re.MULTILINE))
    in_schema = {*RESPONSE["properties"], *(f"answers.<id>.{key}" for schema in (NOUL, CHOICE, SCORE)
                                             for key in schema["properties"])}
    assert documented == in_schema
    for schema in (NOUL, CHOICE, SCORE):  # "exactly these keys" is said in the prose under the table
        assert ", ".join(f"`{key}`" for key in schema["required"][:-1]) in table


def test_the_validator_catches_what_a_strict_client_would_reject():
    answer = {"type": "score", "score": 1.0, "probabilities": {"0": 0.5, "1": 0.5}}
    assert any("no 'legend'" in p for p in problems(answer, SCORE)) and any("no 'confidence'" in p for p in problems(answer, SCORE))
    assert problems({"type": "choice", "choice": "a", "probabilities": {"a": 1.0, "b": 0.0}}, CHOICE) == ["$: no 'confidence'"]
    assert problems({"type": "noul", "noul": 1.5}, NOUL) == ["$.noul: 1.5 > 1"]
    assert problems({"type": "noul", "noul": 0.5, "extra": 1}, NOUL) == ["$: unexpected key 'extra'"]
