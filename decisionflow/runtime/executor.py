"""The executor: runs a plan's rounds as packed forward passes for a batch of requests.

Pass 1 carries each request's input and the rows of round 0; every later pass carries the answer
lines decided before it (kept in the request's context, so later rows read them) and the rows of
the next round. A warm request with a pinned first field therefore takes two passes however many
fields follow, and each extra dependency level adds one.

A round in which a request has nothing to read (every field of it switched off by `when=`) costs
that request nothing: its pending tokens wait for the next round that reads, and no pass is counted.

Each round runs as three named phases: `pack_round` (the rows to read, after each request's pending
tokens), the backend's pass, and `read_round` (distributions, answers, the lines to write next).
Derived fields are computed in code as soon as the fields they read are settled (`settle_derived`).

With fitted heads (`runtime.heads.fitted`), the same pass also hands back the hidden states at each fitted
field's answer position, and the field's head turns them (with the zero-shot distribution) into the
field's answer. A fused head with an input-mean member also reads the hidden states averaged over the
input's positions: the pass that feeds a request's input averages them on the device as each layer is done
(`forward.Pool`, so it holds no input token's state longer than a layer) and hands them back
with the answer positions' states (`RequestState.input_means`). To fit heads, `capture` keeps those
features per field, and `RequestState.forced` writes a row's gold answers into the prompt instead of the
model's, so dependent fields are read as they would be under the right parent answer.

A field with `options_by` reads the row offering its parent's answer's options. A field with
`marginalize: K` is read under each of its parent's top-K answers in the same pass: for every other
answer a branch replaces the parent's answer line (it sees the context up to where that line began,
then the alternative line and every line written after it), and the field's row hangs off each
branch. Its distribution is the mixture weighted by the parent's probabilities renormalised over
those K; a `when` condition is evaluated per hypothesis, so the field gets a probability of being
asked; the top joint answers are reported.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from ..compiler import CompiledField, CompiledRubric
from ..errors import ContextLengthError, InputError, ModelError
from ..spec.plan import Plan, Round
from ..spec.rubric import FieldKind, FieldSpec, Value, label_of
from .heads.fitted import Heads
from .passes.backend import PackedPass, PrefixCache, RequestContext
from .passes.forward import Pool
from .passes.protocol import Backend
from .readout.calibration import Calibration
from .readout.debias import Debias, Priors, mean_distribution
from .readout.derive import Joint, derive_field
from .readout.readout import FieldReading, gather_index, read_fields
from .result import FieldResult

JOINT_ANSWERS_SHOWN = 5


@dataclass
class RequestState:
    input_tokens: list[int]
    context: RequestContext = field(default_factory=RequestContext)
    answers: dict[str, Value | None] = field(default_factory=dict)
    results: dict[str, FieldResult] = field(default_factory=dict)
    written: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)
    """Answer lines written into the prompt, in order: (field, its label, its tokens)."""
    fed_lines: int = 0
    """How many of `written` are already in the context (the rest go into the next pass)."""
    input_fed: bool = False
    joints: dict[str, Joint] = field(default_factory=dict)
    passes: int = 0
    tokens_fed: int = 0
    forced: dict[str, str] = field(default_factory=dict)
    """Field -> label to write into the prompt (and to condition later fields on) instead of the model's
    answer: a labelled row's gold answers, when fitting heads."""
    captured: dict[str, Captured] = field(default_factory=dict)
    """With `capture`: per field read, what a head would read there."""
    words: torch.Tensor | None = None
    """The input's word vector, where a fitted n-gram head reads it (`Heads.words`)."""
    input_means: dict[int, torch.Tensor] = field(default_factory=dict)
    """Per layer asked for, the input's hidden states averaged over its positions (from the pass that fed it)."""
    input_rows: list[int] = field(default_factory=list)
    """Where the input's tokens sit in the pass being packed (empty in a pass that does not feed it)."""

    def input_mean(self, layers: Sequence[int]) -> torch.Tensor | None:
        """The input's mean hidden state at `layers`, side by side (None when it was not captured)."""
        if not layers or any(layer not in self.input_means for layer in layers):
            return None
        return torch.cat([self.input_means[layer] for layer in layers])

    @property
    def pending(self) -> list[int]:
        """Tokens to write into the context in the next pass (the input, then decided answer lines)."""
        tokens = [] if self.input_fed else list(self.input_tokens)
        for _, _, line in self.written[self.fed_lines :]:
            tokens.extend(line)
        return tokens

    def line_start(self, index: int) -> int:
        """Where written line `index` begins in the context (it is fed)."""
        return len(self.input_tokens) + sum(len(line) for _, _, line in self.written[:index])


