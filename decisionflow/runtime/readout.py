"""The readout: from next-token log-probs at a field's read positions to a distribution over its answers.

Spellings of one answer (`true`, `"true"`) are summed; along a branch the probabilities multiply;
the result is renormalised over the allowed answers. The candidate mass is the unrenormalised
probability that the model's next token starts any allowed answer at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..compiler import CompiledField, TrieNode


@dataclass(frozen=True)
class FieldReading:
    probabilities: tuple[float, ...]
    """Per allowed answer, in the field's value order; sums to 1."""
    candidate_mass: float


def read_field(field: CompiledField, logprobs: dict[int, torch.Tensor]) -> FieldReading:
    """`logprobs` maps each of the field's read positions to its log-probs over the vocabulary."""
    scores = torch.zeros(len(field.values), dtype=torch.float64)
    for index, probability in _walk(field.root, logprobs, 1.0):
        scores[index] += probability
    root_probs = logprobs[field.root.position].double().exp()
    mass = float(root_probs[list(field.mass_tokens)].sum())
    total = float(scores.sum())
    if total <= 0.0:
        # Every path underflowed: fall back to a uniform answer rather than dividing by zero.
        scores = torch.full_like(scores, 1.0)
        total = float(scores.sum())
    return FieldReading(tuple(float(s) / total for s in scores), min(mass, 1.0))


def _walk(node: TrieNode, logprobs: dict[int, torch.Tensor], weight: float):
    if not node.read:
        if len(node.values) == 1 and not node.reads_below:
            yield next(iter(node.values)), weight
            return
        # A stretch where every candidate agrees on the next token: follow it without reading.
        for child in node.children.values():
            yield from _walk(child, logprobs, weight)
        return
    row = logprobs[node.position]
    for token, child in node.children.items():
        yield from _walk(child, logprobs, weight * float(row[token].double().exp()))
