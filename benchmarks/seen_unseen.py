"""A trained online run's held-out τ proxy on answers it trained on, answers it never reached, and the held-out set.

It tells memorisation from a prompt-distribution gap: when the drafter scores far higher on the answers
it trained on than on training answers it never saw, and those score like the held-out set, the gap
between the training stream and the held-out proxy is the drafter fitting the answers it saw, not
held-out prompts being unlike the corpus. The run's own plan (``OnlinePlan.answer_use``) says which
answers its steps used whole and which no step touched; ``--answers`` of each are scored with the
held-out proxy's rule (512 blocks spread evenly, T 1 and T 0), beside the run's held-out set.

    .venv/bin/python benchmarks/seen_unseen.py runs/curve/16k-dflash-1m --answers 40
    .venv/bin/python benchmarks/seen_unseen.py runs/curve/16k-sparse-64 --drafter best --answers 0 \
        --heldout runs/answers-heldout-t0          # beside a held-out set regenerated at T 0
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from minispark.data.answers import AnswerSet
from minispark.target.loading import load_target
from minispark.training.heldout import HeldoutProxy, heldout_batch_anchors
from minispark.training.online import MemoryReader, OnlineSource, open_reader
from minispark.training.recipes import TrainConfig
from minispark.training.trainer import BEST_DIR, HELDOUT_FILE, METRICS_FILE, TRAIN_CONFIG_FILE, Trainer, autocast


def _drafter_step(run: Path) -> int:
    """The step the run's drafter was saved at: its best checkpoint's with a held-out set (``drafter/`` is a copy
    of ``best/``), else the last step logged; steps after it are answers these weights never saw."""
    best = run / BEST_DIR / HELDOUT_FILE
    if best.is_file():
        return json.loads(best.read_text())["step"]
    rows = [json.loads(line) for line in (run / METRICS_FILE).read_text().splitlines() if line.strip()]
    return max(row["step"] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="an online run's --out (train_config.json, metrics.jsonl, drafter/)")
    parser.add_argument("--answers", type=int, default=40, help="answers scored from each of seen and unseen (0: none)")
    parser.add_argument("--heldout", type=Path, action="append", default=[],
                        help="a further held-out answer set or cache to score (repeatable; e.g. one regenerated at T 0)")
    parser.add_argument("--drafter", default="drafter", help="which of the run's drafters: drafter or best")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    saved = json.loads((args.run / TRAIN_CONFIG_FILE).read_text())
    # The run's own config, its drafter loaded over the fresh model; no held-out set built by the trainer.
    config = TrainConfig.from_dict(saved | {"init_from": str(args.run / args.drafter), "heldout_cache": None},
                                   where=str(args.run / TRAIN_CONFIG_FILE))
    target = load_target(config.target, dtype="fp32")
    source = OnlineSource(AnswerSet(Path(config.answers_dir)), target, config.feature_layers, config.window,
                          config.block_size, config.cache_dtype, max_answer_tokens=config.max_answer_tokens)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(config, source, target, Path(out))
    steps = _drafter_step(args.run)
    whole, untouched = trainer.plan.answer_use(steps)
    print(f"{args.run} after {steps} steps: {len(whole)} answers used whole, {len(untouched)} untouched")
    rng = np.random.default_rng(args.seed)
    readers = {name: MemoryReader(source, sorted(rng.choice(pool, min(args.answers, len(pool)), replace=False).tolist()))
               for name, pool in (("seen", whole), ("unseen", untouched)) if len(pool) and args.answers > 0}
    heldout = {"held-out": Path(saved["heldout_cache"])} if saved.get("heldout_cache") else {}
    for name, directory in (heldout | {str(extra): extra for extra in args.heldout}).items():
        readers[name] = open_reader(directory, target, config.feature_layers, config.window, config.block_size)
    for name, reader in readers.items():
        proxy = HeldoutProxy.from_reader(reader, config.block_size, config.eval_anchors, heldout_batch_anchors(config),
                                         full_lm_head=target.lm_head.weight.detach(), vocab_chunk=config.chunk_anchors)
        score = proxy.score(trainer.model, autocast(config))
        print(f"{name:>9s} τ {score.tau:.3f} (T 0 {score.tau_greedy:.3f}) on {score.blocks} blocks; acceptance "
              f"{' '.join(f'{a:.2f}' for a in score.acceptance)}", flush=True)


if __name__ == "__main__":
    main()
