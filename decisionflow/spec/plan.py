"""The planner: orders a rubric's fields into rounds, one forward pass each.

Round 0 holds the pinned first field alone: its answer is written into the prompt before anything
else is asked, because every field asked right after `{` is asked as if it were the first key.
The remaining fields follow in dependency levels (`after=` and `when=` both create edges); a level
larger than the rubric's `max_fields_per_pass` budget is split into several rounds.

Derived fields take no pass: each is computed as soon as the fields its rule reads are settled, so it
sits on the level of its deepest input, and a field that reads it comes one level later.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .kinds import Reading
from .rubric import Rubric


@dataclass(frozen=True)
class Round:
    index: int
    fields: tuple[str, ...]
    pinned: bool
    """True for the first field decided alone before everything else."""
    level: int
    """Dependency level: fields of one level never depend on each other."""


@dataclass(frozen=True)
class Plan:
    rubric: str
    rounds: tuple[Round, ...]
    derived: tuple[str, ...] = ()
    """Derived fields in an order that computes each after the derived fields it reads."""

    @property
    def forward_passes(self) -> int:
        """Passes a warm request takes: one per round (the input rides in the first one)."""
        return len(self.rounds)

    def round_of(self, field: str) -> int:
        for round_ in self.rounds:
            if field in round_.fields:
                return round_.index
        raise KeyError(field)

    def to_dict(self) -> dict:
        data = {"rubric": self.rubric, "rounds": [asdict(r) | {"fields": list(r.fields)} for r in self.rounds]}
        if self.derived:
            data["derived"] = list(self.derived)
        return data


def make_plan(
    rubric: Rubric,
    *,
    pin_first: bool | None = None,
    max_fields_per_pass: int | None = None,
) -> Plan:
    """Plan `rubric`; keyword arguments override the rubric's own settings."""
    if max_fields_per_pass is not None and max_fields_per_pass < 1:
        raise ValueError(f"max_fields_per_pass must be at least 1, got {max_fields_per_pass}")
    # Independent questions read nothing before them: no answer is written for the others to read.
    pin = (rubric.pin_first if pin_first is None else pin_first) and rubric.reading is not Reading.INDEPENDENT
    budget = max_fields_per_pass or rubric.max_fields_per_pass
    deps = {spec.name: spec.dependencies for spec in rubric}
    order = list(rubric.fields)
    derived = set(rubric.derived_fields())

    first = None
    if pin:
        # The first declared asked field that depends on nothing is the one the prompt's first key answers.
        first = next(name for name in order if not deps[name] and name not in derived)
    level_of, computed = dependency_levels(order, deps, pinned=first, derived=derived)
    levels: list[tuple[list[str], bool]] = [([first], True)] if first is not None else []
    by_level: dict[int, list[str]] = {}
    for name in order:  # declared order within each level
        if name != first and name not in derived:
            by_level.setdefault(level_of[name], []).append(name)
    levels.extend((by_level[number], False) for number in sorted(by_level))

    rounds: list[Round] = []
    for level, (names, pinned) in enumerate(levels):
        size = budget or len(names)
        for start in range(0, len(names), size):
            rounds.append(Round(len(rounds), tuple(names[start : start + size]), pinned, level))
    return Plan(rubric=rubric.name, rounds=tuple(rounds), derived=tuple(n for n in computed if n in derived))


def split_by_tokens(plan: Plan, row_tokens: dict[str, int], budget: int) -> Plan:
    """`plan` with each round cut where its fields' rows would pass `budget` tokens (a field alone may pass
    it): the memory bound of a round whose rows are long, such as independent questions, which each carry
    their own question. Fields keep their order; levels and pinning are kept."""
    rounds: list[Round] = []
    for round_ in plan.rounds:
        current: list[str] = []
        used = 0
        for name in round_.fields:
            cost = row_tokens.get(name, 0)
            if current and used + cost > budget:
                rounds.append(Round(len(rounds), tuple(current), round_.pinned, round_.level))
                current, used = [], 0
            current.append(name)
            used += cost
        if current:
            rounds.append(Round(len(rounds), tuple(current), round_.pinned, round_.level))
    return Plan(rubric=plan.rubric, rounds=tuple(rounds), derived=plan.derived)


def dependency_levels(
    order: list[str], deps: dict[str, tuple[str, ...]], *, pinned: str | None, derived: set[str] | frozenset[str] = frozenset()
) -> tuple[dict[str, int], list[str]]:
    """Each field's level: one more than its deepest dependency (the pinned field alone below all; a
    derived field on the level of its deepest input, since it takes no pass), and a topological order.

    Kahn's algorithm over the dependency graph, linear in fields plus edges and without recursion,
    so a chain of thousands of fields plans as fast as a flat rubric.
    """
    base = 1 if pinned is not None else 0
    dependants: dict[str, list[str]] = {name: [] for name in order}
    waiting = {name: len(deps[name]) for name in order}
    for name in order:
        for dep in deps[name]:
            dependants[dep].append(name)
    level = {name: (0 if name == pinned or name in derived else base) for name in order}
    ready = [name for name in order if waiting[name] == 0]
    topological: list[str] = []
    while ready:
        name = ready.pop()
        topological.append(name)
        for dependant in dependants[name]:
            level[dependant] = max(level[dependant], level[name] + (0 if dependant in derived else 1))
            waiting[dependant] -= 1
            if waiting[dependant] == 0:
                ready.append(dependant)
    assert not any(waiting.values()), "the rubric guarantees an acyclic dependency graph"
    return level, topological
