"""Algorithm 1, multi-request form, as served (``batch_schedule.admit_across``): the same lengths as the
verbatim reference ``schedule.algorithm1`` on random confidences and curves (early stop included), never
asking for c_{r,j+1} before (r, j) is admitted, and a verify budget per request that shrinks with R.

    .venv/bin/python -m pytest -q tests/serving/test_batch_schedule.py
"""

from __future__ import annotations

import random

from minispark.serving.batch_schedule import admit_across, batch_sps
from minispark.serving.schedule import algorithm1
from minispark.serving.sps import SPSTable


def lazy(rows: list[list[float]], asked: list[list[int]]):
    def confidence(r: int):
        def c(j: int) -> float:
            asked[r].append(j)
            return rows[r][j - 1]
        return c
    return [confidence(r) for r in range(len(rows))]


def test_equals_algorithm1_and_asks_only_after_admission() -> None:
    rng = random.Random(0)
    stops = 0
    for trial in range(400):
        num = rng.randint(1, 6)
        rows = [[rng.choice([0.0, 1.0, rng.random(), rng.uniform(0.8, 1.0)]) for _ in range(rng.randint(0, 7))]
                for _ in range(num)]
        slope = rng.uniform(0.0, 0.3)
        curve = lambda b, s=slope: 1.0 / (1.0 + s * (b - 1))  # noqa: E731
        asked: list[list[int]] = [[] for _ in rows]
        lengths = admit_across(lazy(rows, asked), [len(row) for row in rows], curve)
        assert lengths == algorithm1(rows, curve), (rows, slope)
        for r, row in enumerate(rows):
            # c_{r,1} is always asked (the pool's first candidate), c_{r,j+1} only once (r, j) was admitted
            assert asked[r] == list(range(1, min(lengths[r] + 1, len(row)) + 1))[: len(asked[r])]
            assert len(asked[r]) <= lengths[r] + 1
        stops += sum(lengths) < sum(len(row) for row in rows)
    assert stops > 50  # the early stop was exercised


def test_appendix_a_curve_admits_nothing() -> None:
    """The §9 counterexample as one request: Θ(1) = 0.9 < Θ(0) = 1 stops before x_1 exists."""
    asked: list[list[int]] = [[]]
    assert admit_across(lazy([[0.8, 0.9]], asked), [2], lambda b: (1.0, 0.5, 0.45)[b - 1]) == [0]
    assert asked == [[1]]


def test_budget_per_request_shrinks_with_more_requests() -> None:
    table = SPSTable.from_inline([1.0 / (1.0 + 0.08 * n) for n in range(16)])
    rows = [0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5]
    budgets = []
    for num in (1, 2, 4, 8):
        sps = batch_sps(table, num, 8)
        lengths = admit_across(lazy([rows] * num, [[] for _ in range(num)]), [7] * num, sps, padded=True)
        budgets.append(1 + sum(lengths) / num)
    assert budgets == sorted(budgets, reverse=True) and budgets[0] > budgets[-1]


def test_padded_admission_prices_the_widest_row() -> None:
    """Padded: a position within the current width rides free, one past it widens every row. Widths 1/2/3
    cost 1/1.3/3 s: request 0's first draft (0.9) pays for width 2, request 1's first (0.8) then fits in it
    for free, and the next candidate, request 1's second (0.8·0.9), would need width 3: the early stop."""
    step = {1: 1.0, 2: 1.3, 3: 3.0}
    rows = [[0.9, 0.5], [0.8, 0.9]]
    assert admit_across(lazy(rows, [[], []]), [2, 2], lambda w: 1.0 / step[w], padded=True) == [1, 1]
    # Priced packed on the same curve (B tokens: 2 anchors cost 1.3 s, a third token 3 s), nothing pays.
    assert admit_across(lazy(rows, [[], []]), [2, 2], lambda b: 1.0 / step[b]) == [0, 0]
    # A block verified whole beside these ones sets the width: everything up to it is free.
    assert admit_across(lazy(rows, [[], []]), [2, 2], lambda w: 1.0 / step[w], padded=True, min_width=3) == [2, 2]


def test_batch_sps_without_a_grid_prices_r_times_w_tokens_of_one_sequence() -> None:
    table = SPSTable.from_inline([1.0, 0.5, 0.25])  # 1, 2, 4 seconds per step of 1, 2, 3 tokens
    sps = batch_sps(table, 2, 3, envelope=False)  # 2, 4, 6 tokens: 2 s, then extrapolated 2 s per token
    assert [round(1 / sps(w), 6) for w in (1, 2, 3)] == [2.0, 6.0, 10.0]
