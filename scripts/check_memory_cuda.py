"""Check the training memory estimator on a CUDA device against ``torch.cuda.max_memory_allocated``.

For each recipe (default: tiny, cpu-smollm2 and rtx3050, all moved to CUDA with bf16 autocast and
8-bit AdamW unless overridden), build the draft model with random target weights of the recipe's
sizes, run real training steps (``train.train_step``) on a synthetic batch of the estimator's
worst-case shape, and compare the peak allocated bytes (minus what was allocated before the model
was built) with ``estimate_memory``. Exits non-zero when a measurement is off by more than 20 %,
or when the rtx3050 recipe's reserved peak exceeds 5.5 GB.

    .venv/bin/python scripts/check_memory_cuda.py
    .venv/bin/python scripts/check_memory_cuda.py --recipe rtx3050 compile=false batch_anchors=32
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from dataclasses import replace

import torch

from minispark.training.memory import BatchShape, estimate_memory
from minispark.measuring.memory_measure import build_synthetic
from minispark.training.recipes import load_recipe
from minispark.training.trainer import train_step

TOLERANCE, RTX3050_LIMIT_GB = 0.20, 5.5


def measure(config, steps: int) -> dict[str, float]:
    """Peak allocated / reserved bytes over ``steps`` training steps (first step allocates the optimizer state)."""
    gc.collect()
    torch.cuda.empty_cache()
    baseline = torch.cuda.memory_allocated()
    parts = build_synthetic(config, BatchShape.from_config(config))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    for _ in range(steps):
        train_step(*parts, config)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - started) / steps
    result = {"allocated": torch.cuda.max_memory_allocated() - baseline,
              "reserved": torch.cuda.max_memory_reserved(), "seconds_per_step": seconds}
    del parts
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", action="append", help="recipe name or file (repeatable)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("overrides", nargs="*", help="key=value recipe overrides, applied to every recipe")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("check_memory_cuda: no CUDA device here; run it on a machine with a GPU "
              "(the CPU check is tests/training/test_memory.py)")
        return 2
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__}")
    failed = False
    for name in args.recipe or ["tiny", "cpu-smollm2", "rtx3050"]:
        defaults = ["device=cuda", "dtype=bf16", "optimizer=adamw8bit"] if name in ("tiny", "cpu-smollm2") else []
        config = load_recipe(name, defaults + args.overrides)
        config = replace(config, device="cuda")
        predicted = estimate_memory(config)
        got = measure(config, args.steps)
        ratio = got["allocated"] / predicted.predicted_peak
        bad = abs(ratio - 1) > TOLERANCE
        if config.name == "rtx3050" and got["reserved"] / 1e9 > RTX3050_LIMIT_GB:
            bad = True
        failed |= bad
        print(f"{config.name:<12} predicted {predicted.predicted_peak / 1e9:6.3f} GB ({predicted.peak_phase})  "
              f"max allocated {got['allocated'] / 1e9:6.3f} GB  ratio {ratio:5.2f}  reserved "
              f"{got['reserved'] / 1e9:6.3f} GB  {got['seconds_per_step']:.3f} s/step  {'FAIL' if bad else 'ok'}")
        print("  " + "  ".join(f"{k} {v / 1e9:.3f}" for k, v in predicted.components().items()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
