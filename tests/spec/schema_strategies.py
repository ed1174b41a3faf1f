"""Generated JSON schemas from the grammar `from_json_schema` reads, and the judge their answers face.

The grammar: objects (nested two deep) of leaves and multi-label arrays; a leaf is an enum of strings,
integers, numbers or booleans, `boolean`, or an integer range, each with sibling constraints (bounds in
the draft-4 and the later form, `multipleOf`, lengths, `pattern`, `not`, `const`), combined by
`anyOf`/`oneOf`/`allOf`, made nullable (`["T", "null"]`, `anyOf [..., null]`) or moved into `$defs` behind a
`$ref` (with siblings or not). Many generated schemas allow a value the model will never see, or none at
all: those are what the reader must intersect exactly, or refuse.

`judge` is an independent validator: the `jsonschema` library's own draft 2020-12 class, unmodified,
with draft 4's boolean exclusive bounds first rewritten to the numeric form they mean.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from decisionflow.runtime.result import Decision, FieldResult, Stats
from decisionflow.spec import FieldKind

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
"""Labels that no normalisation merges (case, separators) and that share no spelling."""


def _sample(values: list[Any], low: int = 1, high: int = 5) -> st.SearchStrategy[list[Any]]:
    return st.lists(st.sampled_from(values), min_size=low, max_size=high, unique=True)


def _bounds() -> st.SearchStrategy[dict[str, Any]]:
    """Bounds of an integer or number schema, inclusive, exclusive, or draft 4's boolean form."""
    low, high = st.integers(-2, 4), st.integers(5, 14)
    return st.one_of(
        st.fixed_dictionaries({}, optional={"minimum": low, "maximum": high}),
        st.fixed_dictionaries({}, optional={"exclusiveMinimum": low, "exclusiveMaximum": high}),
        st.fixed_dictionaries({"minimum": low, "maximum": high}, optional={"exclusiveMinimum": st.booleans(),
                                                                          "exclusiveMaximum": st.booleans()}),
    )


def _string_leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda values, typed, extra: {**({"type": "string"} if typed else {}), "enum": values, **extra},
        _sample(WORDS, 2, 6), st.booleans(),
        st.fixed_dictionaries({}, optional={
            "maxLength": st.integers(4, 7), "minLength": st.integers(2, 5),
            "pattern": st.sampled_from(["^[a-f]", "o$", "^(alpha|echo|golf)$", "[lt]"]),
            "not": st.builds(lambda word: {"const": word}, st.sampled_from(WORDS)),
        }),
    )


def _integer_leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda values, bounds, extra: {"type": "integer", "enum": values, **bounds, **extra},
        _sample(list(range(0, 13)), 2, 8), _bounds(),
        st.fixed_dictionaries({}, optional={"multipleOf": st.sampled_from([2, 3, 0.5]),
                                            "not": st.builds(lambda n: {"const": n}, st.integers(0, 12))}),
    )


def _number_leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda values, bounds: {"enum": values, **bounds},
                     _sample([0.5, 1.5, 2.25, 3, 7.5, 12], 2, 6), _bounds())


def _range_leaf() -> st.SearchStrategy[dict[str, Any]]:
    def build(low: int, width: int, exclusive: str, step: Any, excluded: Any) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "integer"}
        if exclusive == "numeric":
            node.update(exclusiveMinimum=low - 1, exclusiveMaximum=low + width + 1)
        elif exclusive == "draft4":
            node.update(minimum=low - 1, exclusiveMinimum=True, maximum=low + width + 1, exclusiveMaximum=True)
        else:
            node.update(minimum=low, maximum=low + width)
        if step is not None:
            node["multipleOf"] = step
        if excluded is not None:
            node["not"] = {"const": low + excluded}
        return node

    return st.builds(build, st.integers(0, 5), st.integers(1, 20), st.sampled_from(["inclusive", "numeric", "draft4"]),
                     st.sampled_from([None, None, 2, 5]), st.one_of(st.none(), st.integers(0, 3)))


def _boolean_leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.sampled_from([{"type": "boolean"}, {"type": "boolean", "not": {"const": False}}, {"enum": [True, False]},
                            {"type": "boolean", "enum": [False]}])


def _simple_leaf() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(_string_leaf(), _integer_leaf(), _number_leaf(), _range_leaf(), _boolean_leaf())


