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

:func:`batch_sps` turns an SPS table into the SPS(B) curve a batched verify needs: B can exceed the table's
profiled tokens per step (R·(γ+1) = 64 for 8 requests at γ 7, the shipped table profiles 16); past the
last profiled size the step time is extrapolated linearly from the last two sizes (a CPU verify is
compute-bound there, so its cost grows linearly in tokens) — profile ``--max-tokens R·(γ+1)`` to avoid it.

    .venv/bin/python -m pytest -q tests/test_batch_schedule.py
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
                 sps: Callable[[int], float], calibration: Calibration | None = None) -> list[int]:
    """Scheduled lengths ℓ_1..ℓ_R: Algorithm 1 over R requests, asking ``confidence[r](j)`` lazily.

    ``available[r]`` caps ℓ_r (the block's size and γ); ``sps(B)`` is steps/s for a verify of B tokens
    in total; ``calibration`` maps each raw c_{r,j} to σ(logit(c)/T_j) first (as the batch-1 scheduler
    does). ``confidence[r](j)`` is called only for j = ℓ_r + 1 after ℓ_r positions were admitted."""
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
    batch = num
    expected = float(num)  # τ*: each anchor yields one token (bonus or correction)
    best = expected * sps(batch)
    while frontier:
        neg_survival, r, j = heapq.heappop(frontier)
        batch += 1
        expected += -neg_survival
        theta = expected * sps(batch)
        if not theta > best:
            break  # the losslessness rule: never look past the first drop
        best = theta
        lengths[r], survival[r] = j, -neg_survival
        push(r)
    return lengths


def batch_sps(table: SPSTable, max_tokens: int, context_length: int = 0,
              envelope: bool = True) -> Callable[[int], float]:
    """SPS(B) for B = 1..``max_tokens`` total verified tokens at ``context_length``, from ``table``.

    Sizes past the table's last profiled one are extrapolated linearly in step time (see the module
    docstring). With ``envelope`` the curve is planned against its monotone envelope (the best rate of
    any verify of at least B tokens), so a jagged CPU curve does not stop admission at its first bump;
    unlike the batch-1 scheduler the verify is not padded up to that size, so the plan is optimistic
    there — admission decisions still depend on confidences known before each draw, so it stays lossless."""
    top = table.max_tokens
    seconds = [table.step_seconds(min(n, top), context_length) for n in range(1, max_tokens + 1)]
    if max_tokens > top:
        last = table.step_seconds(top, context_length)
        slope = last - table.step_seconds(top - 1, context_length) if top > 1 else last
        slope = max(slope, last / top * 0.5)  # never flatter than half the mean cost per token
        seconds = seconds[:top] + [last + slope * (n - top) for n in range(top + 1, max_tokens + 1)]
    curve = [1.0 / s for s in seconds]  # curve[i] = SPS(i + 1)
    if envelope:
        curve = monotone_envelope(curve)[0]

    def sps(batch: int) -> float:
        return curve[min(batch, max_tokens) - 1]

    return sps
