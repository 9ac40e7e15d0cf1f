"""A bounded load run of ``minispark serve`` on loopback: C concurrent clients × N requests each, a fixed
prompt mix at temperature 0, target-only vs schedule (the DSpark drafter's chains, Algorithm 1 across the
requests in flight) vs tree (a draft tree per request with the n-gram lookup as a branch, grown together
against the padded verify), each at R = C slots. Modes are interleaved per R in one process on one loaded target. Prints
aggregate tok/s, per-request latency p50/p95, failed and garbled responses, parity failures against the
target-only answer of the same prompt, and the verify budget per request (tokens verified per request
per round, anchor included) and the share of rounds draft-skip left to the target alone, with the hardware
and versions.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/serve_load.py --clients 4,8,16 --requests 2 --max-tokens 32
"""

from __future__ import annotations

import argparse
import json
import platform
import threading
import time
from pathlib import Path

import openai
import torch

from minispark.data.prompts import HELDOUT_FILE, load_prompts
from minispark.server.app import LocalServer, ServeConfig, served_model_id
from minispark.serving.builder import build_serving
from minispark.target.loading import load_target


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def client_load(url: str, model_id: str, clients: int, requests: int, prompts: list[str], max_tokens: int) -> dict:
    """``clients`` threads against the OpenAI-compatible server at ``url``, each sending ``requests`` chat
    completions (T 0) one after another: aggregate tok/s, latencies, failures and the answers by prompt."""
    latencies, answers, failures = [], {}, []
    lock = threading.Lock()
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=600, max_retries=0)

    def worker(c: int) -> None:
        for k in range(requests):
            index = (c * requests + k) % len(prompts)
            start = time.perf_counter()
            try:
                reply = client.chat.completions.create(
                    model=model_id, temperature=0, max_tokens=max_tokens,
                    messages=[{"role": "user", "content": prompts[index]}])
                text, tokens = reply.choices[0].message.content, reply.usage.completion_tokens
            except Exception as exc:  # counted, the run goes on
                with lock:
                    failures.append(f"{type(exc).__name__}: {exc}")
                continue
            with lock:
                latencies.append(time.perf_counter() - start)
                answers.setdefault(index, []).append((text, tokens))

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    tokens = sum(n for rows in answers.values() for _, n in rows)
    return {"clients": clients, "requests": clients * requests, "wall_s": wall, "tokens": tokens,
            "tok_s": tokens / wall, "p50_s": percentile(latencies, 0.5) if latencies else None,
            "p95_s": percentile(latencies, 0.95) if latencies else None, "failed": len(failures),
            "failures": failures[:3], "answers": {i: [t for t, _ in rows] for i, rows in answers.items()}}


def load_run(target, setup, slots: int, clients: int, requests: int, prompts: list[str], max_tokens: int) -> dict:
    """:func:`client_load` against ``minispark serve`` (in this process, ``slots`` requests in flight)."""
    config = ServeConfig(served_model_id(target), slots=slots)
    local = LocalServer(target, setup, config, lifetime_s=1200)
    with local as url:
        run = client_load(url, config.model_id, clients, requests, prompts, max_tokens)
        decoder = local.server.config.app.state.worker.decoder
        budget = decoder.budget_per_request() if decoder is not None else None
        skipped = decoder.skipped_rounds / decoder.rounds if decoder is not None and decoder.rounds else None
    return {"slots": slots, **run, "budget_per_request": budget, "skipped_share": skipped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default="4,8", help="comma-separated concurrency levels (R = clients)")
    parser.add_argument("--requests", type=int, default=2, help="requests per client")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=16, help="the first N held-out prompts (the mix)")
    parser.add_argument("--drafter", default=None, help="drafter directory (default: the shipped one)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sps", type=Path, default=None, help="SPS table for schedule mode (default: the one "
                        "found for this device; `minispark profile --batch-requests` adds the batched verify's grid)")
    parser.add_argument("--modes", default="schedule,tree", help="drafting modes beside target-only (comma-separated)")
    parser.add_argument("--json", action="store_true", help="print the JSON report only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target("embedded", device="cpu")
    prompts = [s.prompt for s in load_prompts(HELDOUT_FILE)[: args.prompts] if s.prompt is not None and not s.images]
    setups = {"target": build_serving(target, "none")}
    for mode in args.modes.split(","):
        setups[mode] = build_serving(target, args.drafter, mode, sps=args.sps)
    drafting = setups[args.modes.split(",")[0]]
    rows = []
    for clients in (int(c) for c in args.clients.split(",")):
        runs = {mode: load_run(target, setup, clients, clients, args.requests, prompts, args.max_tokens)
                for mode, setup in setups.items()}  # interleaved: both modes at this R before the next R
        reference = runs["target"]["answers"]
        for mode, run in runs.items():
            differs = sorted({i for i, texts in run["answers"].items() for text in texts
                              if text != reference.get(i, [text])[0]})
            run["parity_failures"] = sum(text != reference.get(i, [text])[0]
                                         for i, texts in run["answers"].items() for text in texts)
            run["parity_failed_prompts"] = differs
            run["garbled"] = sum(not isinstance(text, str) for texts in run["answers"].values() for text in texts)
            run["mode"] = mode
            rows.append({k: v for k, v in run.items() if k != "answers"})
    report = {"machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                          "torch": torch.__version__, "python": platform.python_version()},
              "target": target.name, "drafter": drafting.drafter_spec,
              "sps_table": drafting.sps_table.device if drafting.sps_table else None,
              "batched_grid": bool(drafting.sps_table and drafting.sps_table.batched),
              "max_tokens": args.max_tokens, "runs": rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(json.dumps(report["machine"]), report["target"], report["drafter"], f"SPS table: {report['sps_table']}")
    print(f"{'R':>3} {'mode':>9} {'reqs':>5} {'tok/s':>7} {'p50 s':>7} {'p95 s':>7} {'failed':>6} {'garbled':>7} "
          f"{'parity✗':>8} {'verify/req':>10} {'skipped':>8}")
    for row in rows:
        budget = f"{row['budget_per_request']:.2f}" if row["budget_per_request"] is not None else "-"
        skipped = f"{row['skipped_share']:.0%}" if row["skipped_share"] is not None else "-"
        print(f"{row['clients']:>3} {row['mode']:>9} {row['requests']:>5} {row['tok_s']:>7.1f} {row['p50_s']:>7.2f} "
              f"{row['p95_s']:>7.2f} {row['failed']:>6} {row['garbled']:>7} {row['parity_failures']:>8} {budget:>10} "
              f"{skipped:>8}")
    for clients in sorted({r["clients"] for r in rows}):
        pair = {r["mode"]: r for r in rows if r["clients"] == clients}
        ratios = ", ".join(f"{mode} {pair[mode]['tok_s'] / pair['target']['tok_s']:.2f}" for mode in pair if mode != "target")
        print(f"R={clients}: aggregate tok/s over target-only: {ratios}")


if __name__ == "__main__":
    main()
