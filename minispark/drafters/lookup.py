"""Prompt-lookup (n-gram) drafting: propose the continuation of the latest earlier match of the
sequence's trailing n-gram. Free to run, deterministic (its p_d is one-hot), strong on answers that
copy from the prompt (code edits, extraction, summaries).

    minispark generate --drafter lookup --prompt "Repeat: the quick brown fox"
"""

from __future__ import annotations

import torch

from minispark.drafters.base import Drafter, LengthPolicy, Proposal
from minispark.sampling import SamplingConfig


class LookupDrafter(Drafter):
    """n-gram prompt lookup, trying the longest n-gram first (``max_ngram`` down to ``min_ngram``)."""

    name = "lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def continuation(self, ids: torch.Tensor, max_tokens: int) -> torch.Tensor:
        """Up to ``max_tokens`` tokens following the latest earlier occurrence of the trailing n-gram."""
        length = ids.numel()
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            windows = ids[: length - 1].unfold(0, n, 1)  # (length - n, n): every n-gram but the trailing one
            hits = (windows == ids[length - n:]).all(dim=1).nonzero().flatten()
            if hits.numel():
                start = int(hits[-1]) + n
                return ids[start: start + max_tokens]
        return ids[:0]

    def propose(
        self,
        ids: torch.Tensor,
        anchor_position: int,
        policy: LengthPolicy,
        sampling: SamplingConfig,
        generator: torch.Generator,
    ) -> Proposal:
        candidates = self.continuation(ids, policy.max_tokens)
        length = 0
        # No confidence head: the policy sees None and decides on position alone.
        while length < candidates.numel() and policy.admit(length + 1, None):
            length += 1
        return Proposal(tokens=candidates[:length])

