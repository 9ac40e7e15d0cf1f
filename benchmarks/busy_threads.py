"""Target-only decoding beside a busy CPU: tok/s for each thread count and OpenMP wait policy, idle and beside
one process that keeps a core busy, so the default thread choice can be read off a table.

Each setting runs in a fresh process (OpenMP reads its wait policy once, at start-up), decoding the same
prompts greedily with the embedded target; the load is a plain Python spin loop (one core), started before and
stopped after each busy measurement. Settings are interleaved and repeated; the report gives medians.

    .venv/bin/python benchmarks/busy_threads.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from minispark.core.atomic import write_json_atomic

RESULTS = Path("benchmarks/results/busy_threads.json")
PROMPTS = ("Write a short poem about the sea.", "Explain what a hash map is in two sentences.")
SPIN = "import time\nwhile True:\n    pass\n"


def decode(threads: int, tokens: int) -> float:
    """tok/s of target-only greedy decoding at ``threads`` (0: the default, chosen as decoding goes), run in the
    child process."""
    import torch

    from minispark.serving.drafters.base import NoDrafter
    from minispark.serving.engine import speculative_generate
    from minispark.serving.schedule import FixedLength
    from minispark.target.loading import load_target
    from minispark.target.sampling import SamplingConfig

    if threads:
        os.environ["MINISPARK_THREADS"] = str(threads)
        torch.set_num_threads(threads)
    target = load_target("embedded", dtype="fp32")
    made, seconds = 0, 0.0
    for k, text in enumerate(PROMPTS[:1] + PROMPTS):
        inputs = target.encode(prompt=text)
        with target.session() as session:
            started = time.perf_counter()
            result = speculative_generate(session, inputs, NoDrafter(), SamplingConfig(0.0), FixedLength(0),
                                          max_new_tokens=8 if k == 0 else tokens)  # the first one warms up
            if k:
                seconds += time.perf_counter() - started
                made += len(result.token_ids)
    return made / seconds


def measure(threads: int, policy: str, busy: bool, tokens: int) -> float:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    env.pop("MINISPARK_THREADS", None)
    if policy != "default":
        env["OMP_WAIT_POLICY"] = policy
    spinner = subprocess.Popen([sys.executable, "-c", SPIN]) if busy else None
    try:
        out = subprocess.run([sys.executable, __file__, "--child", str(threads), "--tokens", str(tokens)], env=env,
                             check=True, capture_output=True, text=True)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--threads", default="0,1,2", help="counts to run; 0 = the default (chosen as it goes)")
    parser.add_argument("--policies", default="default,PASSIVE")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(decode(args.child, args.tokens))
        return
    settings = [(t, p, b) for b in (False, True) for t in map(int, args.threads.split(","))
                for p in args.policies.split(",")]
    runs: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for threads, policy, busy in settings:
            count = f"{threads} thread{'s' * (threads > 1)}" if threads else "auto threads"
            key = f"{count}, {policy}, {'busy' if busy else 'idle'}"
            runs.setdefault(key, []).append(measure(threads, policy, busy, args.tokens))
            print(key, round(runs[key][-1], 2), flush=True)
    report = {"cpus": os.cpu_count(), "tokens": args.tokens, "repeats": args.repeats,
              "median_tok_s": {k: round(statistics.median(v), 2) for k, v in runs.items()}, "runs": runs}
    print(json.dumps(report["median_tok_s"], indent=1))
    write_json_atomic(RESULTS, report)


if __name__ == "__main__":
    main()
