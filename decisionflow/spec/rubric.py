"""The rubric: one validated, immutable description of a set of closed-set decisions.

Both declaration styles (decorated pydantic classes and YAML files) produce a plain mapping that is
validated by :class:`Rubric`. Everything downstream (planner, prompt, compiler, executor) reads only
this model, never the user's class or file.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import unicodedata
from decimal import Decimal
from functools import cached_property
from typing import Any, Iterator

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .derived import Derivation
from .kinds import AnswerFormat, Catalog, Debias, FieldKind, JsonLiteral, Reading, StrictValue, Value, is_one_of
from .rubric_checks import RubricProblems, derivation_problems, find_cycle, may_be_unanswered
from .text import has_visible, listing, refused_character, shown, without_invisible

MAX_SCORE_LEVELS = 101
MAX_ANSWER_IDS = 26 + 26 * 26
"""Short ids the `ids` answer format has (A..Z, then AA..ZZ); a choice field may not have more options."""
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

DECLARATION = {"declaration": True}
"""Validation context for a rubric a person wrote (a YAML file, a decorated class), as opposed to one
rebuilt from `model_dump()`: a score's option keys must then be integers, not digit strings."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)


def normalise_label(label: str) -> str:
    """Labels equal under this mapping would be confusable for the model. A label written as a JSON number
    (`-1`, `0.5`, `1e3`) maps to its value's one canonical text, so numbers compare by value as JSON Schema
    compares them: `-1` and `1`, `1.5` and `15`, `-0.5` and `0.5` stay apart, `1` and `1.0` are one. Any
    other label is compared without case, spaces, the separators `_ - . /`, width and zero-width characters
    (`in_progress` and `In-Progress` are one)."""
    number = number_text(label)
    if number is not None:
        return number
    folded = unicodedata.normalize("NFKC", without_invisible(label)).casefold()
    return re.sub(r"[\s_\-./]+", "", folded)


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_PLAIN_EXPONENT = 64
"""Numbers within 10^±64 of their digits are written out in `number_text`; the rest keep an exponent, so a
short label such as `1e999999` never becomes a long text."""


def number_text(label: str) -> str | None:
    """The canonical text of a label written as a JSON number (`1.50`, `15e-1` and `1.5` give `1.5`; `-0`
    gives `0`), or None for any other label. Exact: no rounding to a float, so distinct numbers keep
    distinct texts however many digits they have."""
    if not _JSON_NUMBER.fullmatch(label):
        return None
    value = Decimal(label)
    if value.is_zero():
        return "0"
    negative, digit_tuple, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    kept = digits.rstrip("0")
    exponent += len(digits) - len(kept)
    sign = "-" if negative else ""
    if 0 <= exponent <= _PLAIN_EXPONENT:
        return f"{sign}{kept}{'0' * exponent}"
    if -_PLAIN_EXPONENT <= exponent < 0:
        point = len(kept) + exponent
        whole, fraction = (kept[:point], kept[point:]) if point > 0 else ("0", "0" * -point + kept)
        return f"{sign}{whole}.{fraction}"
    return f"{sign}{kept}e{exponent}"


def reserved_name_problem(name: str) -> str | None:
    """Why pydantic cannot use `name` as a field of the class answers are validated into, if it cannot."""
    if name.startswith("_"):
        return f"{name!r} cannot be a field name: pydantic treats names starting with '_' as private attributes"
    if name == "Config" or (name.startswith("model_") and hasattr(BaseModel, name)):
        return f"{name!r} cannot be a field name: pydantic models already use it ({name} is part of their API)"
    return None


def required_text(text: str, *, what: str) -> str:
    """`text` when it has something visible and nothing `text_problem` refuses; else a ValueError naming `what`."""
    if not has_visible(text):
        raise ValueError(f"{what} is empty (only spaces or invisible characters)")
    problem = text_problem(text, what=what)
    if problem:
        raise ValueError(problem)
    return text


def text_problem(text: str, *, what: str, multiline: bool = True) -> str | None:
    """Why a rubric text cannot be used as is (see `text.refused_character`), if it cannot."""
    refused = refused_character(text, multiline=multiline)
    if refused is None:
        return None
    index, reason = refused
    return f"{what} {shown(text, 60)} holds, at character {index}, {reason}"


