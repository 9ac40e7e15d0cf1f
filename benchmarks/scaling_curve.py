"""The drafter's data-scaling curve (issue 20 §4): one `minispark train` run per row, each until its held-out
τ proxy stops improving, then one table of every row trained so far.

Every row trains the ``smollm2-dspark`` recipe on the first N answers of the committed answer set with online
features and sparse anchors (64 an answer, drawn again each epoch; the first two rows dense: every answer token
an anchor; a sliding shuffle buffer of 256 answers), 64 anchors a step (4 answers × 16 consecutive anchors)
under bf16 autocast where the CPU has bf16 kernels (``dtype=auto``: 2.2-2.8× the blocks/s of the recipe's fp32
16 × 4 here, and the same held-out τ per block), keeps every answer's features after its first prefill
(``online_store``, shared by the rows), evaluates the held-out τ proxy every 250 steps (16k blocks) and stops
when it has not improved for 10 evaluations, after 3 epochs, or at its most blocks (700k for the sparse rows,
~2/3 of an epoch at 16k answers; 1M for the dense ones), whichever comes first; the cosine schedule ends at the
step cap; the drafter is its best checkpoint. A row whose directory holds a checkpoint resumes from it
(``--resume``), so ``run`` can be interrupted at any time and started again; a finished row (``finished``)
is skipped. Each row's figures (and its
held-out τ at every evaluation) are kept in ``benchmarks/results/scaling_curve.json`` whenever ``run`` or
``table`` sees its run directory, so a row trained on a machine whose files are gone stays in the table:
commit that file (a row of ~2 hours is what one working session here can finish). A finished row's drafter is
then walked the way the greedy loop walks (``minispark/measuring/loop_walk.py``) on the held-out prompts' greedy
answers, the last 12 chat and 12 code ones (those the bench runs) cut at 96 tokens: the loop's τ at T 0, which
the proxy's mean over anchors overstates where acceptance comes in stretches (kept with every walk in
``benchmarks/results/loop_walk.json``; ``walk`` walks a row's best checkpoint so far, or a row trained before).

    .venv/bin/python benchmarks/scaling_curve.py run 1k-sparse-64 1k-sparse-64-dflash   # rows, one after another
    .venv/bin/python benchmarks/scaling_curve.py walk 16k-sparse-64                     # a finished row's loop τ
    .venv/bin/python benchmarks/scaling_curve.py table                                  # the markdown table so far
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from minispark.core.atomic import write_json_atomic
from minispark.data.answers import AnswerSet

import loop_walk  # the sibling benchmark (benchmarks/ is the script's directory): it keeps every walk

ANSWERS = Path("data/answers/smollm2-135m-instruct")
HELDOUT = Path("data/answers/smollm2-135m-instruct-heldout")
#: The held-out prompts' greedy answers a finished row is walked on, and the slice the bench measures.
GREEDY = Path("data/answers/smollm2-135m-instruct-heldout-t0")
WALK_CATEGORIES, WALK_PROMPTS, WALK_TOKENS = ("chat", "code"), 12, 96
RECIPE = "smollm2-dspark"
OUT = Path("runs/curve")
#: Every row's answers' features after their first prefill (``online_store``: later epochs, and later rows over the
#: same answers, read them instead of running the target again; ~2.2 MB an answer); a row with other feature layers
#: or cut answers keeps its own.
STORE = Path("runs/curve-features")
#: Every row's figures as last seen, kept in git (a run directory does not outlive its machine).
RESULTS = Path("benchmarks/results/scaling_curve.json")
#: The batch and the stopping rule every row shares.
BATCH_ANCHORS, ANCHOR_RUN = 64, 16
#: Patience was 5 evaluations (80k blocks) until the thirteenth session: it stopped 16k-sparse-64 at 0.45 epochs
#: (best 1.708 at step 5,750) while 4k-sparse-64 went on from 1.56 to 1.70 in its second epoch. A row stopped by a
#: less patient rule before its step cap is resumed from its last checkpoint (see ``finished``).
EVAL_EVERY, PATIENCE_EVALS, MAX_EPOCHS = 250, 10, 3
COMMON = {"max_anchors_per_sample": 0, "online_pool": 256, "batch_anchors": BATCH_ANCHORS, "anchor_run": ANCHOR_RUN,
          "dtype": "auto", "eval_every": EVAL_EVERY, "patience": EVAL_EVERY * PATIENCE_EVALS}
#: The dense rows' budget (~2 hours here).
DENSE_BLOCKS = 1_000_000
#: The sparse rows' budget: ~2/3 of one epoch of 64 anchors over 16k answers.
SPARSE_BLOCKS = 700_000


@dataclass(frozen=True)
class Row:
    """A row: the first ``answers`` answers of the set, recipe overrides, and the most blocks it trains."""

    answers: int
    overrides: dict[str, Any]
    max_blocks: int


#: DFlash is the same drafter without its Markov head.
ROWS: dict[str, Row] = {
    # Dense anchors at one budget, the first rows measured: DSpark against DFlash at the largest size.
    "16k-dspark-1m": Row(16384, {}, DENSE_BLOCKS),
    "16k-dflash-1m": Row(16384, {"head": "none"}, DENSE_BLOCKS),
    # Dense against sparse anchors at equal wall time: 64 anchors an answer cost one prefill per 64 blocks where dense
    # ones share it over ~272, so ~700k sparse blocks take the dense row's ~2 hours, over ~11k answers instead of ~3.7k
    # (the dense row's training-stream τ runs far above its held-out one: neighbouring anchors of an answer it has
    # already trained on are nearly the same block). Sparse won (eleventh session: 1.71 at 368k blocks where dense
    # reached 1.675 at 1M), so the curve, the DSpark/DFlash ratio and the levers are measured with sparse anchors.
    "16k-sparse-64": Row(16384, {"max_anchors_per_sample": 64}, SPARSE_BLOCKS),
    "16k-sparse-64-dflash": Row(16384, {"max_anchors_per_sample": 64, "head": "none"}, SPARSE_BLOCKS),
    "4k-sparse-64": Row(4096, {"max_anchors_per_sample": 64}, SPARSE_BLOCKS),
    "4k-sparse-64-dflash": Row(4096, {"max_anchors_per_sample": 64, "head": "none"}, SPARSE_BLOCKS),
    "1k-sparse-64": Row(1024, {"max_anchors_per_sample": 64}, SPARSE_BLOCKS),
    "1k-sparse-64-dflash": Row(1024, {"max_anchors_per_sample": 64, "head": "none"}, SPARSE_BLOCKS),
    # At the largest size, one row per lever the literature names, against 16k-sparse-64 under the same rule.
    "16k-sparse-64-5-layers": Row(16384, {"max_anchors_per_sample": 64, "num_layers": 5}, SPARSE_BLOCKS),
    "16k-sparse-64-rank-256": Row(16384, {"max_anchors_per_sample": 64, "markov_rank": 256}, SPARSE_BLOCKS),
    "16k-sparse-64-layers-early": Row(16384, {"max_anchors_per_sample": 64, "feature_layers": "2,5,8,11,14"},
                                      SPARSE_BLOCKS),
    "16k-sparse-64-window-128": Row(16384, {"max_anchors_per_sample": 64, "window": 128}, SPARSE_BLOCKS),
    # The same levers at 4k answers, the largest size trained to its step cap in one session: they read the 4k rows'
    # feature store (all but the feature-layer row), so each runs every epoch at the store's speed.
    "4k-sparse-64-window-128": Row(4096, {"max_anchors_per_sample": 64, "window": 128}, SPARSE_BLOCKS),
    "4k-sparse-64-rank-256": Row(4096, {"max_anchors_per_sample": 64, "markov_rank": 256}, SPARSE_BLOCKS),
    "4k-sparse-64-5-layers": Row(4096, {"max_anchors_per_sample": 64, "num_layers": 5}, SPARSE_BLOCKS),
    # The same levers at 1k answers, each trained to its 3 epochs against 1k-sparse-64 (fifteen minutes to an hour a
    # row here): what one working session can measure of all four, to choose which to run at 4k.
    "1k-sparse-64-window-128": Row(1024, {"max_anchors_per_sample": 64, "window": 128}, SPARSE_BLOCKS),
    "1k-sparse-64-rank-256": Row(1024, {"max_anchors_per_sample": 64, "markov_rank": 256}, SPARSE_BLOCKS),
    "1k-sparse-64-5-layers": Row(1024, {"max_anchors_per_sample": 64, "num_layers": 5}, SPARSE_BLOCKS),
    "1k-sparse-64-layers-early": Row(1024, {"max_anchors_per_sample": 64, "feature_layers": "2,5,8,11,14"},
                                     SPARSE_BLOCKS),
    # A second epoch at the largest size (it draws another 64 anchors of each answer).
    "16k-sparse-64-2m": Row(16384, {"max_anchors_per_sample": 64}, 2_000_000),
    # More prompts with shorter answers against fewer long ones, at equal answer tokens (2,048 answers cut to their
    # first 168 tokens, 287k, against 1k-sparse-64's 1,024 whole ones, 283k): what a regeneration capped at 168 gives.
    "2k-cut-168-sparse-64": Row(2048, {"max_anchors_per_sample": 64, "max_answer_tokens": 168}, SPARSE_BLOCKS),
}


def row_anchors(answers: AnswerSet, row: Row) -> int:
    """One epoch of ``row``: its answers' anchors (one per answer token, each answer cut to ``max_answer_tokens``,
    at most ``max_anchors_per_sample`` of them)."""
    lengths = answers.answer_lengths()[:row.answers]
    for key in ("max_answer_tokens", "max_anchors_per_sample"):
        if row.overrides.get(key):
            lengths = np.minimum(lengths, row.overrides[key])
    return int(lengths.sum())


def row_steps(answers: AnswerSet, row: Row) -> int:
    """The step cap: MAX_EPOCHS passes over the row's anchors, or its most blocks."""
    epochs = MAX_EPOCHS * row_anchors(answers, row)
    return math.ceil(min(epochs, row.max_blocks) / BATCH_ANCHORS)


