"""``minispark bench``: every decoding mode on every prompt, side by side in one process.

Modes: ``target`` (minispark with no drafter, the reference every ratio and parity is taken
against), ``hf`` (transformers ``generate``), ``hf-lookup`` (its prompt-lookup decoding),
``lookup`` (minispark's n-gram drafter) and, with a trained drafter, ``fixed`` (γ drafts every
round), ``threshold`` (stop at the first c_k below a threshold), ``schedule`` (Algorithm 1 on the
SPS table's monotone envelope with draft-skip, what ``generate`` serves with), ``schedule-noskip``
(the same, drafting every round: the comparison draft-skip has to win), ``schedule-raw``
(Algorithm 1 on the raw table, with draft-skip: the comparison the envelope has to win), and the
hybrid drafter (``serving/drafters/hybrid.py``: per round the lookup or the trained drafter) as
``hybrid`` (fixed γ, sources priced by expected tokens) and ``hybrid-schedule`` (priced on the SPS
table, schedule mode with draft-skip). ``--drafter hybrid`` runs the DSpark modes with its trained
drafter and adds the two hybrid modes.

Each repeat runs every prompt in every mode; the order rotates per prompt and repeat, so slow
drift (heat, neighbours) spreads evenly over the modes. Per mode: total and median tok/s, speedup
over ``target`` (overall and on the worst prompt), τ, acceptance per position, drafts verified per
round, rounds draft-skipped, the per-round time split of the loop (propose / verify /
accept+commit ms, target-only ms per token and draft_share = propose ms ÷ target-only ms per
token), rounds and τ by source (the drafter, the hybrid's lookup / dspark / plain, or skipped) and, at T = 0, parity: whether every output equals ``target``'s token for token. At T > 0 outputs are samples and no parity is
claimed. The report names the hardware, versions and load the numbers were taken on, and the weights
the DSpark drafter ran with (`drafter_precision`).

    minispark bench --modes target,hf,hf-lookup,lookup --num-prompts 2 --max-new-tokens 32
"""

from __future__ import annotations

import os
import platform
import statistics
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
import transformers

import minispark
from minispark.data.regenerate import without_checkpoint_defaults
from minispark.core.defaults import DEFAULT_THRESHOLD
from minispark.serving.drafters.base import Drafter, NoDrafter, resolve_gamma
from minispark.serving.drafters.hybrid import HybridDrafter, make_hybrid
from minispark.serving.draft_skip import DraftSkip
from minispark.serving.engine import GenerationStats, speculative_generate
from minispark.core.errors import MinisparkError, option
from minispark.serving.generate import make_drafter
from minispark.target.runtime import eager_linears
from minispark.target.sampling import SamplingConfig, make_generator
from minispark.serving.draft_tree import TreePolicy
from minispark.serving.schedule import FixedLength, LengthPolicy
from minispark.target.loading import Target
from minispark.target.session import PromptInputs

MODES = ("target", "hf", "hf-lookup", "lookup", "fixed", "threshold", "schedule", "schedule-noskip", "schedule-raw",
         "hybrid", "hybrid-schedule", "tree", "tree-skip", "tree-flat")
BASELINE_MODES = ["target", "hf", "hf-lookup", "lookup"]
DRAFTER_MODES = ("fixed", "threshold", "schedule", "schedule-noskip", "schedule-raw", "hybrid", "hybrid-schedule",
                 "tree", "tree-skip", "tree-flat")
CONFIDENCE_MODES = ("threshold", "schedule", "schedule-noskip", "schedule-raw", "hybrid-schedule")
HYBRID_MODES = ("hybrid", "hybrid-schedule")
#: tree rounds: "tree" admits nodes by the Θ rule on the SPS table, "tree-skip" adds draft-skip (a skipped round
#: verifies the lookup branch alone), "tree-flat" admits on a flat curve up to ``FLAT_TREE_DRAFTS`` nodes (what a
#: GPU's verify of up to ~32 tokens at the cost of one step gets)
TREE_MODES = ("tree", "tree-skip", "tree-flat")
SCHEDULE_MODES = ("schedule", "schedule-noskip", "schedule-raw", "hybrid-schedule", "tree", "tree-skip")  # priced by SPS

