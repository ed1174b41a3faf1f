"""A decoder built straight from a checkpoint folder (`config.json` + safetensors), without
transformers' modelling stack.

Importing and constructing a transformers model costs seconds on a small CPU before a weight is
read (its modelling modules pull in the distributed-tensor and symbolic-shape machinery), while the
engine's forward pass (`forward.run_layers`) only calls a handful of modules: the embedding, per
layer four projections, two RMS norms and a SwiGLU MLP, the rotary table, the final norm and the
LM head. `DecoderModel` is exactly those modules, under the same attribute and weight names as
transformers' Llama/Qwen2/Qwen3/Mistral classes, with the same arithmetic, so everything that reads
a transformers model (the engine, the Triton ops, the prefix store's fingerprint) reads this one too.
The weights are memory-mapped from the safetensors files and assigned, not copied, when the file's
dtype is the one asked for.

A checkpoint this module does not cover exactly (another rope type, sliding-window layers, another
activation, unexpected weight names) is refused by `decoder_refusal` or `DecoderUnsupported`, and
the loader falls back to transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


class DecoderUnsupported(Exception):
    """This checkpoint is not one `DecoderModel` reproduces exactly (the loader uses transformers)."""


class DecoderConfig:
    """The checkpoint's `config.json`, read-only, with attribute access like a transformers config."""

    def __init__(self, values: dict[str, Any]):
        self._values = dict(values)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    @property
    def head_dim(self) -> int:
        return self._values.get("head_dim") or self._values["hidden_size"] // self._values["num_attention_heads"]

    @property
    def rope(self) -> tuple[str, float]:
        return rope_settings(self._values)


def rope_settings(values: dict[str, Any]) -> tuple[str, float]:
    """(rope type, theta) of a configuration, from transformers 5's `rope_parameters` or the older
    `rope_theta`/`rope_scaling`."""
    parameters = values.get("rope_parameters")
    if isinstance(parameters, dict):
        return str(parameters.get("rope_type", "default")), float(parameters.get("rope_theta", 10000.0))
    scaling = values.get("rope_scaling") or {}
    kind = str(scaling.get("rope_type") or scaling.get("type") or "default")
    return kind, float(values.get("rope_theta", 10000.0))


def read_config(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def decoder_refusal(config: dict[str, Any]) -> str | None:
    """Why `DecoderModel` cannot reproduce this configuration exactly (None when it can)."""
    model_type = config.get("model_type")
    rope_type = rope_settings(config)[0]
    if model_type not in FAMILIES:
        return f"model type {model_type!r}"
    if config.get("hidden_act", "silu") != "silu":
        return f"activation {config.get('hidden_act')!r}"
    if rope_type != "default":
        return f"rope type {rope_type!r}"
    if config.get("use_sliding_window") or any(kind != "full_attention" for kind in config.get("layer_types") or ()):
        return "sliding-window attention"
    if model_type == "mistral" and config.get("sliding_window") is not None:
        return "sliding-window attention"
    if config.get("pretraining_tp", 1) not in (1, None):
        return "tensor-parallel pretraining layout"
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "rms_norm_eps"):
        if not isinstance(config.get(key), (int, float)):
            return f"no {key!r} in config.json"
    return None


class Weights(nn.Module):
    """A module whose parameters are assigned from the checkpoint, never initialised: building it
    costs nothing (random initialisation of a large embedding would cost more than reading it)."""

    def __init__(self, **shapes: tuple[int, ...] | None):
        super().__init__()
        self.shapes = {name: shape for name, shape in shapes.items() if shape is not None}
        for name, shape in shapes.items():
            setattr(self, name, nn.Parameter(torch.empty(0), requires_grad=False) if shape is not None else None)


