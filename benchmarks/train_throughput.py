"""Trainer throughput: blocks/s of a training step at several thread counts, batch sizes and dtypes, in one process.

Each setting builds the recipe's drafter (``smollm2-dspark`` by default) over an answer set with
online features (pools of ``--pool`` answers, dense anchors), and times ``--steps`` steps split into
packing the batch from the pool (``make_batch``) and the step itself (``train_step``: forward, chunked
losses, backward, AdamW); computing a pool's features is timed apart (it recurs once per pool). Medians
after two warm-up steps. Settings are ``THREADS:BATCH:DTYPE:RUN`` (``RUN`` = anchors per run, ``anchor_run``).

    .venv/bin/python benchmarks/train_throughput.py --answers data/answers/smollm2-135m-instruct \
        1:16:fp32:4 2:16:fp32:4 2:64:fp32:16 2:64:bf16:16
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch

from minispark.data.answers import AnswerSet
from minispark.target.loading import load_target
from minispark.training.anchor_batches import make_batch
from minispark.training.online import OnlineSource
from minispark.training.recipes import load_recipe
from minispark.training.trainer import Trainer, train_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=Path, required=True)
    parser.add_argument("--recipe", default="smollm2-dspark")
    parser.add_argument("--pool", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("settings", nargs="+")
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, torch {torch.__version__}", flush=True)
    target = load_target()
    answers = AnswerSet(args.answers)
    for setting in args.settings:
        threads, batch, dtype, run = setting.split(":")
        torch.set_num_threads(int(threads))
        config = load_recipe(args.recipe, [f"batch_anchors={batch}", f"dtype={dtype}", f"anchor_run={run}",
                                           f"online_pool={args.pool}", "max_anchors_per_sample=0", "steps=100000",
                                           "heldout_cache=none", f"answers_dir={args.answers}"])
        source = OnlineSource(answers, target, config.feature_layers or target.auto_layers(), config.window,
                              config.block_size)
        trainer = Trainer(config, source, target, Path(tempfile.mkdtemp()), log=None)
        started = time.perf_counter()
        trainer.plan.anchors(0)
        pool_s = time.perf_counter() - started
        packing, stepping = [], []
        for step in range(args.steps):
            started = time.perf_counter()
            batch_ = make_batch(trainer.plan.anchors(step), config.block_size)
            packing.append(time.perf_counter() - started)
            started = time.perf_counter()
            train_step(trainer.model, trainer.optimizer, trainer.scheduler, batch_, config)
            stepping.append(time.perf_counter() - started)
        pack, step_s = statistics.median(packing[2:]), statistics.median(stepping[2:])
        print(f"threads {threads} batch {batch} {dtype} run {run}: step {step_s * 1e3:.0f} ms + packing "
              f"{pack * 1e3:.0f} ms = {int(batch) / (step_s + pack):.1f} blocks/s; features of a "
              f"{args.pool}-answer pool {pool_s:.1f} s ({int(trainer.plan.counts[:args.pool].sum())} anchors)",
              flush=True)


if __name__ == "__main__":
    main()