def store_dir(row: Row) -> Path:
    """The feature store a row reads and grows: one per set of features (the feature layers, the answers' cut)."""
    suffix = "".join(f"-{key}-{str(row.overrides[key]).replace(',', '.')}"
                     for key in ("feature_layers", "max_answer_tokens") if key in row.overrides)
    return STORE.with_name(STORE.name + suffix)


def train_row(name: str, answers: AnswerSet) -> bool:
    """Train one row (resuming it when it has a checkpoint), and say whether it trained; refuse a row the answer set
    cannot fill yet."""
    row = ROWS[name]
    if len(answers) < row.answers:
        raise SystemExit(f"{name}: needs {row.answers} answers, {ANSWERS} holds {len(answers)}")
    out = OUT / name
    if finished(out):
        print(f"{name}: finished", flush=True)
        return False
    store = store_dir(row)
    settings = COMMON | {"max_samples": row.answers, "steps": row_steps(answers, row), "online_store": store} \
        | row.overrides
    command = [sys.executable, "-m", "minispark.cli", "train", "--recipe", RECIPE, "--answers", str(ANSWERS),
               "--heldout-cache", str(HELDOUT), "--out", str(out), "--no-progress",
               *(["--resume"] if (out / "train_config.json").is_file() else []),
               *(f"{key}={value}" for key, value in settings.items())]
    print(" ".join(command[2:]), flush=True)
    subprocess.run(command, check=True)
    return True


