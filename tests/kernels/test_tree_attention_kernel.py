"""Tree branch attention: the Triton kernel against its reference, both against SDPA over a mask
materialised from the parents, and the reference against the runtime's branch attention."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DEVICE, reference, tree_attention_kernel, tree_spans
from tree_cases import ancestry_mask, packed_tree, sdpa_over_mask

from decisionflow.runtime.passes.backend import tree_visibility
from decisionflow.runtime.passes.branch_attention import branch_attention, fold_mask

pytestmark = pytest.mark.triton

# Largest absolute difference from fp32 attention over the same inputs, on outputs of size ~1. bf16:
# the output's own rounding (2^-8 relative) plus the probabilities rounded to bf16 before they meet the
# values, as flash attention does; the reference keeps them in fp32.
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 2e-2}

# (query heads, key/value heads, head_dim, request context lengths, prefix length): GQA ratios 1, 3
# and 7; head dims off the powers of two; no prefix, a one-key prefix, prefixes off the block size;
# no context, contexts of different lengths, one longer than a key block.
CASES = [
    (2, 2, 16, [0], 0),
    (6, 2, 24, [5, 0, 3], 37),
    (7, 1, 40, [9, 2], 100),
    (3, 3, 64, [70], 1),
]


def _tensors(heads, kv_heads, head_dim, n, width, prefix, dtype, seed):
    generator = torch.Generator().manual_seed(seed)

    def make(*shape):
        return torch.randn(*shape, generator=generator).to(dtype).to(DEVICE)

    local = width + n
    return (make(1, heads, n, head_dim), make(1, kv_heads, local, head_dim), make(1, kv_heads, local, head_dim),
            make(1, kv_heads, prefix, head_dim), make(1, kv_heads, prefix, head_dim))


def _close(actual, expected, dtype):
    torch.testing.assert_close(actual.float(), expected.float(), rtol=0, atol=TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_tree_attention_matches_reference_and_masked_sdpa(case, dtype):
    heads, kv_heads, head_dim, contexts, prefix = CASES[case]
    tree = packed_tree(contexts, seed=case)
    n = len(tree.parents)
    spans = tree_spans.spans_from_tree(tree.parents, tree.roots_see, tree.width).to(DEVICE)
    query, key, value, prefix_key, prefix_value = _tensors(heads, kv_heads, head_dim, n, tree.width, prefix, dtype, case)
    scale = head_dim**-0.5
    got = tree_attention_kernel.tree_attention(query, key, value, prefix_key, prefix_value, spans, scale)
    want = reference.tree_attention(query, key, value, prefix_key, prefix_value, spans, scale)
    truth = sdpa_over_mask(query, key, value, prefix_key, prefix_value, ancestry_mask(tree).to(DEVICE), scale)
    assert got.dtype == dtype and got.shape == query.shape
    _close(got, want, dtype)
    _close(got, truth, dtype)
    torch.testing.assert_close(want.float(), truth, rtol=0, atol=2e-5 if dtype == torch.float32 else 2**-7 * 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_is_the_runtimes_branch_attention(dtype):
    """The runtime's CPU path: additive mask from `tree_visibility`, prefix and local parts merged by log-sum-exp."""
    tree = packed_tree([4, 7], seed=5)
    n = len(tree.parents)
    query, key, value, prefix_key, prefix_value = _tensors(6, 2, 32, n, tree.width, 23, dtype, seed=5)
    visible = tree_visibility(tree.parents, tree.roots_see, tree.width)
    mask = fold_mask(visible, groups=3, dtype=dtype)
    runtime = branch_attention(query.cpu(), key.cpu(), value.cpu(), mask, prefix_key.cpu(), prefix_value.cpu(), 32**-0.5)
    spans = tree_spans.spans_from_tree(tree.parents, tree.roots_see, tree.width)
    ours = reference.tree_attention(query.cpu(), key.cpu(), value.cpu(), prefix_key.cpu(), prefix_value.cpu(), spans, 32**-0.5)
    # bf16: the runtime rounds each part's output to bf16 before the merge; the reference merges in fp32.
    torch.testing.assert_close(ours.float(), runtime.float(), rtol=0, atol=1e-5 if dtype == torch.float32 else 2**-7 * 4)


def test_one_token_pass():
    query, key, value, prefix_key, prefix_value = _tensors(7, 1, 16, 1, 3, 5, torch.float32, seed=6)
    spans = tree_spans.spans_from_tree([-1], [(0, 3)], width=3).to(DEVICE)
    got = tree_attention_kernel.tree_attention(query, key, value, prefix_key, prefix_value, spans, 0.25)
    _close(got, reference.tree_attention(query, key, value, prefix_key, prefix_value, spans, 0.25), torch.float32)


