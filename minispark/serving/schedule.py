"""How many draft tokens to verify: the hardware-aware prefix scheduler and simpler length policies.

Design notes §8: with per-position confidences c_k (the chance draft token k survives given that
all before it did), the prefix survival is a_k = ∏_{i≤k} c_i and verifying ℓ tokens of one request
yields 1 + Σ_{j≤ℓ} a_j tokens in expectation at a step rate SPS(1 + ℓ). The scheduler admits draft
positions in order of decreasing survival while expected throughput Θ = τ · SPS(B) still rises, and
**stops at the first drop**. The break is what keeps speculative sampling lossless (§9): c_{k+1}
depends on the realised x_k, so looking past a drop would let x_k's own value decide whether x_k
is verified, which biases the output away from the target distribution.

* :func:`scheduled_length` — the engine's schedule step: the one admit loop, asking a
  :class:`LengthPolicy` about position k with c_k before x_k is drawn.
* :func:`algorithm1` — the batched form, R requests at once (Algorithm 1, verbatim).
* :class:`ScheduledLength` — the batch-1 form (§8.1) as an incremental :class:`LengthPolicy`: each
  ``admit(k, c_k)`` costs a few float operations and never needs c_{k+1}.
* :class:`ThresholdLength` — the repo's offline mode (§11): stop at the first c_k < threshold.
* :class:`FixedLength` — always γ tokens (the classic fixed-length speculative decoding).
* :func:`make_length_policy` — builds any of them from a :class:`LengthMode`.

Jagged SPS curves (§12.5) break Θ's unimodality, so the break can stop before the global maximum;
that is the price of using same-round confidences. The part of the jaggedness that comes from the
cost curve alone (verifying 2 tokens slower than 4) is removed by scheduling against the curve's
monotone envelope and padding the verify (``ScheduledLength(envelope=True)``, the default). The
rest (confidence-driven dips) needs the production fix, a global search over confidences two
steps old, which needs an asynchronous engine and is not implemented here.

    python -m minispark.serving.schedule     # micro-benchmark: cost of one admit() in microseconds
"""

from __future__ import annotations

import enum
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from minispark.core.defaults import DEFAULT_GAMMA, DEFAULT_TREE_DRAFTS
from minispark.core.errors import MinisparkError, option
from minispark.serving.draft_tree import TreePolicy
from minispark.serving.ngram import NgramMatch
from minispark.serving.sps import SPSTable, monotone_envelope

if TYPE_CHECKING:
    from minispark.model.calibration import Calibration

NO_CONFIDENCE = (
    f"{option('mode')} {{mode}}: this length policy needs per-position confidences, but the drafter has no "
    f"confidence head; use {option('mode')} fixed (γ tokens every round) with this drafter"
)


def _check_confidence(c: float, where: str) -> float:
    c = float(c)
    if not 0.0 <= c <= 1.0:  # also rejects NaN
        raise ValueError(f"{where}: confidence must be in [0, 1], got {c}")
    return c


class LengthPolicy(ABC):
    """Decides, position by position, whether to extend this round's proposal (up to ``gamma``)."""

    gamma: int

    @abstractmethod
    def start_round(self, context_length: int) -> None:
        """Reset per-round state; ``context_length`` is the committed length (SPS depends on it)."""

    @abstractmethod
    def admit(self, position: int, confidence: float | None) -> bool:
        """Admit draft position ``position`` (1-based) given its confidence c_k (None if unknown)."""


class FixedLength(LengthPolicy):
    """Always propose γ tokens (the classic fixed-length speculative decoding)."""

    def __init__(self, gamma: int) -> None:
        if gamma < 0:
            raise MinisparkError(f"{option('gamma')} must be >= 0, got {gamma}")
        self.gamma = gamma

    def start_round(self, context_length: int) -> None:
        pass

    def admit(self, position: int, confidence: float | None) -> bool:
        return position <= self.gamma


