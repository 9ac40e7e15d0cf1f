"""torch's CPU threads beside other processes: as many as the cores others leave free, re-read as decoding goes.

OpenMP's workers spin while they wait for each other. On a machine where another process keeps a core busy,
two threads on two cores take turns with it and a target step stalls: measured on a 2-core EPYC
(``benchmarks/busy_threads.py``), target-only decoding at 2 threads fell from 18–20 tok/s idle to 5.5 beside one
busy process, where 1 thread kept 12–15. :class:`ThreadGovernor` reads, from ``/proc/stat``'s CPU-time
accounting, how many cores *other* processes used since its last reading (at most once a second, between target
steps) and sets torch's threads to the cores left, at least one, and never more than torch ran with when it
started (its default, all cores, or what the program set). ``--threads N`` (a fixed count) turns it off.

    .venv/bin/python -m pytest -q tests/target/test_threads.py
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import torch

#: Cores others may keep busy, beyond whole cores, before a thread is given up for them: half a core.
BUSY_SLACK = 0.5
#: Seconds between two readings: a step of a small target is milliseconds, the accounting ticks at 100 Hz.
INTERVAL_S = 1.0

CpuTimes = tuple[float, float, float]


def read_cpu_times() -> CpuTimes | None:
    """(CPU-seconds all cores spent busy, CPU-seconds of this process, monotonic seconds), or None
    where ``/proc/stat`` is not readable. Two readings give what *other* processes used in between,
    exactly, unlike the 1-minute load average, which still carries this process's own earlier work."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    return busy, time.process_time(), time.monotonic()


def others_between(first: CpuTimes, last: CpuTimes) -> float:
    """Cores other processes kept busy between two :func:`read_cpu_times` readings."""
    elapsed = last[2] - first[2]
    if elapsed <= 0:
        return 0.0
    return max(0.0, ((last[0] - first[0]) - (last[1] - first[1])) / elapsed)


def free_cores(cores: int, others: float) -> int:
    """Threads for ``cores`` when others keep ``others`` cores busy: the cores they leave, at least one."""
    taken = int(others + 1.0 - BUSY_SLACK) if others > BUSY_SLACK else 0  # 0.6 → 1 core, 1.4 → 1, 1.6 → 2
    return max(1, cores - taken)


class ThreadGovernor:
    """Keeps torch's thread count at the cores other processes leave free (see the module docstring).

    ``tick()`` is called before each target forward; only when ``interval_s`` has passed on ``clock`` since the
    last reading does it read the accounting (``/proc/stat``: not once a forward), and it sets the threads when the
    count changes. ``reader``, ``clock`` and ``set_threads`` are for tests.
    """

    def __init__(self, cores: int | None = None, interval_s: float = INTERVAL_S,
                 reader: Callable[[], CpuTimes | None] = read_cpu_times,
                 set_threads: Callable[[int], None] = torch.set_num_threads,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.started_with = cores or torch.get_num_threads()  # torch's count when it starts
        self.cores = self.started_with  # the most it uses
        self.interval_s, self.reader, self.set_threads, self.clock = interval_s, reader, set_threads, clock
        self.last = reader()
        self.threads = self.cores
        self.others = 0.0

    @property
    def active(self) -> bool:
        """False where the accounting is unreadable (then torch's own default stands)."""
        return self.last is not None

    def tick(self) -> int:
        """The thread count, after a fresh reading when one is due."""
        if self.last is None:
            return torch.get_num_threads()
        if self.clock() - self.last[2] < self.interval_s:
            return self.threads
        now = self.reader()
        if now is None:
            return self.threads
        self.others, self.last = others_between(self.last, now), now
        threads = free_cores(self.cores, self.others)
        if threads != self.threads:
            self.threads = threads
            self.set_threads(threads)
        return self.threads

    def reserve(self, cores: int) -> None:
        """Leave ``cores`` of the cores torch started with to this process's other threads (a server's event loop):
        torch's threads drop now if they were above that, and never rise past it (at least one stays). Asked again,
        it replaces the earlier reservation (a process serving twice still leaves one core)."""
        self.cores = max(1, self.started_with - cores)
        if self.threads > self.cores:
            self.threads = self.cores
            self.set_threads(self.cores)

    def describe(self) -> str:
        """What was chosen and why, for the status line."""
        if not self.active:
            return f"threads={torch.get_num_threads()}"
        if self.threads == self.cores:
            return f"threads={self.threads} (auto)"
        return f"threads={self.threads} (auto: others keep {self.others:.1f} of {self.cores} cores busy)"
