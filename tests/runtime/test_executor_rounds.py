"""Rounds in which a request reads nothing: its answers still reach later rounds, and no pass is counted."""

from __future__ import annotations

import pytest

from decisionflow.runtime.engine import Engine
from decisionflow.spec.rubric import Rubric

pytestmark = pytest.mark.model

TEXT = "My parcel arrived broken and I want my money back."
# These tests are about rounds, not the readout: the raw readout keeps the probe and the rubric comparable.


def _first_answer(engine: Engine) -> str:
    probe = Rubric.model_validate({
        "name": "probe",
        "fields": {"topic": {"kind": "choice", "question": "What the message is about", "options": ["delivery", "billing"]}},
    })
    return engine.decide(probe, TEXT, debias="none").fields["topic"].value


def _mass_by_hand(engine: Engine, rubric: Rubric, written: list[str], field: str) -> float:
    """Candidate mass of `field` read right after the answer lines of `written`, with the model's own forward."""
    compiled, _ = engine.compile(rubric)
    decided = engine.decide(rubric, TEXT, debias="none")
    lines: list[int] = []
    for name in written:
        cf = compiled.fields[name]
        lines += cf.answer_lines[cf.values.index(decided.fields[name].value)]
    row = compiled.fields[field]
    prefix = list(compiled.prefix_tokens) + compiled.request_tokens(TEXT) + lines + list(row.stem)
    return float(engine.backend.forward_plain(prefix).exp()[list(row.mass_tokens)].sum())


def test_a_round_switched_off_by_when_keeps_earlier_answers(engine: Engine):
    chosen = _first_answer(engine)
    other = "billing" if chosen == "delivery" else "delivery"
    rubric = Rubric.model_validate({
        "name": "skipped_middle",
        "fields": {
            "topic": {"kind": "choice", "question": "What the message is about", "options": ["delivery", "billing"]},
            "refund": {"kind": "boolean", "question": "Whether a refund is asked", "when": {"topic": [other]}},
            "angry": {"kind": "boolean", "question": "Whether the writer is angry", "after": ["refund"]},
        },
    })
    _, plan = engine.compile(rubric)
    assert len(plan.rounds) == 3
    result = engine.decide(rubric, TEXT, debias="none")
    assert result.fields["topic"].value == chosen
    assert not result.fields["refund"].asked
    # Two passes ran (topic's, angry's); the middle round read nothing and is not counted.
    assert result.stats.forward_passes == 2
    # `angry` was read after topic's answer line, exactly as the model reads that text.
    assert result.fields["angry"].candidate_mass == pytest.approx(_mass_by_hand(engine, rubric, ["topic"], "angry"), rel=1e-3)


def test_a_split_level_whose_first_round_is_all_conditional(engine: Engine):
    chosen = _first_answer(engine)
    other = "billing" if chosen == "delivery" else "delivery"
    rubric = Rubric.model_validate({
        "name": "split_level",
        "max_fields_per_pass": 1,
        "fields": {
            "topic": {"kind": "choice", "question": "What the message is about", "options": ["delivery", "billing"]},
            "refund": {"kind": "boolean", "question": "Whether a refund is asked", "when": {"topic": [other]}},
            "angry": {"kind": "boolean", "question": "Whether the writer is angry"},
        },
    })
    _, plan = engine.compile(rubric)
    assert [r.fields for r in plan.rounds] == [("topic",), ("refund",), ("angry",)]
    result = engine.decide(rubric, TEXT, debias="none")
    assert result.stats.forward_passes == 2
    assert result.fields["angry"].candidate_mass == pytest.approx(_mass_by_hand(engine, rubric, ["topic"], "angry"), rel=1e-3)
