"""`decisionflow tune`: LoRA adapters trained on the readout the engine serves, and served exactly by merging.

With the bundled model: the training path's log-probabilities (adapter disabled) are the engine's own readout;
an adapter merged into the engine answers as peft's merged model does through a plain forward; a saved adapter
is refused on another model; the command line tunes, saves beside the rubric, and `run` merges what it saved.
A tiny random-weight model checks the merge against peft's in bfloat16 (never answer quality).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
import torch
from suite_support import FIXTURES
from typer.testing import CliRunner

from decisionflow.cli import app
from decisionflow.errors import ModelError
from decisionflow.spec.yaml_rubric import load_rubric

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_client import running_server  # noqa: E402

CODE = {"negative": "k1", "positive": "k2"}
REVIEW_YAML = """\
name: review
instructions: Classify one sentence from a movie review.
answer_format: labels
pin_first: false
debias: none
fields:
  sentiment:
    kind: choice
    question: Whether the sentence is negative or positive about the film
    options: [negative, positive]
  code:
    kind: choice
    question: Which code the sentence gets
    options: [k1, k2]
    after: sentiment
"""
TEXT = "a gorgeous , witty , seductive movie ."


def labelled(count: int) -> list[dict[str, str]]:
    with (FIXTURES / "sst2_sample.csv").open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))[:count]
    return [{"text": r["text"], "sentiment": r["label"], "code": CODE[r["label"]]} for r in rows]


def project(folder: Path, count: int = 8) -> tuple[Path, Path]:
    rubric = folder / "review.yaml"
    rubric.write_text(REVIEW_YAML, encoding="utf-8")
    data = folder / "rows.csv"
    with data.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "sentiment", "code"])
        writer.writeheader()
        writer.writerows(labelled(count))
    return rubric, data


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


def perturbed(model, seed: int = 1, size: float = 0.05) -> None:
    """Give a fresh peft model's LoRA B matrices (zero at the start) random values, so the adapter does something."""
    from peft.tuners.lora import LoraLayer

    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, LoraLayer):
            weight = module.lora_B["default"].weight
            with torch.no_grad():
                weight.copy_(torch.randn(weight.shape, generator=generator) * size)


@pytest.fixture(scope="module")
def review(tmp_path_factory):
    return load_rubric(project(tmp_path_factory.mktemp("review"))[0])


def test_training_log_probabilities_are_the_engines_readout(engine, review):
    """Adapter disabled, the training path's answer distributions (gold parents written) equal the engine's own
    readout of the same rows (`read_features`, which writes the gold parents too), in float32 within 1e-4."""
    from decisionflow.fitting.examples import examples_of
    from decisionflow.fitting.features import parents_to_write
    from decisionflow.fitting.tuning import TrainingBackend, answer_logprobs, training_model

    rows = labelled(2)
    examples, _ = examples_of(review, [(r["text"], {"sentiment": r["sentiment"], "code": r["code"]}) for r in rows])
    model = training_model(engine, rank=4, alpha=8, targets=("q_proj", "v_proj"), seed=0)
    perturbed(model)  # an adapter that changes answers, disabled below
    compiled, plan = engine.compile(review)
    with torch.no_grad(), model.disable_adapter():
        terms = answer_logprobs(TrainingBackend(model.get_base_model()), compiled, plan, examples)
    outcomes, _ = engine.read_features(review, [e.text for e in examples], layers=(-1,),
                                       write=[parents_to_write(review, e.labels) for e in examples])
    assert {(request, name) for request, name, _, _ in terms} == {(r, n) for r in range(2) for n in ("sentiment", "code")}
    for request, name, scores, gold in terms:
        served = outcomes[request].fields[name].probabilities
        assert outcomes[request].fields[name].debias == "none"
        assert scores.exp().tolist() == pytest.approx([served[label] for label in review.fields[name].labels], abs=1e-4)
        assert review.fields[name].labels[gold] == examples[request].labels[name]
    with torch.no_grad():  # enabled, the same path reads other probabilities
        adapted = answer_logprobs(TrainingBackend(model.get_base_model()), compiled, plan, examples)
    assert max(abs(a[2].exp() - b[2].exp()).max().item() for a, b in zip(adapted, terms)) > 1e-3


