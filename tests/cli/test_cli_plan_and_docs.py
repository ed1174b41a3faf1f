"""`decisionflow plan` shows every field (derived ones and `options_by` parents included) and tokens
that split a character readably; the docs agree with the commands' --help (no model needed, except
the one token-view test marked `model`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from decisionflow.cli import app
from decisionflow.compiler.tokens import readable_bytes, token_text

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
runner = CliRunner()

DERIVED = """\
name: escalation
fields:
  severity: {kind: score, question: How severe the problem is, min: 0, max: 9}
  legal_threat: {kind: boolean, question: Whether the writer threatens legal action}
  needs_human:
    kind: boolean
    question: Whether a person must look at it
    derive:
      rules:
        - if: {any: [{field: severity, at_least: 7}, {field: legal_threat, is: true}]}
          then: true
      otherwise: false
  callback: {kind: boolean, question: Whether to call back, when: {needs_human: [true]}}
"""


def test_the_plan_table_lists_derived_fields_with_what_they_read(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    path = tmp_path / "escalation.yaml"
    path.write_text(DERIVED)
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[0] == "escalation: 3 forward passes; 1 derived field"
    derived = next(line for line in lines if "needs_human    boolean" in line)
    assert derived.split() == ["derived", "1", "needs_human", "boolean", "2", "derived", "from", "severity,", "legal_threat"]
    # The JSON keeps listing it apart from the rounds.
    data = json.loads(runner.invoke(app, ["plan", str(path), "--json"]).stdout)
    assert data["derived"] == ["needs_human"]


def test_the_plan_table_names_an_options_by_parent(monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    result = runner.invoke(app, ["plan", "clinc150_hierarchical"])
    assert result.exit_code == 0, result.output
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    at = next(i for i, line in enumerate(lines) if " intent " in line)
    assert lines[at].split() == ["1", "1", "intent", "choice", "150", "options", "by", "domain"]
    assert lines[at + 1].split() == ["mixed", "over", "domain's", "top", "3"]


def test_bytes_of_a_split_character_are_written_as_byte_escapes():
    emoji = "😀".encode()
    assert readable_bytes(b' "' + emoji[:2]) == ' "<0xF0><0x9F>'
    assert readable_bytes(emoji[2:] + b'"') == '<0x98><0x80>"'
    assert readable_bytes("añ😀".encode()) == "añ😀"
    assert readable_bytes(b"\xff") == "<0xFF>"


def _byte_level_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from decisionflow.compiler.tokens import bytes_to_unicode

    vocab = {character: index for index, character in enumerate(bytes_to_unicode().values())}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def test_tokens_that_split_a_character_are_shown_by_their_bytes():
    tokenizer = _byte_level_tokenizer()
    ids = tokenizer(' "😀"', add_special_tokens=False)["input_ids"]
    assert len(ids) == 7  # one token per byte
    assert "\ufffd" in tokenizer.decode(ids[:4])  # what the token view used to show
    assert token_text(tokenizer, ids[:4]) == ' "<0xF0><0x9F>'
    assert token_text(tokenizer, ids) == ' "😀"'


class _ByteFallback:
    """A sentencepiece-style vocabulary whose byte tokens are named `<0xNN>`."""

    pieces = ("▁a", "<0xF0>", "<0x9F>")
    all_special_ids = ()

    def convert_ids_to_tokens(self, ids):
        return [self.pieces[i] for i in ids]


def test_byte_fallback_tokens_read_the_same_way():
    assert token_text(_ByteFallback(), [0, 1, 2]) == " a<0xF0><0x9F>"


@pytest.mark.model
def test_plan_tokens_shows_the_bytes_of_an_emoji_row_end(tmp_path):
    path = tmp_path / "emoji.yaml"
    path.write_text('name: emoji\nfields:\n  mood: {kind: choice, question: The mood, options: ["😀", "😢", "😡"]}\n')
    result = runner.invoke(app, ["plan", str(path), "--tokens", "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["rounds"][0]["rows"][0]
    assert "\ufffd" not in row["row_ends"] and row["row_ends"].endswith("<0xF0><0x9F><0x98>")
    table = runner.invoke(app, ["plan", str(path), "--tokens"])
    assert "<0xF0><0x9F><0x98>" in table.stdout and "1 forward pass," in table.stdout


# The docs and --help


def _options(command: str) -> list[str]:
    click_app = typer.main.get_command(app)
    params = click_app.commands[command].params  # type: ignore[attr-defined]
    return [name for p in params for name in p.opts if name.startswith("--") and name != "--help"]


@pytest.mark.parametrize("command, doc", [
    ("validate", "cli.md"), ("plan", "cli.md"), ("run", "cli.md"),
    ("serve", "serving.md"), ("eval", "evaluation.md"), ("calibrate", "evaluation.md"), ("fit", "fitting.md"),
    ("check-model", "cli.md"), ("tune", "tuning.md"),
])
def test_every_option_of_a_command_is_in_its_doc(command, doc):
    text = (DOCS / doc).read_text(encoding="utf-8")
    missing = [name for name in _options(command) if not re.search(re.escape(name) + r"(?![a-z-])", text)]
    assert missing == [], f"{doc} does not mention {missing} of `decisionflow {command}`"


def test_the_validate_example_in_the_docs_is_what_validate_prints(tmp_path, monkeypatch):
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    source = re.search(r"With this `broken.yaml`:\n\n```yaml\n(.*?)```", text, re.DOTALL).group(1)
    shown = re.search(r"\$ decisionflow validate broken.yaml\n(.*?)\$ echo", text, re.DOTALL).group(1).splitlines()
    monkeypatch.chdir(tmp_path)
    Path("broken.yaml").write_text(source)
    result = runner.invoke(app, ["validate", "broken.yaml"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == shown


def test_every_command_taking_a_rubric_says_shipped_names_work():
    click_app = typer.main.get_command(app)
    for name, command in click_app.commands.items():  # type: ignore[attr-defined]
        for param in command.params:
            if param.metavar == "RUBRIC":
                assert "shipped workflow" in (param.help or ""), name


def test_serve_refuses_an_unknown_log_level_before_loading_anything():
    result = runner.invoke(app, ["serve", "--log-level", "loud"])
    assert result.exit_code == 2
    assert "loud" in result.output


@pytest.mark.parametrize("args", [
    ["calibrate", "sentiment", "--data", "rows.csv"],
    ["calibrate", "sentiment", "--output", "c.json"],
    ["calibrate", "sentiment", "--data", "rows.csv", "--output", "c.json", "--min-mass", "0.1", "--fit-min-mass"],
])
def test_calibrate_usage_errors_are_one_error_line(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.csv").write_text("text,sentiment\ngreat,positive\n")
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output


@pytest.mark.parametrize("args, message", [
    (["eval", "sentiment", "--data", "rows.csv", "--out", "a_file"], "error: --out a_file is a file; give a folder"),
    (["eval", "sentiment", "--data", "rows.csv", "--out", "a_file/sub"], "error: --out a_file/sub: cannot be created, a_file is a file"),
    (["calibrate", "sentiment", "--data", "rows.csv", "--output", "a_folder"], "error: --output a_folder is a folder; give a file name"),
    (["bench", "--out", "a_file", "--workloads", "model_routing_route"], "error: --out a_file is a file; give a folder"),
])
def test_an_output_that_cannot_be_written_is_refused_before_any_work(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.csv").write_text("text,sentiment\ngreat,positive\n")
    (tmp_path / "a_file").write_text("keep me\n")
    (tmp_path / "a_folder").mkdir()
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [message + (" (it is created when missing)" if "give a folder" in message else "")]
    assert (tmp_path / "a_file").read_text() == "keep me\n"


def test_bench_names_the_known_workloads_when_one_is_unknown():
    result = runner.invoke(app, ["bench", "--workloads", "model_routing_route,typo", "--methods", "decisionflow"])
    assert result.exit_code == 2
    assert "unknown workload 'typo'" in result.output and "model_routing_route" in result.output


@pytest.mark.parametrize("option, given, says", [
    ("--methods", "", "names no method"),
    ("--methods", " , ", "names no method"),
    ("--methods", "decisionflow,typo", "unknown method 'typo'"),
    ("--workloads", "", "names no workload"),
])
def test_bench_refuses_an_empty_or_unknown_list_instead_of_running_everything(option, given, says):
    others = ["--workloads", "model_routing_route"] if option == "--methods" else ["--methods", "decisionflow"]
    result = runner.invoke(app, ["bench", option, given, *others])
    assert result.exit_code == 2
    assert says in " ".join(result.output.split()) and "decisionflow" in result.output


def test_plan_keeps_every_dependency_in_a_narrow_terminal_or_a_pipe():
    from typer.testing import CliRunner

    from decisionflow.cli import app

    rubric = Path(__file__).resolve().parents[2] / "workflows" / "support_triage.yaml"
    result = CliRunner().invoke(app, ["plan", str(rubric)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    for dependency in ("after customer_segment, churn_risk", "when production_affected in [true]",
                       "after primary_department, severity"):
        assert dependency in result.stdout
