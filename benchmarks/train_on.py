"""The shipped drafter trained on, run after run: each run warm-starts from ``drafters/smollm2-135m-dspark/``,
trains on the next slice of the committed 16,384 answers, and appends one row to a cumulative curve.

A working session here lasts ~3 hours and nothing outside git survives it, so the compute compounds through the
one thing that does: the shipped drafter. One ``run`` (sized for ~2 hours of one CPU thread):

1. takes the next slice of answers after the last recorded row (the first run starts after the 4,096 the shipped
   drafter was trained on; past the end it wraps to answer 0, a further epoch over the whole set);
2. trains the ``smollm2-dspark`` recipe on it with ``init_from`` the shipped drafter (fresh optimizer, short warm-up,
   the shipped draft vocabulary kept), features computed as training goes and kept for the later passes
   (``online_store``), ``PASSES`` passes of 64 anchors an answer, the held-out τ proxy every 250 steps;
3. walks the best checkpoint as the greedy loop walks (``benchmarks/loop_walk.py``, last 12 chat / 12 code held-out
   prompts, 96 tokens) beside the shipped drafter's recorded walk;
4. appends the row (total blocks trained since the shipped recipe's 700k, epochs over the 16k, walked τ chat / code,
   proxy T 0 / T 1, whether it was reshipped) to ``benchmarks/results/train_on.json``;
5. reships (``scripts/ship_drafter.py`` after a T 0 calibration on the corpus tail) when the walked τ rose by at
   least ``RESHIP_GAIN`` on both chat and code: at most one reship a run, so git does not fill with weights.

The run directory is ``runs/train-on/<slice>``; an interrupted run is resumed by running the command again.

    .venv/bin/python benchmarks/train_on.py run --answers 2048      # one run (train, walk, record, maybe reship)
    .venv/bin/python benchmarks/train_on.py record runs/train-on/4096-5120   # a run cut short: its best so far
    .venv/bin/python benchmarks/train_on.py table                   # the cumulative curve
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from minispark.core.atomic import write_json_atomic
from minispark.data.answers import AnswerSet

import loop_walk  # the sibling benchmark (benchmarks/ is the script's directory): it keeps every walk

ANSWERS = Path("data/answers/smollm2-135m-instruct")
HELDOUT = Path("data/answers/smollm2-135m-instruct-heldout")
GREEDY = Path("data/answers/smollm2-135m-instruct-heldout-t0")
SHIPPED = Path("drafters/smollm2-135m-dspark")
RECIPE = "smollm2-dspark"
OUT = Path("runs/train-on")
RESULTS = Path("benchmarks/results/train_on.json")
WALK_CATEGORIES, WALK_PROMPTS, WALK_TOKENS = ("chat", "code"), 12, 96
#: The shipped recipe's own training, the curve's first point: 700k blocks over the first 4,096 answers.
SHIPPED_BLOCKS, SHIPPED_ANSWERS = 700_000, 4096
BATCH_ANCHORS, ANCHORS_PER_ANSWER, PASSES = 64, 64, 2
#: A warm start's peak learning rate: 3e-4, after 1e-3 (half the cold recipe's) lost code τ on its first slice.
WARM_LR = 3e-4
RESHIP_GAIN = 0.03
SETTINGS = {"max_anchors_per_sample": ANCHORS_PER_ANSWER, "online_pool": 256, "batch_anchors": BATCH_ANCHORS,
            "anchor_run": 16, "dtype": "auto", "eval_every": 250, "patience": 0, "warmup_frac": 0.03}


def curve() -> list[dict[str, Any]]:
    return json.loads(RESULTS.read_text()) if RESULTS.is_file() else []


def next_slice(rows: list[dict[str, Any]], size: int, total: int) -> tuple[int, int]:
    """[start, end) of the next run's answers: after the last row's slice, wrapping at the end of the set."""
    start = rows[-1]["slice"][1] if rows else SHIPPED_ANSWERS
    start = 0 if start >= total else start
    return start, min(start + size, total)


def slice_anchors(answers: AnswerSet, start: int, end: int) -> int:
    """One pass over [start, end): each answer's anchors (one per answer token but the last), at most 64."""
    lengths = answers.answer_lengths()[start:end]
    return int(np.minimum(np.maximum(lengths - 1, 0), ANCHORS_PER_ANSWER).sum())


def train(out: Path, start: int, end: int, steps: int, lr: float, replay: int) -> None:
    settings = SETTINGS | {"first_sample": start, "max_samples": end, "replay_samples": replay, "steps": steps, "lr": lr,
                           "init_from": str(SHIPPED),
                           "online_store": str(out.with_name(out.name + "-features"))}
    command = [sys.executable, "-m", "minispark.cli", "train", "--recipe", RECIPE, "--answers", str(ANSWERS),
               "--heldout-cache", str(HELDOUT), "--out", str(out), "--no-progress",
               *(["--resume"] if (out / "train_config.json").is_file() else []),
               *(f"{key}={value}" for key, value in settings.items())]
    print(" ".join(command[2:]), flush=True)
    subprocess.run(command, check=True)


def walk(drafter: Path) -> dict[str, float]:
    """The drafter's walked loop τ per category (kept in ``loop_walk.RESULTS``)."""
    from minispark.target.loading import load_target
    from minispark.measuring.loop_walk import walk_drafter

    target = load_target("embedded", dtype="fp32")
    taus = {}
    for category in WALK_CATEGORIES:
        score, _ = walk_drafter(drafter, GREEDY, target, category, WALK_PROMPTS, WALK_TOKENS)
        loop_walk.record(summary := loop_walk.summarise(drafter, category, WALK_PROMPTS, WALK_TOKENS, score))
        print(json.dumps(summary), flush=True)
        taus[category] = summary["walk_tau"]
    return taus


