"""The hybrid drafter: each round, the n-gram lookup's continuation or the DSpark block, whichever is
expected to pay more, or neither (a plain target step).

Code answers copy identifiers and whole lines from the prompt and from earlier output; the DSpark
drafter sees 32 positions of target features and cannot copy from far back, while on chat, where
little repeats, it is ahead of the lookup. :class:`HybridDrafter` proposes from one of them per round:

* **What the choice sees.** Only :class:`PreDraftState`, which exists before any draft token of the
  round is drawn: the matched n-gram length and how many tokens the lookup has, the DSpark
  confidence head's c_1 (it reads the backbone's h_1 and the anchor, both fixed before x_1 is
  drawn: ``SequentialBlock._confidence``) and the context length the SPS curve is read at, plus
  estimates from earlier rounds. The source therefore never depends on a drafted token's value,
  and the loop stays lossless at every temperature: a lookup proposal is a point mass (p_d
  one-hot), verified by rejection sampling with the residual as the lookup drafter's always are; a
  DSpark block is scheduled and verified exactly as the DSpark drafter's are.
* **The price.** A candidate whose position k survives, given the k−1 before it did, with
  probability q_k yields E(ℓ) = 1 + Σ_{j≤ℓ} ∏_{i≤j} q_i tokens for a verify of 1 + ℓ at SPS(1 + ℓ);
  its price is max_ℓ Θ(ℓ) = E(ℓ) · SPS(1 + ℓ), the scheduler's Θ rule (``schedule.py``). A plain step
  is Θ(0) = SPS(1). Every q of a lookup proposal is known up front, so its ℓ is that argmax and is
  fixed before anything is drawn (``DraftBlock.fixed_length``); a DSpark block's ℓ stays the length
  policy's, position by position. Without an SPS table (fixed and threshold modes) the curve is
  flat, Θ = E, and a plain step never wins.
* **The estimates.** Lookup q_k per matched n-gram length, DSpark's q_1 = its calibrated c_1 and
  q_2.. per position, each a prior from ``defaults.py`` (measured on held-out prompts) worth
  ``HYBRID_PRIOR_ROUNDS`` rounds, then the counts of this generation's earlier rounds.
* **The forward is lazy.** The lookup's price is known without the DSpark forward; when it beats
  DSpark's price at the mean c_1 of earlier rounds, the forward is not run (the DSpark context
  projects the round's features when it next drafts, as after a draft-skipped round). Otherwise the
  forward runs, c_1 is read (x_1 is not drawn) and the choice is made again with it.

Draft-skip decides only the rounds the first choice gives the trained drafter (``skip_exempt``): a
lookup or plain round costs no forward and is already priced by the Θ rule, so it neither asks draft-skip
nor feeds its estimate of what a trained drafter's round wins; like the choice, that is decided before
anything is drawn.

    minispark generate --drafter hybrid --prompt "Fix the typo in: def add(a, b): retrun a + b" --json
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from minispark.core.defaults import (DEFAULT_GAMMA, HYBRID_DSPARK_PRIOR, HYBRID_LOOKUP_PRIOR, HYBRID_MAX_NGRAM, HYBRID_MIN_NGRAM,
                                HYBRID_PRIOR_ROUNDS)
from minispark.model.draft_context import HeldRows
from minispark.serving.draft_block import DraftBlock, FixedBlock
from minispark.serving.drafters.base import Drafter
from minispark.serving.drafters.lookup import LookupDrafter
from minispark.target.sampling import SamplingConfig

if TYPE_CHECKING:
    from minispark.model.calibration import Calibration
    from minispark.model.drafter_dir import OpenDrafter
    from minispark.serving.sps import SPSTable


class Source(enum.StrEnum):
    """Where a hybrid round's proposal comes from (the names bench counts rounds by)."""

    LOOKUP = "lookup"
    DSPARK = "dspark"
    PLAIN = "plain"


@dataclass(frozen=True)
class PreDraftState:
    """Everything a round's choice may see; nothing of it depends on a token drawn this round.

    context_length: committed tokens (the SPS curve is read there)
    match_length:   n of the trailing n-gram the lookup matched in the whole context (0: none)
    lookup_tokens:  tokens the lookup can propose after that match (at most γ)
    c1:             the DSpark head's calibrated c_1; None before the forward ran (or without a head)
    """

    context_length: int
    match_length: int
    lookup_tokens: int
    c1: float | None = None


