"""Prompt lookup's n-gram match: the continuation of the latest earlier occurrence of the sequence's trailing
n-gram. One home for the rule the lookup drafter, the hybrid drafter and the tree rounds' lookup branch share.

    python -c "import torch; from minispark.serving.ngram import NgramMatch; print(NgramMatch().match(torch.tensor([1, 2, 3, 1, 2])))"
"""

from __future__ import annotations

import torch

from minispark.core.defaults import HYBRID_MAX_NGRAM, HYBRID_MIN_NGRAM


class NgramMatch:
    """The longest trailing n-gram (``max_ngram`` down to ``min_ngram`` tokens) with an earlier occurrence."""

    def __init__(self, max_ngram: int = HYBRID_MAX_NGRAM, min_ngram: int = HYBRID_MIN_NGRAM) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def match(self, ids: torch.Tensor) -> tuple[int, torch.Tensor]:
        """(n, continuation): the length n of the longest trailing n-gram with an earlier occurrence
        in ``ids`` (the whole conversation and prompt, no window; 0 without one) and the tokens after
        its latest occurrence (a view of ``ids``)."""
        length = ids.numel()
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            windows = ids[: length - 1].unfold(0, n, 1)  # (length - n, n): every n-gram but the trailing one
            hits = (windows == ids[length - n:]).all(dim=1).nonzero().flatten()
            if hits.numel():
                start = int(hits[-1]) + n
                return n, ids[start:]
        return 0, ids[:0]
