"""The warm-start story, measured: a fine-tuned target, the shipped drafter as it is, a warm start from it and a
cold drafter, on the changed target's own held-out answers.

1. ``scripts/finetune_target.py`` fine-tunes the embedded target on Python's standard library (code, chat-formatted;
   a few hundred steps; the weights are rebuilt, not committed);
2. the changed target regenerates ``--answers`` of the corpus prompts (as the shipped answers were: T 0.7) and its
   greedy held-out answers (``examples/prompts/heldout.jsonl``, 96 tokens: what the walk reads);
3. the warm drafter (``init_from`` the shipped drafter, its draft vocabulary kept) and the cold one (the shipped
   recipe from scratch, its vocabulary from the new answers) train the same steps on those answers, features on
   the fly, no held-out evaluation (the last checkpoint is the drafter), each timed;
4. every drafter is walked as the greedy loop walks (``measuring/loop_walk.py``: the last 12 chat / 12 code held-out
   prompts, 96 tokens), and the shipped drafter on the original target beside them.

Each row (one per answers, steps and learning rates) goes to ``benchmarks/results/changed_target.json``: the τ the change cost the shipped drafter, and the
share of it the warm start recovered. Each step is skipped when its output is already complete, so an interrupted
run resumes.

    .venv/bin/python benchmarks/changed_target.py --answers 512 --steps 600      # ~2 h of one CPU thread
    .venv/bin/python benchmarks/changed_target.py --steps 300 --warm-lr 1e-3        # another row, same target
    .venv/bin/python benchmarks/changed_target.py --category code --answers 1024 --steps 500   # code answers only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from minispark.core.atomic import write_json_atomic, write_text_atomic

import loop_walk  # the sibling benchmark (benchmarks/ is the script's directory): it keeps every walk

OUT = Path("runs/changed-target")
SHIPPED = Path("drafters/smollm2-135m-dspark")
CORPUS = Path("examples/prompts/corpus.jsonl")
ORIGINAL_HELDOUT = Path("data/answers/smollm2-135m-instruct-heldout-t0")
RECIPE = "smollm2-dspark"
RESULTS = Path("benchmarks/results/changed_target.json")
WALK_CATEGORIES, WALK_PROMPTS, WALK_TOKENS = ("chat", "code"), 12, 96
#: The warm start's peak learning rate (the train-on runs'), and the cold one's: the shipped recipe's.
WARM_LR, COLD_LR = 3e-4, 2e-3
SETTINGS = {"max_anchors_per_sample": 64, "online_pool": 256, "batch_anchors": 64, "anchor_run": 16,
            "dtype": "auto", "eval_every": 0, "patience": 0, "warmup_frac": 0.04, "checkpoint_every": 100}


def cli(*args: str) -> None:
    command = [sys.executable, "-m", "minispark.cli", "--threads", "1", *args]
    print(" ".join(command[2:]), flush=True)
    subprocess.run(command, check=True)


def finetuned(steps: int) -> Path:
    target = OUT / "target"
    if not (target / "finetune.json").is_file():
        subprocess.run([sys.executable, "scripts/finetune_target.py", str(target), "--steps", str(steps)], check=True)
    return target


def complete(answers: Path) -> bool:
    manifest = answers / "answers.json"
    return manifest.is_file() and bool(json.loads(manifest.read_text()).get("complete"))


def corpus_prompts(category: str) -> Path:
    """The corpus's prompts of one category, in a file of their own (the corpus read as the CLI reads it)."""
    out = OUT / f"prompts-{category}.jsonl"
    if not out.is_file():
        lines = [line for line in CORPUS.read_text().splitlines()
                 if line.strip() and json.loads(line)["category"] == category]
        write_text_atomic(out, "\n".join(lines) + "\n")
    return out


def regenerate(target: Path, num_answers: int, category: str | None) -> tuple[Path, Path]:
    answers, heldout = OUT / (f"answers-{category}-{num_answers}" if category else "answers"), OUT / "heldout-t0"
    if not complete(answers):
        prompts = ("--prompts", str(corpus_prompts(category))) if category else ()
        cli("answers", "--target", str(target), "--out", str(answers), "--num-samples", str(num_answers),
            "--max-new-tokens", "256", *prompts)
    if not complete(heldout):
        cli("answers", "--target", str(target), "--split", "heldout", "--out", str(heldout), "--temperature", "0",
            "--max-new-tokens", str(WALK_TOKENS))
    return answers, heldout


