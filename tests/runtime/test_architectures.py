"""The packed-pass plumbing on the Qwen2 and Qwen3 architectures with the Qwen2.5 vocabulary.

No Qwen weights can be downloaded here, so these models are tiny and randomly initialised: they
check plumbing only (attention biases, q/k norms, the other JSON layout, packing equals running each
row alone), never the quality of an answer. Answers are checked on the real bundled model elsewhere.
"""

from __future__ import annotations

import pytest
import torch
from suite_support import packed_and_alone

from decisionflow.compiler import LAYOUTS
from decisionflow.errors import ModelError
from decisionflow.runtime.engine import Engine
from decisionflow.runtime.model.loading import LoadedModel, check_supported
from decisionflow.spec.rubric import Rubric

RUBRIC = Rubric.model_validate({
    "name": "plumbing",
    "fields": {
        "topic": {"kind": "choice", "question": "Topic", "options": ["billing", "delivery", "1_HOUR", "12_HOURS"]},
        "refund": {"kind": "boolean", "question": "Refund asked"},
        "urgency": {"kind": "score", "question": "Urgency", "min": 0, "max": 12},
    },
})


def _tiny(kind: str, vocab: int):
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    torch.manual_seed(0)
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    config = Qwen2Config(**common) if kind == "qwen2" else Qwen3Config(head_dim=16, **common)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@pytest.mark.parametrize("kind", ["qwen2", "qwen3"])
def test_packed_rows_match_rows_alone(kind, qwen_tokenizer):
    model = _tiny(kind, len(qwen_tokenizer))
    engine = Engine(LoadedModel(model, qwen_tokenizer, f"tiny-{kind}"))
    compiled, plan = engine.compile(RUBRIC)
    assert compiled.layout is LAYOUTS[1]
    for packed, alone in packed_and_alone(engine, compiled, "I was charged twice; refund me within 12 hours."):
        assert torch.allclose(alone, packed, atol=1e-4)

    result = engine.decide(RUBRIC, "My parcel is late.")
    assert result.stats.forward_passes == len(plan.rounds) == 2
    assert all(sum(f.probabilities.values()) == pytest.approx(1.0) for f in result.fields.values())


def test_a_decoder_of_another_family_is_accepted_and_a_recurrent_one_refused(qwen_tokenizer):
    from transformers import AutoModelForCausalLM, GPT2Config, MambaConfig

    check_supported(AutoModelForCausalLM.from_config(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100)),
                    qwen_tokenizer)  # served through its own forward (tests/runtime/test_model_families.py)
    mamba = AutoModelForCausalLM.from_config(MambaConfig(hidden_size=32, num_hidden_layers=1, vocab_size=100))
    with pytest.raises(ModelError, match="'mamba'.*keeps a recurrent state"):
        check_supported(mamba, qwen_tokenizer)
