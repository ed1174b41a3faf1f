"""Decisions declared as pydantic classes: `@decision` on the class, `ask(...)` on each field.

The allowed answers always come from a field's type (`Literal[...]` of strings, a string `Enum`,
`bool`, or an `int` bounded by ge/le), never from a second list that could drift from it. The
`ask` marker lives in `Annotated` metadata, so it stays out of the JSON schema and leaves the field
required. The rubric is built when the class is decorated, so a bad declaration fails at import.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import threading
import types
import typing
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Callable, Literal, TypeVar, Union, overload

import annotated_types
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PydanticUndefinedAnnotation,
    TypeAdapter,
    ValidationError,
    create_model,
    functional_serializers,
    functional_validators,
)
from pydantic.fields import FieldInfo

from .derived import CodeRule
from .json_schema import SchemaRubric
from .problems import RubricError, problem, problems_from_validation, rubric_error
from .rubric import DECLARATION, AnswerFormat, FieldKind, FieldSpec, InContextExample, Rubric, label_of
from .text import listing, shown

ModelT = TypeVar("ModelT", bound=type[BaseModel])

_RUBRIC_ATTR = "__decisionflow_rubric__"
SUPPORTED_TYPES = (
    "Literal[...] of strings, an Enum subclass with string values, bool, "
    "or int bounded by ge/le (or gt/lt)"
)


@dataclass(frozen=True, eq=False)
class Ask:
    """Per-field marker for `Annotated[...]` metadata; build it with `ask(...)`.

    Markers compare (and hash) by the types of their values as well as the values: `typing` caches
    `Annotated[...]` by its metadata, and a marker equal to another through `True == 1` would hand one
    class's declaration to the next.
    """

    question: str | None = None
    options: tuple[tuple[Any, str], ...] = ()
    """(allowed value, description) pairs; values not listed get no description."""
    after: tuple[str, ...] = ()
    when: tuple[str, tuple[Any, ...]] | None = None
    """(field, values): ask this field only when that field's answer is one of the values."""
    options_by: tuple[str, tuple[tuple[Any, tuple[tuple[Any, Any], ...]], ...]] | None = None
    """(parent, ((parent answer, ((allowed value, description), ...)), ...)): the options offered per
    parent answer (description None when not given)."""
    marginalize: int | None = None
    debias: str | None = None
    catalog: str | None = None
    problems: tuple[str, ...] = ()
    """Arguments `ask` could not take, reported with the class and field when the class is decorated."""

    def _identity(self) -> tuple[Any, ...]:
        return tuple(_typed(getattr(self, name)) for name in (
            "question", "options", "after", "when", "options_by", "marginalize", "debias", "catalog", "problems"))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ask):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())


def _merged_asks(markers: Sequence[Ask]) -> Ask:
    """One field's `ask` markers as one, each argument from the last marker that gives it (as pydantic
    merges several `Field()`s): a type alias `Severity = Annotated[int, ask("How severe"), Field(ge=0, le=9)]`
    used as `Annotated[Severity, ask(after=["legal_threat"])]` keeps its question and gains the order."""
    merged: dict[str, Any] = {}
    for marker in markers:
        for argument in dataclasses.fields(Ask):
            value = getattr(marker, argument.name)
            if argument.name == "problems":
                merged["problems"] = (*merged.get("problems", ()), *value)
            elif value != argument.default:
                merged[argument.name] = value
    return Ask(**merged)


def _typed(value: Any) -> Any:
    """`value` with every item tagged by its type, so that `True`, `1` and `1.0` differ."""
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(_typed(item) for item in value))
    return (type(value), value)


@dataclass(frozen=True)
class Derive:
    """Per-field marker for a derived field; build it with `derive(function)`."""

    function: Callable[..., Any]
    question: str | None = None


