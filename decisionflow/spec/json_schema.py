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
| `anyOf` / `oneOf` / `allOf` of the above | one field over the values the whole schema allows | as above |
| `["T", "null"]`, `anyOf [..., {"type": "null"}]`, `null` in an enum, `nullable: true` | the field with `null` as one more answer | the value or `null` |
| `$ref` into `$defs` / `definitions` (any local JSON pointer) | the referenced schema | |
| `object` with `properties`, nested | its properties flattened into fields (`customer_tier`) | a nested object |
| `array` of an enum (multi-label, `uniqueItems` or not) | one boolean field per option, read in the same pass | the options answered `true`, in the enum's order, within `minItems`/`maxItems` |
| a single allowed value (`const`, a one-member enum) | none: written in | that value |

How a leaf (a property answered by one field) is read exactly: its values are drawn from the most
specific part of its schema that lists them (its `const`, its `enum`, its `anyOf`/`oneOf` members'
values, an `allOf` member's or a `$ref`'s, `boolean`, an integer range from the bounds of every schema
that applies together), a superset of what the schema allows; then only the values the whole schema
accepts are kept, judged by the `jsonschema` validator (`json_schema_check`). Every keyword at a leaf is
so honoured as a validating client judges the answer: `enum` beside `maximum`, `maxLength`, `pattern`,
`not`, a sibling's or an `allOf` member's `enum` (their intersection), `oneOf`'s "exactly one", `format`
where the validator knows it. No value left is refused naming the property; an integer range keeps its
score field only when every level is left (else a choice of the integers left).

Objects and arrays are answered by construction (every listed property, each answered; the options
answered `true`), so only what that construction honours is read there: `properties`, `required`,
`additionalProperties`, `unevaluatedProperties`, and `minProperties`, `maxProperties`,
`dependentRequired` and `propertyNames` where the listed properties meet them; `items`, `minItems`,
`maxItems`, `uniqueItems`. What would constrain the object beyond that (`not`, `if`/`then`/`else`, a
choice or intersection of shapes, `enum`/`const`, `patternProperties`, `dependentSchemas`, `contains`,
tuples) is refused naming the keyword, never left unread. Keywords that only annotate (`title`,
`description`, `examples`, `default`, `deprecated`, `x-...`, any keyword JSON Schema does not define) are
accepted anywhere; the validation keywords no conversion honours (`$dynamicRef`, `$recursiveRef`, `$id` or
`$schema` below the root, draft 3's `divisibleBy`/`disallow`/`extends`) are refused.

Properties keep the schema's order (the plan pins the first field, as any rubric's); every property is
answered, required or not. `title` and `description` become a field's question (the description first)
and an option's description (`anyOf` of described `const`s). Everything open-ended (a string without
`enum`, a number that is not an enum, `pattern`, `format`, arrays of objects or booleans, maps of any keys,
recursion) is refused with one `SchemaError` naming the JSON path of the first such property
(`customer.notes`, `tags[]`) and what is supported.

Reading a client's schema is bounded, whatever it holds: a small schema can reference itself into an
exponential number of paths (eight levels of ten `$ref`s each is 10^8 paths in under 2 KB), so the reader
counts every schema object it reaches, again each time a `$ref` or a union reaches it, and stops at
`MAX_NODES`; schemas nest at most `MAX_DEPTH` deep, a union holds at most `MAX_ALTERNATIVES` members, at
most `MAX_VALUES` enum values are read, and checking the values is bounded in `json_schema_check`. Each
refusal is one `SchemaError` naming the property, before the work grows.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Union
from urllib.parse import unquote

from pydantic import ValidationError

from ..errors import Problem, RubricError
from .json_schema_check import Checker, CheckRefused, scalar_key
from .kinds import FieldKind
from .rubric import MAX_SCORE_LEVELS, FieldSpec, Rubric, reserved_name_problem
from .text import is_noncharacter, one_line, refused_character, shown