def label_of(value: Value) -> str:
    """An answer as a label: `true`/`false` for booleans, digits for scores, a choice as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Condition(_Frozen):
    """Ask a field only when an earlier field's answer is one of `values`."""

    field: StrictStr
    values: tuple[StrictValue, ...] = Field(min_length=1)

    def holds(self, answers: dict[str, Value | None]) -> bool:
        answer = answers.get(self.field)
        return answer is not None and is_one_of(answer, self.values)


class OptionsBy(_Frozen):
    """A choice field's options per answer of its parent: `{field: parent, options: {answer: {label: description}}}`."""

    field: StrictStr
    options: dict[StrictStr, dict[StrictStr, StrictStr]] = Field(min_length=1)


class FieldSpec(_Frozen):
    """One closed-set question. `name` is the JSON key; it comes from the mapping key in `Rubric.fields`."""

    name: StrictStr = Field(pattern=NAME_PATTERN, exclude=True)
    kind: FieldKind
    question: StrictStr = Field(min_length=1)
    options: dict[StrictStr, StrictStr] | None = None
    """Choice fields: label -> description ("" when none). Order is kept."""
    min: StrictInt | None = None
    max: StrictInt | None = None
    after: tuple[StrictStr, ...] = ()
    when: Condition | None = None
    debias: Debias | None = None
    """Overrides the rubric's (and the engine's) readout correction for this field."""
    catalog: Catalog | None = None
    """Overrides the rubric's (and the engine's) catalog strategy for this field."""
    options_by: OptionsBy | None = None
    """Choice fields whose options depend on a parent's answer: the parent and, per parent answer,
    its options. `options` is then the union of them all, in order of first appearance."""
    marginalize: StrictInt | None = Field(default=None, ge=2)
    """Read this field under each of its parent's top-K answers in the same pass and report the
    mixture weighted by the parent's probabilities, instead of trusting the parent's single best."""
    derive: Derivation | None = None
    """A rule computing this field from decided fields (see `spec.derived`): it is never asked."""
    literals: dict[StrictStr, JsonLiteral] | None = Field(default=None, exclude_if=lambda value: value is None)
    """Choice fields answering JSON values other than strings (a JSON schema's integer, number, boolean
    or null enum members): option label -> that value, the label being the value's JSON text (`"5": 5`,
    `"null": null`). The catalog and the answer lines write such an option as its JSON (`5`, `null`), not
    as a quoted string; results still carry the label. Left out of the rubric's dump when None, so
    rubrics without it keep their identity."""

    @model_validator(mode="before")
    @classmethod
    def _union_of_options_by(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("options_by"), dict) and data.get("options") is None:
            by = data["options_by"]
            if set(by) == {"field", "options"}:
                by = {by["field"]: by["options"]}
            if len(by) == 1:
                (_, per_answer), = by.items()
                if isinstance(per_answer, dict):
                    readable = {}
                    for answer, options in per_answer.items():
                        try:
                            readable[answer] = dict(_option_items(options))
                        except RubricProblems:
                            continue  # reported where it is written, by `_options_by_mapping`
                    data = {**data, "options": options_by_union(readable)}
        return data

    @field_validator("options_by", mode="before")
    @classmethod
    def _options_by_mapping(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        if set(value) == {"field", "options"}:
            field, per_answer, at = value["field"], value["options"], "options"
        else:
            if len(value) != 1:
                raise ValueError("must name exactly one parent field, e.g. {domain: {banking: [...], travel: [...]}}")
            (field, per_answer), = value.items()
            at = field
        if not isinstance(per_answer, dict):
            raise ValueError(f"{shown(field)} must map each of its answers to that answer's options")
        _check_answer_keys(per_answer, field, at=at)
        options: dict[Any, dict[str, str]] = {}
        problems: list[str] = []
        for answer, listed in per_answer.items():
            try:
                options[answer] = dict(_option_items(listed, at=_location(at, answer)))
            except RubricProblems as error:
                problems += error.messages
        if problems:
            raise RubricProblems(problems)
        return {"field": field, "options": options}

    @field_validator("name")
    @classmethod
    def _usable_name(cls, name: str) -> str:
        problem = reserved_name_problem(name)
        if problem:
            raise ValueError(problem)
        return name

    @field_validator("question")
    @classmethod
    def _readable_question(cls, question: str) -> str:
        return required_text(question, what="the question")

    @field_validator("options", mode="before")
    @classmethod
    def _options_from_list(cls, value: Any, info: ValidationInfo) -> Any:
        score = info.data.get("kind") is FieldKind.SCORE
        declared = bool(info.context and info.context.get("declaration"))
        if isinstance(value, (list, tuple)):
            pairs: list[tuple[Any, Any]] = []
            for index, item in enumerate(value):
                if isinstance(item, dict) and set(item) <= {"label", "description"} and "label" in item:
                    label, description = item["label"], item.get("description", "")
                elif isinstance(item, dict) and len(item) == 1:
                    (label, description), = item.items()
                elif isinstance(item, dict):
                    raise ValueError(
                        f"option {index} must be a label, `{{label: description}}` or "
                        f"`{{label: ..., description: ...}}`; got a mapping with keys {shown(list(item))}"
                    )
                else:
                    label, description = item, ""
                if score:
                    pairs.append((label, description))
                    continue
                if not isinstance(label, str):
                    raise ValueError(f"option {index} must be a string label (quote it), got {shown(label)}")
                if label in (known for known, _ in pairs):
                    raise ValueError(f"duplicate option {shown(label)}")
                pairs.append((label, "" if description is None else description))
            return _score_options(pairs, integer_keys_only=declared) if score else dict(pairs)
        if isinstance(value, dict):
            if score:
                return _score_options(list(value.items()), integer_keys_only=declared)
            return {k: "" if v is None else v for k, v in value.items()}
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
        # Only the two keys together are the explicit form, so fields named `field` or `values` work.
        if isinstance(value, dict) and set(value) != {"field", "values"}:
            if len(value) != 1:
                raise ValueError("must name exactly one field, e.g. {department: billing}")
            (field, values), = value.items()
            values = list(values) if isinstance(values, (list, tuple)) else [values]
            return {"field": field, "values": values}
        if isinstance(value, dict) and not isinstance(value["values"], (list, tuple)):
            # The long form takes a single value without a list too, as the short form does.
            return {**value, "values": [value["values"]]}
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
                problem = _label_problem(label)
                if problem:
                    raise ValueError(f"options: {problem}")
                key = normalise_label(label)
                if key in seen:
                    if number_text(seen[key]) is not None and number_text(label) is not None:
                        raise ValueError(f"options: {shown(seen[key])} and {shown(label)} are the same number")
                    raise ValueError(
                        f"options: {shown(seen[key])} and {shown(label)} are identical after normalisation "
                        "(case, spaces, separators and zero-width characters ignored)"
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
                        f"({self.min}..{self.max}); {shown(outside[0])} is not one"
                    )
        else:
            if self.options is not None:
                raise ValueError("options: a boolean field takes no `options`")
            self._check_no_bounds()
        self._check_descriptions()
        self._check_literals()
        self._check_orchestration()
        if self.name in self.after:
            raise ValueError(f"after: field {self.name!r} cannot come after itself")
        listed: set[str] = set()
        for dep in self.after:
            if dep in listed:
                raise ValueError(f"after: lists {shown(dep)} twice")
            listed.add(dep)
        return self

    def _check_orchestration(self) -> None:
        if self.derive is not None:
            for key in ("after", "when", "marginalize", "options_by"):
                if getattr(self, key):
                    raise ValueError(f"{key}: a derived field is computed from the fields its rule reads; "
                                     f"it takes no `{key}`")
        if self.options_by is not None:
            if self.kind is not FieldKind.CHOICE:
                raise ValueError("options_by: only a choice field can take its options from a parent's answer")
            union = set(self.options or {})
            offered = {label for options in self.options_by.options.values() for label in options}
            if offered != union:
                stray = sorted(offered - union) or sorted(union - offered)
                raise ValueError(f"options_by: the options must be exactly those offered under some answer of "
                                 f"{self.options_by.field!r}; {shown(stray[0])} is not")
            for answer, options in self.options_by.options.items():
                if len(options) < 2:
                    raise ValueError(f"options_by.{self.options_by.field}: the answer {shown(answer)} needs at "
                                     f"least two options, got {len(options)}")
        if self.marginalize is not None and self.parent is None:
            raise ValueError("marginalize: needs exactly one parent to marginalise over (a `when` field, "
                             "`options_by`, or a single `after` field)")

    @property
    def parent(self) -> str | None:
        """The one field this field's answer is conditioned on, for `marginalize`: its `options_by` or
        `when` field, else its single `after` field (None when that is not one field)."""
        if self.options_by is not None:
            return self.options_by.field
        if self.when is not None:
            return self.when.field
        return self.after[0] if len(self.after) == 1 else None

    def options_for(self, parent_answer: Value | None) -> dict[str, str] | None:
        """The options offered when the parent answered `parent_answer` (all of them without `options_by`;
        None when that answer offers none: the field is then not asked)."""
        if self.options_by is None:
            return self.options
        return self.options_for_label(label_of(parent_answer)) if parent_answer is not None else None

    def options_for_label(self, parent_label: str) -> dict[str, str] | None:
        assert self.options_by is not None
        subset = self.options_by.options.get(parent_label)
        return None if subset is None else {label: text or (self.options or {}).get(label, "") for label, text in subset.items()}

    def _check_descriptions(self) -> None:
        for label, description in (self.options or {}).items():
            problem = text_problem(description, what=f"the description of {shown(label, 40)}")
            if problem:
                raise ValueError(f"options.{label}: {problem}" if label.isidentifier() else f"options: {problem}")

    def _check_literals(self) -> None:
        if self.literals is None:
            return
        if self.kind is not FieldKind.CHOICE:
            raise ValueError("literals: only a choice field's options can be written as JSON values")
        for label, value in self.literals.items():
            if label not in (self.options or {}):
                raise ValueError(f"literals: {shown(label)} is not one of the field's options")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"literals.{label}: {value} is not a JSON number")
            if json.dumps(value) != label:
                raise ValueError(f"literals: the option {shown(label)} must be labelled {json.dumps(value)!r}, "
                                 f"the JSON text of its value {shown(value)}")

    def literal_of(self, label: str) -> str | None:
        """The JSON text an option is written as when it is not a string (`5`, `null`), else None."""
        return label if self.literals is not None and label in self.literals else None

    def json_value(self, value: Value) -> Any:
        """An answer as its JSON value: a literal option's own value (`5`, `None`), else the answer itself."""
        if self.literals is not None and isinstance(value, str) and value in self.literals:
            return self.literals[value]
        return value

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
        """Fields that must be settled before this one: `after`, the condition's field, the `options_by`
        parent, and the fields a derived field's rule reads."""
        deps = list(self.after)
        extra = [self.when.field] if self.when is not None else []
        extra += [self.options_by.field] if self.options_by is not None else []
        extra += list(self.derive.reads) if self.derive is not None else []
        for dep in extra:
            if dep not in deps:
                deps.append(dep)
        return tuple(deps)


