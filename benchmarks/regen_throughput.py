"""Answer regeneration vs Hugging Face ``generate`` sampling, side by side in one process, interleaved.

Both sample the same corpus prompts with the same settings (T 0.7, top-p 0.8, top-k 20) and the same
token cap, ``--batch-size`` rows at a time: HF ``generate(do_sample=True)`` in fixed batches (every row
runs until the batch's longest answer ends), minispark's ``iter_answers`` with refill (a finished row's
slot takes the next prompt; preallocated KV; inverse-CDF sampling). Each repeat runs HF then minispark
on the same fresh slice of ``--prompts-per-side`` prompts, alternating which side goes first; a third
side runs minispark's sampler with eager linears, to show what the packed runtime adds. Reported:
useful generated tokens per second (answer tokens up to EOS) for each side, their ratio, medians.

    .venv/bin/python benchmarks/regen_throughput.py --batch-size 64 --max-new-tokens 64 --prompts-per-side 128
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import transformers
from transformers import GenerationConfig

from minispark.data.answer_sampler import iter_answers
from minispark.data.prompts import load_prompts
from minispark.data.regenerate import collate, sample_seed
from minispark.target.runtime import eager_linears
from minispark.target.sampling import SamplingConfig
from minispark.target.loading import load_target

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "prompts" / "corpus.jsonl"


def hf_side(target, prompts, batch: int, max_new_tokens: int) -> tuple[int, float]:
    """(useful answer tokens, seconds) of HF sampling over ``prompts`` in fixed batches."""
    eos = sorted(target.eos_token_ids)
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else eos[0]
    config = GenerationConfig(do_sample=True, temperature=0.7, top_p=0.8, top_k=20, max_new_tokens=max_new_tokens,
                              eos_token_id=eos, pad_token_id=pad)
    useful = 0
    start = time.perf_counter()
    for i in range(0, len(prompts), batch):
        inputs = collate(prompts[i:i + batch], pad)
        with eager_linears(target.model):  # HF as HF runs it
            new = target.model.generate(**inputs, generation_config=config)[:, inputs["input_ids"].shape[1]:]
        for row in new:
            hits = torch.isin(row, torch.tensor(eos)).nonzero()
            useful += int(hits[0]) + 1 if len(hits) else len(row)
    return useful, time.perf_counter() - start


def minispark_eager_side(target, prompts, batch: int, max_new_tokens: int) -> tuple[int, float]:
    """minispark's sampler with the target's linears run eagerly (what the packed runtime saves)."""
    with eager_linears(target.model):
        return minispark_side(target, prompts, batch, max_new_tokens)


def minispark_side(target, prompts, batch: int, max_new_tokens: int) -> tuple[int, float]:
    order = sorted(range(len(prompts)), key=lambda i: (prompts[i].length, i))  # as ``answers`` enters a shard
    start = time.perf_counter()
    tokens = sum(len(a.tokens) for _, a in iter_answers(
        target, {i: prompts[i] for i in order}, {i: sample_seed(0, i, 0) for i in order},
        SamplingConfig(0.7, top_k=20, top_p=0.8), max_new_tokens, batch))
    return tokens, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompts-per-side", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"# {platform.processor() or platform.machine()}, {args.threads} threads, torch {torch.__version__}, "
          f"transformers {transformers.__version__}", flush=True)
    target = load_target()
    samples = load_prompts(CORPUS)
    n = args.prompts_per_side
    rows = []
    for r in range(args.repeats):
        prompts = [target.encode(**s.encode_kwargs()) for s in samples[r * n:(r + 1) * n]]
        sides = [("hf", hf_side), ("minispark-eager", minispark_eager_side), ("minispark", minispark_side)]
        row = {}
        for name, side in sides if r % 2 == 0 else sides[::-1]:
            tokens, seconds = side(target, prompts, args.batch_size, args.max_new_tokens)
            row[name] = tokens / seconds
        row["ratio"] = row["minispark"] / row["hf"]
        row["packed_gain"] = row["minispark"] / row["minispark-eager"]
        rows.append(row)
        print(json.dumps({k: round(v, 2) for k, v in row.items()}), flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"batch {args.batch_size}, cap {args.max_new_tokens}, {n} prompts per side x {args.repeats}: HF generate "
          f"{med['hf']:.1f} useful tok/s, minispark answers {med['minispark']:.1f} tok/s ({target.runtime} runtime) = "
          f"{med['ratio']:.2f}x HF; eager runtime {med['minispark-eager']:.1f} tok/s")


if __name__ == "__main__":
    main()
