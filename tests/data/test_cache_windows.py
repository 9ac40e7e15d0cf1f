"""Anchor validity, window unions and byte estimates (pure numpy, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from minispark.data.cache_windows import (answer_mask, estimate_bytes, full_bytes, layout_bytes, select_anchors,
                                     valid_anchors, window_bounds, window_layout)


def test_valid_anchors_need_the_anchor_and_its_next_token_in_the_mask():
    mask = answer_mask(prompt_len=5, seq_len=9)  # answer = [5, 9)
    assert valid_anchors(mask).tolist() == [5, 6, 7]  # 8 has no next token
    gappy = np.array([0, 1, 1, 0, 1, 1, 1, 0, 1], dtype=bool)
    assert valid_anchors(gappy).tolist() == [1, 4, 5]


def test_select_anchors_is_seeded_distinct_sorted_and_valid():
    mask = answer_mask(40, 300)
    a = select_anchors(mask, 32, np.random.default_rng(7))
    b = select_anchors(mask, 32, np.random.default_rng(7))
    c = select_anchors(mask, 32, np.random.default_rng(8))
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
    assert len(set(a.tolist())) == 32 and np.all(np.diff(a) > 0)
    assert np.all(mask[a]) and np.all(mask[a + 1])
    short = select_anchors(answer_mask(40, 45), 32, np.random.default_rng(0))
    assert short.tolist() == [40, 41, 42, 43]  # fewer valid positions than asked: all of them
    assert select_anchors(answer_mask(40, 41), 32, np.random.default_rng(0)).size == 0


def test_anchor_runs_are_consecutive_and_shrink_the_context_union():
    mask = answer_mask(40, 400)
    runs = select_anchors(mask, 32, np.random.default_rng(3), run=8)
    assert len(set(runs.tolist())) == 32 and np.all(mask[runs]) and np.all(mask[runs + 1])
    starts = runs[np.r_[True, np.diff(runs) != 1]]
    assert len(starts) <= 5  # four runs of 8, or five when the answer's short last chunk is drawn
    scattered = select_anchors(mask, 32, np.random.default_rng(3), run=1)
    rows = lambda anchors: window_layout(anchors, 400, 32, 7).ctx_pos.size  # noqa: E731
    assert rows(runs) <= 5 * (32 + 7) < rows(scattered)


@pytest.mark.parametrize("window", [0, 1, 5, 16, 64])
def test_window_union_has_no_duplicates_and_covers_every_anchor(window):
    rng = np.random.default_rng(window)
    block = 7
    for _ in range(50):
        prompt_len = int(rng.integers(1, 40))
        seq_len = prompt_len + int(rng.integers(2, 120))
        anchors = select_anchors(answer_mask(prompt_len, seq_len), int(rng.integers(1, 12)), rng)
        layout = window_layout(anchors, seq_len, window, block)
        bounds = window_bounds(anchors, seq_len, window, block)
        for kind in ("ctx", "hid", "tok"):
            rows = getattr(layout, f"{kind}_pos")
            runs = getattr(layout, f"anchor_{kind}")
            assert np.all(np.diff(rows) > 0), "rows must be unique and sorted"
            covered = set()
            for (start, end), lo, hi in zip(runs, *bounds[kind]):
                assert rows[start:end].tolist() == list(range(lo, hi))  # the anchor's exact window
                covered.update(range(lo, hi))
            if window:  # W = 0 stores every token (the full-sequence layout)
                assert covered == set(rows.tolist()), "no row outside every window"
        for a, (c0, c1), (t0, t1), (h0, h1) in zip(anchors, layout.anchor_ctx, layout.anchor_tok, layout.anchor_hid):
            context = a if window == 0 else min(window, a)
            assert c1 - c0 == context
            assert layout.tok_pos[t0:t1].tolist() == list(range(a - context, min(a + block + 1, seq_len)))
            assert layout.hid_pos[h0:h1].tolist() == list(range(a, min(a + block, seq_len)))


def test_window_zero_is_full_context_and_the_full_sequence_layout():
    layout = window_layout(np.array([10, 30]), seq_len=40, window=0, block=4)
    assert layout.ctx_pos.tolist() == layout.hid_pos.tolist() == layout.tok_pos.tolist() == list(range(40))
    assert layout.anchor_ctx.tolist() == [[0, 10], [0, 30]]
    assert layout.anchor_hid.tolist() == [[10, 14], [30, 34]]


def test_estimate_matches_layout_bytes_and_full_sequence_formula():
    est = estimate_bytes(hidden_size=16, num_layers=3, prompt_tokens=10, answer_tokens=50, anchors_per_sample=5,
                         window=4, block=3, dtype="fp32", num_samples=1, seed=3)
    anchors = select_anchors(answer_mask(10, 60), 5, np.random.default_rng(3))
    assert est.bytes_per_sample == layout_bytes(window_layout(anchors, 60, 4, 3), 3, 16, "fp32")
    assert est.full_bytes_per_sample == full_bytes(60, 3, 16, "fp32") == 60 * (9 + 4 * 16 * 4)


def test_estimate_for_a_3b_vlm_is_plausible():
    # Qwen2.5-VL-3B: d=2048, 36 layers → 5 stored; 5,000 samples of 1,024 tokens.
    full = estimate_bytes(hidden_size=2048, num_layers=5, prompt_tokens=256, answer_tokens=768, anchors_per_sample=64,
                          window=0, block=7, num_samples=5000)
    windowed = estimate_bytes(hidden_size=2048, num_layers=5, prompt_tokens=256, answer_tokens=768,
                              anchors_per_sample=16, window=64, block=7, num_samples=5000)
    assert full.full_bytes_per_sample == pytest.approx(1024 * 6 * 2048 * 2, rel=0.01)  # ~25 MB, bf16
    assert windowed.ratio < 0.6 and full.ratio == pytest.approx(1.0, abs=0.01)  # W=0: every token stored
    assert windowed.total_bytes == pytest.approx(windowed.bytes_per_sample * 5000, abs=1)


def test_window_follows_text_positions_across_an_image():
    """M-RoPE: 6 image rows share position 3, so a position window of 4 reaches back over them."""
    positions = np.array([0, 1, 2, 3, 3, 3, 3, 3, 3, 4, 5, 6, 7, 8])  # rows 3..8 are one image
    layout = window_layout(np.array([11]), 14, window=4, block=2, text_positions=positions)
    # pos(11) = 6 → context positions [2, 6) → rows 2..10 (the image included), not rows 7..10.
    assert layout.ctx_pos.tolist() == list(range(2, 11))
    assert window_layout(np.array([11]), 14, window=4, block=2).ctx_pos.tolist() == [7, 8, 9, 10]
