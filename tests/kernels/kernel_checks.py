"""What the kernel tests share: the kernels, imported under Triton's interpreter, and how they compare.

`triton.jit` reads TRITON_INTERPRET when it decorates a kernel, so it is set here before the kernel
modules are imported, and the tests import the kernels from here (this folder has no conftest.py:
a second `conftest` module would shadow the one the other test folders import from). With
TRITON_INTERPRET=0 on a machine with a GPU, the same tests run the compiled kernels on CUDA tensors.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import decisionflow_kernels.reference as reference  # noqa: E402
import decisionflow_kernels.rms_norm as rms_norm_kernel  # noqa: E402
import decisionflow_kernels.rotary as rotary_kernel  # noqa: E402
import decisionflow_kernels.swiglu as swiglu_kernel  # noqa: E402
import decisionflow_kernels.tree_attention as tree_attention_kernel  # noqa: E402
import decisionflow_kernels.tree_spans as tree_spans  # noqa: E402
from decisionflow_kernels.launch import interpreted  # noqa: E402

__all__ = ["reference", "rms_norm_kernel", "rotary_kernel", "swiglu_kernel", "tree_attention_kernel", "tree_spans"]

INTERPRETED = os.environ["TRITON_INTERPRET"] == "1"
DEVICE = torch.device("cpu" if INTERPRETED else "cuda")

if interpreted(rms_norm_kernel._rms_norm_kernel) != INTERPRETED:
    raise RuntimeError(
        "the kernel modules were imported before TRITON_INTERPRET was set, so they cannot run on CPU tensors: "
        "set TRITON_INTERPRET=1 in the environment, or import decisionflow_kernels lazily"
    )


def bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    """One bf16 unit in the last place at each value of `x`, as fp32."""
    exponent = torch.frexp(x.float().abs().clamp_min(torch.finfo(torch.bfloat16).tiny))[1]
    return torch.ldexp(torch.ones_like(x, dtype=torch.float32), exponent - 8)


def assert_rounds_like(actual: torch.Tensor, expected: torch.Tensor, *, fp32_tol: float = 1e-5, identical: float = 0.99) -> None:
    """A fused elementwise kernel that rounds where its reference rounds.

    fp32: within `fp32_tol`, relative and absolute (reduction order; exp, cos and rsqrt implementations).
    bf16: within one bf16 unit of the expected value everywhere, and bit-identical on at least the
    `identical` fraction of values — rounding at another place changes about a quarter of them (an fp32
    product rounded once instead of twice), while a GPU's approximate rsqrt or exp flips one now and then.
    """
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if expected.dtype == torch.float32:
        torch.testing.assert_close(actual, expected, rtol=fp32_tol, atol=fp32_tol)
        return
    difference = (actual.float() - expected.float()).abs()
    assert torch.all(difference <= bf16_ulp(expected)), f"largest difference {difference.max().item()}"
    same = (actual == expected).float().mean().item()
    assert same >= identical, f"only {same:.1%} of the values are bit-identical to the reference"
