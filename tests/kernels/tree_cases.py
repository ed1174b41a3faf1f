"""Packed passes for the tree attention tests, built the way the runtime packs them, and the masks
that say what each token may see, built independently of the spans."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PackedTree:
    parents: list[int]
    roots_see: list[tuple[int, int]]
    width: int
    """How many earlier (context) keys come before the packed tokens."""


def packed_tree(contexts: list[int], seed: int, rows: int = 3) -> PackedTree:
    """Requests with the given context lengths; each may add new input tokens, then field rows hang off
    its last token, and some rows fork into branches (the answer trie), added after all rows so that
    forks start new chains far from their parents, as in a real pass."""
    rng = random.Random(seed)
    offsets = [0]
    for length in contexts:
        offsets.append(offsets[-1] + length)
    parents: list[int] = []
    owner: list[int] = []
    forks: list[tuple[int, int]] = []

    def add_chain(request: int, parent: int, length: int) -> int:
        for _ in range(length):
            parents.append(parent)
            owner.append(request)
            parent = len(parents) - 1
        return parent

    for request in range(len(contexts)):
        tip = add_chain(request, -1, rng.choice([0, 1, 6]))
        for _ in range(rng.randint(1, rows)):
            stem_end = add_chain(request, tip, rng.randint(1, 4))
            forks.append((request, rng.randint(stem_end - 1 if stem_end > tip + 1 else stem_end, stem_end)))
    for request, parent in forks:
        for _ in range(rng.randint(0, 2)):
            add_chain(request, parent, rng.randint(1, 2))
    roots_see = [(offsets[r], offsets[r + 1]) for r in owner]
    return PackedTree(parents, roots_see, offsets[-1])


def ancestry_mask(tree: PackedTree) -> torch.Tensor:
    """[N, width + N] bool by walking each token's parents to its root: its root's context, its ancestors, itself."""
    n = len(tree.parents)
    visible = torch.zeros(n, tree.width + n, dtype=torch.bool)
    for token in range(n):
        node = token
        while True:
            visible[token, tree.width + node] = True
            if tree.parents[node] < 0:
                break
            node = tree.parents[node]
        low, high = tree.roots_see[node]
        visible[token, low:high] = True
    return visible


def sdpa_over_mask(query, key, value, prefix_key, prefix_value, local_visible, scale) -> torch.Tensor:
    """Plain attention over [prefix, local] keys with the materialised mask, in fp32, heads repeated for GQA."""
    groups = query.shape[1] // key.shape[1]
    keys = torch.cat([prefix_key, key], dim=2).float().repeat_interleave(groups, dim=1)
    values = torch.cat([prefix_value, value], dim=2).float().repeat_interleave(groups, dim=1)
    prefix_visible = torch.ones(local_visible.shape[0], prefix_key.shape[2], dtype=torch.bool, device=local_visible.device)
    mask = torch.cat([prefix_visible, local_visible], dim=1)
    return torch.nn.functional.scaled_dot_product_attention(query.float(), keys, values, attn_mask=mask, scale=scale)