class Linear(Weights):
    def __init__(self, inputs: int, outputs: int, bias: bool):
        super().__init__(weight=(outputs, inputs), bias=(outputs,) if bias else None)
        self.packed: torch.Tensor | None = None
        """The weight in oneDNN's blocked layout (`pack_for_cpu`), used for inputs on the CPU."""

    def __getstate__(self) -> dict[str, Any]:
        # oneDNN's blocked tensors cannot be copied or pickled: a copy multiplies with the plain weight.
        return {**self.__dict__, "packed": None}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None and x.device.type == "cpu":
            return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")
        return nn.functional.linear(x, self.weight, self.bias)


class Embedding(Weights):
    def __init__(self, vocabulary: int, size: int):
        super().__init__(weight=(vocabulary, size))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(ids, self.weight)


class RMSNorm(Weights):
    def __init__(self, size: int, eps: float):
        super().__init__(weight=(size,))
        self.variance_epsilon = eps

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # The norm is taken in float32 whatever the weights' dtype, as the reference implementations do.
        dtype = hidden.dtype
        hidden = hidden.to(torch.float32)
        hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * hidden.to(dtype)


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int, bias: bool):
        super().__init__()
        self.gate_proj = Linear(hidden, intermediate, bias)
        self.up_proj = Linear(hidden, intermediate, bias)
        self.down_proj = Linear(intermediate, hidden, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    """The projections of one attention layer (the engine computes attention itself)."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        head_dim, heads, kv_heads = config.head_dim, config.num_attention_heads, config.num_key_value_heads
        declared = bool(config.to_dict().get("attention_bias", False))
        # Qwen2 always biases q/k/v and never o; Mistral never biases; Llama and Qwen3 follow the flag.
        qkv_bias = {"qwen2": True, "mistral": False}.get(config.model_type, declared)
        out_bias = {"qwen2": False, "mistral": False}.get(config.model_type, declared)
        self.q_proj = Linear(config.hidden_size, heads * head_dim, qkv_bias)
        self.k_proj = Linear(config.hidden_size, kv_heads * head_dim, qkv_bias)
        self.v_proj = Linear(config.hidden_size, kv_heads * head_dim, qkv_bias)
        self.o_proj = Linear(heads * head_dim, config.hidden_size, out_bias)
        if config.model_type == "qwen3":
            self.q_norm = RMSNorm(head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(head_dim, config.rms_norm_eps)
        self.scaling = head_dim**-0.5


class DecoderLayer(nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size, bool(config.to_dict().get("mlp_bias", False)))
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class RotaryEmbedding(nn.Module):
    """The default rotary table: cos/sin per position, computed in float32, returned in the input's dtype."""

    rope_type = "default"
    attention_scaling = 1.0

    def __init__(self, config: DecoderConfig):
        super().__init__()
        dim, theta = config.head_dim, config.rope[1]
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        table = torch.cat((freqs, freqs), dim=-1)
        return table.cos().to(dtype=x.dtype), table.sin().to(dtype=x.dtype)


class DecoderBody(nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)


class DecoderModel(nn.Module):
    """A causal LM with transformers' module layout (`model.layers[i].self_attn.q_proj`, `lm_head`, …)."""

    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.config = config
        self.weights_mapped = False
        """Whether every weight is the checkpoint file's own memory map (read in its stored dtype)."""
        self.model = DecoderBody(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, False)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, logits_to_keep: int = 0, **_: Any) -> SimpleNamespace:
        """Plain causal forward over `input_ids` [1, n]: `.logits` [1, kept, vocab] (all when 0)."""
        from .forward import DecoderParts, causal_attend, run_layers

        parts = DecoderParts.of(self)
        ids = input_ids[0]
        hidden, _ = run_layers(parts, ids, torch.arange(len(ids), device=ids.device),
                               lambda _layer, q, k, v, scale: causal_attend(q, k, v, scale))
        kept = hidden[:, -logits_to_keep:] if logits_to_keep else hidden
        return SimpleNamespace(logits=self.lm_head(self.model.norm(kept)))


PACKABLE_DTYPES = (torch.float32, torch.bfloat16)


