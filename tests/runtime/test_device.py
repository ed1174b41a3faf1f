"""Device and precision: options resolve as documented, and a pass makes one host transfer only."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from decisionflow.errors import ModelError, Unavailable
from decisionflow.runtime.engine import Engine
from decisionflow.runtime.model.loading import resolve_device, resolve_dtype
from decisionflow.spec.rubric import Rubric

RUBRIC = Rubric.model_validate({
    "name": "device",
    "fields": {
        "topic": {"kind": "choice", "question": "What it is about", "options": ["delivery", "billing", "account"]},
        "urgent": {"kind": "boolean", "question": "Whether it is urgent"},
        "severity": {"kind": "score", "question": "How severe", "min": 0, "max": 12},
    },
})
TEXT = "I cannot log in and my card was charged twice."


def test_auto_resolves_to_the_cpu_here_and_cuda_is_refused_clearly():
    assert resolve_device("auto") == torch.device("cpu" if not torch.cuda.is_available() else "cuda")
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32
    assert resolve_dtype("bf16", torch.device("cpu")) is torch.bfloat16
    with pytest.raises(ModelError, match="unknown dtype 'int4'"):
        resolve_dtype("int4", torch.device("cpu"))
    with pytest.raises(ModelError, match="unknown device"):
        resolve_device("tpu:0")
    if not torch.cuda.is_available():
        with pytest.raises(Unavailable, match="no CUDA device"):
            resolve_device("cuda:1")


class HostTransfers(TorchFunctionMode):
    """Counts the calls that move a tensor's values to the host (each one a device sync on CUDA)."""

    NAMES = {"tolist", "item", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__"}

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.NAMES:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.model
def test_a_request_moves_values_to_the_host_once_per_pass(engine: Engine):
    engine.decide(RUBRIC, TEXT)  # compile and prefill outside the count
    with HostTransfers() as watch:
        result = engine.decide(RUBRIC, TEXT)
    assert result.stats.forward_passes == 2
    assert watch.calls == ["tolist"] * result.stats.forward_passes
    assert result.stats.device == "cpu" and result.stats.dtype == "float32"
    assert result.stats.kernels.startswith("torch")


@pytest.mark.model
def test_a_bfloat16_engine_keeps_everything_in_bfloat16(bfloat16_engine: Engine):
    half = bfloat16_engine
    result = half.decide(RUBRIC, TEXT)
    assert result.stats.dtype == "bfloat16"
    prepared = half.prepared.get(RUBRIC)
    assert all(k.dtype is torch.bfloat16 and v.dtype is torch.bfloat16 for k, v in prepared.prefix.kv)
    for field in result.fields.values():
        assert sum(field.probabilities.values()) == pytest.approx(1.0)


@pytest.mark.model
def test_kernel_choices_resolve_and_refuse_clearly(engine: Engine, monkeypatch):
    from decisionflow.runtime.engine import EngineOptions

    assert Engine(engine.loaded, options=EngineOptions(kernels="auto")).backend.kernels.startswith("torch")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(Unavailable, match="kernels='triton' cannot be used: Triton kernels run on CUDA"):
        Engine(engine.loaded, options=EngineOptions(kernels="triton"))
    with pytest.raises(ModelError, match="unknown kernels choice 'cuda'"):
        Engine(engine.loaded, options=EngineOptions(kernels="cuda"))
