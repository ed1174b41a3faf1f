"""JSON Schema -> rubric (`spec.json_schema`): what each construct becomes, how the answer object is built
again, and what is refused, with the JSON path named. No model: the schemas are the ones pydantic and the
`openai` SDK write, and hand-written ones for the forms they do not."""

from __future__ import annotations

import enum
import json
import time
from typing import Literal, Optional

import pytest
from pydantic import BaseModel, Field

from decisionflow.runtime.result import Decision, FieldResult, Stats
from decisionflow.spec import FieldKind, dump_rubric, loads_rubric, rubric_of, typed_model
from decisionflow.spec.json_schema import Chosen, Decided, Fixed, Nested, SchemaError, from_json_schema
from decisionflow.spec.rubric import Rubric


class Team(str, enum.Enum):
    billing = "billing"
    shipping = "shipping"
    returns = "returns"


class Level(enum.IntEnum):
    low = 1
    mid = 2
    high = 3


class Customer(BaseModel):
    """About the customer."""

    tier: Literal["free", "pro", "enterprise"] = Field(description="The customer's plan")
    churn_risk: bool


class Ticket(BaseModel):
    """Triage one ticket."""

    team: Team
    kind: Literal["question", "complaint"]
    refund: bool = Field(description="Whether a refund is asked for")
    severity: int = Field(ge=0, le=9)
    level: Level
    escalate: Optional[bool] = None
    customer: Customer
    tags: list[Literal["urgent", "legal", "vip"]]
    version: Literal["v1"] = "v1"


def strict_schema(model: type[BaseModel]) -> dict:
    """What `client.chat.completions.parse(response_format=model)` sends."""
    from openai.lib._parsing._completions import type_to_response_format_param

    return type_to_response_format_param(model)["json_schema"]["schema"]


def obj(properties: dict, **extra) -> dict:
    return {"type": "object", "properties": properties, **extra}


def decision_of(schema_rubric, values: dict, true_probabilities: dict | None = None) -> Decision:
    """A decision as the engine returns it, with the given answers (for the assembly only: no model is asked)."""
    fields = {}
    for name, spec in schema_rubric.rubric.fields.items():
        value = values[name]
        if spec.kind is FieldKind.BOOLEAN:
            p = (true_probabilities or {}).get(name, 0.9 if value else 0.1)
            probabilities = {"true": p, "false": 1 - p}
        else:
            probabilities = {label: float(label == str(value).lower() or label == value) for label in spec.labels}
        fields[name] = FieldResult(name, spec.kind, value, probabilities, 0.9, 0, "branch")
    return Decision("t", None, fields, Stats(2, 10, 5, 50, True))


@pytest.mark.parametrize("writer", [strict_schema, lambda model: model.model_json_schema()], ids=["openai", "pydantic"])
def test_a_pydantic_model_becomes_one_field_per_closed_set_property(writer):
    schema_rubric = from_json_schema(writer(Ticket))
    fields = schema_rubric.rubric.fields
    assert list(fields) == ["team", "kind", "refund", "severity", "level", "escalate", "customer_tier",
                            "customer_churn_risk", "tags_urgent", "tags_legal", "tags_vip"]
    assert fields["team"].kind is FieldKind.CHOICE and list(fields["team"].options) == ["billing", "shipping", "returns"]
    assert fields["refund"].kind is FieldKind.BOOLEAN and fields["refund"].question == "Whether a refund is asked for"
    assert (fields["severity"].kind, fields["severity"].min, fields["severity"].max) == (FieldKind.SCORE, 0, 9)
    # An integer enum answers integers: its options are written as JSON numbers.
    assert fields["level"].literals == {"1": 1, "2": 2, "3": 3}
    # Optional[bool]: null is one more answer.
    assert fields["escalate"].kind is FieldKind.CHOICE and fields["escalate"].literals == {"true": True, "false": False, "null": None}
    assert fields["customer_tier"].question == "Customer: The customer's plan"
    assert all(fields[f"tags_{tag}"].kind is FieldKind.BOOLEAN for tag in ("urgent", "legal", "vip"))
    assert schema_rubric.paths["customer_tier"] == "customer.tier" and schema_rubric.paths["tags_vip"] == "tags[]"
    assert schema_rubric.rubric.instructions == "Triage one ticket."
    assert schema_rubric.rubric.pin_first and schema_rubric.rubric.name == "Ticket"
    shape = dict(schema_rubric.shape.keys)
    assert shape["version"] == Fixed("v1") and isinstance(shape["customer"], Nested) and isinstance(shape["tags"], Chosen)
    assert shape["team"] == Decided("team") and dict(shape["customer"].keys)["tier"] == Decided("customer_tier")


