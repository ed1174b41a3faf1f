"""What a head is fitted on, per field: the rows' hidden states at the field's answer position (and the
input's mean where the fusion reads it), its zero-shot log-probabilities, the row's words, and the gold
and zero-shot answers, as `Engine.read_features` captured them with each row's gold parent answers
written into the prompt (`parents_to_write`), so a dependent field is read under its right parent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from ..runtime.heads.fitted import zero_shot_features
from ..runtime.heads.lexical import lexical_text
from ..spec.rubric import Rubric
from .examples import Example


@dataclass
class FieldData:
    """A field's fitting rows: features, zero-shot log-probabilities, gold and zero-shot answers."""

    hidden: list[torch.Tensor] = field(default_factory=list)
    zero_shot: list[torch.Tensor] = field(default_factory=list)
    gold: list[int] = field(default_factory=list)
    zero_shot_answer: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    """Each row's words as its n-gram head reads them (`lexical.lexical_text`)."""
    input_mean: list[torch.Tensor] = field(default_factory=list)
    """Each row's input-mean hidden state (where the fit reads it)."""


def parents_to_write(rubric: Rubric, labels: Mapping[str, str]) -> dict[str, str]:
    """The gold answers to write into the prompt for a row: those of the fields its labelled fields
    depend on (`after`, `when`, `options_by`, transitively). Any other field's line is the model's own
    answer, as in use, so a later field's head never learns from a gold answer it will not see."""
    ancestors: set[str] = set()
    pending = [name for name in labels]
    while pending:
        for parent in rubric.fields[pending.pop()].dependencies:
            if parent not in ancestors:
                ancestors.add(parent)
                pending.append(parent)
    return {name: label for name, label in labels.items() if name in ancestors}


def field_data(
    rubric: Rubric, examples: Sequence[Example], captured: Sequence[Any], failed: Mapping[int, str],
) -> tuple[dict[str, FieldData], dict[str, int]]:
    """Per field, the rows where it was read and labelled with an answer its row offered; and per field,
    how many labelled rows could not be used (not asked under the row's gold answers, or its gold
    answer not offered there)."""
    data: dict[str, FieldData] = {}
    unread: dict[str, int] = {}
    for example, reads in zip(examples, captured):
        if reads is None or example.index in failed:
            continue
        for name, gold in example.labels.items():
            read = reads.get(name)
            labels = rubric.fields[name].labels
            index = labels.index(gold)
            if read is None or index not in read.offered:
                unread[name] = unread.get(name, 0) + 1
                continue
            entry = data.setdefault(name, FieldData())
            entry.texts.append(lexical_text(example.text))
            entry.hidden.append(read.features)
            entry.zero_shot.append(zero_shot_features(read.zero_shot, read.offered, len(labels)))
            entry.gold.append(index)
            if read.input_mean is not None:
                entry.input_mean.append(read.input_mean)
            best = max(range(len(read.zero_shot)), key=read.zero_shot.__getitem__)
            entry.zero_shot_answer.append(read.offered[best])
    return data, unread


def head_features(hidden: Sequence[torch.Tensor], zero_shot: Sequence[torch.Tensor] | None) -> Any:
    """[rows, features] float32: the hidden states a linear head reads, then the zero-shot log-probabilities
    where it reads them."""
    x = torch.stack(list(hidden))
    if zero_shot is not None:
        x = torch.cat([x, torch.stack(list(zero_shot))], dim=1)
    return x.float().numpy()
