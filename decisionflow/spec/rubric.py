"""The rubric: one validated, immutable description of a set of closed-set decisions.

Both declaration styles (decorated pydantic classes and YAML files) produce a plain mapping that is
validated by :class:`Rubric`. Everything downstream (planner, prompt, compiler, executor) reads only
this model, never the user's class or file.
"""

from __future__ import annotations

import re
import unicodedata
from enum import Enum
from functools import cached_property
from typing import Any, Iterator

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

MAX_SCORE_LEVELS = 101
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

Value = str | bool | int


class FieldKind(str, Enum):
    CHOICE = "choice"
    BOOLEAN = "boolean"
    SCORE = "score"


class AnswerFormat(str, Enum):
    LABELS = "labels"
    """The model answers with the literal label."""
    IDS = "ids"
    """The catalog shows `A) label: description`; the model answers with the short id."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


def normalise_label(label: str) -> str:
    """Labels equal under this mapping would be confusable for the model (case, separators, width)."""
    folded = unicodedata.normalize("NFKC", label).casefold()
    return re.sub(r"[\s_\-./]+", "", folded)


def label_of(value: Value) -> str:
    """An answer as a label: `true`/`false` for booleans, digits for scores, a choice as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Condition(_Frozen):
    """Ask a field only when an earlier field's answer is one of `values`."""

    field: str
    values: tuple[Value, ...] = Field(min_length=1)

    def holds(self, answers: dict[str, Value | None]) -> bool:
        answer = answers.get(self.field)
        return answer is not None and any(
            answer == value and type(answer) is type(value) for value in self.values
        )


class FieldSpec(_Frozen):
    """One closed-set question. `name` is the JSON key; it comes from the mapping key in `Rubric.fields`."""

    name: str = Field(pattern=NAME_PATTERN, exclude=True)
    kind: FieldKind
    question: str = Field(min_length=1)
    options: dict[str, str] | None = None
    """Choice fields: label -> description ("" when none). Order is kept."""
    min: int | None = None
    max: int | None = None
    after: tuple[str, ...] = ()
    when: Condition | None = None

    @field_validator("options", mode="before")
    @classmethod
    def _options_from_list(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, (list, tuple)):
            mapping: dict[str, str] = {}
            for index, item in enumerate(value):
                if isinstance(item, dict) and set(item) <= {"label", "description"} and "label" in item:
                    label, description = item["label"], item.get("description", "")
                elif isinstance(item, dict) and len(item) == 1:
                    (label, description), = item.items()
                else:
                    label, description = item, ""
                if not isinstance(label, str):
                    raise ValueError(f"option {index} must be a string label, got {label!r}")
                if label in mapping:
                    raise ValueError(f"duplicate option {label!r}")
                mapping[label] = "" if description is None else description
            return mapping
        if isinstance(value, dict):
            # Score levels are integers; YAML reads `0: none` with an int key.
            score = info.data.get("kind") is FieldKind.SCORE
            return {
                (str(k) if score and isinstance(k, int) and not isinstance(k, bool) else k): (
                    "" if v is None else v
                )
                for k, v in value.items()
            }
        return value

    @field_validator("after", mode="before")
    @classmethod
    def _after_from_name(cls, value: Any) -> Any:
        # `after: severity` means one field, not the letters of its name.
        return (value,) if isinstance(value, str) else value

    @field_validator("when", mode="before")
    @classmethod
    def _condition_from_mapping(cls, value: Any) -> Any:
        # Friendly form: `when: {department: billing}` or `when: {department: [billing, returns]}`.
        if isinstance(value, dict) and set(value) - {"field", "values"}:
            if len(value) != 1:
                raise ValueError("must name exactly one field, e.g. {department: billing}")
            (field, values), = value.items()
            values = list(values) if isinstance(values, (list, tuple)) else [values]
            return {"field": field, "values": values}
        return value

    @model_validator(mode="after")
    def _check_kind(self) -> FieldSpec:
        if self.kind is FieldKind.CHOICE:
            if self.options is None:
                raise ValueError("options: a choice field needs `options` (at least two labels)")
            if len(self.options) < 2:
                raise ValueError(
                    f"options: a choice field needs at least two options, got {len(self.options)}"
                )
            seen: dict[str, str] = {}
            for label in self.options:
                if not label.strip():
                    raise ValueError("options: option labels must not be empty")
                if label != label.strip() or "\n" in label:
                    raise ValueError(
                        f"options: option {label!r} has leading/trailing whitespace or a newline"
                    )
                key = normalise_label(label)
                if key in seen:
                    raise ValueError(
                        f"options: {seen[key]!r} and {label!r} are identical after normalisation "
                        "(case, spaces and separators ignored)"
                    )
                seen[key] = label
            self._check_no_bounds()
        elif self.kind is FieldKind.SCORE:
            if self.min is None or self.max is None:
                missing = "min" if self.min is None else "max"
                raise ValueError(f"{missing}: a score field needs integer `min` and `max`")
            if self.min >= self.max:
                raise ValueError(f"max: must be greater than min (min is {self.min}, max is {self.max})")
            if self.max - self.min + 1 > MAX_SCORE_LEVELS:
                raise ValueError(
                    f"max: range {self.min}..{self.max} has {self.max - self.min + 1} levels; "
                    f"at most {MAX_SCORE_LEVELS} can be enumerated"
                )
            if self.options is not None:
                levels = {str(v) for v in self.values}
                outside = [label for label in self.options if label not in levels]
                if outside:
                    raise ValueError(
                        f"options: score options may only describe levels between min and max "
                        f"({self.min}..{self.max}); {outside[0]!r} is not one"
                    )
        else:
            if self.options is not None:
                raise ValueError("options: a boolean field takes no `options`")
            self._check_no_bounds()
        if self.name in self.after:
            raise ValueError(f"after: field {self.name!r} cannot come after itself")
        if len(set(self.after)) != len(self.after):
            twice = next(dep for dep in self.after if self.after.count(dep) > 1)
            raise ValueError(f"after: lists {twice!r} twice")
        return self

    def _check_no_bounds(self) -> None:
        for key in ("min", "max"):
            if getattr(self, key) is not None:
                raise ValueError(f"{key}: `min`/`max` apply only to score fields, not {self.kind.value}")

    @property
    def values(self) -> tuple[Value, ...]:
        """Allowed answers as Python values, in catalog order."""
        if self.kind is FieldKind.BOOLEAN:
            return (True, False)
        if self.kind is FieldKind.SCORE:
            assert self.min is not None and self.max is not None
            return tuple(range(self.min, self.max + 1))
        assert self.options is not None
        return tuple(self.options)

    @property
    def labels(self) -> tuple[str, ...]:
        """Allowed answers as results and data files write them (`billing`, `true`, `7`)."""
        return tuple(label_of(value) for value in self.values)

    def description_of(self, value: Value) -> str:
        if self.options is None:
            return ""
        return self.options.get(str(value), "")

    @property
    def dependencies(self) -> tuple[str, ...]:
        """Fields that must be decided before this one (`after` plus the condition's field)."""
        deps = list(self.after)
        if self.when is not None and self.when.field not in deps:
            deps.append(self.when.field)
        return tuple(deps)


