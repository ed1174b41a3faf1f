"""A pass's host work: one copy to the device, nothing read back, no host-built masks off the CPU path.

Every attention path of the backend (`blockwise`, the CPU's; `sdpa`, CUDA's torch path; `fused`, the
Triton kernels) runs here on the CPU on a tiny Qwen2-shaped model: the `sdpa` path is forced on the
CPU, where torch's attention takes the same padded batch and mask as on CUDA, and the kernels run
under Triton's interpreter. Each path must give the blockwise path's log-probs, upload the pass's
integers once (`DecoderBackend._upload`), create no tensor from Python data directly on the
device and index with no Python list (each would be one more blocking copy on CUDA), and read
nothing back to the host during the pass; the `sdpa` and `fused` paths build no boolean mask on the
host. A whole request then reads values back once per pass (the readout's one gather).
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from decisionflow.runtime.engine import Engine, EngineOptions  # noqa: E402
from decisionflow.runtime.model.loading import LoadedModel  # noqa: E402
from decisionflow.runtime.passes import backend as backend_module  # noqa: E402
from decisionflow.spec.rubric import Rubric  # noqa: E402

RUBRIC = Rubric.model_validate({
    "name": "transfers",
    "instructions": "Route one customer message.",
    "fields": {
        "domain": {"kind": "choice", "question": "The area it concerns", "options": ["banking", "travel", "shopping"]},
        "intent": {"kind": "choice", "question": "What the customer wants", "marginalize": 2,
                   "options_by": {"domain": {"banking": ["card_fee", "transfer"], "travel": ["lost_luggage", "book_flight"],
                                             "shopping": ["order_status", "return_item"]}}},
        "urgent": {"kind": "boolean", "question": "Whether it is urgent"},
        "severity": {"kind": "score", "question": "How severe", "min": 0, "max": 12},
    },
})
TEXTS = [
    "My suitcase never arrived after my flight to Rome.",
    "I was charged a fee twice on my card, please refund it today.",
    "Where is my order? It is a week late.",
]

DEVICE_TO_HOST = {"tolist", "item", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__"}
FROM_PYTHON = {"tensor", "as_tensor", "asarray", "from_numpy"}


class PassWatch(TorchFunctionMode):
    """Inside one pass: reads back to the host, tensors made from Python data on a device, list indexes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.direct: list[str] = []
        self.list_indexes: list[str] = []
        self.uploading = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if not self.uploading:
            if name in DEVICE_TO_HOST:
                self.reads.append(name)
            if name in FROM_PYTHON and kwargs.get("device") is not None:
                self.direct.append(name)
            if name in {"__getitem__", "__setitem__", "index_select"} and any(_holds_list(a) for a in args[1:]):
                self.list_indexes.append(name)
        return func(*args, **kwargs)


def _holds_list(index) -> bool:
    """Whether an index is, or holds, a Python list (torch copies it to the device before indexing)."""
    return isinstance(index, list) or (isinstance(index, tuple) and any(isinstance(i, list) for i in index))


@pytest.fixture(scope="module")
def tiny(qwen_tokenizer) -> LoadedModel:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(qwen_tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return LoadedModel(Qwen2ForCausalLM(config).eval(), qwen_tokenizer, "tiny Qwen2")


def _engine(tiny: LoadedModel, path: str) -> Engine:
    engine = Engine(tiny, options=EngineOptions(kernels="triton" if path == "fused" else "torch", debias="none"))
    engine.backend.attention = path
    return engine


def _watched_passes(engine: Engine, monkeypatch) -> tuple[list[torch.Tensor], list[PassWatch], list[int]]:
    """Decide TEXTS, recording each pass's log-probs, what it did on the host, and its uploads."""
    original_pass = backend_module.DecoderBackend.run_pass_with_features
    original_upload = backend_module.DecoderBackend._upload
    logprobs: list[torch.Tensor] = []
    watches: list[PassWatch] = []
    uploads: list[int] = []

    def upload(self, sections):
        uploads[-1] += 1
        watches[-1].uploading = True
        try:
            return original_upload(self, sections)
        finally:
            watches[-1].uploading = False

    def run_pass(self, *args, **kwargs):
        watches.append(PassWatch())
        uploads.append(0)
        with watches[-1]:
            out = original_pass(self, *args, **kwargs)
        logprobs.append(out[0].clone())
        return out

    monkeypatch.setattr(backend_module.DecoderBackend, "run_pass_with_features", run_pass)
    monkeypatch.setattr(backend_module.DecoderBackend, "_upload", upload)
    engine.decide_many(RUBRIC, TEXTS)
    return logprobs, watches, uploads


@pytest.fixture(scope="module")
def blockwise(tiny):
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _watched_passes(_engine(tiny, "blockwise"), monkeypatch)


@pytest.mark.parametrize("path", ["blockwise", "sdpa", "fused"])
def test_each_attention_path_uploads_once_and_reads_nothing_back_per_pass(tiny, blockwise, path, monkeypatch):
    if path == "fused":
        pytest.importorskip("triton")
        from decisionflow_kernels.launch import interpreted
        from decisionflow_kernels.rms_norm import _rms_norm_kernel

        if not interpreted(_rms_norm_kernel):
            pytest.skip("the kernels were imported without TRITON_INTERPRET=1 in this process")
    masks: list[int] = []
    if path != "blockwise":
        real = backend_module.tree_visibility
        monkeypatch.setattr(backend_module, "tree_visibility", lambda *a, **k: masks.append(1) or real(*a, **k))
    engine = _engine(tiny, path)
    logprobs, watches, uploads = _watched_passes(engine, monkeypatch)
    expected = blockwise[0]
    # Content-free priors are off (debias="none"): the passes are the three requests' rounds.
    assert len(logprobs) == len(expected) >= 2
    for got, want in zip(logprobs, expected):
        assert torch.allclose(got, want, atol=1e-4 if path == "fused" else 1e-5), (got - want).abs().max()
    assert uploads == [1] * len(logprobs)
    assert masks == []
    for watch in watches:
        assert watch.direct == [] and watch.list_indexes == []
        if path != "fused":  # Triton's interpreter itself moves the kernels' arguments through the host
            assert watch.reads == []


def test_a_batch_copies_to_the_device_and_reads_back_once_per_pass_on_the_sdpa_path(tiny, monkeypatch):
    """The whole request, readout included: the readout's gather index rides in the pass's one upload."""
    engine = _engine(tiny, "sdpa")
    engine.decide_many(RUBRIC, TEXTS)  # compile and prefill outside the count
    reads: list[str] = []
    direct: list[str] = []
    uploads: list[int] = []
    original_upload = backend_module.DecoderBackend._upload
    monkeypatch.setattr(backend_module.DecoderBackend, "_upload",
                        lambda self, sections: uploads.append(1) or original_upload(self, sections))

    class Transfers(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in DEVICE_TO_HOST:
                reads.append(name)
            if name in FROM_PYTHON and (kwargs or {}).get("device") is not None:
                direct.append(name)
            return func(*args, **(kwargs or {}))

    with Transfers():
        decisions = engine.decide_many(RUBRIC, TEXTS)
    passes = decisions[0].stats.forward_passes
    assert all(d.stats.batch_size == len(TEXTS) for d in decisions)
    assert reads == ["tolist"] * passes
    assert len(uploads) == passes and direct == []
