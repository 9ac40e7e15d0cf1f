"""What one ``propose`` (draft a γ-block and draw all γ tokens) costs, lever by lever, against a
target-only step, in one process and interleaved.

Variants: the full vocabulary and the drafter's draft vocabulary, each with float and int8 weights
(``model/draft_quant.py``). The full-vocabulary model has the same config with ``draft_vocab = 0``
and random weights; the cost does not depend on the values. Every proposal follows a real 1-token
target step on a ~230-token context, so the drafter's weights are as cold in the caches as they are
in the decoding loop. Reported: the median of ``--rounds`` (after 2 warm-up rounds), in ms and as a
share of the target step. Issue 10's goal is ≤ 15 % at γ = 7.

    .venv/bin/python benchmarks/propose_cost.py --rounds 10
    .venv/bin/python benchmarks/propose_cost.py --rounds 10 --threads 1 --vocab-sizes 16384,24576,32768
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from dataclasses import replace

import torch

from minispark.model.draft_model import DraftModel
from minispark.model.draft_quant import quantize_int8
from minispark.serving.drafters.dspark import DSparkDrafter
from minispark.serving.generate import default_drafter, make_drafter
from minispark.target.sampling import SamplingConfig
from minispark.target.loading import load_target

CONTEXT = 230  # context rows given to the drafter, and about the target's context length


def variants(target, drafter_dir: str, sizes: list[int]) -> dict[str, DSparkDrafter]:
    """The four drafters {full vocabulary, draft vocabulary} × {float, int8} weights, and float ones of the same
    config, both precisions, at the other draft-vocabulary ``sizes``."""
    shipped = make_drafter(drafter_dir, target, "float")
    embed, head = target.model.get_input_embeddings().weight, target.lm_head.weight
    torch.manual_seed(0)
    full = DraftModel.from_target(replace(shipped.config, draft_vocab=0), embed, head)
    out = {}
    models = [("full vocabulary", full), (f"draft vocabulary {shipped.config.draft_vocab}", shipped.model)]
    models += [(f"draft vocabulary {size}", DraftModel.from_target(replace(shipped.config, draft_vocab=size), embed,
                                                                   head, torch.arange(size))) for size in sizes]
    for name, model in models:
        out[f"{name}, float"] = DSparkDrafter(model)
        int8 = copy.deepcopy(model)
        quantize_int8(int8)
        out[f"{name}, int8"] = DSparkDrafter(int8)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drafter", help="drafter directory (default: the one shipped for the embedded target)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--gamma", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--vocab-sizes", default="", help="other draft-vocabulary sizes to cost, e.g. 16384,32768")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target(None)
    sizes = [int(n) for n in args.vocab_sizes.split(",") if n]
    drafters = variants(target, args.drafter or str(default_drafter(target)), sizes)
    generator = torch.Generator().manual_seed(0)
    some = next(iter(drafters.values()))
    features = torch.randn(CONTEXT, some.config.feature_size, generator=generator)
    ids = torch.randint(0, 1000, (CONTEXT + 1,), generator=generator)
    for drafter in drafters.values():
        drafter.reset(torch.arange(CONTEXT), features, torch.arange(CONTEXT))
    times: dict[tuple[str, float], list[float]] = {(k, t): [] for k in drafters for t in (0.0, 1.0)}
    steps: list[float] = []
    with target.session() as session:
        session.prefill(target.encode(prompt="word " * (CONTEXT - 10)))
        length = session.cache_length
        for r in range(args.rounds + 2):
            for temperature in (0.0, 1.0):
                for name, drafter in drafters.items():
                    start = time.perf_counter()
                    session.step(torch.tensor([5]))
                    steps.append(time.perf_counter() - start)
                    session.crop(length)
                    start = time.perf_counter()
                    drafter.propose(ids, CONTEXT, SamplingConfig(temperature), generator).proposal(args.gamma)
                    if r >= 2:
                        times[(name, temperature)].append(time.perf_counter() - start)
    step = statistics.median(steps)
    rows = [{"drafter": name, "temperature": t, "propose_ms": 1e3 * statistics.median(v),
             "share_of_target_step": statistics.median(v) / step} for (name, t), v in times.items()]
    print(json.dumps({"target_step_ms": 1e3 * step, "gamma": args.gamma, "threads": args.threads, "rows": rows},
                     indent=1))


if __name__ == "__main__":
    main()