def scheduled_length(policy: LengthPolicy, confidence: Callable[[int], float | None], available: int,
                     context_length: int) -> int:
    """The admit loop (batch-1 schedule step): how many of ``available`` draft positions to verify.

    ``confidence(k)`` is c_k, known before x_k is drawn (``DraftBlock.confidence``); the loop asks
    the policy in order and stops at its first refusal, so x_k's value never decides x_k's fate."""
    policy.start_round(context_length)
    limit = min(available, policy.gamma)
    length = 0
    while length < limit and policy.admit(length + 1, confidence(length + 1)):
        length += 1
    return length


def algorithm1(confidences: Sequence[Sequence[float]], sps: Callable[[int], float]) -> list[int]:
    """Algorithm 1 of the design notes (§8): scheduled lengths ℓ_1..ℓ_R for R requests.

    ``confidences[r][j-1]`` is c_{r,j} (rows may differ in length); ``sps(B)`` is steps/s for a
    verification forward of B tokens in total (B = Σ_r (1 + ℓ_r), the 1 being each anchor).

    Candidates (r, j) with a_{r,j} > 0 are visited by survival descending; ties are broken by
    request index, then position, ascending (sort key ``(-a, r, j)``). Because a_{r,j} is
    non-increasing in j (a product of factors ≤ 1, which IEEE rounding keeps monotone), this visits
    each request's positions in prefix order, so ℓ_r only ever grows by one. The loop stops at the
    first candidate that does not strictly raise Θ.
    """
    pool: list[tuple[float, int, int]] = []
    for r, row in enumerate(confidences):
        survival = 1.0
        for j, c in enumerate(row, start=1):
            survival *= _check_confidence(c, f"algorithm1: request {r} position {j}")
            if survival > 0.0:
                pool.append((-survival, r, j))
    pool.sort()

    num_requests = len(confidences)
    lengths = [0] * num_requests
    if num_requests == 0:
        return lengths
    batch = num_requests
    expected = float(num_requests)  # τ*: each anchor yields one token (bonus or correction)
    best = expected * sps(batch)
    for neg_survival, r, j in pool:
        batch += 1
        expected += -neg_survival
        theta = expected * sps(batch)
        if theta > best:
            best = theta
            lengths[r] = j
        else:
            break  # the losslessness rule: never look past the first drop
    return lengths


