"""The drafter interface every drafter implements.

A round of speculative decoding asks a drafter for a block of up to γ tokens after the anchor (the
last committed token). The drafter returns a :class:`~minispark.serving.draft_block.DraftBlock`: tokens,
*the exact distribution each was sampled from* (``p_d``, which rejection sampling needs to stay
lossless) and per-position confidences, drawn lazily. How many of them are verified is not the
drafter's business: the engine's schedule step (``schedule.scheduled_length``) decides, position by
position, before each token is drawn. Deterministic drafters (n-gram lookup) report no p_d: theirs
is the one-hot of the proposed token.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from minispark.core.defaults import DEFAULT_GAMMA
from minispark.model.draft_context import HeldRows
from minispark.serving.draft_block import DraftBlock
from minispark.serving.draft_tree import TreeDrafts
from minispark.core.errors import MinisparkError, option
from minispark.serving.schedule import FixedLength
from minispark.target.sampling import SamplingConfig


class Drafter(ABC):
    """Proposes draft tokens; sees only token ids, target features and 1D text positions.

    Lifecycle per generation: ``reset`` once after the target prefill, then per round
    ``propose`` → (engine schedules and verifies) → ``commit``; ``rollback`` after a stop. A later turn of the
    same session calls ``rollback`` + ``extend`` instead of ``reset``.
    """

    name: str = "drafter"
    #: Whether blocks carry confidences c_k (needed by the threshold and schedule policies).
    has_confidence: bool = False
    #: The longest block this drafter drafts (a checkpoint's block size); None: no limit.
    max_gamma: int | None = None
    #: Target decoder layers whose outputs the drafter consumes (KV injection); () for none.
    feature_layers: tuple[int, ...] = ()
    #: How many rows of features before the anchor a block reads (older ones are never read again); 0: all.
    context_window: int = 0
    #: Whether :meth:`propose_tree` expands trees (else a tree round is the n-gram lookup's branch alone).
    drafts_trees: bool = False

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
        sampling: SamplingConfig,
        generator: torch.Generator,
    ) -> DraftBlock:
        """The draft block after ``ids[-1]`` (the anchor). ``ids`` (L,) are all committed tokens;
        ``anchor_position`` is the anchor's 1D text position."""

    def propose_tree(self, ids: torch.Tensor, anchor_position: int, sampling: SamplingConfig,
                     generator: torch.Generator) -> TreeDrafts:
        """What a tree round expands after ``ids[-1]`` (``draft_tree.py``): a drafter that drafts chains only
        offers nothing, so its tree is the n-gram lookup's branch alone."""
        return TreeDrafts()

    def skip_exempt(self, ids: torch.Tensor) -> bool:
        """Whether draft-skip stays out of this round: the drafter's own choice for it, made from the
        committed ``ids`` alone (nothing drafted), costs no drafter forward (the hybrid's lookup and
        plain rounds, already priced by its Θ rule). Such rounds neither ask nor teach draft-skip."""
        return False

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

    def oldest_read(self, anchor_position: int) -> int:
        """The oldest text position whose row a block at ``anchor_position`` reads (its context window's first;
        0 for a drafter that reads every row; ``anchor_position`` itself for one without a context)."""
        return anchor_position

    def holds(self, start: int, end: int) -> bool:
        """Whether this drafter holds the rows at text positions [start, end) of its sequence (its context, or
        rows its last prompt's prefill gave), so that a prefill keeping the target's cache up to ``end`` need
        not forward them again: true for a drafter without a context."""
        return True

    def context_rows(self, start: int, end: int) -> HeldRows | None:
        """The rows at text positions [start, end) for another fork of this drafter whose prompt starts with the
        same tokens (:meth:`adopt_context`); None when not :meth:`holds`."""
        return None

    def adopt_context(self, rows: HeldRows) -> None:
        """Start from ``rows`` another fork lent (:meth:`context_rows`), the target cache from the same prefix."""


class NoDrafter(Drafter):
    """Proposes nothing: every round verifies the anchor only, i.e. plain target decoding."""

    name = "none"

    def propose(
        self,
        ids: torch.Tensor,
        anchor_position: int,
        sampling: SamplingConfig,
        generator: torch.Generator,
    ) -> DraftBlock:
        return DraftBlock(0, ids.device)


def default_policy(drafter: Drafter, gamma: int | None = None, spec: str | None = None) -> FixedLength:
    """The length policy where none is given (generate, chat, a conversation): γ tokens every round
    (the drafter's block size by default, see :func:`resolve_gamma`), none for :class:`NoDrafter`."""
    if isinstance(drafter, NoDrafter):
        return FixedLength(0)
    return FixedLength(resolve_gamma(drafter, spec or drafter.name, gamma))


def resolve_gamma(drafter: Drafter, spec: str, gamma: int | None) -> int:
    """γ: the drafter's block size by default (``DEFAULT_GAMMA`` without one); more than the
    drafter can draft is a one-line error naming ``spec``."""
    if gamma is None:
        return drafter.max_gamma if drafter.max_gamma is not None else DEFAULT_GAMMA
    if drafter.max_gamma is not None and gamma > drafter.max_gamma:
        raise MinisparkError(f"{option('gamma')} {gamma}: drafter {spec} drafts at most {drafter.max_gamma} tokens per "
                             f"round (its block size); use {option('gamma')} {drafter.max_gamma} or less")
    return gamma
