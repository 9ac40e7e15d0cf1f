"""The drafter interface every drafter implements, and the per-round length policy it consults.

A round of speculative decoding asks a drafter for up to γ tokens after the anchor (the last
committed token). The drafter returns the tokens *and the exact distribution each was sampled
from* (``p_d``), which rejection sampling needs to stay lossless. Deterministic drafters (n-gram
lookup) return ``probs=None``: their ``p_d`` is the one-hot of the proposed token.

How many tokens to propose is decided token by token by a :class:`LengthPolicy`, *before* each
token is drawn (non-anticipation, design notes §8/§9): ``policy.admit(k, c_k)`` is asked with the
confidence for position k, which may depend on x_1..x_{k-1} but never on x_k itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from minispark.errors import MinisparkError
from minispark.sampling import SamplingConfig


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


class LengthPolicy(ABC):
    """Decides, position by position, whether to extend this round's proposal."""

    max_tokens: int

    @abstractmethod
    def start_round(self, context_length: int) -> None:
        """Reset per-round state; ``context_length`` is the committed length (SPS depends on it)."""

    @abstractmethod
    def admit(self, position: int, confidence: float | None) -> bool:
        """Admit draft position ``position`` (1-based) given its confidence c_k (None if unknown)."""


class FixedLength(LengthPolicy):
    """Always propose γ tokens (the classic fixed-length speculative decoding)."""

    def __init__(self, max_tokens: int) -> None:
        if max_tokens < 0:
            raise MinisparkError(f"--gamma must be >= 0, got {max_tokens}")
        self.max_tokens = max_tokens

    def start_round(self, context_length: int) -> None:
        pass

    def admit(self, position: int, confidence: float | None) -> bool:
        return position <= self.max_tokens


class Drafter(ABC):
    """Proposes draft tokens; sees only token ids, target features and 1D text positions.

    Lifecycle per generation: ``reset`` once after the target prefill, then per round
    ``propose`` → (engine verifies) → ``commit``; ``rollback`` after a stop. A later turn of the
    same session calls ``rollback`` + ``extend`` instead of ``reset``.
    """

    name: str = "drafter"
    #: Whether proposals carry confidences c_k (needed by the threshold and schedule policies).
    has_confidence: bool = False
    #: Target decoder layers whose outputs the drafter consumes (KV injection); () for none.
    feature_layers: tuple[int, ...] = ()

    def reset(
        self,
        cached_ids: torch.Tensor,
        features: torch.Tensor | None,
        text_positions: torch.Tensor,
    ) -> None:
        """Start a generation. ``cached_ids`` (P-1,) are the prompt tokens in the target KV cache
        (all but the last prompt token, which is the first anchor); ``features`` (P-1, m·d) their
        target features when ``feature_layers`` is non-empty; ``text_positions`` (P-1,) their 1D
        text-stream positions."""

    @abstractmethod
    def propose(
        self,
        ids: torch.Tensor,
        anchor_position: int,
        policy: LengthPolicy,
        sampling: SamplingConfig,
        generator: torch.Generator,
    ) -> Proposal:
        """Propose tokens after ``ids[-1]`` (the anchor). ``ids`` (L,) are all committed tokens;
        ``anchor_position`` is the anchor's 1D text position."""

    def commit(
        self,
        num_accepted: int,
        new_cached_ids: torch.Tensor,
        features: torch.Tensor | None,
        text_positions: torch.Tensor,
    ) -> None:
        """After verification: ``num_accepted`` draft tokens survived; ``new_cached_ids`` (n,) are
        the tokens newly written to the target KV cache (the anchor and the accepted drafts), with
        their target ``features`` (n, m·d) and ``text_positions`` (n,)."""

    def extend(
        self,
        new_cached_ids: torch.Tensor,
        features: torch.Tensor | None,
        text_positions: torch.Tensor,
    ) -> None:
        """A later chat turn: ``new_cached_ids`` (n,) were prefilled into the target KV cache after
        the ones the drafter already holds (after any :meth:`rollback`), with their target
        ``features`` (n, m·d) and ``text_positions`` (n,). Context-free drafters ignore it (the
        lookup drafter reads the whole conversation from ``ids`` in :meth:`propose`)."""

    def rollback(self, text_position: int) -> None:
        """The target KV cache was cropped: forget the context at text positions >= ``text_position``
        (tokens past a stop, or a turn the chat template renders differently from what was cached)."""


class NoDrafter(Drafter):
    """Proposes nothing: every round verifies the anchor only, i.e. plain target decoding."""

    name = "none"

    def propose(
        self,
        ids: torch.Tensor,
        anchor_position: int,
        policy: LengthPolicy,
        sampling: SamplingConfig,
        generator: torch.Generator,
    ) -> Proposal:
        return Proposal.empty(ids.device)