@dataclass(frozen=True)
class Captured:
    """A field's head features from one read: hidden states and its zero-shot distribution."""

    features: torch.Tensor
    """[hidden * layers] float32 (see `forward.Capture`)."""
    zero_shot: tuple[float, ...]
    """The engine's readout (after its correction) over the offered answers."""
    offered: tuple[int, ...]
    """Indexes of the offered answers in the field's labels."""
    input_mean: torch.Tensor | None = None
    """The input's mean hidden state at the captured mean layers, side by side (None: none were asked for)."""


@dataclass(frozen=True)
class Read:
    request: int
    field: str
    positions: list[int]
    """The field's read positions within the packed pass."""
    row: CompiledField
    hypothesis: str | None = None
    """For a marginalised field: the parent answer (label) this read assumes."""
    weight: float = 1.0
    """The hypothesis's probability, renormalised over the hypotheses read."""


@dataclass(frozen=True)
class Hypothesis:
    label: str
    weight: float
    row: CompiledField | None
    """None: the field is not asked under this parent answer."""


def check_fits(compiled: CompiledRubric, input_tokens: list[int], max_positions: int) -> None:
    """Refuse an input that, with every answer line and the deepest row, exceeds the model's context."""
    if not max_positions:
        return
    fixed = compiled.positions_before_input
    if fixed >= max_positions:
        raise InputError(
            f"this rubric's prompt ({len(compiled.prefix_tokens)} tokens) and answers need {fixed} positions "
            f"before any input, but the model's context holds {max_positions}: shorten the rubric "
            "(fewer or shorter options, descriptions or in-context examples) or use a model with a longer context"
        )
    if fixed + len(input_tokens) > max_positions:
        raise ContextLengthError(
            f"the input is {len(input_tokens)} tokens; with this rubric's prompt "
            f"({len(compiled.prefix_tokens)} tokens) and answers it needs {fixed + len(input_tokens)} positions, "
            f"but the model's context holds {max_positions}. Shorten the input to at most "
            f"{max_positions - fixed} tokens."
        )


def execute(
    backend: Backend,
    compiled: CompiledRubric,
    plan: Plan,
    prefix: PrefixCache,
    requests: list[RequestState],
    calibration: Calibration | None = None,
    priors: Priors | None = None,
    heads: Heads | None = None,
    capture: Sequence[int] = (),
    capture_means: Sequence[int] = (),
    *,
    checkpoint: Callable[[str], None] | None = None,
    free: FreeReading | None = None,
) -> float:
    """Decide every field of every request in place; return the milliseconds spent in passes.

    `priors` debias each field's distribution before its answer is chosen; `heads` then answer the
    fields they were fitted for; `calibration` rescales the result and makes it abstain below its
    thresholds (the candidate mass it judges stays the raw one). `capture`: hidden layers to keep per
    field read in `RequestState.captured` (for fitting heads); `capture_means`: layers whose mean over
    the input's positions goes with them. `checkpoint("pass")` is asked before each pass: what it raises
    stops the requests there (their states are then half decided, for the caller to drop). `free`: the
    first `free.requests` requests are content-free inputs whose raw readings, taken in the same passes,
    are the content-free prior of `free.methods`' fields for the others (see `FreeReading`).
    """
    spent = 0.0
    mean_layers = tuple(dict.fromkeys([*(heads.mean_layers if heads is not None else ()), *capture_means]))
    read_layers = tuple(dict.fromkeys([*(heads.layers if heads is not None else ()), *capture]))
    for round_ in plan.rounds:
        packed, reads = pack_round(compiled, round_, requests)
        settle_derived(compiled, plan, requests, round_.index)
        if not reads:
            continue
        if checkpoint is not None:
            checkpoint("pass")
        began = time.perf_counter()
        rows = read_rows(reads)
        feature_rows = [r.positions[r.row.root_read] for r in reads] if read_layers else []
        averaged = [state for state in requests if state.input_rows] if mean_layers else []
        pool = Pool(mean_layers, [row for state in averaged for row in state.input_rows],
                         [len(state.input_rows) for state in averaged]) if averaged else None
        out = backend.run_pass_with_features(
            prefix, [s.context for s in requests], packed, [p for r in reads for p in r.positions],
            read_layers, feature_rows, gather_index(rows), pool,
        )
        spent += (time.perf_counter() - began) * 1000
        by_read = _keep_features(out.features, out.means, read_layers, averaged, mean_layers)
        readings = read_fields(out.logprobs, rows, out.gathered)
        skip = 0
        if free is not None:
            priors = free.read(reads, readings, priors)
            skip = free.requests
        read_round(compiled, round_, requests, reads, readings, calibration, priors, heads, by_read, capture,
                   capture_means, skip_requests=skip)
        settle_derived(compiled, plan, requests, round_.index)
    return spent


