"""JSON Schema in, rubric out: a schema of closed-set properties is decided, and answered as JSON again.

What OpenAI's structured outputs send (`response_format` of type `json_schema`, a function's
`parameters`) and what pydantic writes (`Model.model_json_schema()`) becomes one rubric plus the shape
of the answer object, torch-free:

    schema_rubric = from_json_schema(Ticket.model_json_schema())
    decision = engine.decide(schema_rubric, "I was charged twice.")   # a SchemaRubric is a target
    Ticket.model_validate(schema_rubric.answer(decision))              # JSON in the schema's key order

| construct | field | answer |
| --- | --- | --- |
| `enum` / `const` of strings | choice | the string |
| `enum` / `const` of integers, numbers or booleans, or of several types | choice whose options are written as JSON (`literals`) | the JSON value |
| `boolean` | boolean | `true` / `false` |
| `integer` with `minimum` and `maximum` (or exclusive bounds), at most 101 levels | score | the integer |
| `integer` with bounds and `multipleOf` | choice of the multiples | the integer |
| `anyOf` / `oneOf` of the above | one field over the union of their answers | as above |
| `["T", "null"]`, `anyOf [..., {"type": "null"}]`, `null` in an enum, `nullable: true` | the field with `null` as one more answer | the value or `null` |
| `$ref` into `$defs` / `definitions` (any local JSON pointer) | the referenced schema | |
| `object` with `properties`, nested | its properties flattened into fields (`customer_tier`) | a nested object |
| `array` of an enum (multi-label, `uniqueItems` or not) | one boolean field per option, read in the same pass | the options answered `true`, in the enum's order, within `minItems`/`maxItems` |
| a single allowed value (`const`, a one-member enum) | none: written in | that value |

Properties keep the schema's order (the plan pins the first field, as any rubric's); every property is
answered, required or not. `title` and `description` become a field's question (the description first)
and an option's description (`anyOf` of described `const`s). Everything open-ended (a string without
`enum`, a number that is not an enum, `pattern`, `format`, arrays of objects or booleans, maps of any keys,
recursion, conditional schemas) is refused with one `SchemaError` naming the JSON path of the first
such property (`customer.notes`, `tags[]`) and what is supported.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping, Union
from urllib.parse import unquote

from pydantic import ValidationError

from ..errors import Problem, RubricError
from .kinds import FieldKind
from .rubric import MAX_SCORE_LEVELS, FieldSpec, Rubric, reserved_name_problem
from .text import is_noncharacter, one_line, refused_character, shown

SUPPORTED = (
    "decisionflow answers closed sets: enum or const (strings, numbers, booleans, null), boolean, integer with "
    f"minimum and maximum (at most {MAX_SCORE_LEVELS} levels), anyOf/oneOf of these, objects of such properties, "
    "and arrays of an enum (multi-label)"
)
SOURCE = "schema"
MAX_DEPTH = 32
"""Objects, arrays and references may nest this deep; a deeper schema is refused rather than overflow."""
DEFAULT_MAX_FIELDS = 256
"""Fields (a multi-label array counts one per option) a schema may become, unless the caller says otherwise."""
DEFAULT_MAX_OPTIONS = 1024
"""Answers one property may offer, unless the caller says otherwise."""
_NAME_LIMIT = 60
_IGNORED = frozenset({
    "title", "description", "default", "examples", "example", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", "$defs", "definitions", "additionalProperties", "required", "strict", "nullable", "discriminator",
    "contentMediaType", "contentEncoding", "propertyNames", "minProperties", "maxProperties", "unevaluatedProperties",
})
"""Keywords that never widen the set of answers (or that only annotate), read where they matter and else left alone."""


class SchemaError(RubricError):
    """A JSON schema decisionflow cannot decide; its one problem names the JSON path of the property at fault."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__([Problem(SOURCE, path or "$", one_line(message))])
        self.path = path or "$"


# -- the shape of the answer ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Decided:
    """A value one field answers."""

    field: str