def derive(function: Callable[..., Any], question: str | None = None) -> Derive:
    """A field computed from decided fields, never asked: `function`'s parameter names are the fields it
    reads, and it returns one of the field's allowed values for every combination of their answers
    (checked when the class is decorated; a field left unanswered is passed as None). For an Enum field
    it may return the Enum's members. `question` describes the field (default: its `Field(description=)`).

        needs_human: Annotated[bool, derive(lambda severity, legal_threat: severity >= 7 or legal_threat)]
    """
    if not callable(function):
        raise TypeError(f"derive() takes a function of the decided fields, got {function!r}")
    if question is not None and not isinstance(question, str):
        raise TypeError(f"derive(): the question must be a string, got {question!r}")
    return Derive(function=function, question=question)


def ask(
    question: str | None = None,
    *,
    options: Mapping[Any, str] | None = None,
    after: Sequence[str] | str = (),
    when: Mapping[str, Any] | None = None,
    options_by: Mapping[str, Mapping[Any, Sequence[Any] | Mapping[Any, str]]] | None = None,
    marginalize: int | None = None,
    debias: str | None = None,
    catalog: str | None = None,
) -> Ask:
    """Describe one decision field.

    `question` defaults to the field's `Field(description=...)`. `options` maps allowed values to
    descriptions (it never adds values: those come from the type). `after` names fields to decide
    first; `when={"department": ["billing", "returns"]}` asks the field only when an earlier answer
    is one of those values (the field must then be Optional with default None).
    `options_by={"domain": {"banking": ["transfer", "balance"], ...}}` offers, per answer of a parent
    field, only those of the type's values (a mapping `{"transfer": "description", ...}` in place of a
    list describes them). `marginalize=K` reads the field under each of its parent's top-K answers and
    reports the mixture (see docs/declaring.md). `debias` and `catalog` override the rubric's readout
    correction and catalog strategy for this field.

    Arguments of the wrong shape are reported, with the class and field, when the class is decorated.
    """
    if question is not None and not isinstance(question, str):
        raise TypeError(f"ask(): the question must be a string, got {question!r}")
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"ask(options=...) must map each allowed value to a description, got {options!r}")
    problems: list[str] = []
    if isinstance(after, str):
        after = (after,)
    elif isinstance(after, (list, tuple)) and all(isinstance(name, str) for name in after):
        after = tuple(after)
    else:
        problems.append(f"ask(after=...) takes a field name or a list of field names, e.g. after=['severity']; "
                        f"got {shown(after)}")
        after = ()
    condition = None
    if when is not None:
        if not isinstance(when, Mapping) or len(when) != 1:
            raise ValueError(
                f"ask(when=...) must map exactly one field to its value(s), e.g. "
                f"when={{'department': ['billing', 'returns']}}; got {when!r}"
            )
        ((field, values),) = when.items()
        if isinstance(values, (set, frozenset)):
            # A set's order depends on the process's hash seed; the condition keeps a stable one.
            values = sorted(values, key=_stable_order)
        values = tuple(values) if isinstance(values, (list, tuple)) else (values,)
        condition = (field, tuple(_plain(value) for value in values))
    by = None
    if options_by is not None:
        by = _options_by_marker(options_by, problems)
    return Ask(
        question=question,
        options=tuple((options or {}).items()),
        after=after,
        when=condition,
        options_by=by,
        marginalize=marginalize,
        debias=debias,
        catalog=catalog,
        problems=tuple(problems),
    )


def _stable_order(value: Any) -> tuple[str, str]:
    value = _plain(value)
    return (type(value).__name__, repr(value))


_OPTIONS_BY_EXAMPLE = "e.g. options_by={'domain': {'banking': ['transfer', 'balance'], 'travel': [...]}}"