def test_block_attention_trains_what_the_packed_pass_trains(transformers_engine, review):
    """The training path's attention per request block (each row's tokens against the prefix, its own context and its
    own tokens) gives the answer log-probabilities and the gradients of the packed pass with its full 4-D mask, with an
    adapter that changes answers: two fields in two rounds (the second reads the first's context) and a BANKING77
    row batch (77 answers, one round). The engine's own model keeps its attention (the training copy's configuration
    is its own)."""
    from suite_support import ROOT

    from decisionflow.fitting.examples import examples_of
    from decisionflow.fitting.tuning import BLOCK_ATTENTION, TrainingBackend, answer_logprobs, training_model

    banking = load_rubric(ROOT / "workflows" / "banking77_intent.yaml")
    queries = ["How can I activate my new card?", "Why is my beneficiary not allowed?", "my top up is still pending"]
    intents = ["activate_my_card", "beneficiary_not_allowed", "pending_top_up"]
    cases = [
        (review, [(r["text"], {"sentiment": r["sentiment"], "code": r["code"]}) for r in labelled(3)]),
        (banking, [(text, {"intent": intent}) for text, intent in zip(queries, intents)]),
    ]
    model = training_model(transformers_engine, rank=4, alpha=8, targets=("q_proj", "v_proj"), seed=0)
    perturbed(model)
    parameters = [p for p in model.parameters() if p.requires_grad]
    for rubric, rows in cases:
        examples, _ = examples_of(rubric, rows)
        compiled, plan = transformers_engine.compile(rubric)
        found = {}
        for blocks in (True, False):
            backend = TrainingBackend(model.get_base_model(), blocks=blocks)
            assert backend.blocks is blocks
            terms = answer_logprobs(backend, compiled, plan, examples)
            model.zero_grad()
            (-torch.stack([scores[gold] for _, _, scores, gold in terms]).mean()).backward()
            found[blocks] = ([(r, n, s.detach()) for r, n, s, _ in terms], [p.grad.clone() for p in parameters])
        (blocked, blocked_grads), (packed, packed_grads) = found[True], found[False]
        assert [(r, n) for r, n, _ in blocked] == [(r, n) for r, n, _ in packed] and len(packed) == len(examples) * len(
            {n for e in examples for n in e.labels})
        for (_, _, a), (_, _, b) in zip(blocked, packed):
            assert a.exp().tolist() == pytest.approx(b.exp().tolist(), abs=1e-5)
        for a, b in zip(blocked_grads, packed_grads):
            assert (a - b).abs().max() <= 1e-4 * b.abs().max() + 1e-9
    assert model.config._attn_implementation == BLOCK_ATTENTION
    assert transformers_engine.base_loaded.model.config._attn_implementation != BLOCK_ATTENTION
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    assert BLOCK_ATTENTION not in ALL_ATTENTION_FUNCTIONS.keys()  # registered for the training passes only


@pytest.fixture(scope="module")
def random_adapter(engine, review):
    """An adapter that changes answers (B perturbed off zero) and the peft model it came from."""
    from decisionflow.fitting.tuning import adapter_of, training_model

    model = training_model(engine, rank=4, alpha=8, targets=("q_proj", "v_proj"), seed=0)
    perturbed(model)
    return model, adapter_of(model, engine, review, rank=4, alpha=8, targets=("q_proj", "v_proj"), seed=0, rows=0,
                             held_out=0, epochs=1, learning_rate=1e-3)


def test_every_path_and_number_format_reads_the_merged_weights(engine, transformers_engine, bfloat16_engine, review,
                                                               random_adapter):
    """The engine's own decoder (packed), the transformers model on the decoder path and through its own forward,
    in float32, answer alike with the adapter merged; in bfloat16 the same adapter is accepted (the weights'
    fingerprint ignores the number format) and answers close to float32."""
    from decisionflow.runtime.engine import Engine, EngineOptions

    _, adapter = random_adapter
    own = engine.with_adapter(adapter).decide(review, TEXT)
    on_transformers = transformers_engine.with_adapter(adapter)
    forward = Engine(transformers_engine.base_loaded, options=EngineOptions(model_forward=True), adapter=adapter)
    assert forward.backend.path == "model-forward" and on_transformers.backend.path == "decoder"
    half = bfloat16_engine.with_adapter(adapter).decide(review, TEXT)
    for other, tolerance in ((on_transformers.decide(review, TEXT), 1e-4), (forward.decide(review, TEXT), 1e-4), (half, 0.05)):
        for name in review.fields:
            assert other.fields[name].probabilities == pytest.approx(own.fields[name].probabilities, abs=tolerance)
    assert half.stats.dtype == "bfloat16"