class InContextExample(_Frozen):
    """A worked example written into the rubric's prompt before every input: an input text and the
    answers the model should see given for it, as an earlier (user, assistant) turn. It belongs to the
    cached prefix, so it costs a request only attention (docs/fitting.md measures when it helps)."""

    text: StrictStr
    answers: dict[StrictStr, StrictValue] = Field(min_length=1)
    """Field name to answer, typed as the field's answers are (`billing`, `true`, `7`); a field left out
    is not written."""

    @field_validator("text")
    @classmethod
    def _readable_text(cls, text: str) -> str:
        return required_text(text, what="the example's text")


class Rubric(_Frozen):
    """A named, ordered set of decisions."""

    name: StrictStr = Field(pattern=NAME_PATTERN)
    instructions: StrictStr = ""
    fields: dict[StrictStr, FieldSpec] = Field(min_length=1)
    answer_format: AnswerFormat = AnswerFormat.LABELS
    pin_first: StrictBool = True
    """Decide the first field alone and write its answer into the prompt before asking the rest."""
    max_fields_per_pass: StrictInt | None = Field(default=None, ge=1)
    """Memory budget: at most this many fields share one forward pass (None: no limit)."""
    debias: Debias | None = None
    """The readout correction for every field (None: the engine's default); a field may override it."""
    catalog: Catalog | None = None
    """The catalog strategy for every choice field (None: the engine's default); a field may override it."""
    examples: tuple[InContextExample, ...] = ()
    """In-context examples, written in order into the prompt's prefix as earlier turns (none by default)."""
    input_turns: StrictBool = Field(default=False, exclude_if=lambda value: value is False)
    """The input is a conversation told in the chat template's own turns after the rubric's system turn
    (as Chat Completions requests send it; a plain text is one user turn), instead of data to judge shown
    in one user turn after `Input:`. Left out of the rubric's dump when False."""
    reading: Reading = Field(default=Reading.SHARED, exclude_if=lambda value: value is Reading.SHARED)
    """`shared` (the default): one prompt lists every field and reads them as keys of one object, in
    rounds. `independent`: each field is a question of its own after the input, whose answer does not
    depend on the other fields (no `after`, `when`, `options_by`, `marginalize` or examples then).
    Left out of the rubric's dump when shared."""
    max_input_tokens: StrictInt | None = Field(default=None, ge=1, exclude_if=lambda value: value is None)
    """The model reads at most this many tokens of each input: a longer one is cut at a token boundary
    and marked `[cut]` (every pass, fitting included, reads the same cut; a head's words still read the
    whole text). None (the default): an input is read whole, and one longer than the model's context is
    refused. Left out of the rubric's dump when None."""

    @field_validator("instructions")
    @classmethod
    def _readable_instructions(cls, instructions: str) -> str:
        problem = text_problem(instructions, what="the instructions")
        if problem:
            raise ValueError(problem)
        return instructions

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
    def _check_across_fields(self) -> Rubric:
        """The checks that span fields, run once every field on its own is valid; every problem they
        find is reported (one `RubricProblems`), not only the first."""
        problems: list[str] = []
        known = listing(self.fields, str)
        for key, spec in self.fields.items():
            problems += self._reference_problems(key, spec, known)
            problems += self._orchestration_problems(key, spec)
            problems += self._answer_id_problems(key, spec)
        for index, example in enumerate(self.examples):
            problems += self._example_problems(index, example, known)
        cycle = find_cycle({k: s.dependencies for k, s in self.fields.items()})
        if cycle:
            problems.append(f"fields.{cycle[0]}: dependency cycle " + " -> ".join(cycle))
        if all(spec.derive is not None for spec in self):
            problems.append("fields: every field is derived; at least one must be asked of the model")
        if self.reading is Reading.INDEPENDENT:
            problems += self._independence_problems()
        if self.max_input_tokens is not None and self.input_turns:
            problems.append("max_input_tokens: a rubric that reads a conversation's own turns reads them whole; "
                            "leave max_input_tokens out")
        if problems:
            raise RubricProblems(problems)
        return self

    def _independence_problems(self) -> Iterator[str]:
        """What an independent reading cannot honour: an asked field that reads another field's answer,
        and whatever is written into one prompt shared by every field."""
        for key, spec in self.fields.items():
            if spec.derive is not None:
                continue  # computed in code from the answers: the questions stay independent
            for setting, given in (("after", spec.after), ("when", spec.when), ("options_by", spec.options_by),
                                   ("marginalize", spec.marginalize)):
                if given:
                    yield (f"fields.{key}.{setting}: fields of a rubric read independently (`reading: independent`) "
                           "do not read each other's answers; remove it or read the rubric shared")
        if self.examples:
            yield "examples: a rubric read independently takes no in-context examples"
        if self.input_turns:
            yield "input_turns: a rubric read independently reads a conversation as a transcript (leave input_turns out)"

    def _example_problems(self, index: int, example: InContextExample, known: str) -> Iterator[str]:
        """An example answers fields the model is asked, each with one of its allowed answers."""
        for name, value in example.answers.items():
            where = f"examples.{index}.answers.{name}"
            spec = self.fields.get(name)
            if spec is None:
                yield f"examples.{index}.answers: {self._unknown_field(name, known)}"
            elif spec.derive is not None:
                yield f"{where}: {name!r} is derived in code, not answered by the model; leave it out"
            elif (problem := _not_an_answer(value, name, spec.values)) is not None:
                yield f"{where}: {problem}"
            else:
                yield from self._example_dependency_problems(where, name, value, example.answers)

    def _example_dependency_problems(self, where: str, name: str, value: Any, answers: dict[str, Any]) -> Iterator[str]:
        """An example answers a `when` or `options_by` field only as the engine could: with the field it
        depends on answered, and under an answer of it that asks this field and offers this answer."""
        spec = self.fields[name]
        for parent in ([spec.when.field] if spec.when else []) + ([spec.options_by.field] if spec.options_by else []):
            if parent not in self.fields:
                continue  # reported as an unknown field
            if parent not in answers:
                yield f"{where}: {name!r} depends on {parent!r}, which the example does not answer"
                return
        if spec.when is not None and spec.when.field in self.fields:
            given = answers[spec.when.field]
            if not spec.when.holds(answers):
                yield (f"{where}: {name!r} is asked only when {spec.when.field!r} is one of "
                       f"{listing(spec.when.values, repr)}; the example answers {spec.when.field!r} with {shown(given)}")
        if spec.options_by is not None and spec.options_by.field in self.fields:
            given = answers[spec.options_by.field]
            offered = spec.options_by.options.get(label_of(given), {})
            if label_of(value) not in offered:
                yield (f"{where}: {shown(value)} is not offered when {spec.options_by.field!r} is {shown(given)} "
                       f"(offered: {listing(offered, repr) or 'none'})")

    def _answer_id_problems(self, key: str, spec: FieldSpec) -> Iterator[str]:
        if self.answer_format is not AnswerFormat.IDS:
            return
        if spec.options_by is not None:
            yield (f"fields.{key}.options_by: options that depend on a parent's answer need "
                   "`answer_format: labels` (an id would name a different option per answer)")
        if spec.kind is FieldKind.CHOICE and len(spec.options or {}) > MAX_ANSWER_IDS:
            yield (f"fields.{key}.options: {len(spec.options or {})} options, but `answer_format: ids` "
                   f"has only {MAX_ANSWER_IDS} short ids (A..Z, AA..ZZ); use `answer_format: labels` "
                   "or fewer options")

    def _unknown_field(self, name: Any, known: str) -> str:
        """`unknown field 'teem'; did you mean 'team'? (fields: ...)`, the hint where a field is close."""
        close = difflib.get_close_matches(name, list(self.fields), n=1) if isinstance(name, str) else []
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown field {shown(name)}{hint} (fields: {known})"

    def _reference_problems(self, key: str, spec: FieldSpec, known: str) -> Iterator[str]:
        """Names of fields the rubric lacks (`known` lists those it has), or of the field itself, and
        `when` values their field cannot give."""
        if spec.name != key:
            yield f"fields.{key}: field {shown(key)} is named {shown(spec.name)}"
        for dep in spec.after:
            if dep not in self.fields:
                yield f"fields.{key}.after: {self._unknown_field(dep, known)}"
        if spec.when is not None:
            target = self.fields.get(spec.when.field)
            if target is None:
                hint = ""
                if spec.when.field in ("field", "values"):
                    hint = ("; to write the long form give both `field` and `values`, e.g. "
                            "{field: department, values: [billing]}")
                yield f"fields.{key}.when: {self._unknown_field(spec.when.field, known)}{hint}"
            elif spec.when.field == key:
                yield f"fields.{key}.when: a field cannot depend on its own answer"
            else:
                allowed = target.values
                for value in spec.when.values:
                    problem = _not_an_answer(value, spec.when.field, allowed)
                    if problem is not None:
                        yield f"fields.{key}.when: {problem}"
        reported: set[tuple[str, str]] = set()
        for dep, where in ([(spec.options_by.field, "options_by")] if spec.options_by else []) + [
            (read, "derive") for read in (spec.derive.reads if spec.derive else ())
        ]:
            if (dep, where) in reported:
                continue
            reported.add((dep, where))
            if dep not in self.fields:
                yield f"fields.{key}.{where}: {self._unknown_field(dep, known)}"
            elif dep == key:
                yield f"fields.{key}.{where}: a field cannot depend on its own answer"

    def _orchestration_problems(self, key: str, spec: FieldSpec) -> Iterator[str]:
        """`options_by` answers, `marginalize` and derivation rules against the fields they name; a check
        that needs a field the reference checks refuse (unknown, or the field itself) is skipped."""
        if spec.options_by is not None and self._usable(spec.options_by.field, key):
            parent = self.fields[spec.options_by.field]
            answers = set(parent.labels)
            for answer in spec.options_by.options:
                if answer not in answers:
                    yield (f"fields.{key}.options_by.{spec.options_by.field}: {shown(answer)} is not an answer of "
                           f"{spec.options_by.field!r} (answers: {listing(parent.labels, str)})")
        if spec.marginalize is not None and spec.parent is not None and self._usable(spec.parent, key):
            parent = self.fields[spec.parent]
            if parent.derive is not None:
                yield f"fields.{key}.marginalize: its parent {spec.parent!r} is derived, not read from the model"
            elif spec.marginalize > len(parent.values):
                yield (f"fields.{key}.marginalize: {spec.marginalize} hypotheses, but {spec.parent!r} has "
                       f"only {len(parent.values)} answers")
        if spec.derive is not None:
            yield from derivation_problems(key, spec, self.fields)

    def _usable(self, name: str, key: str) -> bool:
        return name in self.fields and name != key

    def derived_fields(self) -> tuple[str, ...]:
        return tuple(name for name, spec in self.fields.items() if spec.derive is not None)

    @cached_property
    def optional_fields(self) -> frozenset[str]:
        """Fields that can be left unanswered (None): a `when` field, and an `options_by` field whose
        parent can give an answer that offers no options, or can be left unanswered itself."""
        memo: dict[str, bool] = {}
        return frozenset(name for name in self.fields if may_be_unanswered(self.fields, name, memo))

    def __iter__(self) -> Iterator[FieldSpec]:  # type: ignore[override]
        return iter(self.fields.values())

    def __len__(self) -> int:
        return len(self.fields)

    def field(self, name: str) -> FieldSpec:
        return self.fields[name]

    @cached_property
    def key(self) -> str:
        """A stable identity for caches keyed by rubric content (computed once per instance). A rubric
        without in-context examples keys as it did before rubrics could carry them, so heads fitted
        then still load."""
        return self.model_dump_json(exclude={"examples"} if not self.examples else None)