def _options_by_marker(options_by: Any, problems: list[str]) -> Any:
    """`options_by` as the marker keeps it; a shape it cannot take is added to `problems`."""
    if not isinstance(options_by, Mapping) or len(options_by) != 1:
        problems.append(f"ask(options_by=...) must map one parent field to the options of each of its answers, "
                        f"{_OPTIONS_BY_EXAMPLE}; got {shown(options_by)}")
        return None
    ((parent, per_answer),) = options_by.items()
    if not isinstance(per_answer, Mapping):
        problems.append(f"ask(options_by=...) must map each answer of {shown(parent)} to that answer's options, "
                        f"{_OPTIONS_BY_EXAMPLE}; got {shown(per_answer)}")
        return None
    entries = []
    for answer, values in per_answer.items():
        if isinstance(values, Mapping):
            pairs = tuple((_plain(value), description) for value, description in values.items())
        elif isinstance(values, (list, tuple)):
            pairs = tuple((_plain(value), None) for value in values)
        else:
            problems.append(f"ask(options_by=...): the options under {shown(_plain(answer))} must be a list of the "
                            f"type's values (or a mapping of value to description), got {shown(values)}")
            continue
        entries.append((_plain(answer), pairs))
    return (parent, tuple(entries))


@overload
def decision(cls: ModelT, /) -> ModelT: ...
@overload
def decision(
    cls: None = None,
    /,
    *,
    name: str | None = None,
    instructions: str | None = None,
    answer_format: AnswerFormat | str = AnswerFormat.LABELS,
    pin_first: bool = True,
    max_fields_per_pass: int | None = None,
    debias: str | None = None,
    catalog: str | None = None,
    examples: typing.Sequence[typing.Any] = (),
    max_input_tokens: int | None = None,
    reading: str = "shared",
) -> typing.Callable[[ModelT], ModelT]: ...
def decision(
    cls: ModelT | None = None,
    /,
    *,
    name: str | None = None,
    instructions: str | None = None,
    answer_format: AnswerFormat | str = AnswerFormat.LABELS,
    pin_first: bool = True,
    max_fields_per_pass: int | None = None,
    debias: str | None = None,
    catalog: str | None = None,
    examples: typing.Sequence[typing.Any] = (),
    max_input_tokens: int | None = None,
    reading: str = "shared",
) -> Any:
    """Mark a pydantic class as a decision; usable as `@decision` or `@decision(...)`.

    `name` defaults to the class name in snake_case, `instructions` to the class docstring.
    `examples`: in-context examples written into the prompt before every input, each a pair
    `(text, {field: answer})` or a mapping `{"text": ..., "answers": {...}}`.
    `max_input_tokens`: the model reads at most this many tokens of each input (a longer one is cut).
    `reading`: `shared` (one prompt lists every field, read in rounds) or `independent` (each field a
    question of its own after the input, whose answer does not depend on the other fields).
    Raises `RubricError` naming the class and field when the declaration is not a valid rubric.
    """

    def apply(model: ModelT) -> ModelT:
        rubric = _build_rubric(
            model,
            name=name,
            instructions=instructions,
            answer_format=answer_format,
            pin_first=pin_first,
            max_fields_per_pass=max_fields_per_pass,
            debias=debias,
            catalog=catalog,
            examples=examples,
            max_input_tokens=max_input_tokens,
            reading=reading,
        )
        setattr(model, _RUBRIC_ATTR, rubric)
        return model

    return apply if cls is None else apply(cls)


def is_decision(obj: Any) -> bool:
    """True for a class decorated with `@decision` (not for its undecorated subclasses)."""
    return isinstance(obj, type) and _RUBRIC_ATTR in vars(obj)


def rubric_of(obj: Any) -> Rubric:
    """The rubric of a decorated class (or of one of its instances), or of a JSON schema read by
    `from_json_schema`; a `Rubric` passes through."""
    if isinstance(obj, Rubric):
        return obj
    if isinstance(obj, SchemaRubric):
        return obj.rubric
    cls = obj if isinstance(obj, type) else type(obj)
    if is_decision(cls):
        return vars(cls)[_RUBRIC_ATTR]
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        raise TypeError(f"{cls.__qualname__} is a pydantic model but is not decorated with @decision")
    raise TypeError(f"expected a Rubric or a class decorated with @decision, got {obj!r}")


def typed_model(target: Any) -> type[BaseModel]:
    """The class answers are validated into: the user's own class, or one generated for a rubric."""
    if is_decision(target):
        return target
    return model_for(rubric_of(target))