SUPPORTED = (
    "decisionflow answers closed sets: enum or const (strings, numbers, booleans, null), boolean, integer with "
    f"minimum and maximum (at most {MAX_SCORE_LEVELS} levels), anyOf/oneOf/allOf of these, objects of such properties, "
    "and arrays of an enum (multi-label)"
)
SOURCE = "schema"
MAX_DEPTH = 64
"""Objects, arrays, references and combinations (`anyOf`, `not`, ...) may nest this deep; a deeper schema is
refused rather than overflow (a pydantic model nesting models five deep reaches about 15)."""
MAX_NODES = 10_000
"""Schema objects the reader may reach, counted again each time a `$ref` or a union member reaches one."""
MAX_ALTERNATIVES = 1024
"""Members of one `anyOf`, `oneOf` or `allOf`."""
MAX_VALUES = 262_144
"""Enum and const values the reader may read, counted again each time a `$ref` reaches them (256 fields of
1,024 options each)."""
DEFAULT_MAX_FIELDS = 256
"""Fields (a multi-label array counts one per option) a schema may become, unless the caller says otherwise."""
DEFAULT_MAX_OPTIONS = 1024
"""Answers one property may offer, unless the caller says otherwise."""
_NAME_LIMIT = 60
ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "example", "$comment", "deprecated", "readOnly", "writeOnly",
    "contentMediaType", "contentEncoding", "contentSchema", "$anchor", "$dynamicAnchor", "$defs", "definitions",
    "$vocabulary", "strict", "discriminator", "xml", "externalDocs",
})
"""Keywords that only describe: a schema object holding nothing else constrains nothing (an `allOf` member of
them is read as no member)."""
_REFUSED_ANYWHERE = {
    "$dynamicRef": "dynamic references are not read; use local JSON pointers (`$ref: #/$defs/...`)",
    "$recursiveRef": "dynamic references are not read; use local JSON pointers (`$ref: #/$defs/...`)",
    "divisibleBy": "draft 3's `divisibleBy` is not read; write `multipleOf`",
    "disallow": "draft 3's `disallow` is not read; write `not`",
    "extends": "draft 3's `extends` is not read; write `allOf`",
}
_ROOT_ONLY = ("$id", "$schema")
_ARRAY_REFUSED = ("prefixItems", "contains", "minContains", "maxContains", "unevaluatedItems")
_ANY_VALUE = f"the schema allows any value here (no `type`, `enum` or `const`); {SUPPORTED}"
_SHAPES = f"`anyOf`/`oneOf` between objects or arrays (a choice of shapes) is not read; {SUPPORTED}"


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
    root = reader.resolved(schema, "", depth=0, refs=())
    if _types_of(root.view, "") != {"object"} and "properties" not in root.view:
        keyword = next((k for k in ("anyOf", "oneOf", "allOf", "enum", "const", "not", "if") if k in root.view), None)
        said = f"`{keyword}` at the root is not read: " if keyword else ""
        raise SchemaError("$", f"{said}the schema must describe one object with `properties`; {SUPPORTED}")
    shape = reader.object_shape(root.parts, "", (), depth=0, refs=root.refs)
    if not reader.fields:
        raise SchemaError("$", "the schema leaves nothing to decide: every property allows one value only")
    # A function's description is often the schema's own (pydantic writes the docstring in both): said once.
    described = _text(root.view.get("description"))
    parts = [_as_instructions(text) for text in (instructions, described if described not in (instructions or "") else "")
             if text and text.strip()]
    try:
        rubric = Rubric(name=_rubric_name(name if name is not None else _text(root.view.get("title")) or "schema"),
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


@dataclass
class _Source:
    """Values a schema may accept, drawn from one part of it that lists them: a superset of what it accepts."""

    values: list[tuple[Any, str]]
    """(JSON value, its description), in the schema's order, without repeats; null among them if listed."""
    origin: str
    """Where they were drawn from, for messages (`enum`, `the integer range`, ...)."""
    kind: str = ""
    """`boolean`: the two values of `type: boolean`; `range`: the levels of an integer range."""
    levels: tuple[int, int] | None = None

    def with_null(self) -> _Source:
        if any(value is None for value, _ in self.values):
            return self
        return _Source([*self.values, (None, "")], self.origin, self.kind, self.levels)


@dataclass
class _Facts:
    """What the schema objects that apply together (a node, its `$ref`, its `allOf` members) say of an
    integer range: the types they all allow (None: any) and the tightest bounds and steps."""

    types: frozenset[str] | None = None
    low: int | None = None
    high: int | None = None
    step: int = 1
    stepped: bool = False

    def meet(self, other: _Facts) -> _Facts:
        if self.types is None or other.types is None:
            types = self.types if other.types is None else other.types
        else:
            types = self.types & other.types
            if ("integer" in self.types and "number" in other.types) or ("number" in self.types and "integer" in other.types):
                types |= {"integer"}
        lows = [bound for bound in (self.low, other.low) if bound is not None]
        highs = [bound for bound in (self.high, other.high) if bound is not None]
        return _Facts(types, max(lows) if lows else None, min(highs) if highs else None,
                      math.lcm(self.step, other.step), self.stepped or other.stepped)


@dataclass
class _Found:
    source: _Source | None
    """None: nothing lists the values (open-ended), or too many: `reason` says which."""
    reason: str = ""
    facts: _Facts = field(default_factory=_Facts)


@dataclass
class _Resolved:
    view: dict[str, Any]
    """The schema objects' keywords together (the outer ones over the inner), for the property's shape and words."""
    parts: tuple[Mapping[str, Any], ...]
    """The schema objects that apply together: the node, its `$ref` targets and single `allOf` members, outermost first."""
    refs: tuple[str, ...]


class _Reader:
    def __init__(self, root: Mapping[str, Any], *, max_fields: int, max_options: int) -> None:
        self.root = root
        self.max_fields = max_fields
        self.max_options = max_options
        self.fields: dict[str, FieldSpec] = {}
        self.paths: dict[str, str] = {}
        self.options: dict[str, Any] = {}
        self.nodes = 0
        self.values = 0
        self.targets: dict[str, Any] = {}
        self.owned: dict[int, tuple[Mapping[str, Any], _Facts, list[_Found]]] = {}
        self._checker: Checker | None = None

    # -- budgets -----------------------------------------------------------------------------------

    def visit(self, path: str, depth: int) -> None:
        """One schema object reached (again, through a `$ref` or a union, counts again)."""
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise SchemaError(path, f"the schema expands to more than {MAX_NODES:,} schema objects (each one counted "
                                    "every time a `$ref` or an `anyOf`/`oneOf`/`allOf` member reaches it)")
        if depth > MAX_DEPTH:
            raise SchemaError(path, f"the schema nests objects, arrays, references and combinations more than {MAX_DEPTH} deep")

    def read_values(self, count: int, path: str) -> None:
        self.values += count
        if self.values > MAX_VALUES:
            raise SchemaError(path, f"the schema lists more than {MAX_VALUES:,} values (each enum counted every time "
                                    "a `$ref` or a union reaches it)")

    @property
    def checker(self) -> Checker:
        if self._checker is None:
            self._checker = Checker(self.root, lambda ref: self.pointer(ref, "$"))
        return self._checker

    def judged(self, schema: Any, values: list[Any], path: str) -> Any:
        try:
            return self.checker.judge(schema, values)
        except CheckRefused as refused:
            raise SchemaError(path, str(refused)) from None

    # -- references ------------------------------------------------------------------------------

    def check_node(self, node: Mapping[str, Any], path: str) -> None:
        """What no position reads, refused wherever a schema object holds it."""
        for keyword, why in _REFUSED_ANYWHERE.items():
            if keyword in node:
                raise SchemaError(path, f"`{keyword}`: {why}")
        if node is not self.root:
            for keyword in _ROOT_ONLY:
                if keyword in node:
                    raise SchemaError(path, f"`{keyword}` below the root (a schema embedded in another) is not read")

    def resolved(self, node: Any, path: str, *, depth: int, refs: tuple[str, ...]) -> _Resolved:
        """`node` with its `$ref`s and single-member `allOf`s followed: the schema objects that apply
        together, and their keywords as one view (the node's own title or description describe the
        property over the referenced one's). A reference met again on the way is recursion."""
        seen = refs
        parts: list[Mapping[str, Any]] = []
        followed: set[int] = set()
        while True:
            self.visit(path, depth + len(seen))
            if node is True or (isinstance(node, Mapping) and not node):
                raise SchemaError(path, f"the schema allows any value here (open-ended); {SUPPORTED}")
            if node is False:
                raise SchemaError(path, "the schema allows no value here (`false`)")
            if not isinstance(node, Mapping):
                raise SchemaError(path, f"a schema must be a JSON object, got {_json_type(node)}")
            self.check_node(node, path)
            parts.append(node)
            if "$ref" in node:
                ref = node["$ref"]
                if isinstance(ref, str) and ref in seen:
                    raise SchemaError(path, f"the schema is recursive ({ref} refers to itself through {path or 'the root'}); "
                                            f"a recursive structure is open-ended; {SUPPORTED}")
                node = self.pointer(ref, path)
                seen = (*seen, ref)
                continue
            if "allOf" in node:
                members = [member for member in self.members(node, "allOf", path) if not _vacuous(member)]
                if len(members) == 1:
                    followed.add(id(node))
                    node = members[0]
                    continue
            break
        view: dict[str, Any] = {}
        for part in reversed(parts):
            own = {key: value for key, value in part.items() if key != "$ref" and not (key == "allOf" and id(part) in followed)}
            if "title" in own or "description" in own:
                view.pop("title", None)
                view.pop("description", None)
            view.update(own)
        return _Resolved(view, tuple(parts), seen)

    def pointer(self, ref: Any, path: str) -> Any:
        if not isinstance(ref, str):
            raise SchemaError(path, f"`$ref` must be a string, got {_json_type(ref)}")
        if ref in self.targets:
            return self.targets[ref]
        if not ref.startswith("#"):
            raise SchemaError(path, f"`$ref` {ref!r} points outside the schema; only local references (#/$defs/...) are read")
        if ref != "#" and not ref.startswith("#/"):
            raise SchemaError(path, f"`$ref` {ref!r} names an anchor; only JSON pointers (#/$defs/...) are read")
        target: Any = self.root
        for part in unquote(ref[1:]).split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, Mapping) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                raise SchemaError(path, f"`$ref` {ref!r} names nothing in the schema")
        self.targets[ref] = target
        return target

    def members(self, node: Mapping[str, Any], keyword: str, path: str) -> list[Any]:
        members = node[keyword]
        if not isinstance(members, list) or not members:
            raise SchemaError(path, f"`{keyword}` must be a non-empty list of schemas")
        if len(members) > MAX_ALTERNATIVES:
            raise SchemaError(path, f"`{keyword}` holds {len(members)} schemas; at most {MAX_ALTERNATIVES} are read")
        return members

    # -- objects and arrays ----------------------------------------------------------------------

    def object_shape(self, parts: tuple[Mapping[str, Any], ...], path: str, names: tuple[str, ...], *, depth: int,
                     refs: tuple[str, ...]) -> Nested:
        owners = [part for part in parts if "properties" in part]
        if len(owners) > 1:
            raise SchemaError(path, "`properties` in two schema objects that apply together (beside a `$ref`, or in "
                                    f"`allOf`) are not read; {SUPPORTED}")
        owner = owners[0] if owners else None
        properties = owner["properties"] if owner is not None else {}
        if not isinstance(properties, Mapping):
            raise SchemaError(path, f"`properties` must be an object, got {_json_type(properties)}")
        if not properties and not any(_closes_keys(part) for part in parts):
            raise SchemaError(path, f"an object without listed `properties` (a map of any keys) is open-ended; {SUPPORTED}")
        keys = list(properties)
        for index, part in enumerate(parts):
            self.container_checks(part, "object", path, keys=keys, owner=part is owner,
                                  inner=owner is not None and index > parts.index(owner))
        shaped: list[tuple[str, Shape]] = []
        for key, child in properties.items():
            shaped.append((key, self.property_shape(child, _join(path, key), (*names, key), depth=depth + 1, refs=refs)))
        return Nested(tuple(shaped))

    def container_checks(self, part: Mapping[str, Any], kind: str, path: str, *, keys: Sequence[str] = (),
                         owner: bool = False, inner: bool = False) -> None:
        """Refuse what an object (or an array) answered by construction cannot honour in one of the schema
        objects that apply to it; check what depends only on its keys against them."""
        article = "an"
        for keyword in ("enum", "const", "not", "if", "then", "else"):
            if keyword in part:
                raise SchemaError(path, f"`{keyword}` on {article} {kind} is not read ({article} {kind} is answered part by "
                                        f"part); {SUPPORTED}")
        for keyword in ("anyOf", "oneOf"):
            if keyword in part:
                raise SchemaError(path, f"`{keyword}` on {article} {kind} (a choice between {kind} shapes) is not read; {SUPPORTED}")
        if "allOf" in part:
            members = [member for member in self.members(part, "allOf", path) if not _vacuous(member)]
            if len(members) > 1 or (members and "$ref" in part):
                raise SchemaError(path, f"`allOf` of several schemas for {article} {kind} (an intersection of shapes) is not read; {SUPPORTED}")
        types = _types_of(part, path)
        if types and kind not in types:
            raise SchemaError(path, f"the schema is {article} {kind} and, where it applies together, of type {_listed(types)}: "
                                    "no value is both")
        if kind == "array":
            if "prefixItems" in part or isinstance(part.get("items"), list):
                raise SchemaError(path, f"an array of positions with their own schemas (a tuple) is not read; {SUPPORTED}")
            for keyword in _ARRAY_REFUSED:
                if keyword in part:
                    raise SchemaError(path, f"`{keyword}` on an array is not read; {SUPPORTED}")
            return
        for keyword in ("patternProperties", "dependentSchemas"):
            if part.get(keyword):
                raise SchemaError(path, f"`{keyword}` (constraints that depend on property names or presence) is not read; {SUPPORTED}")
        if not owner and not _vacuous(part.get("additionalProperties", True)):
            raise SchemaError(path, "`additionalProperties` beside a `$ref` (or in `allOf`) applies to every property of "
                                    f"the object, whose `properties` are listed elsewhere; write it beside `properties`; {SUPPORTED}")
        if inner and not _vacuous(part.get("unevaluatedProperties", True)):
            raise SchemaError(path, "`unevaluatedProperties` in a referenced schema does not see the `properties` that refer "
                                    f"to it; {SUPPORTED}")
        self.key_checks(part, keys, path)

    def key_checks(self, part: Mapping[str, Any], keys: Sequence[str], path: str) -> None:
        """The keywords that depend only on which properties an object holds, checked against its listed
        properties (every one of them is answered)."""
        required = part.get("required", [])
        if not isinstance(required, list) or not all(isinstance(key, str) for key in required):
            raise SchemaError(path, "`required` must be a list of property names")
        unknown = [key for key in required if key not in keys]
        if unknown:
            raise SchemaError(path, f"`required` names {shown(unknown[0])}, which is not one of the properties")
        for keyword, holds in (("minProperties", lambda bound: len(keys) >= bound), ("maxProperties", lambda bound: len(keys) <= bound)):
            if keyword in part:
                bound = _count(part[keyword], path, keyword)
                if not holds(bound):
                    raise SchemaError(path, f"`{keyword}` {bound} cannot hold: the object's answer always holds its "
                                            f"{len(keys)} properties")
        dependent: dict[str, Any] = {}
        for keyword in ("dependentRequired", "dependencies"):
            given = part.get(keyword, {})
            if not isinstance(given, Mapping):
                raise SchemaError(path, f"`{keyword}` must be an object of property names")
            for trigger, needed in given.items():
                if keyword == "dependencies" and not isinstance(needed, list):
                    raise SchemaError(path, f"`dependencies` with a schema (constraints that depend on a property's "
                                            f"presence) is not read; {SUPPORTED}")
                if not isinstance(needed, list) or not all(isinstance(key, str) for key in needed):
                    raise SchemaError(path, f"`{keyword}` must map property names to lists of property names")
                dependent[trigger] = (keyword, needed)
        for trigger, (keyword, needed) in dependent.items():
            missing = [key for key in needed if key not in keys]
            if trigger in keys and missing:
                raise SchemaError(path, f"`{keyword}` asks for {shown(missing[0])} beside {shown(trigger)}, which is not "
                                        "one of the properties")
        if "propertyNames" in part:
            names = part["propertyNames"]
            self.candidates(names, path, depth=0, refs=())  # reached and counted as any schema the validator enters
            verdict = self.judged(names, list(keys), path)
            refused = [key for index, key in enumerate(keys) if index not in set(verdict.accepted)]
            if refused:
                raise SchemaError(path, f"`propertyNames` refuses the property {shown(refused[0])} ({verdict.refusal})")

    def property_shape(self, node: Any, path: str, names: tuple[str, ...], *, depth: int, refs: tuple[str, ...],
                       outer: tuple[Mapping[str, Any], ...] = ()) -> Shape:
        """`outer`: the schema objects of an `anyOf [shape, null]` around `node` (without that `anyOf`), which
        apply to the object or array too."""
        found = self.resolved(node, path, depth=depth, refs=refs)
        view = found.view
        types = _types_of(view, path)
        unions = [keyword for keyword in ("anyOf", "oneOf") if keyword in view]
        if unions:
            members = [member for keyword in unions for member in self.members(view, keyword, path)]
            shaped = [self.resolved(member, path, depth=depth + 1, refs=found.refs) for member in members]
            composite = [index for index, member in enumerate(shaped) if _composite(member.view, path)]
            if composite:
                only_null_besides = all(_types_of(member.view, path) == {"null"} for index, member in enumerate(shaped)
                                        if index not in composite)
                if len(unions) == 1 and len(composite) == 1 and only_null_besides:
                    # `Optional[Model]` / `Optional[list[Enum]]`: answered as the object (or the list), never null.
                    around = tuple({key: value for key, value in part.items() if key != unions[0]} for part in found.parts)
                    return self.property_shape(members[composite[0]], path, names, depth=depth, refs=found.refs,
                                               outer=(*outer, *around))
                raise SchemaError(path, _SHAPES)
        if "object" in types or "properties" in view:
            if types - {"object", "null"}:
                raise SchemaError(path, f"a property that is an object or something else is not read; {SUPPORTED}")
            return self.object_shape((*outer, *found.parts), path, names, depth=depth, refs=found.refs)
        if "array" in types:
            if types - {"array", "null"}:
                raise SchemaError(path, f"a property that is an array or something else is not read; {SUPPORTED}")
            return self.array_shape((*outer, *found.parts), path, names, depth=depth, refs=found.refs)
        if "allOf" in view:
            for member in self.members(view, "allOf", path):
                if _composite(self.resolved(member, path, depth=depth + 1, refs=found.refs).view, path):
                    raise SchemaError(path, f"`allOf` of several object or array schemas (an intersection of shapes) is "
                                            f"not read; {SUPPORTED}")
        domain = self.leaf_domain(node, path, depth=depth + len(found.refs))
        return self.leaf(domain, view, path, names)

    def array_shape(self, parts: tuple[Mapping[str, Any], ...], path: str, names: tuple[str, ...], *, depth: int,
                    refs: tuple[str, ...]) -> Shape:
        for part in parts:
            self.container_checks(part, "array", path)
        items_schemas = [part["items"] for part in parts if "items" in part]
        if not items_schemas:
            raise SchemaError(path, f"an array without `items` may hold anything; {SUPPORTED}")
        items_path = path + "[]"
        for items in items_schemas:
            if _composite(self.resolved(items, items_path, depth=depth + 1, refs=refs).view, items_path):
                raise SchemaError(items_path, f"an array of objects or of arrays is open-ended (any number of them); {SUPPORTED}")
        domain = self.leaf_domain(items_schemas[0], items_path, depth=depth + 1 + len(refs), also=items_schemas[1:])
        if not domain.members:
            raise SchemaError(items_path, "the array's items allow only null")
        if domain.boolean:
            # A set of options is a closed question; a list of true/false flags has no meaning per position.
            raise SchemaError(items_path, "an array of booleans is open-ended (how many, and what each one means); "
                                          f"use an array of an enum naming what it flags, or one boolean property per flag; {SUPPORTED}")
        min_items = max(_count(part.get("minItems"), items_path, "minItems") for part in parts)
        maxima = [_count(part.get("maxItems"), items_path, "maxItems") for part in parts]
        max_items = min((bound for bound in maxima if bound is not None), default=None)
        if min_items > len(domain.members):
            raise SchemaError(path, f"`minItems` {min_items} asks for more items than the {len(domain.members)} options")
        if max_items is not None and max_items < min_items:
            raise SchemaError(path, f"`maxItems` {max_items} is below `minItems` {min_items}")
        question = _question(_described(parts), names)
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

    def leaf_domain(self, node: Any, path: str, *, depth: int, also: Sequence[Any] = ()) -> _Domain:
        """The values a leaf's schema accepts (and `also` the schemas in `also`): drawn from its most specific
        list of values, then judged against the whole schema."""
        found = self.candidates(node, path, depth=depth, refs=())
        for other in also:
            self.candidates(other, path, depth=depth, refs=())
        source = found.source
        if source is None:
            raise SchemaError(path, found.reason or _ANY_VALUE)
        values = [value for value, _ in source.values]
        kept = set(range(len(values)))
        refusal = ""
        for schema in (node, *also):
            verdict = self.judged(schema, [values[index] for index in sorted(kept)], path)
            survivors = sorted(kept)
            kept = {survivors[index] for index in verdict.accepted}
            refusal = refusal or verdict.refusal
        if not values:
            raise SchemaError(path, f"the schema allows no value here ({source.origin})")
        if not kept:
            what = f"{len(values)} value{'s' if len(values) != 1 else ''}"
            raise SchemaError(path, f"the schema allows no value here: {what} of its {source.origin} "
                                    f"{'meet' if len(values) != 1 else 'meets'} none of its other constraints"
                                    f"{f' ({refusal})' if refusal else ''}")
        members = [source.values[index] for index in sorted(kept)]
        if any(isinstance(value, (dict, list)) for value, _ in members):
            raise SchemaError(path, f"an enum of objects or lists is not read; {SUPPORTED}")
        present = [(value, description) for value, description in members if value is not None]
        nullable = len(present) < len(members)
        boolean = source.kind == "boolean" and len(present) == 2
        score = source.levels if source.kind == "range" and len(present) == len(values) - values.count(None) else None
        return _Domain(present, nullable, boolean=boolean, score=score)

    def candidates(self, node: Any, path: str, *, depth: int, refs: tuple[str, ...]) -> _Found:
        """The values `node` may accept, from its most specific part that lists them (in this order: `const`,
        `enum`, `anyOf`, `oneOf`, `then`/`else`, `allOf` members, `$ref`, the types and bounds of everything
        that applies together), each a superset of what it accepts. Every schema object the validator can
        enter for such a value is reached here too (`not`, `if`), so the budgets and refusals cover them."""
        self.visit(path, depth + len(refs))
        if node is True:
            return _Found(None, _ANY_VALUE)
        if node is False:
            return _Found(_Source([], "`false`"))
        if not isinstance(node, Mapping):
            raise SchemaError(path, f"a schema must be a JSON object, got {_json_type(node)}")
        facts, listed = self.own(node, path)
        found = list(listed)
        for keyword in ("anyOf", "oneOf"):
            if keyword in node:
                members = [self.candidates(member, path, depth=depth + 1, refs=refs) for member in self.members(node, keyword, path)]
                found.append(self.union(members, f"`{keyword}`", path))
        if "if" in node:
            self.candidates(node["if"], path, depth=depth + 1, refs=refs)
            branches = [self.candidates(node[key], path, depth=depth + 1, refs=refs) for key in ("then", "else") if key in node]
            if len(branches) == 2:
                found.append(self.union(branches, "`then`/`else`", path))
        if "not" in node:
            self.candidates(node["not"], path, depth=depth + 1, refs=refs)
        if "allOf" in node:
            for member in self.members(node, "allOf", path):
                inner = self.candidates(member, path, depth=depth + 1, refs=refs)
                facts = facts.meet(inner.facts)
                found.append(inner)
        if "$ref" in node:
            ref = node["$ref"]
            if isinstance(ref, str) and ref in refs:
                raise SchemaError(path, f"the schema is recursive ({ref} refers to itself through {path or 'the root'}); "
                                        f"a recursive structure is open-ended; {SUPPORTED}")
            target = self.pointer(ref, path)
            inner = self.candidates(target, path, depth=depth + 1, refs=(*refs, ref))
            facts = facts.meet(inner.facts)
            found.append(inner)
        found.append(self.typed(facts, node, path))
        chosen = next((item.source for item in found if item.source is not None), None)
        if chosen is not None and node.get("nullable") is True:
            chosen = chosen.with_null()
        reason = "" if chosen is not None else next((item.reason for item in found if item.reason), "")
        return _Found(chosen, reason, facts)

    def own(self, node: Mapping[str, Any], path: str) -> tuple[_Facts, list[_Found]]:
        """What a schema object says by itself (its keywords checked, its bounds, its `const`/`enum`), read
        once however often it is reached (each reach still counts toward the budgets)."""
        cached = self.owned.get(id(node))
        if cached is not None and cached[0] is node:
            for found in cached[2]:
                if found.source is not None:
                    self.read_values(len(found.source.values), path)
            return cached[1], cached[2]
        self.check_node(node, path)
        _check_leaf_keywords(node, path)
        types = _types_of(node, path)
        facts = _Facts(frozenset(types) if types else None,
                       _bound(node, "minimum", "exclusiveMinimum", path, lower=True),
                       _bound(node, "maximum", "exclusiveMaximum", path, lower=False))
        if "multipleOf" in node:
            facts.step, facts.stepped = _step(node["multipleOf"], path), True
        listed: list[_Found] = []
        if "const" in node:
            listed.append(self.listed([node["const"]], node, path, "`const`"))
        if "enum" in node:
            listed.append(self.listed(node["enum"], node, path, "`enum`"))
        self.owned[id(node)] = (node, facts, listed)
        return facts, listed

    def listed(self, values: Any, node: Mapping[str, Any], path: str, origin: str) -> _Found:
        if origin == "`enum`" and (not isinstance(values, list) or not values):
            raise SchemaError(path, "`enum` must be a non-empty list of values")
        if len(values) > self.max_options:
            return _Found(None, f"{len(values)} answers; at most {self.max_options} a property")
        self.read_values(len(values), path)
        integer = "integer" in _types_of(node, path)
        description = _text(node.get("description")) or _text(node.get("title")) if origin == "`const`" else ""
        members: list[tuple[Any, str]] = []
        seen: set[Any] = set()
        for value in values:
            if isinstance(value, float) and not math.isfinite(value):
                raise SchemaError(path, f"{origin} holds {value}, which JSON cannot write")
            if isinstance(value, float) and value.is_integer() and integer:
                value = int(value)
            key = _value_key(value)
            if key not in seen:
                seen.add(key)
                members.append((value, description))
        return _Found(_Source(members, origin))

    def union(self, members: list[_Found], origin: str, path: str) -> _Found:
        """The values of a union (anyOf, oneOf, then/else) are those of its members together."""
        values: list[tuple[Any, str]] = []
        seen: set[Any] = set()
        for member in members:
            if member.source is None:
                return _Found(None, member.reason or _ANY_VALUE)
            self.read_values(len(member.source.values), path)
            for value, description in member.source.values:
                key = _value_key(value)
                if key not in seen:
                    seen.add(key)
                    values.append((value, description))
            if len(values) > self.max_options:
                return _Found(None, f"{len(values)} answers; at most {self.max_options} a property")
        kinds = [member.source for member in members if member.source and any(v is not None for v, _ in member.source.values)]
        single = kinds[0] if len(kinds) == 1 else None
        return _Found(_Source(values, origin, single.kind if single else "", single.levels if single else None))

    def typed(self, facts: _Facts, node: Mapping[str, Any], path: str) -> _Found:
        """The values the types allow where they are few: booleans, null, the integers of a bounded range."""
        if facts.types is None:
            return _Found(None)
        values: list[tuple[Any, str]] = []
        kind, levels = "", None
        for type_name in sorted(facts.types, key=_TYPE_ORDER.index):
            if type_name == "boolean":
                values += [(True, ""), (False, "")]
                kind = "boolean"
            elif type_name == "null":
                values.append((None, ""))
            elif type_name == "integer":
                found = self.integer_range(facts, path)
                if found.source is None:
                    return found
                values += found.source.values
                kind, levels = found.source.kind, found.source.levels
            elif type_name == "number":
                return _Found(None, f"a number that is not an enum is open-ended (use an integer with minimum and "
                                    f"maximum, or an enum of numbers); {SUPPORTED}")
            elif type_name == "string":
                detail = next((f" (`{k}` describes text, it does not list answers)" for k in ("format", "pattern") if k in node), "")
                return _Found(None, f"a string without `enum` is open-ended{detail}; {SUPPORTED}")
            elif type_name in ("object", "array"):
                return _Found(None, _SHAPES)
        mixed = sum(1 for type_name in facts.types if type_name != "null") > 1
        return _Found(_Source(values, f"type {_listed(set(facts.types))}", "" if mixed else kind, None if mixed else levels))

    def integer_range(self, facts: _Facts, path: str) -> _Found:
        low, high = facts.low, facts.high
        if low is None or high is None:
            missing = "minimum" if low is None else "maximum"
            return _Found(None, f"an integer without a {missing} is open-ended; give it `minimum` and `maximum` "
                                f"(at most {MAX_SCORE_LEVELS} levels); {SUPPORTED}")
        if low > high:
            return _Found(None, f"the integer's bounds leave no value ({low} > {high})")
        every = facts.step
        first = -(-low // every) * every
        count = (high - first) // every + 1  # integers, however large: `len(range)` would overflow
        if count < 1:
            return _Found(None, f"no multiple of {every} lies within {low}..{high}")
        if facts.stepped:
            if count > self.max_options:
                return _Found(None, f"{count} multiples of {every} in {low}..{high}; at most {self.max_options} answers a property")
            return _Found(_Source([(level, "") for level in range(first, high + 1, every)], f"multiples of {every} in {low}..{high}"))
        if count > MAX_SCORE_LEVELS:
            return _Found(None, f"the integer range {low}..{high} has {count} levels; at most {MAX_SCORE_LEVELS} can be read")
        self.read_values(count, path)
        return _Found(_Source([(level, "") for level in range(low, high + 1)], f"integer range {low}..{high}", "range", (low, high)))

    def leaf(self, domain: _Domain, node: Mapping[str, Any], path: str, names: tuple[str, ...]) -> Shape:
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


def _value_key(value: Any) -> Any:
    """Values JSON Schema holds equal are one answer (`1` and `1.0`); objects and lists by their JSON text."""
    key = scalar_key(value)
    return key if key is not None else ("json", json.dumps(value, sort_keys=True))


def _vacuous(schema: Any) -> bool:
    """A schema that accepts anything: `true`, `{}`, or one that only annotates."""
    return schema is True or (isinstance(schema, Mapping) and all(key in ANNOTATIONS for key in schema))


def _closes_keys(node: Mapping[str, Any]) -> bool:
    return node.get("additionalProperties") is False or node.get("unevaluatedProperties") is False


def _described(parts: tuple[Mapping[str, Any], ...]) -> Mapping[str, Any]:
    """The outermost of the schema objects that says what the property is (its title or description)."""
    return next((part for part in parts if "description" in part or "title" in part), {})


def _check_leaf_keywords(node: Mapping[str, Any], path: str) -> None:
    """The value keywords' own types: a malformed one is refused, not judged by whatever Python makes of it."""
    for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        value = node.get(keyword)
        if value is None or (isinstance(value, bool) and keyword.startswith("exclusive")):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SchemaError(path, f"`{keyword}` must be a number, got {shown(value)}")
    for keyword in ("minLength", "maxLength"):
        if keyword in node:
            _count(node[keyword], path, keyword)
    for keyword in ("pattern", "format"):
        if keyword in node and not isinstance(node[keyword], str):
            raise SchemaError(path, f"`{keyword}` must be a string, got {shown(node[keyword])}")


def _step(step: Any, path: str) -> int:
    """The integers that are multiples of `multipleOf` p/q (in lowest terms) are the multiples of p."""
    if isinstance(step, bool) or not isinstance(step, (int, float)) or not step > 0 or (isinstance(step, float) and not math.isfinite(step)):
        raise SchemaError(path, f"`multipleOf` must be a positive number, got {shown(step)}")
    return Fraction(str(step)).numerator


def _types_of(node: Mapping[str, Any], path: str) -> set[str]:
    declared = node.get("type")
    if declared is None:
        return set()
    listed = declared if isinstance(declared, list) else [declared]
    unknown = [kind for kind in listed if kind not in _TYPE_ORDER]
    if unknown or not listed:
        raise SchemaError(path, f"`type` must be one of {', '.join(_TYPE_ORDER)} (or a list of them), got {shown(declared)}")
    return set(listed)


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
