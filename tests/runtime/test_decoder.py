"""The engine's own decoder (`runtime.passes.decoder`): the same model as transformers builds, without it.

The bundled model is compared with transformers' Llama on real text; tiny random Qwen2, Qwen3, Llama
and Mistral checkpoints (attention and MLP biases, q/k norms, another rope theta, untied heads) are
saved and read back both ways. Checkpoints the own
decoder does not reproduce exactly are handed to transformers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from decisionflow.errors import ModelError
from decisionflow.runtime.model.loading import load_model
from decisionflow.runtime.passes.decoder import (
    DecoderModel,
    DecoderUnsupported,
    decoder_refusal,
    load_decoder,
    pack_for_cpu,
    read_config,
)
from decisionflow.runtime.prefix_store import model_fingerprint

TEXTS = ["I was charged twice for one order. Please refund the duplicate charge.",
         "Le colis n'est jamais arrivé, 3 semaines d'attente !"]


def _logits(model, tokenizer, text: str) -> torch.Tensor:
    ids = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.inference_mode():
        return model(input_ids=ids).logits


def _converted_bundled_folder() -> Path:
    from decisionflow.runtime.model.loading import bundled_gguf, cache_root

    return next((cache_root() / "models").glob(f"{bundled_gguf().stem}-*"))


@pytest.mark.model
def test_the_bundled_model_loads_as_the_own_decoder_with_transformers_arithmetic(engine, transformers_engine):
    own, reference = engine.loaded.model, transformers_engine.loaded.model
    assert isinstance(own, DecoderModel) and own.weights_mapped
    assert not isinstance(reference, DecoderModel)
    # Loaded for the CPU, its projections use oneDNN-packed weights: the same products, blocked
    # differently, so equal to float32 rounding; unpacked, the arithmetic is transformers' own, bit for bit.
    assert all(layer.mlp.up_proj.packed is not None for layer in own.model.layers)
    plain = load_decoder(_converted_bundled_folder(), torch.float32)
    assert plain.model.layers[0].mlp.up_proj.packed is None
    for text in TEXTS:
        expected = _logits(reference, engine.tokenizer, text)
        assert torch.equal(_logits(plain, engine.tokenizer, text), expected)
        assert torch.allclose(_logits(own, engine.tokenizer, text), expected, rtol=0, atol=1e-3)
    # Both loaders of one checkpoint share its stored heads.
    assert model_fingerprint(own) == model_fingerprint(reference)


@pytest.mark.model
def test_decisions_are_the_same_through_either_loader(engine, transformers_engine):
    from decisionflow.spec import load_rubric

    rubric = load_rubric(Path(__file__).resolve().parents[2] / "workflows" / "sentiment.yaml")
    own = engine.decide_many(rubric, TEXTS)
    reference = transformers_engine.decide_many(rubric, TEXTS)
    for a, b in zip(own, reference):
        assert a.value == b.value
        for name in a.fields:
            assert a.fields[name].probabilities == pytest.approx(b.fields[name].probabilities, abs=2e-5)


@pytest.mark.model
def test_loading_the_own_decoder_imports_no_modelling_stack():
    probe = ("import sys; from decisionflow.runtime.model.loading import load_model; m = load_model(); "
             "print(type(m.model).__name__, any(n.startswith('transformers.models.llama.modeling') for n in sys.modules), "
             "'torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["DecoderModel", "False", "False"]


def _tiny_checkpoint(kind: str, folder: Path, tokenizer) -> torch.nn.Module:
    from transformers import (
        AutoModelForCausalLM,
        LlamaConfig,
        MistralConfig,
        Qwen2Config,
        Qwen3Config,
    )

    torch.manual_seed(0)
    common = {"vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096,
              "tie_word_embeddings": False}
    config = {
        "qwen2": lambda: Qwen2Config(**common),
        "qwen3": lambda: Qwen3Config(head_dim=16, attention_bias=True, **common),
        "llama": lambda: LlamaConfig(attention_bias=True, mlp_bias=True, rope_theta=50000.0, **common),
        "mistral": lambda: MistralConfig(sliding_window=None, **common),
    }[kind]()
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "llama", "mistral"])
def test_checkpoints_of_each_family_read_by_the_own_decoder_match_transformers(kind, tmp_path, qwen_tokenizer):
    reference = _tiny_checkpoint(kind, tmp_path, qwen_tokenizer)
    own = load_decoder(tmp_path, torch.float32)
    attention, mlp = own.model.layers[0].self_attn, own.model.layers[0].mlp
    assert hasattr(attention, "q_norm") == (kind == "qwen3")
    assert (attention.q_proj.bias is not None) == (kind in ("qwen2", "qwen3", "llama"))
    assert (attention.o_proj.bias is not None) == (kind in ("qwen3", "llama"))
    assert (mlp.up_proj.bias is not None) == (kind == "llama")
    for text in TEXTS:
        assert torch.allclose(_logits(own, qwen_tokenizer, text), _logits(reference, qwen_tokenizer, text), atol=1e-5)
    assert pack_for_cpu(own)  # biases included
    for text in TEXTS:
        assert torch.allclose(_logits(own, qwen_tokenizer, text), _logits(reference, qwen_tokenizer, text), atol=1e-4)


def test_a_checkpoint_the_own_decoder_does_not_cover_goes_to_transformers(tmp_path, qwen_tokenizer):
    reference = _tiny_checkpoint("qwen2", tmp_path, qwen_tokenizer)
    config = read_config(tmp_path)
    config["rope_parameters"] = {"rope_type": "linear", "factor": 1.0, "rope_theta": 10000.0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert decoder_refusal(config) == "rope type 'linear'"
    with pytest.raises(DecoderUnsupported, match="rope type"):
        load_decoder(tmp_path, torch.float32)
    loaded = load_model(tmp_path)
    assert not isinstance(loaded.model, DecoderModel)
    assert torch.allclose(_logits(loaded.model, qwen_tokenizer, TEXTS[0]), _logits(reference, qwen_tokenizer, TEXTS[0]), atol=1e-5)


def test_weights_that_do_not_fit_the_configuration_are_refused_by_name(tmp_path, qwen_tokenizer):
    _tiny_checkpoint("qwen2", tmp_path, qwen_tokenizer)
    config = read_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    with pytest.raises(DecoderUnsupported, match="unexpected.*model.layers.1"):
        load_decoder(tmp_path, torch.float32)
    (tmp_path / "config.json").write_text(json.dumps({**config, "intermediate_size": 96}))
    with pytest.raises(DecoderUnsupported, match="mlp.*shape"):
        load_decoder(tmp_path, torch.float32)


@pytest.mark.parametrize(("change", "reason"), [
    ({"model_type": "gpt2"}, "model type 'gpt2'"),
    ({"hidden_act": "gelu"}, "activation 'gelu'"),
    ({"layer_types": ["sliding_attention", "full_attention"]}, "sliding-window attention"),
    ({"use_sliding_window": True}, "sliding-window attention"),
    ({"rope_parameters": None, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope type 'dynamic'"),
])
def test_configurations_outside_the_own_decoder_are_named(change, reason):
    base = {"model_type": "llama", "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100, "rms_norm_eps": 1e-5}
    assert decoder_refusal(base) is None
    assert decoder_refusal({**base, **change}) == reason


@pytest.mark.model
def test_the_own_decoder_loads_in_bfloat16_and_the_loader_choice_is_checked():
    loaded = load_model(dtype="bfloat16")
    assert isinstance(loaded.model, DecoderModel)
    assert {p.dtype for p in loaded.model.parameters()} == {torch.bfloat16}
    # Converted from the float32 file, so not mapped: not packed, or the weights would be held twice.
    assert not loaded.model.weights_mapped and loaded.model.model.layers[0].mlp.up_proj.packed is None
    assert loaded.model.model.rotary_emb.inv_freq.dtype == torch.float32
    with pytest.raises(ModelError, match="unknown loader 'fast'"):
        load_model(loader="fast")


def _fake_hub_cache(root: Path, repo_id: str, source: Path, files: list[str]) -> Path:
    """A hub cache holding `files` of `source` as one snapshot of `repo_id` (the layout huggingface_hub writes)."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name in files:
        (snapshot / name).symlink_to(source / name)
    return snapshot