BENCH_PROMPTS = [
    "Add type hints and a docstring to this function:\n\ndef area(width, height):\n    return width * height\n",
    "Explain what a hash map is and when to use one.",
    "Rewrite this sentence in the passive voice: The committee approved the new budget on Monday.",
    "Write a Python function that checks whether a string is a palindrome, with tests.",
    "Summarize: The city council met on Tuesday to discuss the new park. Residents asked for more trees, "
    "a playground and better lighting. The council agreed to fund the playground this year.",
    "List the planets of the solar system in order, with one fact about each.",
]

#: ``run(inputs, max_new_tokens, seed)`` → (generated ids, loop stats or None for HF modes).
Runner = Callable[[PromptInputs, int, int], tuple[list[int], GenerationStats | None]]
#: ``progress(done, total, message)``, as the profiler's.
ProgressFn = Callable[[int, int, str], None]


@dataclass
class BenchConfig:
    """What to run: the modes (``target`` is always run, first), generation and drafting settings."""

    modes: list[str] = field(default_factory=lambda: list(BASELINE_MODES))
    max_new_tokens: int = 128
    sampling: SamplingConfig = SamplingConfig()
    gamma: int | None = None  # None: the drafter's block size (build_modes resolves it)
    threshold: float = DEFAULT_THRESHOLD
    repeats: int = 1
    seed: int = 0
    warmup: bool = True

    def __post_init__(self) -> None:
        unknown = [m for m in self.modes if m not in MODES]
        if unknown:
            raise MinisparkError(f"{option('modes')}: unknown mode {unknown[0]!r} (choose from {', '.join(MODES)})")
        self.modes = ["target"] + [m for m in dict.fromkeys(self.modes) if m != "target"]
        for ok, message in ((self.max_new_tokens >= 1, f"{option('max_new_tokens')} must be >= 1"),
                            (self.gamma is None or self.gamma >= 1, f"{option('gamma')} must be >= 1"),
                            (self.repeats >= 1, f"{option('repeats')} must be >= 1"),
                            (0.0 <= self.threshold <= 1.0, f"{option('threshold')} must be in [0, 1]")):
            if not ok:
                raise MinisparkError(message)


@dataclass
class Mode:
    """One benchmarked way of generating; ``drafting`` modes report τ and acceptance."""

    name: str
    run: Runner
    drafting: bool = False
    precision: str | None = None  # a DSpark drafter's weights (int8 / float32 / ...), None otherwise


@dataclass
class BenchPrompt:
    inputs: PromptInputs
    label: str