@dataclass(frozen=True)
class Fixed:
    """A value the schema allows alone: written in, never asked."""

    value: Any


@dataclass(frozen=True)
class Chosen:
    """A multi-label array: one boolean field per option; the options answered true, in the enum's order."""

    options: tuple[tuple[Any, str], ...]
    """(the option's JSON value, the boolean field that decides it)."""
    min_items: int = 0
    max_items: int | None = None


@dataclass(frozen=True)
class Nested:
    """An object: its keys in the schema's order, each with what answers it."""

    keys: tuple[tuple[str, "Shape"], ...]


Shape = Union[Decided, Fixed, Chosen, Nested]


@dataclass(frozen=True)
class SchemaRubric:
    """A rubric read from a JSON schema, and how its fields' answers become the schema's JSON object."""

    rubric: Rubric
    shape: Nested
    paths: dict[str, str]
    """Field name -> the JSON path it answers (`customer.tier`; a multi-label option `tags[]`)."""
    options: dict[str, Any]
    """Multi-label fields: field name -> the option (its JSON value) it decides."""

    def answer(self, decision: Any) -> dict[str, Any]:
        """The decision (`engine.decide(self, ...)`) as the schema's JSON object, keys in the schema's order."""
        return _assemble(self.shape, decision, self.rubric)

    def json_value(self, field: str, value: Any) -> Any:
        """A field's answer (as results carry it: a label, a boolean, a level) as the JSON value it stands for."""
        return self.rubric.fields[field].json_value(value)


# -- conversion ----------------------------------------------------------------------------------------


def from_json_schema(
    schema: Any, *, name: str | None = None, instructions: str | None = None, max_fields: int = DEFAULT_MAX_FIELDS,
    max_options: int = DEFAULT_MAX_OPTIONS, input_turns: bool = False,
) -> SchemaRubric:
    """The rubric a JSON schema of closed-set properties asks, and the shape of its answer (see the module).

    `name`: the rubric's name (default: the schema's `title`, else `schema`), made a valid name.
    `instructions`: text for the system turn, before the schema's own `description` (both kept).
    `input_turns`: the rubric reads a conversation as the chat template's own turns (`Rubric.input_turns`).
    Raises `SchemaError` naming the first property it cannot decide, and why.
    """
    if not isinstance(schema, Mapping):
        raise SchemaError("$", f"the schema must be a JSON object, got {_json_type(schema)}")
    reader = _Reader(schema, max_fields=max_fields, max_options=max_options)
    root, refs = reader.resolved(schema, "", depth=0, refs=())
    if _types_of(root, "") != {"object"} and "properties" not in root:
        raise SchemaError("$", f"the schema must describe an object with `properties`; {SUPPORTED}")
    shape = reader.object_shape(root, "", (), depth=0, refs=refs)
    if not reader.fields:
        raise SchemaError("$", "the schema leaves nothing to decide: every property allows one value only")
    # A function's description is often the schema's own (pydantic writes the docstring in both): said once.
    described = _text(root.get("description"))
    parts = [_as_instructions(text) for text in (instructions, described if described not in (instructions or "") else "")
             if text and text.strip()]
    try:
        rubric = Rubric(name=_rubric_name(name if name is not None else _text(root.get("title")) or "schema"),
                        instructions="\n\n".join(parts), fields=reader.fields, input_turns=input_turns)
    except ValidationError as error:
        detail = error.errors(include_url=False)[0]
        raise SchemaError("$", f"{'.'.join(map(str, detail['loc']))}: {str(detail['msg']).removeprefix('Value error, ')}") from None
    return SchemaRubric(rubric, shape, dict(reader.paths), dict(reader.options))


@dataclass
class _Domain:
    """The answers a leaf property allows: enumerated JSON values, plus how they were declared."""

    members: list[tuple[Any, str]]
    """(non-null JSON value, its description), in the schema's order, without repeats."""
    nullable: bool = False
    boolean: bool = False
    """Declared as `boolean` (its two members are true and false)."""
    score: tuple[int, int] | None = None
    """Declared as an integer range (its members are the levels)."""


