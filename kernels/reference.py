"""Torch references for the kernels: the exact operations a fused kernel must reproduce.

Each function has the signature its fused counterpart's launcher has, so a test runs both on the same
tensors and compares, and the runtime calls the reference wherever the fused path is unavailable.
"""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., hidden], weight [hidden]: normalised in fp32, scaled by `weight` in x's dtype (as Llama does)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)