@dataclass
class Run:
    """One mode on one prompt in one repeat."""

    prompt: int
    ids: list[int]
    seconds: float
    stats: GenerationStats | None


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``run_bench`` once at least one repeat had finished: ``report`` covers the finished repeats
    (its ``interrupted`` key says how many of how many), so the minutes they took are not lost."""

    def __init__(self, report: dict) -> None:
        super().__init__()
        self.report = report


# ---------------------------------------------------------------------- prompts and modes
#: Prompts ``bench --prompts FILE`` takes from the file's tail when ``--num-prompts`` is not given.
FILE_PROMPTS = 16


def builtin_prompts(target: Target, limit: int | None = None) -> list[BenchPrompt]:
    """The first ``limit`` built-in prompts (all of them by default; asking for more says so)."""
    if limit is not None and limit > len(BENCH_PROMPTS):
        _fewer_prompts(limit, len(BENCH_PROMPTS), "the built-in set", " (give --prompts FILE for more)")
    return [BenchPrompt(target.encode(prompt=p), p.split("\n")[0][:40])
            for p in BENCH_PROMPTS[: limit or len(BENCH_PROMPTS)]]


def file_prompts(target: Target, path: str | Path, limit: int | None = None,
                 category: str | None = None) -> list[BenchPrompt]:
    """The last ``limit`` prompts of a prompt file (default ``FILE_PROMPTS``; the held-out tail, as
    ``calibrate`` reads it), only those of ``category`` when given (e.g. chat or code of
    ``examples/prompts/heldout.jsonl``). Image prompts a text-only target cannot take, and a ``limit``
    past what the file has, each get a one-line warning."""
    from minispark.data.prompts import encode_within_context, load_prompts, usable_samples

    samples = usable_samples(target, [s for s in load_prompts(path) if category is None or s.category == category],
                             path)
    where = f" of category {category!r}" if category else ""
    if not samples:
        raise MinisparkError(f"{option('prompts')} {path}: no prompt{where} usable with target {target.name}")
    if limit is not None and limit > len(samples):
        _fewer_prompts(limit, len(samples), str(path), where)
    return [BenchPrompt(encode_within_context(target, s, path), s.id or s.category or f"line {s.line}")
            for s in samples[-(limit or FILE_PROMPTS):]]


def _fewer_prompts(asked: int, have: int, source: str, where: str = "") -> None:
    warnings.warn(f"--num-prompts {asked}: {source} has only {have} usable prompt{'s' if have > 1 else ''}{where}; "
                  f"using the {have} it has", stacklevel=3)


def context_budgets(target: Target, prompt_lengths: Sequence[int], max_new_tokens: int) -> list[int]:
    """``max_new_tokens`` for each prompt, capped to the room the target's context leaves after it (one notice
    when any is): past it a model that never emits EOS (a random one, a degenerate loop) decodes garbage at
    positions it never saw, each step slower than the last. The prompt files refuse a prompt that fills it."""
    limit = target.context_limit
    budgets = [target.room(n, max_new_tokens) for n in prompt_lengths]
    if budgets and min(budgets) < max_new_tokens:
        room = f"{min(budgets)}" if min(budgets) == max(budgets) else f"{min(budgets)} to {max(budgets)}"
        warnings.warn(f"--max-new-tokens {max_new_tokens}: {target.name}'s context of {limit} leaves room for "
                      f"{room} tokens after the prompts; generating at most that", stacklevel=2)
    return budgets


def minispark_mode(name: str, target: Target, drafter: Drafter, policy: Callable[[], LengthPolicy | TreePolicy],
                   sampling: SamplingConfig, drafting: bool = True, draft_skip: bool = False) -> Mode:
    """``policy()`` builds each run's length policy; ``draft_skip`` gives each run a fresh :class:`DraftSkip`."""
    def run(inputs: PromptInputs, max_new_tokens: int, seed: int) -> tuple[list[int], GenerationStats]:
        with target.session(drafter.feature_layers) as session:
            result = speculative_generate(session, inputs, drafter, sampling, policy(), max_new_tokens=max_new_tokens,
                                          eos_ids=target.eos_token_ids, generator=make_generator(seed, target.device),
                                          skip=DraftSkip() if draft_skip else None)
        return result.token_ids, result.stats

    return Mode(name, run, drafting, getattr(drafter, "precision", None))


def hf_mode(name: str, target: Target, sampling: SamplingConfig, lookup: int | None) -> Mode:
    """transformers ``generate`` (greedy, or sampling with the same transform), optionally with
    prompt-lookup decoding of ``lookup`` tokens."""
    extra = {"prompt_lookup_num_tokens": lookup} if lookup else {}
    if sampling.greedy:
        extra["do_sample"] = False
    else:
        extra.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)

    def run(inputs: PromptInputs, max_new_tokens: int, seed: int) -> tuple[list[int], None]:
        torch.manual_seed(seed)
        # HF as HF runs it, whatever runtime minispark's modes use, and without the checkpoint's generation
        # defaults (a repetition penalty would make it sample another distribution than every other mode)
        with eager_linears(target.model), without_checkpoint_defaults(target.model):
            out = target.model.generate(inputs.input_ids, attention_mask=torch.ones_like(inputs.input_ids),
                                        max_new_tokens=max_new_tokens, pad_token_id=0,
                                        eos_token_id=sorted(target.eos_token_ids), **inputs.model_kwargs, **extra)
        return out[0, inputs.length:].tolist(), None

    return Mode(name, run, drafting=False)


