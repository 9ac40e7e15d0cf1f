"""What `minispark serve`'s batched verify costs: R sequences × W tokens in one padded target forward.

serve verifies the blocks of the R requests in flight in one forward (``serving/batched.batched_step``):
R rows right-padded to the widest block, each row's KV cache a row of shared buffers written in place
(``Target.slot_sessions``). That is not one sequence of Σ_r (1 + ℓ_r) tokens: the R caches are attended
separately and padded positions cost like real ones. Algorithm 1 across requests (``serving/batch_schedule.py``) prices it from the grid
this module measures: for every R of ``--batch-requests`` and every width W = 1..``--max-tokens``, the
median seconds of ``batched_step`` over R sessions that each hold the profile's first context, under the
profiler's drift control (``profiler.measure_rounds``: warm-up, baseline, shuffled drift-checked rounds).
Every timed step is followed by a crop of each session, so every step sees the same caches.

    minispark profile --contexts 256 --max-tokens 8 --batch-requests 2,4,8,16
"""

from __future__ import annotations

import random
import statistics
from typing import Any, Callable

import torch

from minispark.measuring.profile_rounds import MeasuredRounds, ProfileConfig, StepTimer, build_cache, measure_rounds
from minispark.serving.batched import batched_step
from minispark.target.loading import Target


def batched_sizes(config: ProfileConfig) -> list[tuple[int, int]]:
    """Every (R, W) cell of the grid, R from ``config.batch_requests``, W = 1..max_tokens."""
    return [(requests, width) for requests in config.batch_requests for width in config.tokens]


def profile_batched(target: Target, config: ProfileConfig, context: int, measure: StepTimer,
                    sleep: Callable[[float], None], rng: random.Random,
                    tick: Callable[..., None]) -> tuple[dict[str, Any], MeasuredRounds]:
    """The ``batched`` grid of an :class:`~minispark.serving.sps.SPSTable` at ``context``, and its rounds
    (for the drift metadata)."""
    largest = config.batch_requests[-1]
    generator = torch.Generator().manual_seed(config.seed + context + 1)
    ids = torch.randint(0, target.vocab_size, (largest, context + config.max_tokens), generator=generator)
    ids = ids.to(target.device)  # (R_max, context + max_tokens): row r is request r's cache, then its block
    sessions = target.slot_sessions(largest)  # as the server's decoder keeps them: rows of shared buffers
    try:
        for row, session in enumerate(sessions):
            build_cache(session, ids[row:row + 1, :context])

        def timed(size: tuple[int, int]) -> float:
            requests, width = size
            blocks = [ids[row, context:context + width] for row in range(requests)]
            seconds = measure(lambda: batched_step(sessions[:requests], blocks))
            for session in sessions[:requests]:
                session.crop(context)
            return seconds

        result = measure_rounds(timed, batched_sizes(config), (config.batch_requests[0], 1), config, sleep, rng,
                                tick, f"batched verify at context {context}")
    finally:
        for session in sessions:
            session.close()
    grid = {"context": context, "requests": list(config.batch_requests), "widths": config.tokens,
            "seconds": [[statistics.median(result.samples[(requests, width)]) for width in config.tokens]
                        for requests in config.batch_requests]}
    return grid, result
