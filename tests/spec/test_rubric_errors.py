"""Every kind of bad rubric gives one specific `source: location: message` line."""

from __future__ import annotations

import textwrap

import pytest
from pydantic import BaseModel

from decisionflow.spec.problems import Problem, RubricError
from decisionflow.spec.yaml_rubric import load_rubric, loads_rubric

SOURCE = "triage.yaml"


def problems(text: str) -> list[Problem]:
    with pytest.raises(RubricError) as caught:
        loads_rubric(textwrap.dedent(text), source=SOURCE)
    assert not isinstance(caught.value, BaseModel)
    return caught.value.problems


def only(text: str) -> Problem:
    found = problems(text)
    assert len(found) == 1, found
    prefix = f"{SOURCE}: {found[0].location}: " if found[0].location else f"{SOURCE}: "
    assert str(found[0]).startswith(prefix)
    return found[0]


def test_unknown_field_kind():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: multiple, question: q}
        """
    )
    assert problem.location == "fields.a.kind" and problem.line == 3
    assert "unknown field kind 'multiple'" in problem.message and "'choice'" in problem.message


def test_choice_with_one_option():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: choice, question: q, options: [only]}
        """
    )
    assert problem.location == "fields.a.options"
    assert "at least two options, got 1" in problem.message


def test_duplicate_options_in_list():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: choice, question: q, options: [x, y, x]}
        """
    )
    assert problem.location == "fields.a.options" and "duplicate option 'x'" in problem.message


def test_duplicate_yaml_keys_are_not_silently_merged():
    problem = only(
        """\
        name: t
        fields:
          a:
            kind: choice
            question: q
            options:
              billing: charges
              refunds: money back
              billing: invoices
        """
    )
    assert problem.location == "fields.a.options.billing"
    assert problem.line == 9 and "duplicate key 'billing' (first written on line 7)" in problem.message


def test_labels_identical_after_normalisation():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: choice, question: q, options: [Next Day, next-day]}
        """
    )
    assert problem.location == "fields.a.options"
    assert "'Next Day' and 'next-day' are identical after normalisation" in problem.message


def test_score_min_not_below_max():
    problem = only(
        """\
        name: t
        fields:
          severity:
            kind: score
            question: q
            min: 9
            max: 0
        """
    )
    assert problem.location == "fields.severity.max"
    assert problem.message.startswith("must be greater than min")
    assert str(problem) == "triage.yaml: fields.severity.max: must be greater than min (min is 9, max is 0) (line 7)"


def test_score_with_too_many_levels():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: score, question: q, min: 0, max: 101}
        """
    )
    assert problem.location == "fields.a.max" and "102 levels; at most 101" in problem.message


def test_after_unknown_field():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: boolean, question: q}
          b: {kind: boolean, question: q, after: [sevrity]}
        """
    )
    assert problem.location == "fields.b.after" and problem.line == 4
    assert "unknown field 'sevrity'" in problem.message and "fields: a, b" in problem.message


def test_after_itself():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: boolean, question: q, after: [a]}
        """
    )
    assert problem.location == "fields.a.after" and "cannot come after itself" in problem.message


def test_dependency_cycle_names_the_cycle():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: boolean, question: q, after: [c]}
          b: {kind: boolean, question: q, after: [a]}
          c: {kind: boolean, question: q, when: {b: [true]}}
        """
    )
    assert problem.location == "fields.a"
    assert problem.message == "dependency cycle a -> c -> b -> a"


def test_when_unknown_field():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: boolean, question: q}
          b: {kind: boolean, question: q, when: {departmnt: [billing]}}
        """
    )
    assert problem.location == "fields.b.when" and "unknown field 'departmnt'" in problem.message


def test_when_impossible_value():
    problem = only(
        """\
        name: t
        fields:
          department: {kind: choice, question: q, options: [billing, shipping]}
          b: {kind: boolean, question: q, when: {department: [legal]}}
        """
    )
    assert problem.location == "fields.b.when"
    assert "'legal' is not an allowed answer of 'department'" in problem.message
    assert "'billing', 'shipping'" in problem.message


def test_when_boolean_written_as_yes_is_a_string():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: boolean, question: q}
          b: {kind: boolean, question: q, when: {a: yes}}
        """
    )
    assert problem.location == "fields.b.when" and "'yes' is not an allowed answer" in problem.message