@dataclass
class FreeReading:
    """Content-free inputs read in the same passes as the requests they correct, for a rubric whose fields
    read nothing but the input (independent questions): the prior a field's reading is divided by is the
    mean of its raw readings of the content-free inputs, known as soon as the pass that reads the field is
    done, so a new question set costs no pass of its own for it. The first `requests` requests of the
    pass are the content-free ones; they are read, never answered."""

    requests: int
    methods: dict[str, Debias]
    """The fields whose prior is read here, with the correction each asks for."""
    priors: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """What was read: per field, its mean raw distribution over the content-free inputs."""

    def read(self, reads: list[Read], readings: list[FieldReading], given: Priors | None) -> Priors | None:
        """`given` with the priors of the fields this pass read for the content-free inputs added."""
        seen: dict[str, list[tuple[float, ...]]] = {}
        for read, reading in zip(reads, readings):
            if read.request < self.requests and read.field in self.methods:
                seen.setdefault(read.field, []).append(tuple(reading.probabilities))
        for name, distributions in seen.items():
            prior = mean_distribution(distributions)
            if prior is not None:
                self.priors[name] = prior
        found = {name: (self.methods[name], prior) for name, prior in self.priors.items()}
        if not found:
            return given
        return Priors({**(given.fields if given is not None else {}), **found})


def _keep_features(features: torch.Tensor | None, means: torch.Tensor | None, read_layers: Sequence[int],
                   averaged: Sequence[RequestState], mean_layers: Sequence[int]) -> LayerFeatures | None:
    """Bring a pass's features to the host in one transfer: each read's row at `read_layers` (returned,
    for the heads and the capture), then each fed input's mean, kept per mean layer in its request."""
    parts = [part for part in (features, means) if part is not None]
    if not parts:
        return None
    host = torch.cat([part.reshape(-1) for part in parts]).cpu()
    by_read = None
    if features is not None:
        by_read = _layer_slices(host[: features.numel()].view(features.shape), read_layers)
    if means is not None:
        by_layer = _layer_slices(host[host.numel() - means.numel():].view(means.shape), mean_layers)
        for index, state in enumerate(averaged):
            state.input_means.update({layer: by_layer.of(index, (layer,)) for layer in mean_layers})
    return by_read


def _layer_slices(features: torch.Tensor, layers: Sequence[int]) -> LayerFeatures:
    return LayerFeatures(features, *_offsets(features.shape[1], layers))


def _offsets(width: int, layers: Sequence[int]) -> tuple[dict[int, int], int]:
    size = width // len(layers)
    return {layer: i * size for i, layer in enumerate(layers)}, size


@dataclass(frozen=True)
class LayerFeatures:
    """A pass's captured hidden states: per read, every captured layer side by side."""

    values: torch.Tensor
    offsets: dict[int, int]
    size: int

    def of(self, read: int, layers: Sequence[int]) -> torch.Tensor:
        row = self.values[read]
        return torch.cat([row[self.offsets[layer] : self.offsets[layer] + self.size] for layer in layers])


