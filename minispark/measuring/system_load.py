"""How busy the machine is while profiling on a CPU: what other processes use, from ``/proc/stat``
CPU-time accounting (exact) or the 1-minute load average minus the profiler's own share (where
``/proc/stat`` is unreadable). The profiler refuses, or flags, a table timed on a busy machine.

    .venv/bin/python -c "import torch; from minispark.measuring.system_load import machine_load; \
print(machine_load(torch.device('cpu')).describe())"
"""

from __future__ import annotations

import math
import os
import time
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from minispark.core.errors import MinisparkError, option
from minispark.target.threads import others_between, read_cpu_times


#: Load (runnable processes) others may add beyond the cores torch leaves free before the machine
#: counts as busy: half a core, so a table is only written when the profiler had its cores alone.
BUSY_SLACK = 0.5
#: Time constant of the kernel's 1-minute load average (an exponential moving average).
LOAD_TIME_CONSTANT_S = 60.0


def read_load() -> tuple[float, int] | None:
    """(1-minute load average, core count), or None where the OS does not report it."""
    if not hasattr(os, "getloadavg"):
        return None
    return os.getloadavg()[0], os.cpu_count() or 1


#: Seconds of CPU accounting before profiling (what other processes use right now).
CPU_WINDOW_S = 1.0


@dataclass
class MachineLoad:
    """One load reading. ``own`` is the profiler's estimated share of ``load_1min``: its torch
    threads, ramped in by the load average's time constant over ``own_seconds`` of profiling."""

    load_1min: float
    cores: int
    threads: int
    own: float
    #: Cores other processes used over the measured window (CPU-time accounting); None: estimated
    #: from the load average minus ``own``.
    measured_others: float | None = None

    @property
    def others(self) -> float:
        if self.measured_others is not None:
            return self.measured_others
        return max(0.0, self.load_1min - self.own)

    @property
    def busy(self) -> bool:
        return self.others > max(0, self.cores - self.threads) + BUSY_SLACK

    def describe(self) -> str:
        if self.measured_others is not None:
            return f"other processes kept {self.others:.2f} of {self.cores} cores busy, with {self._threads()}"
        return (f"1-min load {self.load_1min:.2f} on {self.cores} cores, {self.others:.2f} of it from other "
                f"processes, with {self._threads()}")

    def _threads(self) -> str:
        return f"{self.threads} torch thread{'s' * (self.threads != 1)}"

    def as_dict(self) -> dict[str, Any]:
        return {"load_1min": round(self.load_1min, 2), "others": round(self.others, 2), "cores": self.cores,
                "threads": self.threads, "busy": self.busy,
                "others_from": "load-average" if self.measured_others is None else "cpu-time"}


def machine_load(device: torch.device, own_seconds: float = 0.0,
                 since: tuple[float, float, float] | None = None) -> MachineLoad | None:
    """The CPU load when profiling on CPU (None on GPUs or where the OS does not report it).

    Where CPU times are readable, what other processes used is measured: since ``since`` (a
    :func:`read_cpu_times` reading at the start of profiling), or over the next ``CPU_WINDOW_S``.
    Otherwise it is the load average minus this process's share, ramped in over ``own_seconds``."""
    reading = read_load() if device.type == "cpu" else None
    if reading is None:
        return None
    threads = torch.get_num_threads()
    own = threads * (1.0 - math.exp(-own_seconds / LOAD_TIME_CONSTANT_S))
    first = since if since is not None else read_cpu_times()
    measured = None
    if first is not None:
        if since is None:
            time.sleep(CPU_WINDOW_S)
        last = read_cpu_times()
        measured = others_between(first, last) if last is not None else None
    return MachineLoad(reading[0], reading[1], threads, own, measured)


def check_load(load: MachineLoad | None, when: str, allow_busy: bool) -> None:
    """Refuse (or, with ``allow_busy``, warn) when other processes were competing for the cores."""
    if load is None or not load.busy:
        return
    message = (f"profile: the machine is busy {when} ({load.describe()}); its timings would include "
               f"contention. Profile on an idle machine or with fewer --threads")
    if not allow_busy:
        raise MinisparkError(f"{message}, or pass {option('allow_busy')} to write a table flagged as busy")
    warnings.warn(f"{message}; --allow-busy: the table is written and flagged as busy", stacklevel=3)