class Rubric(_Frozen):
    """A named, ordered set of decisions."""

    name: str = Field(pattern=NAME_PATTERN)
    instructions: str = ""
    fields: dict[str, FieldSpec] = Field(min_length=1)
    answer_format: AnswerFormat = AnswerFormat.LABELS
    pin_first: bool = True
    """Decide the first field alone and write its answer into the prompt before asking the rest."""
    max_fields_per_pass: int | None = Field(default=None, ge=1)
    """Memory budget: at most this many fields share one forward pass (None: no limit)."""

    @field_validator("fields", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, dict) and not value:
            raise ValueError("a rubric needs at least one field")
        return value

    @model_validator(mode="before")
    @classmethod
    def _name_fields(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("fields"), dict):
            fields = {}
            for key, spec in data["fields"].items():
                if isinstance(spec, dict) and "name" not in spec:
                    spec = {"name": key, **spec}
                fields[key] = spec
            data = {**data, "fields": fields}
        return data

    @model_validator(mode="after")
    def _check_references(self) -> Rubric:
        for key, spec in self.fields.items():
            if spec.name != key:
                raise ValueError(f"fields.{key}: field {key!r} is named {spec.name!r}")
            known = ", ".join(self.fields)
            for dep in spec.after:
                if dep not in self.fields:
                    raise ValueError(f"fields.{key}.after: unknown field {dep!r} (fields: {known})")
            if spec.when is not None:
                target = self.fields.get(spec.when.field)
                if target is None:
                    raise ValueError(
                        f"fields.{key}.when: unknown field {spec.when.field!r} (fields: {known})"
                    )
                if spec.when.field == key:
                    raise ValueError(f"fields.{key}.when: a field cannot depend on its own answer")
                allowed = target.values
                for value in spec.when.values:
                    if not any(value == a and type(value) is type(a) for a in allowed):
                        raise ValueError(
                            f"fields.{key}.when: {value!r} is not an allowed answer of "
                            f"{spec.when.field!r} (allowed: {', '.join(map(repr, allowed))})"
                        )
        cycle = find_cycle({k: s.dependencies for k, s in self.fields.items()})
        if cycle:
            raise ValueError(f"fields.{cycle[0]}: dependency cycle " + " -> ".join(cycle))
        return self

    def __iter__(self) -> Iterator[FieldSpec]:  # type: ignore[override]
        return iter(self.fields.values())

    def __len__(self) -> int:
        return len(self.fields)

    def field(self, name: str) -> FieldSpec:
        return self.fields[name]

    @cached_property
    def key(self) -> str:
        """A stable identity for caches keyed by rubric content (computed once per instance)."""
        return self.model_dump_json()


def find_cycle(edges: dict[str, tuple[str, ...]]) -> list[str] | None:
    """Return one dependency cycle as a closed path (a -> b -> a), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in edges.get(node, ()):
            if dep not in edges:
                continue
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in edges:
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None
