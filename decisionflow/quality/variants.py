"""Variants of a rubric that measure what its wording and its option order cost.

- `minimal_rubric`: the same fields, labels and structure with no instructions and no option
  descriptions (each field keeps its question, which a rubric requires). `eval --ablate` scores it
  next to the rubric as written, so prose that hurts shows up as a number.
- `reordered_rubric` / `cyclic_orders`: one choice field's options listed in another order. Cyclic
  shifts spread every label over the positions evenly, the design permutation debiasing needs
  (Zheng et al., 2023); `shuffled_order` draws a random order instead.
"""

from __future__ import annotations

import random
from typing import Sequence

from ..errors import DataError
from ..spec.rubric import FieldKind, Rubric


def minimal_rubric(rubric: Rubric) -> Rubric:
    """`rubric` without instructions and without option descriptions; fields, labels and order unchanged."""
    data = rubric.model_dump(mode="json")
    data["instructions"] = ""
    for spec in data["fields"].values():
        if spec.get("options"):
            spec["options"] = {label: "" for label in spec["options"]}
        by = spec.get("options_by")
        if by:
            by["options"] = {answer: {label: "" for label in options} for answer, options in by["options"].items()}
    return Rubric.model_validate(data)


def choice_labels(rubric: Rubric, field_name: str) -> list[str]:
    """The labels of a choice field whose options can be listed in another order."""
    spec = rubric.field(field_name)
    if spec.kind is not FieldKind.CHOICE or not spec.options:
        raise DataError(f"field {field_name!r} is not a choice field: its options have no order to change")
    if spec.options_by is not None:
        raise DataError(f"field {field_name!r} takes its options from {spec.options_by.field!r}: their order is not its own")
    return list(spec.options)


def reordered_rubric(rubric: Rubric, field_name: str, order: Sequence[str]) -> Rubric:
    """The rubric with one choice field's options listed in `order` (a permutation of its labels)."""
    labels = choice_labels(rubric, field_name)
    if sorted(order) != sorted(labels):
        raise DataError(f"an order of {field_name!r} must list each of its {len(labels)} labels once")
    options = rubric.field(field_name).options or {}
    data = rubric.model_dump(mode="json")
    data["fields"][field_name]["options"] = {label: options[label] for label in order}
    return Rubric.model_validate(data)


def cyclic_orders(labels: Sequence[str], count: int) -> list[list[str]]:
    """`count` orders of `labels`: the original, then rotations by evenly spaced offsets.

    With `count` equal to the number of labels every label takes every position once (a full cyclic
    set); fewer rotations move every label by the same evenly spaced offsets. Two labels have only
    two orders and three labels three rotations, so `count` is capped at the number of labels.
    """
    n = len(labels)
    count = max(1, min(count, n))
    offsets = sorted({round(k * n / count) % n for k in range(count)})
    return [list(labels[offset:]) + list(labels[:offset]) for offset in offsets]


def shuffled_order(labels: Sequence[str], rng: random.Random) -> list[str]:
    """A random order of `labels` that differs from the given one (two labels: the reverse)."""
    if len(labels) < 2:
        raise DataError("a field with fewer than two options has no other order")
    order = list(labels)
    while order == list(labels):
        rng.shuffle(order)
    return order
