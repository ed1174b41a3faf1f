"""What the decision routes share: questions read independently, and what an answer reports.

`/v1/systemone` and `/v1/decisions` promise that the questions of a request are independent: an answer
must not move with the questions asked beside it. Both build the same kind of rubric, one read
independently (`reading: independent`, see `compiler.independent`): each question is a field of its own,
asked in its own turn after the input, so its distribution is the same alone, among others and in any
order, and every question set of a route shares one prefix (the route's instructions and the input's opening),
so a set never seen before costs its rows and its content-free prior, never a new prefix.

A question becomes a field one way whichever door it came in by:
- a yes/no question (systemone `noul`, decisions `predicate`) is a boolean field; what `true` and `false`
  mean, when given, is appended to the question (`(true: ...; false: ...)`);
- a choice is a choice field over its labels, each described by its description; answers that are JSON
  values other than strings (a decisions choice of `true`/`false`) are the field's `literals`, written as
  JSON in the question's listing, as a JSON schema's non-string enum members are (`spec.json_schema`);
- a score is an integer field `0..n-1` whose levels carry their descriptions.

Both routes report the same two numbers the same way:
- `confidence`: the probability of the answer given, the likeliest label or level (a score's `score` is the
  expected level and may fall between levels, so its confidence is the likeliest level's probability). It
  says how sure the model was of its pick; it is not calibrated (see docs/evaluation.md);
- the tokens the model read: the rubric's prefix (computed once and cached), the input and every question's
  row (`Stats.prefix_tokens + Stats.tokens_prefilled`; rows packed as a tree read the turn opening they share
  once); nothing is generated.
"""

from __future__ import annotations

from typing import Any

from ..spec.kinds import Debias
from ..spec.rubric import FieldKind, FieldSpec, Rubric

NO_INSTRUCTIONS = ""
"""A route whose question sets carry no instructions shares its prefix (the system turn and the input's opening)
with every other such set, LangChain's in-process decision model's included: one prefill per model."""


def predicate_field(question: str, meanings: dict[str, str] | None = None) -> dict[str, Any]:
    """A yes/no question as a boolean field; `meanings` ({"true": ..., "false": ...}, either may be left out)
    appended to the question."""
    described = "; ".join(f"{answer}: {meanings[answer]}" for answer in ("true", "false") if (meanings or {}).get(answer))
    return {"kind": FieldKind.BOOLEAN, "question": f"{question.rstrip()} ({described})" if described else question}


def choice_field(question: str, options: dict[str, str], literals: dict[str, Any] | None = None) -> dict[str, Any]:
    """A choice over `options` (label -> description, "" for none); `literals`: labels that stand for a JSON
    value other than a string (`{"true": True}`), written as that JSON."""
    data: dict[str, Any] = {"kind": FieldKind.CHOICE, "question": question, "options": dict(options)}
    if literals:
        data["literals"] = dict(literals)
    return data


def score_field(question: str, levels: list[str]) -> dict[str, Any]:
    """An ordered scale as a score field `0..n-1`, level i described by `levels[i]`."""
    return {"kind": FieldKind.SCORE, "question": question, "min": 0, "max": len(levels) - 1,
            "options": {str(level): text for level, text in enumerate(levels)}}


def independent_rubric(name: str, fields: dict[str, FieldSpec], *, instructions: str = NO_INSTRUCTIONS,
                       debias: Debias | None = None) -> Rubric:
    """The question set as a rubric read independently (nothing pinned: no question reads another's answer).
    `instructions` open the prefix, the same for every set of a route; `debias`: the readout correction (None:
    the engine's default)."""
    return Rubric(name=name, instructions=instructions, fields=fields, pin_first=False, reading="independent",
                  debias=debias)


def confidence(result: Any) -> float:
    """The probability of the answer given: the chosen label's, or a score's likeliest level's (see the module)."""
    probabilities = result.probabilities
    return probabilities.get(str(result.value), max(probabilities.values()))


def tokens_read(stats: Any) -> int:
    """What the model read for a request: the prefix, the input and the question rows (see the module)."""
    return stats.prefix_tokens + stats.tokens_prefilled


def prefix_from_cache(stats: Any) -> bool:
    """Whether the request's prefix came from a cache (the engine's memory or its disk store), not its own prefill."""
    return stats.prefix_source != "prefill"
