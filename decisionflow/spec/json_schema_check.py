"""Which of a few JSON values a JSON schema accepts, judged by the `jsonschema` library, with bounded work.

`json_schema` draws the values a property may answer from the most specific part of its schema that
lists them (an `enum`, a `const`, a union's members, `boolean`, an integer range), a superset of what the
whole schema allows; this module keeps those that the whole schema accepts. A validating client reads
the answer with a validator like this one, so every keyword at a leaf (bounds, lengths, `multipleOf`,
`pattern`, `format`, `not`, `oneOf`'s "exactly one", `if`/`then`/`else`, `allOf`, `$ref`) is honoured
as it will be judged, rather than re-implemented keyword by keyword here.

The dialect is draft 2020-12, with what older schemas and OpenAPI write read as they mean it:
- draft 4's boolean `exclusiveMinimum`/`exclusiveMaximum` beside `minimum`/`maximum` (a 2020-12
  validator compares the number with `true`), and the later numeric form, each schema object as written;
- OpenAPI's `nullable: true`: that schema object also accepts null;
- the root's `$schema` is not followed to another validator class (this dialect reads every draft's
  bounds), and nothing is ever fetched: only the schema's own references resolve.

The work is bounded, since a client's schema is read on the server's threads:
- each schema object the validator enters costs one step (one more per `KEYWORDS_PER_STEP` keywords it
  holds), and one conversion may spend `MAX_CHECK_STEPS`: entering, with its error object when the value
  fails, is what checking costs (about 10 µs); `enum` membership is hashed and the members of `anyOf`/`oneOf`
  that hold a `const` or an `enum` are indexed by value, so a 1,024-option union costs a few steps per
  option rather than a pass over every member (same verdicts, linear instead of quadratic);
- `pattern` is matched by the `regex` package with a time limit: a pattern that backtracks
  catastrophically (`(a|a)+$`) would hold the thread for minutes; all patterns of one conversion share
  `PATTERN_SECONDS`.
Running out of either refuses the schema (`CheckRefused`), as does a keyword the validator cannot apply.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

MAX_CHECK_STEPS = 20_000
"""Schema objects the validator enters, for all the values one conversion checks (one entered with more than
`KEYWORDS_PER_STEP` keywords counts once per that many)."""
KEYWORDS_PER_STEP = 16
PATTERN_SECONDS = 0.1
"""Time all `pattern` matches of one conversion may take together."""


class CheckRefused(Exception):
    """The values could not be judged within the bounds (or the schema is malformed where the validator reads it)."""


@dataclass
class Verdict:
    accepted: list[int]
    """The positions of the values the schema accepts, in the order given."""
    refusal: str = ""
    """Why the first refused value was refused (`maximum`: ...), for a message when none is accepted."""


def scalar_key(value: Any) -> tuple[str, Any] | None:
    """What makes two JSON scalars one value as JSON Schema compares them (`1` and `1.0` are one number;
    `true` and `1` stay apart); None for objects and arrays."""
    if isinstance(value, bool):
        return ("boolean", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if value is None or isinstance(value, str):
        return (type(value).__name__, value)
    return None


@dataclass
class _Work:
    resolve: Callable[[str], Any]
    limit: int
    root: Any = None
    """The validator of the root schema, which the others are evolved from."""
    steps: int = 0
    pattern_seconds: float = 0.0
    validators: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    enums: dict[int, tuple[list[Any], frozenset]] = field(default_factory=dict)
    indexes: dict[int, tuple[list[Any], dict[tuple[str, Any], list[int]], list[int]]] = field(default_factory=dict)
    patterns: dict[str, Any] = field(default_factory=dict)

    def entered(self, schema: Any) -> Any:
        """The validator of `schema` (one per schema object: evolving one is most of what entering costs),
        its entry charged."""
        self.charge(schema)
        cached = self.validators.get(id(schema))
        if cached is None or cached[0] is not schema:
            cached = self.validators[id(schema)] = (schema, self.root.evolve(schema=schema))
        return cached[1]

    def charge(self, schema: Any) -> None:
        # Entering costs about as much as reading a few dozen keywords (a validator call, an error object
        # for each failure): a wide schema object counts as several.
        self.steps += 1 + (len(schema) // KEYWORDS_PER_STEP if isinstance(schema, Mapping) else 0)
        if self.steps > self.limit:
            raise CheckRefused(f"checking the answers against the schema enters more than {self.limit:,} schema "
                               "objects (each answer checked against each schema object it reaches)")

    def enum_keys(self, enums: list[Any]) -> frozenset:
        cached = self.enums.get(id(enums))
        if cached is None or cached[0] is not enums:
            keys = frozenset(key for key in map(scalar_key, enums) if key is not None)
            cached = self.enums[id(enums)] = (enums, keys)  # the list is kept, so its id stays its own
        return cached[1]

    def members_to_try(self, members: list[Any], instance: Any) -> Iterable[int]:
        """The members of an `anyOf`/`oneOf` that may accept `instance`: those without a top-level `const`
        or `enum` (or with `nullable`), and those whose `const`/`enum` holds it."""
        key = scalar_key(instance)
        if key is None:
            return range(len(members))
        cached = self.indexes.get(id(members))
        if cached is None or cached[0] is not members:
            keyed: dict[tuple[str, Any], list[int]] = {}
            open_: list[int] = []
            for index, member in enumerate(members):
                if not isinstance(member, Mapping) or member.get("nullable") is True:
                    open_.append(index)
                elif "const" in member:
                    own = scalar_key(member["const"])
                    if own is not None:
                        keyed.setdefault(own, []).append(index)
                elif isinstance(member.get("enum"), list):
                    for own in {scalar_key(value) for value in member["enum"]} - {None}:
                        keyed.setdefault(own, []).append(index)
                else:
                    open_.append(index)
            cached = self.indexes[id(members)] = (members, keyed, open_)
        _, keyed, open_ = cached
        found = keyed.get(key)
        return sorted([*open_, *found]) if found else open_

    def pattern(self, pattern: str) -> Any:
        compiled = self.patterns.get(pattern)
        if compiled is None:
            import regex

            try:
                compiled = self.patterns[pattern] = regex.compile(pattern)
            except (regex.error, RecursionError, OverflowError) as error:
                raise CheckRefused(f"`pattern` {pattern!r} is not a regular expression ({error})") from None
        return compiled


_WORK: ContextVar[_Work] = ContextVar("decisionflow_schema_check")


class Checker:
    """Judges values against the subschemas of one root schema (references resolve against it)."""

    def __init__(self, root: Mapping[str, Any], resolve: Callable[[str], Any], *, max_steps: int = MAX_CHECK_STEPS) -> None:
        # The root's `$schema` is dropped so that no other validator class takes over: this dialect reads
        # each draft's bounds as written.
        view = {key: value for key, value in root.items() if key != "$schema"}
        validator_class = _validator_class()
        self.work = _Work(resolve, max_steps, root=validator_class(view, format_checker=validator_class.FORMAT_CHECKER))

    @property
    def steps(self) -> int:
        return self.work.steps

    def judge(self, schema: Any, values: Iterable[Any]) -> Verdict:
        """The values `schema` accepts. Raises `CheckRefused` past the bounds or where the validator fails."""
        token = _WORK.set(self.work)
        try:
            verdict = Verdict([])
            for index, value in enumerate(values):
                error = _first_error(self.work, schema, value)
                if error is None:
                    verdict.accepted.append(index)
                elif not verdict.refusal:
                    keyword = error.validator if isinstance(error.validator, str) else "false"
                    verdict.refusal = f"`{keyword}`: {_cut(error.message)}"
            return verdict
        except CheckRefused:
            raise
        except RecursionError:
            raise CheckRefused("the schema nests too deeply to be checked") from None
        except Exception as error:  # noqa: BLE001 - a malformed keyword fails inside the validator: a refusal, not a crash
            raise CheckRefused(f"the schema could not be checked here: a keyword holds what its validator cannot "
                               f"apply ({_cut(str(error))})") from None
        finally:
            _WORK.reset(token)


def _cut(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _first_error(work: _Work, schema: Any, instance: Any) -> Any:
    return next(work.entered(schema).iter_errors(instance), None)


# -- the dialect ----------------------------------------------------------------------------------------


@functools.cache
def _validator_class() -> Any:
    """Draft 2020-12 with the readings and bounds of the module docstring (built on first use: importing
    `jsonschema` is left to the conversions that need it).

    The keywords that enter other schema objects (`$ref`, the combinators, `if`, `propertyNames`) enter
    them through `_Work.entered`, which charges the entry and keeps one validator per schema object;
    `$ref` resolves through the converter's own JSON pointers (local references only, no `$id` below the
    root: the converter refuses the rest), so no reference is ever fetched."""
    from jsonschema import Draft202012Validator, validators
    from jsonschema.exceptions import ValidationError

    base = dict(Draft202012Validator.VALIDATORS)

    def minimum(validator: Any, bound: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "number"):
            if schema.get("exclusiveMinimum") is True and instance <= bound:
                yield ValidationError(f"{instance!r} is less than or equal to the minimum of {bound!r}")
            elif instance < bound:
                yield ValidationError(f"{instance!r} is less than the minimum of {bound!r}")

    def maximum(validator: Any, bound: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "number"):
            if schema.get("exclusiveMaximum") is True and instance >= bound:
                yield ValidationError(f"{instance!r} is greater than or equal to the maximum of {bound!r}")
            elif instance > bound:
                yield ValidationError(f"{instance!r} is greater than the maximum of {bound!r}")

    def numeric_only(check: Callable[..., Any]) -> Callable[..., Any]:
        def keyword(validator: Any, bound: Any, instance: Any, schema: Any) -> Any:
            if isinstance(bound, bool):
                return ()  # draft 4: read beside `minimum`/`maximum`
            return check(validator, bound, instance, schema)
        return keyword

    def enum(validator: Any, enums: Any, instance: Any, schema: Any) -> Any:
        key = scalar_key(instance)
        if key is not None and isinstance(enums, list):
            if key not in _WORK.get().enum_keys(enums):
                yield ValidationError(f"{instance!r} is not one of the enum's values")
            return
        yield from base["enum"](validator, enums, instance, schema)

    def pattern(validator: Any, expression: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "string"):
            return
        work = _WORK.get()
        compiled = work.pattern(expression)
        began = time.monotonic()
        try:
            left = PATTERN_SECONDS - work.pattern_seconds
            if left <= 0:
                raise TimeoutError
            found = compiled.search(instance, timeout=left)
        except TimeoutError:
            raise CheckRefused(f"matching `pattern` {expression!r} takes more than {PATTERN_SECONDS} s for the answers "
                               "(a pattern that backtracks without end?)") from None
        finally:
            work.pattern_seconds += time.monotonic() - began
        if found is None:
            yield ValidationError(f"{instance!r} does not match {expression!r}")

    def union(exactly_one: bool) -> Callable[..., Any]:
        def keyword(validator: Any, members: Any, instance: Any, schema: Any) -> Any:
            work = _WORK.get()
            matched = 0
            for index in work.members_to_try(members, instance):
                if _first_error(work, members[index], instance) is None:
                    matched += 1
                    if not exactly_one or matched > 1:
                        break
            if matched == 0:
                yield ValidationError(f"{instance!r} is not valid under any of the given schemas")
            elif exactly_one and matched > 1:
                yield ValidationError(f"{instance!r} is valid under more than one of the given schemas")
        return keyword

    def all_of(validator: Any, members: Any, instance: Any, schema: Any) -> Any:
        work = _WORK.get()
        for member in members:
            error = _first_error(work, member, instance)
            if error is not None:
                yield error
                return

    def not_(validator: Any, subschema: Any, instance: Any, schema: Any) -> Any:
        if _first_error(_WORK.get(), subschema, instance) is None:
            yield ValidationError(f"{instance!r} should not be valid under {subschema!r}")

    def if_(validator: Any, subschema: Any, instance: Any, schema: Any) -> Any:
        work = _WORK.get()
        branch = "then" if _first_error(work, subschema, instance) is None else "else"
        if branch in schema:
            error = _first_error(work, schema[branch], instance)
            if error is not None:
                yield error

    def ref(validator: Any, reference: Any, instance: Any, schema: Any) -> Any:
        work = _WORK.get()
        error = _first_error(work, work.resolve(reference), instance)
        if error is not None:
            yield error

    def property_names(validator: Any, subschema: Any, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "object"):
            work = _WORK.get()
            for name in instance:
                error = _first_error(work, subschema, name)
                if error is not None:
                    yield error
                    return

    def nullable(check: Callable[..., Any]) -> Callable[..., Any]:
        def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
            if instance is None and schema.get("nullable") is True:
                return ()  # OpenAPI: this schema object also accepts null
            return check(validator, value, instance, schema)
        return keyword

    keywords = {
        **base,
        "minimum": minimum,
        "maximum": maximum,
        "exclusiveMinimum": numeric_only(base["exclusiveMinimum"]),
        "exclusiveMaximum": numeric_only(base["exclusiveMaximum"]),
        "enum": enum,
        "pattern": pattern,
        "anyOf": union(exactly_one=False),
        "oneOf": union(exactly_one=True),
        "allOf": all_of,
        "not": not_,
        "if": if_,
        "$ref": ref,
        "propertyNames": property_names,
    }
    return validators.extend(Draft202012Validator, {name: nullable(check) for name, check in keywords.items()})