def test_a_merged_adapter_answers_as_peft_merged_model_through_a_plain_forward(engine, review, tmp_path):
    from decisionflow.fitting.tuning import adapter_of, training_model
    from decisionflow.runtime.adapter import Adapter
    from decisionflow.runtime.engine import Engine
    from decisionflow.runtime.model.loading import LoadedModel
    from decisionflow.runtime.passes.model_forward import PlainForwardBackend

    model = training_model(engine, rank=4, alpha=8, targets=("q_proj", "v_proj"), seed=0)
    before = {name: weight.clone() for name, weight in engine.loaded.model.state_dict().items() if "q_proj" in name}
    perturbed(model)
    adapter = adapter_of(model, engine, review, rank=4, alpha=8, targets=("q_proj", "v_proj"), seed=0, rows=0,
                         held_out=0, epochs=1, learning_rate=1e-3)
    saved = Adapter.load(adapter.save(tmp_path / "review.adapter.safetensors"))
    assert saved.fingerprint == adapter.fingerprint and saved.metadata.weights == engine.weights_fingerprint
    assert (tmp_path / "review.adapter.json").is_file()
    adapted = engine.with_adapter(saved)
    merged = model.merge_and_unload().eval()
    after = engine.loaded.model.state_dict()
    assert before and all(torch.equal(after[name], weight) for name, weight in before.items()), "merging the training copy changed the engine's model"
    reference = Engine(LoadedModel(merged, engine.tokenizer, "peft merged"), backend=PlainForwardBackend(merged))
    texts = [TEXT]
    base = engine.decide_many(review, texts)
    ours = adapted.decide_many(review, texts)
    theirs = reference.decide_many(review, texts)
    for before, mine, peft_answer in zip(base, ours, theirs):
        for name in review.fields:
            got, want = mine.fields[name].probabilities, peft_answer.fields[name].probabilities
            assert got == pytest.approx(want, abs=1e-4)
        assert any(abs(before.fields[n].probabilities[label] - mine.fields[n].probabilities[label]) > 1e-3
                   for n in review.fields for label in review.fields[n].labels)
    # The adapted engine keys its prefix caches (memory and disk) by the adapter too; the base engine is untouched.
    assert adapted.prefix_store_fingerprint != engine.prefix_store_fingerprint
    assert adapted.model_fingerprint.endswith(saved.fingerprint) and engine.adapter is None
    assert engine.decide(review, TEXT).fields["sentiment"].probabilities == base[0].fields["sentiment"].probabilities


def tiny_llama(dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).to(dtype).eval()


