"""Prompt-lookup (n-gram) drafting: propose the continuation of the latest earlier match of the
sequence's trailing n-gram. Free to run, deterministic (its p_d is one-hot), strong on answers that
copy from the prompt (code edits, extraction, summaries).

    minispark generate --drafter lookup --prompt "Repeat: the quick brown fox"
"""

from __future__ import annotations

import torch

from minispark.serving.draft_block import FixedBlock
from minispark.serving.drafters.base import Drafter
from minispark.target.sampling import SamplingConfig


class LookupDrafter(Drafter):
    """n-gram prompt lookup, trying the longest n-gram first (``max_ngram`` down to ``min_ngram``)."""

    name = "lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def continuation(self, ids: torch.Tensor) -> torch.Tensor:
        """The tokens following the latest earlier occurrence of the trailing n-gram (a view of
        ``ids``: the scheduler takes at most γ of them)."""
        return self.match(ids)[1]

    def match(self, ids: torch.Tensor) -> tuple[int, torch.Tensor]:
        """(n, continuation): the length n of the longest trailing n-gram with an earlier occurrence
        in ``ids`` (the whole conversation and prompt, no window; 0 without one) and the tokens after
        its latest occurrence."""
        length = ids.numel()
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            windows = ids[: length - 1].unfold(0, n, 1)  # (length - n, n): every n-gram but the trailing one
            hits = (windows == ids[length - n:]).all(dim=1).nonzero().flatten()
            if hits.numel():
                start = int(hits[-1]) + n
                return n, ids[start:]
        return 0, ids[:0]

    def propose(
        self,
        ids: torch.Tensor,
        anchor_position: int,
        sampling: SamplingConfig,
        generator: torch.Generator,
    ) -> FixedBlock:
        # No confidence head: the scheduler decides on position alone.
        return FixedBlock(self.continuation(ids))
