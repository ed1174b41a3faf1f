"""Long options over the wire: a 500-token option is decided, a 5,000-token one is a 422 whose message
names the field and the option and says the per-option token limit (not a 500, not a context error)."""

from __future__ import annotations

import pytest
from serve_client import client, rubric_folder, server_port  # noqa: F401 - fixtures

from decisionflow.compiler.trie import MAX_OPTION_TOKENS

pytestmark = pytest.mark.model

STATE = "The basket on the table holds one pear and nothing else."


def words(count: int) -> str:
    """`count` tokens of the bundled tokenizer: `apple`, then ` apple` repeated."""
    return " ".join(["apple"] * count)


def systemone(client, label: str):
    return client.post("/v1/systemone", {"state": STATE, "questions": {
        "fruit": {"type": "choice", "instructions": "Which fruit the basket holds", "criteria": {"pear": None, label: None}},
    }})


def chat(client, label: str):
    model = client.get("/v1/models").body["data"][0]["id"]
    schema = {"type": "object", "properties": {"fruit": {"enum": ["pear", label]}}, "required": ["fruit"],
              "additionalProperties": False}
    return client.post("/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": STATE}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "Basket", "schema": schema}},
    })


def refused_for_length(message: str) -> None:
    assert message.startswith("fields.fruit: the option 'apple apple apple")
    assert f"is 5,000 tokens long; an option may be at most {MAX_OPTION_TOKENS:,} tokens" in message


def test_systemone_decides_a_500_token_option(client, tokenizer):
    label = words(500)
    assert len(tokenizer(label, add_special_tokens=False)["input_ids"]) == 500
    reply = systemone(client, label)
    assert reply.status == 200, reply.body
    answer = reply.body["answers"]["fruit"]
    assert answer["choice"] in ("pear", label) and set(answer["probabilities"]) == {"pear", label}


def test_systemone_refuses_a_5000_token_option_naming_it(client):
    reply = systemone(client, words(5000))
    assert reply.status == 422
    error = reply.body["error"]
    assert error["type"] == "CompileError" and error["field"] == "questions.fruit.criteria"
    refused_for_length(error["message"])


def test_chat_completions_decides_a_500_token_option(client):
    reply = chat(client, words(500))
    assert reply.status == 200, reply.body
    assert reply.body["choices"][0]["message"]["content"] in ('{"fruit":"pear"}', '{"fruit":"%s"}' % words(500))


def test_chat_completions_refuses_a_5000_token_option_naming_it(client):
    reply = chat(client, words(5000))
    assert reply.status == 422
    error = reply.body["error"]
    assert error["param"] == "response_format.json_schema.schema" and error["type"] == "invalid_request_error"
    refused_for_length(error["message"])
