"""How the drafter does on a generation's first round, whose anchor is the last prompt token.

Training anchors are answer positions, so the first round (anchor = the chat template's last token,
labels = the answer's first tokens) is one the drafter never trained on. This runs the real loop
(fixed γ, greedy, so the rounds are the target's own tokens) over held-out prompts and compares the
first round's accepted drafts with every later round's. The gap bounds what training on
first-round anchors could win: at most (later mean − first mean) tokens per answer.

    .venv/bin/python benchmarks/first_round.py --prompts 60 --max-new-tokens 48
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from minispark.data.prompts import HELDOUT_FILE, load_prompts
from minispark.serving.generate import default_drafter, generate, make_drafter
from minispark.target.sampling import SamplingConfig
from minispark.serving.schedule import FixedLength
from minispark.target.loading import load_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=60, help="the first N held-out prompts")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--gamma", type=int, default=7)
    parser.add_argument("--drafter", default=None, help="drafter directory (default: the shipped one)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target("embedded", device="cpu")
    drafter = make_drafter(args.drafter or str(default_drafter(target)), target)
    first, later = [], []
    for sample in load_prompts(HELDOUT_FILE)[: args.prompts]:
        out = generate(target, **sample.encode_kwargs(), drafter=drafter, sampling=SamplingConfig(0.0),
                       policy=FixedLength(args.gamma), max_new_tokens=args.max_new_tokens)
        accepted = out.result.stats.accepted_lengths
        first.append(accepted[0])
        later.extend(accepted[1:])
    print(json.dumps({
        "prompts": len(first), "gamma": args.gamma, "max_new_tokens": args.max_new_tokens,
        "first_round": {"mean_accepted": statistics.mean(first), "position1_rate": sum(a > 0 for a in first) / len(first)},
        "later_rounds": {"rounds": len(later), "mean_accepted": statistics.mean(later),
                         "position1_rate": sum(a > 0 for a in later) / len(later)},
    }, indent=2))


if __name__ == "__main__":
    main()
