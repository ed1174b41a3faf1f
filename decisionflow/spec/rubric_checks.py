"""Checks a rubric runs across its fields: dependency cycles, and derived fields' rules against the
answers the fields they read can give. The field specifications are `rubric.FieldSpec`s, taken as
they come (this module sits below the rubric model, which calls it while validating)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from .derived import CodeRule, RuleTable
from .kinds import FieldKind, Value
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
"""A derived field's rule is checked on every combination of the answers it reads, up to this many."""


def check_derivation(key: str, spec: Any, fields: dict[str, Any]) -> None:
    """Refuse a rule that tests answers its fields cannot give, or can give a value outside its type."""
    rule = spec.derive
    allowed = spec.values
    if isinstance(rule, RuleTable):
        for number, item in enumerate(rule.rules):
            for test in item.if_.tests():
                target = fields[test.field]
                wanted = [test.is_] if test.is_ is not None else list(test.in_ or ())
                for value in wanted:
                    if not any(value == a and type(value) is type(a) for a in target.values):
                        raise ValueError(f"fields.{key}.derive.rules.{number}: {shown(value)} is not an answer of "
                                         f"{test.field!r} (allowed: {listing(target.values, repr)})")
                if (test.at_least is not None or test.at_most is not None) and target.kind is not FieldKind.SCORE:
                    raise ValueError(f"fields.{key}.derive.rules.{number}: `at_least`/`at_most` compare scores; "
                                     f"{test.field!r} is a {target.kind.value} field")
        for value in rule.outputs:
            if not any(value == a and type(value) is type(a) for a in allowed):
                raise ValueError(f"fields.{key}.derive: the rule can give {shown(value)}, which is not an allowed "
                                 f"answer of {key!r} (allowed: {listing(allowed, repr)})")
        return
    assert isinstance(rule, CodeRule)
    domains = [possible_answers(fields, read) for read in rule.reads]
    combinations = 1
    for domain in domains:
        combinations *= len(domain)
    if combinations > MAX_DERIVED_COMBINATIONS:
        raise ValueError(f"fields.{key}.derive: the function reads {combinations} combinations of answers, more than "
                         f"the {MAX_DERIVED_COMBINATIONS} that can be checked; split it into smaller derived fields")
    for combination in itertools.product(*domains):
        answers = dict(zip(rule.reads, combination))
        try:
            value = rule.evaluate(answers)
        except Exception as error:  # noqa: BLE001 - a rule that raises is refused at declaration, not at decision time
            raise ValueError(f"fields.{key}.derive: the function raised {type(error).__name__}: {error} for "
                             f"{answers}") from None
        if not any(value == a and type(value) is type(a) for a in allowed):
            raise ValueError(f"fields.{key}.derive: the function returns {shown(value)} for {answers}, which is not "
                             f"an allowed answer of {key!r} (allowed: {listing(allowed, repr)})")


def possible_answers(fields: dict[str, Any], name: str) -> list[Value | None]:
    """What a rule may see for a field: its answers, and None when it may be left unanswered."""
    spec = fields[name]
    answers: list[Value | None] = list(spec.values)
    if spec.when is not None or spec.options_by is not None:
        answers.append(None)
    return answers