@pytest.mark.model
def test_a_hub_id_cached_complete_is_read_by_the_own_decoder(engine, tmp_path, monkeypatch):
    from huggingface_hub import constants

    from decisionflow.runtime.model.loading import hub_snapshot

    converted = _converted_bundled_folder()
    files = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]
    _fake_hub_cache(tmp_path / "complete", "someone/smol", converted, files)
    _fake_hub_cache(tmp_path / "partial", "someone/smol", converted, ["config.json", "tokenizer.json"])

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "partial"))
    assert hub_snapshot("someone/smol") is None  # no weights: transformers would resolve (and download) it
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "complete"))
    assert hub_snapshot("someone/smol") is not None
    assert hub_snapshot("someone/missing") is None
    loaded = load_model("someone/smol")
    assert isinstance(loaded.model, DecoderModel)
    assert torch.equal(_logits(loaded.model, loaded.tokenizer, TEXTS[0]), _logits(engine.loaded.model, engine.tokenizer, TEXTS[0]))


def test_loading_pauses_the_collector_and_leaves_it_as_it_found_it():
    import gc

    from decisionflow.runtime.model.loading import collector_paused

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a caller's own choice is kept
    finally:
        gc.enable()
    with pytest.raises(ModelError, match="GGUF file not found"):
        load_model("/nonexistent/model.gguf")  # fails while the collector is paused
    assert gc.isenabled()


@pytest.mark.model
def test_a_packed_decoder_copies_and_pickles_as_a_plain_one(engine):
    import copy
    import pickle

    own = engine.loaded.model
    copied = copy.deepcopy(own)
    restored = pickle.loads(pickle.dumps(own))
    for other in (copied, restored):
        assert other.model.layers[0].mlp.up_proj.packed is None
        assert torch.allclose(_logits(other, engine.tokenizer, TEXTS[0]), _logits(own, engine.tokenizer, TEXTS[0]), rtol=0, atol=1e-3)
    assert own.model.layers[0].mlp.up_proj.packed is not None


def test_packing_can_be_left_off():
    loaded = load_model(pack_weights=False)
    assert isinstance(loaded.model, DecoderModel) and loaded.model.weights_mapped
    assert all(layer.mlp.up_proj.packed is None for layer in loaded.model.model.layers)
