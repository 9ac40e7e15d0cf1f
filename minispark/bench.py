"""Decoding benchmarks, measured side by side in one process, interleaved, with medians and ratios.

``bench_baselines`` compares HF ``generate`` greedy, minispark with no drafter (the loop's own
overhead), minispark with n-gram lookup, and HF's prompt-lookup decoding on the same prompts; the
order of the methods rotates per prompt so slow drift (thermal, other processes) spreads evenly.
``bench_drafter`` reports τ and per-position acceptance of a drafter at T=0 and T=1.

    minispark bench --max-new-tokens 128
"""

from __future__ import annotations

import platform
import statistics
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import torch
import transformers

from minispark.drafters.base import FixedLength
from minispark.engine import GenerationStats, speculative_generate
from minispark.generate import make_drafter
from minispark.sampling import SamplingConfig, make_generator
from minispark.target import PromptInputs, Target

BENCH_PROMPTS = [
    "Add type hints and a docstring to this function:\n\ndef area(width, height):\n    return width * height\n",
    "Explain what a hash map is and when to use one.",
    "Rewrite this sentence in the passive voice: The committee approved the new budget on Monday.",
    "Write a Python function that checks whether a string is a palindrome, with tests.",
    "Summarize: The city council met on Tuesday to discuss the new park. Residents asked for more trees, "
    "a playground and better lighting. The council agreed to fund the playground this year.",
    "List the planets of the solar system in order, with one fact about each.",
]


@dataclass
class MethodTimes:
    """Per-prompt wall times and token counts for one method."""

    seconds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)
    stats: list[GenerationStats] = field(default_factory=list)

    def summary(self) -> dict:
        rates = [n / s for n, s in zip(self.tokens, self.seconds)]
        out = {
            "tokens_per_s": sum(self.tokens) / sum(self.seconds),
            "median_tokens_per_s": statistics.median(rates),
            "tokens": sum(self.tokens),
        }
        if self.stats:
            rounds = sum(s.rounds for s in self.stats)
            out["tau"] = (sum(sum(s.accepted_lengths) for s in self.stats) + rounds) / rounds
        return out


