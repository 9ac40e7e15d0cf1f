"""Algorithm 1 on hand-worked cases, and the batch-1 policies against it."""

import random

import pytest

from minispark.model.calibration import Calibration
from minispark.core.errors import MinisparkError
from minispark.serving.schedule import (
    FixedLength,
    LengthMode,
    ScheduledLength,
    ThresholdLength,
    algorithm1,
    make_length_policy,
    scheduled_length,
    scheduler_cost_us,
)
from minispark.serving.sps import SPSTable, monotone_envelope


def inline(curve):
    """sps(B) for a list where entry i is SPS for i + 1 tokens."""
    return lambda batch: curve[batch - 1]


def run_policy(policy, confidences, context_length=0):
    """Drive a policy like the engine's schedule step: ask position k, stop at the first False."""
    return scheduled_length(policy, lambda k: confidences[k - 1], len(confidences), context_length)


def reference_algorithm1(confidences, sps):
    """Brute force: admit the top K of the (−a, r, j) order, K = first K whose successor drops Θ."""
    pool = []
    for r, row in enumerate(confidences):
        a = 1.0
        for j, c in enumerate(row, start=1):
            a *= c
            if a > 0:
                pool.append((-a, r, j))
    pool.sort()
    R = len(confidences)

    def theta(k):
        return (R + sum(-p[0] for p in pool[:k])) * sps(R + k)

    k = 0
    while k < len(pool) and theta(k + 1) > theta(k):
        k += 1
    lengths = [0] * R
    for _, r, j in pool[:k]:
        assert j == lengths[r] + 1, "a request's positions must be admitted in prefix order"
        lengths[r] = j
    return lengths


def test_appendix_a_numbers_return_zero():
    # §9: a1 = 0.8, SPS 1.0/0.5/0.45: Θ(1) = 0.9 < Θ(0) = 1.0, so ℓ = 0 whatever c2 is —
    # even c2 = 0.9, where Θ(2) = 1.134 would beat Θ(0).
    sps = inline([1.0, 0.5, 0.45])
    assert algorithm1([[0.8, 0.9]], sps) == [0]
    assert algorithm1([[0.8, 0.1]], sps) == [0]


def test_single_request_hand_worked():
    # Θ = 1.0, 1.9·0.9 = 1.71, 2.62·0.85 = 2.227, 3.052·0.8 = 2.4416 (all rising) → ℓ = 3
    assert algorithm1([[0.9, 0.8, 0.6]], inline([1.0, 0.9, 0.85, 0.8])) == [3]
    # same confidences on a steeper curve: 1.71 → 2.62·0.6 = 1.572 drops → ℓ = 1
    assert algorithm1([[0.9, 0.8, 0.6]], inline([1.0, 0.9, 0.6, 0.55])) == [1]
    # a = 0 is never admitted, even on a curve that rewards extra tokens
    assert algorithm1([[0.0, 0.9]], inline([1.0, 1.0, 1.0])) == [0]


def test_multi_request_hand_worked():
    # a_A = [0.9, 0.45], a_B = [0.8, 0.56]; pool order A1, B1, B2, A2.
    # SPS(B) = 1/(1 + 0.25(B − 2)): Θ0 = 2·1 = 2; +A1: 2.9·0.8 = 2.32; +B1: 3.7/1.5 = 2.467;
    # +B2: 4.26/1.75 = 2.434 drops → break, even though A2 was never considered.
    def sps(batch):
        return 1.0 / (1.0 + 0.25 * (batch - 2))

    assert algorithm1([[0.9, 0.5], [0.8, 0.7]], sps) == [1, 1]
    assert algorithm1([], sps) == []


