"""Eager vs packed (``minispark --runtime``) forward times of the embedded target at widths 1..8,
both targets in one process, interleaved, medians of 7; run it on an idle machine.

    .venv/bin/python benchmarks/target_runtime.py
"""

from __future__ import annotations

import statistics
import time

import torch

from minispark.target.loading import load_target


def main() -> None:
    eager, packed = load_target(runtime="eager"), load_target(runtime="packed")
    prompt = eager.encode(prompt="Write a long story about a lighthouse keeper. " * 12)
    print(f"context {prompt.length} tokens, {torch.get_num_threads()} threads; ms per forward (median of 7)")
    times: dict[tuple[str, int], list[float]] = {}
    sessions = {"eager": eager.session(), "packed": packed.session()}
    for session in sessions.values():
        session.prefill(prompt)
    for _ in range(7):
        for width in range(1, 9):
            for name, session in sessions.items():
                tokens = prompt.input_ids[0, :width]
                start = time.perf_counter()
                session.step(tokens)
                times.setdefault((name, width), []).append(time.perf_counter() - start)
                session.crop(prompt.length)
    for width in range(1, 9):
        e, p = (statistics.median(times[(name, width)]) * 1e3 for name in ("eager", "packed"))
        print(f"  width {width}: eager {e:6.1f}  packed {p:6.1f}  ({p / e:.2f}×)")


if __name__ == "__main__":
    main()
