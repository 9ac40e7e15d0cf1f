"""Forward times of the embedded target per runtime (``minispark --runtime``: eager, packed, blocks where the
block kernels build here, and int8 where this torch build has its kernel; ``--compiled`` adds the compiled
runtime, after printing its one-time compile cost; ``--bf16`` adds the target loaded in bf16, eager and packed) at widths 1..8, all in
one process, interleaved, medians of 7; run it on an idle machine.

    .venv/bin/python benchmarks/target_runtime.py [--context 230] [--compiled] [--bf16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from minispark.target.block_quant import kernel_unavailable
from minispark.target.int8 import int8_supported
from minispark.target.loading import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=230, help="prompt tokens before the timed forwards")
    parser.add_argument("--compiled", action="store_true", help="also time --runtime compiled (compiles first)")
    parser.add_argument("--bf16", action="store_true", help="also time the target loaded in bf16, eager and packed")
    args = parser.parse_args()
    runtimes = ["eager", "packed"] + (["blocks"] if kernel_unavailable() is None else []) \
        + (["int8"] if int8_supported("cpu") else []) + (["compiled"] if args.compiled else [])
    targets = {name: load_target(runtime=name) for name in runtimes}
    if args.bf16:
        for name in ("eager", "packed"):
            targets[f"bf16-{name}"] = load_target(dtype="bf16", runtime=name)
        runtimes = list(targets)
    if args.compiled:
        seconds = targets["compiled"].warm_up(range(1, 9))
        print(f"compiled runtime: widths 1..8 compiled in {seconds:.1f} s (one-time; inductor's disk cache keeps it)")
    prompt = targets["eager"].encode(prompt="Write a long story about a lighthouse keeper. " * max(1, args.context // 10))
    print(f"context {prompt.length} tokens, {torch.get_num_threads()} threads; ms per forward (median of 7)")
    sessions = {name: target.session() for name, target in targets.items()}
    for session in sessions.values():
        session.prefill(prompt)
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(7):
        for width in range(1, 9):
            for name, session in sessions.items():
                tokens = prompt.input_ids[0, :width]
                start = time.perf_counter()
                session.step(tokens)
                times.setdefault((name, width), []).append(time.perf_counter() - start)
                session.crop(prompt.length)
    print("  width  " + "".join(f"{name:>12}" for name in runtimes))
    for width in range(1, 9):
        print(f"  {width:5d}  " + "".join(f"{statistics.median(times[(name, width)]) * 1e3:12.1f}" for name in runtimes))
    for name in runtimes:
        ratio = statistics.median(times[(name, 8)]) / statistics.median(times[(name, 1)])
        print(f"  {name}: verify(8) / step(1) = {ratio:.2f}")


if __name__ == "__main__":
    main()