@dataclass(frozen=True)
class Choice:
    """A round's source; ``length`` is the lookup prefix to verify (0 for the other sources)."""

    source: Source
    length: int = 0
    theta: float = 0.0


@dataclass(frozen=True)
class RoundPlan:
    """:meth:`HybridDrafter.plan`'s result: the pre-draft state, the first choice and the lookup's
    continuation (≤ γ,). ``needs_model``: the trained drafter's block must be proposed before
    :meth:`HybridDrafter.complete` (a batched server proposes those of several requests together)."""

    state: PreDraftState
    choice: Choice
    continuation: torch.Tensor
    device: torch.device

    @property
    def needs_model(self) -> bool:
        return self.choice.source is Source.DSPARK


class AcceptanceEstimate:
    """q_k, the chance draft position k survives given the k−1 before it did: a prior worth
    ``weight`` rounds, then counts (a round tried position k iff it verified k and accepted k−1)."""

    def __init__(self, prior: Sequence[float], weight: float) -> None:
        if not prior or not all(0.0 <= q <= 1.0 for q in prior):
            raise ValueError(f"acceptance prior must be non-empty rates in [0, 1], got {list(prior)}")
        self.prior, self.weight = list(prior), weight
        self.tried: list[float] = []
        self.survived: list[float] = []

    def rates(self, length: int) -> list[float]:
        """q_1..q_length (a prior shorter than ``length`` repeats its last rate)."""
        out = []
        for k in range(length):
            prior = self.prior[min(k, len(self.prior) - 1)]
            tried = self.tried[k] if k < len(self.tried) else 0.0
            survived = self.survived[k] if k < len(self.survived) else 0.0
            out.append((survived + self.weight * prior) / (tried + self.weight))
        return out

    def observe(self, verified: int, accepted: int) -> None:
        """A round verified ``verified`` drafts and accepted the first ``accepted``."""
        for k in range(min(accepted + 1, verified)):
            while len(self.tried) <= k:
                self.tried.append(0.0)
                self.survived.append(0.0)
            self.tried[k] += 1.0
            self.survived[k] += float(k < accepted)


class ThetaPricer:
    """max_ℓ Θ(ℓ) = E(ℓ) · SPS(1 + ℓ) of a candidate's rates, read on the SPS table at the context
    length (a flat curve without a table: Θ = E)."""

    def __init__(self, gamma: int, sps_table: SPSTable | None = None) -> None:
        if sps_table is not None and sps_table.max_tokens < gamma + 1:
            raise ValueError(f"SPS table covers {sps_table.max_tokens} tokens per step, γ={gamma} needs {gamma + 1}")
        self.gamma, self.sps_table = gamma, sps_table
        self._context: int | None = None
        self._curve = [1.0] * (gamma + 1)

    def curve(self, context_length: int) -> list[float]:
        """SPS(1..γ+1) at ``context_length`` (recomputed only when the length changes)."""
        if self.sps_table is not None and context_length != self._context:
            self._curve, self._context = self.sps_table.curve(self.gamma + 1, context_length), context_length
        return self._curve

    def best(self, rates: Sequence[float], context_length: int) -> tuple[int, float]:
        """(ℓ, Θ(ℓ)) maximizing Θ over ℓ = 0..len(rates) (≤ γ); ℓ = 0 is the plain step."""
        curve = self.curve(context_length)
        length, theta = 0, curve[0]
        expected, survival = 1.0, 1.0
        for k, q in enumerate(rates[: self.gamma], start=1):
            survival *= q
            expected += survival
            if expected * curve[k] > theta:
                length, theta = k, expected * curve[k]
        return length, theta


