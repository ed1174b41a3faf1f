"""The decoder's inner operations, as the torch modules run them or as fused Triton kernels.

`forward.run_layers` calls these three operations and nothing else between the projections: the
norm (fused with the residual add where one precedes it), the MLP's activation product, and the
rotary embedding. `TorchOps` calls the model's own modules; `TritonOps` calls the kernels in
`decisionflow_kernels` with the same modules' weights. Choosing happens once per engine
(`choose_ops`); the model's modules are never replaced, so the same model serves both.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from ...errors import ModelError, Unavailable

KERNEL_CHOICES = ("auto", "triton", "torch")
TRITON_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")
TRITON_ROPE_TYPES = ("default", "llama3", "yarn", "linear")
"""Rope types whose `inv_freq` is fixed after loading (dynamic ones recompute it in their forward)."""


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [1, H, n, D], k [1, Hkv, n, D]; cos/sin [1, n, D] for each token's own position."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class TorchOps:
    name = "torch"

    @staticmethod
    def norm(module: Any, x: torch.Tensor) -> torch.Tensor:
        return module(x)

    @staticmethod
    def add_norm(update: torch.Tensor, hidden: torch.Tensor, module: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(hidden + update), hidden + update)."""
        summed = hidden + update
        return module(summed), summed

    @staticmethod
    def mlp(module: Any, x: torch.Tensor) -> torch.Tensor:
        return module(x)

    @staticmethod
    def prepare_rotary(rotary: Any, hidden: torch.Tensor, positions: torch.Tensor) -> Any:
        """What every layer's rotation needs, computed once per pass: the cos/sin tables."""
        return rotary(hidden, position_ids=positions[None])

    @staticmethod
    def rotate(tables: Any, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q [1, H, n, D], k [1, Hkv, n, D] rotated for their tokens' positions."""
        return apply_rotary(q, k, *tables)


class TritonOps:
    """The same operations through the fused kernels (on CUDA, or on CPU under TRITON_INTERPRET=1)."""

    name = "triton"

    def __init__(self) -> None:
        from decisionflow_kernels import rms_norm, rotary, swiglu

        self._rms_norm = rms_norm
        self._swiglu = swiglu.swiglu
        self._rotary = rotary.rotary_embedding

    def norm(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        return self._rms_norm.rms_norm(x, module.weight, _eps(module))

    def add_norm(self, update: torch.Tensor, hidden: torch.Tensor, module: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self._rms_norm.add_rms_norm(update, hidden, module.weight, _eps(module))

    def mlp(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        return module.down_proj(self._swiglu(module.gate_proj(x), module.up_proj(x)))

    @staticmethod
    def prepare_rotary(rotary: Any, hidden: torch.Tensor, positions: torch.Tensor) -> Any:
        return positions, rotary.inv_freq, float(getattr(rotary, "attention_scaling", 1.0))

    def rotate(self, state: Any, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions, inv_freq, scaling = state
        return self._rotary(q, k, positions, inv_freq, scaling)


def _eps(module: Any) -> float:
    return float(getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6)))


def triton_refusal(model: Any, device: torch.device) -> str | None:
    """Why the Triton kernels cannot serve this model on this device (None when they can)."""
    config = model.config
    if getattr(config, "model_type", None) not in TRITON_FAMILIES:
        return f"model type {config.model_type!r} has no Triton path (supported: {', '.join(TRITON_FAMILIES)})"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"the MLP activation is {config.hidden_act!r}; the fused kernel computes SiLU"
    rope_type = getattr(model.model.rotary_emb, "rope_type", "default")
    if rope_type not in TRITON_ROPE_TYPES:
        return f"rope type {rope_type!r} recomputes its frequencies per call; the fused kernel needs fixed ones"
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return "Triton kernels run on CUDA devices (or on the CPU under TRITON_INTERPRET=1)"
    try:
        import triton  # noqa: F401
    except ImportError as error:
        return f"triton is not installed ({error}); pip install 'decisionflow[triton]'"
    return None


def choose_ops(kernels: str, model: Any, device: torch.device) -> TorchOps | TritonOps:
    """`auto`: the Triton kernels on CUDA when they import and support the model, else torch."""
    if kernels not in KERNEL_CHOICES:
        raise ModelError(f"unknown kernels choice {kernels!r}; use {', '.join(KERNEL_CHOICES)}")
    if kernels == "torch" or (kernels == "auto" and device.type != "cuda"):
        return TorchOps()
    refusal = triton_refusal(model, device)
    if refusal is None:
        return TritonOps()
    if kernels == "triton":
        raise Unavailable(f"kernels='triton' cannot be used: {refusal}")
    return TorchOps()
