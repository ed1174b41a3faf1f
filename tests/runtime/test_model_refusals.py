"""Models decisionflow cannot read are refused in one line naming the architecture and what is supported:
encoder-only, encoder-decoder and recurrent models, checkpoints that need their own code, and a tokenizer
without a chat template (saying how to give one). Tiny random models built offline; no answer is checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from decisionflow.cli import app

pytestmark = pytest.mark.model


def invoke(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


def saved(model_type: str, folder: Path, tokenizer, **config) -> Path:
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    built = AutoConfig.for_model(model_type, **config)
    torch.manual_seed(0)
    if built.is_encoder_decoder:
        model = AutoModelForSeq2SeqLM.from_config(built)
    elif model_type == "bert":
        from transformers import BertForMaskedLM

        model = BertForMaskedLM(built)
    else:
        try:
            model = AutoModelForCausalLM.from_config(built)
        except ValueError:
            model = AutoModel.from_config(built)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


SMALL = dict(vocab_size=49152, hidden_size=32, num_hidden_layers=1)


@pytest.mark.parametrize(("model_type", "config", "says"), [
    ("bert", dict(SMALL, intermediate_size=64, num_attention_heads=2), "is not a causal language model"),
    ("t5", dict(vocab_size=49152, d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16), "is an encoder-decoder model"),
    ("mamba", dict(SMALL, state_size=4), "keeps a recurrent state in its layers"),
])
def test_models_that_are_not_decoders_are_refused_by_name(model_type, config, says, tokenizer, tmp_path):
    folder = saved(model_type, tmp_path / model_type, tokenizer, **config)
    result = invoke("run", "sentiment", "--text", "a fine film", "--model", folder)
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert f"model type '{model_type}'" in errors[0] and says in errors[0] and "decoder-only causal language models" in errors[0]


def test_a_checkpoint_that_needs_its_own_code_is_refused_before_loading(tokenizer, tmp_path):
    folder = tmp_path / "custom"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "my_private_lm", "architectures": ["MyPrivateForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_my.MyConfig", "AutoModelForCausalLM": "modeling_my.MyPrivateForCausalLM"},
    }), encoding="utf-8")
    (folder / "model.safetensors").write_bytes(b"not read")
    tokenizer.save_pretrained(folder)
    result = invoke("run", "sentiment", "--text", "a fine film", "--model", folder)
    assert result.exit_code == 1
    assert "needs the code its checkpoint ships (trust_remote_code), which decisionflow never runs" in result.stderr


def test_a_tokenizer_without_a_chat_template_is_refused_saying_how_to_give_one(tokenizer, tmp_path):
    from tiny_models import build

    folder = build("gpt2", tmp_path / "plain", tokenizer)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    for extra in folder.glob("chat_template.*"):
        extra.unlink()
    result = invoke("run", "sentiment", "--text", "a fine film", "--model", folder)
    assert result.exit_code == 1
    assert "the tokenizer has no chat template" in result.stderr and "chat_template.jinja" in result.stderr