def pack_for_cpu(model: DecoderModel) -> bool:
    """Give every projection of the decoder layers a copy of its weight in oneDNN's blocked layout.

    Packed once, the products skip the per-call reordering that a plain CPU matrix product pays:
    7–17 % faster per warm request (docs/benchmarks.md), with probabilities within 1e-5 of the plain
    products. The LM head is left as it is (it projects only
    the read rows, and is often the embedding's own weight). Only a model whose weights are mapped
    from their file as they are (`weights_mapped`: no dtype conversion) is packed: their pages belong
    to the file (the kernel may drop them once unused), so the packed copy is the only one the
    process holds; converted weights would be held twice.
    Returns whether the model was packed.
    """
    if not getattr(model, "weights_mapped", False):
        return False
    if is_packed(model):
        return True
    layers = [module for module in model.model.layers.modules() if isinstance(module, Linear)]
    if not layers or layers[0].weight.device.type != "cpu" or layers[0].weight.dtype not in PACKABLE_DTYPES:
        return False
    if not torch.backends.mkldnn.is_available() or not hasattr(torch.ops.mkldnn, "_linear_pointwise"):
        return False
    try:
        probe = layers[0].weight.detach().to_mkldnn()
        torch.ops.mkldnn._linear_pointwise(torch.zeros(1, 1, probe.shape[1], dtype=layers[0].weight.dtype),
                                           probe, None, "none", [], "")
    except (RuntimeError, NotImplementedError):
        return False
    for module in layers:
        module.packed = module.weight.detach().to_mkldnn()
    return True


def is_packed(model: Any) -> bool:
    """Whether `model` is the own decoder with oneDNN-packed projections (`pack_for_cpu`)."""
    return isinstance(model, DecoderModel) and any(
        isinstance(module, Linear) and module.packed is not None for module in model.model.layers.modules()
    )


def _weight_files(folder: Path) -> list[Path]:
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        return [folder / name for name in names]
    raise DecoderUnsupported("no model.safetensors (or its index) in the folder")


def load_decoder(folder: Path, dtype: torch.dtype) -> DecoderModel:
    """Build the decoder of `folder` and assign its weights (memory-mapped; converted only when the
    file's dtype differs from `dtype`). Raises `DecoderUnsupported` for anything it cannot reproduce."""
    from safetensors.torch import load_file

    values = read_config(folder)
    refusal = decoder_refusal(values)
    if refusal is not None:
        raise DecoderUnsupported(refusal)
    config = DecoderConfig({**values, "num_key_value_heads": values.get("num_key_value_heads") or values["num_attention_heads"]})
    model = DecoderModel(config)
    weights: dict[str, torch.Tensor] = {}
    for path in _weight_files(folder):
        weights.update(load_file(str(path)))
    tied = bool(values.get("tie_word_embeddings", False))
    if tied:
        weights.pop("lm_head.weight", None)
    for name in [n for n in weights if n.endswith("rotary_emb.inv_freq")]:
        del weights[name]  # older checkpoints saved the table; it is computed from the configuration
    slots = {f"{prefix}.{name}" if prefix else name: (module, name, shape)
             for prefix, module in model.named_modules() if isinstance(module, Weights)
             for name, shape in module.shapes.items()}
    if tied:
        del slots["lm_head.weight"]
    missing, unexpected = slots.keys() - weights.keys(), weights.keys() - slots.keys()
    if missing or unexpected:
        raise DecoderUnsupported(f"weights do not match the layout (missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
    for name, (module, attribute, shape) in slots.items():
        tensor = weights[name]
        if tuple(tensor.shape) != shape:
            raise DecoderUnsupported(f"{name} has shape {tuple(tensor.shape)}, the configuration says {shape}")
        setattr(module, attribute, nn.Parameter(tensor.to(dtype), requires_grad=False))
    if tied:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.weights_mapped = all(tensor.dtype == dtype for tensor in weights.values())
    return model.eval()
