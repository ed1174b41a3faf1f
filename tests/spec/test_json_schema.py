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
from decisionflow.spec import FieldKind, dump_rubric, json_schema, loads_rubric, rubric_of, typed_model
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
BOOLEAN = {"type": "boolean"}


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
    (obj({"a": {"allOf": [obj({"x": BOOLEAN}), obj({"y": BOOLEAN})]}}), "a", "`allOf` of several object or array schemas"),
    (obj({"a": {"not": {"type": "boolean"}}}), "a", "any value"),
    (obj({"a": obj({"x": BOOLEAN}, **{"not": {"required": ["x"]}})}), "a", "`not` on an object is not read"),
    (obj({"a": obj({"x": BOOLEAN}, **{"if": {"required": ["x"]}, "then": {}})}), "a", "`if` on an object is not read"),
    (obj({"a": {"anyOf": [obj({"x": {"type": "boolean"}}), obj({"y": {"type": "boolean"}})]}}), "a", "a choice of shapes"),
    (obj({"a": {"enum": [{"x": 1}, "b"]}}), "a", "an enum of objects"),
    (obj({"a": {"enum": ["1", 1]}}), "a", "read alike"),
    (obj({"a": {"enum": ["", "b"]}}), "a", "is empty"),
    (obj({"a": {"enum": []}}), "a", "non-empty list"),
    (obj({"a": {"type": "string", "enum": [2, 3]}}), "a", "allows no value here: 2 values of its `enum` meet none"),
    (obj({"a": {"const": "x"}}), "$", "nothing to decide"),
    (obj({"a": {"type": "object", "properties": {"b": {"type": "object", "properties": {"c": STRING}}}}}), "a.b.c",
     "open-ended"),
    ({"type": "array", "items": {"type": "boolean"}}, "$", "must describe one object"),
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
    for _ in range(70):
        deep = obj({"x": deep})
    with pytest.raises(SchemaError, match="more than 64 deep"):
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


# -- every keyword honoured or refused ------------------------------------------------------------------


def options_of(schema: dict) -> list:
    """The answers the one property `a` offers (a one-answer property: that answer alone)."""
    schema_rubric = from_json_schema(obj({"a": schema, "other": BOOLEAN}))
    shape = dict(schema_rubric.shape.keys)["a"]
    if isinstance(shape, Fixed):
        return [shape.value]
    spec = schema_rubric.rubric.fields["a"]
    return [spec.json_value(label) for label in spec.labels]


@pytest.mark.parametrize(("schema", "offered"), [
    ({"enum": [1, 5, 10], "maximum": 5}, [1, 5]),
    ({"enum": [1, 5, 10], "maximum": 5, "exclusiveMaximum": True}, [1]),  # draft 4
    ({"enum": [1, 5, 10], "exclusiveMaximum": 10}, [1, 5]),
    ({"enum": [0, 3, 4, 6], "multipleOf": 2}, [0, 4, 6]),
    ({"enum": ["ab", "abcd", "abcdef"], "maxLength": 4}, ["ab", "abcd"]),
    ({"enum": ["ab", "abcd", "abcdef"], "minLength": 3}, ["abcd", "abcdef"]),
    ({"enum": ["ab", "xy", "abc"], "pattern": "^a"}, ["ab", "abc"]),
    ({"enum": ["a", "b", "c"], "not": {"const": "b"}}, ["a", "c"]),
    ({"enum": ["a", "b", "c"], "allOf": [{"enum": ["b", "c", "d"]}]}, ["b", "c"]),  # the intersection, not the sibling
    ({"enum": ["a", "b", "c"], "anyOf": [{"const": "b"}, {"const": "c"}, {"const": "d"}]}, ["b", "c"]),
    ({"oneOf": [{"enum": ["a", "b"]}, {"enum": ["b", "c"]}]}, ["a", "c"]),  # exactly one member matches
    ({"const": "x", "enum": ["x", "y"]}, ["x"]),
    ({"type": "string", "enum": ["x", 3]}, ["x"]),
    ({"enum": ["2020-01-31", "2020-02-31"], "format": "date"}, ["2020-01-31"]),
    ({"type": "boolean", "not": {"const": False}}, [True]),
    ({"type": ["boolean", "null"], "enum": [True, None]}, [True, None]),
    ({"enum": ["a", "b"], "if": {"const": "a"}, "then": {"maxLength": 0}}, ["b"]),
    ({"anyOf": [{"type": "integer", "minimum": 1, "maximum": 3}, {"enum": ["none"]}], "not": {"const": 2}}, [1, 3, "none"]),
])
def test_enum_and_const_meet_every_sibling_constraint(schema, offered):
    assert options_of(schema) == offered


