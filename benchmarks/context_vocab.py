"""The draft vocabulary with and without the request's own tokens: τ of the chain (fixed γ) and tree rounds on
held-out prompts at T 0, beside the share of the target's tokens the drafter could not have proposed.

A drafter with a draft vocabulary scores its N static tokens; with the context vocabulary it also scores every
token of the prompt and output so far that the static set lacks (``OutputSpace`` in
``minispark/serving/drafters/dspark.py``). At T 0 both runs emit the target's greedy tokens (checked), so τ and
the counts below do not depend on the machine's speed; tok/s does, and is reported beside the target's.

    .venv/bin/python benchmarks/context_vocab.py --category code --num-prompts 12 --max-new-tokens 96
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from minispark.core.atomic import write_json_atomic
from minispark.core.defaults import HELDOUT_FILE
from minispark.measuring.bench import file_prompts
from minispark.serving.builder import build_serving
from minispark.serving.engine import speculative_generate
from minispark.serving.schedule import FixedLength
from minispark.target.loading import load_target
from minispark.target.sampling import SamplingConfig, make_generator

RESULTS = Path("benchmarks/results/context_vocab.json")


def run(category: str, num_prompts: int, max_new_tokens: int) -> dict:
    target = load_target("embedded", dtype="fp32")
    setup = build_serving(target, sampling=SamplingConfig(0.0))
    drafter = setup.drafter
    lm_head = target.lm_head.weight
    static = drafter.model.vocab_index  # (V,) N for tokens outside the static set
    outside = drafter.model.config.draft_vocab
    prompts = file_prompts(target, HELDOUT_FILE, num_prompts, category)
    policies = {"chain": lambda: FixedLength(setup.gamma), "tree": lambda: setup.policy_for("tree")}
    rows: dict[str, dict] = {}
    reference: dict[int, list[int]] = {}
    for space in ("static", "context"):
        drafter.context_lm_head = lm_head if space == "context" else None
        for name, policy in policies.items():
            rounds = tokens = verify = 0
            seconds = 0.0
            for k, prompt in enumerate(prompts):
                with target.session(drafter.feature_layers) as session:
                    started = time.perf_counter()
                    result = speculative_generate(session, prompt.inputs, drafter, SamplingConfig(0.0), policy(),
                                                  max_new_tokens=max_new_tokens, eos_ids=target.eos_token_ids,
                                                  generator=make_generator(0, target.device))
                    seconds += time.perf_counter() - started
                if reference.setdefault(k, result.token_ids) != result.token_ids:
                    raise SystemExit(f"{space} {name}: prompt {k} differs from the first run's greedy tokens")
                stats = result.stats
                rounds += stats.rounds
                tokens += sum(stats.accepted_lengths) + stats.rounds  # τ's count (a stop's cut tokens included)
                verify += sum(stats.proposed_lengths) + stats.rounds
            rows[f"{space} {name}"] = {"tau": round(tokens / rounds, 3), "verify_per_round": round(verify / rounds, 2),
                                       "tok_s": round(sum(len(ids) for ids in reference.values()) / seconds, 2)}
            print(space, name, json.dumps(rows[f"{space} {name}"]), flush=True)
    # tokens of the greedy answers outside the static set, and how many of those the request had already seen
    missing = seen = total = 0
    for k, prompt in enumerate(prompts):
        ids = prompt.inputs.input_ids[0].tolist()
        for token in reference[k]:
            total += 1
            if int(static[token]) == outside:
                missing += 1
                seen += token in ids
            ids.append(token)
    drafter.context_lm_head = None
    return {"category": category, "prompts": len(prompts), "max_new_tokens": max_new_tokens,
            "answer_tokens": total, "outside_static": round(missing / max(total, 1), 4),
            "outside_static_and_context": round((missing - seen) / max(total, 1), 4), **rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--category", default="code")
    parser.add_argument("--num-prompts", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    args = parser.parse_args()
    torch.manual_seed(0)
    report = run(args.category, args.num_prompts, args.max_new_tokens)
    print(json.dumps(report))
    rows = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    write_json_atomic(RESULTS, rows | {args.category: report})


if __name__ == "__main__":
    main()
