"""`decisionflow validate` and `decisionflow plan`: exit codes, stdout and stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decisionflow.cli import app

runner = CliRunner()

GOOD = """\
name: support_triage
fields:
  department: {kind: choice, question: Which team, options: [billing, shipping, returns]}
  severity: {kind: score, question: How severe, min: 0, max: 9}
  refund: {kind: boolean, question: Refund asked}
  escalate: {kind: boolean, question: Review, after: [severity], when: {department: [billing, returns]}}
"""

BAD = """\
name: broken
fields:
  severity: {kind: score, question: How severe, min: 9, max: 0}
  tone: {kind: choice, question: Tone, options: [calm]}
"""

DECLARED = '''\
from typing import Annotated, Literal
from pydantic import BaseModel, Field
from decisionflow.spec.declare import ask, decision

@decision
class Triage(BaseModel):
    """Triage one support ticket."""
    department: Annotated[Literal["billing", "shipping"], ask("Which team")]
    severity: Annotated[int, ask("How severe"), Field(ge=0, le=3)]

class Plain(BaseModel):
    x: bool
'''


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    paths = {"good": tmp_path / "good.yaml", "bad": tmp_path / "bad.yaml", "py": tmp_path / "declared.py"}
    paths["good"].write_text(GOOD)
    paths["bad"].write_text(BAD)
    paths["py"].write_text(DECLARED)
    return {key: str(path) for key, path in paths.items()}


def test_validate_ok(files):
    result = runner.invoke(app, ["validate", files["good"], f"{files['py']}:Triage"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"OK {files['good']}: support_triage (4 fields, 3 forward passes)",
        f"OK {files['py']}:Triage: triage (2 fields, 2 forward passes)",
    ]
    assert result.stderr == ""


def test_validate_counts_in_context_examples_and_names_a_bad_one(tmp_path: Path):
    shown = tmp_path / "shown.yaml"
    shown.write_text(GOOD + "examples:\n  - text: I was charged twice\n    answers: {department: billing, severity: 4}\n"
                     "  - text: Where is my parcel?\n    answers: {department: shipping}\n")
    result = runner.invoke(app, ["validate", str(shown)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"OK {shown}: support_triage (4 fields, 3 forward passes, 2 in-context examples)"]
    shown.write_text(shown.read_text().replace("severity: 4", "severity: 12"))
    result = runner.invoke(app, ["validate", str(shown)])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"{shown}: examples.0.answers.severity: 12 is not an allowed answer of 'severity' "
        "(allowed: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9) (line 9)"]


def test_validate_reports_every_problem_on_stderr(files):
    result = runner.invoke(app, ["validate", files["bad"], files["good"]])
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [f"OK {files['good']}: support_triage (4 fields, 3 forward passes)"]
    assert result.stderr.splitlines() == [
        f"{files['bad']}: fields.severity.max: must be greater than min (min is 9, max is 0) (line 3)",
        f"{files['bad']}: fields.tone.options: a choice field needs at least two options, got 1 (line 4)",
    ]
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "ref, words",
    [
        ("missing.yaml", "missing.yaml: file not found"),
        ("no_such_module_here:Triage", "module 'no_such_module_here' not found"),
        ("{py}:Nope", "has no attribute 'Nope'"),
        ("{py}:Plain", "Plain is a pydantic model not decorated with @decision"),
        ("notes.txt", "expected a .yaml/.yml file, module:Class or file.py:Class"),
    ],
)
def test_validate_bad_references(files, ref, words):
    result = runner.invoke(app, ["validate", ref.format(**files)])
    assert result.exit_code == 1
    assert words in result.stderr and "Traceback" not in result.output


def test_debug_lets_the_exception_through(files):
    result = runner.invoke(app, ["--debug", "validate", files["bad"]])
    assert result.exit_code == 1
    assert type(result.exception).__name__ == "RubricError"


def test_validate_needs_a_path():
    result = runner.invoke(app, ["validate"])
    assert result.exit_code == 2


def test_plan_json(files):
    result = runner.invoke(app, ["plan", files["good"], "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "rubric": "support_triage",
        "rounds": [
            {"index": 0, "fields": ["department"], "pinned": True, "level": 0},
            {"index": 1, "fields": ["severity", "refund"], "pinned": False, "level": 1},
            {"index": 2, "fields": ["escalate"], "pinned": False, "level": 2},
        ],
        "forward_passes": 3,
    }


def test_plan_json_no_pin_and_budget(files):
    result = runner.invoke(app, ["plan", files["good"], "--json", "--no-pin", "--max-fields-per-pass", "2"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert [r["fields"] for r in plan["rounds"]] == [["department", "severity"], ["refund"], ["escalate"]]
    assert plan["forward_passes"] == 3 and not any(r["pinned"] for r in plan["rounds"])


def test_plan_rejects_zero_budget(files):
    result = runner.invoke(app, ["plan", files["good"], "--max-fields-per-pass", "0"])
    assert result.exit_code == 2


def test_plan_table(files, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    result = runner.invoke(app, ["plan", files["good"]])
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[0] == "support_triage: 3 forward passes"
    header = next(line for line in lines if "round" in line)
    assert header.split() == ["round", "level", "pinned", "field", "kind", "options", "depends", "on"]
    names = ("department", "severity", "refund", "escalate")
    rows: dict[str, list[str]] = {}
    for line in lines:
        for name in names:
            if name in line.split():
                rows.setdefault(name, line.split())  # the field's own row comes before any mention
    assert rows["department"] == ["0", "0", "yes", "department", "choice", "3"]
    assert rows["severity"] == ["1", "1", "severity", "score", "10"]
    assert rows["refund"] == ["refund", "boolean", "2"]
    assert rows["escalate"][:5] == ["2", "2", "escalate", "boolean", "2"]
    assert "when department in [billing, returns]" in result.stdout


def test_plan_bad_rubric_fails_cleanly(files):
    result = runner.invoke(app, ["plan", files["bad"]])
    assert result.exit_code == 1
    assert "fields.severity.max: must be greater than min" in result.stderr


def test_no_arguments_shows_help():
    result = runner.invoke(app, [])
    assert "validate" in result.output and "plan" in result.output