def train(name: str, target: Path, answers: Path, steps: int, lr: float, warm: bool) -> dict[str, Any]:
    """Train one drafter (resumed if cut short); its wall time is kept beside it."""
    out = OUT / name
    timing = out / "seconds.json"
    if timing.is_file():
        return json.loads(timing.read_text())
    settings = SETTINGS | {"target": str(target), "steps": steps, "max_samples": 0,
                           "lr": lr,
                           **({"init_from": str(SHIPPED)} if warm else {})}
    started = time.perf_counter()
    cli("train", "--recipe", RECIPE, "--answers", str(answers), "--out", str(out), "--no-progress",
        *(["--resume"] if (out / "train_config.json").is_file() else []),
        *(f"{key}={value}" for key, value in settings.items()))
    record = {"steps": steps, "seconds": round(time.perf_counter() - started, 1)}
    write_json_atomic(timing, record)
    return record


def walk(drafter: Path, heldout: Path, target_dir: Path | None) -> dict[str, float]:
    """The drafter's walked τ per category on ``heldout`` answers of the target in ``target_dir`` (None: embedded)."""
    from minispark.target.loading import load_target
    from minispark.measuring.loop_walk import walk_drafter

    target = load_target(str(target_dir) if target_dir else "embedded", dtype="fp32")
    taus = {}
    for category in WALK_CATEGORIES:
        score, _ = walk_drafter(drafter, heldout, target, category, WALK_PROMPTS, WALK_TOKENS)
        summary = loop_walk.summarise(drafter, category, WALK_PROMPTS, WALK_TOKENS, score)
        print(json.dumps(summary), flush=True)
        taus[category] = summary["walk_tau"]
    return taus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finetune-steps", type=int, default=200)
    parser.add_argument("--answers", type=int, default=512, help="answers the changed target regenerates")
    parser.add_argument("--category", help="answer only the corpus prompts of this category (default: all)")
    parser.add_argument("--skip-cold", action="store_true",
                        help="train and walk the warm start only (the cold rows so far: 0.3 walked τ behind)")
    parser.add_argument("--steps", type=int, default=600, help="training steps of the warm and the cold drafter")
    parser.add_argument("--warm-lr", type=float, default=WARM_LR, help=f"the warm start's peak (default {WARM_LR})")
    parser.add_argument("--cold-lr", type=float, default=COLD_LR, help=f"the cold start's peak (default {COLD_LR})")
    args = parser.parse_args()
    target = finetuned(args.finetune_steps)
    answers, heldout = regenerate(target, args.answers, args.category)
    tag = f"-{args.category}-{args.answers}" if args.category else ""
    names = {"warm": f"warm-{args.steps}-{args.warm_lr:g}{tag}", "cold": f"cold-{args.steps}-{args.cold_lr:g}{tag}"}
    warm = train(names["warm"], target, answers, args.steps, args.warm_lr, warm=True)
    cold = None if args.skip_cold else train(names["cold"], target, answers, args.steps, args.cold_lr, warm=False)
    original = walk(SHIPPED, ORIGINAL_HELDOUT, None)
    walks = {"shipped": walk(SHIPPED, heldout, target), "warm": walk(OUT / names["warm"] / "drafter", heldout, target)}
    if cold is not None:
        walks["cold"] = walk(OUT / names["cold"] / "drafter", heldout, target)
    lost = {c: original[c] - walks["shipped"][c] for c in WALK_CATEGORIES}
    row = {"finetune": json.loads((target / "finetune.json").read_text()), "answers": args.answers,
           "category": args.category,
           "steps": args.steps, "lr": {"warm": args.warm_lr, "cold": args.cold_lr},
           "train": {"warm": warm, "cold": cold}, "walk_original_target": original, "walk_changed_target": walks,
           "lost": {c: round(v, 4) for c, v in lost.items()},
           "recovered": {c: round((walks["warm"][c] - walks["shipped"][c]) / lost[c], 3) if lost[c] > 0 else None
                         for c in WALK_CATEGORIES}}
    rows = json.loads(RESULTS.read_text()) if RESULTS.is_file() else []
    key = ("steps", "lr", "answers", "category")
    rows = [r for r in rows if tuple(r.get(k) for k in key) != tuple(row[k] for k in key)] + [row]
    write_json_atomic(RESULTS, rows)
    print(json.dumps(row, indent=1), flush=True)


if __name__ == "__main__":
    main()