def test_the_answer_is_the_schemas_object_and_the_model_validates_it():
    schema_rubric = from_json_schema(strict_schema(Ticket))
    decided = {"team": "returns", "kind": "question", "refund": True, "severity": 7, "level": "3", "escalate": "null",
               "customer_tier": "pro", "customer_churn_risk": False, "tags_urgent": True, "tags_legal": False,
               "tags_vip": True}
    answer = schema_rubric.answer(decision_of(schema_rubric, decided))
    assert list(answer) == list(Ticket.model_fields)
    assert answer == {"team": "returns", "kind": "question", "refund": True, "severity": 7, "level": 3, "escalate": None,
                      "customer": {"tier": "pro", "churn_risk": False}, "tags": ["urgent", "vip"], "version": "v1"}
    parsed = Ticket.model_validate_json(json.dumps(answer))
    assert parsed.team is Team.returns and parsed.level is Level.high and parsed.escalate is None


def test_a_multi_label_array_keeps_within_min_and_max_items_by_belief():
    schema = obj({"tags": {"type": "array", "items": {"enum": ["a", "b", "c", "d"]}, "uniqueItems": True,
                           "minItems": 1, "maxItems": 2}})
    schema_rubric = from_json_schema(schema)
    none_true = {"tags_a": False, "tags_b": False, "tags_c": False, "tags_d": False}
    beliefs = {"tags_a": 0.2, "tags_b": 0.45, "tags_c": 0.1, "tags_d": 0.3}
    assert schema_rubric.answer(decision_of(schema_rubric, none_true, beliefs)) == {"tags": ["b"]}
    all_true = dict.fromkeys(none_true, True)
    beliefs = {"tags_a": 0.6, "tags_b": 0.9, "tags_c": 0.7, "tags_d": 0.95}
    assert schema_rubric.answer(decision_of(schema_rubric, all_true, beliefs)) == {"tags": ["b", "d"]}


def test_typed_enums_keep_their_json_type_and_mixed_enums_are_choices():
    schema = obj({
        "ratio": {"enum": [0.5, 1.0, 1.5]},
        "mixed": {"enum": ["none", 1, True, None]},
        "flag": {"type": ["boolean", "null"]},
        "described": {"oneOf": [{"const": "x", "description": "the x"}, {"const": "y", "title": "Why"}]},
        "stepped": {"type": "integer", "minimum": 0, "maximum": 100, "multipleOf": 25},
        "nullable_score": {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 3}, {"type": "null"}]},
        "openapi_nullable": {"type": "string", "enum": ["a", "b"], "nullable": True},
        # JSON Schema compares numbers by value: 1 and 1.0 are one answer; true and 1 stay two
        "same_number": {"enum": [1, 1.0, 2, True]},
        "same_across_a_union": {"anyOf": [{"enum": [1, 2]}, {"const": 2.0}, {"const": 3.5}]},
    })
    fields = from_json_schema(schema).rubric.fields
    assert fields["ratio"].literals == {"0.5": 0.5, "1.0": 1.0, "1.5": 1.5}
    assert list(fields["mixed"].options) == ["none", "1", "true", "null"]
    assert fields["mixed"].literals == {"1": 1, "true": True, "null": None}
    assert fields["flag"].literals == {"true": True, "false": False, "null": None}
    assert fields["described"].options == {"x": "the x", "y": "Why"} and fields["described"].literals is None
    assert fields["stepped"].literals == {"0": 0, "25": 25, "50": 50, "75": 75, "100": 100}
    assert list(fields["nullable_score"].options) == ["1", "2", "3", "null"]
    assert list(fields["openapi_nullable"].options) == ["a", "b", "null"]
    assert fields["mixed"].json_value("true") is True and fields["mixed"].json_value("none") == "none"
    assert fields["same_number"].literals == {"1": 1, "2": 2, "true": True}
    assert fields["same_across_a_union"].literals == {"1": 1, "2": 2, "3.5": 3.5}


@pytest.mark.parametrize(("bounds", "expected"), [
    ({"minimum": 1, "maximum": 5}, (1, 5)),
    ({"exclusiveMinimum": 0, "exclusiveMaximum": 4}, (1, 3)),
    ({"minimum": 0, "exclusiveMinimum": True, "maximum": 4, "exclusiveMaximum": True}, (1, 3)),  # draft 4
    ({"minimum": 0.5, "maximum": 3.5}, (1, 3)),
])
def test_integer_bounds_in_every_draft_become_a_score(bounds, expected):
    spec = from_json_schema(obj({"n": {"type": "integer", **bounds}})).rubric.fields["n"]
    assert (spec.kind, spec.min, spec.max) == (FieldKind.SCORE, *expected)


