"""Bring your own model: sixteen decoder families beyond the engine's own decoder path, each a tiny random
model built offline (`tiny_models`), served through its own forward (`model_forward`) with answers equal
to one plain forward of the model per branch, and run through every command: `check-model`, `run`, `fit`
(a head fitted and applied), `eval` and `serve`'s rubric route; float32 and bfloat16."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_client import Client, running_server  # noqa: E402
from tiny_models import FAMILIES, WINDOW, build  # noqa: E402

from decisionflow.cli import app  # noqa: E402
from decisionflow.errors import ContextLengthError  # noqa: E402
from decisionflow.runtime.engine import Engine  # noqa: E402
from decisionflow.runtime.heads.fitted import Heads  # noqa: E402
from decisionflow.runtime.model.model_check import CHECK_RUBRIC, check_model  # noqa: E402
from decisionflow.serve import RubricRegistry  # noqa: E402

pytestmark = pytest.mark.model

RUBRIC = """\
name: tagged
instructions: Read one short note.
fields:
  topic:
    kind: choice
    question: What the note is about
    options: {billing_and_invoices: charges, billing_disputes: contested charges, shipping: parcels}
  code:
    kind: choice
    question: Which code the note carries
    options: [k1, k2]
  urgent: {kind: boolean, question: Whether it is urgent, after: [code]}
"""
# A code that follows one word, said eight times at the start of the text: a head on the pass's hidden
# states of a random model learns it (cross-validated above zero-shot on every family here; with the word
# said once, some families' random states carry too little of it), zero-shot cannot.
ROWS = [{"text": f"{(word + ' ') * 8}note {n}: the matter of {thing}", "code": code}
        for n, thing in enumerate(["a parcel", "an invoice", "a refund", "a courier", "a charge", "a box", "a bill",
                                   "a label", "a receipt", "a delivery", "a payment", "a return"])
        for word, code in (("alpha", "k1"), ("omega", "k2"))]
BFLOAT16_FAMILIES = ("gemma2", "gpt2", "mixtral", "olmo2")
"""The commands in bfloat16 too for these: soft-capping, learned positions, experts, post-norms."""


@pytest.fixture(scope="session")
def family_folders(tokenizer, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {family: build(family, root / family, tokenizer) for family in FAMILIES}


@pytest.fixture(scope="session")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tagged")
    (folder / "tagged.yaml").write_text(RUBRIC, encoding="utf-8")
    with (folder / "rows.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "code"])
        writer.writeheader()
        writer.writerows(ROWS)
    return folder


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_is_served_exactly_through_its_own_forward(family_folders, family, dtype):
    engine = Engine.load(str(family_folders[family]), dtype=dtype, persist_prefixes=False)
    assert engine.backend.path == "model-forward"
    report = check_model(engine)
    assert report.exact, report.to_dict()
    if dtype == "float32":
        assert all(f.agree for f in report.fields), report.to_dict()
        assert max(f.max_difference for f in report.fields) < 1e-4


def test_the_check_compares_distributions_that_a_wrong_mask_would_move(family_folders):
    """The tiny models' answers are far from uniform, so the check can fail: a reference that reads every
    branch without its ancestors (a wrong mask) is off by far more than the tolerance."""
    from decisionflow.runtime.passes.model_forward import PlainForwardBackend

    engine = Engine.load(str(family_folders["gemma2"]), dtype="float32", persist_prefixes=False)
    decision = engine.decide(CHECK_RUBRIC, "a note")
    spread = max(max(f.raw_probabilities.values()) - min(f.raw_probabilities.values())
                 for f in decision.fields.values() if f.raw_probabilities)
    assert spread > 0.05

    class Forgetful(PlainForwardBackend):
        def run_pass_with_features(self, prefix, contexts, packed, read_positions, *args, **kwargs):
            packed.parents[:] = [-1 if parent >= 0 else parent for parent in packed.parents]
            return super().run_pass_with_features(prefix, contexts, packed, read_positions, *args, **kwargs)

    import decisionflow.runtime.model.model_check as model_check

    original = model_check.PlainForwardBackend
    model_check.PlainForwardBackend = Forgetful
    try:
        report = check_model(engine)
    finally:
        model_check.PlainForwardBackend = original
    assert not report.exact


@pytest.mark.parametrize("family", ["gemma2", "gemma3_text"])
def test_a_sliding_window_model_refuses_a_request_past_its_window(family_folders, family):
    engine = Engine.load(str(family_folders[family]), dtype="float32", persist_prefixes=False)
    assert engine.backend.window == WINDOW
    with pytest.raises(ContextLengthError, match=rf"needs \d+ positions, but the model's sliding-window layers see {WINDOW}"):
        engine.decide(CHECK_RUBRIC, "word " * 600)


def test_check_model_prints_every_field_and_exits_by_the_tolerance(family_folders):
    result = invoke("check-model", family_folders["gpt2"], "--dtype", "float32")
    assert result.exit_code == 0, result.output
    for word in ("team", "refund_requested", "severity", "escalate", "model-forward", "exact within 0.001"):
        assert word in result.stdout
    strict = invoke("check-model", family_folders["gpt2"], "--dtype", "bfloat16", "--tolerance", "0", "--json")
    report = json.loads(strict.stdout)
    assert report["path"] == "model-forward" and report["dtype"] == "bfloat16" and len(report["fields"]) == 4
    assert strict.exit_code == (0 if report["exact"] else 1)


@pytest.mark.parametrize(("family", "dtype"), [*((f, "float32") for f in FAMILIES), *((f, "bfloat16") for f in BFLOAT16_FAMILIES)])
def test_every_command_runs_a_family(family_folders, project, family, dtype, tmp_path):
    model = family_folders[family]
    rubric = tmp_path / "tagged.yaml"
    rubric.write_text((project / "tagged.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    rows = project / "rows.csv"
    common = ["--model", model, "--dtype", dtype]

    ran = invoke("run", rubric, "--text", "omega " * 8 + "note 99: the matter of a parcel", "--json", *common)
    assert ran.exit_code == 0, ran.output
    decision = json.loads(ran.stdout)
    assert decision["stats"]["path"] == "model-forward" and decision["stats"]["forward_passes"] >= 2
    assert set(decision["value"]) == {"topic", "code", "urgent"}

    # Hidden-state heads only: what this family's own forward feeds a head is what is under test.
    fitted = invoke("fit", rubric, "--data", rows, "--label", "code=code", "--significance", "1", "--no-words", *common)
    assert fitted.exit_code == 0, fitted.output
    heads = Heads.load(Heads.path_for(rubric))
    assert heads.fitted_fields == ["code"]

    applied = invoke("run", rubric, "--text", "omega " * 8 + "note 99: the matter of a parcel", "--json", *common)
    assert applied.exit_code == 0, applied.output
    assert json.loads(applied.stdout)["fields"]["code"]["method"] == "fitted"

    scored = invoke("eval", rubric, "--data", rows, "--field", "code", "--rows", "0:8", *common)
    assert scored.exit_code == 0, scored.output
    summary = json.loads(scored.stdout)
    assert summary["readout"] == "fitted" and summary["n"] == 8

    engine = Engine.load(str(model), dtype=dtype, persist_prefixes=False)
    with running_server(engine, RubricRegistry.from_folder(tmp_path)) as port:
        reply = Client(port).post("/v1/rubrics/tagged/decide", {"text": "alpha " * 8 + "note 99: the matter of a bill"})
    assert reply.status == 200, reply.body
    assert reply.body["fields"]["code"]["method"] == "fitted" and reply.body["stats"]["path"] == "model-forward"