def pack_round(compiled: CompiledRubric, round_: Round, requests: list[RequestState]) -> tuple[PackedPass, list[Read]]:
    """One pass's tokens: per request that reads something this round, its pending tokens, then its rows.

    Fields not asked (a false `when=`, a parent answer that offers no options) are settled here. A
    request with no read in this round adds nothing and keeps its pending tokens for the next round.
    """
    packed = PackedPass()
    reads: list[Read] = []
    rubric = compiled.rubric
    for r, state in enumerate(requests):
        state.input_rows = []  # positions of the last pass that fed this request mean nothing in this one
        plans: list[tuple[str, list[Hypothesis]]] = []
        for name in round_.fields:
            spec = rubric.fields[name]
            hypotheses = _hypotheses(compiled, spec, state)
            if all(h.row is None for h in hypotheses):
                state.answers[name] = None
                state.results[name] = _not_asked(spec, state, round_.index)
            else:
                plans.append((name, hypotheses))
        if not plans:
            continue
        start = len(packed)
        chain: list[int] = []  # packed index of each pending token, in order
        last = -1
        for token in state.pending:
            last = packed.add(token, parent=last, request=r, keep=True)
            chain.append(last)
        if not state.input_fed:
            state.input_rows = chain[: len(state.input_tokens)]
        for name, hypotheses in plans:
            spec = rubric.fields[name]
            for hypothesis in hypotheses:
                if hypothesis.row is None:
                    continue
                anchor, sees = last, None
                if hypothesis.label and hypothesis.label != _written_label(state, spec.parent):
                    anchor, sees = _branch(compiled, state, spec.parent, hypothesis.label, packed, r, chain)  # type: ignore[arg-type]
                positions = _place_row(packed, hypothesis.row, anchor, r, sees)
                reads.append(Read(r, name, positions, hypothesis.row,
                                  hypothesis.label if len(hypotheses) > 1 else None, hypothesis.weight))
        state.passes += 1
        state.tokens_fed += len(packed) - start
        state.input_fed = True
        state.fed_lines = len(state.written)
    return packed, reads


def _hypotheses(compiled: CompiledRubric, spec: FieldSpec, state: RequestState) -> list[Hypothesis]:
    """The parent answers a field is read under: its parent's written answer alone, or the top K."""
    if spec.marginalize is None or spec.parent is None or spec.parent not in state.results:
        return [Hypothesis("", 1.0, _row(compiled, spec, state.answers))]
    parent = compiled.rubric.fields[spec.parent]
    distribution = state.results[spec.parent].probabilities
    top = sorted((label for label, p in distribution.items() if p > 0), key=lambda label: -distribution[label])[: spec.marginalize]
    if not top:
        return [Hypothesis("", 1.0, _row(compiled, spec, state.answers))]
    total = sum(distribution[label] for label in top)
    return [
        Hypothesis(label, distribution[label] / total,
                   _row(compiled, spec, {**state.answers, spec.parent: parent.values[parent.labels.index(label)]}))
        for label in top
    ]


def _row(compiled: CompiledRubric, spec: FieldSpec, answers: dict[str, Value | None]) -> CompiledField | None:
    """The row a field reads given these answers; None when it is not asked under them."""
    if spec.when is not None and not spec.when.holds(answers):
        return None
    if spec.options_by is not None:
        parent_answer = answers.get(spec.options_by.field)
        return compiled.row_for(spec.name, label_of(parent_answer) if parent_answer is not None else None)
    return compiled.fields[spec.name]


def _written_label(state: RequestState, name: str | None) -> str:
    """The label of the answer line written for `name` (its best guess, even when it abstained)."""
    return next((label for field_name, label, _ in state.written if field_name == name), "")


def _branch(
    compiled: CompiledRubric, state: RequestState, parent: str, label: str, packed: PackedPass, request: int, chain: list[int]
) -> tuple[int, int | None]:
    """A branch in which `parent` answered `label`: the context up to where the parent's line began, the
    alternative line, then every line written after it. Returns (its last token, context it sees)."""
    index = next(i for i, (name, _, _) in enumerate(state.written) if name == parent)
    cf = compiled.fields[parent]
    alternative = cf.answer_lines[cf.labels.index(label)]
    later = [token for _, _, line in state.written[index + 1 :] for token in line]
    if index < state.fed_lines:
        anchor, sees = -1, state.line_start(index)
    else:
        # The parent's line is in this pass's pending chain: branch off the token before it.
        offset = (0 if state.input_fed else len(state.input_tokens)) + sum(
            len(line) for _, _, line in state.written[state.fed_lines : index]
        )
        anchor, sees = (chain[offset - 1], None) if offset > 0 else (-1, None)
    for token in (*alternative, *later):
        anchor = packed.add(token, parent=anchor, request=request, sees=sees if anchor < 0 else None)
    return anchor, None


