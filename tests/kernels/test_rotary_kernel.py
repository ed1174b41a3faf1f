"""Rotary embedding with explicit positions: the Triton kernel against its reference, the reference
against the model's rotary module and the runtime's `apply_rotary`."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DEVICE, assert_rounds_like, reference, rotary_kernel
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from decisionflow.runtime.passes.ops import apply_rotary

pytestmark = pytest.mark.triton

ROPE_TYPES = {
    "default": None,
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64},
}


def _rotary_module(heads: int, head_dim: int, rope_type: str) -> LlamaRotaryEmbedding:
    config = {"hidden_size": heads * head_dim, "num_attention_heads": heads, "num_key_value_heads": 1,
              "max_position_embeddings": 4096}
    if ROPE_TYPES[rope_type]:
        config["rope_parameters"] = ROPE_TYPES[rope_type]
    return LlamaRotaryEmbedding(LlamaConfig(**config))


def _packed_positions(lengths: list[int], start: int, seed: int) -> torch.Tensor:
    """Rows of the given lengths, each restarting at its own offset after `start` (a packed pass)."""
    generator = torch.Generator().manual_seed(seed)
    rows = [start + int(torch.randint(0, 50, (), generator=generator)) + torch.arange(n) for n in lengths]
    return torch.cat(rows)


def _qk(heads: int, kv_heads: int, n: int, head_dim: int, dtype: torch.dtype, seed: int):
    """q and k laid out as the runtime's projections leave them: [1, n, heads, D] viewed as [1, heads, n, D]."""
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(1, n, heads, head_dim, generator=generator).to(dtype).transpose(1, 2)
    k = torch.randn(1, n, kv_heads, head_dim, generator=generator).to(dtype).transpose(1, 2)
    return q.to(DEVICE), k.to(DEVICE)


# (query heads, key/value heads, head_dim, row lengths): GQA ratios 1, 3 and 7, head dims off the
# powers of two, one-token rows, rows of different lengths.
CASES = [(3, 3, 16, [1]), (6, 2, 24, [4, 1, 7]), (7, 1, 80, [5, 2]), (2, 2, 64, [1, 1, 1])]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rope_type", ["default", "yarn"])
@pytest.mark.parametrize("heads,kv_heads,head_dim,lengths", CASES)
def test_rotary_kernel_matches_reference(heads, kv_heads, head_dim, lengths, rope_type, dtype):
    rotary = _rotary_module(heads, head_dim, rope_type)
    positions = _packed_positions(lengths, start=20000, seed=len(lengths)).to(DEVICE)
    q, k = _qk(heads, kv_heads, positions.numel(), head_dim, dtype, seed=head_dim)
    inv_freq = rotary.inv_freq.to(DEVICE)
    got_q, got_k = rotary_kernel.rotary_embedding(q, k, positions, inv_freq, rotary.attention_scaling)
    want_q, want_k = reference.rotary_embedding(q, k, positions, inv_freq, rotary.attention_scaling)
    # fp32: cos/sin of angles up to ~20000 rad differ in their last bits between libraries.
    assert_rounds_like(got_q, want_q, fp32_tol=2e-5)
    assert_rounds_like(got_k, want_k, fp32_tol=2e-5)
    assert got_q.stride() == q.stride()


def test_inputs_are_left_untouched():
    rotary = _rotary_module(2, 16, "default")
    q, k = _qk(2, 1, 3, 16, torch.float32, seed=1)
    before = q.clone(), k.clone()
    rotary_kernel.rotary_embedding(q, k, torch.tensor([5, 0, 2], device=DEVICE), rotary.inv_freq.to(DEVICE), 1.0)
    assert torch.equal(q, before[0]) and torch.equal(k, before[1])


def test_partial_rotary_is_refused_by_name():
    q, k = _qk(2, 1, 3, 16, torch.float32, seed=2)
    with pytest.raises(ValueError, match="partial rotary"):
        rotary_kernel.rotary_embedding(q, k, torch.arange(3, device=DEVICE), torch.ones(4, device=DEVICE), 1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rope_type", sorted(ROPE_TYPES))
def test_reference_is_the_models_rotary_embedding(rope_type, dtype):
    """Bit for bit: the model's module makes cos/sin for the positions, the runtime's apply_rotary uses them."""
    rotary = _rotary_module(7, 24, rope_type)
    positions = _packed_positions([3, 1, 6], start=3000, seed=3)
    q, k = _qk(7, 1, positions.numel(), 24, dtype, seed=4)
    hidden = torch.zeros(1, positions.numel(), 7 * 24, dtype=dtype, device=q.device)
    cos, sin = rotary.to(q.device)(hidden, position_ids=positions[None].to(q.device))
    want_q, want_k = apply_rotary(q, k, cos, sin)
    got_q, got_k = reference.rotary_embedding(q, k, positions.to(q.device), rotary.inv_freq, rotary.attention_scaling)
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)