class _Reader:
    def __init__(self, root: Mapping[str, Any], *, max_fields: int, max_options: int) -> None:
        self.root = root
        self.max_fields = max_fields
        self.max_options = max_options
        self.fields: dict[str, FieldSpec] = {}
        self.paths: dict[str, str] = {}
        self.options: dict[str, Any] = {}

    # -- references ------------------------------------------------------------------------------

    def resolved(self, node: Any, path: str, *, depth: int, refs: tuple[str, ...]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """`node` as a mapping with its `$ref` (and single-member `allOf`) followed, and the references
        followed to reach it on top of `refs` (a reference met again is recursion). The node's own keywords
        override the referenced ones (a description beside a `$ref` describes the property)."""
        seen = refs
        while True:
            if node is True or (isinstance(node, Mapping) and not node):
                raise SchemaError(path, f"the schema allows any value here (open-ended); {SUPPORTED}")
            if node is False:
                raise SchemaError(path, "the schema allows no value here (`false`)")
            if not isinstance(node, Mapping):
                raise SchemaError(path, f"a schema must be a JSON object, got {_json_type(node)}")
            if depth + len(seen) > MAX_DEPTH:
                raise SchemaError(path, f"the schema nests objects, arrays and references more than {MAX_DEPTH} deep")
            if "$ref" in node:
                ref = node["$ref"]
                if not isinstance(ref, str):
                    raise SchemaError(path, f"`$ref` must be a string, got {_json_type(ref)}")
                if ref in seen:
                    raise SchemaError(path, f"the schema is recursive ({ref} refers to itself through {path or 'the root'}); "
                                            f"a recursive structure is open-ended; {SUPPORTED}")
                target = self._pointer(ref, path)
                seen = (*seen, ref)
                siblings = {k: v for k, v in node.items() if k != "$ref"}
                node = _merged(target, siblings) if isinstance(target, Mapping) else target
                continue
            all_of = node.get("allOf")
            if all_of is not None:
                if not isinstance(all_of, list) or len(all_of) != 1:
                    raise SchemaError(path, f"`allOf` of several schemas (an intersection) is not read; {SUPPORTED}")
                member = all_of[0]
                siblings = {k: v for k, v in node.items() if k != "allOf"}
                if not isinstance(member, Mapping):
                    raise SchemaError(path, f"`allOf` must hold schemas, got {_json_type(member)}")
                node = _merged(member, siblings)
                continue
            return dict(node), seen

    def _pointer(self, ref: str, path: str) -> Any:
        if not ref.startswith("#"):
            raise SchemaError(path, f"`$ref` {ref!r} points outside the schema; only local references (#/$defs/...) are read")
        target: Any = self.root
        for part in [p for p in unquote(ref[1:]).split("/")[1:]]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                raise SchemaError(path, f"`$ref` {ref!r} names nothing in the schema")
        return target

    # -- objects -------------------------------------------------------------------------------

    def object_shape(self, node: dict[str, Any], path: str, names: tuple[str, ...], *, depth: int,
                     refs: tuple[str, ...]) -> Nested:
        properties = node.get("properties", {})
        if not isinstance(properties, Mapping):
            raise SchemaError(path, f"`properties` must be an object, got {_json_type(properties)}")
        if not properties and _opens_keys(node):
            raise SchemaError(path, f"an object without listed `properties` (a map of any keys) is open-ended; {SUPPORTED}")
        required = node.get("required", [])
        if not isinstance(required, list) or not all(isinstance(key, str) for key in required):
            raise SchemaError(path, "`required` must be a list of property names")
        unknown = [key for key in required if key not in properties]
        if unknown:
            raise SchemaError(path, f"`required` names {shown(unknown[0])}, which is not one of the properties")
        keys: list[tuple[str, Shape]] = []
        for key, child in properties.items():
            keys.append((key, self.property_shape(child, _join(path, key), (*names, key), depth=depth + 1, refs=refs)))
        return Nested(tuple(keys))

    def property_shape(self, node: Any, path: str, names: tuple[str, ...], *, depth: int,
                       refs: tuple[str, ...]) -> Shape:
        resolved, refs = self.resolved(node, path, depth=depth, refs=refs)
        _refuse_conditionals(resolved, path)
        types = _types_of(resolved, path)
        members = _alternatives(resolved, path)
        if members is not None:
            shaped = [self.resolved(member, path, depth=depth + 1, refs=refs) for member in members]
            composite = [(m, seen) for m, seen in shaped if _composite(m, path)]
            if composite:
                only_null_besides = all(_types_of(m, path) == {"null"} for m, _ in shaped if not _composite(m, path))
                if len(composite) == 1 and only_null_besides:
                    # `Optional[Model]` / `Optional[list[Enum]]`: answered as the object (or the list), never null.
                    member, seen = composite[0]
                    return self.property_shape(member, path, names, depth=depth, refs=seen)
                raise SchemaError(path, f"`anyOf`/`oneOf` between objects or arrays (a choice of shapes) is not read; {SUPPORTED}")
        elif "object" in types or "properties" in resolved:
            if types - {"object", "null"}:
                raise SchemaError(path, f"a property that is an object or something else is not read; {SUPPORTED}")
            return self.object_shape(resolved, path, names, depth=depth, refs=refs)
        elif "array" in types:
            if types - {"array", "null"}:
                raise SchemaError(path, f"a property that is an array or something else is not read; {SUPPORTED}")
            return self.array_shape(resolved, path, names, depth=depth, refs=refs)
        domain = self.domain(resolved, path, depth=depth, refs=refs)
        return self.leaf(domain, resolved, path, names)

    def array_shape(self, node: dict[str, Any], path: str, names: tuple[str, ...], *, depth: int,
                    refs: tuple[str, ...]) -> Shape:
        if "prefixItems" in node or isinstance(node.get("items"), list):
            raise SchemaError(path, f"an array of positions with their own schemas (a tuple) is not read; {SUPPORTED}")
        if "items" not in node:
            raise SchemaError(path, f"an array without `items` may hold anything; {SUPPORTED}")
        for keyword in ("contains", "minContains", "maxContains", "unevaluatedItems"):
            if keyword in node:
                raise SchemaError(path, f"`{keyword}` on an array is not read; {SUPPORTED}")
        items_path = path + "[]"
        items, inner = self.resolved(node["items"], items_path, depth=depth + 1, refs=refs)
        if _composite(items, items_path):
            raise SchemaError(items_path, f"an array of objects or of arrays is open-ended (any number of them); {SUPPORTED}")
        domain = self.domain(items, items_path, depth=depth + 1, refs=inner)
        if not domain.members:
            raise SchemaError(items_path, "the array's items allow only null")
        if domain.boolean:
            # A set of options is a closed question; a list of true/false flags has no meaning per position.
            raise SchemaError(items_path, "an array of booleans is open-ended (how many, and what each one means); "
                                          f"use an array of an enum naming what it flags, or one boolean property per flag; {SUPPORTED}")
        min_items, max_items = _count(node.get("minItems"), items_path, "minItems"), _count(node.get("maxItems"), items_path, "maxItems")
        if min_items > len(domain.members):
            raise SchemaError(path, f"`minItems` {min_items} asks for more items than the {len(domain.members)} options")
        if max_items is not None and max_items < min_items:
            raise SchemaError(path, f"`maxItems` {max_items} is below `minItems` {min_items}")
        question = _question(node, names)
        options: list[tuple[Any, str]] = []
        for value, description in domain.members:
            label = value if isinstance(value, str) else json.dumps(value)
            text = f"{question.rstrip('. ')}: whether it includes {json.dumps(value, ensure_ascii=False)}"
            if description:
                text += f" ({description.rstrip('. ')})"
            field = self.add_field((*names, label), {"kind": FieldKind.BOOLEAN, "question": text}, items_path)
            self.options[field] = value
            options.append((value, field))
        return Chosen(tuple(options), min_items, max_items)

    # -- leaves --------------------------------------------------------------------------------

    def domain(self, node: dict[str, Any], path: str, *, depth: int, refs: tuple[str, ...]) -> _Domain:
        """The answers a leaf schema allows (an `anyOf`/`oneOf` leaf: the union of its members')."""
        _refuse_conditionals(node, path)
        nullable = node.get("nullable") is True
        members = _alternatives(node, path)
        if members is not None:
            domains = []
            for member in members:
                resolved, seen = self.resolved(member, path, depth=depth + 1, refs=refs)
                if _composite(resolved, path):
                    raise SchemaError(path, f"`anyOf`/`oneOf` between objects or arrays (a choice of shapes) is not read; {SUPPORTED}")
                domains.append(self.domain(resolved, path, depth=depth + 1, refs=seen))
            own = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
            if _constrains(own):
                domains.append(self.domain(own, path, depth=depth, refs=refs))
            return self._union(domains, nullable, path)
        if "const" in node or "enum" in node:
            return self._enumerated(node, path, nullable)
        types = _types_of(node, path)
        if not types:
            raise SchemaError(path, f"the schema allows any value here (no `type`, `enum` or `const`); {SUPPORTED}")
        domains = [self._typed(kind, node, path) for kind in sorted(types - {"null"}, key=_TYPE_ORDER.index)]
        return self._union(domains, nullable or "null" in types, path)

    def _enumerated(self, node: dict[str, Any], path: str, nullable: bool) -> _Domain:
        if "const" in node:
            values = [node["const"]]
            if "enum" in node and node["enum"] != values and node["const"] not in (node["enum"] or []):
                raise SchemaError(path, "`const` is not one of the `enum`'s values: nothing is allowed")
        else:
            values = node["enum"]
            if not isinstance(values, list) or not values:
                raise SchemaError(path, "`enum` must be a non-empty list of values")
        if len(values) > self.max_options:
            raise SchemaError(path, f"{len(values)} answers; at most {self.max_options} a property")
        types = _types_of(node, path) if "type" in node else None
        members: list[tuple[Any, str]] = []
        seen: set[tuple[str, Any]] = set()
        description = _text(node.get("description")) or _text(node.get("title")) if "const" in node else ""
        for value in values:
            if isinstance(value, (dict, list)):
                raise SchemaError(path, f"an enum of objects or lists is not read; {SUPPORTED}")
            if isinstance(value, float) and value.is_integer() and types is not None and "integer" in types:
                value = int(value)
            if types is not None and _type_of(value) not in types and not (_type_of(value) == "integer" and "number" in types):
                raise SchemaError(path, f"the enum's value {shown(value)} is not of the declared type {_listed(types)}")
            if value is None:
                nullable = True
            elif _same_value(value) not in seen:
                seen.add(_same_value(value))
                members.append((value, description if "const" in node else ""))
        return _Domain(members, nullable)

    def _typed(self, kind: str, node: dict[str, Any], path: str) -> _Domain:
        if kind == "boolean":
            return _Domain([(True, ""), (False, "")], boolean=True)
        if kind == "integer":
            return self._integer_range(node, path)
        if kind == "number":
            raise SchemaError(path, f"a number that is not an enum is open-ended (use an integer with minimum and "
                                    f"maximum, or an enum of numbers); {SUPPORTED}")
        if kind == "string":
            detail = next((f" (`{k}` describes text, it does not list answers)" for k in ("format", "pattern") if k in node), "")
            raise SchemaError(path, f"a string without `enum` is open-ended{detail}; {SUPPORTED}")
        raise SchemaError(path, f"type {kind!r} is not read; {SUPPORTED}")

    def _integer_range(self, node: dict[str, Any], path: str) -> _Domain:
        low, high = _bound(node, "minimum", "exclusiveMinimum", path, lower=True), _bound(node, "maximum", "exclusiveMaximum", path, lower=False)
        if low is None or high is None:
            missing = "minimum" if low is None else "maximum"
            raise SchemaError(path, f"an integer without a {missing} is open-ended; give it `minimum` and `maximum` "
                                    f"(at most {MAX_SCORE_LEVELS} levels); {SUPPORTED}")
        if low > high:
            raise SchemaError(path, f"the integer's bounds leave no value ({low} > {high})")
        step = node.get("multipleOf", 1)
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not step > 0 or (isinstance(step, float) and not math.isfinite(step)):
            raise SchemaError(path, f"`multipleOf` must be a positive number, got {shown(step)}")
        # The integers that are multiples of p/q (in lowest terms) are the multiples of p.
        every = Fraction(str(step)).numerator
        first = -(-low // every) * every
        count = (high - first) // every + 1  # integers, however large: `len(range)` would overflow
        if count < 1:
            raise SchemaError(path, f"no multiple of {step} lies within {low}..{high}")
        if every != 1:
            if count > self.max_options:
                raise SchemaError(path, f"{count} multiples of {step} in {low}..{high}; at most {self.max_options} answers a property")
            return _Domain([(level, "") for level in range(first, high + 1, every)])
        if count > MAX_SCORE_LEVELS:
            raise SchemaError(path, f"the integer range {low}..{high} has {count} levels; at most "
                                    f"{MAX_SCORE_LEVELS} can be read")
        return _Domain([(level, "") for level in range(low, high + 1)], score=(low, high))

    def _union(self, domains: list[_Domain], nullable: bool, path: str) -> _Domain:
        members: list[tuple[Any, str]] = []
        seen: set[tuple[str, Any]] = set()
        for domain in domains:
            for value, description in domain.members:
                if _same_value(value) not in seen:
                    seen.add(_same_value(value))
                    members.append((value, description))
        if len(members) > self.max_options:
            raise SchemaError(path, f"{len(members)} answers; at most {self.max_options} a property")
        nullable = nullable or any(domain.nullable for domain in domains)
        kinds = [domain for domain in domains if domain.members]
        boolean = len(kinds) == 1 and kinds[0].boolean
        score = kinds[0].score if len(kinds) == 1 else None
        return _Domain(members, nullable, boolean=boolean, score=score)

    def leaf(self, domain: _Domain, node: dict[str, Any], path: str, names: tuple[str, ...]) -> Shape:
        answers = len(domain.members) + (1 if domain.nullable else 0)
        if answers == 0:
            raise SchemaError(path, "the schema allows no value here")
        if answers == 1:
            return Fixed(domain.members[0][0] if domain.members else None)
        if answers > self.max_options:
            raise SchemaError(path, f"{answers} answers; at most {self.max_options} a property")
        question = _question(node, names)
        if domain.boolean and not domain.nullable:
            data: dict[str, Any] = {"kind": FieldKind.BOOLEAN, "question": question}
        elif domain.score is not None and not domain.nullable:
            low, high = domain.score
            data = {"kind": FieldKind.SCORE, "question": question, "min": low, "max": high}
        else:
            options: dict[str, str] = {}
            literals: dict[str, Any] = {}
            for value, description in [*domain.members, *([(None, "")] if domain.nullable else [])]:
                label = value if isinstance(value, str) else json.dumps(value)
                if label in options:
                    raise SchemaError(path, f"the answers {shown(label)} and {json.dumps(label)} read alike; an enum "
                                            "may not hold a string and another value written the same")
                options[label] = " ".join(description.split())
                if not isinstance(value, str):
                    literals[label] = value
            data = {"kind": FieldKind.CHOICE, "question": question, "options": options}
            if literals:
                data["literals"] = literals
        return Decided(self.add_field(names, data, path))

    def add_field(self, names: tuple[str, ...], data: dict[str, Any], path: str) -> str:
        if len(self.fields) >= self.max_fields:
            raise SchemaError(path, f"the schema asks more than {self.max_fields} questions (a multi-label array "
                                    "asks one per option)")
        name = _field_name(names, self.fields)
        try:
            self.fields[name] = FieldSpec(name=name, **data)
        except ValidationError as error:
            detail = error.errors(include_url=False)[0]
            message = str(detail["msg"]).removeprefix("Value error, ")
            raise SchemaError(path, message) from None
        self.paths[name] = path
        return name


# -- assembling the answer -----------------------------------------------------------------------------


def _assemble(shape: Shape, decision: Any, rubric: Rubric) -> Any:
    if isinstance(shape, Nested):
        return {key: _assemble(child, decision, rubric) for key, child in shape.keys}
    if isinstance(shape, Fixed):
        return shape.value
    if isinstance(shape, Decided):
        return rubric.fields[shape.field].json_value(decision.fields[shape.field].value)
    chosen = [index for index, (_, field) in enumerate(shape.options) if decision.fields[field].value is True]

    def belief(index: int) -> float:
        return float(decision.fields[shape.options[index][1]].probabilities.get("true", 0.0))

    if len(chosen) < shape.min_items:
        # Too few answered true: the likeliest of the others join, as many as `minItems` needs.
        rest = sorted((i for i in range(len(shape.options)) if i not in chosen), key=belief, reverse=True)
        chosen = sorted(chosen + rest[: shape.min_items - len(chosen)])
    if shape.max_items is not None and len(chosen) > shape.max_items:
        chosen = sorted(sorted(chosen, key=belief, reverse=True)[: shape.max_items])
    return [shape.options[index][0] for index in chosen]


# -- helpers -------------------------------------------------------------------------------------------


_TYPE_ORDER = ["boolean", "integer", "number", "string", "object", "array", "null"]


def _same_value(value: Any) -> tuple[str, Any]:
    """What makes two enum values one answer, as JSON Schema compares them: `1` and `1.0` are one number,
    while `true` and `1`, or `"1"` and `1`, stay apart (Python's `True == 1` would merge them)."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    return (type(value).__name__, value)


def _types_of(node: Mapping[str, Any], path: str) -> set[str]:
    declared = node.get("type")
    if declared is None:
        return set()
    listed = declared if isinstance(declared, list) else [declared]
    unknown = [kind for kind in listed if kind not in _TYPE_ORDER]
    if unknown or not listed:
        raise SchemaError(path, f"`type` must be one of {', '.join(_TYPE_ORDER)} (or a list of them), got {shown(declared)}")
    return set(listed)


def _alternatives(node: Mapping[str, Any], path: str) -> list[Any] | None:
    for keyword in ("anyOf", "oneOf"):
        if keyword in node:
            members = node[keyword]
            if not isinstance(members, list) or not members:
                raise SchemaError(path, f"`{keyword}` must be a non-empty list of schemas")
            return members
    return None


def _constrains(node: Mapping[str, Any]) -> bool:
    return any(key in node for key in ("type", "enum", "const"))


def _refuse_conditionals(node: Mapping[str, Any], path: str) -> None:
    for keyword in ("not", "if", "then", "else", "dependentSchemas", "dependentRequired", "patternProperties"):
        if keyword in node:
            raise SchemaError(path, f"`{keyword}` is not read; {SUPPORTED}")
    if "anyOf" in node and "oneOf" in node:
        raise SchemaError(path, "`anyOf` and `oneOf` together (an intersection of unions) are not read")


def _opens_keys(node: Mapping[str, Any]) -> bool:
    extra = node.get("additionalProperties", None)
    return extra is not False


def _merged(target: Mapping[str, Any], siblings: Mapping[str, Any]) -> dict[str, Any]:
    """A referenced schema under the referring node's own keywords; the node's own words (a title or a
    description) describe the property, so the referenced schema's are dropped when it has any."""
    if "title" in siblings or "description" in siblings:
        target = {k: v for k, v in target.items() if k not in ("title", "description")}
    return {**target, **siblings}


def _composite(node: Mapping[str, Any], path: str) -> bool:
    """An object or an array (answered by several fields), as opposed to a leaf one field answers."""
    return bool(_types_of(node, path) & {"object", "array"}) or "properties" in node


def _bound(node: Mapping[str, Any], inclusive: str, exclusive: str, path: str, *, lower: bool) -> int | None:
    found: list[int] = []
    for keyword in (inclusive, exclusive):
        value = node.get(keyword)
        if value is None or isinstance(value, bool):
            continue
        if not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
            raise SchemaError(path, f"`{keyword}` must be a number, got {shown(value)}")
        strict = keyword == exclusive
        if lower:
            found.append(math.floor(value) + 1 if strict else math.ceil(value))
        else:
            found.append(math.ceil(value) - 1 if strict else math.floor(value))
    # Draft 4 writes exclusive bounds as booleans beside `minimum`/`maximum`.
    if node.get(exclusive) is True and node.get(inclusive) is not None and found:
        value = node[inclusive]
        found = [math.floor(value) + 1] if lower else [math.ceil(value) - 1]
    if not found:
        return None
    return max(found) if lower else min(found)


def _count(value: Any, path: str, keyword: str) -> Any:
    if value is None:
        return 0 if keyword == "minItems" else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SchemaError(path, f"`{keyword}` must be a non-negative integer, got {shown(value)}")
    return value


def _question(node: Mapping[str, Any], names: tuple[str, ...]) -> str:
    own = _text(node.get("description")) or _text(node.get("title")) or _humanised(names[-1])
    if len(names) > 1:
        return f"{' / '.join(_humanised(name) for name in names[:-1])}: {own}"
    return own


def _as_instructions(text: str) -> str:
    """Free text (a system message) as a rubric's instructions may hold it: line breaks as `\n`, any other
    control character a space, noncharacters dropped (a client's prompt is taken, not refused, for them)."""
    text = re.sub(r"\r\n?|[\v\f\x1c-\x1e\x85\u2028\u2029]", "\n", text)
    kept = []
    for ch in text:
        refused = refused_character(ch, multiline=True)
        if refused is None:
            kept.append(ch)
        elif not is_noncharacter(ch):
            kept.append(" ")
    return "".join(kept).strip()


def _text(value: Any) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""


def _humanised(key: str) -> str:
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key).replace("_", " ").replace("-", " ").split()
    text = " ".join(words) or key
    return text[:1].upper() + text[1:]


def _field_name(names: tuple[str, ...], taken: Mapping[str, Any]) -> str:
    """A valid, unique field name for a property path: `customer_tier`, `tags_urgent`, `f_2fa_enabled`."""
    parts = [re.sub(r"[^A-Za-z0-9]+", "_", _ascii(name)).strip("_") for name in names]
    base = "_".join(part for part in parts if part)[:_NAME_LIMIT].rstrip("_")
    if not base or not base[0].isalpha():
        base = f"f_{base}" if base else "field"
    if reserved_name_problem(base):
        base = f"{base}_field"
    name, suffix = base, 2
    while name in taken:
        name, suffix = f"{base}_{suffix}", suffix + 1
    return name


def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()


def _rubric_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]+", "_", _ascii(str(name))).strip("_")[:_NAME_LIMIT]
    if not cleaned or not (cleaned[0].isalpha() or cleaned[0] == "_"):
        cleaned = f"schema_{cleaned}" if cleaned else "schema"
    return cleaned


def _join(path: str, key: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "object" if isinstance(value, dict) else "array"


def _json_type(value: Any) -> str:
    return {"null": "null", "boolean": "a boolean", "integer": "a number", "number": "a number", "string": "a string",
            "object": "an object", "array": "a list"}[_type_of(value)]


def _listed(types: set[str]) -> str:
    return " or ".join(sorted(types, key=_TYPE_ORDER.index))
