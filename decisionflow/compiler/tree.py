"""Trees given by parent pointers, as packed passes and compiled rows describe them.

A token's parent is an earlier index in the same list, or -1 for a token that hangs directly off
whatever precedes the list (the request's context for a pass, the row's context for a row). Its depth
is 0 there and grows by one per generation; it sees itself and its ancestors. The compiler, the
backend and the baselines all read trees through these two functions.
"""

from __future__ import annotations

from typing import Sequence


def tree_depths(parents: Sequence[int]) -> list[int]:
    """Depth of every node: 0 for a root (parent -1), else its parent's depth + 1."""
    depths: list[int] = []
    for index, parent in enumerate(parents):
        if parent >= index:
            raise ValueError(f"node {index}'s parent {parent} does not come before it")
        depths.append(0 if parent < 0 else depths[parent] + 1)
    return depths


def tree_ancestors(parents: Sequence[int]) -> list[list[int]]:
    """Per node, itself and its ancestors, root first (the positions it may attend to)."""
    chains: list[list[int]] = []
    for index, parent in enumerate(parents):
        chains.append((chains[parent] if parent >= 0 else []) + [index])
    return chains


def tree_chains(parents: Sequence[int]) -> list[tuple[int, int, int]]:
    """The tree cut into chains: maximal runs `start..end-1` where each node's parent is the node before it.

    Returns (start, end, parent of start) per run. Long inputs and row stems are single chains, so a
    tree of thousands of nodes is described by a few dozen runs; a root (parent -1) always starts one.
    """
    runs: list[tuple[int, int, int]] = []
    start = 0
    for index in range(1, len(parents) + 1):
        if index == len(parents) or parents[index] != index - 1:
            runs.append((start, index, parents[start]))
            start = index
    return runs
