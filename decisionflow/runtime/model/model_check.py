"""Is a model served exactly? The packed pass against one plain forward of the model per branch.

`check_model` decides a built-in rubric (a choice with multi-token labels that share a prefix, a boolean,
a score, and a field asked after another under a condition, so answers are written into the prompt and a
second round reads them) twice on the same texts: through the path the engine takes for the model (its
own decoder, or the model's own forward, see `model_forward`) and through the reference
(`PlainForwardBackend`: for every read position, the model's own forward over its whole sequence, with its
own causal mask, no packing and no cache). Per field it reports the largest difference of the raw
log-probabilities of the answers (before any correction) and whether the answers agree; a difference past
the tolerance means the model is not served exactly.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ...spec.rubric import Rubric
from ..engine import Engine, EngineOptions
from ..passes.model_forward import PlainForwardBackend
from ..readout.debias import Debias
from .loading import LoadedModel

CHECK_RUBRIC = Rubric.model_validate({
    "name": "model_check",
    "instructions": "Triage one customer message.",
    "fields": {
        "team": {"kind": "choice", "question": "Which team handles it", "options": {
            "billing_and_invoices": "charges, refunds and invoices", "billing_disputes": "contested charges",
            "shipping_and_delivery": "parcels and couriers", "returns": "sending goods back"}},
        "refund_requested": {"kind": "boolean", "question": "Whether the customer asks for money back"},
        "severity": {"kind": "score", "question": "How severe the issue is", "min": 0, "max": 4},
        "escalate": {"kind": "boolean", "question": "Whether a human must review it", "after": ["severity"],
                     "when": {"field": "refund_requested", "values": [True, False]}},
    },
})
"""Every kind, labels that share tokens (`billing_...`), a pinned first field and a dependent round."""
CHECK_TEXTS = (
    "I was charged twice for my March invoice. Please refund the duplicate charge.",
    "My parcel never arrived and the tracking page has not moved for a week.",
)
TOLERANCE = {"float32": 1e-3, "bfloat16": 0.5, "float16": 0.15}
"""Largest |difference of log-probabilities| accepted per number format. A structural mismatch (a token
that sees a key it should not, a wrong position) moves log-probabilities by whole units; float32 only sums
in another order (the bundled model: 2e-5 on either path), while the half formats round every product,
differently in a packed pass and in a plain forward (bfloat16 on the bundled model: up to 0.25 on either
path, with float32 exact)."""


@dataclass(frozen=True)
class FieldCheck:
    name: str
    kind: str
    max_difference: float
    """Largest |log p(packed) - log p(reference)| over the field's answers and the texts."""
    agree: bool
    """The same answer on every text."""


@dataclass(frozen=True)
class ModelCheck:
    model: str
    model_type: str
    path: str
    """The path the engine takes for this model (`decoder` or `model-forward`)."""
    dtype: str
    tolerance: float
    fields: list[FieldCheck]
    packed_ms: float
    reference_ms: float
    texts: int
    notes: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return all(f.max_difference <= self.tolerance for f in self.fields)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "model_type": self.model_type, "path": self.path, "dtype": self.dtype,
            "tolerance": self.tolerance, "exact": self.exact, "packed_ms": self.packed_ms,
            "reference_ms": self.reference_ms, "texts": self.texts, "notes": self.notes,
            "fields": [{"name": f.name, "kind": f.kind, "max_difference": f.max_difference, "agree": f.agree}
                       for f in self.fields],
        }


def check_model(engine: Engine, reference: LoadedModel | None = None, *, texts: Sequence[str] = CHECK_TEXTS,
                tolerance: float | None = None) -> ModelCheck:
    """Decide `CHECK_RUBRIC` on `texts` through `engine`'s path and through the plain-forward reference.

    `reference`: the model the reference forwards (default: `engine`'s own, which must be a transformers
    model; the engine's own decoder has no forward of its own to compare with, so pass the same checkpoint
    loaded with `loader="transformers"`). Both read without any readout correction.
    """
    options = EngineOptions(debias=Debias.NONE, pin_first=engine.options.pin_first, mode=engine.options.mode,
                            model_forward=engine.options.model_forward, kernels=engine.options.kernels)
    packed = Engine(engine.loaded, options=options, backend=engine.backend)
    loaded = reference or engine.loaded
    plain = Engine(loaded, options=options, backend=PlainForwardBackend(loaded.model))
    dtype = str(engine.backend.dtype).removeprefix("torch.")
    limit = tolerance if tolerance is not None else TOLERANCE.get(dtype, 0.1)
    packed.decide(CHECK_RUBRIC, texts[0])  # the prefix's prefill and the first-call costs, out of the timing
    began = time.perf_counter()
    fast = packed.decide_many(CHECK_RUBRIC, list(texts))
    packed_ms = (time.perf_counter() - began) * 1000
    began = time.perf_counter()
    slow = plain.decide_many(CHECK_RUBRIC, list(texts))
    reference_ms = (time.perf_counter() - began) * 1000
    fields = []
    notes = []
    for name, spec in CHECK_RUBRIC.fields.items():
        worst, agree = 0.0, True
        for a, b in zip(fast, slow):
            mine, theirs = a.fields[name], b.fields[name]
            agree = agree and mine.value == theirs.value
            if mine.raw_probabilities is None or theirs.raw_probabilities is None:
                if mine.asked != theirs.asked:
                    worst = math.inf
                continue
            for label, p in mine.raw_probabilities.items():
                q = theirs.raw_probabilities.get(label, 0.0)
                worst = max(worst, abs(_log(p) - _log(q)))
        fields.append(FieldCheck(name, spec.kind.value, worst, agree))
    if not all(f.agree for f in fields) and all(f.max_difference <= limit for f in fields):
        notes.append("an answer differs where its probabilities are within the tolerance: a near tie")
    return ModelCheck(
        model=str(engine.loaded.name), model_type=str(getattr(engine.backend.config, "model_type", "?")),
        path=engine.backend.path, dtype=dtype, tolerance=limit, fields=fields, packed_ms=packed_ms,
        reference_ms=reference_ms, texts=len(texts), notes=notes,
    )


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -1e9