def _not_an_answer(value: Any, name: str, allowed: tuple[Value, ...]) -> str | None:
    """Why `value` is not one of field `name`'s `allowed` answers, or None. The coercion policy: `"true"`
    or `1` is not the answer `true`, so an answer of the same text but another type says how to write it."""
    if is_one_of(value, allowed):
        return None
    same_text = next((a for a in allowed if label_of(a) == label_of(value)), None)
    hint = "" if same_text is None else f"; the answer is {_written(same_text)}, of another type"
    return f"{shown(value)} is not an allowed answer of {name!r} (allowed: {listing(allowed, _written)}){hint}"


def _check_answer_keys(per_answer: dict[Any, Any], parent: Any, *, at: Any) -> None:
    """`options_by` keys are the parent's answers written as labels (strings): `'true'`, `'3'`. Each key
    that is not is located where it was written (`options_by.flag.true`), not at the model's own path."""
    problems = []
    for key in per_answer:
        if isinstance(key, str):
            continue
        written = _written(key) if isinstance(key, (bool, int)) else None
        message = (f"key must be a string, got {shown(key)}: `options_by` names each answer of {shown(parent)} "
                   "by its label" + (f"; write it quoted, '{written}'" if written is not None else ""))
        places = [f"{at}.{written}" if written is not None else None, at]
        location = next((p for p in places if isinstance(p, str) and _DOTTED.fullmatch(p)), None)
        problems.append(f"{location}: {message}" if location else message)
    if problems:
        raise RubricProblems(problems)


