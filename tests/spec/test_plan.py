"""The planner: pinning, dependency levels, the per-pass budget."""

from __future__ import annotations

import pytest

from decisionflow.spec.plan import Round, make_plan
from decisionflow.spec.yaml_rubric import loads_rubric

RUBRIC = loads_rubric(
    """\
name: triage
fields:
  department: {kind: choice, question: q, options: [billing, shipping, returns]}
  refund_requested: {kind: boolean, question: q}
  severity: {kind: score, question: q, min: 0, max: 9}
  tone: {kind: choice, question: q, options: [calm, angry]}
  escalate: {kind: boolean, question: q, after: [severity]}
  refund_amount: {kind: score, question: q, min: 1, max: 5, when: {refund_requested: [true]}}
  manager: {kind: boolean, question: q, after: [escalate], when: {department: [billing]}}
"""
)


def fields_by_round(plan):
    return [list(round_.fields) for round_ in plan.rounds]


def test_first_field_is_pinned_alone():
    plan = make_plan(RUBRIC)
    assert plan.rounds[0] == Round(index=0, fields=("department",), pinned=True, level=0)
    assert not any(round_.pinned for round_ in plan.rounds[1:])


def test_levels_follow_after_and_when():
    plan = make_plan(RUBRIC)
    assert fields_by_round(plan) == [
        ["department"],
        ["refund_requested", "severity", "tone"],
        ["escalate", "refund_amount"],
        ["manager"],
    ]
    assert [round_.level for round_ in plan.rounds] == [0, 1, 2, 3]
    assert plan.round_of("manager") == 3 and plan.forward_passes == 4


def test_pin_off_uses_plain_levels():
    plan = make_plan(RUBRIC, pin_first=False)
    assert fields_by_round(plan) == [
        ["department", "refund_requested", "severity", "tone"],
        ["escalate", "refund_amount"],
        ["manager"],
    ]
    assert not any(round_.pinned for round_ in plan.rounds)


def test_rubric_setting_pin_first_false():
    rubric = RUBRIC.model_copy(update={"pin_first": False})
    assert fields_by_round(make_plan(rubric)) == fields_by_round(make_plan(RUBRIC, pin_first=False))


def test_budget_splits_a_level_but_keeps_its_level_number():
    plan = make_plan(RUBRIC, max_fields_per_pass=2)
    assert fields_by_round(plan) == [
        ["department"],
        ["refund_requested", "severity"],
        ["tone"],
        ["escalate", "refund_amount"],
        ["manager"],
    ]
    assert [round_.level for round_ in plan.rounds] == [0, 1, 1, 2, 3]
    assert [round_.index for round_ in plan.rounds] == [0, 1, 2, 3, 4]


def test_rubric_budget_is_used_and_argument_overrides_it():
    rubric = RUBRIC.model_copy(update={"max_fields_per_pass": 1})
    assert make_plan(rubric).forward_passes == len(RUBRIC)
    assert make_plan(rubric, max_fields_per_pass=3).forward_passes == 4


def test_budget_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        make_plan(RUBRIC, max_fields_per_pass=-1)


def test_pinned_field_skips_fields_with_dependencies():
    rubric = loads_rubric(
        """\
name: t
fields:
  later: {kind: boolean, question: q, after: [first]}
  first: {kind: boolean, question: q}
"""
    )
    assert fields_by_round(make_plan(rubric)) == [["first"], ["later"]]


def test_to_dict():
    plan = make_plan(RUBRIC, max_fields_per_pass=3)
    assert plan.to_dict() == {
        "rubric": "triage",
        "rounds": [
            {"index": 0, "fields": ["department"], "pinned": True, "level": 0},
            {"index": 1, "fields": ["refund_requested", "severity", "tone"], "pinned": False, "level": 1},
            {"index": 2, "fields": ["escalate", "refund_amount"], "pinned": False, "level": 2},
            {"index": 3, "fields": ["manager"], "pinned": False, "level": 3},
        ],
    }
