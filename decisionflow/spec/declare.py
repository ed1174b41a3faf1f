"""Decisions declared as pydantic classes: `@decision` on the class, `ask(...)` on each field.

The allowed answers always come from a field's type (`Literal[...]` of strings, a string `Enum`,
`bool`, or an `int` bounded by ge/le), never from a second list that could drift from it. The
`ask` marker lives in `Annotated` metadata, so it stays out of the JSON schema and leaves the field
required. The rubric is built when the class is decorated, so a bad declaration fails at import.
"""

from __future__ import annotations

import inspect
import re
import threading
import types
import typing
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal, TypeVar, Union, overload

import annotated_types
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from .problems import RubricError, problems_from_validation
from .rubric import AnswerFormat, FieldKind, FieldSpec, Rubric

ModelT = TypeVar("ModelT", bound=type[BaseModel])

_RUBRIC_ATTR = "__decisionflow_rubric__"
SUPPORTED_TYPES = (
    "Literal[...] of strings, an Enum subclass with string values, bool, "
    "or int bounded by ge/le (or gt/lt)"
)


@dataclass(frozen=True)
class Ask:
    """Per-field marker for `Annotated[...]` metadata; build it with `ask(...)`."""

    question: str | None = None
    options: tuple[tuple[Any, str], ...] = ()
    """(allowed value, description) pairs; values not listed get no description."""
    after: tuple[str, ...] = ()
    when: tuple[str, tuple[Any, ...]] | None = None
    """(field, values): ask this field only when that field's answer is one of the values."""


def ask(
    question: str | None = None,
    *,
    options: Mapping[Any, str] | None = None,
    after: Sequence[str] = (),
    when: Mapping[str, Any] | None = None,
) -> Ask:
    """Describe one decision field.

    `question` defaults to the field's `Field(description=...)`. `options` maps allowed values to
    descriptions (it never adds values: those come from the type). `after` names fields to decide
    first; `when={"department": ["billing", "returns"]}` asks the field only when an earlier answer
    is one of those values (the field must then be Optional with default None).
    """
    if question is not None and not isinstance(question, str):
        raise TypeError(f"ask(): the question must be a string, got {question!r}")
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"ask(options=...) must map each allowed value to a description, got {options!r}")
    after = (after,) if isinstance(after, str) else tuple(after)
    condition = None
    if when is not None:
        if not isinstance(when, Mapping) or len(when) != 1:
            raise ValueError(
                f"ask(when=...) must map exactly one field to its value(s), e.g. "
                f"when={{'department': ['billing', 'returns']}}; got {when!r}"
            )
        ((field, values),) = when.items()
        values = tuple(values) if isinstance(values, (list, tuple, set, frozenset)) else (values,)
        condition = (field, tuple(_plain(value) for value in values))
    return Ask(
        question=question,
        options=tuple((options or {}).items()),
        after=after,
        when=condition,
    )


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
) -> Any:
    """Mark a pydantic class as a decision; usable as `@decision` or `@decision(...)`.

    `name` defaults to the class name in snake_case, `instructions` to the class docstring.
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
        )
        setattr(model, _RUBRIC_ATTR, rubric)
        return model

    return apply if cls is None else apply(cls)


def is_decision(obj: Any) -> bool:
    """True for a class decorated with `@decision` (not for its undecorated subclasses)."""
    return isinstance(obj, type) and _RUBRIC_ATTR in vars(obj)


def rubric_of(obj: Any) -> Rubric:
    """The rubric of a decorated class (or of one of its instances); a `Rubric` passes through."""
    if isinstance(obj, Rubric):
        return obj
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
            if spec.when is None:
                definitions[spec.name] = (annotation, Field(description=spec.question))
            else:
                definitions[spec.name] = (annotation | None, Field(default=None, description=spec.question))
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


def _build_rubric(model: Any, *, name, instructions, answer_format, pin_first, max_fields_per_pass) -> Rubric:
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"@decision expects a pydantic BaseModel subclass, got {model!r}")
    source = f"{model.__module__}.{model.__qualname__}"
    fields = {}
    for field_name, info in model.model_fields.items():
        try:
            fields[field_name] = _field_data(field_name, info)
        except _DeclarationError as error:
            raise RubricError.one(source, f"fields.{field_name}", str(error)) from None
    data = {
        "name": name if name is not None else _snake_case(model.__name__),
        "instructions": instructions if instructions is not None else _docstring(model),
        "answer_format": answer_format,
        "pin_first": pin_first,
        "max_fields_per_pass": max_fields_per_pass,
        "fields": fields,
    }
    try:
        return Rubric.model_validate(data)
    except ValidationError as error:
        raise RubricError(problems_from_validation(error, source=source)) from None


class _DeclarationError(Exception):
    """A field that cannot become a decision; the caller adds the class and field name."""


def _field_data(field_name: str, info: FieldInfo) -> dict[str, Any]:
    marker = next((item for item in info.metadata if isinstance(item, Ask)), Ask())
    question = marker.question if marker.question is not None else info.description
    if not question:
        raise _DeclarationError(
            "no question: write `Annotated[..., ask(\"...\")]` or `Field(description=\"...\")`"
        )
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
    return data


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
            low = item.ge
        elif isinstance(item, annotated_types.Gt):
            low = item.gt + 1
        elif isinstance(item, annotated_types.Le):
            high = item.le
        elif isinstance(item, annotated_types.Lt):
            high = item.lt - 1
    return low, high


def _describe_options(data: dict[str, Any], described: tuple[tuple[Any, str], ...]) -> dict[str, str]:
    if data["kind"] is FieldKind.BOOLEAN:
        raise _DeclarationError("a boolean field takes no `options` descriptions")
    if data["kind"] is FieldKind.SCORE:
        levels = range(data["min"], data["max"] + 1)
        options = {str(level): "" for level in levels}
    else:
        options = dict(data["options"])
    for value, description in described:
        label = str(_plain(value))
        if label not in options or isinstance(_plain(value), bool):
            allowed = ", ".join(map(repr, options))
            raise _DeclarationError(
                f"ask(options=...) describes {value!r}, which the type does not allow (allowed: {allowed})"
            )
        if not isinstance(description, str):
            raise _DeclarationError(f"the description of {value!r} must be a string, got {description!r}")
        options[label] = description
    if data["kind"] is FieldKind.SCORE:
        options = {label: text for label, text in options.items() if text}
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