def test_multi_request_prefix_order_and_ties():
    # Request 0 has c = 1 after its first token, so a_{0,1} = a_{0,2} = a_{0,3} = 0.9 tie; the
    # tie-break (request, position) must admit them in prefix order, interleaved after B1 (0.95).
    confidences = [[0.9, 1.0, 1.0], [0.95, 0.5]]
    # SPS drops sharply at B = 6: Θ rises for B = 2..5 and drops at B = 6.
    curve = [None, None, 1.0, 0.99, 0.98, 0.97, 0.5, 0.4]  # indexed by B

    def sps(batch):
        return curve[batch]

    # admits B1, A1, A2 → B = 5; A3 takes B to 6 and drops
    assert algorithm1(confidences, sps) == [2, 1] == reference_algorithm1(confidences, sps)


def test_algorithm1_matches_brute_force_on_random_batches():
    rng = random.Random(0)
    for _ in range(300):
        requests = rng.randint(1, 5)
        confidences = [
            [rng.choice([rng.random(), 1.0, 0.0, 0.5]) for _ in range(rng.randint(0, 6))]
            for _ in range(requests)
        ]
        slope = rng.uniform(0.0, 0.3)
        jitter = [rng.uniform(0.9, 1.1) for _ in range(40)]

        def sps(batch):
            return jitter[batch] / (1.0 + slope * batch)

        assert algorithm1(confidences, sps) == reference_algorithm1(confidences, sps)


def test_algorithm1_rejects_bad_confidence():
    with pytest.raises(ValueError, match="request 0 position 2"):
        algorithm1([[0.5, 1.5]], inline([1.0, 1.0, 1.0]))


def test_scheduled_length_agrees_with_algorithm1():
    rng = random.Random(1)
    for _ in range(500):
        gamma = rng.randint(1, 8)
        contexts = [0, 512, 2048]
        # jagged, mostly decreasing step rates at each context
        seconds = [
            [
                (1 + 0.05 * ci) * (1 + rng.uniform(0, 0.3) * n) * rng.uniform(0.9, 1.1)
                for n in range(gamma + 1)
            ]
            for ci in range(len(contexts))
        ]
        table = SPSTable(
            "dev",
            "tgt",
            "bf16",
            "none",
            contexts,
            list(range(1, gamma + 2)),
            seconds,
            seconds,
            [[0.0] * (gamma + 1) for _ in contexts],
            {"torch": "x", "driver": "x", "date": "x"},
        )
        confidences = [
            rng.choice([rng.random(), rng.uniform(0.8, 1.0), 1.0, 0.0]) for _ in range(gamma)
        ]
        context = rng.randint(0, 3000)
        policy = ScheduledLength(table, gamma, envelope=False)
        got = run_policy(policy, confidences, context)
        assert [got] == algorithm1([confidences], lambda b: table.sps(b, context))
        # On the envelope: Algorithm 1 against the envelope decides the admitted prefix n, and the
        # verify is padded to the size the envelope at 1 + n tokens comes from.
        envelope, source = monotone_envelope(table.curve(gamma + 1, context))
        policy = ScheduledLength(table, gamma)
        verified = run_policy(policy, confidences, context)
        [admitted] = algorithm1([confidences], inline(envelope))
        assert (policy.admitted, verified) == (admitted, source[admitted])
        # the padded positions' confidences are never read (None would raise if they were)
        blinded = confidences[: admitted + 1] + [None] * (gamma - admitted - 1)
        assert run_policy(ScheduledLength(table, gamma), blinded, context) == verified


def test_scheduled_length_with_calibration_agrees_with_algorithm1():
    rng = random.Random(2)
    table = SPSTable.from_inline([1.0, 0.95, 0.9, 0.85, 0.8, 0.75])
    calibration = Calibration([2.0, 1.5, 0.7, 3.0, 1.0])
    policy = ScheduledLength(table, 5, calibration)
    for _ in range(200):
        confidences = [rng.random() for _ in range(5)]
        calibrated = [calibration.scale(k, c) for k, c in enumerate(confidences, start=1)]
        assert [run_policy(policy, confidences)] == algorithm1([calibrated], inline(table.curve(6)))


