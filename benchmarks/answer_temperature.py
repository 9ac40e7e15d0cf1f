"""Which answers to train on, for the temperature people decode at: T 0.7 answers, greedy answers or a half-half
mix, each warm-started from the shipped drafter at equal answer tokens and equal steps, scored at T 0 and T 1.

The data is one 2,048-prompt slice of the corpus answered twice: answer samples 6784–8831 of the committed T 0.7
set and ``data/answers/smollm2-135m-instruct-t0-06784`` (greedy, the same prompts in the same order, built by
``minispark answers --prompts data/prompts/corpus-06785-08832.jsonl --temperature 0``). Each variant is written as
an answer set of its own over those prompts (the mix takes T 0.7 for even prompts and greedy for odd ones), cut
at the same number of answer tokens (the smallest variant's total), then

1. trained from ``init_from`` the shipped drafter, ``--steps`` steps of the ``smollm2-dspark`` recipe (features on
   the fly, ``ANCHORS`` anchors an answer: about one pass), the held-out τ proxy evaluated at the end on the
   committed T 0.7 held-out answers (``proxy_t1``: acceptance at T 1, ``proxy_t0``: greedy acceptance);
2. walked as the greedy loop walks (``measuring/loop_walk.py``: last 12 chat / 12 code held-out prompts, 96 tokens,
   T 0), beside the shipped drafter.

Rows go to ``benchmarks/results/answer_temperature.json``; each finished step is skipped on a rerun.

    .venv/bin/python benchmarks/answer_temperature.py --steps 1000     # ~2 h of one CPU thread
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import safetensors.torch
import torch

from minispark.core.atomic import write_bytes_atomic, write_json_atomic
from minispark.data.answers import FORMAT, FORMAT_VERSION, MANIFEST, AnswerSet, StoredAnswer, shard_name
from minispark.data.cache_format import file_sha256

import loop_walk  # the sibling benchmark (benchmarks/ is the script's directory): it keeps every walk

SAMPLED = Path("data/answers/smollm2-135m-instruct")
GREEDY = Path("data/answers/smollm2-135m-instruct-t0-06784")
FIRST_SAMPLED = 6784  # sample 6784 of the T 0.7 set answers corpus line 6785, the greedy set's first prompt
PROMPTS = Path("data/prompts/corpus-06785-08832.jsonl")
HELDOUT = Path("data/answers/smollm2-135m-instruct-heldout")
WALK_HELDOUT = Path("data/answers/smollm2-135m-instruct-heldout-t0")
SHIPPED = Path("drafters/smollm2-135m-dspark")
RECIPE = "smollm2-dspark"
OUT = Path("runs/answer-temperature")
RESULTS = Path("benchmarks/results/answer_temperature.json")
VARIANTS = ("t0.7", "greedy", "mix")
WALK_CATEGORIES, WALK_PROMPTS, WALK_TOKENS = ("chat", "code"), 12, 96
WARM_LR = 3e-4  # the train-on runs' warm-start peak
ANCHORS = 32
SETTINGS = {"max_anchors_per_sample": ANCHORS, "online_pool": 256, "batch_anchors": 64, "anchor_run": 16,
            "dtype": "auto", "patience": 0, "warmup_frac": 0.03, "checkpoint_every": 100,
            "online_prompts": str(PROMPTS)}


def picks(variant: str, sampled: AnswerSet, greedy: AnswerSet) -> list[StoredAnswer]:
    """The variant's answer to each prompt of the slice, in prompt order."""
    out = []
    for j in range(len(greedy)):
        g = greedy[j]
        use_sampled = variant == "t0.7" or (variant == "mix" and j % 2 == 0)
        if not use_sampled:
            out.append(g)
            continue
        s = sampled[FIRST_SAMPLED + j]
        if s.prompt_ids.tolist() != g.prompt_ids.tolist():
            raise SystemExit(f"sample {FIRST_SAMPLED + j} of {SAMPLED} and {j} of {GREEDY} answer different prompts")
        # the greedy set's numbering, so the set reads as answers to PROMPTS
        out.append(StoredAnswer(sample_index=g.sample_index, prompt_line=g.prompt_line, prompt_ids=s.prompt_ids,
                                answer_ids=s.answer_ids, stopped_at_eos=s.stopped_at_eos))
    return out


def cut(answers: list[StoredAnswer], budget: int) -> list[StoredAnswer]:
    """The first answers whose tokens stay within ``budget``."""
    kept, total = [], 0
    for a in answers:
        if total + len(a.answer_ids) > budget:
            break
        kept.append(a)
        total += len(a.answer_ids)
    return kept


