"""SwiGLU's activation product: the Triton kernel against its reference, the reference against Llama's MLP."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DEVICE, assert_rounds_like, reference, swiglu_kernel
from transformers.activations import ACT2FN

pytestmark = pytest.mark.triton

# One value, one row, a row past one block, a [1, n, intermediate] as the MLP holds it.
SHAPES = [(1,), (1, 77), (3, 1100), (1, 5, 129)]


def _inputs(shape, dtype, seed, spread=4.0):
    generator = torch.Generator().manual_seed(seed)
    gate = (torch.randn(shape, generator=generator) * spread).to(dtype)
    up = torch.randn(shape, generator=generator).to(dtype)
    return gate.to(DEVICE), up.to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_swiglu_kernel_matches_reference(shape, dtype):
    gate, up = _inputs(shape, dtype, seed=1)
    assert_rounds_like(swiglu_kernel.swiglu(gate, up), reference.swiglu(gate, up))


# numpy (the interpreter) warns where exp(-gate) overflows to inf; a GPU gives the same inf silently.
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_saturated_gates_stay_finite(dtype):
    """exp(-gate) overflows for very negative gates: silu must still go to 0, not NaN."""
    gate = torch.tensor([-200.0, -90.0, -20.0, 0.0, 20.0, 90.0], dtype=dtype, device=DEVICE)
    up = torch.ones_like(gate)
    out = swiglu_kernel.swiglu(gate, up)
    assert torch.isfinite(out).all()
    assert_rounds_like(out, reference.swiglu(gate, up), identical=1.0)


def test_mismatched_inputs_are_named():
    gate, up = _inputs((2, 8), torch.float32, seed=2)
    with pytest.raises(ValueError, match="must match in shape and dtype"):
        swiglu_kernel.swiglu(gate, up[:, :4])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_is_the_mlps_activation_product(dtype):
    gate, up = _inputs((2, 3, 40), dtype, seed=3)
    assert torch.equal(reference.swiglu(gate, up), ACT2FN["silu"](gate) * up)