_GENERATED_LIMIT = 256
_generated: OrderedDict[str, type[BaseModel]] = OrderedDict()
_generated_lock = threading.Lock()


def model_for(rubric: Rubric) -> type[BaseModel]:
    """A pydantic class for a rubric without one (e.g. from YAML); one class per distinct rubric.

    The classes of the most recently used rubrics are kept (a bounded LRU), so a long-running server
    that sees many one-off rubrics does not grow without end.
    """
    key = rubric.key
    with _generated_lock:
        model = _generated.get(key)
        if model is not None:
            _generated.move_to_end(key)
            return model
        definitions: dict[str, Any] = {}
        for spec in rubric:
            annotation = _annotation_for(spec)
            if spec.name not in rubric.optional_fields:
                definitions[spec.name] = (annotation, Field(description=spec.question))
            else:
                definitions[spec.name] = (annotation | None, Field(default=None, description=spec.question))
        with warnings.catch_warnings():
            # A field named like one of BaseModel's deprecated methods (`json`, `copy`, `schema`)
            # works; pydantic's warning that it hides the method says nothing to the rubric's author.
            warnings.filterwarnings("ignore", message=".*shadows an attribute in parent", category=UserWarning)
            model = create_model(
                _class_name(rubric.name),
                __config__=ConfigDict(frozen=True, extra="forbid", protected_namespaces=()),
                __doc__=rubric.instructions or None,
                **definitions,
            )
        _generated[key] = model
        while len(_generated) > _GENERATED_LIMIT:
            _generated.popitem(last=False)
    return model


def _annotation_for(spec: FieldSpec) -> Any:
    if spec.kind is FieldKind.BOOLEAN:
        return bool
    if spec.kind is FieldKind.SCORE:
        return Annotated[int, Field(ge=spec.min, le=spec.max)]
    return Literal[tuple(spec.values)]  # type: ignore[misc]


# --- building the rubric from a class --------------------------------------------------------------


_FILE_MODULES: dict[str, str] = {}
"""Modules imported from a file path (`path/to/file.py:Class`), by module name: the path as written."""


def name_file_module(module_name: str, path: str) -> None:
    """Have errors in classes of `module_name` name the file `path` instead of the internal module name."""
    _FILE_MODULES[module_name] = path


def source_of(model: type) -> str:
    """How errors name a class: `path/to/file.py:Class` for a file, else `package.module.Class`."""
    path = _FILE_MODULES.get(model.__module__)
    return f"{path}:{model.__qualname__}" if path else f"{model.__module__}.{model.__qualname__}"


def _build_rubric(model: Any, *, name, instructions, answer_format, pin_first, max_fields_per_pass, debias=None, catalog=None,
                  examples=(), max_input_tokens=None, reading="shared") -> Rubric:
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"@decision expects a pydantic BaseModel subclass, got {model!r}")
    source = source_of(model)
    _require_resolved_annotations(model, source)
    fields = {}
    problems = [problem(source, f"fields.{name}", reason) for name, reason in _private_decisions(model)]
    for field_name, info in model.model_fields.items():
        try:
            fields[field_name] = _field_data(model, field_name, info, source)
        except _DeclarationError as error:
            problems.append(problem(source, f"fields.{field_name}", str(error)))
    bad_examples = _examples_problem(examples)
    examples = [] if bad_examples else list(examples)  # read once: a generator is read only once
    # An item of the wrong shape is named here (pydantic would only say it is not a mapping); the items
    # are then validated once every one has the right shape, so their indices stay the ones written.
    misshapen = [] if bad_examples else [(f"examples.{index}", reason) for index, example in enumerate(examples)
                                         if (reason := _example_shape_problem(example))]
    data = {
        "name": name if name is not None else _snake_case(model.__name__),
        "instructions": instructions if instructions is not None else _docstring(model),
        "answer_format": answer_format,
        "pin_first": pin_first,
        "max_fields_per_pass": max_fields_per_pass,
        "debias": debias,
        "catalog": catalog,
        "fields": fields,
        "examples": [] if bad_examples or misshapen else [_example_data(example) for example in examples],
        "max_input_tokens": max_input_tokens,
        "reading": reading,
    }
    if bad_examples:
        problems.append(problem(source, "examples", bad_examples))
    problems += [problem(source, where, reason) for where, reason in misshapen]
    try:
        rubric = Rubric.model_validate(data, context=DECLARATION)
    except ValidationError as error:
        # Every field's own problems are reported together. With some fields left out (they could not be
        # declared), the checks across fields wait: those fields would read as unknown to the others.
        problems += problems_from_validation(error, source=source, each_field_alone=bool(problems))
        raise RubricError(problems) from None
    if problems:
        raise RubricError(problems)
    problems = [problem(source, f"fields.{name}", reason) for name, reason in _unanswered_but_required(model, rubric)]
    if problems:
        raise RubricError(problems)
    return rubric