def write_set(out: Path, answers: list[StoredAnswer], config: dict[str, Any], per_shard: int = 256) -> None:
    """An answer set of ``answers`` in the format ``AnswerSet`` reads (manifest written last)."""
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    for k, start in enumerate(range(0, len(answers), per_shard)):
        part = answers[start:start + per_shard]

        def packed(parts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
            offsets = torch.tensor([0] + [len(p) for p in parts]).cumsum(0)
            return torch.cat(parts).to(torch.int32).to(torch.uint16), offsets

        prompt_ids, prompt_offset = packed([a.prompt_ids for a in part])
        answer_ids, answer_offset = packed([a.answer_ids for a in part])
        tensors = {"sample_index": torch.tensor([a.sample_index for a in part], dtype=torch.int64),
                   "prompt_line": torch.tensor([a.prompt_line for a in part], dtype=torch.int32),
                   "eos": torch.tensor([a.stopped_at_eos for a in part], dtype=torch.uint8),
                   "prompt_ids": prompt_ids, "prompt_offset": prompt_offset,
                   "answer_ids": answer_ids, "answer_offset": answer_offset}
        path = out / shard_name(k)
        write_bytes_atomic(path, safetensors.torch.save(tensors))
        entries.append({"file": path.name, "bytes": path.stat().st_size, "sha256": file_sha256(path),
                        "samples": len(part), "answer_tokens": int(answer_offset[-1])})
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "config": config, "num_samples": len(answers),
                "num_shards": len(entries), "shards": entries, "complete": True,
                "totals": {"samples": len(answers), "answer_tokens": sum(e["answer_tokens"] for e in entries)}}
    write_bytes_atomic(out / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())


def build_sets() -> dict[str, Path]:
    dirs = {v: OUT / f"answers-{v}" for v in VARIANTS}
    if all((d / MANIFEST).is_file() for d in dirs.values()):
        return dirs
    sampled, greedy = AnswerSet(SAMPLED), AnswerSet(GREEDY)
    chosen = {v: picks(v, sampled, greedy) for v in VARIANTS}
    budget = min(sum(len(a.answer_ids) for a in answers) for answers in chosen.values())
    for v, answers in chosen.items():
        config = json.loads(json.dumps(greedy.config)) | {"variant": v}
        if v != "greedy":
            config["sampling"] = {"mixed_from": [sampled.config["sampling"], greedy.config["sampling"]]} \
                if v == "mix" else sampled.config["sampling"]
        kept = cut(answers, budget)
        write_set(dirs[v], kept, config)
        print(f"{v}: {len(kept)} answers, {sum(len(a.answer_ids) for a in kept)} tokens (budget {budget})", flush=True)
    return dirs


def train(variant: str, answers: Path, steps: int) -> dict[str, Any]:
    out = OUT / variant
    timing = out / "seconds.json"
    if timing.is_file():
        return json.loads(timing.read_text())
    settings = SETTINGS | {"steps": steps, "max_samples": 0, "lr": WARM_LR, "init_from": str(SHIPPED),
                           "eval_every": steps}
    started = time.perf_counter()
    command = [sys.executable, "-m", "minispark.cli", "--threads", "1", "train", "--recipe", RECIPE,
               "--answers", str(answers), "--heldout-cache", str(HELDOUT), "--out", str(out), "--no-progress",
               *(["--resume"] if (out / "train_config.json").is_file() else []),
               *(f"{key}={value}" for key, value in settings.items())]
    print(" ".join(command[2:]), flush=True)
    subprocess.run(command, check=True)
    record = {"steps": steps, "seconds": round(time.perf_counter() - started, 1)}
    write_json_atomic(timing, record)
    return record


def proxy(out: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    last = [r for r in rows if "heldout_tau" in r][-1]
    return {"step": last["step"], "proxy_t1": round(last["heldout_tau"], 4),
            "proxy_t0": round(last["heldout_tau_greedy"], 4)}


def walk(drafter: Path) -> dict[str, float]:
    from minispark.target.loading import load_target
    from minispark.measuring.loop_walk import walk_drafter

    target = load_target("embedded", dtype="fp32")
    taus = {}
    for category in WALK_CATEGORIES:
        score, _ = walk_drafter(drafter, WALK_HELDOUT, target, category, WALK_PROMPTS, WALK_TOKENS)
        summary = loop_walk.summarise(drafter, category, WALK_PROMPTS, WALK_TOKENS, score)
        print(json.dumps(summary), flush=True)
        taus[category] = summary["walk_tau"]
    return taus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="training steps of each variant (default 1000)")
    args = parser.parse_args()
    dirs = build_sets()
    rows: dict[str, Any] = {"shipped": {"walk": walk(SHIPPED)}}
    for v in VARIANTS:
        timing = train(v, dirs[v], args.steps)
        totals = json.loads((dirs[v] / MANIFEST).read_text())["totals"]
        rows[v] = {"answers": totals, "train": timing, **proxy(OUT / v), "walk": walk(OUT / v / "drafter")}
        write_json_atomic(RESULTS, rows)
    print(json.dumps(rows, indent=1), flush=True)


if __name__ == "__main__":
    main()
