"""Options that are numbers compare by value: `-1`, `0` and `1` (or `1.5` and `15`) are three (two) options,
`1` and `1.0` one; word labels keep the confusable check (`in_progress` and `In-Progress` are one)."""

from __future__ import annotations

import enum
from typing import Literal

import pytest
from pydantic import BaseModel, ValidationError

from decisionflow.errors import RubricError
from decisionflow.spec.json_schema import from_json_schema
from decisionflow.spec.rubric import FieldSpec, Rubric, normalise_label, number_text
from decisionflow.spec.yaml_rubric import loads_rubric


class Sign(enum.IntEnum):
    negative = -1
    zero = 0
    positive = 1


class Literals(BaseModel):
    sign: Literal[-1, 0, 1]


class Members(BaseModel):
    sign: Sign


def schema_of(values: list) -> dict:
    return {"type": "object", "properties": {"x": {"enum": values}}, "required": ["x"], "additionalProperties": False}


def yaml_of(options: str) -> str:
    return f"name: numbers\nfields:\n  x: {{kind: choice, question: Which, options: {options}}}\n"


@pytest.mark.parametrize("labels", [["-1", "0", "1"], ["-0.5", "0.5", "1.5"], ["1.5", "15"], ["1.0", "10"],
                                    ["0.1", "0.10000000000000001"], ["1e3", "1e-3", "-1e3"]])
def test_distinct_numbers_are_distinct_labels(labels):
    assert len({normalise_label(label) for label in labels}) == len(labels)


@pytest.mark.parametrize(("first", "second"), [("1", "1.0"), ("-0", "0"), ("0.0", "-0.0"), ("1e3", "1000"),
                                               ("15e-1", "1.50"), ("1E+2", "100")])
def test_numbers_equal_in_value_are_one_label(first, second):
    assert number_text(first) == number_text(second) == normalise_label(first) == normalise_label(second)


def test_word_labels_keep_the_confusable_check():
    assert normalise_label("in_progress") == normalise_label("In-Progress")
    assert number_text("in_progress") is None
    # Not JSON numbers: read as words (a separator or sign that is not a number's own is ignored there).
    assert [number_text(label) for label in ("01", "+1", ".5", "1.", "NaN", "1_000")] == [None] * 6
    assert normalise_label("1-5") == normalise_label("15")
    # A number's exponent stays short, whatever its size.
    assert number_text("1e999999999") == "1e999999999" and number_text("-25e-999") == "-25e-999"


@pytest.mark.parametrize("model", [Literals, Members])
def test_a_pydantic_choice_of_negative_numbers_reads_as_three_json_options(model):
    field = from_json_schema(model.model_json_schema()).rubric.fields["sign"]
    assert field.labels == ("-1", "0", "1")
    assert field.literals == {"-1": -1, "0": 0, "1": 1}


@pytest.mark.parametrize("values", [[-1, 0, 1], [-0.5, 0.5, 1.5], [1.5, 15], [-1, "-1.5", 1.5]])
def test_a_json_schema_enum_of_numbers_keeps_each_number(values):
    field = from_json_schema(schema_of(values)).rubric.fields["x"]
    assert [field.json_value(label) for label in field.labels] == values


def test_a_json_schema_enum_of_words_alike_is_still_refused():
    with pytest.raises(RubricError, match="'in_progress' and 'In-Progress' are identical after normalisation"):
        from_json_schema(schema_of(["in_progress", "In-Progress"]))


def test_options_written_as_the_same_json_number_are_refused():
    with pytest.raises(ValidationError, match="options: '1' and '1.0' are the same number"):
        FieldSpec(name="x", kind="choice", question="Which", options={"1": "", "1.0": ""},
                  literals={"1": 1, "1.0": 1.0})


def test_yaml_options_that_are_numbers():
    field = loads_rubric(yaml_of("['-1', '0', '1']")).fields["x"]
    assert field.labels == ("-1", "0", "1") and field.literals is None
    assert loads_rubric(yaml_of("['-0.5', '0.5', '1.5', '15']")).fields["x"].labels == ("-0.5", "0.5", "1.5", "15")
    with pytest.raises(RubricError) as raised:
        loads_rubric(yaml_of("['1', '1.0']"))
    problem = raised.value.problems[0]
    assert (problem.location, problem.message) == ("fields.x.options", "'1' and '1.0' are the same number")
    with pytest.raises(RubricError, match="'in_progress' and 'In-Progress' are identical after normalisation"):
        loads_rubric(yaml_of("[in_progress, In-Progress]"))


def test_a_rubric_round_trips_with_number_options():
    rubric = from_json_schema(schema_of([-1, 0, 1])).rubric
    assert Rubric.model_validate(rubric.model_dump()) == rubric


@pytest.mark.model
@pytest.mark.parametrize(("values", "kind"), [([-1, 0, 1], int), ([-0.5, 0.5, 1.5], float), ([1.5, 15], None)])
def test_an_enum_of_numbers_is_decided_with_its_json_types_kept(engine, values, kind):
    schema_rubric = from_json_schema(schema_of(values))
    decision = engine.decide(schema_rubric, "The reading went down: the sign is negative.")
    answer = schema_rubric.answer(decision)["x"]
    assert answer in values
    assert type(answer) is type(values[values.index(answer)]) and type(answer) is not bool
    if kind is not None:
        assert type(answer) is kind
    probabilities = decision.fields["x"].probabilities
    assert set(probabilities) == {schema_rubric.rubric.fields["x"].labels[i] for i in range(len(values))}
    assert sum(probabilities.values()) == pytest.approx(1.0) and all(p > 0 for p in probabilities.values())
