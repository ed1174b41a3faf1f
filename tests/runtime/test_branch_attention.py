"""Branch attention against plain attention over the concatenated keys, on both of its paths."""

from __future__ import annotations

import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
import torch
from packaging.version import Version

from decisionflow.runtime.passes import branch_attention as ba

ROOT = Path(__file__).resolve().parents[2]


def _case(groups: int, n: int = 7, local: int = 11, prefix: int = 37, dim: int = 16):
    torch.manual_seed(groups)
    kv_heads = 2
    q = torch.randn(1, kv_heads * groups, n, dim)
    k, v = torch.randn(1, kv_heads, local, dim), torch.randn(1, kv_heads, local, dim)
    pk, pv = torch.randn(1, kv_heads, prefix, dim), torch.randn(1, kv_heads, prefix, dim)
    visible = torch.rand(n, local) > 0.5
    visible[:, 0] = True
    return q, k, v, ba.fold_mask(visible, groups, torch.float32), pk, pv, visible


def _plain(q, k, v, visible, pk, pv, scale):
    groups = q.shape[1] // k.shape[1]
    keys = torch.cat([pk, k], dim=-2).repeat_interleave(groups, dim=1)
    values = torch.cat([pv, v], dim=-2).repeat_interleave(groups, dim=1)
    allowed = torch.cat([torch.ones(visible.shape[0], pk.shape[-2], dtype=torch.bool), visible], dim=-1)
    return torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=allowed, scale=scale)


@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("fused", [True, False])
def test_branch_attention_equals_attention_over_everything(monkeypatch, groups, fused):
    if not fused:
        # The private CPU op may be missing from another torch build: the plain path must stand in.
        monkeypatch.setattr(ba, "_CPU_FLASH", None)
    q, k, v, mask, pk, pv, visible = _case(groups)
    out = ba.branch_attention(q, k, v, mask, pk, pv, 0.25)
    assert torch.allclose(out, _plain(q, k, v, visible, pk, pv, 0.25), atol=1e-5)


def test_dependency_floors_are_what_the_suite_runs_on():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floors = {d.split(">=")[0].strip(): d.split(">=")[1].split(",")[0] for d in declared if ">=" in d}
    for package in ("torch", "transformers"):
        # The cache API, the SDPA enable-GQA path and the private CPU attention op need these floors.
        assert Version(floors[package]) >= Version({"torch": "2.13", "transformers": "5.24"}[package])
        assert Version(version(package)).release >= Version(floors[package]).release


def _rows_after_input(trunk: int, rows: int, length: int) -> torch.Tensor:
    """What independent questions see: a causal input, then `rows` rows of `length` tokens, each seeing the
    whole input and its own earlier tokens only."""
    n = trunk + rows * length
    visible = torch.zeros(n, n, dtype=torch.bool)
    visible[:trunk, :trunk] = torch.ones(trunk, trunk, dtype=torch.bool).tril()
    for r in range(rows):
        start = trunk + r * length
        visible[start : start + length, :trunk] = True
        visible[start : start + length, start : start + length] = torch.ones(length, length, dtype=torch.bool).tril()
    return visible


@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("fused", [True, False])
def test_a_chunked_local_part_equals_the_dense_one(monkeypatch, groups, fused):
    if not fused:
        monkeypatch.setattr(ba, "_CPU_FLASH", None)
    torch.manual_seed(groups)
    visible = _rows_after_input(trunk=50, rows=12, length=23)
    n, dim, kv_heads = visible.shape[0], 16, 2
    q = torch.randn(1, kv_heads * groups, n, dim)
    k, v = torch.randn(1, kv_heads, n, dim), torch.randn(1, kv_heads, n, dim)
    pk, pv = torch.randn(1, kv_heads, 9, dim), torch.randn(1, kv_heads, 9, dim)
    chunks = ba.chunk_local(visible, groups, torch.float32, size=40)
    assert chunks is not None and len(chunks) == -(-n // 40)
    assert sum((c.stop - c.start) * len(c.keys) for c in chunks) < 0.5 * n * n  # the point of chunking
    chunked = ba.branch_attention(q, k, v, chunks, pk, pv, 0.25)
    dense = ba.branch_attention(q, k, v, ba.fold_mask(visible, groups, torch.float32), pk, pv, 0.25)
    assert torch.allclose(chunked, dense, atol=1e-5)
    assert torch.allclose(chunked, _plain(q, k, v, visible, pk, pv, 0.25), atol=1e-5)


def test_a_local_part_every_token_sees_is_not_chunked():
    visible = torch.ones(300, 300, dtype=torch.bool).tril()
    assert ba.chunk_local(visible, 3, torch.float32) is None  # a causal input: chunks would save too little
    assert isinstance(ba.local_attention(visible, 3, torch.float32), torch.Tensor)


def test_chunk_keys_are_taken_as_slices_where_they_run_and_gathered_where_they_scatter():
    assert ba.contiguous_runs([0, 1, 2, 7, 8, 12]) == ((0, 3), (7, 9), (12, 13))
    assert ba.contiguous_runs(list(range(0, 2 * (ba.MAX_RUNS + 1), 2))) is None
    rows = ba.chunk_local(_rows_after_input(trunk=50, rows=12, length=23), 3, torch.float32, size=40)
    assert rows is not None and all(chunk.runs is not None and len(chunk.runs) <= 3 for chunk in rows)

    # The tokens of chunk c see themselves and every tenth key before them from c on: too many runs to slice
    # in the last chunk, so it gathers.
    torch.manual_seed(5)
    n, dim, kv_heads, groups = 120, 16, 2, 3
    visible = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        visible[i, i] = True
        visible[i, torch.arange(i // 40, 40 * (i // 40), 10)] = True
    chunks = ba.chunk_local(visible, groups, torch.float32, size=40)
    assert chunks is not None and any(chunk.runs is None for chunk in chunks)
    q = torch.randn(1, kv_heads * groups, n, dim)
    k, v = torch.randn(1, kv_heads, n, dim), torch.randn(1, kv_heads, n, dim)
    pk, pv = torch.randn(1, kv_heads, 9, dim), torch.randn(1, kv_heads, 9, dim)
    chunked = ba.branch_attention(q, k, v, chunks, pk, pv, 0.25)
    assert torch.allclose(chunked, _plain(q, k, v, visible, pk, pv, 0.25), atol=1e-5)
