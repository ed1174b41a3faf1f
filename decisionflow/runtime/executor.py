"""The executor: runs a plan's rounds as packed forward passes for a batch of requests.

Pass 1 carries each request's input and the rows of round 0; every later pass carries the answer
lines decided before it (kept in the request's context, so later rows read them) and the rows of
the next round. A warm request with a pinned first field therefore takes two passes however many
fields follow, and each extra dependency level adds one.

A round in which a request has nothing to read (every field of it switched off by `when=`) costs
that request nothing: its pending tokens wait for the next round that reads, and no pass is counted.

Each round runs as three named phases: `pack_round` (the rows to read, after each request's pending
tokens), the backend's pass, and `read_round` (distributions, answers, the lines to write next).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..compiler import CompiledRubric
from ..errors import InputError
from ..spec.plan import Plan, Round
from ..spec.rubric import FieldKind, Value
from .backend import HeadCache, PackedPass, RequestContext, TransformersBackend
from .calibration import Calibration
from .debias import Debias, Priors
from .readout import read_fields
from .result import FieldResult


@dataclass
class RequestState:
    input_tokens: list[int]
    context: RequestContext = field(default_factory=RequestContext)
    pending: list[int] = field(default_factory=list)
    """Tokens to write into the context in the next pass (the input, then decided answer lines)."""
    answers: dict[str, Value | None] = field(default_factory=dict)
    results: dict[str, FieldResult] = field(default_factory=dict)
    passes: int = 0
    tokens_fed: int = 0

    def __post_init__(self) -> None:
        self.pending = list(self.input_tokens)


@dataclass(frozen=True)
class Read:
    request: int
    field: str
    positions: list[int]
    """The field's read positions within the packed pass."""


def check_fits(compiled: CompiledRubric, input_tokens: list[int], max_positions: int) -> None:
    """Refuse an input that, with every answer line and the deepest row, exceeds the model's context."""
    if not max_positions:
        return
    fixed = compiled.positions_before_input
    if fixed >= max_positions:
        raise InputError(
            f"this rubric's prompt ({len(compiled.head_tokens)} tokens) and answers need {fixed} positions "
            f"before any input, but the model's context holds {max_positions}: shorten the rubric "
            "(fewer or shorter options and descriptions) or use a model with a longer context"
        )
    if fixed + len(input_tokens) > max_positions:
        raise InputError(
            f"the input is {len(input_tokens)} tokens; with this rubric's prompt "
            f"({len(compiled.head_tokens)} tokens) and answers it needs {fixed + len(input_tokens)} positions, "
            f"but the model's context holds {max_positions}. Shorten the input to at most "
            f"{max_positions - fixed} tokens."
        )


def execute(
    backend: TransformersBackend,
    compiled: CompiledRubric,
    plan: Plan,
    head: HeadCache,
    requests: list[RequestState],
    calibration: Calibration | None = None,
    priors: Priors | None = None,
) -> float:
    """Decide every field of every request in place; return the milliseconds spent in passes.

    `priors` debias each field's distribution before its answer is chosen; `calibration` then rescales
    it and makes it abstain below its thresholds (the candidate mass it judges stays the raw one).
    """
    spent = 0.0
    for round_ in plan.rounds:
        packed, reads = pack_round(compiled, round_, requests)
        if not reads:
            continue
        began = time.perf_counter()
        logprobs = backend.run_pass(head, [s.context for s in requests], packed, [p for r in reads for p in r.positions])
        spent += (time.perf_counter() - began) * 1000
        read_round(compiled, round_, requests, reads, logprobs, calibration, priors)
    return spent


def pack_round(compiled: CompiledRubric, round_: Round, requests: list[RequestState]) -> tuple[PackedPass, list[Read]]:
    """One pass's tokens: per request that reads something this round, its pending tokens, then its rows.

    Fields whose `when=` condition is false are settled here as not asked. A request with no read in
    this round adds nothing and keeps its pending tokens for the next round.
    """
    packed = PackedPass()
    reads: list[Read] = []
    rubric = compiled.rubric
    for r, state in enumerate(requests):
        asked = []
        for name in round_.fields:
            spec = rubric.fields[name]
            if spec.when is not None and not spec.when.holds(state.answers):
                state.answers[name] = None
                state.results[name] = _not_asked(name, spec.kind, spec.when.field, round_.index)
            else:
                asked.append(name)
        if not asked:
            continue
        start = len(packed)
        last = -1
        for token in state.pending:
            last = packed.add(token, parent=last, request=r, keep=True)
        for name in asked:
            row = compiled.fields[name]
            placed: list[int] = []
            for token, parent in zip(row.row_tokens, row.row_parents):
                placed.append(packed.add(token, parent=last if parent < 0 else placed[parent], request=r, share=True))
            reads.append(Read(r, name, [placed[p] for p in row.read_positions]))
        state.passes += 1
        state.tokens_fed += len(packed) - start
        state.pending = []
    return packed, reads


def read_round(
    compiled: CompiledRubric,
    round_: Round,
    requests: list[RequestState],
    reads: list[Read],
    logprobs: torch.Tensor,
    calibration: Calibration | None,
    priors: Priors | None = None,
) -> None:
    """Turn a pass's log-probs into each field's result, and queue each answer's line for the next pass."""
    decided: dict[int, dict[str, int]] = {}
    offsets, row = [], 0
    for read in reads:
        offsets.append(row)
        row += len(read.positions)
    readings = read_fields(logprobs, [(compiled.fields[r.field], o) for r, o in zip(reads, offsets)])
    for read, reading in zip(reads, readings):
        cf = compiled.fields[read.field]
        probabilities, abstained = reading.probabilities, False
        debias = Debias.NONE
        if priors is not None:
            probabilities, debias = priors.apply(read.field, probabilities)
        if calibration is not None:
            probabilities, abstained = calibration.apply(read.field, probabilities, reading.candidate_mass)
        best = max(range(len(cf.values)), key=probabilities.__getitem__)
        # An abstained field reports no answer, but its best guess is still written into the
        # prompt: later rows need a complete JSON object in front of them.
        value = None if abstained else cf.values[best]
        state = requests[read.request]
        state.answers[read.field] = value
        state.results[read.field] = FieldResult(
            name=read.field,
            kind=cf.spec.kind,
            value=value,
            abstained=abstained,
            probabilities=dict(zip(cf.labels, probabilities)),
            candidate_mass=reading.candidate_mass,
            round=round_.index,
            method=cf.method,
            debias=debias.value,
            expected_value=(
                sum(p * v for p, v in zip(probabilities, cf.values)) if cf.spec.kind is FieldKind.SCORE else None
            ),
        )
        decided.setdefault(read.request, {})[read.field] = best
    # Written in declaration order, so later rounds read a JSON object in the rubric's key order.
    for r, chosen in decided.items():
        for name in compiled.rubric.fields:
            if name in chosen:
                requests[r].pending.extend(compiled.fields[name].answer_lines[chosen[name]])


def _not_asked(name: str, kind: FieldKind, condition_field: str, round_index: int) -> FieldResult:
    return FieldResult(
        name=name, kind=kind, value=None, probabilities={}, candidate_mass=None, round=round_index,
        method="not_asked", asked=False, reason=f"its condition on {condition_field!r} was not met",
    )
