"""RMSNorm, and the residual add fused with it, as one Triton kernel (one program per row).

Rounds where Llama's RMSNorm rounds: the row is normalised in fp32, rounded to the input's dtype,
then multiplied by the weight in the promoted dtype; the fused form rounds the residual sum to its
dtype first, exactly as `residual + x` does. References: `reference.rms_norm`, `reference.add_rms_norm`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import check_last_dim_contiguous, check_tensors, on_device
from .rounding import round_to

MAX_HIDDEN = 65536
"""One row is one block: wider rows would not fit a program's registers."""


@triton.jit
def _rms_norm_kernel(
    X, R, W, Y, S,
    x_row_stride, r_row_stride, y_row_stride, s_row_stride,
    n_cols, eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    valid = cols < n_cols
    x = tl.load(X + row * x_row_stride + cols, mask=valid, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(R + row * r_row_stride + cols, mask=valid, other=0.0)
        x = round_to(x.to(tl.float32) + r.to(tl.float32), S.dtype.element_ty)
        tl.store(S + row * s_row_stride + cols, x, mask=valid)
    h = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(h * h, axis=0) / n_cols + eps)
    normed = round_to(h * rstd, x.dtype)
    w = tl.load(W + cols, mask=valid, other=0.0)
    y = normed.to(tl.float32) * w.to(tl.float32)
    tl.store(Y + row * y_row_stride + cols, round_to(y, Y.dtype.element_ty), mask=valid)


def _num_warps(block: int) -> int:
    return 16 if block >= 8192 else 8 if block >= 2048 else 4


def _check(name: str, x: torch.Tensor, weight: torch.Tensor) -> None:
    hidden = x.shape[-1]
    if weight.shape != (hidden,):
        raise ValueError(f"{name}: weight has shape {tuple(weight.shape)}, expected ({hidden},) for x of shape {tuple(x.shape)}")
    if hidden > MAX_HIDDEN:
        raise ValueError(f"{name}: rows of {hidden} values exceed the {MAX_HIDDEN} one program normalises")


def _launch(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float, name: str):
    hidden = x.shape[-1]
    rows = x.reshape(-1, hidden)
    weight = weight.contiguous()
    summed = None
    if residual is not None:
        res_rows = residual.reshape(-1, hidden)
        check_last_dim_contiguous(name, x=rows, residual=res_rows)
        summed = torch.empty(x.shape, dtype=torch.result_type(x, residual), device=x.device)
        sum_rows = summed.view(-1, hidden)
        normed_dtype = summed.dtype
    else:
        check_last_dim_contiguous(name, x=rows)
        res_rows = sum_rows = rows  # unused: HAS_RESIDUAL is off
        normed_dtype = x.dtype
    out = torch.empty(x.shape, dtype=torch.promote_types(weight.dtype, normed_dtype), device=x.device)
    out_rows = out.view(-1, hidden)
    if rows.shape[0] == 0:
        return out, summed
    block = triton.next_power_of_2(hidden)
    with on_device(x.device):
        _rms_norm_kernel[(rows.shape[0],)](
            rows, res_rows, weight, out_rows, sum_rows,
            rows.stride(0), res_rows.stride(0), out_rows.stride(0), sum_rows.stride(0),
            hidden, float(eps),
            HAS_RESIDUAL=residual is not None,
            BLOCK=block,
            num_warps=_num_warps(block),
            enable_fp_fusion=False,  # torch rounds each multiply and add on its own
        )
    return out, summed


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., hidden], weight [hidden]: Llama's RMSNorm of every row."""
    _check("rms_norm", x, weight)
    check_tensors("rms_norm", _rms_norm_kernel, x=x, weight=weight)
    out, _ = _launch(x, None, weight, eps, "rms_norm")
    return out


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual) in one pass over the rows."""
    _check("add_rms_norm", x, weight)
    if residual.shape != x.shape:
        raise ValueError(f"add_rms_norm: residual has shape {tuple(residual.shape)}, x has {tuple(x.shape)}")
    check_tensors("add_rms_norm", _rms_norm_kernel, x=x, residual=residual, weight=weight)
    out, summed = _launch(x, residual, weight, eps, "add_rms_norm")
    return out, summed