_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.\w+)*")


def _written(value: Value) -> str:
    """An answer as YAML writes it: `true`, `3`, `'billing'`."""
    return label_of(value) if isinstance(value, (bool, int)) else repr(value)


def _score_options(options: list[tuple[Any, Any]], *, integer_keys_only: bool) -> dict[Any, Any]:
    """A score's option keys as labels ("0", "9"): a declaration writes its levels as integers, in a
    mapping or a list alike (`model_dump` writes them as digit strings, which it reads back)."""
    labels: dict[Any, Any] = {}
    for key, description in options:
        if isinstance(key, int) and not isinstance(key, bool):
            label = str(key)
        elif integer_keys_only or not (isinstance(key, str) and key == str(_as_int(key))):
            level = _as_int(key) if isinstance(key, str) else None
            hint = f" (write {level}, without quotes)" if level is not None else ""
            raise ValueError(f"a score's option keys are its levels, written as integers; got {shown(key)}{hint}")
        else:
            label = key
        if label in labels:
            raise ValueError(f"level {label} is described twice")
        labels[label] = "" if description is None else description
    return labels


def options_by_union(per_answer: dict[Any, dict[str, str]]) -> dict[str, str]:
    """The options of an `options_by` field written without `options`: every answer's options in order
    of first appearance, each with the first description given for it."""
    union: dict[str, str] = {}
    for options in per_answer.values():
        for label, description in options.items():
            if label not in union or not union[label]:
                union[label] = description
    return union