def environment() -> dict:
    """Hardware and versions a benchmark ran on."""
    from minispark.profile import device_name

    return {"device": device_name(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}


def _hf_generate(target: Target, inputs: PromptInputs, max_new_tokens: int, lookup: int | None) -> list[int]:
    extra = {"prompt_lookup_num_tokens": lookup} if lookup else {}
    out = target.model.generate(inputs.input_ids, attention_mask=torch.ones_like(inputs.input_ids),
                                max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0,
                                eos_token_id=sorted(target.eos_token_ids), **inputs.model_kwargs, **extra)
    return out[0, inputs.length:].tolist()


def bench_baselines(target: Target, prompts: Sequence[str] = BENCH_PROMPTS, max_new_tokens: int = 128,
                    gamma: int = 7, warmup: bool = True,
                    progress: Callable[[str], None] | None = None) -> dict:
    """HF greedy vs minispark none/lookup vs HF prompt lookup; greedy, so all outputs must agree."""

    def minispark_run(drafter_name: str) -> Callable[[PromptInputs], tuple[list[int], GenerationStats]]:
        def run(inputs: PromptInputs) -> tuple[list[int], GenerationStats]:
            drafter = make_drafter(drafter_name, target)
            policy = FixedLength(0 if drafter_name == "none" else gamma)
            with target.session(drafter.feature_layers) as session:
                result = speculative_generate(session, inputs, drafter, SamplingConfig(), policy,
                                              max_new_tokens=max_new_tokens, eos_ids=target.eos_token_ids)
            return result.token_ids, result.stats
        return run

    methods: dict[str, Callable[[PromptInputs], tuple[list[int], GenerationStats | None]]] = {
        "hf_greedy": lambda inputs: (_hf_generate(target, inputs, max_new_tokens, None), None),
        "minispark_none": minispark_run("none"),
        "minispark_lookup": minispark_run("lookup"),
        "hf_prompt_lookup": lambda inputs: (_hf_generate(target, inputs, max_new_tokens, gamma), None),
    }
    encoded = [target.encode(prompt=p) for p in prompts]
    if warmup:
        for run in methods.values():
            run(target.encode(prompt="Hi"))
    times = {name: MethodTimes() for name in methods}
    names = list(methods)
    for index, inputs in enumerate(encoded):
        rotation = names[index % len(names):] + names[: index % len(names)]
        for name in rotation:
            start = time.perf_counter()
            ids, stats = methods[name](inputs)
            elapsed = time.perf_counter() - start
            record = times[name]
            record.seconds.append(elapsed)
            record.tokens.append(len(ids))
            record.outputs.append(ids)
            if stats is not None and name != "minispark_none":
                record.stats.append(stats)
            if progress:
                progress(f"prompt {index + 1}/{len(encoded)} {name}: {len(ids) / elapsed:.1f} tok/s")
    summary = {name: record.summary() for name, record in times.items()}
    reference = times["hf_greedy"].outputs
    identical = all(times[name].outputs == reference for name in names)
    base = summary["hf_greedy"]["tokens_per_s"]
    for row in summary.values():
        row["ratio_to_hf_greedy"] = row["tokens_per_s"] / base
    return {"methods": summary, "identical_outputs": identical, "prompts": len(encoded),
            "max_new_tokens": max_new_tokens, "gamma": gamma, "target": target.name,
            "environment": environment()}


@contextmanager
def timed_methods(obj: object, names: Sequence[str]) -> Iterator[list[float]]:
    """Accumulate the wall time spent in ``obj``'s methods ``names`` (instance-level wrappers)."""
    spent = [0.0]
    for name in names:
        original = getattr(obj, name)

        def timed(*args, _original=original, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        setattr(obj, name, timed)
    try:
        yield spent
    finally:
        for name in names:
            delattr(obj, name)


def bench_drafter(target: Target, drafter_spec: str, prompts: Sequence[PromptInputs], max_new_tokens: int = 128,
                  gamma: int = 7, seed: int = 0, temperatures: Sequence[float] = (0.0, 1.0)) -> dict:
    """τ, per-position acceptance and tok/s of one drafter on held-out prompts, at each temperature.

    For a DSpark drafter with a sequential head it also reports the head's share of round time
    (time inside the head's bias computations over the whole decode wall time)."""
    drafter = make_drafter(drafter_spec, target)
    report: dict = {"drafter": drafter_spec, "target": target.name, "gamma": gamma, "prompts": len(prompts),
                    "environment": environment()}
    head = getattr(getattr(drafter, "model", None), "markov", None)
    for temperature in temperatures:
        sampling = SamplingConfig(temperature)
        generator = make_generator(seed, target.device)
        proposed: list[int] = []
        accepted: list[int] = []
        tokens, seconds = 0, 0.0
        with timed_methods(head, ("prev_embedding", "step")) if head is not None else nullcontext([0.0]) as spent:
            for inputs in prompts:
                with target.session(drafter.feature_layers) as session:
                    result = speculative_generate(session, inputs, drafter, sampling, FixedLength(gamma),
                                                  max_new_tokens=max_new_tokens, eos_ids=target.eos_token_ids,
                                                  generator=generator)
                proposed += result.stats.proposed_lengths
                accepted += result.stats.accepted_lengths
                tokens += result.stats.new_tokens
                seconds += result.stats.wall_s
        merged = GenerationStats(rounds=len(proposed), accepted_lengths=accepted, proposed_lengths=proposed,
                                 new_tokens=tokens, wall_s=seconds)
        report[f"T={temperature:g}"] = {"tau": merged.tau, "acceptance_per_position": merged.acceptance_per_position,
                                        "tokens_per_s": merged.tokens_per_s, "rounds": merged.rounds,
                                        "sequential_head_share": spent[0] / seconds if head is not None else None}
    return report


def bench_policies(target: Target, drafter_spec: str, prompts: Sequence[PromptInputs], max_new_tokens: int = 128,
                   gammas: Sequence[int] = tuple(range(1, 8)), thresholds: Sequence[float] = (0.3, 0.5, 0.7, 0.9),
                   temperature: float = 0.0, sps_path: str | None = None, seed: int = 0,
                   progress: Callable[[str], None] | None = None) -> dict:
    """Fixed γ, threshold and schedule modes side by side: every prompt runs every mode, in an
    order rotated per prompt, so drift spreads evenly. Reports tok/s, τ and acceptance rate."""
    from minispark.calibrate import drafter_calibration
    from minispark.profile import serving_table
    from minispark.schedule import ScheduledLength, ThresholdLength, scheduler_cost_us

    drafter = make_drafter(drafter_spec, target)
    max_gamma = max(gammas)
    calibration = drafter_calibration(drafter_spec)
    table = serving_table(target, sps_path)
    modes: dict[str, Callable[[], object]] = {f"fixed γ={g}": (lambda g=g: FixedLength(g)) for g in gammas}
    if drafter.has_confidence:
        modes.update({f"threshold {t:g}": (lambda t=t: ThresholdLength(t, max_gamma)) for t in thresholds})
        modes["schedule"] = lambda: ScheduledLength(table, max_gamma, calibration)
    sampling = SamplingConfig(temperature)
    names = list(modes)
    runs: dict[str, MethodTimes] = {name: MethodTimes() for name in names}
    for index, inputs in enumerate(prompts):
        rotation = names[index % len(names):] + names[: index % len(names)]
        for name in rotation:
            with target.session(drafter.feature_layers) as session:
                result = speculative_generate(session, inputs, drafter, sampling, modes[name](),
                                              max_new_tokens=max_new_tokens, eos_ids=target.eos_token_ids,
                                              generator=make_generator(seed + index, target.device))
            record = runs[name]
            record.seconds.append(result.stats.wall_s)
            record.tokens.append(result.stats.new_tokens)
            record.stats.append(result.stats)
            if progress:
                progress(f"prompt {index + 1}/{len(prompts)} {name}: {result.stats.tokens_per_s:.1f} tok/s")
    summary = {}
    for name, record in runs.items():
        row = record.summary()
        proposed = sum(sum(s.proposed_lengths) for s in record.stats)
        accepted = sum(sum(s.accepted_lengths) for s in record.stats)
        row["acceptance_rate"] = accepted / proposed if proposed else float("nan")
        row["mean_verified"] = proposed / sum(s.rounds for s in record.stats)
        summary[name] = row
    best_fixed = max((n for n in names if n.startswith("fixed")), key=lambda n: summary[n]["tokens_per_s"])
    return {"modes": summary, "best_fixed": best_fixed, "temperature": temperature, "prompts": len(prompts),
            "drafter": drafter_spec, "target": target.name, "sps_table": table.device,
            "calibrated": calibration is not None, "scheduler_cost": scheduler_cost_us(),
            "environment": environment()}