def _example_data(example: Any) -> Any:
    """A `(text, answers)` pair (any two-item sequence but a string) as the rubric's mapping; anything
    else is left for validation to name."""
    if isinstance(example, typing.Sequence) and not isinstance(example, (str, bytes)) and len(example) == 2:
        return {"text": example[0], "answers": example[1]}
    return example


def _example_shape_problem(example: Any) -> str | None:
    if isinstance(example, (Mapping, InContextExample)):
        return None
    if isinstance(example, typing.Sequence) and not isinstance(example, (str, bytes)):
        if len(example) == 2:
            return None
        return (f"expected a (text, {{field: answer}}) pair, got a {type(example).__name__} of {len(example)} "
                f"item{'s' if len(example) != 1 else ''}")
    return (f"expected a (text, {{field: answer}}) pair or a {{'text': ..., 'answers': ...}} mapping, "
            f"got {shown(example)}")


def _examples_problem(examples: Any) -> str | None:
    if isinstance(examples, (str, bytes, dict)) or not isinstance(examples, typing.Iterable):
        return (f"expected a list of (text, {{field: answer}}) pairs or {{'text': ..., 'answers': ...}} mappings, "
                f"got {type(examples).__name__}")
    return None


def _private_decisions(model: type[BaseModel]) -> list[tuple[str, str]]:
    """Names starting with '_' declared with `ask`/`derive`: pydantic makes them private attributes, not
    fields, so they would silently never be decided."""
    found = []
    for name in getattr(model, "__private_attributes__", {}):
        annotation = next((vars(klass).get("__annotations__", {}).get(name) for klass in model.__mro__
                           if name in vars(klass).get("__annotations__", {})), None)
        if isinstance(annotation, str):
            marked = "ask(" in annotation or "derive(" in annotation
        else:
            marked = any(isinstance(item, (Ask, Derive)) for item in getattr(annotation, "__metadata__", ()))
        if marked:
            found.append((name, f"{name!r} cannot be a decision field: pydantic treats names starting with '_' "
                                "as private attributes, so it would never be decided; rename it without the '_'"))
    return found


def _unanswered_but_required(model: type[BaseModel], rubric: Rubric) -> list[tuple[str, str]]:
    """Fields the engine can leave unanswered (None) through `options_by` that the class requires: the
    engine's None would be refused by the class at decision time. (A `when=` field is refused earlier.)"""
    found = []
    for name in rubric.optional_fields:
        spec = rubric.fields[name]
        info = model.model_fields[name]
        if spec.options_by is None or spec.when is not None:
            continue
        annotation, optional = _strip_optional(info.annotation)
        if optional and not info.is_required() and info.default is None:
            continue
        parent = rubric.fields[spec.options_by.field]
        missing = [label for label in parent.labels if label not in spec.options_by.options]
        if missing:
            cause = (f"its parent {spec.options_by.field!r} answers {listing(missing, repr, 5)}, which "
                     f"{'offers' if len(missing) == 1 else 'offer'} no options")
            remedy = f"; or give every answer of {spec.options_by.field!r} its options"
        else:
            cause = f"its parent {spec.options_by.field!r} is left unanswered"
            remedy = ""
        found.append((name, (
            f"a field with `options_by=` is left unanswered (None) when {cause}, so it must be Optional and "
            f"default to None: `{name}: Annotated[{_type_name(annotation)} | None, ask(..., options_by=...)] = None`"
            f"{remedy}"
        )))
    return sorted(found, key=lambda item: list(model.model_fields).index(item[0]))