def test_references_and_allof_members_meet_their_siblings():
    schema = {"$defs": {"Choice": {"enum": ["a", "b", "c"]}, "Int": {"type": "integer"}},
              **obj({"narrowed": {"$ref": "#/$defs/Choice", "enum": ["b", "c", "z"]},
                     "bounded": {"$ref": "#/$defs/Int", "minimum": 1, "maximum": 4},
                     "split": {"allOf": [{"type": "integer", "minimum": 0}, {"maximum": 3}]}})}
    fields = from_json_schema(schema).rubric.fields
    assert list(fields["narrowed"].options) == ["b", "c"]
    assert (fields["bounded"].kind, fields["bounded"].min, fields["bounded"].max) == (FieldKind.SCORE, 1, 4)
    assert (fields["split"].kind, fields["split"].min, fields["split"].max) == (FieldKind.SCORE, 0, 3)


def test_an_integer_range_stays_a_score_only_when_every_level_is_allowed():
    fields = from_json_schema(obj({
        "whole": {"type": "integer", "minimum": 0, "maximum": 5},
        "holed": {"type": "integer", "minimum": 0, "maximum": 5, "not": {"const": 3}},
        "capped": {"type": "integer", "minimum": 0, "maximum": 5, "allOf": [{"exclusiveMaximum": 4}]},
    })).rubric.fields
    assert (fields["whole"].kind, fields["whole"].min, fields["whole"].max) == (FieldKind.SCORE, 0, 5)
    assert fields["holed"].kind is FieldKind.CHOICE and fields["holed"].literals == {str(n): n for n in (0, 1, 2, 4, 5)}
    assert fields["capped"].kind is FieldKind.SCORE and (fields["capped"].min, fields["capped"].max) == (0, 3)


def test_a_multi_label_arrays_options_are_the_items_the_schema_allows():
    schema_rubric = from_json_schema(obj({"tags": {"type": "array", "items": {"enum": ["a", "b", "c"], "not": {"const": "b"}},
                                                    "maxItems": 1}}))
    assert list(schema_rubric.rubric.fields) == ["tags_a", "tags_c"]
    assert dict(schema_rubric.shape.keys)["tags"].max_items == 1


B = BOOLEAN


