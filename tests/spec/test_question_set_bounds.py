"""A YAML rubric's derived rule table is bounded as a function rule is: every decision weighs each
combination of the answers it reads for the derived field's distribution (`runtime.readout.derive`), so a table
reading five 30-option fields (24,300,000 combinations, minutes per decision) is refused when loaded."""

from __future__ import annotations

import pytest

from decisionflow.errors import RubricError
from decisionflow.spec import loads_rubric
from decisionflow.spec.rubric_checks import MAX_DERIVED_COMBINATIONS


def rubric_text(fields: int, options: int) -> str:
    declared = "\n".join(f"  f{i}:\n    kind: choice\n    question: Question {i}\n    options: [{', '.join(f'o{j}' for j in range(options))}]"
                         for i in range(fields))
    tests = ", ".join(f"{{field: f{i}, is: o0}}" for i in range(fields))
    return (f"name: bounded\nfields:\n{declared}\n  d:\n    kind: boolean\n    question: Derived\n    derive:\n"
            f"      rules:\n        - if: {{all: [{tests}]}}\n          then: true\n      otherwise: false\n")


def test_a_rule_table_reading_too_many_combinations_is_refused():
    with pytest.raises(RubricError) as raised:
        loads_rubric(rubric_text(5, 30))
    message = str(raised.value)
    assert "fields.d.derive: the rules read 24300000 combinations of answers" in message
    assert f"more than the {MAX_DERIVED_COMBINATIONS}" in message


def test_a_rule_table_within_the_bound_loads():
    assert loads_rubric(rubric_text(3, 30)).fields["d"].derive is not None  # 27,000 combinations