def _place_row(packed: PackedPass, row: CompiledField, anchor: int, request: int, sees: int | None) -> list[int]:
    placed: list[int] = []
    for token, parent in zip(row.row_tokens, row.row_parents):
        placed.append(packed.add(token, parent=anchor if parent < 0 else placed[parent], request=request, share=True,
                                 sees=sees if anchor < 0 and parent < 0 else None))
    return [placed[p] for p in row.read_positions]


def read_rows(reads: list[Read]) -> list[tuple[CompiledField, int]]:
    """Each read's compiled field with the row of the pass's log-probs where its reads begin."""
    rows, row = [], 0
    for read in reads:
        rows.append((read.row, row))
        row += len(read.positions)
    return rows


def read_round(
    compiled: CompiledRubric,
    round_: Round,
    requests: list[RequestState],
    reads: list[Read],
    readings: list[FieldReading],
    calibration: Calibration | None,
    priors: Priors | None = None,
    heads: Heads | None = None,
    features: LayerFeatures | None = None,
    capture: Sequence[int] = (),
    capture_means: Sequence[int] = (),
    *,
    skip_requests: int = 0,
) -> None:
    """Turn a pass's readings (one per read) into each field's result, and queue each answer's line for
    the next pass. The first `skip_requests` requests are content-free inputs (`FreeReading`): not answered.

    A field in a request's `forced` answers has that label's line written (and conditions later fields)
    whatever the model answered; its result stays the model's own."""
    grouped: dict[tuple[int, str], list[tuple[Read, FieldReading, int]]] = {}
    for index, (read, reading) in enumerate(zip(reads, readings)):
        if read.request >= skip_requests:
            grouped.setdefault((read.request, read.field), []).append((read, reading, index))
    decided: dict[int, dict[str, str]] = {}
    for (r, name), group in grouped.items():
        state = requests[r]
        result, label = _field_result(compiled, name, group, state, round_.index, calibration, priors, heads, features,
                                      capture, capture_means)
        state.results[name] = result
        state.answers[name] = result.value
        forced = state.forced.get(name)
        if label is not None and forced is not None and forced in result.probabilities:
            spec = compiled.rubric.fields[name]
            label = forced
            state.answers[name] = spec.values[spec.labels.index(forced)]
        if label is not None:
            decided.setdefault(r, {})[name] = label
    # Written in declaration order, so later rounds read a JSON object in the rubric's key order.
    for r, labels in decided.items():
        for name in compiled.rubric.fields:
            if name in labels:
                cf = compiled.fields[name]
                requests[r].written.append((name, labels[name], cf.answer_lines[cf.labels.index(labels[name])]))


