"""Generated schemas (`schema_strategies`): every answer the converted rubric can give, assembled into the
schema's object, is valid under an independent validator; the refusals are `SchemaError`s naming a path.
No model: each field's every answer is tried in turn (the others at their first answer), and every
multi-label array with none, all, and each single option answered true."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from schema_strategies import answers_of, decision_with, judge, schemas

from decisionflow.spec import FieldKind
from decisionflow.spec.json_schema import SchemaError, from_json_schema

OUTCOMES: Counter[str] = Counter()


def every_answer(schema_rubric: object) -> list[dict]:
    fields = schema_rubric.rubric.fields
    first = {name: answers_of(spec)[0] for name, spec in fields.items()}
    decisions = [dict(first)]
    for name, spec in fields.items():
        for value in answers_of(spec)[1:]:
            decisions.append({**first, name: value})
    booleans = [name for name, spec in fields.items() if spec.kind is FieldKind.BOOLEAN]
    decisions.append({**first, **dict.fromkeys(booleans, True)})
    decisions.append({**first, **dict.fromkeys(booleans, False)})
    return [schema_rubric.answer(decision_with(schema_rubric, values)) for values in decisions]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(schemas())
def test_every_answer_of_a_converted_schema_is_valid_under_it(schema):
    validator = judge(schema)
    try:
        schema_rubric = from_json_schema(schema)
    except SchemaError as error:
        assert error.path and error.problems[0].message
        OUTCOMES["refused"] += 1
        return
    OUTCOMES["accepted"] += 1
    for answer in every_answer(schema_rubric):
        errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(answer)]
        assert not errors, (answer, errors)


def test_most_generated_schemas_are_accepted():
    """Runs after the property above (file order): the grammar is mostly what the reader answers."""
    if sum(OUTCOMES.values()) < 50:
        pytest.skip("the generated corpus did not run in this session")
    assert OUTCOMES["accepted"] > OUTCOMES["refused"], OUTCOMES