class _DeclarationError(Exception):
    """A field that cannot become a decision; the caller adds the class and field name."""


def _require_resolved_annotations(model: type[BaseModel], source: str) -> None:
    """Refuse a class whose annotations name something not defined yet (a forward reference)."""
    if getattr(model, "__pydantic_complete__", True):
        return
    try:
        model.model_rebuild(raise_errors=True)
        return
    except PydanticUndefinedAnnotation as error:
        missing = error.name
    except Exception as error:  # noqa: BLE001 - pydantic's own reason, on one line
        raise rubric_error(source, "", f"pydantic cannot build the class: {str(error).splitlines()[0]}") from None
    field = next((name for name, info in model.model_fields.items() if _unresolved(info.annotation)), None)
    raise rubric_error(
        source, f"fields.{field}" if field else "",
        f"the type names {missing!r}, which is not defined where the class is decorated: define it above "
        "the class (the rubric is built when @decision runs)",
    )


def _unresolved(annotation: Any) -> bool:
    if isinstance(annotation, (str, typing.ForwardRef)):
        return True
    return any(_unresolved(arg) for arg in typing.get_args(annotation))


def _field_data(model: type[BaseModel], field_name: str, info: FieldInfo, source: str) -> dict[str, Any]:
    asks = [item for item in info.metadata if isinstance(item, Ask)]
    derives = [item for item in info.metadata if isinstance(item, Derive)]
    if derives and asks:
        raise _DeclarationError("a field is either asked of the model (ask(...)) or derived from other fields "
                                "(derive(...)), not both: keep one")
    if len(derives) > 1:
        raise _DeclarationError(f"{len(derives)} derive(...) markers: a derived field has one function")
    if derives:
        return _derived_data(field_name, info, derives[0], source)
    marker = _merged_asks(asks)
    question = marker.question if marker.question is not None else info.description
    if not question:
        raise _DeclarationError(
            "no question: write `Annotated[..., ask(\"...\")]` or `Field(description=\"...\")`"
        )
    if marker.problems:
        raise _DeclarationError("; ".join(marker.problems))
    annotation, optional = _strip_optional(info.annotation)
    data: dict[str, Any] = {"question": question, **_kind_data(annotation, info.metadata)}
    if marker.options:
        data["options"] = _describe_options(data, marker.options)
    if marker.after:
        data["after"] = list(marker.after)
    if marker.when is not None:
        if not optional or info.is_required() or info.default is not None:
            raise _DeclarationError(
                "a field with `when=` is left unanswered (None) when its condition is false, so it "
                f"must be Optional and default to None: `{field_name}: Annotated[{_type_name(annotation)} "
                "| None, ask(..., when=...)] = None`"
            )
        field, values = marker.when
        data["when"] = {"field": field, "values": list(values)}
    if marker.options_by is not None:
        parent, per_answer = marker.options_by
        labels = [label_of(answer) if isinstance(answer, (bool, int)) else answer for answer, _ in per_answer]
        repeated = next((label for i, label in enumerate(labels) if label in labels[:i]), None)
        if repeated is not None:
            raise _DeclarationError(f"ask(options_by=...) gives the options of {parent!r}'s answer "
                                    f"{shown(repeated)} twice (an Enum member and its value are one answer)")
        # Each answer's options as `{label, description}` items: the rubric refuses a repeated one
        # (a mapping would merge it) and reads a label named `label` as a label.
        data["options_by"] = {parent: {
            label_of(answer) if isinstance(answer, (bool, int)) else answer: [
                {"label": value, "description": description} for value, description in values
            ]
            for answer, values in per_answer
        }}
        # As YAML's `options_by` does, an option takes the first description given under any answer.
        for label, text in data["options"].items() if data["kind"] is FieldKind.CHOICE else ():
            if not text:
                data["options"][label] = next((d for _, values in per_answer for v, d in values
                                               if v == label and isinstance(d, str) and d), "")
    for key in ("marginalize", "debias", "catalog"):
        if getattr(marker, key) is not None:
            data[key] = getattr(marker, key)
    _check_aliases(model, field_name, info)
    # An Optional `options_by` field is answered None when its parent's answer offers no options.
    _check_constraints(model, info, data, conditional=marker.when is not None or (marker.options_by is not None and optional))
    return data


