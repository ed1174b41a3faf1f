"""A packed tree described by key spans: what each token may see, without an N x N mask.

A packed pass's tokens form a forest given by parent pointers (-1 for a root). Token i sees its root's
request context (a span of the earlier keys), its ancestors and itself. Cut into chains — maximal runs
of tokens each the child of the one before — a token's visible keys are its request's context span,
one span per chain on its path to the root, and the start of its own chain up to itself. Long inputs
and row stems are single chains, so a token needs a handful of spans however large the tree.

Local key j < width is an earlier (context) key; key width + t is packed token t.
"""

from __future__ import annotations

from typing import Sequence

import torch


def chains(parents: Sequence[int]) -> list[tuple[int, int, int]]:
    """Maximal runs `start..end-1` where each token's parent is the token before: (start, end, parent of start)."""
    runs: list[tuple[int, int, int]] = []
    start = 0
    for index in range(1, len(parents) + 1):
        if index == len(parents) or parents[index] != index - 1:
            runs.append((start, index, parents[start]))
            start = index
    return runs


def _check_tree(parents: Sequence[int], roots_see: Sequence[tuple[int, int]] | None, width: int) -> None:
    for index, parent in enumerate(parents):
        if not -1 <= parent < index:
            raise ValueError(f"token {index} has parent {parent}: a parent must be an earlier token or -1")
    if roots_see is None:
        return
    if len(roots_see) != len(parents):
        raise ValueError(f"roots_see has {len(roots_see)} entries for {len(parents)} tokens")
    for index, parent in enumerate(parents):
        low, high = roots_see[index]
        if parent == -1 and not 0 <= low <= high <= width:
            raise ValueError(f"root token {index} sees earlier keys [{low}, {high}), outside the {width} earlier keys")


def spans_from_tree(
    parents: Sequence[int],
    roots_see: Sequence[tuple[int, int]] | None = None,
    width: int = 0,
    max_spans: int | None = None,
) -> torch.Tensor:
    """[N, K, 2] int32 key spans per token: token i sees local keys j with `spans[i, s, 0] <= j < spans[i, s, 1]`.

    `parents[i]` is token i's parent among the packed tokens (an earlier index) or -1 for a root;
    `roots_see[i]` is the `[start, stop)` span of the `width` earlier keys that root token i (and so its
    whole subtree) sees. Spans of one token are disjoint; unused slots are (0, 0). K is the most any
    token needs, or `max_spans` (so a caller can keep one shape from pass to pass).
    """
    _check_tree(parents, roots_see, width)
    runs = chains(parents)
    chain_of = [0] * len(parents)
    # Per chain: the spans every token of the chain has, and where its own (growing) span starts.
    fixed: list[list[tuple[int, int]]] = []
    open_start: list[int] = []
    for number, (start, end, parent) in enumerate(runs):
        chain_of[start:end] = [number] * (end - start)
        if parent >= 0:
            above = chain_of[parent]
            inherited = fixed[above] + [(open_start[above], width + parent + 1)]
        elif roots_see is not None and roots_see[start][1] > roots_see[start][0]:
            inherited = [tuple(roots_see[start])]
        else:
            inherited = []
        # A span ending right where this chain starts just grows with it.
        if inherited and inherited[-1][1] == width + start:
            open_start.append(inherited[-1][0])
            inherited = inherited[:-1]
        else:
            open_start.append(width + start)
        fixed.append(inherited)
    needed = max((len(spans) + 1 for spans in fixed), default=1)
    if max_spans is not None and needed > max_spans:
        deepest = next(start for (start, _, _), spans in zip(runs, fixed) if len(spans) + 1 == needed)
        raise ValueError(f"token {deepest} needs {needed} key spans, more than max_spans={max_spans}")
    slots = needed if max_spans is None else max_spans
    flat: list[int] = []
    for (start, end, _), spans, own_start in zip(runs, fixed, open_start):
        padding = [0, 0] * (slots - len(spans) - 1)
        head = [bound for span in spans for bound in span]
        for token in range(start, end):
            flat.extend(head)
            flat.extend((own_start, width + token + 1))
            flat.extend(padding)
    return torch.tensor(flat, dtype=torch.int32).view(len(parents), slots, 2)