def test_scheduled_length_round_state_and_errors():
    policy = ScheduledLength(SPSTable.from_inline([1.0, 0.95, 0.9]), 2)
    policy.start_round(0)
    assert policy.admit(1, 0.9)
    assert policy.expected_tokens == pytest.approx(1.9)
    with pytest.raises(ValueError, match="in order"):
        policy.admit(3, 0.9)
    policy.start_round(0)
    with pytest.raises(MinisparkError, match="confidence head"):
        policy.admit(1, None)
    # never admits beyond γ
    policy.start_round(0)
    assert [policy.admit(k, 1.0) for k in (1, 2, 3)] == [True, True, False]
    with pytest.raises(MinisparkError, match="covers up to 3 tokens"):
        ScheduledLength(SPSTable.from_inline([1.0, 0.9, 0.8]), 3)
    with pytest.raises(MinisparkError, match="re-run calibration"):
        ScheduledLength(SPSTable.from_inline([1.0] * 6), 5, Calibration([1.0, 1.0]))


def test_envelope_pads_the_verify_to_the_cheaper_size():
    # 1 token costs 1.25, 2 cost 2.5, 3 cost 1.11: the cheapest verify of >= 1 token has 3 tokens.
    table = SPSTable.from_inline([0.8, 0.4, 0.9, 0.45])
    policy = ScheduledLength(table, 3)
    # c_1 = 0: nothing is worth scheduling, but verifying x_1, x_2 too is cheaper than the anchor
    # alone, so they are sent whatever their confidences (here 0 and None: never read).
    policy.start_round(0)
    assert [policy.admit(1, 0.0), policy.admit(2, None), policy.admit(3, 1.0)] == [True, True, False]
    assert policy.admitted == 0
    raw = ScheduledLength(table, 3, envelope=False)
    assert run_policy(raw, [0.0, 1.0, 1.0]) == 0 and run_policy(raw, [0.9, 0.9, 0.9]) == 0
    assert run_policy(policy, [0.9, 0.9, 0.9]) == 2 and policy.admitted == 2  # Θ(3) needs a_3 > τ_2


def test_threshold_length_stops_at_first_low_confidence():
    policy = ThresholdLength(0.7, 4)
    assert run_policy(policy, [0.9, 0.6, 0.8, 0.95]) == 1  # 0.8 after the drop is never admitted
    assert run_policy(policy, [0.7, 0.7, 0.7, 0.7, 0.7]) == 4  # >= threshold; capped at γ
    policy.start_round(0)
    with pytest.raises(MinisparkError, match="confidence head"):
        policy.admit(1, None)
    with pytest.raises(ValueError):
        ThresholdLength(1.5, 4)


def test_make_length_policy():
    table = SPSTable.from_inline([1.0, 0.9, 0.8, 0.7])
    assert isinstance(make_length_policy("fixed", 3, has_confidence=False), FixedLength)
    assert isinstance(
        make_length_policy(LengthMode.THRESHOLD, 3, has_confidence=True, threshold=0.5),
        ThresholdLength,
    )
    scheduled = make_length_policy("schedule", 3, has_confidence=True, sps_table=table)
    assert isinstance(scheduled, ScheduledLength) and scheduled.envelope
    raw = make_length_policy("schedule", 3, has_confidence=True, sps_table=table, envelope=False)
    assert not raw.envelope
    for mode in ("schedule", "threshold"):
        with pytest.raises(MinisparkError, match="no confidence head"):
            make_length_policy(mode, 3, has_confidence=False, threshold=0.5, sps_table=table)
    with pytest.raises(MinisparkError, match="SPS table"):
        make_length_policy("schedule", 3, has_confidence=True)
    with pytest.raises(ValueError):
        make_length_policy("sometimes", 3, has_confidence=True)


def test_scheduler_cost_us_runs():
    cost = scheduler_cost_us(rounds=200)
    assert cost["admit_us"] > 0 and cost["algorithm1_us"] > 0 and cost["admits_per_round"] >= 1
