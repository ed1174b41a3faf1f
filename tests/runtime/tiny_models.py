"""Tiny random-weight decoders of many families, built offline from transformers' own configuration classes
and saved with the bundled model's tokenizer: for checking that two computations agree (the packed pass
against the model's own forward), never for answer quality.

Weights are drawn wider than the families' defaults (`initializer_range`), so the next-token distributions
are far from uniform and a token that sees what it should not moves them measurably.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FAMILIES = (
    "gemma",         # scaled embeddings, tied input and output embeddings
    "gemma2",        # logit and attention soft-capping, sliding-window layers beside full ones
    "gemma3_text",   # sliding-window layers, per-head q/k norms, local and global rope
    "phi3",          # fused qkv and gate/up projections
    "phi",           # a parallel attention and MLP block, partial rotary, LayerNorm
    "granite",       # scaled residuals, embeddings and logits
    "olmo2",         # norms after attention and MLP, q/k norms
    "smollm3",       # layers without rope
    "cohere",        # a parallel block, logit scale
    "stablelm",      # LayerNorm, partial rotary
    "gpt_neox",      # a parallel block, fused qkv
    "starcoder2",    # biases, GELU MLP
    "gpt2",          # learned positions, Conv1D projections, tied embeddings
    "mixtral",       # a mixture of experts
    "qwen2_moe",     # experts with a shared expert
    "qwen3_moe",     # experts, q/k norms
)
"""Sixteen decoder types beyond the four the engine's own decoder path covers."""
WINDOW = 512
"""The sliding window of the families that have one: a request of the suite fits it, a long one does not."""

SIZE = dict(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=1, eos_token_id=2, pad_token_id=2,
            initializer_range=0.2)
EXTRA: dict[str, dict[str, Any]] = {
    "gemma2": {"sliding_window": WINDOW, "head_dim": 16},
    "gemma3_text": {"sliding_window": WINDOW, "head_dim": 16},
    "gemma": {"head_dim": 16},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 64},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
}


def build(model_type: str, folder: Path, tokenizer: Any, seed: int = 0) -> Path:
    """A tiny `model_type` decoder with random weights, saved in `folder` with `tokenizer`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **SIZE, **EXTRA.get(model_type, {}))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