def test_references_siblings_single_allof_and_name_clashes():
    schema = {
        "$defs": {"Choice": {"enum": ["a", "b"], "description": "from the definition"},
                  "Inner": {"type": "object", "properties": {"x": {"type": "boolean"}}}},
        "type": "object",
        "properties": {
            "plain": {"$ref": "#/$defs/Choice"},
            "described": {"$ref": "#/$defs/Choice", "description": "from the property"},
            "wrapped": {"allOf": [{"$ref": "#/$defs/Choice"}], "title": "Wrapped title"},
            "old_style": {"$ref": "#/definitions/Old"},
            "inner": {"$ref": "#/$defs/Inner"},
            "inner_x": {"type": "boolean"},
            "2fa-enabled": {"type": "boolean"},
            "model_dump": {"type": "boolean"},
        },
        "definitions": {"Old": {"type": "boolean"}},
    }
    schema_rubric = from_json_schema(schema)
    fields = schema_rubric.rubric.fields
    assert fields["plain"].question == "from the definition" and fields["described"].question == "from the property"
    assert fields["wrapped"].question == "Wrapped title" and fields["old_style"].kind is FieldKind.BOOLEAN
    assert schema_rubric.paths["inner_x"] == "inner.x" and schema_rubric.paths["inner_x_2"] == "inner_x"
    assert schema_rubric.paths["f_2fa_enabled"] == '["2fa-enabled"]'
    assert "model_dump_field" in fields  # a name pydantic models use is renamed, the JSON key kept
    answer = schema_rubric.answer(decision_of(schema_rubric, {
        "plain": "a", "described": "b", "wrapped": "a", "old_style": True, "inner_x": False, "inner_x_2": True,
        "f_2fa_enabled": True, "model_dump_field": False}))
    assert answer == {"plain": "a", "described": "b", "wrapped": "a", "old_style": True, "inner": {"x": False},
                      "inner_x": True, "2fa-enabled": True, "model_dump": False}


def test_a_function_description_equal_to_the_schemas_is_said_once():
    schema = obj({"a": {"type": "boolean"}}, description="Triage one ticket.")
    assert from_json_schema(schema, instructions="Be brief.\n\nTriage one ticket.").rubric.instructions == \
        "Be brief.\n\nTriage one ticket."
    assert from_json_schema(schema, instructions="Be brief.").rubric.instructions == "Be brief.\n\nTriage one ticket."


def test_instructions_keep_their_lines_and_lose_control_characters():
    rubric = from_json_schema(obj({"a": {"type": "boolean"}}), instructions="One\r\ntwo\x00three\u2028four").rubric
    assert rubric.instructions == "One\ntwo three\nfour"


STRING = {"type": "string"}


