"""The greedy loop's τ walked from every anchor of held-out answers (``minispark/measuring/loop_walk.py``),
beside the held-out proxy's uniform mean over the same anchors and their harmonic mean.

    .venv/bin/python benchmarks/loop_walk.py runs/curve/16k-sparse-64/best \
        --answers data/answers/smollm2-135m-instruct-heldout-t0 --category chat --num-prompts 12 \
        --max-new-tokens 96 --record

stands for ``minispark bench --prompts examples/prompts/heldout.jsonl --category chat --num-prompts 12
--max-new-tokens 96 --temperature 0 --modes fixed --drafter DIR``; ``--check N`` runs that loop on N of
those prompts and compares its rounds with the walk's one by one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from minispark.core.atomic import write_json_atomic
from minispark.data.answers import AnswerSet
from minispark.data.cache_config import default_prompts
from minispark.data.prompts import load_prompts
from minispark.serving.generate import generate, make_drafter
from minispark.serving.schedule import FixedLength
from minispark.target.loading import load_target
from minispark.measuring.loop_walk import walk, walk_drafter

#: Every walk's summary, keyed by drafter, category, prompts and length (a run directory does not outlive
#: its machine).
RESULTS = Path(__file__).parent / "results" / "loop_walk.json"


def run_name(drafter: Path | str) -> str:
    """A drafter's name in the results: a run directory from its runs/ folder on (its worktree is this machine's)."""
    text = str(drafter)
    return text[text.find("runs/"):] if "runs/" in text else text


def summarise(drafter: Path | str, category: str | None, answers: int, max_new_tokens: int, score) -> dict:
    """One walk's record (``score``: a ``WalkScore``)."""
    return {"drafter": run_name(drafter), "answers": answers, "category": category, "max_new_tokens": max_new_tokens,
            "anchors": score.anchors, "uniform_tau": round(score.uniform_tau, 4),
            "harmonic_tau": round(score.harmonic_tau, 4), "walk_tau": round(score.tau, 4), "rounds": score.rounds,
            "tokens": score.tokens}


def key(summary: dict) -> str:
    return f"{summary['drafter']}|{summary['category'] or 'all'}|{summary['answers']}|{summary['max_new_tokens']}"


def record(summary: dict) -> None:
    """Keep ``summary`` in ``RESULTS`` (replacing an earlier walk of the same drafter and slice)."""
    write_json_atomic(RESULTS, recorded() | {key(summary): summary})


def recorded() -> dict[str, dict]:
    """Every walk kept so far, by :func:`key`."""
    return json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}


def loop_rounds(target, drafter_dir: Path, sample, max_new: int) -> tuple[list[int], list[int]]:
    """(generated ids, accepted drafts per round) of the real greedy loop at the drafter's fixed γ, on one prompt."""
    drafter = make_drafter(str(drafter_dir), target)
    out = generate(target, **sample.encode_kwargs(), drafter=drafter, policy=FixedLength(drafter.config.block_size),
                   max_new_tokens=max_new)
    return out.result.token_ids, out.result.stats.accepted_lengths


def check(target, drafter_dir: Path, answers: AnswerSet, accepted: dict[int, dict[int, int]], count: int,
          max_new: int) -> None:
    """Run the real loop on the first ``count`` walked answers and print, per answer, where it and the walk part."""
    prompts = load_prompts(default_prompts(False, "heldout"), check_images=False)
    picked = [i for i in range(len(answers)) if answers[i].sample_index in accepted]
    for i in picked[:count]:
        stored = answers[i]
        ids, real = loop_rounds(target, drafter_dir, prompts[stored.prompt_line - 1], max_new)
        walked = walk(accepted.get(stored.sample_index, {}), len(stored.prompt_ids), len(stored.answer_ids),
                      max_new)
        same = next((k for k, (a, b) in enumerate(zip(ids, stored.answer_ids.tolist())) if a != b),
                    min(len(ids), len(stored.answer_ids)))
        first = next((k for k, (a, b) in enumerate(zip(real, walked)) if a != b), None)
        print(json.dumps({"answer": stored.sample_index, "tokens_equal_answer": same, "loop_tokens": len(ids),
                          "loop_tau": round((sum(real) + len(real)) / len(real), 4),
                          "walk_tau": round((sum(walked) + len(walked)) / len(walked), 4),
                          "first_differing_round": first, "loop": real[:12], "walk": walked[:12]}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("drafter", type=Path)
    parser.add_argument("--answers", type=Path, required=True, help="a held-out answer set regenerated at T 0")
    parser.add_argument("--category", default=None)
    parser.add_argument("--num-prompts", type=int, default=0,
                        help="the last N of the category, as bench takes them (0: all)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--check", type=int, default=0,
                        help="also run the real loop on N of those answers and compare it round by round")
    parser.add_argument("--record", action="store_true", help=f"keep the summary in {RESULTS.name}")
    args = parser.parse_args()
    target = load_target("embedded", dtype="fp32")
    score, accepted = walk_drafter(args.drafter, args.answers, target, args.category, args.num_prompts,
                                   args.max_new_tokens)
    if args.check:
        check(target, args.drafter, AnswerSet(args.answers), accepted, args.check, args.max_new_tokens)
    summary = summarise(args.drafter, args.category, len(accepted), args.max_new_tokens, score)
    print(json.dumps(summary))
    if args.record:
        record(summary)


if __name__ == "__main__":
    main()
