"""Rounding fp32 values to a tensor's storage dtype the way torch rounds: to nearest, ties to even.

The fused kernels reproduce torch's intermediate roundings (Llama's RMSNorm rounds before the weight,
SiLU rounds before the product, ...), so the rounding itself must be torch's. A GPU's fp32 -> bf16
conversion already is; Triton's interpreter truncates instead (it keeps bf16 as raw 16-bit patterns),
which would make the CPU tests unable to tell a right rounding order from a wrong one. So bf16 is
rounded here with integer arithmetic, which gives the same bits on every device at the cost of a few
integer operations in memory-bound kernels.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def round_to(x, dtype: tl.constexpr):
    """fp32 `x` rounded to `dtype` (fp32, fp16 or bf16) to nearest, ties to even."""
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        # Add just under half a bf16 unit, plus one more when the kept part is odd: ties go to even.
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        # NaN keeps its quiet bit instead of carrying into the exponent (a NaN is never rounded to inf).
        rounded = tl.where(x != x, (bits >> 16) | 0x40, rounded)
        return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        return x.to(dtype)