@pytest.mark.parametrize(("schema", "path", "says"), [
    (obj({"notes": STRING}), "notes", "a string without `enum` is open-ended"),
    (obj({"when": {"type": "string", "format": "date-time"}}), "when", "`format`"),
    (obj({"code": {"type": "string", "pattern": "^[A-Z]+$"}}), "code", "`pattern`"),
    (obj({"score": {"type": "number", "minimum": 0, "maximum": 1}}), "score", "a number that is not an enum"),
    (obj({"count": {"type": "integer", "minimum": 0}}), "count", "without a maximum"),
    (obj({"count": {"type": "integer"}}), "count", "without a minimum"),
    (obj({"count": {"type": "integer", "minimum": 0, "maximum": 500}}), "count", "501 levels"),
    (obj({"items": {"type": "array", "items": obj({"a": {"type": "boolean"}})}}), "items[]", "an array of objects"),
    (obj({"pair": {"type": "array", "prefixItems": [{"type": "boolean"}]}}), "pair", "tuple"),
    (obj({"names": {"type": "array", "items": STRING}}), "names[]", "a string without `enum`"),
    (obj({"any": {"type": "array"}}), "any", "without `items`"),
    (obj({"flags": {"type": "array", "items": {"type": "boolean"}}}), "flags[]", "an array of booleans is open-ended"),
    (obj({"map": {"type": "object", "additionalProperties": {"type": "boolean"}}}), "map", "a map of any keys"),
    (obj({"anything": {}}), "anything", "any value"),
    (obj({"untyped": {"description": "no type"}}), "untyped", "any value"),
    (obj({"a": {"$ref": "https://example.com/x.json"}}), "a", "points outside the schema"),
    (obj({"a": {"$ref": "#/$defs/Missing"}}), "a", "names nothing"),
    (obj({"a": {"allOf": [{"type": "boolean"}, {"enum": [True]}]}}), "a", "`allOf` of several"),
    (obj({"a": {"not": {"type": "boolean"}}}), "a", "`not` is not read"),
    (obj({"a": {"type": "boolean", "if": {}, "then": {}}}), "a", "`if` is not read"),
    (obj({"a": {"anyOf": [obj({"x": {"type": "boolean"}}), obj({"y": {"type": "boolean"}})]}}), "a", "a choice of shapes"),
    (obj({"a": {"enum": [{"x": 1}, "b"]}}), "a", "an enum of objects"),
    (obj({"a": {"enum": ["1", 1]}}), "a", "read alike"),
    (obj({"a": {"enum": ["", "b"]}}), "a", "is empty"),
    (obj({"a": {"enum": []}}), "a", "non-empty list"),
    (obj({"a": {"type": "string", "enum": ["x", 3]}}), "a", "not of the declared type"),
    (obj({"a": {"const": "x"}}), "$", "nothing to decide"),
    (obj({"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {"c": STRING}}}}}), "a.b.c",
     "open-ended"),
    ({"type": "array", "items": {"type": "boolean"}}, "$", "must describe an object"),
    ([1, 2], "$", "must be a JSON object"),
    (obj({"a": {"type": "boolean"}}, required=["b"]), "$", "`required` names 'b'"),
])
def test_what_cannot_be_decided_is_refused_naming_the_property(schema, path, says):
    with pytest.raises(SchemaError) as raised:
        from_json_schema(schema)
    assert raised.value.path == path
    assert says in raised.value.problems[0].message
    assert str(raised.value).startswith(f"schema: {path}: ")


def test_recursion_is_refused_where_it_turns_back():
    schema = {"$defs": {"Node": obj({"value": {"type": "boolean"}, "next": {"$ref": "#/$defs/Node"}})},
              **obj({"root": {"$ref": "#/$defs/Node"}})}
    with pytest.raises(SchemaError, match="recursive") as raised:
        from_json_schema(schema)
    assert raised.value.path == "root.next"
    with pytest.raises(SchemaError, match="recursive"):
        from_json_schema({"$ref": "#/$defs/Node", "$defs": {"Node": obj({"child": {"$ref": "#/$defs/Node"}})}})


def test_every_open_ended_refusal_says_what_is_supported():
    with pytest.raises(SchemaError) as raised:
        from_json_schema(obj({"notes": STRING}))
    message = raised.value.problems[0].message
    assert "enum or const" in message and "integer with minimum and maximum" in message and "multi-label" in message


def test_limits_on_fields_options_and_depth():
    with pytest.raises(SchemaError, match="more than 3 questions"):
        from_json_schema(obj({"tags": {"type": "array", "items": {"enum": list("abcd")}}}), max_fields=3)
    with pytest.raises(SchemaError, match="at most 10"):
        from_json_schema(obj({"a": {"enum": [str(i) for i in range(11)]}}), max_options=10)
    deep: dict = {"type": "boolean"}
    for _ in range(40):
        deep = obj({"x": deep})
    with pytest.raises(SchemaError, match="more than 32 deep"):
        from_json_schema(deep)


def test_hostile_sizes_are_refused_in_linear_time():
    began = time.perf_counter()
    with pytest.raises(SchemaError):
        from_json_schema(obj({"a": {"enum": [str(i) for i in range(200_000)]}}))
    with pytest.raises(SchemaError):
        from_json_schema(obj({f"p{i}": {"type": "boolean"} for i in range(100_000)}))
    with pytest.raises(SchemaError, match="levels"):
        from_json_schema(obj({"n": {"type": "integer", "minimum": -10**300, "maximum": 10**300}}))
    assert time.perf_counter() - began < 20


def test_a_schema_rubric_is_a_target_and_round_trips_through_yaml():
    schema_rubric = from_json_schema(strict_schema(Ticket), input_turns=True)
    rubric = rubric_of(schema_rubric)
    assert rubric is schema_rubric.rubric and rubric.input_turns
    assert loads_rubric(dump_rubric(rubric)) == rubric
    assert typed_model(schema_rubric).model_validate({**{n: s.labels[0] for n, s in rubric.fields.items()}})


def test_rubrics_without_literals_or_turns_keep_their_identity():
    rubric = Rubric.model_validate({"name": "t", "fields": {"a": {"kind": "boolean", "question": "q"}}})
    assert "literals" not in rubric.key and "input_turns" not in rubric.key
    assert "literals" not in dump_rubric(rubric) and "input_turns" not in dump_rubric(rubric)


@pytest.mark.parametrize(("field", "problem"), [
    ({"kind": "boolean", "question": "q", "literals": {"true": True}}, "only a choice field"),
    ({"kind": "choice", "question": "q", "options": ["a", "b"], "literals": {"c": 1}}, "not one of the field's options"),
    ({"kind": "choice", "question": "q", "options": ["5", "b"], "literals": {"5": 6}}, "must be labelled '6'"),
])
def test_literals_are_checked_against_their_options(field, problem):
    with pytest.raises(Exception, match=problem):
        Rubric.model_validate({"name": "t", "fields": {"a": field}})