def test_an_adapter_is_refused_on_another_model_in_one_line(engine, review):
    from decisionflow.fitting.tuning import adapter_of, training_model

    model = training_model(engine, rank=2, alpha=4, targets=("v_proj",), seed=0)
    adapter = adapter_of(model, engine, review, rank=2, alpha=4, targets=("v_proj",), seed=0, rows=0, held_out=0,
                         epochs=1, learning_rate=1e-3)
    with pytest.raises(ModelError) as refused:
        adapter.merged(tiny_llama(torch.float32))
    message = str(refused.value)
    assert "tuned on another model" in message and "\n" not in message


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_merge_is_peft_merge_in_both_number_formats(dtype):
    """On a tiny random-weight model (merge arithmetic only): our merged copy's weights are peft's merged weights
    bit for bit, its logits peft's, and the original model keeps its own weights."""
    from peft import LoraConfig, get_peft_model

    from decisionflow.runtime.adapter import Adapter, AdapterMetadata
    from decisionflow.runtime.prefix_store import weights_fingerprint

    base = tiny_llama(dtype)
    original = {name: tensor.clone() for name, tensor in base.state_dict().items()}
    ours_base = tiny_llama(dtype)
    peft_model = get_peft_model(base, LoraConfig(r=2, lora_alpha=6, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    perturbed(peft_model, size=0.5)
    from peft.tuners.lora import LoraLayer

    weights = {name: (m.lora_A["default"].weight.detach().float(), m.lora_B["default"].weight.detach().float())
               for name, m in peft_model.get_base_model().named_modules() if isinstance(m, LoraLayer)}
    metadata = AdapterMetadata(rubric="r", rubric_fingerprint="", model="", weights=weights_fingerprint(ours_base), rank=2,
                               alpha=6, targets=["q_proj", "v_proj"])
    ours = Adapter(metadata, weights).merged(ours_base)
    theirs = peft_model.merge_and_unload()
    for name, tensor in theirs.state_dict().items():
        assert torch.equal(ours.state_dict()[name], tensor), name
    assert all(torch.equal(ours_base.state_dict()[n], t) for n, t in original.items())
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    with torch.no_grad():
        assert torch.equal(ours(input_ids=ids).logits, theirs(input_ids=ids).logits)


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """review.yaml, its rows and the adapter `tune` saved beside it (kept with --keep: a few rows prove nothing)."""
    rubric, data = project(tmp_path_factory.mktemp("tuned"), count=8)
    result = invoke("tune", rubric, "--data", data, "--rank", "4", "--batch-rows", "8", "--learning-rate", "0.01",
                    "--keep", "--json", "--dtype", "float32")
    assert result.exit_code == 0, result.output
    return rubric, data, json.loads(result.stdout)


def test_tune_saves_the_adapter_beside_the_rubric_and_reports_per_field(tuned):
    rubric, _, report = tuned
    path = rubric.with_name("review.adapter.safetensors")
    assert report["saved"] == str(path) and path.is_file() and report["bytes"] == path.stat().st_size
    assert report["kept"] and report["rows"] == 6 and report["held_out"] == 2 and report["steps"] == 1
    assert set(report["fields"]) == {"sentiment", "code"}
    for info in report["fields"].values():
        assert info["rows"] == 2 and 0 <= info["accuracy_base"] <= 1 and 0 <= info["accuracy_adapted"] <= 1
        assert 0 < info["p_value"] <= 1
    assert json.loads(rubric.with_name("review.adapter.json").read_text())["rubric"] == "review"


def test_run_merges_the_adapter_beside_the_rubric_and_no_adapter_leaves_it(tuned):
    rubric, _, _ = tuned
    adapted = invoke("run", rubric, "--text", TEXT, "--json", "--dtype", "float32")
    plain = invoke("run", rubric, "--text", TEXT, "--json", "--no-adapter", "--dtype", "float32")
    assert adapted.exit_code == 0 and plain.exit_code == 0, adapted.output + plain.output
    assert "adapter: " in adapted.stderr and "adapter: " not in plain.stderr
    first, second = json.loads(adapted.stdout), json.loads(plain.stdout)
    assert first["fields"]["code"]["probabilities"] != second["fields"]["code"]["probabilities"]


def test_eval_scores_with_the_adapter_beside_the_rubric(tuned):
    rubric, data, _ = tuned
    result = invoke("eval", rubric, "--data", data, "--field", "code", "--limit", "4", "--dtype", "float32")
    assert result.exit_code == 0, result.output
    assert "adapter: " in result.stderr and json.loads(result.stdout)["n"] == 4


def test_tune_refuses_bad_input_in_one_line(tmp_path, monkeypatch):
    rubric, data = project(tmp_path)
    cases = {
        ("--fields", "mood"): "error: --fields: rubric 'review' has no field 'mood' (fields: sentiment, code)",
        ("--label", "sentiment=nope"): "error: --label sentiment=nope: no column 'nope' (columns: text, sentiment, code)",
    }
    for extra, line in cases.items():
        result = invoke("tune", rubric, "--data", data, *extra)
        assert result.exit_code == 1 and result.stderr.strip().splitlines() == [line]
    bad = tmp_path / "bad.csv"
    bad.write_text("text,sentiment\nfine film,great\n", encoding="utf-8")
    result = invoke("tune", rubric, "--data", bad)
    assert result.exit_code == 1 and result.stderr.strip().splitlines()[0].startswith(
        f"error: {bad}: data row 0: 'great' is not an answer of field 'sentiment'")
    monkeypatch.setitem(__import__("sys").modules, "peft", None)
    result = invoke("tune", rubric, "--data", data)
    assert result.exit_code != 0 and result.stderr.strip().splitlines() == [
        "error: decisionflow tune needs peft: pip install 'decisionflow[tune]' (or pip install 'peft>=0.21')"]


def test_an_adapter_file_for_another_model_is_refused_before_answering(tuned, tmp_path):
    from decisionflow.runtime.adapter import Adapter

    rubric, _, _ = tuned
    adapter = Adapter.load(rubric.with_name("review.adapter.safetensors"))
    adapter.metadata = adapter.metadata.model_copy(update={"weights": "0" * 64})
    other = adapter.save(tmp_path / "other.adapter.safetensors")
    result = invoke("run", rubric, "--text", TEXT, "--adapter", other)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and len(lines) == 1 and "was tuned on another model" in lines[0]


def test_serve_reads_each_rubric_with_its_own_adapter_side_by_side(engine, tuned, tmp_path):
    """A folder with a tuned rubric (its adapter beside it) and an untuned one: requests of both, sent together,
    are answered as an engine with that adapter merged and the engine without one answer them alone."""
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    from suite_support import ROOT

    from decisionflow.runtime.adapter import Adapter

    pytest.importorskip("fastapi")
    import httpx

    rubric, _, _ = tuned
    folder = tmp_path / "rubrics"
    folder.mkdir()
    shutil.copy(rubric, folder / "review.yaml")
    shutil.copy(rubric.with_name("review.adapter.safetensors"), folder / "review.adapter.safetensors")
    shutil.copy(ROOT / "workflows" / "sentiment.yaml", folder / "sentiment.yaml")
    review, sentiment = load_rubric(folder / "review.yaml"), load_rubric(folder / "sentiment.yaml")
    adapted = engine.with_adapter(Adapter.load(folder / "review.adapter.safetensors"))
    texts = [TEXT, "the plot is a dull , lifeless mess .", "an utterly charming and hilarious film ."]
    expected = {("review", text): adapted.decide(review, text).to_dict() for text in texts}
    expected |= {("sentiment", text): engine.decide(sentiment, text).to_dict() for text in texts}
    plain_review = engine.decide(review, TEXT).to_dict()
    assert plain_review["fields"]["code"]["probabilities"] != expected["review", TEXT]["fields"]["code"]["probabilities"]
    with running_server(engine, folder) as port, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
        def ask(key: tuple[str, str]) -> tuple[tuple[str, str], dict]:
            answer = client.post(f"/v1/rubrics/{key[0]}/decide", json={"text": key[1]})
            assert answer.status_code == 200, answer.text
            return key, answer.json()

        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(ask, list(expected) * 2))
        listed = {entry["name"]: entry for entry in client.get("/v1/rubrics").json()["rubrics"]}
        scraped = client.get("/metrics").text
    # The adapted engine's cache is reported in its own families, labelled by the adapter's file.
    adapter_label = 'adapter="review.adapter.safetensors"'
    assert f"decisionflow_adapted_prepared_rubrics{{{adapter_label}}} 1.0" in scraped
    prefix_bytes = [line for line in scraped.splitlines()
                    if line.startswith(f"decisionflow_adapted_prepared_prefix_bytes{{{adapter_label}}}")]
    assert len(prefix_bytes) == 1 and float(prefix_bytes[0].split()[-1]) > 0
    hits = f'decisionflow_adapted_prepared_rubric_events_total{{{adapter_label},event="hits"}}'
    assert any(line.startswith(hits) and float(line.split()[-1]) >= 5 for line in scraped.splitlines()), scraped
    for key, answer in answers:
        for name, field in expected[key]["fields"].items():
            assert answer["fields"][name]["value"] == field["value"], key
            for label, p in field["probabilities"].items():
                assert answer["fields"][name]["probabilities"][label] == pytest.approx(p, abs=1e-4), (key, name)
    assert set(listed) == {"review", "sentiment"}


def test_ctrl_c_keeps_the_adapter_of_the_last_completed_step(engine, review):
    from decisionflow.fitting.tuning import tune_adapter

    def stop_after_first_step(done, total):
        if done >= 2:
            raise KeyboardInterrupt

    rows = [(r["text"], {"sentiment": r["sentiment"], "code": r["code"]}) for r in labelled(8)]
    result = tune_adapter(engine, review, rows, fields=["code"], rank=2, batch_rows=2, learning_rate=0.01, seed=3,
                          progress=stop_after_first_step, significance=1.0)
    assert result.interrupted and result.steps == 1 and result.rows == 6 and result.held_out == 2
    assert set(result.fields) == {"code"} and result.fields["code"].rows == 2
    assert result.adapter.metadata.weights == engine.weights_fingerprint and result.adapter.weights
    assert any(b.abs().max() > 0 for _, b in result.adapter.weights.values())  # one step moved B off zero


def test_fit_and_calibrate_read_the_adapted_model_beside_the_rubric(tuned, tmp_path):
    """Heads fitted with the adapter beside the rubric are keyed by the adapted model: `run` serves them with the
    adapter and refuses them without it; `calibrate` fits on the adapted readout too."""
    import shutil

    rubric, data, _ = tuned
    for name in ("review.yaml", "review.adapter.safetensors", "rows.csv"):
        shutil.copy(rubric.with_name(name), tmp_path / name)
    copied, rows = tmp_path / "review.yaml", tmp_path / "rows.csv"
    fitted = invoke("fit", copied, "--data", rows, "--dtype", "float32", "--no-words", "--json")
    assert fitted.exit_code == 0, fitted.output
    assert "adapter: " in fitted.stderr and (tmp_path / "review.heads.safetensors").is_file()
    served = invoke("run", copied, "--text", TEXT, "--json", "--dtype", "float32")
    assert served.exit_code == 0, served.output
    refused = invoke("run", copied, "--text", TEXT, "--json", "--dtype", "float32", "--no-adapter")
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert refused.exit_code == 1 and len(errors) == 1, refused.output
    calibrated = invoke("calibrate", copied, "--data", rows, "--field", "sentiment", "--dtype", "float32")
    assert calibrated.exit_code == 0, calibrated.output
    assert "adapter: " in calibrated.stderr and (tmp_path / "review.calibration.json").is_file()


def test_tune_judges_against_heads_beside_the_rubric_and_saves_adapted_heads(tmp_path):
    """A rubric served with fitted heads: `tune` judges the adapter with heads fitted on its training rows on either
    model, and saves the adapted model's heads, fitted again on every row, in place of the old ones, so `run` serves
    adapter and heads together."""
    from decisionflow.runtime.heads.fitted import Heads

    rubric, data = project(tmp_path, count=24)
    fitted = invoke("fit", rubric, "--data", data, "--dtype", "float32", "--no-words")
    assert fitted.exit_code == 0, fitted.output
    heads_file = rubric.with_name("review.heads.safetensors")
    before = Heads.load(heads_file).metadata.weights
    result = invoke("tune", rubric, "--data", data, "--rank", "4", "--batch-rows", "6", "--learning-rate", "0.01",
                    "--keep", "--json", "--dtype", "float32")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert "heads: " in result.stderr and "both with heads fitted on the training rows" in report["why"]
    assert report["heads_saved"] == str(heads_file) and report["heads_refitted"] is not None
    saved = Heads.load(heads_file)
    after = saved.metadata.weights
    assert after != before and after.startswith(before) and "+adapter-" in after
    # Refitted on every row once the adapter is kept: the 6 held-out rows as well as the 18 it was trained on.
    assert report["rows"] == 18 and report["held_out"] == 6
    assert {saved.metadata.fields[name].rows for name in report["heads_refitted"]} == {24}
    served = invoke("run", rubric, "--text", TEXT, "--json", "--dtype", "float32")
    assert served.exit_code == 0 and "heads: " in served.stderr and "adapter: " in served.stderr, served.output


def test_serve_refuses_an_adapter_file_it_cannot_read_before_the_model_loads(tmp_path, monkeypatch):
    import shutil

    from suite_support import ROOT

    pytest.importorskip("fastapi")
    project(tmp_path)
    (tmp_path / "review.adapter.safetensors").write_bytes(b"not an adapter")
    shutil.copy(ROOT / "workflows" / "sentiment.yaml", tmp_path / "sentiment.yaml")
    monkeypatch.setattr("decisionflow.cli.serve.load_engine", lambda *_, **__: pytest.fail("the model was loaded"))
    result = invoke("serve", "--port", "0", "--rubrics", tmp_path)
    assert result.exit_code == 1, result.output
    assert "review.adapter.safetensors" in result.stderr and "Traceback" not in result.output
    quiet = invoke("serve", "--port", "0", "--rubrics", tmp_path, "--adapter", tmp_path / "review.adapter.safetensors",
                   "--no-adapter")
    assert quiet.exit_code != 0 and "give --adapter or --no-adapter, not both" in quiet.stderr


def test_several_epochs_keep_the_adapter_of_the_lowest_held_out_loss(engine, review, monkeypatch):
    """With the held-out loss made to rise after the first epoch, the adapter returned after two epochs is the one
    one epoch trains (same seed: the same shuffle and steps), and the report says which epoch it is."""
    import decisionflow.fitting.tuning as tuning

    rows = [(r["text"], {"sentiment": r["sentiment"], "code": r["code"]}) for r in labelled(8)]
    options = dict(fields=["code"], rank=2, batch_rows=3, learning_rate=0.01, seed=5, significance=1.0)
    one = tuning.tune_adapter(engine, review, rows, epochs=1, **options)
    assert one.best_epoch == 1 and one.held_out_losses == []
    measured, made_up = [], iter([0.5, 0.9])
    real = tuning.held_out_loss

    def rising(*arguments):
        measured.append(real(*arguments))
        return next(made_up)

    monkeypatch.setattr(tuning, "held_out_loss", rising)
    two = tuning.tune_adapter(engine, review, rows, epochs=2, **options)
    assert len(measured) == 2 and all(loss > 0 for loss in measured)  # the objective on the held-out rows
    assert two.held_out_losses == [0.5, 0.9] and two.best_epoch == 1 and two.adapter.metadata.epochs == 1
    assert two.steps == 2 * one.steps
    for name, (a, b) in one.adapter.weights.items():
        assert torch.equal(a, two.adapter.weights[name][0]) and torch.equal(b, two.adapter.weights[name][1]), name


def test_folds_deal_every_row_to_one_fold_keeping_each_label_spread():
    from decisionflow.fitting.examples import Example
    from decisionflow.fitting.tuning import fold_splits

    examples = [Example(i, f"row {i}", {"sentiment": "positive" if i % 3 else "negative"}) for i in range(14)]
    splits = fold_splits(examples, 3, seed=4)
    held = [[e.index for e in fold] for _, fold in splits]
    assert sorted(i for fold in held for i in fold) == list(range(14))  # each row held out exactly once
    for (train, fold), indices in zip(splits, held):
        assert {e.index for e in train} == set(range(14)) - set(indices)
        labels = [e.labels["sentiment"] for e in fold]
        assert labels.count("negative") in (1, 2) and labels.count("positive") in (3, 4)
    assert sorted(len(fold) for fold in held) == [4, 5, 5]
    assert fold_splits(examples, 3, seed=4) == splits and fold_splits(examples, 3, seed=5) != splits


def test_folds_judge_every_row_once_and_train_the_kept_adapter_on_every_row(engine, review):
    """With three folds every row is read by an adapter that never saw it, the pooled comparison is the sum of the
    folds', and the adapter returned is the one a run on every row trains (same seed, bit for bit)."""
    import decisionflow.fitting.tuning as tuning
    from decisionflow.fitting.examples import examples_of

    rows = [(r["text"], {"sentiment": r["sentiment"], "code": r["code"]}) for r in labelled(12)]
    seen: list[tuple[int, int]] = []
    result = tuning.tune_adapter(engine, review, rows, fields=["code"], rank=2, batch_rows=4, learning_rate=0.01, seed=2,
                                 significance=1.0, keep=True, folds=3, progress=lambda done, total: seen.append((done, total)))
    assert result.folds == 3 and len(result.fold_fields) == 3 and result.fold_epochs == [1, 1, 1]
    assert [fold["code"].rows for fold in result.fold_fields] == [4, 4, 4]
    pooled = result.fields["code"]
    assert pooled.rows == 12 == result.held_out and result.rows == 12
    right = sum(fold["code"].accuracy_adapted * fold["code"].rows for fold in result.fold_fields)
    assert pooled.accuracy_adapted == pytest.approx(right / 12)
    assert result.steps == 3 * 2 + 3  # three folds of 8 training rows, then all 12, four rows a step
    assert seen[-1] == (3 * 8 + 12, 3 * 8 + 12) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert "3 folds pooled" in result.why and result.adapter.metadata.folds == 3 and result.adapter.metadata.rows == 12
    examples, _ = examples_of(review, [(text, {"code": labels["code"]}) for text, labels in rows])
    settings = tuning.TrainSettings(rank=2, alpha=16.0, targets=tuning.DEFAULT_TARGETS, learning_rate=0.01, epochs=1,
                                    batch_rows=4, seed=2)
    alone = tuning.train_adapter(engine, review, examples, [], settings, None).adapter
    for name, (a, b) in alone.weights.items():
        assert torch.equal(a, result.adapter.weights[name][0]) and torch.equal(b, result.adapter.weights[name][1]), name


def test_tune_with_folds_and_two_rates_prints_each_fold_each_setting_and_the_verdict(tmp_path):
    rubric, data = project(tmp_path, count=8)
    result = invoke("tune", rubric, "--data", data, "--fields", "code", "--rank", "2", "--batch-rows", "6",
                    "--learning-rate", "0.01,0.001", "--folds", "2", "--significance", "1", "--dtype", "float32")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "pooled over 2 folds" in text and "each fold: its rows without and with its adapter" in text
    assert "settings tried on the same rows" in text and "chosen among 2 settings" in text
    assert "judged on 8 rows in 2 folds" in text, text


def test_several_learning_rates_are_tried_on_the_same_rows_and_the_best_is_kept(engine, review):
    """Two learning rates on one held-out share: both are reported with their held-out accuracy, the better one
    (ties: the first given) is judged, and the adapter returned is the one its settings train alone."""
    import decisionflow.fitting.tuning as tuning
    from decisionflow.fitting.examples import examples_of

    rows = [(r["text"], {"sentiment": r["sentiment"], "code": r["code"]}) for r in labelled(12)]
    rates = [1e-6, 0.02]
    result = tuning.tune_adapter(engine, review, rows, fields=["code"], rank=[2], batch_rows=3, learning_rate=rates,
                                 seed=1, significance=1.0)
    assert [(tried["rank"], tried["learning_rate"]) for tried in result.settings] == [(2, 1e-6), (2, 0.02)]
    accuracies = [tried["accuracy"] for tried in result.settings]
    best = rates[accuracies.index(max(accuracies))]
    assert result.adapter.metadata.learning_rate == best and result.fields["code"].accuracy_adapted == max(accuracies)
    assert "chosen among 2 settings on the same rows" in result.why
    examples, _ = examples_of(review, [(text, {"code": labels["code"]}) for text, labels in rows])
    train, held = tuning.split_held_out(examples, tuning.HOLD_OUT, 1)
    settings = tuning.TrainSettings(rank=2, alpha=16.0, targets=tuning.DEFAULT_TARGETS, learning_rate=best, epochs=1,
                                    batch_rows=3, seed=1)
    alone = tuning.train_adapter(engine, review, train, held, settings, None).adapter
    for name, (a, b) in alone.weights.items():
        assert torch.equal(a, result.adapter.weights[name][0]) and torch.equal(b, result.adapter.weights[name][1]), name


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--rank", "0", "--rank: every value must be above 0"),
    ("--learning-rate", "fast", "--learning-rate: 'fast' is not a number"),
    ("--rank", "4,4", "--rank: 4,4 names a value twice"),
])
def test_bad_setting_lists_are_refused_before_the_model_loads(tmp_path, monkeypatch, option, value, says):
    rubric, data = project(tmp_path)
    monkeypatch.setattr("decisionflow.cli.tune.load_engine", lambda *_, **__: pytest.fail("the model was loaded"))
    result = invoke("tune", rubric, "--data", data, option, value)
    assert result.exit_code == 1 and says in result.stderr and "Traceback" not in result.output, result.output


def test_a_held_out_share_beside_folds_is_refused(tmp_path, monkeypatch):
    rubric, data = project(tmp_path)
    monkeypatch.setattr("decisionflow.cli.tune.load_engine", lambda *_, **__: pytest.fail("the model was loaded"))
    result = invoke("tune", rubric, "--data", data, "--folds", "3", "--hold-out", "0.2")
    assert result.exit_code == 2 and "not both" in result.stderr and "Traceback" not in result.output, result.output
