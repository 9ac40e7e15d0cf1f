"""The profiler's measuring core: what to measure (:class:`ProfileConfig`), a step timer, and rounds of steps
under drift control, shared by the one-sequence table (``profiler.py``) and serve's batched grid
(``batch_profile.py``).

:func:`measure_rounds` is steps 2-3 of the profiler's method (``profiler.py``'s docstring): untimed warm-up
passes over every size, a baseline of the reference size, then ``rounds`` rounds that each time every size
once in a fresh shuffled order bracketed by the reference size; a round whose reference drifts past the
bound is re-measured after a cool-down. A size is anything hashable that the caller's ``timed`` runs: n
tokens of one sequence, or (R, W) for a batched verify.

    .venv/bin/python -m pytest -q tests/measuring/test_profiler.py
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from minispark.core import defaults
from minispark.core.errors import MinisparkError, option
from minispark.target.session import PromptInputs, TargetSession

#: Prefill chunk: a 4096-token cache is built in 1024-token forwards (bounded attention memory).
PREFILL_CHUNK = 1024


@dataclass
class ProfileConfig:
    """What to measure and how hard to fight noise.

    contexts:        KV-cache lengths to profile (those beyond the model's positions are skipped)
    max_tokens:      profile n = 1..max_tokens new tokens per step (≥ γ+1 for the scheduler)
    batch_requests:  request counts R ≥ 2 whose batched verify is profiled too (serve's: R sequences at
                     the first context, each verifying 1..max_tokens tokens in one padded forward;
                     ``batch_profile.py``)
    rounds:          kept rounds per context; each times every size once, shuffled
    warmup:          untimed passes over every size per context before the baseline
    reference_tokens: the size timed at each round's start and end to detect drift
    reference_repeats: timings of the reference size that make the baseline
    drift_bound:     relative |reference median / baseline − 1| above which a round is re-measured
    max_remeasure:   re-measurements per round before keeping the least-drifted attempt
    cooldown_s:      rest before re-measuring a drifted round (lets a throttled device cool)
    seed:            shuffling and token ids
    note:            free text stored in the table's metadata (e.g. "shared CPU, noisy")
    allow_busy:      write the table even when the machine was busy (warn and flag it instead)
    """

    contexts: list[int] = field(default_factory=lambda: list(defaults.PROFILE_CONTEXTS))
    max_tokens: int = defaults.PROFILE_MAX_TOKENS
    batch_requests: list[int] = field(default_factory=list)
    rounds: int = defaults.PROFILE_ROUNDS
    warmup: int = defaults.PROFILE_WARMUP
    reference_tokens: int = 1
    reference_repeats: int = 5
    drift_bound: float = defaults.PROFILE_DRIFT_BOUND
    max_remeasure: int = defaults.PROFILE_MAX_REMEASURE
    cooldown_s: float = defaults.PROFILE_COOLDOWN_S
    seed: int = 0
    note: str = ""
    allow_busy: bool = False

    def __post_init__(self) -> None:
        self.contexts = sorted({int(c) for c in self.contexts})
        self.batch_requests = sorted({int(n) for n in self.batch_requests})
        checks = [
            (bool(self.contexts) and self.contexts[0] >= 0, f"{option('contexts')}: need lengths >= 0"),
            (self.max_tokens >= 1, f"{option('max_tokens')} must be >= 1"),
            (all(n >= 2 for n in self.batch_requests), f"{option('batch_requests')}: counts >= 2 only (1 is the table itself)"),
            (self.rounds >= 1, f"{option('rounds')} must be >= 1"),
            (self.warmup >= 0, f"{option('warmup')} must be >= 0"),
            (1 <= self.reference_tokens <= self.max_tokens, "reference_tokens must be in 1..max_tokens"),
            (self.reference_repeats >= 1, "reference_repeats must be >= 1"),
            (self.drift_bound > 0, f"{option('drift_bound')} must be > 0"),
            (self.max_remeasure >= 0, f"{option('max_remeasure')} must be >= 0"),
            (self.cooldown_s >= 0, f"{option('cooldown')} must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise MinisparkError(message)

    @property
    def tokens(self) -> list[int]:
        return list(range(1, self.max_tokens + 1))


class StepTimer:
    """Seconds one callable takes on ``device``.

    With no ``timer``: CUDA events around the call (after a synchronize, so earlier queued work is
    not counted), or ``time.perf_counter`` on CPU. An injected ``timer`` (a clock in seconds) is
    read exactly twice per call, before and after, with synchronizes around it on CUDA.
    """

    def __init__(self, device: torch.device, timer: Callable[[], float] | None = None) -> None:
        self.cuda = device.type == "cuda"
        self.device = device
        self.use_events = self.cuda and timer is None
        self.timer = timer or time.perf_counter

    def __call__(self, fn: Callable[[], Any]) -> float:
        if self.use_events:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(self.device)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
        if self.cuda:
            torch.cuda.synchronize(self.device)
        t0 = self.timer()
        fn()
        if self.cuda:
            torch.cuda.synchronize(self.device)
        return self.timer() - t0


def spread(times: list[float]) -> float:
    """(p90 − p10) / median: the relative spread the SPS table stores."""
    return (_quantile(times, 0.9) - _quantile(times, 0.1)) / statistics.median(times)


def _quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method)."""
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (pos - low) * (ordered[high] - ordered[low])


@dataclass
class MeasuredRounds:
    samples: dict[Any, list[float]]  # size (n tokens, or (R, W)) → kept timings (one per kept round)
    baselines_s: list[float]         # the first baseline, then one per re-baselining
    drifts: list[float]              # |drift| of every attempted round, in order
    remeasured: int                  # attempts discarded for drift
    kept_drifted: int                # rounds kept although still beyond the bound


def build_cache(session: TargetSession, ids: torch.Tensor) -> None:
    """Prefill ``ids`` (1, L) into the empty session in chunks of PREFILL_CHUNK tokens."""
    length = ids.shape[1]
    if length == 0:
        return
    first = min(length, PREFILL_CHUNK)
    session.prefill(PromptInputs(input_ids=ids, text_positions=torch.arange(length)), length=first)
    for start in range(first, length, PREFILL_CHUNK):
        session.step(ids[0, start:start + PREFILL_CHUNK])


def _one_round(timed: Callable[[Any], float], sizes: list, ref: Any, rng: random.Random,
               on_step: Callable[[], None]) -> tuple[float, dict[Any, float]]:
    """Every size once in a fresh shuffled order, bracketed by the reference size.

    Returns the median of the two reference timings and {size: seconds}.
    """
    order = list(sizes)
    rng.shuffle(order)
    refs = [timed(ref)]
    times = {}
    for n in order:
        times[n] = timed(n)
        on_step()
    refs.append(timed(ref))
    return statistics.median(refs), times


def measure_rounds(timed: Callable[[Any], float], sizes: list, ref: Any, config: ProfileConfig,
                   sleep: Callable[[float], None], rng: random.Random, tick: Callable[..., None],
                   label: str) -> MeasuredRounds:
    """Warm up, take the baseline, then ``config.rounds`` drift-checked rounds of every size (steps 2-3 of
    the module docstring); ``timed(size)`` runs one step of ``size`` and returns its seconds."""
    def take_baseline() -> float:
        return statistics.median(timed(ref) for _ in range(config.reference_repeats))

    for _ in range(config.warmup):
        for n in sizes:
            timed(n)
    result = MeasuredRounds({n: [] for n in sizes}, [take_baseline()], [], 0, 0)
    for r in range(config.rounds):
        round_label = f"{label}, round {r + 1}/{config.rounds}"
        attempts = []  # (|drift|, times) per attempt at this round
        for attempt in range(config.max_remeasure + 1):
            if attempt:
                tick(0, f"{round_label}: drifted {attempts[-1][0]:.0%}, cooling down and re-measuring",
                     replanned=len(sizes))
                sleep(config.cooldown_s)
                result.remeasured += 1
            reference, times = _one_round(timed, sizes, ref, rng, lambda: tick(1, round_label))
            attempts.append((abs(reference / result.baselines_s[-1] - 1.0), times))
            result.drifts.append(attempts[-1][0])
            if attempts[-1][0] <= config.drift_bound:
                break
        drift, times = min(attempts, key=lambda a: a[0])
        if drift > config.drift_bound:
            result.kept_drifted += 1
            result.baselines_s.append(take_baseline())
        for n, seconds in times.items():
            result.samples[n].append(seconds)
    return result