def _field_result(
    compiled: CompiledRubric, name: str, group: list[tuple[Read, FieldReading, int]], state: RequestState,
    round_index: int, calibration: Calibration | None, priors: Priors | None, heads: Heads | None = None,
    features: LayerFeatures | None = None, capture: Sequence[int] = (), capture_means: Sequence[int] = (),
) -> tuple[FieldResult, str | None]:
    """The field's result from its reading(s) — one, or one per parent hypothesis — and the label whose
    line is written into the prompt (None: nothing is written)."""
    spec = compiled.rubric.fields[name]
    labels = spec.labels
    mixture = [0.0] * len(labels)
    offered_set: set[int] = set()
    mass = 0.0
    debias = Debias.NONE
    joint: dict[tuple[str, str], float] = {}
    fitted = heads.for_field(name) if heads is not None else None
    input_mean = state.input_mean(fitted.info.mean_layers) if fitted is not None and fitted.info.reads_means else None
    if fitted is not None and ((fitted.info.reads_hidden and features is None)
                               or (fitted.info.reads_means and input_mean is None)):
        fitted = None
    # With a head, the engine's own readout is kept beside its answer (mixed alike when marginalised).
    zero_shot_mixture = [0.0] * len(labels) if fitted is not None else None
    for read, reading, index in group:
        if not all(math.isfinite(p) for p in reading.probabilities):
            raise ModelError(
                f"field {name!r}: the model's scores are not finite numbers, so no answer can be read; its weights "
                "are damaged (a converted GGUF copy is rebuilt after deleting its folder under the decisionflow "
                "cache's models/)"
            )
        indexes = [labels.index(label) for label in read.row.labels]
        offered_set.update(indexes)
        probabilities = reading.probabilities
        if priors is not None:
            probabilities, debias = priors.apply(name, probabilities, indexes if len(indexes) != len(labels) else None)
        if capture and features is not None and (read.hypothesis is None or read.hypothesis == _written_label(state, spec.parent)):
            state.captured[name] = Captured(features.of(index, capture), tuple(probabilities), tuple(indexes),
                                            state.input_mean(capture_means))
        if fitted is not None:
            for label_index, p in zip(indexes, probabilities):
                zero_shot_mixture[label_index] += read.weight * p  # type: ignore[index]
            reads = features.of(index, fitted.info.layers) if fitted.info.reads_hidden else None  # type: ignore[union-attr]
            probabilities = fitted.probabilities(reads, probabilities, indexes, state.words, input_mean)
        for label_index, p in zip(indexes, probabilities):
            mixture[label_index] += read.weight * p
            if read.hypothesis is not None:
                joint[(read.hypothesis, labels[label_index])] = read.weight * p
        mass += read.weight * reading.candidate_mass
    marginalized = any(read.hypothesis is not None for read, _, _ in group)
    asked_weight = sum(read.weight for read, _, _ in group)
    if marginalized:
        # Hypotheses under which the field is not asked carry the rest of the weight.
        mixture = [p / asked_weight for p in mixture]
        if zero_shot_mixture is not None:
            zero_shot_mixture = [p / asked_weight for p in zero_shot_mixture]
        mass /= asked_weight
        state.joints[name] = (spec.parent, joint)  # type: ignore[assignment]
    offered = sorted(offered_set)
    probabilities = tuple(mixture[i] for i in offered)
    abstained = False
    if calibration is not None:
        probabilities, abstained = calibration.apply(name, probabilities, mass)
    best = offered[max(range(len(offered)), key=probabilities.__getitem__)]
    chosen_row = _row(compiled, spec, state.answers) if marginalized else group[0][0].row
    asked = chosen_row is not None
    value = spec.values[best] if asked and not abstained else None
    result = FieldResult(
        name=name, kind=spec.kind, value=value, abstained=abstained and asked,
        probabilities={labels[i]: p for i, p in zip(offered, probabilities)},
        candidate_mass=mass, round=round_index,
        method=fitted.method if fitted is not None else group[0][0].row.method if not marginalized else "marginalized",
        debias=debias.value, asked=asked,
        # Not marginalised: one reading, whose own distribution is the raw one.
        raw_probabilities=None if marginalized else dict(zip(group[0][0].row.labels, group[0][1].probabilities)),
        zero_shot_probabilities={labels[i]: zero_shot_mixture[i] for i in offered} if zero_shot_mixture is not None else None,
        reason="" if asked else _reason(spec, state),
        expected_value=(sum(p * spec.values[i] for i, p in zip(offered, probabilities))
                        if spec.kind is FieldKind.SCORE else None),
        asked_probability=asked_weight if marginalized else None,
        joint=[{"parent": h, "label": f, "probability": p}
               for (h, f), p in sorted(joint.items(), key=lambda item: -item[1])[:JOINT_ANSWERS_SHOWN]] if marginalized else None,
    )
    # An abstained field reports no answer, but its best guess is still written into the prompt:
    # later rows need a complete JSON object in front of them.
    return result, (labels[best] if asked else None)


def settle_derived(compiled: CompiledRubric, plan: Plan, requests: list[RequestState], round_index: int) -> None:
    """Compute every derived field whose inputs are all settled (in plan order: derived before dependants)."""
    rubric = compiled.rubric
    for name in plan.derived:
        reads = rubric.fields[name].dependencies
        for state in requests:
            if name not in state.results and all(read in state.results for read in reads):
                result = derive_field(rubric, name, state.answers, state.results, state.joints, round_index)
                state.results[name] = result
                state.answers[name] = result.value


def _reason(spec: FieldSpec, state: RequestState) -> str:
    if spec.when is not None and not spec.when.holds(state.answers):
        return f"its condition on {spec.when.field!r} was not met"
    if spec.options_by is not None:
        answer = state.answers.get(spec.options_by.field)
        if answer is None:
            return f"its parent {spec.options_by.field!r} has no answer"
        return f"the answer {label_of(answer)!r} of {spec.options_by.field!r} offers no options"
    return "not asked"


def _not_asked(spec: FieldSpec, state: RequestState, round_index: int) -> FieldResult:
    return FieldResult(
        name=spec.name, kind=spec.kind, value=None, probabilities={}, candidate_mass=None, round=round_index,
        method="not_asked", asked=False, reason=_reason(spec, state),
    )
