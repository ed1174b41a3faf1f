"""RMSNorm and the fused residual add: the Triton kernel against its reference, the reference against Llama's."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DEVICE, assert_rounds_like, reference, rms_norm_kernel
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

pytestmark = pytest.mark.triton

DTYPES = [torch.float32, torch.bfloat16]
# Leading shapes: one row, a batch of rows, a 3-D [1, n, hidden] as the decoder holds it, a 4-D
# [1, n, heads, head_dim] as Qwen3's q/k norms see it. Hidden sizes off every power of two.
SHAPES = [(1, 1), (1, 7), (13, 96), (1, 5, 129), (1, 3, 2, 24), (6, 576)]


def _inputs(shape, dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=generator) * 3).to(dtype)
    weight = (1 + 0.5 * torch.randn(shape[-1], generator=generator)).to(dtype)
    residual = torch.randn(shape, generator=generator).to(dtype)
    return x.to(DEVICE), weight.to(DEVICE), residual.to(DEVICE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_rms_norm_kernel_matches_reference(shape, dtype):
    x, weight, _ = _inputs(shape, dtype, seed=1)
    assert_rounds_like(rms_norm_kernel.rms_norm(x, weight, 1e-6), reference.rms_norm(x, weight, 1e-6))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_add_rms_norm_kernel_matches_reference(shape, dtype):
    x, weight, residual = _inputs(shape, dtype, seed=2)
    normed, summed = rms_norm_kernel.add_rms_norm(x, residual, weight, 1e-5)
    expected_normed, expected_summed = reference.add_rms_norm(x, residual, weight, 1e-5)
    assert torch.equal(summed, expected_summed)  # one rounded add: exact on every device
    assert_rounds_like(normed, expected_normed)


def test_fp32_weight_on_bf16_rows_promotes_like_torch():
    x, _, residual = _inputs((4, 40), torch.bfloat16, seed=3)
    weight = torch.linspace(0.5, 1.5, 40, device=DEVICE)
    out = rms_norm_kernel.rms_norm(x, weight, 1e-6)
    assert out.dtype == torch.float32
    assert_rounds_like(out, reference.rms_norm(x, weight, 1e-6))
    normed, summed = rms_norm_kernel.add_rms_norm(x, residual, weight, 1e-6)
    assert (normed.dtype, summed.dtype) == (torch.float32, torch.bfloat16)


def test_rows_with_a_stride_are_read_in_place():
    x, weight, _ = _inputs((6, 64), torch.float32, seed=4)
    every_other = x[::2]
    assert_rounds_like(rms_norm_kernel.rms_norm(every_other, weight, 1e-6), reference.rms_norm(every_other, weight, 1e-6))


def test_no_rows_gives_an_empty_result():
    x, weight, _ = _inputs((0, 8), torch.float32, seed=5)
    assert rms_norm_kernel.rms_norm(x, weight, 1e-6).shape == (0, 8)


def test_a_weight_of_the_wrong_size_is_named():
    x, weight, _ = _inputs((2, 8), torch.float32, seed=6)
    with pytest.raises(ValueError, match=r"weight has shape \(7,\), expected \(8,\)"):
        rms_norm_kernel.rms_norm(x, weight[:7], 1e-6)


@pytest.mark.parametrize("module", [LlamaRMSNorm, Qwen3RMSNorm])
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_is_the_models_rms_norm(module, dtype):
    """Bit for bit: the reference is what the runtime runs today through the model's own module."""
    norm = module(96, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.3 * torch.randn(96, generator=torch.Generator().manual_seed(7)))
    norm = norm.to(dtype)
    x = (torch.randn(1, 9, 96, generator=torch.Generator().manual_seed(8)) * 4).to(dtype)
    assert torch.equal(reference.rms_norm(x, norm.weight.detach(), norm.variance_epsilon), norm(x).detach())
