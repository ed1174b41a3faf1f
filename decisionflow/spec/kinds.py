"""The kinds of things a rubric names: field kinds, answer formats, readout corrections, catalogs,
and the value types an answer may have. Kept apart from the rubric model so that the checks and the
later pipeline steps can name them without the model."""

from __future__ import annotations

from enum import Enum

from pydantic import StrictBool, StrictFloat, StrictInt, StrictStr

Value = str | bool | int
# The coercion policy: a value is read only as the type it is written in. No `"true"` or `1` for a
# boolean, no `"3"` or `3.0` for an integer, no number for a string.
StrictValue = StrictStr | StrictBool | StrictInt
JsonLiteral = StrictBool | StrictInt | StrictFloat | None
"""An answer written as JSON other than a string (`5`, `0.5`, `true`, `null`): what a JSON schema's enum
may hold besides strings (see `FieldSpec.literals`)."""


def is_one_of(value: object, allowed: object) -> bool:
    """Whether `value` is among `allowed` under the coercion policy: equal and of the same type (`True`
    equals `1` in Python, but `1` is not the answer `true`)."""
    return any(value == a and type(value) is type(a) for a in allowed)


class FieldKind(str, Enum):
    CHOICE = "choice"
    BOOLEAN = "boolean"
    SCORE = "score"


class AnswerFormat(str, Enum):
    LABELS = "labels"
    """The model answers with the literal label."""
    IDS = "ids"
    """The catalog shows `A) label: description`; the model answers with the short id."""


class Debias(str, Enum):
    """How a field's distribution is corrected for the model's prior before its answer is chosen."""

    NONE = "none"
    """The model's distribution as read."""
    CONTENT_FREE = "content_free"
    """Divided by the field's distribution for content-free inputs (contextual calibration)."""
    CONTENT_FREE_HALF = "content_free_half"
    """Divided by the square root of that content-free prior: half the correction, in log space."""
    DOMAIN = "domain"
    """Divided by the mean distribution over unlabelled in-domain inputs (fitted by `calibrate --unlabelled`)."""

    @property
    def strength(self) -> float:
        """The power the prior is raised to before dividing by it (0: no correction)."""
        if self is Debias.NONE:
            return 0.0
        return 0.5 if self is Debias.CONTENT_FREE_HALF else 1.0

    @property
    def uses_content_free_prior(self) -> bool:
        return self in (Debias.CONTENT_FREE, Debias.CONTENT_FREE_HALF)


class Catalog(str, Enum):
    """How much of a choice field's options the prompt's catalog lists (booleans and scores always list theirs)."""

    FULL = "full"
    """Every label, and each option's description."""
    LABELS = "labels"
    """Every label, without descriptions."""
    NONE = "none"
    """The key and its question only: the allowed answers are enforced by the trie alone."""
    AUTO = "auto"
    """Chosen by the number of options (see `compiler.prompt.catalog_for`)."""


class Reading(str, Enum):
    """How a rubric's fields are read: together in one JSON object, or each question on its own."""

    SHARED = "shared"
    """One prompt lists every field; the first is pinned, the rest follow in rounds as keys of one object."""
    INDEPENDENT = "independent"
    """Each field is a question of its own after the input, seeing neither the other questions nor their
    answers: its distribution is the same whichever questions are asked beside it (`compiler.independent`)."""