def finished(out: Path) -> bool:
    """Whether the row in ``out`` is done under today's rule: its drafter written, and it reached its step cap or was
    stopped by today's patience. A run a less patient rule stopped is resumed and goes on exactly as a run under
    today's rule would have (the plan is a function of the step; patience only decides when to stop)."""
    if not (out / "drafter").is_dir():
        return False
    config = json.loads((out / "train_config.json").read_text())
    last = int((out / "latest").read_text().strip().removeprefix("checkpoint-"))
    return config["patience"] >= COMMON["patience"] or last >= config["steps"]


def row_figures(name: str, answers: AnswerSet) -> dict[str, Any] | None:
    """A trained (or training) row's best held-out τ, its step, blocks/s and wall time, from metrics.jsonl."""
    path = OUT / name / "metrics.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    evaluations = [r for r in rows if "heldout_tau" in r]
    steps = [r for r in rows if "tokens_per_s" in r]
    if not evaluations or not steps:
        return None
    best = max(evaluations, key=lambda r: r["heldout_tau"])
    last = steps[-1]
    config = json.loads((OUT / name / "train_config.json").read_text())
    blocks = last["step"] * config["batch_anchors"]
    # A resumed run's clock starts again at its checkpoint: the wall time is the sum of each stretch's last reading.
    seconds = sum(a["elapsed_s"] for a, b in zip(steps, steps[1:]) if b["elapsed_s"] < a["elapsed_s"])
    seconds += last["elapsed_s"]
    row = ROWS[name]
    # (step, T 1, T 0) of every evaluation: where the row's curve bends
    curve = [[r["step"], round(r["heldout_tau"], 4), round(r["heldout_tau_greedy"], 4)] for r in evaluations]
    return {"row": name, "answers": row.answers, "best_tau": best["heldout_tau"],
            "best_tau_greedy": best["heldout_tau_greedy"], "best_step": best["step"], "steps": last["step"],
            "blocks": blocks, "epochs": blocks / row_anchors(answers, row),
            "blocks_per_s": blocks / max(seconds, 1e-9), "hours": seconds / 3600,
            "finished": finished(OUT / name), "evaluations": curve}


