"""Anchor batches (design notes §10.2): which anchors a training step takes, and how they are packed.

``AnchorPlan`` turns a cache into an endless, resumable stream of anchor indices (sample-major,
reshuffled per epoch); ``make_batch`` packs a step's anchors into rows that share context (all
anchors of one sample in one row, its context the union of their windows, each row stored once).
The trainer and the held-out proxy both batch through here, so they see identical inputs.

    .venv/bin/python -m pytest -q tests/training/test_train.py -k batch
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from minispark.data.cache_format import Anchor, CacheReader
from minispark.core.errors import MinisparkError


@dataclass
class Batch:
    """R rows (one per sample piece), each with N context rows and A anchors (padded).

    features (R, N, m·d) cache dtype; context_positions / context_valid (R, N);
    block_tokens (R, A, γ+1) anchor then labels; anchor_positions (R, A);
    target_hidden (R, A, γ, d) final hidden for p_t; valid (R, A, γ) label present and in the answer.
    """

    features: torch.Tensor
    context_positions: torch.Tensor
    context_valid: torch.Tensor
    block_tokens: torch.Tensor
    anchor_positions: torch.Tensor
    target_hidden: torch.Tensor
    valid: torch.Tensor

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(**{k: v.to(device, non_blocking=True) for k, v in vars(self).items()})


class AnchorPlan:
    """Which anchors step s trains on: an endless stream of anchor groups, reshuffled per epoch.

    A group is a whole sample's anchors (``run == 0``) or a run of ``run`` consecutive anchors of
    one sample. Epoch e visits the groups in the order of a permutation seeded by (seed, e), and
    step s takes anchors [s·B, (s+1)·B) of the stream: a pure function of (seed, s), so a resumed
    run sees exactly the batches it would have seen. ``samples`` gives the anchors to train on
    directly, per sample as reader indices in position order (on-policy refinement's round anchors),
    instead of every anchor of the cache. With dense anchors (hundreds per sample) whole
    samples make a step's B anchors neighbours in one answer — one highly correlated gradient after
    another; short runs mix B/run samples per step while neighbours still share context rows.
    """

    def __init__(self, reader: CacheReader, batch_anchors: int, seed: int, run: int = 0, *,
                 max_samples: int = 0, first_sample: int = 0, replay_samples: int = 0,
                 anchors_per_sample: int = 0, samples: Mapping[int, list[int]] | None = None) -> None:
        whole_cache = samples is None
        if samples is None:
            samples = {}
            for index, sample in enumerate(reader.anchor_samples()[0].tolist()):
                samples.setdefault(sample, []).append(index)
        samples = {k: v for k, v in samples.items()
                   if v and (k < replay_samples or first_sample <= k) and (max_samples <= 0 or k < max_samples)}
        if not samples:
            raise MinisparkError(f"{reader.directory}: the cache holds no anchors (answers too short?)")
        self.groups = [samples[k] for k in sorted(samples)]
        if anchors_per_sample > 0:
            # A sparser cache at the same generation cost: a seeded random subset per sample (as a
            # cache built with fewer --anchors-per-sample would have kept), in position order.
            rng = np.random.default_rng([seed, 1])
            self.groups = [sorted(rng.choice(g, anchors_per_sample, replace=False).tolist())
                           if len(g) > anchors_per_sample else g for g in self.groups]
        self.samples = len(self.groups)
        if run > 0:
            self.groups = [g[i:i + run] for g in self.groups for i in range(0, len(g), run)]
        self.total = sum(len(g) for g in self.groups)
        if whole_cache and batch_anchors > self.total:  # each step would repeat anchors (2**31 of them: a hang)
            kept = f" (of its first {max_samples} samples)" if max_samples > 0 else ""
            raise MinisparkError(f"batch_anchors {batch_anchors}: more than the {self.total} anchors {reader.directory} "
                                 f"holds{kept}; use batch_anchors={self.total} or less, or a larger cache")
        self.reader, self.batch_anchors, self.seed = reader, batch_anchors, seed
        self._epoch: tuple[int, np.ndarray] | None = None

    def _order(self, epoch: int) -> np.ndarray:
        if self._epoch is None or self._epoch[0] != epoch:
            perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.groups))
            self._epoch = (epoch, np.concatenate([self.groups[i] for i in perm]))
        return self._epoch[1]

    def step_anchors(self, step: int) -> list[int]:
        """Reader indices of the anchors of (0-based) step ``step``."""
        out: list[int] = []
        position = step * self.batch_anchors
        while len(out) < self.batch_anchors:
            epoch, offset = divmod(position + len(out), self.total)
            out.extend(self._order(epoch)[offset:offset + self.batch_anchors - len(out)].tolist())
        return out

    def anchors(self, step: int) -> list[Anchor]:
        """The anchors of (0-based) step ``step``, read from the cache."""
        return [self.reader[i] for i in self.step_anchors(step)]


def batch_rows(anchors: list[Anchor]) -> list[list[Anchor]]:
    """:func:`make_batch`'s rows: runs of consecutive anchors of one sample, each sorted by position; a batch's
    flattened (row, slot) order, padded to the longest row."""
    rows: list[list[Anchor]] = []
    for anchor in anchors:
        if rows and rows[-1][0].sample_index == anchor.sample_index:
            rows[-1].append(anchor)
        else:
            rows.append([anchor])
    return [sorted(row, key=lambda a: a.position) for row in rows]


def make_batch(anchors: list[Anchor], gamma: int) -> Batch:
    """Pack anchors into rows: consecutive anchors of one sample share a row whose context is the
    union of their windows (rows of ``[a−c, a)`` per anchor, each stored once)."""
    rows = batch_rows(anchors)
    packed = [_pack_row(row, gamma) for row in rows]
    n_ctx = max(1, max(p[0].shape[0] for p in packed))
    n_anchors = max(len(row) for row in rows)
    first = anchors[0]
    feature_size = math.prod(first.context_features.shape[1:])  # m·d
    r, d = len(rows), first.final_hidden.shape[-1]
    batch = Batch(
        features=torch.zeros(r, n_ctx, feature_size, dtype=first.context_features.dtype),
        context_positions=torch.zeros(r, n_ctx, dtype=torch.long),
        context_valid=torch.zeros(r, n_ctx, dtype=torch.bool),
        block_tokens=torch.zeros(r, n_anchors, gamma + 1, dtype=torch.long),
        anchor_positions=torch.zeros(r, n_anchors, dtype=torch.long),
        target_hidden=torch.zeros(r, n_anchors, gamma, d, dtype=first.final_hidden.dtype),
        valid=torch.zeros(r, n_anchors, gamma, dtype=torch.bool),
    )
    for i, (features, positions, tokens, anchor_pos, hidden, valid) in enumerate(packed):
        n, a = features.shape[0], tokens.shape[0]
        batch.features[i, :n] = features.reshape(n, -1)  # (n, m·d)
        batch.context_positions[i, :n], batch.context_valid[i, :n] = positions, True
        batch.block_tokens[i, :a], batch.anchor_positions[i, :a] = tokens, anchor_pos
        batch.target_hidden[i, :a], batch.valid[i, :a] = hidden, valid
    return batch


def _pack_row(row: list[Anchor], gamma: int):
    """One row's context (union of windows, by sequence index) and per-anchor blocks."""
    features, positions, end = [], [], -1
    tokens = torch.zeros(len(row), gamma + 1, dtype=torch.long)
    hidden = torch.zeros(len(row), gamma, row[0].final_hidden.shape[-1], dtype=row[0].final_hidden.dtype)
    valid = torch.zeros(len(row), gamma, dtype=torch.bool)
    for j, anchor in enumerate(row):
        c, start = anchor.context_len, anchor.position - anchor.context_len
        new = max(start, end) - start  # rows before this one are already in the row (sorted anchors)
        if new < c:
            features.append(anchor.context_features[new:])
            positions.append(anchor.text_positions[new:c])
        end = max(end, anchor.position)
        block = anchor.input_ids[c:].long()  # anchor, then k <= γ labels
        k = block.numel() - 1
        tokens[j, :k + 1] = block
        hidden[j, :k] = anchor.final_hidden[:k]
        valid[j, :k] = anchor.loss_mask[c + 1:]
    anchor_pos = torch.tensor([int(a.text_positions[a.context_len]) for a in row])
    if features:
        return torch.cat(features), torch.cat(positions).long(), tokens, anchor_pos, hidden, valid
    m_d = row[0].context_features.shape[1:]
    return torch.zeros(0, *m_d), torch.zeros(0, dtype=torch.long), tokens, anchor_pos, hidden, valid
