"""The few-query attention kernel: SDPA's numbers, and a query's result independent of everything but its row."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minispark.target import attention, native
from minispark.target.attention import small_attention

needs_kernel = pytest.mark.skipif(attention._kernel() is None, reason="the attention kernels need AVX-512 and gcc")
MIN = torch.finfo(torch.float32).min


def _inputs(batch: int, heads: int, kv_heads: int, rows: int, length: int, seed: int = 0):
    """q (B, H, Q, D) and k / v (B, H_kv, L, D) views into buffers with spare columns, as a KV cache holds them."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, rows, 64, generator=g)
    k = torch.randn(batch, kv_heads, length + 40, 64, generator=g)[:, :, :length]
    v = torch.randn(batch, kv_heads, length + 40, 64, generator=g)[:, :, :length]
    return q, k, v


@needs_kernel
@pytest.mark.parametrize("batch, heads, kv_heads, rows, length", [
    (1, 9, 3, 1, 1), (1, 9, 3, 1, 70), (3, 9, 3, 5, 33), (2, 4, 4, 24, 100), (8, 9, 3, 1, 95), (2, 8, 2, 3, 17)])
@pytest.mark.parametrize("mask", ["none", "additive", "bool"])
def test_small_attention_equals_sdpa(batch: int, heads: int, kv_heads: int, rows: int, length: int, mask: str) -> None:
    if mask == "none" and rows > 1:
        pytest.skip("several queries always come with a mask")
    q, k, v = _inputs(batch, heads, kv_heads, rows, length)
    visible = torch.rand(batch, 1, rows, length, generator=torch.Generator().manual_seed(1)) > 0.3
    visible[..., -1] = True  # every query sees at least one key
    given = {"none": None, "bool": visible,
             "additive": torch.zeros(visible.shape).masked_fill_(~visible, MIN)}[mask]
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=given, enable_gqa=True)
    torch.testing.assert_close(small_attention(q, k, v, given, 64 ** -0.5), want, rtol=0, atol=2e-6)


@needs_kernel
def test_a_query_computes_the_same_alone_in_a_block_and_beside_masked_columns() -> None:
    q, k, v = _inputs(2, 9, 3, 5, 40)
    visible = torch.ones(2, 1, 5, 40, dtype=torch.bool).tril(diagonal=35)  # causal over the last 5 columns
    mask = torch.zeros(visible.shape).masked_fill_(~visible, MIN)
    block = small_attention(q, k, v, mask, 0.125)
    for row in range(5):
        alone = small_attention(q[:, :, row:row + 1], k, v, mask[:, :, row:row + 1], 0.125)
        assert torch.equal(block[:, :, row:row + 1], alone)
    # more columns, masked, holding other numbers (another sequence's stale rows): the same bits
    k_wide, v_wide = torch.cat([k, 9 * torch.randn_like(k)], dim=2), torch.cat([v, 9 * torch.randn_like(v)], dim=2)
    wide = torch.cat([mask, torch.full_like(mask, MIN)], dim=-1)
    assert torch.equal(small_attention(q, k_wide, v_wide, wide, 0.125), block)
    assert torch.equal(small_attention(q, k, v, mask, 0.125), block)  # and again: no state between calls


@needs_kernel
def test_more_queries_per_kv_head_than_the_kernel_takes_run_sdpa() -> None:
    """Up to ``SMALL_ATTENTION_QUERIES`` queries per kv head (query heads per kv head × new tokens) run the kernel;
    wider verifies run SDPA, faster there."""
    for rows, small in ((1, True), (5, True), (6, False)):  # 3 query heads per kv head: 3, 15, 18 queries
        q, k, v = _inputs(2, 9, 3, rows, 40)
        assert attention._small(q, k, v, torch.zeros(2, 1, rows, 40)) is small


@needs_kernel
def test_threads_give_the_same_bits() -> None:
    q, k, v = _inputs(4, 9, 3, 3, 50)
    mask = torch.zeros(4, 1, 3, 50)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = small_attention(q, k, v, mask, 0.125)
        torch.set_num_threads(2)
        assert torch.equal(small_attention(q, k, v, mask, 0.125), one)
    finally:
        torch.set_num_threads(threads)


def test_without_the_kernel_attention_runs_sdpa(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "has_avx512", lambda: False)
    native.load.cache_clear()
    attention._kernel.cache_clear()
    try:
        q, k, v = _inputs(1, 9, 3, 1, 30)
        assert not attention._small(q, k, v, None)
        module = torch.nn.Module()
        module.num_key_value_groups = 3
        out, _ = attention.grouped_sdpa_forward(module, q, k, v, None, scaling=0.125)
        want = F.scaled_dot_product_attention(q, k, v, scale=0.125, enable_gqa=True).transpose(1, 2)
        torch.testing.assert_close(out, want, rtol=0, atol=1e-6)
    finally:
        native.load.cache_clear()
        attention._kernel.cache_clear()
