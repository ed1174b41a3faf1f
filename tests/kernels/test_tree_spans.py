"""Key spans from parent pointers: the same visibility as the runtime's mask, in a few spans per token."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import reference, tree_spans
from tree_cases import ancestry_mask, packed_tree

from decisionflow.runtime.passes.backend import tree_visibility

CONTEXTS = [[0], [5, 0, 3], [9, 2], [70], [3, 1, 4, 1, 5, 9]]


@pytest.mark.parametrize("seed,contexts", list(enumerate(CONTEXTS)))
def test_spans_see_what_the_ancestry_sees(seed, contexts):
    tree = packed_tree(contexts, seed)
    spans = tree_spans.spans_from_tree(tree.parents, tree.roots_see, tree.width)
    n = len(tree.parents)
    assert spans.dtype == torch.int32 and spans.shape[0] == n and spans.shape[2] == 2
    visible = reference.visibility_from_spans(spans, tree.width + n)
    assert torch.equal(visible, ancestry_mask(tree))
    assert torch.equal(visible, tree_visibility(tree.parents, tree.roots_see, tree.width))


def test_spans_of_one_token_are_disjoint_and_unused_slots_empty():
    tree = packed_tree([4, 2, 6], seed=11)
    spans = tree_spans.spans_from_tree(tree.parents, tree.roots_see, tree.width).tolist()
    for token, slots in enumerate(spans):
        used = sorted((low, high) for low, high in slots if high > low)
        assert all(a_high <= b_low for (_, a_high), (b_low, _) in zip(used, used[1:])), token
        assert all((low, high) == (0, 0) for low, high in slots if high <= low), token


def test_a_long_chain_needs_one_span_however_long():
    parents = [-1] + list(range(499))
    spans = tree_spans.spans_from_tree(parents, [(0, 20)] * 500, width=30)
    assert spans.shape == (500, 2, 2)
    assert spans[499].tolist() == [[0, 20], [30, 530]]


def test_a_context_ending_where_the_tokens_start_merges_into_their_span():
    spans = tree_spans.spans_from_tree([-1, 0, 1], [(2, 5)] * 3, width=5)
    assert spans.tolist() == [[[2, 6]], [[2, 7]], [[2, 8]]]


def test_forest_without_contexts():
    spans = tree_spans.spans_from_tree([-1, 0, -1, 2, 0])
    assert spans.tolist() == [[[0, 1], [0, 0]], [[0, 2], [0, 0]], [[2, 3], [0, 0]], [[2, 4], [0, 0]], [[0, 1], [4, 5]]]


def test_max_spans_pads_to_a_fixed_shape_and_refuses_too_few():
    parents = [-1, 0, 0, 2]
    padded = tree_spans.spans_from_tree(parents, max_spans=5)
    assert padded.shape == (4, 5, 2)
    assert torch.equal(reference.visibility_from_spans(padded, 4), tree_visibility(parents))
    with pytest.raises(ValueError, match="token 2 needs 2 key spans, more than max_spans=1"):
        tree_spans.spans_from_tree(parents, max_spans=1)


@pytest.mark.parametrize(
    "parents,roots_see,message",
    [
        ([-1, 1], None, "token 1 has parent 1"),
        ([-1, -2], None, "token 1 has parent -2"),
        ([-1, 0], [(0, 3)], "roots_see has 1 entries for 2 tokens"),
        ([-1, 0], [(0, 9), (0, 9)], r"root token 0 sees earlier keys \[0, 9\), outside the 4 earlier keys"),
    ],
)
def test_a_malformed_tree_is_named(parents, roots_see, message):
    with pytest.raises(ValueError, match=message):
        tree_spans.spans_from_tree(parents, roots_see, width=4)


def test_no_tokens():
    assert tree_spans.spans_from_tree([]).shape == (0, 1, 2)