def shipped_walk() -> dict[str, float]:
    """The shipped drafter walked now: a record under its path may be of an earlier drafter shipped there."""
    return walk(SHIPPED)


def best_proxy(out: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    best = max((r for r in rows if "heldout_tau" in r), key=lambda r: r["heldout_tau"])
    return {"step": best["step"], "proxy_t1": round(best["heldout_tau"], 4),
            "proxy_t0": round(best["heldout_tau_greedy"], 4)}


def reship(drafter: Path) -> None:
    """Calibrate the new drafter at T 0 on the corpus tail (never trained on, never the held-out file), ship it."""
    subprocess.run([sys.executable, "-m", "minispark.cli", "calibrate", "--drafter", str(drafter), "--prompts",
                    "examples/prompts/corpus.jsonl", "--num-prompts", "24", "--max-new-tokens", "96",
                    "--temperature", "0"], check=True)
    subprocess.run([sys.executable, "scripts/ship_drafter.py", str(drafter), str(SHIPPED)], check=True)


def run(size: int, passes: int, lr: float, replay: int) -> None:
    answers = AnswerSet(ANSWERS)
    start, end = next_slice(curve(), size, len(answers))
    replay = min(replay, start, SHIPPED_ANSWERS)
    out = OUT / f"{start}-{end}"
    steps = -(-passes * (slice_anchors(answers, start, end) + slice_anchors(answers, 0, replay)) // BATCH_ANCHORS)
    train(out, start, end, steps, lr, replay)
    record(out, passes)


def record(out: Path, passes: int) -> None:
    """Walk the run's best checkpoint, append its row (blocks: the steps it trained, so a run the session's end
    cut short counts what it did) and reship on a gain."""
    answers = AnswerSet(ANSWERS)
    rows = curve()
    start, end = (int(x) for x in out.name.split("-"))
    before = shipped_walk()
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    trained = max(r["step"] for r in metrics if "step" in r)
    after = walk(out / "best")
    gain = {c: after[c] - before[c] for c in WALK_CATEGORIES}
    shipped = all(g >= RESHIP_GAIN for g in gain.values())
    blocks = trained * BATCH_ANCHORS
    total = (rows[-1]["total_blocks"] if rows else SHIPPED_BLOCKS) + blocks
    mean_anchors = slice_anchors(answers, 0, len(answers)) / len(answers)
    config = json.loads((out / "train_config.json").read_text())
    lr, replay = config.get("lr"), config.get("replay_samples", 0)
    trained_anchors = slice_anchors(answers, start, end) + slice_anchors(answers, 0, replay)
    row = {"slice": [start, end], "replay": replay, "lr": lr, "passes": round(blocks / trained_anchors, 3),
           "planned_passes": passes, "blocks": blocks, "total_blocks": total,
           "epochs_16k": round(total / (mean_anchors * len(answers)), 3),
           "walk_chat": after["chat"], "walk_code": after["code"],
           "shipped_walk_chat": before["chat"], "shipped_walk_code": before["code"], **best_proxy(out),
           "reshipped": shipped}
    if shipped:
        reship(out / "best")
    write_json_atomic(RESULTS, rows + [row])
    print(json.dumps(row), flush=True)


def table() -> str:
    lines = ["| slice | passes | total blocks | epochs over 16k | walk τ chat / code (shipped before) | proxy T 0 / T 1 "
             "| reshipped |", "|---|---|---|---|---|---|---|"]
    for r in curve():
        replay = f" + 0–{r['replay']}" if r.get("replay") else ""
        lines.append(f"| {r['slice'][0]}–{r['slice'][1]}{replay} | {r['passes']:.2f} | {r['total_blocks']:,} | {r['epochs_16k']:.2f} "
                     f"| {r['walk_chat']:.3f} / {r['walk_code']:.3f} ({r['shipped_walk_chat']:.3f} / "
                     f"{r['shipped_walk_code']:.3f}) | {r['proxy_t0']:.3f} / {r['proxy_t1']:.3f} | "
                     f"{'yes' if r['reshipped'] else 'no'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("run", help="one run: train the next slice, walk, record, reship on a gain")
    one.add_argument("--answers", type=int, default=2048, help="answers in the slice (default 2048)")
    one.add_argument("--passes", type=int, default=PASSES, help=f"passes over the slice (default {PASSES})")
    one.add_argument("--lr", type=float, default=WARM_LR, help=f"peak learning rate (default {WARM_LR})")
    one.add_argument("--replay", type=int, default=0,
                     help="answers of the shipped drafter's own data [0, N) trained beside the slice (default 0)")
    cut = sub.add_parser("record", help="record a run the session's end cut short (its best checkpoint so far)")
    cut.add_argument("out", type=Path, help="the run directory, runs/train-on/START-END")
    cut.add_argument("--passes", type=int, default=PASSES, help="the passes it was planned for")
    sub.add_parser("table", help="print the cumulative curve")
    args = parser.parse_args()
    if args.command == "run":
        run(args.answers, args.passes, args.lr, args.replay)
    elif args.command == "record":
        record(args.out, args.passes)
    print(table())


if __name__ == "__main__":
    main()