def _derived_data(field_name: str, info: FieldInfo, marker: Derive, source: str) -> dict[str, Any]:
    annotation, _ = _strip_optional(info.annotation)
    try:
        enum = annotation if isinstance(annotation, type) and issubclass(annotation, Enum) else None
        rule = CodeRule.of(marker.function, declared_in=source, enum=enum)
    except ValueError as error:
        raise _DeclarationError(str(error)) from None
    question = marker.question or info.description or f"computed from {', '.join(rule.reads)}"
    return {"question": question, **_kind_data(annotation, info.metadata), "derive": rule}


def _check_aliases(model: type[BaseModel], field_name: str, info: FieldInfo) -> None:
    """The engine validates answers keyed by field name; an alias would refuse every one of them."""
    if model.model_config.get("validate_by_name") or model.model_config.get("populate_by_name"):
        return
    for kind in ("alias", "validation_alias"):
        alias = getattr(info, kind)
        if alias is not None and alias != field_name:
            raise _DeclarationError(
                f"{kind}={shown(alias)} is not supported: answers are validated by field name; remove the "
                "alias or set `validate_by_name=True` in the class's model_config"
            )


# Metadata that runs the user's own code on a value (validators, serializers): allowed, since a
# validator refusing an answer is reported per input; every other item is a constraint the engine must honour.
_USER_CODE = (
    functional_validators.AfterValidator, functional_validators.BeforeValidator,
    functional_validators.PlainValidator, functional_validators.WrapValidator,
    functional_serializers.PlainSerializer, functional_serializers.WrapSerializer,
)


def _check_constraints(model: type[BaseModel], info: FieldInfo, data: dict[str, Any], *, conditional: bool) -> None:
    """Every answer the type allows must pass the field's own constraints (`multiple_of`,
    `max_length`, `pattern`, `strict`, ...), or the engine would pick answers the class then refuses."""
    constraints = [item for item in info.metadata if not isinstance(item, (Ask, Derive, *_USER_CODE))]
    annotation = Annotated[(info.annotation, *constraints)] if constraints else info.annotation  # type: ignore[valid-type]
    strict = model.model_config.get("strict")
    try:
        adapter = TypeAdapter(annotation, config=ConfigDict(strict=True) if strict else None)
    except Exception as error:  # noqa: BLE001 - pydantic's reason, on one line
        raise _DeclarationError(f"its type and constraints cannot be validated: {str(error).splitlines()[0]}") from None
    answers = _answers(data) + ([None] if conditional else [])
    for answer in answers:
        try:
            adapter.validate_python(answer)
        except ValidationError as error:
            reason = error.errors(include_url=False)[0]["msg"]
            raise _DeclarationError(
                f"the field's own constraints refuse the allowed answer {shown(answer)} ({reason}); the "
                "allowed answers come from the type alone, so drop the constraint or narrow the type"
            ) from None


def _answers(data: dict[str, Any]) -> list[Any]:
    """The answers the engine can give for a field, as the values it validates into the class."""
    if data["kind"] is FieldKind.BOOLEAN:
        return [True, False]
    if data["kind"] is FieldKind.SCORE:
        return list(range(data["min"], data["max"] + 1)) if data["max"] - data["min"] < 1000 else []
    return list(data["options"])


