"""A round's draft block: what a drafter hands the engine (:class:`DraftBlock`) and what the engine
verifies (:class:`Proposal`).

A drafter proposes a whole block of up to γ positions after the anchor. It is drawn lazily, left to
right, because the engine's scheduler (``schedule.scheduled_length``) decides position by position
how many to verify, and must decide on position k *before* x_k exists (non-anticipation, design
notes §8/§9): ``confidence(k)`` draws x_1..x_{k−1} if needed but never x_k, and ``proposal(n)``
draws x_1..x_n. So the Appendix-A counterexample (x_k's own value deciding whether x_k is verified)
cannot be written against this interface, and a block the scheduler cuts short costs no draws past
the cut.

    .venv/bin/python -m pytest -q tests/model/test_draft_model.py -k before_each_draw
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Proposal:
    """Draft tokens for one round.

    tokens:      (ℓ,) long, the draft x_1..x_ℓ (ℓ may be 0)
    probs:       (ℓ, V) float, the exact p_d each x_k was drawn from; None means one-hot on tokens
    confidences: (ℓ,) float raw confidence c_k per position, when the drafter has a confidence head
    """

    tokens: torch.Tensor
    probs: torch.Tensor | None = None
    confidences: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.tokens.numel())

    @staticmethod
    def empty(device: torch.device | str = "cpu") -> "Proposal":
        return Proposal(tokens=torch.empty(0, dtype=torch.long, device=device))


class DraftBlock:
    """Up to ``size`` draft positions, drawn on demand; subclasses implement :meth:`_confidence` and
    :meth:`_draw`. Drawn tokens, their p_d and confidences are kept in ``tokens``, ``probs`` and
    ``confidences`` (one entry per position, in order)."""

    #: The source that drew the block, for per-source counts (None: the engine names the drafter).
    source: str | None = None
    #: True when the drafter fixed the block's length before drawing anything (the hybrid drafter's
    #: lookup rounds, priced by expected tokens × SPS): the schedule step then verifies all of it.
    fixed_length: bool = False

    def __init__(self, size: int, device: torch.device | str = "cpu") -> None:
        self.size = size
        self.device = device
        self.tokens: list[torch.Tensor] = []  # () long each
        self.probs: list[torch.Tensor | None] = []  # (V,) each; None = one-hot (greedy, lookup)
        self.confidences: list[torch.Tensor | None] = []  # () each; None without a confidence head

    def _confidence(self, k: int) -> torch.Tensor | None:
        """c_k from x_1..x_{k−1} (``self.tokens``) only; None when the drafter has no confidence head."""
        return None

    def _draw(self, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Draw x_k (k = len(self.tokens) + 1) → (token (), p_d (V,) or None for one-hot)."""
        raise NotImplementedError

    def confidence(self, k: int) -> float | None:
        """c_k (1-based), drawing x_1..x_{k−1} first if needed; x_k is not drawn."""
        self._draw_until(k - 1)
        if len(self.confidences) < k:
            self.confidences.append(self._confidence(k))
        c = self.confidences[k - 1]
        return None if c is None else float(c)

    def proposal(self, length: int) -> Proposal:
        """x_1..x_length with their p_d and confidences, drawing any not drawn yet."""
        if not 0 <= length <= self.size:
            raise ValueError(f"a block of {self.size} positions cannot propose {length}")
        self._draw_until(length)
        if length == 0:
            return Proposal.empty(self.device)
        probs = self.probs[:length]
        confidences = self.confidences[:length]
        return Proposal(
            tokens=torch.stack(self.tokens[:length]),  # (ℓ,)
            probs=None if probs[0] is None else torch.stack(probs),  # (ℓ, V)
            confidences=None if confidences[0] is None else torch.stack(confidences),  # (ℓ,)
        )

    def _draw_until(self, length: int) -> None:
        while len(self.tokens) < length:
            k = len(self.tokens) + 1
            if len(self.confidences) < k:  # c_k is fixed before x_k is drawn
                self.confidences.append(self._confidence(k))
            token, p = self._draw(k)
            self.tokens.append(token)
            self.probs.append(p)


class FixedBlock(DraftBlock):
    """A block whose tokens are known up front (n-gram lookup, test oracles): one-hot p_d, no
    confidences."""

    def __init__(self, tokens: torch.Tensor) -> None:
        super().__init__(int(tokens.numel()), tokens.device)
        self._known = tokens  # (size,)

    def _draw(self, k: int) -> tuple[torch.Tensor, None]:
        return self._known[k - 1], None
