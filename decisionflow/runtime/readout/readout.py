"""The readout: from next-token log-probs at the read positions to a distribution over each field's answers.

Spellings of one answer (`true`, `"true"`) are summed; along a branch the probabilities multiply;
the result is renormalised over the allowed answers. The candidate mass is the unrenormalised
probability that the model's next token starts any allowed answer at all (the full-vocabulary
normaliser is kept: the log-probs are a log-softmax over every token).

Every (position, token) probability a pass needs is fetched with one indexed gather and one transfer
to the host, whatever the number of fields and labels; the rest is arithmetic on plain floats along
the paths the compiler precomputed (`CompiledField.edges` and `.paths`). The gather's index is known
before the pass (`gather_index`), so it travels to the device with the pass's own integers and the
gather runs there (`backend.run_pass_with_features(gather=)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ...compiler import CompiledField


@dataclass(frozen=True)
class FieldReading:
    probabilities: tuple[float, ...]
    """Per allowed answer, in the field's value order; sums to 1."""
    candidate_mass: float


def gather_index(fields: Sequence[tuple[CompiledField, int]]) -> tuple[list[int], list[int]]:
    """The (row, token) pairs of the log-probs `read_fields` reads, as two lists (rows, tokens)."""
    rows: list[int] = []
    tokens: list[int] = []
    for field, offset in fields:
        rows += [offset + field.root_read] * len(field.mass_tokens)
        rows += [offset + read for read, _ in field.edges]
        tokens += field.mass_tokens
        tokens += [token for _, token in field.edges]
    return rows, tokens


def read_fields(
    logprobs: torch.Tensor, fields: Sequence[tuple[CompiledField, int]], gathered: torch.Tensor | None = None
) -> list[FieldReading]:
    """Readings of many fields from one pass. `logprobs` [reads, vocab]; each field comes with the row
    of `logprobs` holding its first read position (its reads are consecutive rows, in its own order).
    `gathered`: the log-probs at `gather_index(fields)`, when the pass gathered them already."""
    if gathered is None:
        rows, tokens = gather_index(fields)
        index = torch.tensor([rows, tokens], device=logprobs.device)
        gathered = logprobs[index[0], index[1]]
    # One transfer (a device sync on CUDA), in float64 on the host.
    values = gathered.double().exp().tolist()
    readings = []
    start = 0
    for field, _ in fields:
        mass = sum(values[start : start + len(field.mass_tokens)])
        start += len(field.mass_tokens)
        edge_probabilities = values[start : start + len(field.edges)]
        start += len(field.edges)
        readings.append(_reading(field, edge_probabilities, mass))
    return readings


def read_field(field: CompiledField, logprobs: dict[int, torch.Tensor]) -> FieldReading:
    """One field's reading; `logprobs` maps each of its read positions to log-probs over the vocabulary."""
    stacked = torch.stack([logprobs[position] for position in field.read_positions])
    return read_fields(stacked, [(field, 0)])[0]


def _reading(field: CompiledField, edge_probabilities: list[float], mass: float) -> FieldReading:
    scores = [0.0] * len(field.values)
    for answer, path in field.paths:
        probability = 1.0
        for edge in path:
            probability *= edge_probabilities[edge]
        scores[answer] += probability
    total = sum(scores)
    if total <= 0.0:
        # Every path underflowed: fall back to a uniform answer rather than dividing by zero.
        scores, total = [1.0] * len(scores), float(len(scores))
    return FieldReading(tuple(score / total for score in scores), min(mass, 1.0))
