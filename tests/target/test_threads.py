"""torch's CPU threads beside other processes (``target/threads.py``): the cores others leave free, re-read at
most once an interval between target steps; a fixed count (``minispark --threads``, ``$OMP_NUM_THREADS``) stands.

    .venv/bin/python -m pytest -q tests/target/test_threads.py
"""

from __future__ import annotations

import pytest
import torch

from minispark.core.errors import MinisparkError
from minispark.target.threads import ThreadGovernor, free_cores, others_between


class Accounting:
    """Fake ``read_cpu_times``: others keep ``others`` cores busy while this process uses ``own`` cores."""

    def __init__(self) -> None:
        self.busy = self.mine = self.now = 0.0
        self.others, self.own = 0.0, 2.0
        self.reads = 0

    def advance(self, seconds: float) -> None:
        self.busy += (self.others + self.own) * seconds
        self.mine += self.own * seconds
        self.now += seconds

    def __call__(self) -> tuple[float, float, float]:
        self.reads += 1
        return self.busy, self.mine, self.now


def test_free_cores_leave_whole_cores_to_others() -> None:
    assert [free_cores(2, x) for x in (0.0, 0.4, 0.6, 1.0, 1.4, 1.6, 3.0)] == [2, 2, 1, 1, 1, 1, 1]
    assert [free_cores(8, x) for x in (0.0, 2.2, 2.6)] == [8, 6, 5]
    assert others_between((10.0, 5.0, 100.0), (12.0, 6.0, 101.0)) == pytest.approx(1.0)


def test_governor_follows_the_cores_others_leave_free() -> None:
    clock, chosen = Accounting(), []
    governor = ThreadGovernor(cores=2, interval_s=1.0, reader=clock, set_threads=chosen.append,
                              clock=lambda: clock.now)
    assert governor.threads == 2 and chosen == []  # torch's count as it was
    clock.others = 1.0  # a busy process starts
    clock.advance(0.5)
    assert governor.tick() == 2 and chosen == [] and clock.reads == 1  # not read again within the interval
    clock.advance(0.6)
    assert governor.tick() == 1 and chosen == [1]
    assert "others keep 1.0 of 2 cores busy" in governor.describe()
    clock.advance(1.0)
    assert governor.tick() == 1 and chosen == [1]  # unchanged: not set again
    clock.others = 0.0  # it ends
    clock.advance(1.0)
    assert governor.tick() == 2 and chosen == [1, 2] and governor.describe() == "threads=2 (auto)"


def test_a_reserved_core_lowers_the_ceiling_at_once() -> None:
    """A server leaves a core to its event loop: torch's threads drop now and never rise past the new ceiling;
    with one core, one thread stays."""
    clock, chosen = Accounting(), []
    governor = ThreadGovernor(cores=4, interval_s=1.0, reader=clock, set_threads=chosen.append,
                              clock=lambda: clock.now)
    governor.reserve(1)
    assert governor.threads == 3 and chosen == [3]
    clock.advance(1.1)
    assert governor.tick() == 3 and chosen == [3]  # idle machine: the ceiling, not the 4 cores
    governor.reserve(1)  # a second server on the same target: still one core left, not two
    assert governor.threads == 3 and chosen == [3]
    single = ThreadGovernor(cores=1, reader=clock, set_threads=chosen.append)
    single.reserve(1)
    assert single.threads == 1 and chosen == [3]


def test_without_the_accounting_torch_keeps_its_default() -> None:
    chosen: list[int] = []
    governor = ThreadGovernor(cores=2, reader=lambda: None, set_threads=chosen.append)
    assert not governor.active and governor.tick() == torch.get_num_threads() and chosen == []


def test_a_fixed_count_turns_the_governor_off(target, monkeypatch) -> None:
    from minispark.core.defaults import THREADS_ENV, fixed_threads
    from minispark.target.loading import load_target

    threads = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setenv(THREADS_ENV, "1")
        fixed = load_target(str(target.model_dir))
        assert fixed.threads is None and torch.get_num_threads() == 1 and fixed.threads_line() == "threads=1"
        monkeypatch.delenv(THREADS_ENV)
        assert fixed_threads() is None
        assert load_target(str(target.model_dir)).threads is not None
        monkeypatch.setenv("OMP_NUM_THREADS", "4,2")  # OpenMP's nested form: the outermost count
        assert fixed_threads() == 4
        monkeypatch.setenv("OMP_NUM_THREADS", "two")
        with pytest.raises(MinisparkError, match="OMP_NUM_THREADS: 'two' is not a thread count"):
            fixed_threads()
    finally:
        torch.set_num_threads(threads)


def test_cli_threads_flag_is_checked_at_the_edge() -> None:
    from typer.testing import CliRunner

    from minispark.cli import app

    result = CliRunner().invoke(app, ["--threads", "0", "generate", "--prompt", "hi"])
    assert result.exit_code == 2 and "--threads" in result.output and "not a thread count" in result.output
