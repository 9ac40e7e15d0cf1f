"""Which rows a target cache stores: anchors (§10.2), their bounded windows, and the bytes they take.

For a sequence of L tokens whose answer (the loss mask) is ``[P, L)``:

* an anchor ``a`` is valid only if tokens ``a`` and ``a+1`` are both inside the loss mask;
  A anchors are drawn without replacement with a seeded RNG, in runs of ``run`` consecutive
  anchors: a run of r anchors shares one context window, so it stores W + r − 1 context rows
  instead of r·W — the lever that makes windowed caches small (DeepSpec trains on dense anchors
  too: 512 per sequence);
* each anchor needs context features for ``[a−W, a)`` (``[0, a)`` when ``W == 0``; a W = 0 cache stores
  every token, the full-sequence DeepSpec layout, for comparison) — in text-position space, as the drafter bounds its window: the rows whose 1D
  text position lies in ``[pos(a)−W, pos(a))``. For text models that is exactly ``[a−W, a)``; for
  M-RoPE targets an image compresses positions, so the run may hold more rows (the whole image); final-norm hidden for ``[a, a+γ)`` (p_t of the γ labels) and token ids plus 1D
  text positions for ``[a−W, a+γ]`` (context, anchor and labels), all clipped to ``[0, L)``;
* a sample stores the union of its anchors' windows once per kind (context / hidden / token rows),
  and each anchor maps to one contiguous ``[start, end)`` run of rows per kind.

``estimate_bytes`` sizes a cache from these rules without running the target (``--dry-run``).

    .venv/bin/python -c "from minispark.data.cache_windows import estimate_bytes as e; print(e(hidden_size=2048, num_layers=5, prompt_tokens=256, answer_tokens=768, anchors_per_sample=64, window=128, block=7, num_samples=5000).describe())"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CACHE_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# Per-row bookkeeping, matching the arrays cache_format writes.
TOKEN_ROW_BYTES = 4 + 4 + 4 + 1  # tok_pos, input_ids, text_pos (int32), loss_mask (uint8)
POSITION_BYTES = 4  # ctx_pos / hid_pos (int32)
ANCHOR_BYTES = 4 + 4 + 3 * 2 * 8  # anchor_sample, anchor_pos (int32), three (start, end) int64 pairs
SAMPLE_BYTES = 8 + 4 + 4 + 1 + 4 * 8  # sample_index, prompt_len, seq_len, eos, four offsets
FULL_TOKEN_BYTES = 4 + 4 + 1  # a full-sequence cache's input_ids, text positions, loss_mask


def answer_mask(prompt_len: int, seq_len: int) -> np.ndarray:
    """(L,) bool loss mask: exactly the regenerated assistant answer ``[P, L)``."""
    mask = np.zeros(seq_len, dtype=bool)
    mask[prompt_len:] = True
    return mask


def valid_anchors(mask: np.ndarray) -> np.ndarray:
    """Positions a with ``mask[a]`` and ``mask[a+1]`` (the anchor and its first label are supervised)."""
    return np.flatnonzero(mask[:-1] & mask[1:])


def select_anchors(mask: np.ndarray, count: int, rng: np.random.Generator, run: int = 1) -> np.ndarray:
    """``min(count, #valid)`` distinct valid anchors, sorted, drawn with ``rng`` in runs.

    The valid anchors are cut into consecutive chunks of ``run`` (the last may be shorter) and whole
    chunks are drawn without replacement; the final chunk drawn is trimmed to reach ``count``.
    ``run == 1`` draws single anchors uniformly.
    """
    valid = valid_anchors(mask)
    if len(valid) <= count:
        return valid.astype(np.int64)
    chunks = [valid[i: i + run] for i in range(0, len(valid), run)]
    picked: list[np.ndarray] = []
    total = 0
    for index in rng.permutation(len(chunks)):
        take = chunks[index][: count - total]
        picked.append(take)
        total += len(take)
        if total == count:
            break
    return np.sort(np.concatenate(picked)).astype(np.int64)


@dataclass
class WindowLayout:
    """One sample's stored rows: sorted unique sequence indices per kind, and per-anchor row runs.

    ctx_pos / hid_pos / tok_pos:      (R,) int64 sequence indices of context / hidden / token rows
    anchor_ctx / anchor_hid / anchor_tok: (A, 2) int64 ``[start, end)`` rows of each anchor's window
    """

    anchors: np.ndarray
    ctx_pos: np.ndarray
    hid_pos: np.ndarray
    tok_pos: np.ndarray
    anchor_ctx: np.ndarray
    anchor_hid: np.ndarray
    anchor_tok: np.ndarray


def window_bounds(anchors: np.ndarray, seq_len: int, window: int, block: int,
                  text_positions: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-anchor ``[start, end)`` sequence intervals for the three row kinds.

    ``text_positions`` (L,) non-decreasing 1D positions (default: the indices themselves)."""
    anchors = np.asarray(anchors, dtype=np.int64)
    if window == 0:
        ctx_start = np.zeros_like(anchors)
    elif text_positions is None:
        ctx_start = np.maximum(anchors - window, 0)
    else:
        # First row whose position reaches pos(a) − W: positions never decrease along the sequence.
        ctx_start = np.searchsorted(text_positions, text_positions[anchors] - window, side="left").astype(np.int64)
    return {
        "ctx": (ctx_start, anchors),
        "hid": (anchors, np.minimum(anchors + block, seq_len)),
        "tok": (ctx_start, np.minimum(anchors + block + 1, seq_len)),
    }


def interval_union(starts: np.ndarray, ends: np.ndarray, length: int) -> np.ndarray:
    """Sorted unique indices covered by the intervals ``[starts[i], ends[i])`` within ``[0, length)``."""
    coverage = np.zeros(length + 1, dtype=np.int64)
    np.add.at(coverage, starts, 1)
    np.add.at(coverage, ends, -1)
    return np.flatnonzero(np.cumsum(coverage[:-1]) > 0)


def window_layout(anchors: np.ndarray, seq_len: int, window: int, block: int,
                  text_positions: np.ndarray | None = None) -> WindowLayout:
    """The union of the anchors' windows and the row run of each anchor within it."""
    if window < 0 or block < 1:
        raise ValueError(f"need window >= 0 and block >= 1, got {window}, {block}")
    rows, runs = {}, {}
    for kind, (starts, ends) in window_bounds(anchors, seq_len, window, block, text_positions).items():
        # W = 0 is the DeepSpec layout, kept for comparison: every token of the sequence is stored.
        rows[kind] = np.arange(seq_len) if window == 0 else interval_union(starts, ends, seq_len)
        # Every interval lies inside the union, so its rows are one contiguous run there.
        first = np.searchsorted(rows[kind], starts)
        runs[kind] = np.stack([first, first + (ends - starts)], axis=1).reshape(-1, 2)  # (A, 2)
    return WindowLayout(np.asarray(anchors, dtype=np.int64), rows["ctx"], rows["hid"], rows["tok"],
                        runs["ctx"], runs["hid"], runs["tok"])


def layout_bytes(layout: WindowLayout, num_layers: int, hidden_size: int, dtype: str) -> int:
    """Bytes one sample's rows take in a shard (tensor data; shard headers excluded)."""
    item = CACHE_DTYPE_BYTES[dtype]
    return (len(layout.ctx_pos) * (POSITION_BYTES + num_layers * hidden_size * item)
            + len(layout.hid_pos) * (POSITION_BYTES + hidden_size * item)
            + len(layout.tok_pos) * TOKEN_ROW_BYTES + len(layout.anchors) * ANCHOR_BYTES + SAMPLE_BYTES)


def full_bytes(seq_len: int, num_layers: int, hidden_size: int, dtype: str) -> int:
    """Bytes a full-sequence (DeepSpec-layout) cache takes for one sequence of ``seq_len`` tokens."""
    return seq_len * (FULL_TOKEN_BYTES + (num_layers + 1) * hidden_size * CACHE_DTYPE_BYTES[dtype])


@dataclass
class ByteEstimate:
    """Estimated size of a cache; ``ratio`` compares with a full-sequence cache of the same samples."""

    num_samples: int
    bytes_per_sample: float
    full_bytes_per_sample: float

    @property
    def total_bytes(self) -> int:
        return int(round(self.bytes_per_sample * self.num_samples))

    @property
    def ratio(self) -> float:
        return self.bytes_per_sample / self.full_bytes_per_sample

    def describe(self) -> str:
        return (f"~{format_bytes(self.bytes_per_sample)}/sample × {self.num_samples} samples = "
                f"{format_bytes(self.total_bytes)} ({self.ratio:.2f}× a full-sequence cache, "
                f"{format_bytes(self.full_bytes_per_sample * self.num_samples)})")


def estimate_bytes(*, hidden_size: int, num_layers: int, prompt_tokens: int | Sequence[int], answer_tokens: int,
                   anchors_per_sample: int, window: int, block: int, dtype: str = "bf16", anchor_run: int = 1,
                   num_samples: int | None = None, seed: int = 0, max_draws: int = 256) -> ByteEstimate:
    """Expected cache size for ``num_samples`` sequences of prompt + ``answer_tokens`` tokens.

    ``num_layers`` is the number of stored layers (m). ``prompt_tokens`` is one length or one per
    prompt (cycled over samples, as the cache build does). The union sizes are averaged over up to
    ``max_draws`` samples with the real anchor sampler; answers are assumed to run to
    ``answer_tokens`` (use ``--max-new-tokens`` for an upper bound).
    """
    if dtype not in CACHE_DTYPE_BYTES:
        raise ValueError(f"unknown cache dtype {dtype!r} (choose from {', '.join(CACHE_DTYPE_BYTES)})")
    lengths = [prompt_tokens] if isinstance(prompt_tokens, int) else list(prompt_tokens)
    num_samples = len(lengths) if num_samples is None else num_samples
    draws = np.linspace(0, num_samples - 1, num=min(num_samples, max_draws)).round().astype(int)
    rng = np.random.default_rng(seed)
    stored, full = 0.0, 0.0
    for index in draws:
        prompt_len = lengths[index % len(lengths)]
        seq_len = prompt_len + answer_tokens
        anchors = select_anchors(answer_mask(prompt_len, seq_len), anchors_per_sample, rng, anchor_run)
        stored += layout_bytes(window_layout(anchors, seq_len, window, block), num_layers, hidden_size, dtype)
        full += full_bytes(seq_len, num_layers, hidden_size, dtype)
    return ByteEstimate(num_samples, stored / len(draws), full / len(draws))


def format_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")