def _combined(leaf: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """A leaf, or a union or intersection of leaves, or a leaf with an enum beside a union."""
    return st.one_of(
        leaf,
        st.builds(lambda members: {"anyOf": members}, st.lists(leaf, min_size=2, max_size=3)),
        st.builds(lambda members: {"oneOf": members}, st.lists(leaf, min_size=2, max_size=3)),
        st.builds(lambda first, limit: {"allOf": [first, limit]}, leaf,
                  st.one_of(_sample(WORDS + list(range(0, 10)) + [True, False], 4, 12).map(lambda values: {"enum": values}),
                            st.integers(2, 9).map(lambda bound: {"maximum": bound}),
                            st.integers(4, 6).map(lambda bound: {"maxLength": bound}))),
        st.builds(lambda values, members: {"enum": values, "anyOf": members}, _sample(WORDS, 2, 6),
                  st.lists(_string_leaf(), min_size=1, max_size=2)),
    )


def _nullable(leaf: dict[str, Any], how: str) -> dict[str, Any]:
    if how == "anyOf":
        return {"anyOf": [leaf, {"type": "null"}]}
    if how == "type" and isinstance(leaf.get("type"), str) and "enum" not in leaf:
        return {**leaf, "type": [leaf["type"], "null"]}
    return leaf


def leaves() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(_nullable, _combined(_simple_leaf()), st.sampled_from(["", "", "anyOf", "type"]))


def _multi_label() -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda items, unique, sizes: {"type": "array", "items": items, **({"uniqueItems": True} if unique else {}), **sizes},
        _string_leaf(), st.booleans(),
        st.fixed_dictionaries({}, optional={"minItems": st.integers(0, 1), "maxItems": st.integers(1, 4)}),
    )


def _properties(value: st.SearchStrategy[dict[str, Any]], low: int = 1, high: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(st.sampled_from(["team", "kind", "level", "flag", "tags", "size", "mood", "tier"]), value,
                           min_size=low, max_size=high)


def _object(properties: dict[str, Any], closed: bool, required: bool) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "object", "properties": properties}
    if closed:
        node["additionalProperties"] = False
    if required:
        node["required"] = list(properties)
    return node


@st.composite
def schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A root object schema; some of its properties are moved into `$defs` behind a `$ref`."""
    value = st.one_of(leaves(), leaves(), _multi_label())
    nested = st.builds(_object, _properties(value, 1, 3), st.booleans(), st.booleans())
    properties = draw(_properties(st.one_of(value, value, value, nested), 1, 4))
    definitions: dict[str, Any] = {}
    for key in list(properties):
        how = draw(st.sampled_from(["inline", "inline", "ref", "ref+description", "ref+maximum"]))
        if how == "inline":
            continue
        definitions[key.capitalize()] = properties[key]
        ref: dict[str, Any] = {"$ref": f"#/$defs/{key.capitalize()}"}
        if how == "ref+description":
            ref["description"] = f"The {key}"
        elif how == "ref+maximum":
            ref["maximum"] = draw(st.integers(3, 10))
        properties[key] = ref
    root = _object(properties, draw(st.booleans()), draw(st.booleans()))
    if definitions:
        root["$defs"] = definitions
    return root


# -- the judge ---------------------------------------------------------------------------------------


def _later_bounds(node: Any) -> Any:
    """Draft 4's `exclusiveMinimum: true` beside `minimum: m` is the later `exclusiveMinimum: m`."""
    if isinstance(node, list):
        return [_later_bounds(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _later_bounds(value) for key, value in node.items()}
    for inclusive, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(node.get(exclusive), bool):
            if node.pop(exclusive) and inclusive in node:
                node[exclusive] = node.pop(inclusive)
    return node


def judge(schema: dict[str, Any]) -> Draft202012Validator:
    later = _later_bounds(copy.deepcopy(schema))
    Draft202012Validator.check_schema(later)
    return Draft202012Validator(later)


# -- answers without a model -------------------------------------------------------------------------


def decision_with(schema_rubric: Any, values: dict[str, Any]) -> Decision:
    """A decision as the engine returns it, with the given answers (for the assembly only)."""
    fields = {}
    for name, spec in schema_rubric.rubric.fields.items():
        value = values[name]
        if spec.kind is FieldKind.BOOLEAN:
            probabilities = {"true": 0.9 if value else 0.1, "false": 0.1 if value else 0.9}
        else:
            probabilities = {label: float(label == str(value)) for label in spec.labels}
        fields[name] = FieldResult(name, spec.kind, value, probabilities, 0.9, 0, "branch")
    return Decision("t", None, fields, Stats(2, 10, 5, 50, True))


def answers_of(spec: Any) -> list[Any]:
    """Every answer a field can give, as results carry it (a label, a boolean, a level)."""
    if spec.kind is FieldKind.BOOLEAN:
        return [True, False]
    if spec.kind is FieldKind.SCORE:
        return list(range(spec.min, spec.max + 1))
    return list(spec.labels)
