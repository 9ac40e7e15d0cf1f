"""Cache-build throughput vs Hugging Face ``generate`` sampling, side by side in one process.

Both sample the same prompts with the same settings (T 0.7, top-p 0.8, top-k 20) at the same batch
size and token cap, alternating A/B for ``--repeats`` rounds on fresh prompt slices; the cache side
runs ``build_cache`` (regeneration with in-pass feature capture, anchor selection, shard write).
Reported: useful generated tokens per second (up to each answer's EOS) for both, their ratio, and
HF's raw rate (every row runs to the longest answer). The issue's goal is ratio ≥ 0.75.

    .venv/bin/python benchmarks/cache_throughput.py --batch-size 64 --max-new-tokens 128 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import GenerationConfig

from minispark.data.cache import CacheConfig, build_cache
from minispark.data.prompts import load_prompts
from minispark.data.regenerate import collate
from minispark.target.loading import load_target

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "prompts" / "corpus.jsonl"


def hf_round(target, prompts, batch: int, max_new_tokens: int) -> tuple[int, int, float]:
    """(useful tokens, raw tokens, seconds) of HF sampling over ``prompts`` in batches."""
    eos = sorted(target.eos_token_ids)
    pad = target.tokenizer.pad_token_id if target.tokenizer.pad_token_id is not None else eos[0]
    config = GenerationConfig(do_sample=True, temperature=0.7, top_p=0.8, top_k=20, max_new_tokens=max_new_tokens,
                              eos_token_id=eos, pad_token_id=pad)
    useful = raw = 0
    start = time.perf_counter()
    for i in range(0, len(prompts), batch):
        inputs = collate(prompts[i:i + batch], pad)
        new = target.model.generate(**inputs, generation_config=config)[:, inputs["input_ids"].shape[1]:]
        raw += new.numel()
        for row in new:
            hits = torch.isin(row, torch.tensor(eos)).nonzero()
            useful += int(hits[0]) + 1 if len(hits) else len(row)
    return useful, raw, time.perf_counter() - start


def cache_round(target, prompt_file: Path, batch: int, max_new_tokens: int, n: int) -> tuple[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        config = CacheConfig(prompts=prompt_file, out=Path(tmp) / "cache", num_samples=n, batch_size=batch,
                             samples_per_shard=n, max_new_tokens=max_new_tokens, anchors_per_sample=512)
        start = time.perf_counter()
        report = build_cache(config, target=target, log=lambda _: None)
        return report.generated_tokens, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target()
    samples = load_prompts(CORPUS)
    n = args.batch_size
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            part = samples[2 * r * n: (2 * r + 1) * n]  # a fresh slice per round for each side
            prompt_file = Path(tmp) / f"slice{r}.jsonl"
            lines = CORPUS.read_text().splitlines()[(2 * r + 1) * n:(2 * r + 2) * n]
            prompt_file.write_text("\n".join(lines) + "\n")
            prompts = [target.encode(**s.encode_kwargs()) for s in part]
            useful, raw, hf_s = hf_round(target, prompts, n, args.max_new_tokens)
            tokens, cache_s = cache_round(target, prompt_file, n, args.max_new_tokens, n)
            rows.append({"hf_tok_s": useful / hf_s, "hf_raw_tok_s": raw / hf_s, "cache_tok_s": tokens / cache_s})
            print(json.dumps(rows[-1]), flush=True)
    hf = statistics.median(r["hf_tok_s"] for r in rows)
    cache = statistics.median(r["cache_tok_s"] for r in rows)
    print(f"batch {n}, cap {args.max_new_tokens}: HF generate sampling {hf:.1f} useful tok/s "
          f"({statistics.median(r['hf_raw_tok_s'] for r in rows):.1f} raw), minispark cache {cache:.1f} tok/s "
          f"(generation + features + shards) = {cache / hf:.2f}× HF")


if __name__ == "__main__":
    main()
