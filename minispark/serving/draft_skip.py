"""Draft-skip: leave the drafter out of rounds where drafting is predicted not to pay.

A drafted round costs the drafter's forward plus a verify of 1 + ℓ tokens and yields 1 + n tokens
(n accepted drafts); a target-only step costs one 1-token step and yields 1 token. Where the
drafter is rarely right (a weak drafter, a hard stretch of text) every drafted round loses the
drafter's time, even when the length policy then verifies nothing (ℓ = 0). :class:`DraftSkip`
decides *before* the drafter runs whether this round drafts at all; a skipped round is a plain
target step (verify the anchor alone), so a hard stretch costs exactly target-only decoding.

The rule, in units of one target-only step t₁ (measured on the rounds that verified one token):

    surplus = E[1 + n] − E[propose s + step s] / t₁      over recent drafted rounds

is how many tokens a drafted round wins over the target step it replaces; the round drafts iff the
surplus is positive. Both expectations are exponentially weighted averages (weight ``weight`` on
the newest drafted round), so the estimate follows the text's difficulty and the machine's load.
Measured times rather than the SPS table: the break-even depends on the drafter's own cost, which
the table does not hold, and the measured one is what the user waits for.

While skipping, the policy probes: it drafts one round after a wait sized so that losing probes
cost at most ``budget`` target steps per skipped round: with an expected loss of L = −surplus
target steps per drafted round, it waits ceil(L / ``budget``) rounds, between ``min_interval`` and
``max_interval``. The default 2 % keeps a long hard stretch within 3 % of target-only, the first
drafted round included; a drafter that costs 0.6 target steps and is never right then probes
every 30 rounds, one that is nearly free (n-gram lookup) or nearly pays far more often. Each probe
updates the averages, so a stretch where drafting pays again shortens the waits until the surplus
is positive and every round drafts.

Lossless: every decision is a function of earlier rounds only (their tokens, acceptance and
timings), never of this round's draft, so the round's output law is the target's whichever way
the decision goes (tests/serving/test_draft_skip.py runs the joint-distribution test with skips on).

    python -m minispark.serving.draft_skip     # simulated hard/easy stretches: rounds drafted, cost vs target-only
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod

from minispark.core.defaults import DEFAULT_GAMMA


class SkipPolicy(ABC):
    """Asked before each round whether to run the drafter; told each round's outcome after it."""

    @abstractmethod
    def should_draft(self) -> bool:
        """Whether this round runs the drafter. Called once per round, before anything of it exists."""

    @abstractmethod
    def observe(self, drafted: bool, proposed: int, accepted: int, propose_s: float, step_s: float) -> None:
        """The round's outcome: whether it drafted, ℓ drafts verified, n accepted, the seconds of
        the propose step and of the rest of the round (verify, accept, commit)."""


