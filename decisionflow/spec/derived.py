"""Derived fields: answers computed in code from decided fields, never asked of the model.

Decisions often end in a rule (`needs_human = severity >= 7 or legal_threat`). A derived field states
it once: in YAML as a small rule table (tests on fields, combined with `any`/`all`/`not`; the first
rule that holds gives the value, else `otherwise`) — no user string is ever evaluated — or in a class
as a Python function of the decided fields (`derive(lambda severity, legal_threat: ...)`).

    needs_human:
      kind: boolean
      question: Whether a person must look at it
      derive:
        rules:
          - if: {any: [{field: severity, at_least: 7}, {field: legal_threat, is: true}]}
            then: true
        otherwise: false

A derived field's value is computed as soon as the fields it reads are settled, and its probability
from their distributions (see `runtime.readout.derive`). Later fields can read it through `after=`/`when=`;
the model never sees it (it is not a key of the JSON object the model reads).
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Annotated, Any, Callable, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictInt,
    StrictStr,
    Tag,
    model_validator,
)

from .kinds import StrictValue, Value, is_one_of


class _Rule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class FieldTest(_Rule):
    """A test on one field's answer: exactly one of `is`, `in`, `at_least`, `at_most`."""

    field: StrictStr
    is_: StrictValue | None = Field(default=None, alias="is")
    in_: tuple[StrictValue, ...] | None = Field(default=None, alias="in", min_length=1)
    at_least: StrictInt | None = None
    at_most: StrictInt | None = None

    @model_validator(mode="after")
    def _one_test(self) -> FieldTest:
        given = [key for key in ("is_", "in_", "at_least", "at_most") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError("a test names one field and exactly one of `is`, `in`, `at_least`, `at_most`")
        return self

    def holds(self, answers: dict[str, Value | None]) -> bool:
        answer = answers.get(self.field)
        if answer is None:
            return False  # a field that was not asked (or abstained) passes no test
        if self.is_ is not None:
            return is_one_of(answer, (self.is_,))
        if self.in_ is not None:
            return is_one_of(answer, self.in_)
        if isinstance(answer, bool) or not isinstance(answer, int):
            return False
        return answer >= self.at_least if self.at_least is not None else answer <= self.at_most  # type: ignore[operator]

    def tests(self) -> list[FieldTest]:
        return [self]


class AnyOf(_Rule):
    any: tuple[Condition, ...] = Field(min_length=1)

    def holds(self, answers: dict[str, Value | None]) -> bool:
        return any(c.holds(answers) for c in self.any)

    def tests(self) -> list[FieldTest]:
        return [t for c in self.any for t in c.tests()]


class AllOf(_Rule):
    all: tuple[Condition, ...] = Field(min_length=1)

    def holds(self, answers: dict[str, Value | None]) -> bool:
        return all(c.holds(answers) for c in self.all)

    def tests(self) -> list[FieldTest]:
        return [t for c in self.all for t in c.tests()]


class Not(_Rule):
    not_: Condition = Field(alias="not")

    def holds(self, answers: dict[str, Value | None]) -> bool:
        return not self.not_.holds(answers)

    def tests(self) -> list[FieldTest]:
        return self.not_.tests()


def _condition_kind(value: Any) -> str:
    if isinstance(value, dict):
        for key in ("any", "all", "not"):
            if key in value:
                return key
    elif isinstance(value, BaseModel):
        return {AnyOf: "any", AllOf: "all", Not: "not"}.get(type(value), "test")
    return "test"


Condition = Annotated[
    Union[
        Annotated[FieldTest, Tag("test")], Annotated[AnyOf, Tag("any")], Annotated[AllOf, Tag("all")],
        Annotated[Not, Tag("not")],
    ],
    Discriminator(_condition_kind),
]


class Rule(_Rule):
    if_: Condition = Field(alias="if")
    then: StrictValue


class RuleTable(_Rule):
    """The first rule whose condition holds gives the value; `otherwise` when none does."""

    rules: tuple[Rule, ...] = Field(min_length=1)
    otherwise: StrictValue

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.field for rule in self.rules for t in rule.if_.tests()))

    @property
    def outputs(self) -> tuple[Value, ...]:
        return tuple(rule.then for rule in self.rules) + (self.otherwise,)

    def evaluate(self, answers: dict[str, Value | None]) -> Value:
        for rule in self.rules:
            if rule.if_.holds(answers):
                return rule.then
        return self.otherwise


class CodeRule(_Rule):
    """A Python function of the decided fields (its parameter names); class declarations only."""

    reads: tuple[StrictStr, ...] = Field(min_length=1)
    code: StrictStr
    """The function's name and a hash of its source: the rubric's identity changes when the code does."""
    function: Any = Field(default=None, exclude=True, repr=False)
    declared_in: StrictStr | None = Field(default=None, exclude=True, repr=False)
    """The class that declares the field, as errors name it (`package.module.Class`)."""
    enum: Any = Field(default=None, exclude=True, repr=False)
    """The field's Enum class, when it has one: the function may return its members (read as their values)."""

    @classmethod
    def of(cls, function: Callable[..., Any], declared_in: str | None = None, enum: Any = None) -> CodeRule:
        try:
            parameters = list(inspect.signature(function).parameters.values())
        except (TypeError, ValueError):
            raise ValueError("derive(): the function's parameters cannot be read; pass a function (or lambda) "
                             "whose parameters name the fields it reads") from None
        if any(p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in parameters):
            raise ValueError("derive(): the function's parameters must be plain names of the fields it reads")
        if not parameters:
            raise ValueError("derive(): the function takes no parameters; name the fields it reads as its "
                             "parameters, e.g. `derive(lambda severity: severity >= 7)`")
        try:
            source = inspect.getsource(function)
        except (OSError, TypeError):
            source = repr(getattr(function, "__code__", function))
        digest = hashlib.sha256(source.encode()).hexdigest()[:12]
        name = getattr(function, "__qualname__", repr(function))
        return cls(reads=tuple(p.name for p in parameters), code=f"{name}#{digest}", function=function,
                   declared_in=declared_in, enum=enum)

    @property
    def function_name(self) -> str:
        return self.code.rsplit("#", 1)[0]

    def evaluate(self, answers: dict[str, Value | None]) -> Any:
        value = self.function(**{name: answers.get(name) for name in self.reads})
        if self.enum is not None and isinstance(value, self.enum):
            return value.value  # a member of the field's own Enum is its value, as the type reads it
        return value


Derivation = Annotated[
    Union[Annotated[RuleTable, Tag("table")], Annotated[CodeRule, Tag("code")]],
    Discriminator(lambda v: "code" if isinstance(v, CodeRule) or (isinstance(v, dict) and "code" in v) else "table"),
]


for _model in (AnyOf, AllOf, Not, Rule):
    _model.model_rebuild()
