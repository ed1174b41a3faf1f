"""How long hostile rubric files take to refuse (or, for valid ones, to validate and plan), by size.

Not a test (timings depend on the machine): run it on an idle machine and read the table.

    .venv/bin/python tests/hardening/measure_hostile.py

What to look for: the bombs are refused in well under a second, and the time per unknown key and
per chained field stays flat as the files grow (linear work, not quadratic).
"""

from __future__ import annotations

import time
from typing import Callable

from decisionflow.errors import RubricError
from decisionflow.spec.plan import make_plan
from decisionflow.spec.yaml_rubric import loads_rubric


def billion_laughs(duplicate_inside: bool) -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 9):
        prev = chr(ord("a") + level - 1)
        name = chr(ord("a") + level)
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    if duplicate_inside:
        lines[0] = 'a: &a [{k: 1, k: 2},"lol","lol","lol","lol","lol","lol","lol","lol"]'
    return "\n".join(lines) + "\nname: t\nfields: {x: {kind: boolean, question: q}}\n"


def unknown_keys(count: int) -> str:
    return "name: t\n" + "".join(f"k{i}: 1\n" for i in range(count)) + "fields: {x: {kind: boolean, question: q}}\n"


def unknown_field_keys(count: int) -> str:
    return "name: t\nfields:\n  x:\n    kind: boolean\n    question: q\n" + "".join(f"    k{i}: 1\n" for i in range(count))


def chain(count: int) -> str:
    lines = [f"  f{i}: {{kind: boolean, question: q, after: [f{i + 1}]}}" for i in range(count)]
    return "name: t\nfields:\n" + "\n".join(lines) + f"\n  f{count}: {{kind: boolean, question: q}}\n"


def nested(depth: int) -> str:
    return "name: t\nfields: " + "[" * depth + "]" * depth + "\n"


def measure(label: str, text: str, per: int = 1) -> None:
    began = time.perf_counter()
    try:
        rubric = loads_rubric(text, source="measure.yaml")
        make_plan(rubric)
        outcome = f"valid, {len(rubric)} fields"
    except RubricError as error:
        outcome = f"refused, {len(error.problems)} problems: {str(error.problems[0])[:60]}"
    seconds = time.perf_counter() - began
    per_item = f"{seconds / per * 1e6:8.1f} us each" if per > 1 else " " * 16
    print(f"{label:<34} {len(text):>9} chars {seconds:8.3f} s {per_item}  {outcome}")


def main() -> None:
    cases: list[tuple[str, Callable[[], str], int]] = [
        ("billion laughs", lambda: billion_laughs(False), 1),
        ("billion laughs, duplicate inside", lambda: billion_laughs(True), 1),
        *[(f"nested {depth} deep", lambda depth=depth: nested(depth), 1) for depth in (100, 10_000, 300_000)],
        *[(f"{n} unknown top-level keys", lambda n=n: unknown_keys(n), n) for n in (1_000, 5_000, 20_000, 80_000)],
        *[(f"{n} unknown keys in one field", lambda n=n: unknown_field_keys(n), n) for n in (1_000, 5_000, 20_000)],
        *[(f"after-chain of {n} fields", lambda n=n: chain(n), n) for n in (250, 1_000, 4_000)],
    ]
    for label, make, per in cases:
        measure(label, make(), per)


if __name__ == "__main__":
    main()
