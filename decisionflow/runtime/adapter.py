"""LoRA adapters served exactly: merged into copies of the projections they adapt.

`decisionflow tune` (`fitting.tuning`) fits a LoRA adapter on labelled rows and saves it beside the rubric
as `NAME.adapter.safetensors`: per adapted projection its `lora_A` [rank, in] and `lora_B` [out, rank] in
float32 under peft's own key names, and in the safetensors header the adapter's metadata (`AdapterMetadata`:
the base model's fingerprints, the rubric, rank, alpha, the projections it adapts, what the tuning measured).

Serving reads the file with safetensors alone (peft is needed only to fit). `Adapter.merged(model)` returns a
model that shares every weight of `model` except the adapted projections, whose weights are copies with
`W + scale * B @ A` added exactly as peft merges them (the product and the sum in float32, rounded once to the
weight's dtype); the original model is never changed. Every backend then reads ordinary weights (the engine's
decoder path, packed or not, and the model's own forward; float32 and bfloat16), so an adapted request costs
what an unadapted one does. An engine built with an adapter (`Engine.load(adapter=...)`,
`Engine.with_adapter`) fingerprints as its model plus the adapter, so its prefix caches, in memory and on
disk, and heads fitted on it are never mistaken for the base model's.

An adapter is refused, in one line (a `ModelError`), on a model whose weights are not those it was fitted on.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ModelError
from ..paths import read_saved_tensors, readable_copy, write_atomically
from .prefix_store import weights_fingerprint

FORMAT = 1
METADATA_KEY = "decisionflow.adapter"
SUFFIX = ".adapter.safetensors"
PEFT_PREFIX = "base_model.model."
"""peft's key prefix for a causal LM's modules (`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`)."""


class AdapterFieldInfo(BaseModel):
    """What tuning measured for one field on its held-out rows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int = 0
    accuracy_base: float | None = None
    accuracy_adapted: float | None = None
    p_value: float | None = None
    """McNemar's exact p for the paired difference on the held-out rows."""


class AdapterMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int = FORMAT
    rubric: str
    rubric_fingerprint: str
    model: str
    """The base model's content fingerprint (`prefix_store.model_fingerprint`) in the dtype it was tuned in."""
    weights: str
    """The base model's fingerprint whatever its number format (`prefix_store.weights_fingerprint`): what the
    adapter is checked against, so an adapter tuned in float32 serves the same weights in bfloat16."""
    model_name: str = ""
    rank: int
    alpha: float
    targets: list[str]
    """The projections' names the adapter targets (`q_proj`, `v_proj`, ...)."""
    library: str = ""
    peft: str = ""
    seed: int = 0
    rows: int = 0
    """Labelled rows the adapter was trained on (the held-out rows excluded)."""
    held_out: int = 0
    """Rows the adapter was judged on (with folds, every row: each read by an adapter trained without it)."""
    folds: int = 1
    epochs: int = 0
    learning_rate: float = 0.0
    kept: bool = True
    why: str = ""
    fields: dict[str, AdapterFieldInfo] = Field(default_factory=dict)