def build_modes(target: Target, config: BenchConfig, drafter_spec: str | None = None,
                sps_path: str | Path | None = None, strict: bool = False) -> tuple[list[Mode], list[str]]:
    """The runnable modes of ``config.modes`` and one-line notices for those skipped (and the
    builder's hints). ``config.gamma`` is resolved here (the drafter's block size by default), so
    the report records the γ that ran."""
    from minispark.serving.builder import build_serving

    sampling = config.sampling
    notices: list[str] = []
    setup = None
    if drafter_spec is not None and any(m in DRAFTER_MODES for m in config.modes):
        setup = build_serving(target, drafter_spec, None, config.gamma, config.threshold,
                              None if sps_path is None else Path(sps_path), sampling, strict, side_by_side=config.modes)
        notices += setup.hints
        config.gamma = setup.gamma
    lookup = make_drafter("lookup", target)
    config.gamma = resolve_gamma(lookup, "lookup", config.gamma)
    gamma = config.gamma
    modes = []
    for name in config.modes:
        if name == "target":
            modes.append(minispark_mode(name, target, NoDrafter(), lambda: FixedLength(0), sampling, drafting=False))
        elif name in ("hf", "hf-lookup"):
            modes.append(hf_mode(name, target, sampling, gamma if name == "hf-lookup" else None))
        elif name == "lookup":
            modes.append(minispark_mode(name, target, lookup, lambda: FixedLength(gamma), sampling))
        elif setup is None:
            notices.append(f"skipping {name}: it needs a trained drafter (--drafter DIR)")
        elif name in CONFIDENCE_MODES and not setup.drafter.has_confidence:
            notices.append(f"skipping {name}: drafter {drafter_spec} has no confidence head")
        elif name in HYBRID_MODES:
            modes.append(hybrid_mode(name, target, setup, sampling))
        elif name in TREE_MODES:
            flat = name == "tree-flat"
            modes.append(minispark_mode(name, target, trained(setup.drafter),
                                        lambda f=flat: setup.policy_for("tree", flat=f), sampling,
                                        draft_skip=name == "tree-skip"))
        else:
            mode = "schedule" if name.startswith("schedule") else name
            envelope = name != "schedule-raw"
            setup.policy_for(mode, envelope)  # refuses a table too short for γ, before any run
            modes.append(minispark_mode(name, target, trained(setup.drafter),
                                        lambda m=mode, e=envelope: setup.policy_for(m, e), sampling,
                                        draft_skip=mode == "schedule" and name != "schedule-noskip"))
    return modes, notices


def trained(drafter: Drafter) -> Drafter:
    """The trained drafter the DSpark modes run: a hybrid's own (``--drafter hybrid``), else ``drafter``."""
    return drafter.model if isinstance(drafter, HybridDrafter) else drafter


def hybrid_mode(name: str, target: Target, setup, sampling: SamplingConfig) -> Mode:
    """``hybrid`` (fixed γ, sources priced on a flat curve) or ``hybrid-schedule`` (priced on the SPS
    table, schedule mode with draft-skip), around the setup's trained drafter."""
    schedule = name == "hybrid-schedule"
    hybrid = make_hybrid(trained(setup.drafter))
    hybrid.price_with(setup.schedule_table if schedule else None, setup.gamma, setup.calibration)
    mode = "schedule" if schedule else "fixed"
    setup.policy_for(mode)  # refuses a table too short for γ, before any run
    return minispark_mode(name, target, hybrid, lambda: setup.policy_for(mode), sampling, draft_skip=schedule)


