"""SwiGLU's activation product silu(gate) * up as one elementwise Triton kernel.

Rounds where `F.silu(gate) * up` rounds: the SiLU is computed in fp32 and rounded to the inputs'
dtype before the product. Reference: `reference.swiglu`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import check_tensors, on_device
from .rounding import round_to

BLOCK = 1024


@triton.jit
def _swiglu_kernel(G, U, OUT, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    valid = offsets < n_elements
    gate = tl.load(G + offsets, mask=valid, other=0.0)
    up = tl.load(U + offsets, mask=valid, other=0.0)
    g = gate.to(tl.float32)
    activated = round_to(g / (1.0 + tl.exp(-g)), gate.dtype)
    out = activated.to(tl.float32) * up.to(tl.float32)
    tl.store(OUT + offsets, round_to(out, OUT.dtype.element_ty), mask=valid)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for two tensors of one shape and dtype (the gate and up projections)."""
    if gate.shape != up.shape or gate.dtype != up.dtype:
        raise ValueError(
            f"swiglu: gate {tuple(gate.shape)} {gate.dtype} and up {tuple(up.shape)} {up.dtype} must match in shape and dtype"
        )
    check_tensors("swiglu", _swiglu_kernel, gate=gate, up=up)
    gate, up = gate.contiguous(), up.contiguous()
    out = torch.empty_like(gate)
    n = gate.numel()
    if n == 0:
        return out
    with on_device(gate.device):
        _swiglu_kernel[(triton.cdiv(n, BLOCK),)](gate, up, out, n, BLOCK=BLOCK, num_warps=4, enable_fp_fusion=False)
    return out