class Adapter:
    """A LoRA adapter's weights and metadata. `weights`: module path (`model.layers.0.self_attn.q_proj`) ->
    (A [rank, in], B [out, rank]), float32."""

    def __init__(self, metadata: AdapterMetadata, weights: dict[str, tuple[torch.Tensor, torch.Tensor]],
                 path: Path | None = None):
        self.metadata = metadata
        self.weights = weights
        self.path = path
        self._fingerprint: str | None = None

    @property
    def scale(self) -> float:
        return float(self.metadata.alpha) / int(self.metadata.rank)

    @property
    def fingerprint(self) -> str:
        """A digest of the adapter's weights and scale: what an adapted engine's prefix caches are keyed by."""
        if self._fingerprint is None:
            digest = hashlib.sha256(json.dumps([self.metadata.weights, self.scale]).encode())
            for name in sorted(self.weights):
                a, b = self.weights[name]
                digest.update(name.encode())
                digest.update(a.detach().float().contiguous().cpu().numpy().tobytes())
                digest.update(b.detach().float().contiguous().cpu().numpy().tobytes())
            self._fingerprint = digest.hexdigest()[:32]
        return self._fingerprint

    def describe(self) -> str:
        where = str(self.path) if self.path is not None else "adapter"
        return f"{where} (rank {self.metadata.rank}, {', '.join(self.metadata.targets)}; tuned for {self.metadata.rubric!r})"

    # -- checking and merging ---------------------------------------------------------------

    def check(self, model: Any) -> None:
        """Refuse (a `ModelError`) a model whose weights are not those the adapter was tuned on, or that lacks
        a projection it adapts (or has it in another shape)."""
        found = weights_fingerprint(model)
        if found != self.metadata.weights:
            tuned = f" ({self.metadata.model_name})" if self.metadata.model_name else ""
            raise ModelError(f"{self._name()} was tuned on another model{tuned}: its weights' fingerprint is "
                             f"{self.metadata.weights[:12]}, this model's is {found[:12]}; tune it again on this model")
        modules = dict(model.named_modules())
        for name, (a, b) in self.weights.items():
            module = modules.get(name)
            weight = getattr(module, "weight", None)
            if weight is None or tuple(weight.shape) != (b.shape[0], a.shape[1]):
                raise ModelError(f"{self._name()} adapts {name}, which this model does not have in shape "
                                 f"{(b.shape[0], a.shape[1])}; tune it again on this model")

    def merged(self, model: Any) -> Any:
        """`model` with every adapted projection's weight replaced by a merged copy (`W + scale * B @ A`, as peft
        merges: the product and the sum in float32, rounded once to the weight's dtype). Every other module and weight
        is `model`'s own, shared; `model` itself is not changed."""
        self.check(model)
        clone = _shallow(model)
        for name, (a, b) in self.weights.items():
            *path, leaf = name.split(".")
            parent = clone
            for part in path:
                child = _shallow(parent._modules[part])
                parent._modules[part] = child
                parent = child
            layer = _shallow(parent._modules[leaf])
            parent._modules[leaf] = layer
            weight = layer.weight
            delta = (b.to(device=weight.device, dtype=torch.float32) @ a.to(device=weight.device, dtype=torch.float32)) * self.scale
            merged = (weight.detach().float() + delta).to(weight.dtype).contiguous()
            layer._parameters["weight"] = torch.nn.Parameter(merged, requires_grad=False)
            if getattr(_module(model, name), "packed", None) is not None:
                # The engine's own decoder keeps a oneDNN-packed copy of a projection's weight: pack the merged one.
                layer.packed = merged.to_mkldnn()
            elif hasattr(layer, "packed"):
                layer.packed = None
        return clone

    def _name(self) -> str:
        return f"adapter {self.path}" if self.path is not None else "the adapter"

    # -- files --------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write the adapter atomically (peft's key names, float32; the metadata in the header) and a readable
        copy of the metadata beside it (`.json`). A path that holds another kind of file is refused."""
        from safetensors.torch import save

        path = Path(path)
        problem = save_problem(path)
        if problem:
            raise ModelError(problem)
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for name, (a, b) in self.weights.items():
            tensors[f"{PEFT_PREFIX}{name}.lora_A.weight"] = a.detach().float().contiguous().cpu()
            tensors[f"{PEFT_PREFIX}{name}.lora_B.weight"] = b.detach().float().contiguous().cpu()
        write_atomically(path, save(tensors, metadata={METADATA_KEY: self.metadata.model_dump_json()}))
        readable_copy(path).write_text(self.metadata.model_dump_json(indent=2) + "\n", encoding="utf-8")
        self.path = path
        return path

    @classmethod
    def load(cls, path: str | Path) -> Adapter:

        path = Path(path)
        (header,), tensors = read_saved_tensors(path, what="adapter", keys=(METADATA_KEY,), error=ModelError,
                                                writer="tune one with `decisionflow tune`")
        try:
            metadata = AdapterMetadata.model_validate_json(header)
        except ValidationError as error:
            first = error.errors(include_url=False)[0]
            raise ModelError(f"{path}: not an adapter file ({'.'.join(map(str, first['loc'])) or 'metadata'}: {first['msg']})") from None
        if metadata.format != FORMAT:
            raise ModelError(f"{path}: adapter format {metadata.format}, this decisionflow reads format {FORMAT}; tune again")
        weights: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for key in tensors:
            if key.endswith(".lora_A.weight"):
                name = key.removeprefix(PEFT_PREFIX).removesuffix(".lora_A.weight")
                other = f"{PEFT_PREFIX}{name}.lora_B.weight"
                if other not in tensors:
                    raise ModelError(f"{path}: {key} has no lora_B beside it; tune again")
                weights[name] = (tensors[key].float(), tensors[other].float())
        if not weights:
            raise ModelError(f"{path}: the adapter holds no LoRA weights; tune again")
        return cls(metadata, weights, path)


def adapter_path_for(rubric_path: str | Path) -> Path:
    """`NAME.adapter.safetensors` beside a YAML rubric `NAME.yaml`."""
    path = Path(rubric_path)
    return path.with_name(path.name.removesuffix(path.suffix) + SUFFIX) if path.suffix else path.with_name(path.name + SUFFIX)




def save_problem(path: str | Path) -> str | None:
    """Why saving an adapter at `path` would replace a file that is not an adapter (None when it would not)."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder; give a file name (NAME{SUFFIX})"
    if path.is_file() and not _holds_adapter(path):
        return f"{path} exists and is not an adapter file; give another path (saving would replace it)"
    copy_path = readable_copy(path)
    if copy_path.is_dir() or (copy_path.is_file() and not _holds_adapter_metadata(copy_path)):
        return f"{copy_path}, where the adapter's readable metadata goes, holds another file; give another path"
    return None


def _holds_adapter(path: Path) -> bool:
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as handle:
            return METADATA_KEY in (handle.metadata() or {})
    except Exception:  # noqa: BLE001 - anything unreadable is not an adapter
        return False


def _holds_adapter_metadata(path: Path) -> bool:
    try:
        AdapterMetadata.model_validate_json(path.read_text(encoding="utf-8"))
        return True
    except (OSError, ValueError):
        return False


def _shallow(module: torch.nn.Module) -> Any:
    """A copy of `module` that shares its weights and children but owns the dictionaries holding them."""
    clone = copy.copy(module)
    for slot in ("_modules", "_parameters", "_buffers"):
        if slot in module.__dict__:
            clone.__dict__[slot] = dict(module.__dict__[slot])
    return clone


def _module(model: Any, name: str) -> Any:
    """The module `name` of `model` (the unmerged original)."""
    module = model
    for part in name.split("."):
        module = module._modules[part]
    return module
