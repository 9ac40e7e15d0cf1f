"""Algorithm 1 in its multi-request form (design notes §8): admit draft positions across R requests.

R requests are in flight; request r's draft block has per-position confidences c_{r,j} (the chance x_{r,j}
survives given x_{r,<j} did), so its prefix survival is a_{r,j} = ∏_{i≤j} c_{r,i}. One verify forward
carries B = Σ_r (1 + ℓ_r) tokens (each anchor is always verified) and yields τ = Σ_r (1 + Σ_{j≤ℓ_r} a_{r,j})
tokens in expectation, at SPS(B) steps per second. :func:`admit_across` visits candidates (r, j) by
survival descending and stops at the first one that does not raise Θ = τ·SPS(B) — the same visit order,
tie rule and early stop as :func:`minispark.serving.schedule.algorithm1` (the verbatim reference), but
**lazily**: the pool is a heap holding each request's next position only, so c_{r,j+1} (which needs the
drawn x_{r,j}) is asked for only after (r, j) was admitted. Every admission decision on x_{r,j} is thus
taken before x_{r,j} exists (non-anticipation, §9), and a block the scheduler cuts short costs no draws.

Why the lazy heap visits the global sorted order: within one request a_{r,j} is non-increasing in j, so
its frontier position is its smallest remaining sort key ``(-a, r, j)``; the heap's minimum over the
frontiers is then the global minimum of what remains.

What a verify of R requests costs depends on its layout. Packed (the reference's model), B = Σ_r (1 + ℓ_r)
tokens. Padded (``batched.batched_step``: R rows right-padded to the widest block), R rows of width
W = max_r (1 + ℓ_r): a candidate within the current width adds expected tokens for free, one past it widens
every row. ``admit_across(..., padded=True)`` prices each candidate by the width it makes; visit order and
early stop are unchanged. :func:`batch_sps` turns an SPS table into that curve for R rows at width 1..W, from the
table's profiled batched grid (``profile --batch-requests``: R sequences × W tokens, what the server runs;
:meth:`~minispark.serving.sps.SPSTable.batched_seconds`).

    .venv/bin/python -m pytest -q tests/serving/test_batch_schedule.py
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from minispark.serving.sps import SPSTable, monotone_envelope

if TYPE_CHECKING:
    from minispark.model.calibration import Calibration


def _check(c: float | None, r: int, j: int) -> float:
    if c is None:
        raise ValueError(f"admit_across: request {r} position {j} has no confidence (a drafter without a "
                         "confidence head is served with fixed lengths)")
    c = float(c)
    if not 0.0 <= c <= 1.0:  # also rejects NaN
        raise ValueError(f"admit_across: request {r} position {j}: confidence must be in [0, 1], got {c}")
    return c


def admit_across(confidence: Sequence[Callable[[int], float | None]], available: Sequence[int],
                 sps: Callable[[int], float], calibration: Calibration | None = None,
                 padded: bool = False, min_width: int = 1) -> list[int]:
    """Scheduled lengths ℓ_1..ℓ_R: Algorithm 1 over R requests, asking ``confidence[r](j)`` lazily.

    ``available[r]`` caps ℓ_r (the block's size and γ); ``sps(B)`` is steps/s for a verify of B tokens
    in total, Σ_r (1 + ℓ_r); when ``padded``, ``sps(W)`` is steps/s for the caller's rows at width
    W = max(``min_width``, max_r (1 + ℓ_r)) (``min_width``: blocks verified whole beside these ones).
    ``calibration`` maps each raw c_{r,j} to σ(logit(c)/T_j) first (as the batch-1 scheduler does).
    ``confidence[r](j)`` is called only for j = ℓ_r + 1 after ℓ_r positions were admitted."""
    num = len(available)
    lengths = [0] * num
    if num == 0:
        return lengths
    survival = [1.0] * num
    frontier: list[tuple[float, int, int]] = []  # (-a_{r,j}, r, j): each request's next candidate

    def push(r: int) -> None:
        j = lengths[r] + 1
        if j > available[r]:
            return
        c = _check(confidence[r](j), r, j)
        if calibration is not None:
            c = calibration.scale(j, c)
        a = survival[r] * c  # the same product, in the same order, as algorithm1's
        if a > 0.0:  # algorithm1 leaves a = 0 out of its pool (and every later a of r is 0 too)
            heapq.heappush(frontier, (-a, r, j))

    for r in range(num):
        push(r)
    packed, width = num, min_width  # tokens verified, packed; the widest row, anchor included
    expected = float(num)  # τ*: each anchor yields one token (bonus or correction)
    best = expected * sps(width if padded else packed)
    while frontier:
        neg_survival, r, j = heapq.heappop(frontier)
        size = max(width, j + 1) if padded else packed + 1
        expected += -neg_survival
        theta = expected * sps(size)
        if not theta > best:
            break  # the losslessness rule: never look past the first drop
        best = theta
        packed, width = packed + 1, max(width, j + 1)
        lengths[r], survival[r] = j, -neg_survival
        push(r)
    return lengths


def batch_sps(table: SPSTable, requests: int, width: int, context_length: int = 0,
              envelope: bool = True) -> Callable[[int], float]:
    """SPS(w) of a padded verify of ``requests`` rows at widths w = 1..``width`` (``admit_across(padded=True)``).

    Step times come from :meth:`SPSTable.batched_seconds` (its profiled grid, or R·w tokens of one sequence
    for a table without one). With ``envelope`` the curve is planned against its monotone envelope over w
    (the best rate of any verify at least that wide), so a jagged CPU curve does not stop admission at its
    first bump; the verify is not widened to that size, so the plan is optimistic there — admission
    decisions still depend only on confidences known before each draw, so it stays lossless."""
    curve = [1.0 / table.batched_seconds(requests, w, context_length) for w in range(1, width + 1)]
    if envelope:
        curve = monotone_envelope(curve)[0]

    def sps(w: int) -> float:
        return curve[min(w, width) - 1]

    return sps
