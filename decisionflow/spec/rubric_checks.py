"""Checks a rubric runs across its fields: dependency cycles, and derived fields' rules against the
answers the fields they read can give. The field specifications are `rubric.FieldSpec`s, taken as
they come (this module sits below the rubric model, which calls it while validating)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

from .derived import CodeRule, RuleTable
from .kinds import FieldKind, Value, is_one_of
from .text import listing, shown


def find_cycle(edges: dict[str, tuple[str, ...]]) -> list[str] | None:
    """Return one dependency cycle as a closed path (a -> b -> a), or None.

    A depth-first search with an explicit stack: a chain of thousands of fields declared last-first
    is as deep as it is long, which Python's call stack would not survive.
    """
    on_path: dict[str, int] = {}  # node -> its index in `path` while it is being visited
    finished: set[str] = set()
    for start in edges:
        if start in finished:
            continue
        path: list[str] = [start]
        pending: list[Iterator[str]] = [iter(edges[start])]
        on_path[start] = 0
        while pending:
            dep = next(pending[-1], None)
            if dep is None:
                node = path.pop()
                pending.pop()
                del on_path[node]
                finished.add(node)
            elif dep in on_path:
                return path[on_path[dep]:] + [dep]
            elif dep in edges and dep not in finished:
                on_path[dep] = len(path)
                path.append(dep)
                pending.append(iter(edges[dep]))
    return None


MAX_DERIVED_COMBINATIONS = 100_000
"""A derived field reads at most this many combinations of answers: a function is checked on every one when
it is declared, and every decision weighs every one for the derived field's distribution (a rule table too)."""


class RubricProblems(ValueError):
    """Every problem one check found, each written `location: message` (the location relative to where
    the check runs, as a validator's single message is). Raised once from a validator, so that
    `problems.problems_from_validation` reports each of them, not only the first."""

    def __init__(self, messages: list[str]) -> None:
        self.messages = list(messages)
        super().__init__("\n".join(self.messages))


def derivation_problems(key: str, spec: Any, fields: dict[str, Any]) -> Iterator[str]:
    """Why a derived field's rule is refused: it tests answers its fields cannot give, or can give a
    value outside its type; every reason, each as `fields.key.derive...: message`.

    A test on a field the rubric lacks (or on the derived field itself) is reported by the reference
    checks and skipped here; a function reading one is not run.
    """
    rule = spec.derive
    allowed = spec.values
    if isinstance(rule, RuleTable):
        memo: dict[str, bool] = {}
        combinations = math.prod(len(possible_answers(fields, read, memo)) for read in rule.reads if read in fields and read != key)
        if combinations > MAX_DERIVED_COMBINATIONS:
            yield (f"fields.{key}.derive: the rules read {combinations} combinations of answers, more than the "
                   f"{MAX_DERIVED_COMBINATIONS} a decision weighs for the derived field's distribution; split them into "
                   "smaller derived fields")
        for number, item in enumerate(rule.rules):
            for test in item.if_.tests():
                if test.field not in fields or test.field == key:
                    continue
                target = fields[test.field]
                wanted = [test.is_] if test.is_ is not None else list(test.in_ or ())
                for value in wanted:
                    if not is_one_of(value, target.values):
                        yield (f"fields.{key}.derive.rules.{number}: {shown(value)} is not an answer of "
                               f"{test.field!r} (allowed: {listing(target.values, repr)})")
                if test.at_least is None and test.at_most is None:
                    continue
                if target.kind is not FieldKind.SCORE:
                    yield (f"fields.{key}.derive.rules.{number}: `at_least`/`at_most` compare scores; "
                           f"{test.field!r} is a {target.kind.value} field")
                    continue
                problem = _threshold_problem(test, target)
                if problem:
                    yield f"fields.{key}.derive.rules.{number}: {problem}"
        for value in rule.outputs:
            if not is_one_of(value, allowed):
                yield (f"fields.{key}.derive: the rule can give {shown(value)}, which is not an allowed "
                       f"answer of {key!r} (allowed: {listing(allowed, repr)})")
        return
    assert isinstance(rule, CodeRule)
    if any(read not in fields or read == key for read in rule.reads):
        return
    memo: dict[str, bool] = {}
    domains = [possible_answers(fields, read, memo) for read in rule.reads]
    combinations = 1
    for domain in domains:
        combinations *= len(domain)
    if combinations > MAX_DERIVED_COMBINATIONS:
        yield (f"fields.{key}.derive: the function reads {combinations} combinations of answers, more than "
               f"the {MAX_DERIVED_COMBINATIONS} that can be checked; split it into smaller derived fields")
        return
    for combination in itertools.product(*domains):
        answers = dict(zip(rule.reads, combination))
        try:
            value = rule.evaluate(answers)
        except Exception as error:  # noqa: BLE001 - a rule that raises is refused at declaration, not at decision time
            yield (f"fields.{key}.derive: the function raised {type(error).__name__}: {error} for "
                   f"{answers}")
            return
        if not is_one_of(value, allowed):
            yield (f"fields.{key}.derive: the function returns {shown(value)} for {answers}, which is not "
                   f"an allowed answer of {key!r} (allowed: {listing(allowed, repr)})")
            return


def _threshold_problem(test: Any, target: Any) -> str | None:
    """A threshold must be one of the score's levels, as an `is` value must be one of its answers: one
    above the top of `at_least` (below the bottom of `at_most`) never holds, one below the bottom
    (above the top) holds for every answer, the same test as the level at that end."""
    low, high = target.min, target.max
    if test.at_least is not None:
        threshold, never, always, edge = test.at_least, test.at_least > high, test.at_least < low, low
        key = "at_least"
    else:
        threshold, never, always, edge = test.at_most, test.at_most < low, test.at_most > high, high
        key = "at_most"
    if never:
        return (f"`{key}: {threshold}` is outside the answers of {test.field!r} ({low}..{high}), so the test "
                "never holds; compare with one of its levels")
    if always:
        return (f"`{key}: {threshold}` is outside the answers of {test.field!r} ({low}..{high}), so the test "
                f"holds for every answer; write `{key}: {edge}`")
    return None


def may_be_unanswered(fields: dict[str, Any], name: str, memo: dict[str, bool] | None = None) -> bool:
    """Whether a field can be left unanswered (None): a `when` field, and an `options_by` field whose
    parent can give an answer that offers it no options, or be left unanswered itself. A field the
    rubric lacks, or an `options_by` chain that loops, counts as one that can (this also runs on rubrics
    still being checked). `memo` keeps the answers across calls (each chain is walked once)."""
    memo = {} if memo is None else memo
    chain: list[str] = []
    on_chain: set[str] = set()
    current = name
    while True:
        if current in memo:
            result = memo[current]
            break
        spec = fields.get(current)
        if spec is None or current in on_chain:
            result = True
            break
        chain.append(current)
        on_chain.add(current)
        if spec.when is not None:
            result = True
            break
        if spec.options_by is None:
            result = False
            break
        parent = fields.get(spec.options_by.field)
        if parent is None or any(label not in spec.options_by.options for label in parent.labels):
            result = True
            break
        current = spec.options_by.field
    for link in chain:  # each link is answered exactly when the next one is
        memo[link] = result
    return result


def possible_answers(fields: dict[str, Any], name: str, memo: dict[str, bool] | None = None) -> list[Value | None]:
    """What a rule may see for a field: its answers, and None when it may be left unanswered."""
    answers: list[Value | None] = list(fields[name].values)
    if may_be_unanswered(fields, name, memo):
        answers.append(None)
    return answers