# ---------------------------------------------------------------------- running
def run_bench(target: Target, modes: Sequence[Mode], prompts: Sequence[BenchPrompt], config: BenchConfig,
              progress: ProgressFn | None = None, *, drafter: str | None = None,
              notices: Sequence[str] = ()) -> dict:
    """Run every mode on every prompt ``config.repeats`` times, interleaved; the report as a dict.

    ``modes[0]`` must be ``target``: speedups, parity and target-only ms per token refer to it. Ctrl-C after
    a repeat has finished raises :class:`BenchInterrupted` carrying the report of the finished repeats (a
    repeat cut short is left out: its modes ran on different prompts); before that, KeyboardInterrupt.
    """
    if not modes or modes[0].name != "target":
        raise ValueError("run_bench: the first mode must be 'target' (the reference)")
    if not prompts:
        raise MinisparkError("bench: no prompts to run")
    load_before = _load_average()
    if config.warmup:  # first calls pay one-off costs (allocator, kernels, lazy imports)
        warm = target.encode(prompt="Hi")
        for mode in modes:
            mode.run(warm, min(8, config.max_new_tokens), config.seed)
    runs: dict[str, list[Run]] = {mode.name: [] for mode in modes}
    budgets = context_budgets(target, [prompt.inputs.length for prompt in prompts], config.max_new_tokens)
    total, done = config.repeats * len(prompts) * len(modes), 0
    for repeat in range(config.repeats):
        try:
            for index, prompt in enumerate(prompts):
                turn = repeat * len(prompts) + index
                seed = config.seed + turn  # the same seed for every mode on this prompt and repeat
                for mode in list(modes[turn % len(modes):]) + list(modes[: turn % len(modes)]):
                    start = time.perf_counter()
                    ids, stats = mode.run(prompt.inputs, budgets[index], seed)
                    seconds = time.perf_counter() - start
                    runs[mode.name].append(Run(index, ids, seconds, stats))
                    done += 1
                    if progress is not None:
                        progress(done, total, f"{mode.name} · prompt {index + 1}/{len(prompts)} · "
                                              f"{len(ids) / seconds:.1f} tok/s")
        except KeyboardInterrupt:
            if repeat == 0:
                raise
            kept = {name: mode_runs[: repeat * len(prompts)] for name, mode_runs in runs.items()}
            report = _report(target, modes, kept, prompts, config, drafter, notices, load_before)
            report["interrupted"] = {"repeats_done": repeat, "repeats_asked": config.repeats}
            raise BenchInterrupted(report) from None
    return _report(target, modes, runs, prompts, config, drafter, notices, load_before)


def _report(target: Target, modes: Sequence[Mode], runs: dict[str, list[Run]], prompts: Sequence[BenchPrompt],
            config: BenchConfig, drafter: str | None, notices: Sequence[str], load_before: float | None) -> dict:
    """The report of ``runs`` (whole repeats: every mode on every prompt)."""
    return {
        "summary": _summary(modes, runs, config),
        "prompts": _prompt_rows(modes, runs, prompts, config),
        "target": target.name,
        "target_identity": target.identity(),
        "drafter": drafter,
        "drafter_precision": next((m.precision for m in modes if m.precision), None),
        "settings": {**{k: v for k, v in asdict(config).items() if k != "sampling"}, **asdict(config.sampling),
                     "num_prompts": len(prompts), "order": "rotated per prompt and repeat"},
        "notices": list(notices),
        "hardware": _hardware(target, load_before),
        "versions": {"minispark": minispark.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__, "python": platform.python_version()},
    }


def _merged(stats: list[GenerationStats]) -> GenerationStats:
    merged = GenerationStats()
    for s in stats:
        merged.rounds += s.rounds
        merged.accepted_lengths += s.accepted_lengths
        merged.proposed_lengths += s.proposed_lengths
        merged.new_tokens += s.new_tokens
        merged.propose_s += s.propose_s
        merged.verify_s += s.verify_s
        merged.accept_commit_s += s.accept_commit_s
        merged.skipped_rounds += s.skipped_rounds
        merged.sources += s.sources
    return merged