def _location(*parts: Any) -> str | None:
    """A dotted location for a message's prefix, or None when a part cannot be written in one."""
    text = ".".join(str(part) for part in parts)
    return text if all(isinstance(p, (str, int)) for p in parts) and _DOTTED.fullmatch(text) else None


def _option_items(options: Any, at: str | None = None) -> list[tuple[str, str]]:
    """(label, description) pairs of one `options_by` answer's options, in the forms `options` takes: a
    list of labels, `{label: description}` or `{label: ..., description: ...}` items, or a mapping of
    label to description. Raises `RubricProblems`, each problem located under `at` where it can be."""

    def fail(index: Any, message: str) -> RubricProblems:
        where = _location(at, index) if at is not None and index is not None else None
        where = where or at
        return RubricProblems([f"{where}: {message}" if where else message])

    if isinstance(options, dict):
        items = list(options.items())
        pairs_from_list = False
    elif isinstance(options, (list, tuple)):
        items = []
        for index, item in enumerate(options):
            if isinstance(item, dict) and set(item) <= {"label", "description"} and "label" in item:
                items.append((item["label"], item.get("description")))
            elif isinstance(item, dict) and len(item) == 1:
                items.append(next(iter(item.items())))
            elif isinstance(item, dict):
                raise fail(index, f"option {index} must be a label, `{{label: description}}` or "
                                  f"`{{label: ..., description: ...}}`; got a mapping with keys {shown(list(item))}")
            elif isinstance(item, (list, tuple)):
                raise fail(index, f"option {index} must be a label, `{{label: description}}` or "
                                  f"`{{label: ..., description: ...}}`; got a list {shown(item)}")
            else:
                items.append((item, None))
        pairs_from_list = True
    else:
        raise fail(None, f"must be a list of labels or a mapping of label to description, got {shown(options)}")
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for index, (label, description) in enumerate(items):
        place = index if pairs_from_list else (label if isinstance(label, str) else None)
        if not isinstance(label, str):
            quote = " (quote it)" if isinstance(label, (bool, int, float)) else ""
            raise fail(place, f"option {index if pairs_from_list else shown(label)} must be a string label"
                              f"{quote}, got {shown(label)}")
        if label in seen:
            raise fail(place, f"duplicate option {shown(label)}")
        seen.add(label)
        if description is not None and not isinstance(description, str):
            raise fail(place, f"the description of {shown(label)} must be a string, got {shown(description)}")
        pairs.append((label, description or ""))
    return pairs


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _label_problem(label: str) -> str | None:
    if not has_visible(label):
        return f"option {shown(label)} is empty (only spaces or invisible characters)"
    if label != label.strip():
        return f"option {shown(label)} has leading or trailing whitespace"
    return text_problem(label, what="option", multiline=False)
