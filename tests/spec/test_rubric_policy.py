"""The rubric policy's fixed points: the ids bound, rebuilding from dumps, the explicit `when` form,
and how `validate` prints many problems."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from decisionflow.cli import app
from decisionflow.cli.common import PROBLEMS_SHOWN
from decisionflow.compiler.prompt import answer_ids
from decisionflow.errors import RubricError
from decisionflow.spec.rubric import MAX_ANSWER_IDS, Rubric
from decisionflow.spec.yaml_rubric import loads_rubric


def test_the_ids_bound_is_the_number_of_ids_the_prompt_has():
    ids = answer_ids(10 * MAX_ANSWER_IDS)
    assert len(ids) == MAX_ANSWER_IDS and len(set(ids)) == MAX_ANSWER_IDS
    options = ", ".join(f"o{i}" for i in range(MAX_ANSWER_IDS))
    rubric = loads_rubric(f"name: t\nanswer_format: ids\nfields:\n  a: {{kind: choice, question: q, options: [{options}]}}\n")
    assert len(rubric.field("a").options) == MAX_ANSWER_IDS


def test_rubrics_rebuilt_from_their_dumps_keep_validating():
    """`model_dump` writes a score's option keys as digit strings; only declarations must use integers."""
    rubric = loads_rubric(
        "name: t\nfields:\n  s: {kind: score, question: q, min: 0, max: 9, options: {0: none, 9: outage}}\n"
        "  f: {kind: boolean, question: q, when: {s: [9]}}\n"
    )
    assert Rubric.model_validate(rubric.model_dump()) == rubric
    assert Rubric.model_validate(rubric.model_dump(mode="json")) == rubric
    with pytest.raises(RubricError, match=r"fields\.s\.options: a score's option keys are its levels, written as integers"):
        loads_rubric("name: t\nfields:\n  s: {kind: score, question: q, min: 0, max: 9, options: {'9': outage}}\n")


def test_fields_named_field_or_values_can_be_conditions():
    rubric = loads_rubric(
        "name: t\nfields:\n  field: {kind: boolean, question: q}\n  values: {kind: boolean, question: q}\n"
        "  a: {kind: boolean, question: q, when: {field: true}}\n  b: {kind: boolean, question: q, when: {values: [false]}}\n"
        "  c: {kind: boolean, question: q, when: {field: values, values: [true]}}\n"
    )
    assert rubric.field("a").when.field == "field" and rubric.field("b").when.field == "values"
    assert (rubric.field("c").when.field, rubric.field("c").when.values) == ("values", (True,))


def test_a_name_inside_a_field_is_an_unknown_key_even_when_it_matches():
    with pytest.raises(RubricError) as caught:
        loads_rubric("name: t\nfields:\n  a: {kind: boolean, question: q, name: a}\n", source="t.yaml")
    (problem,) = caught.value.problems
    assert (problem.location, problem.line) == ("fields.a.name", 3) and problem.message.startswith("unknown key 'name'")


def test_validate_prints_a_bounded_number_of_problems_and_counts_the_rest(tmp_path: Path):
    path = tmp_path / "many.yaml"
    extra = PROBLEMS_SHOWN + 7
    path.write_text("name: t\n" + "".join(f"k{i}: 1\n" for i in range(extra)) + "fields:\n  a: {kind: boolean, question: q}\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == PROBLEMS_SHOWN + 1
    assert lines[-1] == f"{path}: 7 more problems not shown (fix the ones above and validate again)"


def test_problems_with_line_breaks_in_keys_print_on_one_line(tmp_path: Path):
    path = tmp_path / "keys.yaml"
    path.write_text('name: t\n"line\\nbreak": 1\n"tab\\there": 2\nfields:\n  a: {kind: boolean, question: q}\n')
    result = CliRunner().invoke(app, ["validate", str(path)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 2
    assert lines[0].startswith(f"{path}: line\\nbreak: unknown key 'line\\nbreak'")
    assert lines[1].startswith(f"{path}: tab\\there: unknown key 'tab\\there'")


def test_whole_file_problems_are_located(tmp_path: Path):
    cases = {
        "nul.yaml": (b"name: t\x00\n", "line 1, column 8"),
        "utf16.yaml": ("name: t\n".encode("utf-16-le"), "line 1, column 2"),
        "latin1.yaml": ("name: caf\xe9\n".encode("latin-1"), "line 1, column 10"),
        "deep.yaml": (b"name: " + b"[" * 200 + b"]" * 200 + b"\n", "line 1, column 38"),
        "tag.yaml": (b"name: t\nfields:\n  a: {kind: score, question: q, min: !!int x, max: 3}\n", "line 3, column 38"),
    }
    for name, (content, location) in cases.items():
        (tmp_path / name).write_bytes(content)
        result = CliRunner().invoke(app, ["validate", str(tmp_path / name)])
        (line,) = result.output.strip().splitlines()
        assert result.exit_code == 1 and line.startswith(f"{tmp_path / name}: {location}: "), line


def test_windows_line_ends_and_a_byte_order_mark_read_the_same(tmp_path: Path):
    text = "name: t\nfields:\n  a: {kind: choice, question: q, options: [yes, no]}\n"
    path = tmp_path / "crlf.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode("utf-8"))
    from decisionflow.spec.yaml_rubric import load_rubric

    assert load_rubric(path) == loads_rubric(text)