@pytest.mark.parametrize(("schema", "path", "says"), [
    (obj({"a": B}, **{"not": {"required": ["a"]}}), "$", "`not` on an object is not read"),
    (obj({"a": B}, **{"if": {"required": ["a"]}, "then": {"required": ["a"]}}), "$", "`if` on an object"),
    (obj({"a": B}, oneOf=[{"required": ["a"]}, {"required": ["a"]}]), "$", "`oneOf` on an object"),
    (obj({"a": B}, anyOf=[{"required": ["a"]}]), "$", "`anyOf` on an object"),
    (obj({"a": B}, minProperties=2), "$", "`minProperties` 2 cannot hold"),
    (obj({"a": B, "b": B}, maxProperties=1), "$", "`maxProperties` 1 cannot hold"),
    (obj({"a": B}, dependentRequired={"a": ["z"]}), "$", "`dependentRequired` asks for 'z'"),
    (obj({"a": B}, dependencies={"a": ["z"]}), "$", "`dependencies` asks for 'z'"),
    (obj({"a": B}, dependencies={"a": {"required": ["z"]}}), "$", "`dependencies` with a schema"),
    (obj({"a": B}, dependentSchemas={"a": {"required": ["z"]}}), "$", "`dependentSchemas`"),
    (obj({"a": B}, patternProperties={"^x": B}), "$", "`patternProperties`"),
    (obj({"a": B, "Bad": B}, propertyNames={"pattern": "^[a-z]+$"}), "$", "`propertyNames` refuses the property 'Bad'"),
    (obj({"a": B}, enum=[{"a": True}]), "$", "`enum` on an object"),
    (obj({"a": B}, const={"a": True}), "$", "`const` on an object"),
    ({"anyOf": [obj({"a": B}), obj({"b": B})]}, "$", "`anyOf` at the root is not read"),
    ({"enum": [{"a": True}]}, "$", "`enum` at the root is not read"),
    (obj({"o": obj({"x": B}, minProperties=3)}), "o", "`minProperties` 3"),
    (obj({"o": {"allOf": [obj({"x": B}), {"required": ["x"]}]}}), "o", "`allOf` of several"),
    ({"$defs": {"O": obj({"x": B})}, **obj({"o": {"$ref": "#/$defs/O", "additionalProperties": False}})}, "o",
     "`additionalProperties` beside a `$ref`"),
    ({"$defs": {"O": obj({"x": B})}, **obj({"o": {"$ref": "#/$defs/O", "properties": {"y": B}}})}, "o",
     "`properties` in two schema objects"),
    ({"$defs": {"O": obj({"x": B})}, **obj({"o": {"anyOf": [{"$ref": "#/$defs/O"}, {"type": "null"}], "not": {}}})}, "o",
     "`not` on an object"),
    (obj({"t": {"type": "array", "items": {"enum": ["a", "b"]}, "contains": {"const": "a"}}}), "t", "`contains`"),
    (obj({"t": {"type": "array", "items": {"enum": ["a", "b"]}, "not": {"maxItems": 0}}}), "t", "`not` on an array"),
    (obj({"t": {"type": "array", "items": {"enum": ["a", "b"]}, "enum": [["a"]]}}), "t", "`enum` on an array"),
    (obj({"a": {"$dynamicRef": "#node"}}), "a", "`$dynamicRef`"),
    (obj({"a": {"$ref": "#/$defs/X"}}, **{"$defs": {"X": {"$id": "x.json", "type": "boolean"}}}), "a", "`$id` below the root"),
    (obj({"a": {"$ref": "#choice"}}, **{"$defs": {"X": {"$anchor": "choice", "type": "boolean"}}}), "a", "names an anchor"),
    (obj({"a": {"enum": [1, 2], "divisibleBy": 2}}), "a", "draft 3's `divisibleBy`"),
    (obj({"a": {"enum": [1, 2], "minimum": "1"}}), "a", "`minimum` must be a number"),
    (obj({"a": {"enum": ["x", "y"], "pattern": "("}}), "a", "not a regular expression"),
    (obj({"a": {"enum": [1, 2], "minimum": 5}}), "a", "allows no value here"),
    (obj({"a": {"anyOf": [{"const": i} for i in range(1025)]}}), "a", "`anyOf` holds 1025 schemas; at most 1024"),
])
def test_what_an_object_or_array_cannot_honour_is_refused_naming_the_keyword(schema, path, says):
    with pytest.raises(SchemaError) as raised:
        from_json_schema(schema)
    assert raised.value.path == path
    assert says in raised.value.problems[0].message


def test_what_the_listed_properties_meet_is_honoured():
    schema = {"$defs": {"O": obj({"x": B, "y": B}, required=["x"])},
              **obj({"a": B, "b": B, "o": {"$ref": "#/$defs/O", "unevaluatedProperties": False, "minProperties": 2}},
                    minProperties=3, maxProperties=3, dependentRequired={"a": ["b"]}, propertyNames={"pattern": "^[a-z]$"},
                    unevaluatedProperties=False, additionalProperties=False)}
    assert list(from_json_schema(schema).rubric.fields) == ["a", "b", "o_x", "o_y"]


def test_annotations_and_keywords_json_schema_does_not_define_are_accepted():
    schema = obj({"a": {"enum": ["x", "y"], "examples": ["x"], "default": "x", "deprecated": True, "$comment": "c",
                        "x-order": 3, "readOnly": False, "contentMediaType": "text/plain"}},
                 discriminator={"propertyName": "a"}, **{"x-tags": ["t"], "$schema": "https://json-schema.org/draft/2020-12/schema"})
    assert list(from_json_schema(schema).rubric.fields["a"].options) == ["x", "y"]


# -- bounded work ---------------------------------------------------------------------------------------


