"""McNemar's exact test: is one method right on more of the same rows than another, or within noise?

Only the discordant rows count (right by one method, wrong by the other). Under the null hypothesis
that both are equally good, each discordant row is a fair coin, so the two-sided p is twice the
binomial tail of the smaller count at 1/2, capped at 1. The tail is summed in integers and divided
once, so p is the correctly rounded float of the exact value (scipy's `binomtest` agrees to within
3e-14 relative on every split of up to 300 discordant rows, but not bit for bit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class McNemar:
    """The paired comparison of two methods' right/wrong on the same rows."""

    only_first: int
    """Rows only the first method got right."""
    only_second: int
    """Rows only the second method got right."""
    p: float
    """McNemar's exact two-sided p (1.0 when no row is discordant)."""


def mcnemar(first_right: Sequence[bool], second_right: Sequence[bool]) -> McNemar:
    """McNemar's exact test of two methods' right/wrong per row, paired by position."""
    if len(first_right) != len(second_right):
        raise ValueError(f"paired rows need the same length: {len(first_right)} vs {len(second_right)}")
    only_first = sum(bool(a) and not b for a, b in zip(first_right, second_right))
    only_second = sum(bool(b) and not a for a, b in zip(first_right, second_right))
    return McNemar(only_first, only_second, mcnemar_exact(only_first, only_second))


def mcnemar_exact(only_first: int, only_second: int) -> float:
    """McNemar's exact two-sided p for paired answers: of the rows only one method got right, how
    unlikely a split this uneven is if both were equally good (a binomial test at 1/2)."""
    if only_first < 0 or only_second < 0:
        raise ValueError(f"discordant counts cannot be negative: {only_first}, {only_second}")
    discordant = only_first + only_second
    if discordant == 0:
        return 1.0
    smaller = min(only_first, only_second)
    # sum of C(n, k) for k <= smaller, each coefficient from the last (exact integers throughout).
    term, total = 1, 1
    for k in range(smaller):
        term = term * (discordant - k) // (k + 1)
        total += term
    tail = total / 2 ** discordant
    return min(1.0, 2 * tail)
