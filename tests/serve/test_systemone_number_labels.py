"""`/v1/systemone` choice labels that are numbers compare by value, as a rubric's options do (no model)."""

from __future__ import annotations

import pytest

from decisionflow.errors import RubricError
from decisionflow.serve import Limits
from decisionflow.serve.systemone import build_question_set, parse_request


def request(criteria: dict) -> dict:
    return {"state": "x", "questions": {"sign": {"type": "choice", "instructions": "Which sign", "criteria": criteria}}}


@pytest.mark.parametrize("labels", [["-1", "0", "1"], ["-0.5", "0.5", "1.5"], ["1.5", "15"]])
def test_distinct_numbers_are_distinct_labels(labels):
    parsed = parse_request(request(dict.fromkeys(labels)), Limits())
    assert build_question_set(parsed.questions).rubric.fields["sign"].labels == tuple(labels)


@pytest.mark.parametrize(("criteria", "says"), [
    ({"1": None, "1.0": None}, "duplicate labels: '1' and '1.0' are the same number"),
    ({"in_progress": None, "In-Progress": None},
     "duplicate labels: 'in_progress' and 'In-Progress' are the same label once case, spaces and separators are ignored"),
])
def test_labels_alike_are_refused_saying_how(criteria, says):
    with pytest.raises(RubricError) as raised:
        parse_request(request(criteria), Limits())
    assert [(p.location, p.message) for p in raised.value.problems] == [("questions.sign.criteria", says)]