class ThetaChoice:
    """The hybrid's choice rule (module docstring): the candidate with the higher price, or a plain
    step when neither beats it; ``choose`` reads only a :class:`PreDraftState` and earlier rounds."""

    def __init__(self, gamma: int, has_confidence: bool, sps_table: SPSTable | None = None,
                 lookup_prior: dict[int, Sequence[float]] | None = None,
                 dspark_prior: Sequence[float] = HYBRID_DSPARK_PRIOR, weight: float = HYBRID_PRIOR_ROUNDS) -> None:
        self.gamma, self.has_confidence = gamma, has_confidence
        self.pricer = ThetaPricer(gamma, sps_table)
        self.lookup_prior = dict(lookup_prior or HYBRID_LOOKUP_PRIOR)
        self.dspark_prior, self.weight = list(dspark_prior), weight
        self.reset()

    def reset(self) -> None:
        """Forget earlier rounds (a new generation): back to the priors."""
        self.lookup = {n: AcceptanceEstimate(prior, self.weight) for n, prior in self.lookup_prior.items()}
        self.dspark = AcceptanceEstimate(self.dspark_prior, self.weight)
        self.c1_sum, self.c1_count = 0.0, 0

    def lookup_rates(self, match_length: int, length: int) -> list[float]:
        """q_1..q_length of a lookup proposal after an n-gram match of ``match_length`` tokens."""
        longest = max(self.lookup)
        return self.lookup[min(max(match_length, min(self.lookup)), longest)].rates(length)

    def dspark_rates(self, c1: float | None) -> list[float]:
        """q_1..q_γ of the DSpark block: c_1 (else the mean c_1 of earlier rounds, else the prior)."""
        rates = self.dspark.rates(self.gamma)
        if c1 is None and self.has_confidence:
            c1 = (self.c1_sum + self.weight * rates[0]) / (self.c1_count + self.weight)
        return ([c1] if c1 is not None else rates[:1]) + rates[1:]

    def choose(self, state: PreDraftState) -> Choice:
        """LOOKUP, DSPARK or PLAIN. With a confidence head and ``state.c1`` None, DSPARK means "not
        the lookup on these estimates: run the forward and ask again with c_1"."""
        context = state.context_length
        plain = self.pricer.curve(context)[0]
        lookup_len, lookup_theta = 0, plain
        if state.match_length > 0 and state.lookup_tokens > 0:
            lookup_len, lookup_theta = self.pricer.best(self.lookup_rates(state.match_length, state.lookup_tokens),
                                                        context)
        dspark_len, dspark_theta = self.pricer.best(self.dspark_rates(state.c1), context)
        if lookup_len > 0 and lookup_theta >= dspark_theta:  # ties: the lookup costs nothing to run
            return Choice(Source.LOOKUP, lookup_len, lookup_theta)
        if state.c1 is None and self.has_confidence:
            return Choice(Source.DSPARK, 0, dspark_theta)
        if dspark_len > 0:
            return Choice(Source.DSPARK, 0, dspark_theta)
        return Choice(Source.PLAIN, 0, plain)

    def observe(self, state: PreDraftState, choice: Choice, verified: int, accepted: int) -> None:
        """The round's outcome: ``verified`` drafts of ``choice``'s source, ``accepted`` survived."""
        if state.c1 is not None:
            self.c1_sum += state.c1
            self.c1_count += 1
        if choice.source is Source.LOOKUP:
            self.lookup[min(max(state.match_length, min(self.lookup)), max(self.lookup))].observe(verified, accepted)
        elif choice.source is Source.DSPARK:
            self.dspark.observe(verified, accepted)


