"""Fitted heads in the server: a heads file beside a served rubric answers its fitted fields on the rubric's
route, `/v1/rubrics` says which, heads that cannot be read or were fitted for something else stop the server
at startup naming the file, and `--no-heads` serves zero-shot.

The heads are fitted once for the module, on a rubric whose answers are opaque names (`red`, `green`, `blue`
for billing, shipping and login messages): zero-shot is near chance there and a head is kept.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from serve_client import DESK, ROOT, TICKETS, Client, running_server, stand_in_engine
from serve_client import DESK_ROWS as ROWS
from typer.testing import CliRunner

from decisionflow.cli import app as cli_app
from decisionflow.errors import RubricError
from decisionflow.fitting import fit_heads
from decisionflow.runtime.result import FITTED_METHODS
from decisionflow.serve import RubricRegistry, create_app
from decisionflow.serve.batcher import MicroBatcher
from decisionflow.serve.metrics import Metrics
from decisionflow.serve.settings import Batching
from decisionflow.spec import load_rubric

runner = CliRunner()

TEXTS = ["I was charged two times for one order, refund me", "Where is my package? It is a week late",
         "I keep getting locked out when I sign in"]


def write_desk(folder: Path, text: str = DESK) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "desk.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def fitted_heads_file(engine, tmp_path_factory) -> Path:
    """`desk.heads.safetensors` from a real fit (kept apart; tests copy it where they need it)."""
    folder = tmp_path_factory.mktemp("fit")
    rubric = load_rubric(write_desk(folder))
    result = fit_heads(engine, rubric, [(text, {"queue": label}) for label, texts in ROWS.items() for text in texts])
    info = result.heads.metadata.fields["queue"]
    assert info.readout == "fitted", f"the fit kept zero-shot for `queue` ({info.candidates}); the test needs a head"
    return result.heads.save(folder / "desk.heads.safetensors")


@pytest.fixture(scope="module")
def served_folder(fitted_heads_file, tmp_path_factory) -> Path:
    """`desk.yaml` with its heads beside it, and `sentiment.yaml` without."""
    folder = tmp_path_factory.mktemp("served")
    write_desk(folder)
    shutil.copy(fitted_heads_file, folder / "desk.heads.safetensors")
    shutil.copy(ROOT / "workflows" / "sentiment.yaml", folder / "sentiment.yaml")
    return folder


@pytest.fixture(scope="module")
def port(engine, served_folder):
    with running_server(engine, served_folder) as bound:
        yield bound


@pytest.fixture
def client(port):
    connection = Client(port)
    yield connection
    connection.close()


def invoke_serve(monkeypatch, engine, *args: str):
    """`decisionflow serve --port 0 ARGS` with `engine` as the loaded model; returns (result, engines loaded)."""
    loaded = []

    def load_engine(*_, **__):
        loaded.append(1)
        return engine

    def serve(app, sock, *, on_started=None, **_):
        on_started()
        sock.close()

    monkeypatch.setattr("decisionflow.cli.serve.load_engine", load_engine)
    monkeypatch.setattr("decisionflow.serve.server.serve", serve)
    return runner.invoke(cli_app, ["serve", "--port", "0", *args]), loaded


# -- the rubric route applies the heads -------------------------------------------------------------------


@pytest.mark.model
def test_the_fitted_field_is_answered_by_its_head_and_the_others_zero_shot(client, engine, served_folder):
    from decisionflow.runtime.heads.fitted import Heads

    heads = Heads.load(served_folder / "desk.heads.safetensors")
    rubric = load_rubric(served_folder / "desk.yaml")
    reply = client.post("/v1/rubrics/desk/decide", {"text": TEXTS[0]})
    assert reply.status == 200, reply.body
    fields = reply.body["fields"]
    assert fields["queue"]["method"] in FITTED_METHODS
    assert fields["refund"]["method"] not in FITTED_METHODS
    # The engine's own answer under the same heads, to the fp32 packing tolerance.
    expected = engine.decide(rubric, TEXTS[0], heads=heads)
    assert fields["queue"]["value"] == expected.fields["queue"].value
    assert fields["queue"]["probabilities"] == pytest.approx(expected.fields["queue"].probabilities, abs=1e-5)
    zero_shot = engine.decide(rubric, TEXTS[0])
    assert zero_shot.fields["queue"].method not in FITTED_METHODS
    assert fields["queue"]["probabilities"] != pytest.approx(zero_shot.fields["queue"].probabilities, abs=1e-3)


@pytest.mark.model
def test_every_input_of_a_texts_request_gets_the_head(client):
    reply = client.post("/v1/rubrics/desk/decide", {"texts": TEXTS})
    assert reply.status == 200, reply.body
    results = reply.body["results"]
    assert all(r["fields"]["queue"]["method"] in FITTED_METHODS for r in results) and len(results) == len(TEXTS)
    # Each answer is the one the input gets alone.
    for text, batched in zip(TEXTS, results):
        alone = client.post("/v1/rubrics/desk/decide", {"text": text}).body
        assert batched["fields"]["queue"]["probabilities"] == pytest.approx(alone["fields"]["queue"]["probabilities"], abs=1e-5)


@pytest.mark.model
def test_a_rubric_without_heads_and_systemone_stay_zero_shot(client):
    reply = client.post("/v1/rubrics/sentiment/decide", {"text": "a gorgeous, witty film"})
    assert reply.status == 200, reply.body
    assert all(field["method"] not in FITTED_METHODS for field in reply.body["fields"].values())
    # The same question as the fitted field, asked over /v1/systemone: a rubric of the request's own.
    questions = {"queue": {"type": "choice", "instructions": "Which queue the message goes to",
                           "criteria": {"red": None, "green": None, "blue": None}}}
    reply = client.post("/v1/systemone", {"state": TEXTS[0], "questions": questions})
    assert reply.status == 200, reply.body
    assert set(reply.body["answers"]["queue"]["probabilities"]) == {"red", "green", "blue"}


@pytest.mark.model
def test_the_listing_says_which_fields_are_fitted(client):
    listed = {entry["name"]: entry for entry in client.get("/v1/rubrics").body["rubrics"]}
    desk, sentiment = listed["desk"], listed["sentiment"]
    assert desk["fitted"] == ["queue"]
    assert set(desk["heads"]) == {"queue"}
    assert desk["heads"]["queue"]["readout"] == "fitted"
    assert desk["heads"]["queue"]["rows"] == sum(map(len, ROWS.values()))
    assert set(desk["heads"]["queue"]["candidates"]) == {"zero_shot", "fitted", "ngram", "fused"}
    assert sentiment["fitted"] == [] and sentiment["heads"] is None
    assert desk["calibrated"] is False and sentiment["calibrated"] is False


# -- heads that do not fit are refused at startup --------------------------------------------------------


def _tampered(fitted_heads_file: Path, target: Path, **changes) -> Path:
    from decisionflow.runtime.heads.fitted import Heads

    heads = Heads.load(fitted_heads_file)
    return Heads(heads.metadata.model_copy(update=changes), heads.heads, ngram=heads.ngram, lexicon=heads.lexicon,
                 input_mean=heads.input_mean).save(target)


MISFITS = {
    # what sits beside which rubric -> what the refusal says
    "another rubric": ("tickets", None, "the heads are for rubric 'desk', not 'tickets'"),
    "another option set": ("desk", DESK.replace("[red, green, blue]", "[red, green, blue, yellow]"),
                           "the head of field 'queue' was fitted for other answers (the rubric adds yellow); fit again"),
    "another version of the rubric": ("desk", DESK.replace("Which queue the message goes to", "Which queue handles it"),
                                      "the heads were fitted for another version of rubric 'desk'"),
    "another model": ("desk", None, "the heads were fitted on another model, SomeOtherModel"),
}


@pytest.mark.model
@pytest.mark.parametrize("case", list(MISFITS))
def test_heads_fitted_for_something_else_stop_the_server_naming_the_file(case, engine, fitted_heads_file, tmp_path, monkeypatch):
    stem, yaml_text, said = MISFITS[case]
    folder = tmp_path / "rubrics"
    if stem == "tickets":
        folder.mkdir()
        (folder / "tickets.yaml").write_text(TICKETS, encoding="utf-8")
    else:
        write_desk(folder, yaml_text or DESK)
    heads_path = folder / f"{stem}.heads.safetensors"
    if case == "another model":
        _tampered(fitted_heads_file, heads_path, model="0" * 64, model_name="SomeOtherModel")
    else:
        shutil.copy(fitted_heads_file, heads_path)

    registry = RubricRegistry.from_folder(folder)  # the file reads; whether it fits needs the model
    with pytest.raises(RubricError) as refused:
        create_app(engine, registry)
    (problem,) = refused.value.problems
    assert problem.source == str(heads_path)
    assert said in problem.message, problem.message

    result, loaded = invoke_serve(monkeypatch, engine, "--rubrics", str(folder))
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{heads_path}: ") and said in lines[0], result.output
    assert "serving http://" not in result.output


@pytest.mark.parametrize("content, said", [
    (b"\x00\x01 not a safetensors file at all", "cannot read the heads file"),
    (None, "not a heads file (no decisionflow_heads metadata)"),
])
def test_a_heads_file_that_cannot_be_read_is_refused_before_the_model_loads(content, said, tmp_path, monkeypatch):
    folder = tmp_path / "rubrics"
    write_desk(folder)
    shutil.copy(ROOT / "workflows" / "sentiment.yaml", folder / "sentiment.yaml")
    heads_path = folder / "desk.heads.safetensors"
    if content is None:
        import torch
        from safetensors.torch import save_file

        save_file({"queue.weight": torch.zeros(3, 4)}, str(heads_path))  # safetensors, but not from `fit`
    else:
        heads_path.write_bytes(content)

    with pytest.raises(RubricError) as refused:
        RubricRegistry.from_folder(folder)
    (problem,) = refused.value.problems
    assert problem.source == str(heads_path) and said in problem.message, problem

    result, loaded = invoke_serve(monkeypatch, stand_in_engine(), "--rubrics", str(folder))
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{heads_path}: ") and said in lines[0], result.output
    assert loaded == []  # refused before the model loads

    # --no-heads does not read the file: the folder is served zero-shot.
    result, loaded = invoke_serve(monkeypatch, stand_in_engine(), "--rubrics", str(folder), "--no-heads")
    assert result.exit_code == 0, result.output
    assert "heads:" not in result.output and "2 rubrics: desk, sentiment" in result.output


def test_an_unreadable_heads_file_is_listed_with_the_other_problems_of_the_folder(tmp_path):
    write_desk(tmp_path, DESK.replace("kind: choice", "kind: choise"))  # a broken rubric...
    (tmp_path / "desk.heads.safetensors").write_bytes(b"garbage")  # ...and a broken heads file beside it
    (tmp_path / "tickets.yaml").write_text(TICKETS, encoding="utf-8")
    (tmp_path / "tickets.heads.safetensors").write_bytes(b"")
    with pytest.raises(RubricError) as refused:
        RubricRegistry.from_folder(tmp_path)
    sources = [problem.source for problem in refused.value.problems]
    assert str(tmp_path / "desk.yaml") in sources
    assert sources.count(str(tmp_path / "desk.heads.safetensors")) == 1
    assert sources.count(str(tmp_path / "tickets.heads.safetensors")) == 1


def test_a_rubric_file_given_for_the_folder_is_refused_saying_so(tmp_path):
    (tmp_path / "tickets.yaml").write_text(TICKETS, encoding="utf-8")
    with pytest.raises(RubricError, match="is a file; give the folder of YAML rubrics it is in"):
        RubricRegistry.from_folder(tmp_path / "tickets.yaml")
    with pytest.raises(RubricError, match="rubric folder not found"):
        RubricRegistry.from_folder(tmp_path / "elsewhere")


def test_a_calibration_for_another_rubric_is_named_as_the_file_to_mend(tmp_path):
    (tmp_path / "tickets.yaml").write_text(TICKETS, encoding="utf-8")
    (tmp_path / "tickets.calibration.json").write_text('{"rubric": "other", "fields": {}}', encoding="utf-8")
    with pytest.raises(RubricError) as refused:
        RubricRegistry.from_folder(tmp_path)
    [problem] = refused.value.problems
    assert problem.source == str(tmp_path / "tickets.calibration.json")
    assert problem.message.startswith("the calibration is for rubric 'other'")


# -- --no-heads, and the line saying which heads are applied --------------------------------------------


@pytest.mark.model
def test_serve_says_which_heads_it_applies_and_no_heads_leaves_them_out(engine, served_folder, monkeypatch):
    heads_path = served_folder / "desk.heads.safetensors"
    result, _ = invoke_serve(monkeypatch, engine, "--rubrics", str(served_folder))
    assert result.exit_code == 0, result.output
    assert f"heads: {heads_path} (desk; fitted: queue)" in result.output.splitlines()

    result, _ = invoke_serve(monkeypatch, engine, "--rubrics", str(served_folder), "--no-heads")
    assert result.exit_code == 0, result.output
    assert "heads:" not in result.output


@pytest.mark.model
def test_without_heads_the_route_answers_zero_shot(engine, served_folder):
    registry = RubricRegistry.from_folder(served_folder, heads=False)
    assert registry.get("desk").heads is None
    listed = {entry["name"]: entry for entry in registry.describe()}
    assert listed["desk"]["fitted"] == [] and listed["desk"]["heads"] is None
    with running_server(engine, registry) as zero_shot_port:
        client = Client(zero_shot_port)
        reply = client.post("/v1/rubrics/desk/decide", {"text": TEXTS[1]})
        client.close()
    assert reply.status == 200, reply.body
    assert all(field["method"] not in FITTED_METHODS for field in reply.body["fields"].values())
    expected = engine.decide(load_rubric(served_folder / "desk.yaml"), TEXTS[1])
    assert reply.body["fields"]["queue"]["probabilities"] == pytest.approx(expected.fields["queue"].probabilities, abs=1e-5)


# -- the batcher hands the heads to the engine ------------------------------------------------------------


class RecordingEngine:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def decide_each(self, target, payloads, *, checkpoint=None, **options):
        assert callable(checkpoint)  # the batcher's stop rule rides along with every call
        self.calls.append({"payloads": list(payloads), **options})
        return [(target, p) for p in payloads]


def test_the_batcher_passes_a_groups_heads_and_none_where_there_are_none():
    async def scenario():
        engine = RecordingEngine()
        batcher = MicroBatcher(engine, Batching(max_wait_ms=20), max_queue=10, metrics=Metrics())
        await batcher.start()
        heads = object()
        await asyncio.gather(
            batcher.decide("fitted", "desk", "a", cost=1, heads=heads),
            batcher.decide("fitted", "desk", "b", cost=1, heads=heads),
        )
        await batcher.decide("plain", "sentiment", "c", cost=1)
        await batcher.stop()
        return engine.calls, heads

    calls, heads = asyncio.run(scenario())
    assert calls == [{"payloads": ["a", "b"], "calibration": None, "heads": heads},
                     {"payloads": ["c"], "calibration": None}]


def test_a_rubric_whose_examples_fill_the_context_stops_the_server_naming_it(engine, tmp_path, monkeypatch):
    folder = tmp_path / "rubrics"
    folder.mkdir()
    long_text = " ".join(["The parcel arrived late and the invoice listed an extra charge."] * 60)
    examples = "".join(f"  - text: {long_text}\n    answers: {{queue: billing}}\n" for _ in range(12))
    crowded = folder / "crowded.yaml"
    crowded.write_text("name: crowded\nfields:\n  queue: {kind: choice, question: Which queue, options: [billing, shipping]}\n"
                       f"examples:\n{examples}", encoding="utf-8")
    (folder / "tickets.yaml").write_text(TICKETS, encoding="utf-8")
    with pytest.raises(RubricError) as refused:
        create_app(engine, RubricRegistry.from_folder(folder))
    (problem,) = refused.value.problems  # the other rubric fits
    assert problem.source == str(crowded)
    assert "before any input, but the model's context holds" in problem.message and "in-context examples" in problem.message
    result, _ = invoke_serve(monkeypatch, engine, "--rubrics", str(folder))
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{crowded}: "), result.output