def references_into_many_paths(levels: int, fan: int) -> dict:
    """`levels` of `anyOf`, each of `fan` references to the next level, ending in a two-value enum:
    fan ** (levels - 1) paths in a few hundred bytes per level."""
    definitions: dict = {f"L{levels}": {"enum": ["a", "b"]}}
    for level in range(levels - 1, 0, -1):
        definitions[f"L{level}"] = {"anyOf": [{"$ref": f"#/$defs/L{level + 1}"}] * fan}
    return {"$defs": definitions, **obj({"x": {"$ref": "#/$defs/L1"}})}


def test_a_schema_of_ten_million_paths_stops_at_the_node_budget(monkeypatch):
    schema = references_into_many_paths(8, 10)
    assert len(json.dumps(schema)) < 2048
    visits = []
    original = json_schema._Reader.visit
    monkeypatch.setattr(json_schema._Reader, "visit", lambda self, path, depth: (visits.append(path), original(self, path, depth)))
    with pytest.raises(SchemaError, match=r"expands to more than 10,000 schema objects") as raised:
        from_json_schema(schema)
    assert raised.value.path == "x" and len(visits) == json_schema.MAX_NODES + 1
    assert from_json_schema(references_into_many_paths(3, 10)).rubric.fields["x"].options == {"a": "", "b": ""}


def test_checking_the_answers_stops_at_its_step_budget():
    # Within the node budget, but every value would be checked against a thousand members it fails.
    schema = obj({"a": {"enum": [f"v{i}" for i in range(500)], "anyOf": [{"type": "integer"}] * 1000}})
    with pytest.raises(SchemaError, match=r"enters more than 20,000 schema objects") as raised:
        from_json_schema(schema)
    assert raised.value.path == "a"


def test_a_thousand_options_cost_a_few_check_steps_each(monkeypatch):
    checkers = []
    original = json_schema._Reader.checker.fget
    monkeypatch.setattr(json_schema._Reader, "checker", property(lambda self: checkers.append(original(self)) or checkers[-1]))
    values = [f"option {i}" for i in range(1024)]
    from_json_schema(obj({"a": {"type": "string", "enum": values}, "b": B}))
    assert checkers[-1].steps == 1024 + 2  # one entry per value, whatever the enum's length
    described = {"oneOf": [{"const": value, "description": f"the {value}"} for value in values]}
    from_json_schema({"$defs": {"Options": described}, **obj({"a": {"$ref": "#/$defs/Options"}, "b": B})})
    assert checkers[-1].steps == 3 * 1024 + 2  # the value, the reference, its one member: not a pass over all 1024


def test_a_pattern_that_backtracks_without_end_is_refused_naming_the_property():
    schema = obj({"a": {"enum": ["a" * 40 + "!", "b"], "pattern": "(a|a)+$"}, "b": B})
    with pytest.raises(SchemaError, match=r"matching `pattern` '\(a\|a\)\+\$' takes more than") as raised:
        from_json_schema(schema)
    assert raised.value.path == "a"


def test_enum_values_read_are_bounded_across_references():
    schema = {"$defs": {"Many": {"enum": [f"v{i}" for i in range(1000)]}},
              **obj({"a": {"anyOf": [{"$ref": "#/$defs/Many"}] * 300}})}
    with pytest.raises(SchemaError, match=r"lists more than 262,144 values") as raised:
        from_json_schema(schema)
    assert raised.value.path == "a"


def test_realistic_schemas_stay_far_below_the_budgets(monkeypatch):
    """What the budgets' values rest on (docs/openai.md): the shipped presets and a pydantic model."""
    from decisionflow.bench.workloads import PRESET_NAMES, load_preset, preset_json_schema

    visits, checkers = [], []
    visit, checker = json_schema._Reader.visit, json_schema._Reader.checker.fget
    monkeypatch.setattr(json_schema._Reader, "visit", lambda self, path, depth: (visits.append(path), visit(self, path, depth)))
    monkeypatch.setattr(json_schema._Reader, "checker", property(lambda self: checkers.append(checker(self)) or checkers[-1]))
    for schema in [*(preset_json_schema(load_preset(name)) for name in PRESET_NAMES), strict_schema(Ticket)]:
        visits.clear()
        from_json_schema(schema)
        assert len(visits) <= 60 and checkers[-1].steps < 300, (len(visits), checkers[-1].steps)
