"""Shared pieces of the generated corpora: what a well-formed refusal looks like, and the generators
of valid rubrics the defects are applied to.

The oracles here restate the policy of `docs/input-policy.md` in their own words (which characters
are refused, what counts as visible, which names pydantic cannot use), so a corpus fails when the
code and the written policy drift apart.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from decisionflow.errors import Problem, RubricError
from decisionflow.spec.rubric import normalise_label

CORPUS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
"""Enough examples per property to keep finding new cases on every run, few enough that all corpora
together stay well under two minutes on two cores."""

# --- what a refusal must look like ---------------------------------------------------------------

_CRASH_TEXT = re.compile(r"Traceback|^\s*File \"|\b[A-Z]\w*(Error|Exception): |could not determine a constructor|<unicode string>")
_WHOLE_FILE_MESSAGES = (
    "file not found", "cannot read file", "expected a mapping", "the file has", "the text has",
    "the file starts with", "expected the rubric's YAML text",
)


def check_refusal(error: RubricError, source: str, *, user_code: bool = False) -> list[Problem]:
    """Every problem is one printable line `source: location: message`, located, and not an exception's
    own text (unless it reports what the user's own module raised: `importing 'x' failed: ValueError: ...`)."""
    assert isinstance(error, RubricError)
    assert error.problems, "a RubricError without problems"
    for problem in error.problems:
        line = str(problem)
        assert line.isprintable(), f"not one printable line: {line!r}"
        assert line.startswith(f"{source}: "), f"does not name its source: {line!r}"
        assert problem.location or problem.message.startswith(_WHOLE_FILE_MESSAGES), f"no location: {line!r}"
        message = problem.message.partition(" failed: ")[0] if user_code else problem.message
        assert not _CRASH_TEXT.search(message), f"an exception's own text: {line!r}"
        assert len(line) < 1000, f"an unreadably long line ({len(line)} characters)"
    return error.problems


def located_at(problems: list[Problem], *prefixes: str) -> bool:
    return any(p.location == prefix or p.location.startswith(prefix + ".") for p in problems for prefix in prefixes)


# --- the policy, restated ------------------------------------------------------------------------

INVISIBLE_CATEGORIES = {"Cc", "Cf", "Zs", "Zl", "Zp", "Cn"}
BLANK = {0x034F, 0x115F, 0x1160, 0x2800, 0x3164, 0xFFA0, *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)}
LINE_BREAKS_BUT_LF = "\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff\u180e\u00ad"


def visible(text: str) -> bool:
    return any(
        not ch.isspace() and unicodedata.category(ch) not in INVISIBLE_CATEGORIES and ord(ch) not in BLANK
        for ch in text
    )


def refused_in_text(ch: str, *, label: bool) -> bool:
    """A character no rubric text may hold (labels: not even tab or line feed)."""
    point = ord(ch)
    if 0xD800 <= point <= 0xDFFF or 0xFDD0 <= point <= 0xFDEF or point & 0xFFFE == 0xFFFE:
        return True
    if ch in LINE_BREAKS_BUT_LF:
        return True
    if ch in "\t\n":
        return label
    return unicodedata.category(ch) == "Cc"


def reserved_name(name: str) -> bool:
    return name.startswith("_") or name == "Config" or (name.startswith("model_") and hasattr(BaseModel, name))


# --- generators of valid rubrics -----------------------------------------------------------------

# Strings YAML 1.1, the 1.2 core schema or both read as something else when written plainly.
LOOKALIKES = [
    "yes", "no", "on", "off", "y", "n", "true", "null", "~", "0o17", "017", "0x1F", "1_000", "1:30", "1e5",
    ".inf", "-.nan", "2024-01-01", "=", "<<", "+1", "007", "1.", ".5", "NaN", "True", "FALSE", "- a", "a: b",
    "#hash", "&anchor", "*alias", "!tag", "%directive", "@at", "`tick", "'quote", '"dq', "{x}", "[x]", "a, b",
]

names = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,11}", fullmatch=True).filter(lambda n: not reserved_name(n))
_text_alphabet = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp"))
labels = st.one_of(
    st.sampled_from(LOOKALIKES),
    st.text(_text_alphabet, min_size=1, max_size=16),
).filter(lambda s: visible(s) and s == s.strip() and not any(refused_in_text(c, label=True) for c in s))
questions = st.text(st.one_of(_text_alphabet, st.sampled_from("\n\t")), min_size=1, max_size=40).filter(
    lambda s: visible(s) and not any(refused_in_text(c, label=False) for c in s)
)
descriptions = st.one_of(st.just(""), questions)


@dataclass
class Draft:
    """A valid rubric as plain data, and what loading it must give."""

    data: dict[str, Any]
    order: list[str]
    """Field names in declared order."""
    topo: list[str] = field(default_factory=list)
    """Field names in an order where every dependency comes first."""

    def field(self, name: str) -> dict[str, Any]:
        return self.data["fields"][name]


@st.composite
def drafts(draw: Any, *, score_options: bool = False, max_fields: int = 6) -> Draft:
    """A valid rubric: 1..max_fields fields of every kind, `after`/`when` only on fields decided
    earlier (declared in any order), every setting in its valid range."""
    count = draw(st.integers(1, max_fields))
    field_names = draw(st.lists(names, min_size=count, max_size=count, unique=True))
    fields: dict[str, dict[str, Any]] = {}
    for index, name in enumerate(field_names):
        kind = draw(st.sampled_from(["choice", "boolean", "score"]))
        spec: dict[str, Any] = {"kind": kind, "question": draw(questions)}
        if kind == "choice":
            options = draw(st.lists(labels, min_size=2, max_size=6, unique_by=normalise_label))
            if draw(st.booleans()):
                spec["options"] = options
            else:
                spec["options"] = {label: draw(descriptions) for label in options}
        elif kind == "score":
            low = draw(st.integers(-50, 50))
            spec["min"], spec["max"] = low, low + draw(st.integers(1, 100))
            if score_options and draw(st.booleans()):
                levels = draw(st.lists(st.integers(spec["min"], spec["max"]), min_size=1, max_size=3, unique=True))
                spec["options"] = {level: draw(questions) for level in levels}
        earlier = field_names[:index]
        if earlier and draw(st.booleans()):
            spec["after"] = draw(st.lists(st.sampled_from(earlier), min_size=1, max_size=2, unique=True))
        if earlier and draw(st.booleans()):
            target = draw(st.sampled_from(earlier))
            spec["when"] = {target: draw(_values_of(fields[target]))}
        fields[name] = spec
    declared = draw(st.permutations(field_names))
    data: dict[str, Any] = {"name": draw(names), "fields": {name: fields[name] for name in declared}}
    if draw(st.booleans()):
        data["instructions"] = draw(st.one_of(st.just(""), questions))
    if draw(st.booleans()):
        data["answer_format"] = draw(st.sampled_from(["labels", "ids"]))
    if draw(st.booleans()):
        data["pin_first"] = draw(st.booleans())
    if draw(st.booleans()):
        data["max_fields_per_pass"] = draw(st.integers(1, 5))
    return Draft(data, list(declared), field_names)


def _values_of(spec: dict[str, Any]) -> st.SearchStrategy[list[Any]]:
    if spec["kind"] == "boolean":
        allowed: list[Any] = [True, False]
    elif spec["kind"] == "score":
        allowed = list(range(spec["min"], spec["max"] + 1))
    else:
        allowed = list(spec["options"])
    return st.lists(st.sampled_from(allowed), min_size=1, max_size=2, unique=True)


def as_json(data: Any) -> str:
    """JSON is YAML 1.2: every string quoted, so no value changes type on the way in."""
    return json.dumps(data, ensure_ascii=False)
