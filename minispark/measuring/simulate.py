"""Scheduler simulator (design notes §15) and the Appendix A counterexample as a Monte Carlo (§9).

:func:`theta_table` chains per-position confidences c_k into survivals a_k, evaluates
Θ(ℓ) = (1 + Σ_{j≤ℓ} a_j) · SPS(1 + ℓ) for every ℓ, and reports the causal greedy choice (stop at
the first drop, :class:`~minispark.serving.schedule.ScheduledLength` on the raw table), the same rule on
the table's monotone envelope (the default scheduler: it plans with the best rate of any verify of
≥ 1 + ℓ tokens and pads the verify to the size that reaches it), and what a retrospective scheduler
that looks at every Θ(ℓ) before committing would pick (the global argmax). Each choice's
throughput is scored on the raw table, i.e. at the cost the verify really pays.

:func:`appendix_a` shows why the difference matters. Vocabulary {A, B}, target p_t = (0.7, 0.3),
draft p_d = (0.5, 0.5), SPS = 1.0 / 0.5 / 0.45 for 1 / 2 / 3 tokens, c_1 = 0.8 (so a_1 = 0.8), and
a second-position confidence that depends on the realised x_1:

    c_2 = 0.9 after x_1 = A:  Θ(2) = (1 + 0.8 + 0.72) · 0.45 = 1.134 > Θ(0) = 1 → peeking: ℓ = 2
    c_2 = 0.1 after x_1 = B:  Θ(2) = (1 + 0.8 + 0.08) · 0.45 = 0.846 < Θ(0) = 1 → peeking: ℓ = 0

(Any c_2 above 0.528 after A and below it after B gives the same split.) The causal scheduler sees
Θ(1) = 0.9 < Θ(0) = 1.0 before x_1 exists and stops at ℓ = 0 every time: its output is p_t. The
peeking scheduler verifies x_1 only when x_1 = A, which the target always accepts
(min(1, 0.7/0.5) = 1), so Pr(Y = A) = 0.5 + 0.5 · 0.7 = 0.85. A third run, ``fixed`` (γ = 2 every
round, x_1 always verified), exercises the rejection branch: B is rejected with probability 0.4 and
replaced by a draw from norm(max(0, p_t − p_d)) = A, which again gives exactly p_t.

    python -m minispark.measuring.simulate 0.9 0.8 0.6 --sps 1.0 0.9 0.85 0.8   # Θ table for one round
    minispark simulate --conf 0.9,0.9,0.9 --sps-inline 1.0,0.5,0.8,0.7  # jagged: envelope wins
    python -m minispark.measuring.simulate --appendix-a                         # the Monte Carlo
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from minispark.core.defaults import APPENDIX_A_DRAWS
from minispark.core.errors import MinisparkError, option
from minispark.serving.schedule import FixedLength, LengthPolicy, ScheduledLength, scheduled_length
from minispark.serving.sps import SPSTable, monotone_envelope

if TYPE_CHECKING:
    from rich.table import Table

VOCAB = ("A", "B")
P_TARGET = (0.7, 0.3)
P_DRAFT = (0.5, 0.5)
SPS_CURVE = (1.0, 0.5, 0.45)
C1 = 0.8
#: c_2 as a function of the realised x_1 (index into VOCAB); see the module docstring.
C2_AFTER = (0.9, 0.1)


def _as_table(sps: SPSTable | Sequence[float]) -> SPSTable:
    return sps if isinstance(sps, SPSTable) else SPSTable.from_inline(list(sps))


def theta_curve(confidences: Sequence[float], sps_curve: Sequence[float]) -> list[float]:
    """Θ(ℓ) for ℓ = 0..γ, where ``sps_curve[i]`` is SPS for i + 1 tokens."""
    thetas = [sps_curve[0]]
    survival, expected = 1.0, 1.0
    for ell, c in enumerate(confidences, start=1):
        survival *= c
        expected += survival
        thetas.append(expected * sps_curve[ell])
    return thetas


def peeking_length(confidences: Sequence[float], sps_curve: Sequence[float]) -> int:
    """The retrospective choice: argmax of Θ(ℓ) over all ℓ (first maximum on ties), no break.

    Not lossless when c_{k+1} depends on x_k (§9); here only to show what it would pick.
    """
    thetas = theta_curve(confidences, sps_curve)
    return max(range(len(thetas)), key=lambda ell: (thetas[ell], -ell))


def causal_length(
    policy: LengthPolicy, confidence_after: Callable[[int], float | None], context_length: int = 0
) -> int:
    """Run one round of ``policy`` the way the engine does: ask about position k, then draw x_k.

    ``confidence_after(k)`` gives c_k (computed from x_1..x_{k-1}); returns the admitted length.
    """
    return scheduled_length(policy, confidence_after, policy.gamma, context_length)


def theta_table(
    confidences: Sequence[float], sps: SPSTable | Sequence[float], context_length: int = 0,
    source: str = "the SPS table",
) -> dict:
    """Θ(ℓ) for every ℓ and each scheduler's choice, as a plain dict (for ``--json``).

    ``causal`` is the raw-table rule, ``envelope`` the verified length of the envelope rule (its
    scheduled length is ``envelope_admitted``; more when the verify is padded), ``peeking`` the
    global argmax of the raw Θ. ``throughput`` scores every choice on the raw table. ``source`` names where the
    table came from in an error (``--sps-inline``: "the SPS table" sent the user looking for a file).
    """
    confidences = [float(c) for c in confidences]
    table = _as_table(sps)
    if len(confidences) + 1 > max(table.tokens):  # the table's own error would advise --gamma, which this lacks
        raise MinisparkError(f"{option('conf')}: {len(confidences)} draft positions need steps per second for up to "
                             f"{len(confidences) + 1} tokens, but {source} gives them for 1..{max(table.tokens)}; "
                             "give fewer confidences or a longer table")
    curve = table.curve(len(confidences) + 1, context_length)
    envelope_curve, _ = monotone_envelope(curve)
    thetas = theta_curve(confidences, curve)
    rows, survival, expected = [], 1.0, 1.0
    for ell, theta in enumerate(thetas):
        if ell:
            survival *= confidences[ell - 1]
            expected += survival
        rows.append(
            {
                "length": ell,
                "survival": survival if ell else None,
                "expected_tokens": expected,
                "sps": curve[ell],
                "sps_envelope": envelope_curve[ell],
                "theta": theta,
            }
        )

    def confidence_after(k: int) -> float | None:
        return confidences[k - 1] if k <= len(confidences) else None

    causal = causal_length(
        ScheduledLength(table, len(confidences), envelope=False), confidence_after, context_length
    )
    envelope_policy = ScheduledLength(table, len(confidences), envelope=True)
    envelope = causal_length(envelope_policy, confidence_after, context_length)
    peeking = peeking_length(confidences, curve)
    choices = {"causal": causal, "envelope": envelope, "peeking": peeking}
    return {
        "confidences": confidences,
        "rows": rows,
        **choices,
        "envelope_admitted": envelope_policy.admitted,
        "throughput": {name: thetas[ell] for name, ell in choices.items()},
        "differs": causal != peeking,
    }


def _figure(value: float) -> str:
    """Four decimals, or four significant digits below 0.001 (a table of 1e-6 steps/s showed 0.0000)."""
    return f"{value:.4f}" if value == 0 or abs(value) >= 1e-3 else f"{value:.4g}"


def render_theta_table(result: dict) -> Table:
    from rich.table import Table

    score = result["throughput"]
    table = Table(
        title=f"Θ(ℓ): causal ℓ={result['causal']} (Θ {_figure(score['causal'])}), envelope "
        f"ℓ={result['envelope']} (Θ {_figure(score['envelope'])}), peeking ℓ={result['peeking']} "
        f"(Θ {_figure(score['peeking'])}); Θ on the raw table"
    )
    for name in ("ℓ", "a_ℓ", "τ = 1+Σa", "SPS(1+ℓ)", "envelope SPS", "Θ(ℓ)", ""):
        table.add_column(name, justify="right" if name else "left")
    for row in result["rows"]:
        marks = [name for name in ("causal", "envelope", "peeking") if result[name] == row["length"]]
        table.add_row(
            str(row["length"]),
            "" if row["survival"] is None else f"{row['survival']:.4f}",
            f"{row['expected_tokens']:.4f}",
            _figure(row["sps"]),
            _figure(row["sps_envelope"]),
            _figure(row["theta"]),
            " ".join(f"← {m}" for m in marks),
        )
    return table


# -- Appendix A -----------------------------------------------------------------------------------


def verify_first_token(
    p_target: np.ndarray,
    p_draft: np.ndarray,
    drafted: np.ndarray,
    verified: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """The first committed token of many independent rounds, by speculative rejection sampling.

    ``drafted`` (N,) is x_1 per round; ``verified`` (N,) bool whether the round verifies x_1. An
    unverified round emits a fresh draw from p_t (the anchor's bonus token). A verified x_1 is
    accepted with probability min(1, p_t(x)/p_d(x)); on rejection the token is drawn from the
    residual norm(max(0, p_t − p_d)).
    """
    n = drafted.shape[0]
    ratio = p_target[drafted] / p_draft[drafted]  # (N,)
    accepted = verified & (rng.random(n) < np.minimum(1.0, ratio))
    rejected = verified & ~accepted
    out = np.where(accepted, drafted, -1)
    out[~verified] = rng.choice(p_target.size, size=int((~verified).sum()), p=p_target)
    if rejected.any():
        residual = np.maximum(p_target - p_draft, 0.0)
        out[rejected] = rng.choice(
            p_target.size, size=int(rejected.sum()), p=residual / residual.sum()
        )
    return out


def appendix_a(draws: int = APPENDIX_A_DRAWS, seed: int = 0) -> dict:
    """Monte Carlo of §9: output distribution of the first token under each scheduler.

    Returns ``{"causal": [Pr A, Pr B], "peeking": [...], "fixed": [...], "target": [0.7, 0.3],
    "draws": n, "seed": s}``. Each scheduler's length is a deterministic function of what it has
    seen; it is worked out once per possible x_1 (the causal one decides before x_1 is drawn), then
    applied to ``draws`` vectorised rounds.
    """
    rng = np.random.default_rng(seed)
    p_t, p_d = np.array(P_TARGET), np.array(P_DRAFT)
    table = SPSTable.from_inline(list(SPS_CURVE))

    def confidences_given(x1: int) -> Callable[[int], float]:
        return lambda k: C1 if k == 1 else C2_AFTER[x1]

    lengths = {
        "causal": [
            causal_length(ScheduledLength(table, 2), confidences_given(x)) for x in range(2)
        ],
        "peeking": [peeking_length([C1, C2_AFTER[x]], SPS_CURVE) for x in range(2)],
        "fixed": [causal_length(FixedLength(2), confidences_given(x)) for x in range(2)],
    }
    result: dict = {}
    for name, by_x1 in lengths.items():
        drafted = rng.choice(2, size=draws, p=p_d)  # (N,) x_1 ~ p_d
        verified = np.array(by_x1)[drafted] >= 1
        first = verify_first_token(p_t, p_d, drafted, verified, rng)
        result[name] = (np.bincount(first, minlength=2) / draws).tolist()
    return {**result, "target": list(P_TARGET), "draws": draws, "seed": seed}


def render_appendix_a(result: dict) -> Table:
    from rich.table import Table

    table = Table(title=f"Appendix A: first-token distribution over {result['draws']:,} rounds")
    for name in ("scheduler", "Pr(A)", "Pr(B)", "TV to target"):
        table.add_column(name, justify="left" if name == "scheduler" else "right")
    target = result["target"]
    for name in ("target", "causal", "peeking", "fixed"):
        p = result[name]
        tv = 0.5 * sum(abs(a - b) for a, b in zip(p, target))
        table.add_row(name, f"{p[0]:.4f}", f"{p[1]:.4f}", f"{tv:.4f}")
    return table


if __name__ == "__main__":
    from minispark.core.console import make_console

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("confidences", nargs="*", type=float, default=[C1, C2_AFTER[0]])
    parser.add_argument("--sps", nargs="+", type=float, default=list(SPS_CURVE))
    parser.add_argument("--appendix-a", action="store_true")
    args = parser.parse_args()
    console = make_console()
    if args.appendix_a:
        console.print(render_appendix_a(appendix_a()))
    else:
        console.print(render_theta_table(theta_table(args.confidences, args.sps)))