def test_empty_rubric():
    problem = only(
        """\
        name: t
        fields: {}
        """
    )
    assert problem.location == "fields" and "at least one field" in problem.message


def test_empty_document():
    problem = only("")
    assert problem.location == "" and "expected a mapping" in problem.message


def test_yaml_syntax_error_has_line_and_column():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: boolean, question: [q}
        """
    )
    assert problem.location == "line 3, column 34" and problem.line == 3
    assert str(problem).startswith("triage.yaml: line 3, column 34: expected ',' or ']'")


@pytest.mark.parametrize(
    "entry, location, words",
    [
        ("a: {kind: boolean, question: 5}", "fields.a.question", "must be a valid string, got 5"),
        ("a: {kind: score, question: q, min: low, max: 3}", "fields.a.min", "must be a valid integer"),
        ("a: {kind: choice, question: q, options: {x: 1, y: b}}", "fields.a.options.x", "must be a valid string"),
        ("a: {kind: boolean, question: q, after: {b: 1}}", "fields.a.after", "must be a valid tuple"),
        ("a: choice", "fields.a", "'choice' is not a field: a field is a mapping of its keys, e.g. `a: {kind: choice"),
        ("question: Bad indent", "fields.question", "'Bad indent' is not a field: 'question' is a key of a field; indent it"),
        ("a: {kind: choice, question: Q, options: [x, y], derive: {rules: [], otherwise: x}}", "fields.a.derive.rules",
         "needs at least 1 item, got 0"),
        ("a: {kind: choice, question: q, options: [1, 2]}", "fields.a.options", "option 0 must be a string label"),
        ("a: {kind: boolean, question: q, min: 1}", "fields.a.min", "apply only to score fields"),
        ("a: {kind: boolean, question: q, options: [x, y]}", "fields.a.options", "takes no `options`"),
        ("a: {kind: score, question: q, min: 0}", "fields.a.max", "needs integer `min` and `max`"),
        ("2a: {kind: boolean, question: q}", "fields.2a", "'2a' is not a valid name"),
    ],
)
def test_wrong_types_for_keys(entry, location, words):
    problem = only(f"name: t\nfields:\n  {entry}\n")
    assert problem.location == location and words in problem.message, problem


def test_wrong_top_level_types():
    found = problems("name: [t]\npin_first: maybe\nanswer_format: tokens\nfields:\n  a: {kind: boolean, question: q}\n")
    by_location = {problem.location: problem for problem in found}
    assert "must be a valid string" in by_location["name"].message
    assert "must be a valid boolean" in by_location["pin_first"].message
    assert "unknown value 'tokens'; expected 'labels' or 'ids'" in by_location["answer_format"].message


def test_unknown_key_suggests_the_right_one():
    problem = only(
        """\
        name: t
        fields:
          a: {kind: boolean, questoin: q, question: q}
        """
    )
    assert problem.location == "fields.a.questoin"
    assert "unknown key 'questoin'; did you mean 'question'?" in problem.message


def test_unknown_top_level_key():
    problem = only("name: t\ninstruction: x\nfields:\n  a: {kind: boolean, question: q}\n")
    assert problem.location == "instruction" and "did you mean 'instructions'?" in problem.message
    assert problem.line == 2


def test_missing_required_keys_are_all_listed():
    found = problems("fields:\n  a: {kind: boolean}\n")
    assert {(p.location, p.message) for p in found} == {
        ("name", "required key is missing"),
        ("fields.a.question", "required key is missing"),
    }


def test_file_not_found(tmp_path):
    with pytest.raises(RubricError) as caught:
        load_rubric(tmp_path / "missing.yaml")
    assert str(caught.value) == f"{tmp_path / 'missing.yaml'}: file not found"