class HybridDrafter(Drafter):
    """The lookup and a trained drafter behind one interface; ``choice`` picks each round's source.

    ``price_with`` sets what the choice prices against (the SPS table in schedule mode, none in the
    others, and the drafter's calibration of c_1); ``serving.builder`` calls it.
    """

    name = "hybrid"

    def __init__(self, lookup: LookupDrafter, model: Drafter, gamma: int | None = None,
                 choice: ThetaChoice | None = None) -> None:
        self.lookup, self.model = lookup, model
        self.feature_layers, self.has_confidence = model.feature_layers, model.has_confidence
        self.context_window = model.context_window
        self.max_gamma = model.max_gamma
        self.gamma = gamma or model.max_gamma or DEFAULT_GAMMA
        self.calibration: Calibration | None = None
        self.source: OpenDrafter | None = None  # the directory ``model`` was loaded from, opened (its calibrations)
        self.choice = choice or ThetaChoice(self.gamma, model.has_confidence)
        self._round: tuple[PreDraftState, Choice, DraftBlock] | None = None

    @property
    def precision(self) -> str | None:
        """The trained drafter's weights (int8 / float32 / ...), as bench reports them."""
        return getattr(self.model, "precision", None)

    def price_with(self, sps_table: SPSTable | None, gamma: int, calibration: Calibration | None = None) -> None:
        """Price candidates on ``sps_table`` (None: a flat curve) for proposals of up to ``gamma`` drafts."""
        self.gamma, self.calibration = gamma, calibration
        self.choice.gamma, self.choice.pricer = gamma, ThetaPricer(gamma, sps_table)

    def reset(self, cached_ids: torch.Tensor, features: torch.Tensor | None, text_positions: torch.Tensor) -> None:
        self.choice.reset()
        self._round = None
        self.model.reset(cached_ids, features, text_positions)

    def propose(self, ids: torch.Tensor, anchor_position: int, sampling: SamplingConfig,
                generator: torch.Generator) -> DraftBlock:
        plan = self.plan(ids)
        return self.complete(plan, self.model.propose(ids, anchor_position, sampling, generator)
                             if plan.needs_model else None)

    def skip_exempt(self, ids: torch.Tensor) -> bool:
        # A lookup or plain round costs no forward: draft-skip, which weighs the trained drafter's cost,
        # decides only the rounds the plan gives the trained drafter.
        return not self.plan(ids).needs_model

    def plan(self, ids: torch.Tensor) -> "RoundPlan":
        """The round's first choice, from the pre-draft state alone (the lookup's match, no forward)."""
        match_length, continuation = self.lookup.match(ids)
        continuation = continuation[: self.gamma]  # (≤ γ,)
        state = PreDraftState(int(ids.numel()), match_length, int(continuation.numel()))
        return RoundPlan(state, self.choice.choose(state), continuation, ids.device)

    def complete(self, plan: "RoundPlan", model_block: DraftBlock | None) -> DraftBlock:
        """The round's block: with ``model_block`` (the trained drafter's, proposed because
        ``plan.needs_model``, alone or batched with other requests') the choice is made again with its c_1
        when the drafter has a confidence head; else the plan's choice stands."""
        state, choice, block = plan.state, plan.choice, model_block
        if block is not None and self.has_confidence:
            state = replace(state, c1=self._calibrated_c1(block.confidence(1)))  # c_1 only: x_1 is not drawn
            choice = self.choice.choose(state)
        if choice.source is Source.LOOKUP:
            block = FixedBlock(plan.continuation[: choice.length])
            block.fixed_length = True
        elif choice.source is Source.PLAIN:
            block = DraftBlock(0, plan.device)
        if block is None:
            raise ValueError("a DSpark round needs the trained drafter's block (plan.needs_model)")
        block.source = choice.source.value
        self._round = (state, choice, block)
        return block

    def _calibrated_c1(self, c1: float | None) -> float | None:
        if c1 is None or self.calibration is None:
            return c1
        return self.calibration.scale(1, c1)

    def commit(self, num_accepted: int, new_cached_ids: torch.Tensor, features: torch.Tensor | None,
               text_positions: torch.Tensor) -> None:
        if self._round is not None:  # None: draft-skip left this round out
            state, choice, block = self._round
            # The drawn positions are the verified ones: the schedule step draws x_1..x_ℓ only.
            self.choice.observe(state, choice, len(block.tokens), num_accepted)
            self._round = None
        self.model.commit(num_accepted, new_cached_ids, features, text_positions)

    def extend(self, new_cached_ids: torch.Tensor, features: torch.Tensor | None,
               text_positions: torch.Tensor) -> None:
        self.model.extend(new_cached_ids, features, text_positions)

    def rollback(self, text_position: int) -> None:
        self._round = None
        self.model.rollback(text_position)

    def oldest_read(self, anchor_position: int) -> int:
        return self.model.oldest_read(anchor_position)

    def holds(self, start: int, end: int) -> bool:
        return self.model.holds(start, end)

    def context_rows(self, start: int, end: int) -> HeldRows | None:
        return self.model.context_rows(start, end)

    def adopt_context(self, rows: HeldRows) -> None:
        self._round = None
        self.model.adopt_context(rows)


def make_hybrid(model: Drafter, max_ngram: int = HYBRID_MAX_NGRAM, min_ngram: int = HYBRID_MIN_NGRAM) -> HybridDrafter:
    """The hybrid of the n-gram lookup (the measured n-gram lengths by default) and ``model``."""
    return HybridDrafter(LookupDrafter(max_ngram, min_ngram), model)
