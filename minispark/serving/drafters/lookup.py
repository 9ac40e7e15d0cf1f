"""Prompt-lookup (n-gram) drafting: propose the continuation of the latest earlier match of the
sequence's trailing n-gram. Free to run, deterministic (its p_d is one-hot), strong on answers that
copy from the prompt (code edits, extraction, summaries).

    minispark generate --drafter lookup --prompt "Repeat: the quick brown fox"
"""

from __future__ import annotations

import torch

from minispark.serving.draft_block import FixedBlock
from minispark.serving.drafters.base import Drafter
from minispark.serving.ngram import NgramMatch
from minispark.target.sampling import SamplingConfig


class LookupDrafter(NgramMatch, Drafter):
    """n-gram prompt lookup, trying the longest n-gram first (``max_ngram`` down to ``min_ngram``;
    ``ngram.NgramMatch``)."""

    name = "lookup"

    def continuation(self, ids: torch.Tensor) -> torch.Tensor:
        """The tokens following the latest earlier occurrence of the trailing n-gram (a view of
        ``ids``: the scheduler takes at most γ of them)."""
        return self.match(ids)[1]

    def propose(
        self,
        ids: torch.Tensor,
        anchor_position: int,
        sampling: SamplingConfig,
        generator: torch.Generator,
    ) -> FixedBlock:
        # No confidence head: the scheduler decides on position alone.
        return FixedBlock(self.continuation(ids))