def test_overlapping_spans_count_each_key_once():
    """Spans are a union: a key in two slots of one query is still one key."""
    query, key, value, prefix_key, prefix_value = _tensors(3, 1, 16, 3, 8, 4, torch.float32, seed=7)
    spans = torch.tensor([[[0, 6], [2, 9], [9, 10]], [[4, 11], [0, 5], [0, 0]], [[10, 11], [10, 11], [0, 11]]],
                         dtype=torch.int32, device=DEVICE)
    got = tree_attention_kernel.tree_attention(query, key, value, prefix_key, prefix_value, spans, 0.25)
    want = reference.tree_attention(query, key, value, prefix_key, prefix_value, spans, 0.25)
    _close(got, want, torch.float32)
    visible = reference.visibility_from_spans(spans, 11)
    truth = sdpa_over_mask(query, key, value, prefix_key, prefix_value, visible, 0.25)
    _close(got, truth, torch.float32)


def test_padded_span_slots_change_nothing():
    tree = packed_tree([3, 2], seed=8)
    n = len(tree.parents)
    query, key, value, prefix_key, prefix_value = _tensors(4, 2, 16, n, tree.width, 10, torch.bfloat16, seed=8)
    tight = tree_spans.spans_from_tree(tree.parents, tree.roots_see, tree.width).to(DEVICE)
    padded = tree_spans.spans_from_tree(tree.parents, tree.roots_see, tree.width, max_spans=6).to(DEVICE)
    run = tree_attention_kernel.tree_attention
    assert torch.equal(run(query, key, value, prefix_key, prefix_value, tight, 0.25),
                       run(query, key, value, prefix_key, prefix_value, padded, 0.25))


def test_a_query_that_sees_nothing_gets_zeros():
    query, key, value, prefix_key, prefix_value = _tensors(2, 1, 16, 2, 0, 0, torch.float32, seed=9)
    spans = torch.tensor([[[0, 1]], [[0, 0]]], dtype=torch.int32, device=DEVICE)
    got = tree_attention_kernel.tree_attention(query, key, value, prefix_key, prefix_value, spans, 0.25)
    want = reference.tree_attention(query, key, value, prefix_key, prefix_value, spans, 0.25)
    assert torch.equal(got[0, :, 1], torch.zeros_like(got[0, :, 1]))
    assert torch.equal(want[0, :, 1], torch.zeros_like(want[0, :, 1]))
    _close(got, want, torch.float32)


def test_query_heads_must_split_over_the_key_heads():
    query, key, value, prefix_key, prefix_value = _tensors(3, 2, 16, 1, 0, 2, torch.float32, seed=10)
    spans = torch.zeros(1, 1, 2, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="3 query heads do not split into groups over 2 key/value heads"):
        tree_attention_kernel.tree_attention(query, key, value, prefix_key, prefix_value, spans, 0.25)


def test_spans_for_other_queries_are_refused():
    query, key, value, prefix_key, prefix_value = _tensors(2, 2, 16, 3, 0, 2, torch.float32, seed=11)
    with pytest.raises(ValueError, match=r"spans must be \[3, slots, 2\] integers"):
        tree_attention_kernel.tree_attention(query, key, value, prefix_key, prefix_value,
                                             torch.zeros(2, 1, 2, dtype=torch.int32, device=DEVICE), 0.25)


def test_each_query_head_of_a_group_reads_and_writes_its_own_rows():
    """Six tokens, three query heads per key/value head: folded row g * N + i is head g at token i."""
    parents = [-1, 0, 1, 2, 3, 4]
    query, key, value, prefix_key, prefix_value = _tensors(6, 2, 16, 6, 0, 9, torch.bfloat16, seed=12)
    spans = tree_spans.spans_from_tree(parents).to(DEVICE)
    got = tree_attention_kernel.tree_attention(query, key, value, prefix_key, prefix_value, spans, 0.25)
    want = reference.tree_attention(query, key, value, prefix_key, prefix_value, spans, 0.25)
    _close(got, want, torch.bfloat16)


def test_values_that_do_not_fit_the_keys_are_refused():
    query, key, value, prefix_key, prefix_value = _tensors(2, 2, 16, 3, 0, 2, torch.float32, seed=13)
    spans = torch.zeros(3, 1, 2, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="do not fit together"):
        tree_attention_kernel.tree_attention(query, key, value[:, :, :2], prefix_key, prefix_value, spans, 0.25)
