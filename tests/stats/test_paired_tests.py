"""McNemar's exact test on counts worked out by hand: p = 2 * P(X <= min(b, c)) for X ~ Binomial(b + c, 1/2)."""

from __future__ import annotations

import math

import pytest

from decisionflow.stats import McNemar, mcnemar, mcnemar_exact


def test_one_against_nine_is_the_exact_binomial_two_sided_p():
    # 2 * (C(10, 0) + C(10, 1)) / 2^10 = 22 / 1024
    assert mcnemar_exact(1, 9) == 0.021484375
    assert mcnemar_exact(9, 1) == 0.021484375


def test_no_discordant_row_or_an_even_split_is_no_evidence():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(4, 5) == 1.0  # 2 * P(X <= 4) for n = 9 is 1, capped


def test_a_one_sided_split_is_twice_its_only_term():
    assert mcnemar_exact(0, 6) == 2 / 2 ** 6
    assert mcnemar_exact(0, 5) == 0.0625


def test_many_discordant_rows_stay_finite_and_exact():
    # 403 rows right only one way, 16 the other (the BANKING77 head against zero-shot): far below any threshold.
    tail = sum(math.comb(419, k) for k in range(17)) / 2 ** 419
    assert mcnemar_exact(403, 16) == 2 * tail
    assert 0 < mcnemar_exact(403, 16) < 1e-90


def test_the_paired_form_counts_the_discordant_rows():
    first = [True, True, False, False, True, False, True]
    second = [True, False, True, False, False, False, False]
    result = mcnemar(first, second)
    assert result == McNemar(only_first=3, only_second=1, p=mcnemar_exact(3, 1))
    assert result.p == pytest.approx(0.625)  # 2 * (1 + 4) / 16
    with pytest.raises(ValueError, match="same length"):
        mcnemar([True], [])


def test_it_agrees_with_scipy_binomial_test():
    binomtest = pytest.importorskip("scipy.stats").binomtest
    for only_first, only_second in [(1, 9), (3, 17), (12, 30), (40, 41), (0, 25)]:
        expected = binomtest(only_first, only_first + only_second, 0.5).pvalue
        assert mcnemar_exact(only_first, only_second) == pytest.approx(expected, rel=1e-12)