def _kind_data(annotation: Any, metadata: list[Any]) -> dict[str, Any]:
    """Kind, options and range of a field from its type alone."""
    if annotation is bool:
        return {"kind": FieldKind.BOOLEAN}
    if typing.get_origin(annotation) is Literal:
        values = typing.get_args(annotation)
        if all(isinstance(value, str) for value in values):
            return {"kind": FieldKind.CHOICE, "options": {value: "" for value in values}}
        raise _unsupported(annotation, "Literal values must all be strings; for numbers use a bounded int")
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        values = [member.value for member in annotation]
        if all(isinstance(value, str) for value in values):
            return {"kind": FieldKind.CHOICE, "options": {value: "" for value in values}}
        raise _unsupported(annotation, "Enum values must all be strings")
    if annotation is int:
        low, high = _int_bounds(metadata)
        if low is None or high is None:
            raise _unsupported(annotation, "an int score needs both bounds, e.g. `Field(ge=0, le=9)`")
        return {"kind": FieldKind.SCORE, "min": low, "max": high}
    raise _unsupported(annotation)


def _int_bounds(metadata: list[Any]) -> tuple[int | None, int | None]:
    low = high = None
    for item in metadata:
        if isinstance(item, annotated_types.Interval):
            item_low, item_high = _int_bounds(list(item))
            low = item_low if item_low is not None else low
            high = item_high if item_high is not None else high
        elif isinstance(item, annotated_types.Ge):
            low = _integer_bound("ge", item.ge)
        elif isinstance(item, annotated_types.Gt):
            low = _integer_bound("gt", item.gt) + 1
        elif isinstance(item, annotated_types.Le):
            high = _integer_bound("le", item.le)
        elif isinstance(item, annotated_types.Lt):
            high = _integer_bound("lt", item.lt) - 1
    return low, high


def _integer_bound(kind: str, bound: Any) -> int:
    # The coercion policy: an int field's bounds are integers (`ge=0.5` or `le=True` are refused).
    if isinstance(bound, bool) or not isinstance(bound, int):
        raise _DeclarationError(f"the bounds of an int score must be integers, got {kind}={shown(bound)}")
    return bound


def _describe_options(data: dict[str, Any], described: tuple[tuple[Any, str], ...]) -> dict[Any, str]:
    if data["kind"] is FieldKind.BOOLEAN:
        raise _DeclarationError("a boolean field takes no `options` descriptions")
    score = data["kind"] is FieldKind.SCORE
    options: dict[Any, str] = {} if score else dict(data["options"])
    for value, description in described:
        key = _plain(value)
        # The coercion policy: a score's levels are integers, a choice's labels are strings.
        if score:
            fits = isinstance(key, int) and not isinstance(key, bool) and data["min"] <= key <= data["max"]
        else:
            fits = isinstance(key, str) and key in options
        if not fits:
            allowed = f"integers {data['min']}..{data['max']}" if score else ", ".join(map(repr, list(options)[:20]))
            raise _DeclarationError(
                f"ask(options=...) describes {shown(value)}, which the type does not allow (allowed: {allowed})"
            )
        if not isinstance(description, str):
            raise _DeclarationError(f"the description of {shown(value)} must be a string, got {shown(description)}")
        options[key] = description
    if score:  # only the described levels; the others need no entry
        return {level: text for level, text in options.items() if text}
    return options


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = typing.get_args(annotation)
        rest = tuple(arg for arg in args if arg is not type(None))
        if len(rest) == 1:
            return rest[0], len(rest) != len(args)
    return annotation, False


def _unsupported(annotation: Any, reason: str = "") -> _DeclarationError:
    detail = f" ({reason})" if reason else ""
    return _DeclarationError(
        f"type {_type_name(annotation)} is not supported{detail}; supported: {SUPPORTED_TYPES}"
    )


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    return repr(annotation).replace("typing.", "")


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _docstring(model: type[BaseModel]) -> str:
    # pydantic gives every model BaseModel's docstring unless the class writes its own.
    doc = model.__dict__.get("__doc__")
    return inspect.cleandoc(doc) if doc else ""


def _snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Decision"
