"""Derived fields at decision time: the value from the decided answers, the probability from their distributions.

The value is the rule applied to the answers the request actually got. Its distribution enumerates
the answers of the fields the rule reads: under independence (the product of their distributions),
except that a field marginalised over a parent that the rule also reads contributes its joint with
that parent (exact over the hypotheses that were read). The result says which was used.
"""

from __future__ import annotations

import itertools
from typing import Any

from ...spec.rubric import FieldSpec, Rubric, Value, label_of
from ..result import FieldResult

Joint = tuple[str, dict[tuple[str, str], float]]
"""(parent field, {(parent label, child label): probability}) of a marginalised field."""


def derive_field(
    rubric: Rubric, name: str, answers: dict[str, Value | None], results: dict[str, FieldResult],
    joints: dict[str, Joint], round_index: int | None,
) -> FieldResult:
    spec = rubric.fields[name]
    rule = spec.derive
    assert rule is not None
    reads = list(rule.reads)
    variables, joint_used = _variables(rubric, reads, results, joints)
    scores: dict[str, float] = {label: 0.0 for label in spec.labels}
    for combination in itertools.product(*(choices for _, choices in variables)):
        assignment: dict[str, Value | None] = {}
        probability = 1.0
        for (names, _), (values, p) in zip(variables, combination):
            assignment.update(zip(names, values))
            probability *= p
        if probability > 0.0:
            scores[label_of(rule.evaluate(assignment))] += probability
    total = sum(scores.values()) or 1.0
    value = rule.evaluate({read: answers.get(read) for read in reads})
    return FieldResult(
        name=name, kind=spec.kind, value=value, probabilities={k: v / total for k, v in scores.items()},
        candidate_mass=None, round=round_index, method="derived", derived_from="joint" if joint_used else "independent",
        debias=_corrections_read(reads, results),
    )


def _corrections_read(reads: list[str], results: dict[str, FieldResult]) -> str:
    """The readout correction behind a derived field: that of the asked fields it reads, `a+b` when
    they differ (it is computed from their corrected distributions, and corrects nothing itself)."""
    applied = sorted({results[read].debias for read in reads if read in results and results[read].asked})
    return "+".join(applied) if applied else "none"


def _variables(
    rubric: Rubric, reads: list[str], results: dict[str, FieldResult], joints: dict[str, Joint]
) -> tuple[list[tuple[tuple[str, ...], list[tuple[tuple[Any, ...], float]]]], bool]:
    """The rule's inputs as independent variables, each a list of (values, probability)."""
    variables = []
    grouped: set[str] = set()
    joint_used = False
    for read in reads:
        if read in joints and joints[read][0] in reads:
            parent, table = joints[read]
            variables.append(((parent, read), [
                ((_value(rubric.fields[parent], p), _value(rubric.fields[read], c)), q) for (p, c), q in table.items()
            ]))
            grouped.update((parent, read))
            joint_used = True
    for read in reads:
        if read in grouped:
            continue
        result = results.get(read)
        spec = rubric.fields[read]
        if result is None or not result.asked or not result.probabilities:
            variables.append(((read,), [((result.value if result else None,), 1.0)]))
        else:
            variables.append(((read,), [((_value(spec, label),), p) for label, p in result.probabilities.items()]))
    return variables, joint_used


def _value(spec: FieldSpec, label: str) -> Value:
    return spec.values[spec.labels.index(label)]