class ScheduledLength(LengthPolicy):
    """Batch-1 hardware-aware scheduler (§8.1): admit x_k iff Θ(k) > Θ(k−1), stop at the first drop.

    Θ(k) = (1 + Σ_{j≤k} a_j) · SPS(1 + k) with SPS read from ``sps_table`` at the round's context
    length. With a ``calibration``, each raw c_k is first mapped to σ(logit(c_k)/T_k). A position
    whose survival is 0 is never admitted (Algorithm 1 leaves a = 0 out of its pool), so with
    ``envelope=False`` the decisions equal ``algorithm1([c], sps)`` exactly.

    ``envelope=True`` (the default) plans against the curve's monotone envelope
    (:func:`~minispark.serving.sps.monotone_envelope`): SPS(1 + k) is the best rate of any verify of at
    least 1 + k tokens, so a jagged curve (2 tokens slower than 4) no longer stops the scheduler at
    its first bump; the admissions then equal ``algorithm1`` on the envelope. When the rule stops
    at n drafts and the envelope at 1 + n tokens comes from a larger size m, positions n+1..m−1
    are admitted as *padding*. Lossless: the pad length is fixed at the moment the rule stops, from
    c_1..c_{n+1} alone, before x_{n+1} is drawn; the padded positions' confidences are never read.
    Every decision to send x_j is thus taken before x_j exists, and verification is exact rejection
    sampling over whatever prefix is sent. ``admitted`` is the scheduled length n of the round.

    A confidence of ``None`` (a drafter without confidence head) raises :class:`MinisparkError`;
    :func:`make_length_policy` refuses that combination already at construction time.
    """

    def __init__(
        self,
        sps_table: SPSTable,
        gamma: int,
        calibration: Calibration | None = None,
        envelope: bool = True,
    ) -> None:
        if gamma < 0:
            raise ValueError(f"{option('gamma')} must be >= 0, got {gamma}")
        if sps_table.max_tokens < gamma + 1:
            raise MinisparkError(
                f"SPS table {sps_table.device}/{sps_table.target} covers up to "
                f"{sps_table.max_tokens} tokens, but γ={gamma} needs {gamma + 1} "
                f"(anchor + drafts); re-profile with more tokens or lower {option('gamma')}"
            )
        if calibration is not None and len(calibration.temperatures) < gamma:
            raise MinisparkError(
                f"calibration has {len(calibration.temperatures)} temperatures but γ={gamma}; "
                f"re-run calibration with this γ"
            )
        self.gamma = gamma
        self.sps_table = sps_table
        self.calibration = calibration
        self.envelope = envelope
        self._context: int | None = None
        self.start_round(0)

    def start_round(self, context_length: int) -> None:
        if context_length != self._context:  # the curve only changes with the context length
            curve = self.sps_table.curve(self.gamma + 1, context_length)
            # _curve[k] = SPS(1 + k); _source[k] = drafts whose verify achieves it (k when raw)
            self._curve, self._source = (
                monotone_envelope(curve) if self.envelope else (curve, list(range(len(curve))))
            )
            self._context = context_length
        self._next = 1
        self._open = True
        self._pad_until = 0
        self._survival = 1.0
        self.admitted = 0
        self.expected_tokens = 1.0  # τ of the admitted prefix: anchor + Σ a_j
        self.theta = self._curve[0]  # Θ of the admitted prefix

    def admit(self, position: int, confidence: float | None) -> bool:
        if position != self._next:
            raise ValueError(
                f"ScheduledLength.admit: positions must be asked in order 1, 2, … after "
                f"start_round(); got {position}, expected {self._next}"
            )
        self._next += 1
        if position <= self._pad_until:
            return True  # padding, fixed when the rule stopped: c_position is not read
        if not self._open or position > self.gamma:
            self._open = False
            return False
        if confidence is None:
            raise MinisparkError(NO_CONFIDENCE.format(mode=LengthMode.SCHEDULE.value))
        c = _check_confidence(confidence, f"ScheduledLength position {position}")
        if self.calibration is not None:
            c = self.calibration.scale(position, c)
        self._survival *= c
        expected = self.expected_tokens + self._survival
        theta = expected * self._curve[position]
        if self._survival > 0.0 and theta > self.theta:
            self.expected_tokens, self.theta, self.admitted = expected, theta, position
            return True
        self._open = False
        # Stopped at n = position − 1 drafts: verify the cheapest size of at least n + 1 tokens.
        self._pad_until = self._source[position - 1]
        return position <= self._pad_until


class ThresholdLength(LengthPolicy):
    """Admit positions while the raw c_k >= ``threshold`` (the repo's offline mode, §11)."""

    def __init__(self, threshold: float, gamma: int) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"{option('threshold')} must be in [0, 1], got {threshold}")
        if gamma < 0:
            raise ValueError(f"{option('gamma')} must be >= 0, got {gamma}")
        self.threshold = threshold
        self.gamma = gamma
        self._open = True

    def start_round(self, context_length: int) -> None:
        self._open = True

    def admit(self, position: int, confidence: float | None) -> bool:
        if not self._open or position > self.gamma:
            self._open = False
            return False
        if confidence is None:
            raise MinisparkError(NO_CONFIDENCE.format(mode=LengthMode.THRESHOLD.value))
        self._open = _check_confidence(confidence, f"ThresholdLength position {position}") >= (
            self.threshold
        )
        return self._open