def walk_row(name: str) -> None:
    """Walk a row's best drafter so far on the greedy held-out slice; kept in ``loop_walk.RESULTS``."""
    from minispark.target.loading import load_target
    from minispark.measuring.loop_walk import walk_drafter

    drafter = OUT / name / "best"
    if not drafter.is_dir():
        raise SystemExit(f"{name}: no best checkpoint yet ({drafter} is missing)")
    target = load_target("embedded", dtype="fp32")
    for category in WALK_CATEGORIES:
        score, _ = walk_drafter(drafter, GREEDY, target, category, WALK_PROMPTS, WALK_TOKENS)
        loop_walk.record(summary := loop_walk.summarise(drafter, category, WALK_PROMPTS, WALK_TOKENS, score))
        print(json.dumps(summary), flush=True)


def walked(name: str) -> dict[str, float] | None:
    """A row's recorded loop τ per category (its best drafter walked), or None before every category is."""
    kept = loop_walk.recorded()
    found = {c: kept.get(f"{OUT / name / 'best'}|{c}|{WALK_PROMPTS}|{WALK_TOKENS}") for c in WALK_CATEGORIES}
    return None if None in found.values() else {c: f["walk_tau"] for c, f in found.items()}


def record(answers: AnswerSet) -> dict[str, dict[str, Any]]:
    """Every row's figures: its run directory's where there is one (written to ``RESULTS``), else the recorded ones."""
    rows = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    live = {name: f for name in ROWS if (f := row_figures(name, answers)) is not None}
    # A run directory restarted from scratch on a new machine must not replace a further-trained record.
    live = {name: f for name, f in live.items() if f["steps"] >= rows.get(name, {}).get("steps", 0)}
    if live:
        rows |= live
        write_json_atomic(RESULTS, {name: rows[name] for name in ROWS if name in rows})
    return rows


def table(answers: AnswerSet) -> str:
    lines = ["| row | answers | best held-out τ T 1 / T 0 | loop τ chat / code | at step | steps (blocks) | epochs "
             "| blocks/s | wall h | done |", "|---|---|---|---|---|---|---|---|---|---|"]
    rows = record(answers)
    for name in ROWS:
        f = rows.get(name)
        if f is not None:
            loop = walked(name)
            loop = " / ".join(f"{loop[c]:.3f}" for c in WALK_CATEGORIES) if loop else "–"
            lines.append(f"| {name} | {f['answers']:,} | {f['best_tau']:.3f} / {f['best_tau_greedy']:.3f} | {loop} | "
                         f"{f['best_step']:,} | {f['steps']:,} ({f['blocks']:,}) | {f['epochs']:.2f} | "
                         f"{f['blocks_per_s']:.1f} | {f['hours']:.2f} | {'yes' if f['finished'] else 'no'} |")
    lines += [f"\n{name}: {f['source']}" for name, f in rows.items() if "source" in f]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="train rows in order (resumable)")
    run.add_argument("rows", nargs="+", choices=list(ROWS))
    walk = sub.add_parser("walk", help="walk finished rows' drafters as the greedy loop walks (their loop τ)")
    walk.add_argument("rows", nargs="+", choices=list(ROWS))
    sub.add_parser("table", help="print the table of every row trained so far")
    args = parser.parse_args()
    answers = AnswerSet(ANSWERS)
    if args.command == "run":
        for name in args.rows:
            trained = train_row(name, answers)
            record(answers)
            if trained or walked(name) is None:  # a row trained further has a new best to walk
                walk_row(name)
    elif args.command == "walk":
        for name in args.rows:
            walk_row(name)
    print(table(answers))


if __name__ == "__main__":
    main()