class DraftSkip(SkipPolicy):
    """Skip the drafter while the expected surplus of a drafted round is not positive (module docstring)."""

    def __init__(self, weight: float = 0.25, budget: float = 0.02, min_interval: int = 2,
                 max_interval: int = 64) -> None:
        if not 0.0 < weight <= 1.0:
            raise ValueError(f"draft-skip weight must be in (0, 1], got {weight}")
        if budget <= 0.0:
            raise ValueError(f"draft-skip budget must be > 0, got {budget}")
        if not 1 <= min_interval <= max_interval:
            raise ValueError(f"need 1 <= min_interval <= max_interval, got {min_interval}, {max_interval}")
        self.weight = weight
        self.budget = budget
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.tokens: float | None = None  # E[1 + n] over drafted rounds
        self.seconds: float | None = None  # E[propose + step seconds] over drafted rounds
        self.target_step_s: float | None = None  # E[step seconds] of rounds that verified 1 token
        self._skipped = 0

    @property
    def surplus(self) -> float | None:
        """Tokens a drafted round is expected to win over one target step; None until measurable."""
        if self.tokens is None or self.seconds is None or self.target_step_s is None:
            return None
        return self.tokens - self.seconds / self.target_step_s

    def should_draft(self) -> bool:
        if self.tokens is None:
            return True  # nothing drafted yet: try
        surplus = self.surplus
        if surplus is None:
            return False  # no 1-token step yet (e.g. γ every round): take one to learn the break-even
        if surplus > 0.0:
            self._skipped = 0
            return True
        if self._skipped >= self.wait(surplus):  # probe
            self._skipped = 0
            return True
        self._skipped += 1
        return False

    def observe(self, drafted: bool, proposed: int, accepted: float, propose_s: float, step_s: float) -> None:
        if proposed == 0:  # a 1-token verify, skipped or drafted with ℓ = 0: the target-only step time
            self.target_step_s = self._average(self.target_step_s, step_s)
        if not drafted:
            return
        self.tokens = self._average(self.tokens, 1.0 + accepted)
        self.seconds = self._average(self.seconds, propose_s + step_s)

    def wait(self, surplus: float) -> int:
        """Skipped rounds before a probe: an expected loss of −surplus target steps per probe,
        spread over the wait, costs ``budget`` target steps per round."""
        return min(max(math.ceil(-surplus / self.budget), self.min_interval), self.max_interval)

    def _average(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.weight * (new - old)


class BatchDraftSkip:
    """Draft-skip for R requests verified together (``batched.BatchDecoder``): one decision per round.

    A batched round drafts for every request in one drafter forward or for none, so the decision is the
    round's: a drafted round yields Σ_r (1 + n_r) tokens in its propose + verify seconds, a plain round R
    tokens in one R-row step. Per request, that is :class:`DraftSkip`'s own rule with E[1 + n] the mean over
    the requests in flight and t₁ the plain R-row step. Both depend on R (a wider batch costs more per step
    and leaves less idle compute for drafts to fill), so each number of requests in flight keeps its own
    :class:`DraftSkip`; a steady load settles on one. A number of requests seen for the first time starts from
    the estimates of the nearest one seen (R moves one at a time as requests finish and arrive, and a fresh
    policy would draft its first rounds to learn what its neighbour knows). Lossless for the same reason as
    the single-request form: every decision is a function of earlier rounds only."""

    def __init__(self, **settings: float) -> None:
        self.settings = settings
        self.policies: dict[int, DraftSkip] = {}

    def policy(self, requests: int) -> DraftSkip:
        """The policy of rounds with ``requests`` in flight (made on first use)."""
        if requests not in self.policies:
            policy = DraftSkip(**self.settings)
            if self.policies:
                nearest = self.policies[min(self.policies, key=lambda known: (abs(known - requests), known))]
                policy.tokens, policy.seconds = nearest.tokens, nearest.seconds
                policy.target_step_s = nearest.target_step_s
            self.policies[requests] = policy
        return self.policies[requests]

    def should_draft(self, requests: int) -> bool:
        return self.policy(requests).should_draft()

    def observe(self, requests: int, drafted: bool, proposed: int, accepted: int, propose_s: float,
                step_s: float) -> None:
        """The round's outcome: ``proposed`` drafts verified in all, ``accepted`` of them kept in all."""
        self.policy(requests).observe(drafted, proposed, accepted / requests, propose_s, step_s)


def simulate(stretches: list[tuple[int, float]], draft_cost: float = 0.5, verify_cost: float = 0.08,
             gamma: int = DEFAULT_GAMMA, seed: int = 0) -> dict:
    """Expected effect on synthetic text: ``stretches`` of (rounds, per-draft acceptance α).

    Costs are in target steps: a drafted round costs ``draft_cost`` plus a verify of 1 + ℓ tokens
    at 1 + ``verify_cost``·ℓ; it verifies ℓ = γ drafts, each accepted with probability α given the
    previous one was. Returns tokens per target-step time with and without draft-skip (target-only
    = 1.0) and the share of rounds skipped."""
    rng = random.Random(seed)
    result = {}
    for name, policy in (("always", None), ("draft-skip", DraftSkip())):
        tokens = time = 0.0
        rounds = skipped = 0
        for count, alpha in stretches:
            for _ in range(count):
                drafted = policy is None or policy.should_draft()
                accepted = 0
                if drafted:
                    while accepted < gamma and rng.random() < alpha:
                        accepted += 1
                proposed = gamma if drafted else 0
                step = 1.0 + verify_cost * proposed
                if policy is not None:
                    policy.observe(drafted, proposed, accepted, draft_cost if drafted else 0.0, step)
                tokens += 1 + accepted
                time += step + (draft_cost if drafted else 0.0)
                rounds += 1
                skipped += not drafted
        result[name] = {"speedup_vs_target": tokens / time, "skipped_share": skipped / rounds}
    return result


if __name__ == "__main__":
    cases = {
        "hard (α 0.1)": [(2000, 0.1)],
        "easy (α 0.8)": [(2000, 0.8)],
        "mixed (hard/easy stretches of 50)": [(50, 0.1), (50, 0.8)] * 20,
    }
    for label, stretches in cases.items():
        outcome = simulate(stretches)
        print(f"{label:>34}: " + ", ".join(f"{name} {v['speedup_vs_target']:.3f}× target "
                                            f"({v['skipped_share']:.0%} skipped)" for name, v in outcome.items()))
