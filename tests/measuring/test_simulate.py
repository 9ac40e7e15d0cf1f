"""The §15 simulator and the Appendix A Monte Carlo (§9): causal is lossless, peeking is not."""

import io
import math

import numpy as np
import pytest

from minispark.serving.schedule import ScheduledLength
from minispark.measuring.simulate import (
    C1,
    C2_AFTER,
    P_TARGET,
    SPS_CURVE,
    appendix_a,
    causal_length,
    peeking_length,
    render_appendix_a,
    render_theta_table,
    theta_curve,
    theta_table,
    verify_first_token,
)
from minispark.serving.sps import SPSTable

DRAWS = 100_000


def matches_target(p, target, draws, z=5.0):
    """Every probability within z binomial standard errors of the target (false alarm ~1e-6)."""
    return all(abs(a - b) <= z * math.sqrt(b * (1 - b) / draws) for a, b in zip(p, target))


def test_theta_table_appendix_a_numbers():
    result = theta_table([C1, C2_AFTER[0]], SPS_CURVE)
    assert [row["theta"] for row in result["rows"]] == pytest.approx([1.0, 0.9, 1.134])
    assert result["causal"] == 0 and result["peeking"] == 2 and result["differs"]
    assert theta_table([C1, C2_AFTER[1]], SPS_CURVE)["peeking"] == 0


def test_tiny_steps_per_second_keep_their_digits():
    """An SPS of 1e-6 (a slow table, or one in other units) showed as 0.0000 for SPS and Θ alike."""
    import io

    from rich.console import Console

    console = Console(file=io.StringIO(), width=200)
    console.print(render_theta_table(theta_table([0.5], [1e-6, 1e-6])))
    out = console.file.getvalue()
    assert "1e-06" in out and "1.5e-06" in out and "0.0000 " not in out


def test_theta_table_unimodal_curve_agrees():
    result = theta_table([0.9, 0.8, 0.6], [1.0, 0.9, 0.85, 0.8])
    assert result["causal"] == result["peeking"] == 3
    assert theta_curve([0.9, 0.8, 0.6], [1.0, 0.9, 0.85, 0.8]) == pytest.approx(
        [1.0, 1.71, 2.227, 2.4416]
    )


def test_envelope_strictly_beats_the_raw_table_on_a_jagged_curve():
    # Verifying 2 tokens is slower than 3 or 4 (the CPU GEMM-shape effect): the raw rule stops at
    # the bump (Θ(1) = 0.95 < Θ(0) = 1) while the envelope sees that 3 tokens cost only 1.25 steps.
    result = theta_table([0.9, 0.9, 0.9], [1.0, 0.5, 0.8, 0.7])
    assert result["causal"] == 0 and result["envelope"] == result["envelope_admitted"] == 3
    assert result["throughput"]["envelope"] == pytest.approx(3.439 * 0.7)
    assert result["throughput"]["envelope"] > 2 * result["throughput"]["causal"]
    assert [row["sps_envelope"] for row in result["rows"]] == [1.0, 0.8, 0.8, 0.7]
    # on a monotone curve the envelope is the curve: same choice as the raw rule
    monotone = theta_table([0.9, 0.8, 0.6], [1.0, 0.9, 0.85, 0.8])
    assert monotone["envelope"] == monotone["causal"] == 3


def test_envelope_is_lossless_when_it_pads_through_x1():
    # A jagged curve whose envelope pads: with c_1 = 0 (nothing scheduled) the verify still sends
    # x_1 and x_2 because 3 tokens are the cheapest verify. Whether x_1 is sent is decided from c_1
    # alone; c_2 depends on the realised x_1 and is never read. First token must follow p_t.
    table = SPSTable.from_inline([0.8, 0.5, 0.9])
    rng = np.random.default_rng(3)
    p_t, p_d = np.array(P_TARGET), np.array([0.5, 0.5])
    lengths = [
        causal_length(ScheduledLength(table, 2), lambda k, x=x: 0.0 if k == 1 else C2_AFTER[x])
        for x in range(2)
    ]
    assert lengths == [2, 2]  # padded, whatever x_1 is
    drafted = rng.choice(2, size=DRAWS, p=p_d)
    first = verify_first_token(p_t, p_d, drafted, np.array(lengths)[drafted] >= 1, rng)
    assert matches_target(np.bincount(first, minlength=2) / DRAWS, P_TARGET, DRAWS)


def test_chosen_c2_splits_the_peeking_scheduler_on_x1():
    # peeking verifies x1 only when x1 = A; the causal scheduler decides before x1 exists and
    # never asks for c2 at all (asking would raise here).
    assert [peeking_length([C1, c2], SPS_CURVE) for c2 in C2_AFTER] == [2, 0]

    def confidence_after(k):
        if k > 1:
            raise AssertionError("the causal scheduler looked at c2")
        return C1

    assert (
        causal_length(ScheduledLength(SPSTable.from_inline(list(SPS_CURVE)), 2), confidence_after)
        == 0
    )


def test_appendix_a_causal_is_lossless_and_peeking_is_not():
    result = appendix_a(draws=DRAWS, seed=0)
    assert set(result) >= {"causal", "peeking"}
    assert matches_target(result["causal"], P_TARGET, DRAWS)
    assert matches_target(result["fixed"], P_TARGET, DRAWS)  # exercises the residual branch
    # the same test rejects the peeking scheduler, whose output is (0.85, 0.15)
    assert not matches_target(result["peeking"], P_TARGET, DRAWS)
    assert matches_target(result["peeking"], (0.85, 0.15), DRAWS)


def test_rejection_sampling_reproduces_target_on_a_larger_vocab():
    rng = np.random.default_rng(0)
    vocab = 6
    p_t = rng.dirichlet(np.ones(vocab))
    p_d = rng.dirichlet(np.ones(vocab))
    drafted = rng.choice(vocab, size=DRAWS, p=p_d)
    verified = rng.random(DRAWS) < 0.7  # any rule independent of x1 is lossless
    out = verify_first_token(p_t, p_d, drafted, verified, rng)
    assert matches_target(np.bincount(out, minlength=vocab) / DRAWS, p_t, DRAWS)
    # negative control: verifying only tokens the target likes more than the draft is biased
    biased = verify_first_token(p_t, p_d, drafted, p_t[drafted] > p_d[drafted], rng)
    assert not matches_target(np.bincount(biased, minlength=vocab) / DRAWS, p_t, DRAWS)


def test_renderers():
    from rich.console import Console

    console = Console(file=io.StringIO(), width=100)
    console.print(render_theta_table(theta_table([C1, C2_AFTER[0]], SPS_CURVE)))
    console.print(render_appendix_a(appendix_a(draws=2000, seed=1)))
    text = console.file.getvalue()
    assert "← causal" in text and "← peeking" in text and "envelope" in text and "peeking" in text and "1.1340" in text