class LengthMode(enum.StrEnum):
    """How a round's proposal length is chosen (the CLI's length-policy choice)."""

    FIXED = "fixed"
    THRESHOLD = "threshold"
    SCHEDULE = "schedule"
    TREE = "tree"


def make_length_policy(
    mode: LengthMode | str,
    gamma: int,
    *,
    has_confidence: bool,
    threshold: float | None = None,
    sps_table: SPSTable | None = None,
    calibration: Calibration | None = None,
    envelope: bool = True,
    tree_drafts: int = DEFAULT_TREE_DRAFTS,
) -> LengthPolicy | TreePolicy:
    """Build the policy for ``mode``; refuses confidence-based modes for drafters without a head; ``tree``
    is a :class:`~minispark.serving.draft_tree.TreePolicy` of at most ``tree_drafts`` nodes with the n-gram lookup
    as a branch.

    There is deliberately no silent fallback from ``schedule``/``threshold`` to ``fixed``: the
    user asked for adaptive lengths, and quietly proposing γ tokens would change the measurement.
    """
    mode = LengthMode(mode)
    if mode is LengthMode.FIXED:
        return FixedLength(gamma)
    if mode is LengthMode.TREE:  # confidences where the drafter has a head, draft probabilities where not
        return TreePolicy(gamma, tree_drafts, sps_table, calibration, NgramMatch())
    if not has_confidence:
        raise MinisparkError(NO_CONFIDENCE.format(mode=mode.value))
    if mode is LengthMode.THRESHOLD:
        if threshold is None:
            raise MinisparkError("length policy 'threshold' needs a threshold (e.g. 0.5)")
        return ThresholdLength(threshold, gamma)
    if sps_table is None:
        raise MinisparkError("length policy 'schedule' needs an SPS table (see minispark.serving.sps)")
    return ScheduledLength(sps_table, gamma, calibration, envelope)


def scheduler_cost_us(
    rounds: int = 20_000, gamma: int = DEFAULT_GAMMA, requests: int = 8, seed: int = 0
) -> dict:
    """Micro-benchmark of scheduler overhead, in microseconds (for a bench command, not a test).

    ``admit_us``: one ``ScheduledLength.admit`` call; ``round_us``: ``start_round`` plus the admits
    of one round at a fixed context; ``algorithm1_us``: one call of :func:`algorithm1` with
    ``requests`` requests of ``gamma`` positions.
    """
    rng = random.Random(seed)
    # A nearly flat curve and high confidences, so most rounds admit many positions.
    table = SPSTable.from_inline([1.0 / (1.0 + 0.02 * n) for n in range(gamma + 1)])
    policy = ScheduledLength(table, gamma)
    rows = [[rng.uniform(0.7, 1.0) for _ in range(gamma)] for _ in range(256)]

    calls = 0

    def confidence(k: int) -> float:
        nonlocal calls
        calls += 1
        return row[k - 1]

    start = time.perf_counter()
    for i in range(rounds):
        row = rows[i % len(rows)]
        scheduled_length(policy, confidence, gamma, 0)
    elapsed = time.perf_counter() - start

    batches = [rows[i : i + requests] for i in range(0, len(rows) - requests + 1, requests)]
    repeats = max(1, rounds // 20)
    start_a1 = time.perf_counter()
    for i in range(repeats):
        algorithm1(batches[i % len(batches)], lambda b: 1.0 / (1.0 + 0.02 * b))
    elapsed_a1 = time.perf_counter() - start_a1
    return {
        "admit_us": 1e6 * elapsed / calls,
        "round_us": 1e6 * elapsed / rounds,
        "admits_per_round": calls / rounds,
        "algorithm1_us": 1e6 * elapsed_a1 / repeats,
        "algorithm1_requests": requests,
        "gamma": gamma,
    }


if __name__ == "__main__":
    for name, value in scheduler_cost_us().items():
        print(f"{name:>20}: {value:.3f}" if isinstance(value, float) else f"{name:>20}: {value}")