def _summary(modes: Sequence[Mode], runs: dict[str, list[Run]], config: BenchConfig) -> dict:
    reference = {run.prompt: run.ids for run in runs["target"]}  # repeat 0 wins: later ones must match it
    target_loop = _merged([run.stats for run in runs["target"]])
    target_ms = 1e3 * (target_loop.propose_s + target_loop.verify_s + target_loop.accept_commit_s) / target_loop.rounds
    by_prompt = {name: _per_prompt_rate(mode_runs) for name, mode_runs in runs.items()}
    base_rate = sum(len(r.ids) for r in runs["target"]) / sum(r.seconds for r in runs["target"])
    summary = {}
    for mode in modes:
        mode_runs = runs[mode.name]
        rate = sum(len(r.ids) for r in mode_runs) / sum(r.seconds for r in mode_runs)
        row: dict = {
            "tokens_per_s": rate,
            "median_tokens_per_s": statistics.median(len(r.ids) / r.seconds for r in mode_runs),
            "speedup_vs_target": rate / base_rate,
            "worst_prompt_speedup": min(by_prompt[mode.name][p] / by_prompt["target"][p] for p in by_prompt["target"]),
            "tokens": sum(len(r.ids) for r in mode_runs),
            "seconds": sum(r.seconds for r in mode_runs),
            "runs": len(mode_runs),
        }
        stats = [r.stats for r in mode_runs if r.stats is not None]
        loop = _merged(stats) if stats else None
        if mode.drafting and loop is not None and loop.rounds:
            row.update(tau=loop.tau, acceptance_per_position=loop.acceptance_per_position,
                       drafts_per_round=sum(loop.proposed_lengths) / loop.rounds, rounds=loop.rounds,
                       skipped_rounds=loop.skipped_rounds, by_source=loop.by_source)
        elif mode.drafting:
            row.update(tau=None, acceptance_per_position=None, drafts_per_round=None, rounds=None,
                       skipped_rounds=None, by_source=None)
        timed = loop is not None and loop.rounds > 0  # HF modes have no loop to split
        propose_ms = 1e3 * loop.propose_s / loop.rounds if timed else None
        row.update(propose_ms=propose_ms,
                   verify_ms=1e3 * loop.verify_s / loop.rounds if timed else None,
                   accept_commit_ms=1e3 * loop.accept_commit_s / loop.rounds if timed else None,
                   target_ms_per_token=target_ms,
                   draft_share=propose_ms / target_ms if timed else None)
        if config.sampling.greedy:
            row["parity"] = all(r.ids == reference[r.prompt] for r in mode_runs)
        else:
            row["outputs"] = f"samples at T={config.sampling.temperature:g}: no token-level parity claim"
        summary[mode.name] = row
    return summary


def _per_prompt_rate(runs: list[Run]) -> dict[int, float]:
    tokens: dict[int, int] = {}
    seconds: dict[int, float] = {}
    for r in runs:
        tokens[r.prompt] = tokens.get(r.prompt, 0) + len(r.ids)
        seconds[r.prompt] = seconds.get(r.prompt, 0.0) + r.seconds
    return {p: tokens[p] / seconds[p] for p in tokens}


def _prompt_rows(modes: Sequence[Mode], runs: dict[str, list[Run]], prompts: Sequence[BenchPrompt],
                 config: BenchConfig) -> list[dict]:
    rows = [{"index": i, "label": p.label, "prompt_tokens": p.inputs.length, "modes": {}} for i, p in enumerate(prompts)]
    reference = {run.prompt: run.ids for run in runs["target"]}
    for mode in modes:
        for i, row in enumerate(rows):
            mine = [r for r in runs[mode.name] if r.prompt == i]
            cell: dict = {"tokens": [len(r.ids) for r in mine], "seconds": [r.seconds for r in mine],
                          "tokens_per_s": sum(len(r.ids) for r in mine) / sum(r.seconds for r in mine)}
            stats = [r.stats for r in mine if r.stats is not None]
            if mode.drafting and stats:
                cell["tau"] = _merged(stats).tau
            if config.sampling.greedy:
                cell["parity"] = all(r.ids == reference[i] for r in mine)
            row["modes"][mode.name] = cell
    return rows


def _load_average() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def _hardware(target: Target, load_before: float | None) -> dict:
    from minispark.core.identity import device_name

    return {"device": device_name(target.device), "torch_device": str(target.device),
            "runtime": target.runtime, "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "load_1min_before": load_before, "load_1min_after": _load_average()}
