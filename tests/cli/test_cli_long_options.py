"""A YAML rubric with an option over the per-option token limit: `validate`, `plan --tokens` and `run`
refuse it with the same one line naming the field and the option (real bundled tokenizer and model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from decisionflow.cli import app

pytestmark = pytest.mark.model

MESSAGE = ("fields.fruit: the option 'apple apple apple apple apple apple apple apple apple ap... is 5,000 tokens "
           "long; an option may be at most 1,024 tokens")


def rubric(tmp_path: Path, words: int) -> str:
    path = tmp_path / f"fruit_{words}.yaml"
    label = " ".join(["apple"] * words)
    path.write_text(f"name: fruit\nfields:\n  fruit:\n    kind: choice\n    question: Which fruit\n"
                    f"    options: ['{label}', pear]\n", encoding="utf-8")
    return str(path)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_validate_refuses_the_option_and_passes_a_500_token_one(tmp_path: Path):
    long, fine = rubric(tmp_path, 5000), rubric(tmp_path, 500)
    result = invoke("validate", long, fine)
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [f"{long}: {MESSAGE} (each is written whole into the prompt and its "
                                                  "answer line): shorten its label (a longer text can go in the "
                                                  "option's description)"]
    assert result.stdout.strip() == f"OK {fine}: fruit (1 field, 1 forward pass)"


@pytest.mark.parametrize("command", [["plan", "--tokens"], ["run", "--text", "One pear."]])
def test_plan_and_run_refuse_it_in_the_same_line(tmp_path: Path, command: list[str]):
    result = invoke(command[0], rubric(tmp_path, 5000), *command[1:])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {MESSAGE}") and "Traceback" not in result.output
