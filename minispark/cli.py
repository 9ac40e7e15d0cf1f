"""The ``minispark`` command line: parses flags, calls library functions, prints with rich.

Every command is a thin wrapper; what it does is reachable from Python (``minispark.generate``,
``minispark.bench``, ``minispark.simulate``, ...). A ``MinisparkError`` is printed as one line.

    minispark --help
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Callable, Optional

import typer
from rich.console import Console

from minispark.errors import MinisparkError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="DSpark speculative decoding for local vision-language models.")
console = Console()
err_console = Console(stderr=True)


def one_line_errors(command: Callable) -> Callable:
    """Turn user-facing errors into a single ``error: ...`` line and exit status 2."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except MinisparkError as exc:
            err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


def _print_json(data: dict) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=float) + "\n")


TargetOpt = typer.Option(None, "--target", help="Hub id, local directory, or omit for the embedded SmolLM2.")
DtypeOpt = typer.Option(None, "--dtype", help="fp32 | bf16 | fp16 (default: bf16 on CUDA, fp32 on CPU).")
DeviceOpt = typer.Option(None, "--device", help="cpu | cuda | cuda:N (default: CUDA if present).")
DraftSkipOpt = typer.Option(None, "--draft-skip/--no-draft-skip",
                             help="Leave the drafter out of rounds where drafting is predicted not to pay "
                                  "(default: on in schedule mode).")


def _load(target: Optional[str], dtype: Optional[str], device: Optional[str], load_in_4bit: bool = False,
          load_in_8bit: bool = False):
    from minispark.target import load_target

    with err_console.status(f"loading target {target or 'embedded SmolLM2-135M-Instruct'}..."):
        return load_target(target, dtype=dtype, device=device, load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit)


def _check_images(images: list[Path]) -> None:
    for path in images:
        if not path.is_file():
            raise MinisparkError(f"--image {path}: file not found")


@app.command()
@one_line_errors
def generate(
    prompt: Optional[str] = typer.Option(None, "--prompt", help="User message (default: a built-in prompt)."),
    image: list[Path] = typer.Option([], "--image", help="Image file(s) for a vision-language target."),
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = typer.Option(None, "--drafter", help="none | lookup | a drafter directory "
                                          "(default: the drafter shipped for the target, else lookup)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="Length policy: fixed | threshold | schedule (default: "
                                       "schedule with a confidence head and an SPS table, else threshold/fixed)."),
    gamma: Optional[int] = typer.Option(None, "--gamma", help="Maximum draft tokens per round (default: the "
                                        "drafter's block size, 7 for lookup)."),
    threshold: float = typer.Option(0.5, "--threshold", help="Confidence threshold (threshold mode)."),
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table JSON (schedule mode; default: lookup)."),
    draft_skip: Optional[bool] = DraftSkipOpt,
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
    top_p: float = typer.Option(1.0, "--top-p"),
    top_k: int = typer.Option(0, "--top-k"),
    seed: Optional[int] = typer.Option(None, "--seed"),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens"),
    stop: list[str] = typer.Option([], "--stop", help="Stop string(s)."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = typer.Option(False, "--load-in-4bit"),
    load_in_8bit: bool = typer.Option(False, "--load-in-8bit"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of streaming text."),
) -> None:
    """Generate a reply with speculative decoding (lossless: same output as the target alone)."""
    from minispark.generate import DEFAULT_PROMPT, generate as run_generate
    from minispark.sampling import SamplingConfig
    from minispark.serving import build_serving

    sampling = SamplingConfig(temperature, top_k=top_k, top_p=top_p)
    _check_images(image)
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    if drafter is not None:
        _check_deepspec(drafter, loaded)
    setup = build_serving(loaded, drafter, mode, gamma, threshold, sps, draft_skip)
    for hint in setup.hints:
        err_console.print(f"[dim]{hint}[/dim]", highlight=False)
    draft, policy = setup.drafter, setup.policy
    on_text = None if as_json else (lambda text: console.print(text, end="", highlight=False, markup=False))
    out = run_generate(loaded, prompt or DEFAULT_PROMPT, images=image, drafter=draft, sampling=sampling,
                       policy=policy, max_new_tokens=max_new_tokens, stop_strings=stop, seed=seed, on_text=on_text,
                       skip=setup.skip)
    if as_json:
        _print_json(out.as_dict(loaded, draft))
        return
    stats = out.result.stats
    console.print()
    err_console.print(f"[dim]{stats.new_tokens} tokens in {stats.wall_s:.2f}s ({stats.tokens_per_s:.1f} tok/s), "
                      f"{stats.rounds} rounds, tau={stats.tau:.2f}, drafter={draft.name}, stop={out.result.stop_reason}"
                      "[/dim]")


@app.command()
@one_line_errors
def chat(
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = typer.Option(None, "--drafter",
                                          help="none | lookup | a DSpark checkpoint directory (default: the "
                                               "shipped drafter for the target, else lookup)."),
    image: list[Path] = typer.Option([], "--image", help="Image file(s) for the first message (/image PATH later)."),
    mode: Optional[str] = typer.Option(None, "--mode", help="fixed | threshold | schedule (default: schedule with "
                                                           "an SPS table, else threshold; fixed without confidences)."),
    gamma: Optional[int] = typer.Option(None, "--gamma", help="Maximum draft tokens per round (default: the "
                                                             "drafter's block size, else 7)."),
    threshold: float = typer.Option(0.5, "--threshold", help="Confidence threshold (threshold mode)."),
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table JSON (default: the one for this device)."),
    draft_skip: Optional[bool] = DraftSkipOpt,
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy."),
    top_p: float = typer.Option(1.0, "--top-p"),
    top_k: int = typer.Option(0, "--top-k"),
    system: Optional[str] = typer.Option(None, "--system", help="System message."),
    stats: bool = typer.Option(True, "--stats/--no-stats", help="A figures line after each answer."),
    max_new_tokens: int = typer.Option(512, "--max-new-tokens", help="Per answer."),
    seed: Optional[int] = typer.Option(None, "--seed"),
    stop: list[str] = typer.Option([], "--stop", help="Stop string(s)."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = typer.Option(False, "--load-in-4bit"),
    load_in_8bit: bool = typer.Option(False, "--load-in-8bit"),
) -> None:
    """Chat with the target (and images): streamed answers, KV cache reused across turns, /help inside."""
    from minispark.chat import ChatREPL
    from minispark.conversation import Conversation
    from minispark.sampling import SamplingConfig
    from minispark.serving import build_serving

    sampling = SamplingConfig(temperature, top_k=top_k, top_p=top_p)
    _check_images(image)
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    if image and not loaded.is_vlm:
        raise MinisparkError(f"--image: target {loaded.name} is text-only ({loaded.model_type})")
    setup = build_serving(loaded, drafter, mode, gamma, threshold, sps, draft_skip)
    with Conversation(loaded, setup.drafter, policy=setup.policy, sampling=sampling, max_new_tokens=max_new_tokens,
                      system=system, stop_strings=stop, seed=seed, skip=setup.skip) as conversation:
        ChatREPL(conversation, setup, console, show_stats=stats).run(images=image)


@app.command()
@one_line_errors
def bench(
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = typer.Option(None, "--drafter", help="Drafter DIR for fixed/threshold/schedule (default: "
                                          "the drafter shipped for the target; none: no drafter)."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt JSONL (its last N prompts); default: built-in set."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", help="Prompts used (default: 6 built-in / 16 from a file)."),
    category: Optional[str] = typer.Option(None, "--category", help="Only the --prompts lines of this category (chat, code, ...)."),
    modes: Optional[str] = typer.Option(None, "--modes", help="Comma-separated, from: target,hf,hf-lookup,lookup,fixed,"
                                        "threshold,schedule,schedule-noskip,schedule-raw (target always runs). Default: target,hf,"
                                        "hf-lookup,lookup, plus fixed,threshold,schedule with --drafter."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens"),
    temperature: float = typer.Option(0.0, "--temperature", help="0 = greedy (parity checked); > 0 = samples."),
    top_p: float = typer.Option(1.0, "--top-p"),
    top_k: int = typer.Option(0, "--top-k"),
    gamma: int = typer.Option(7, "--gamma", help="Maximum draft tokens per round."),
    threshold: float = typer.Option(0.5, "--threshold", help="Confidence threshold of the threshold mode."),
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table for the schedule modes (default: lookup)."),
    repeats: int = typer.Option(1, "--repeats", help="Passes over all prompts and modes."),
    seed: int = typer.Option(0, "--seed"),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    as_json: bool = typer.Option(False, "--json", help="Only the JSON report on stdout (progress on stderr)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also write tok/s and acceptance per position as a PNG."),
) -> None:
    """Every decoding mode on every prompt, interleaved in one process: speed, τ, time split and parity."""
    from minispark.bench import (BASELINE_MODES, BenchConfig, build_modes, builtin_prompts, file_prompts,
                                 plot_bench, render_bench, run_bench)
    from minispark.profile import rich_progress
    from minispark.sampling import SamplingConfig

    if num_prompts is not None and num_prompts < 1:
        raise MinisparkError("--num-prompts must be >= 1")
    loaded = _load(target, dtype, device)
    if drafter is None:
        from minispark.generate import default_drafter

        shipped = default_drafter(loaded)
        drafter = None if shipped is None else str(shipped)
        if shipped is not None:
            err_console.print(f"[dim]drafter: {shipped} (shipped for this target; --drafter none to leave it out)[/dim]")
    elif drafter == "none":
        drafter = None
    if modes is not None:
        names = [m.strip() for m in modes.split(",") if m.strip()]
    else:
        names = BASELINE_MODES + (["fixed", "threshold", "schedule"] if drafter else [])
    config = BenchConfig(modes=names, max_new_tokens=max_new_tokens, gamma=gamma, threshold=threshold,
                         sampling=SamplingConfig(temperature, top_k=top_k, top_p=top_p), repeats=repeats, seed=seed)
    if drafter is not None:
        _check_deepspec(drafter, loaded)
    if category is not None and prompts is None:
        raise MinisparkError("--category selects lines of --prompts FILE; give the file")
    chosen = (file_prompts(loaded, prompts, num_prompts or 16, category) if prompts
              else builtin_prompts(loaded, num_prompts))
    runnable, notices = build_modes(loaded, config, drafter, sps)
    for notice in notices:
        err_console.print(f"[yellow]{notice}[/yellow]", highlight=False)
    with rich_progress(True, label="bench") as progress:
        report = run_bench(loaded, runnable, chosen, config, progress, drafter=drafter, notices=notices)
    if plot is not None:
        plot_bench(report, plot)
    if as_json:
        _print_json(report)
        return
    console.print(render_bench(report))
    if plot is not None:
        console.print(f"wrote {plot}")


@app.command()
@one_line_errors
def demo(
    train: bool = typer.Option(False, "--train", help="Run the whole pipeline at small scale (cache → train → "
                               "calibrate → profile → bench → chat), reusing finished stages."),
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Pipeline directory (with --train)."),
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = typer.Option(None, "--drafter", help="none | lookup | a checkpoint DIR (default: the "
                                                                  "shipped drafter, else lookup; not with --train)."),
    num_prompts: int = typer.Option(3, "--num-prompts", help="Held-out chat/code prompts (the file's tail)."),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", help="Tokens per answer."),
) -> None:
    """Show the speedup: target-only vs the shipped drafter on held-out prompts (--train: build your own)."""
    from minispark.bench import render_bench
    from minispark.demo import PipelineSizes, render_demo, run_demo, run_pipeline
    from minispark.profile import rich_progress

    if not train:
        def notice(line: str) -> None:
            err_console.print(f"[yellow]{line}[/yellow]", highlight=False, soft_wrap=True)

        loaded = _load(target, None, None)
        with rich_progress(True, label="demo") as progress:
            result = run_demo(loaded, drafter=drafter, num_prompts=num_prompts, max_new_tokens=max_new_tokens,
                              progress=progress, log=notice)
        console.print(render_demo(result))
        return
    if drafter is not None:
        raise MinisparkError("--drafter: not with --train (the pipeline trains its own)")
    sizes = PipelineSizes(bench_prompts=num_prompts, bench_tokens=max_new_tokens)
    result = run_pipeline(out, sizes, target=target, log=lambda line: err_console.print(line, highlight=False))
    console.print(f"\n[bold]chat[/bold] ▶ {result.chat_prompt}", highlight=False)
    console.print(result.chat_answer, highlight=False, markup=False)
    console.print(render_bench(result.bench))
    console.print(f"continue with: {result.chat_command}", highlight=False, soft_wrap=True)


@app.command()
@one_line_errors
def cache(
    target: Optional[str] = TargetOpt,
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt JSONL (default: the shipped corpus)."),
    out: Path = typer.Option(Path("runs/cache"), "--out", help="Cache directory (resumes if it exists)."),
    num_samples: Optional[int] = typer.Option(None, "--num-samples"),
    max_new_tokens: int = typer.Option(512, "--max-new-tokens"),
    temperature: float = typer.Option(0.7, "--temperature"),
    top_p: float = typer.Option(0.8, "--top-p"),
    top_k: int = typer.Option(20, "--top-k"),
    layers: str = typer.Option("auto", "--layers", help="auto | comma-separated decoder layer ids (never the last)."),
    anchors_per_sample: int = typer.Option(32, "--anchors-per-sample"),
    anchor_run: int = typer.Option(16, "--anchor-run", help="Anchors drawn as runs of this many consecutive tokens."),
    window: int = typer.Option(32, "--window", help="Context rows stored before each anchor; 0 = full context."),
    block: int = typer.Option(7, "--block", help="Draft block size γ."),
    dtype: str = typer.Option("bf16", "--dtype", help="Stored feature dtype: bf16 | fp16 | fp32."),
    target_dtype: Optional[str] = typer.Option(None, "--target-dtype", help="Target compute dtype."),
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = typer.Option(False, "--load-in-4bit"),
    load_in_8bit: bool = typer.Option(False, "--load-in-8bit"),
    batch_size: int = typer.Option(8, "--batch-size"),
    samples_per_shard: int = typer.Option(64, "--samples-per-shard"),
    seed: int = typer.Option(0, "--seed"),
    split: str = typer.Option("train", "--split", help="train | heldout (an evaluation cache of held-out prompts)."),
    source: str = typer.Option("regenerate", "--source",
                               help="regenerate (the target answers) | text (teacher-force each line's assistant turn)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Estimate disk use and exit."),
    force: bool = typer.Option(False, "--force", help="Start even if the disk check fails."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Regenerate answers with the target and cache its features for sampled anchor windows only."""
    from minispark.cache import CacheConfig, build_cache, default_prompts, estimate_cache

    loaded = _load(target, target_dtype, device, load_in_4bit, load_in_8bit)
    config = CacheConfig(
        prompts=prompts or default_prompts(loaded.is_vlm, split), out=out, target=target, num_samples=num_samples,
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k, layers=layers,
        anchors_per_sample=anchors_per_sample, anchor_run=anchor_run, window=window, block=block, dtype=dtype, target_dtype=target_dtype,
        device=device, load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit, batch_size=batch_size,
        samples_per_shard=samples_per_shard, seed=seed, split=split, source=source, force=force)
    if dry_run:
        estimate = estimate_cache(config, target=loaded)
        _print_json(estimate.to_json()) if as_json else console.print(estimate.describe())
        return
    report = build_cache(config, target=loaded, progress=True)
    _print_json(report.to_json()) if as_json else console.print(report.summary())


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
@one_line_errors
def train(
    ctx: typer.Context,
    recipe: str = typer.Option(..., "--recipe", help="Recipe name (rtx3050, cpu-smollm2, tiny) or a TOML file."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache", help="Target cache directory."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory for checkpoints and the drafter."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the latest checkpoint in --out."),
    heldout_cache: Optional[Path] = typer.Option(None, "--heldout-cache",
                                                 help="A --split heldout cache: evaluate τ on it, keep the best."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the memory breakdown and predicted peak."),
    no_progress: bool = typer.Option(False, "--no-progress"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Train the DSpark drafter on a target cache. Extra KEY=VALUE arguments override the recipe."""
    from minispark.memory import estimate_memory
    from minispark.recipes import load_recipe
    from minispark.train import train as run_train

    config = load_recipe(recipe, list(ctx.args))
    if heldout_cache is not None:
        config.heldout_cache = str(heldout_cache)
    if dry_run:
        breakdown = estimate_memory(config)
        _print_json(breakdown.to_json()) if as_json else console.print(breakdown.describe())
        return
    report = run_train(config, cache_dir, out, resume=resume, progress=not no_progress)
    _print_json(report.metrics) if as_json else console.print(report.summary())


@app.command()
@one_line_errors
def profile(
    target: Optional[str] = TargetOpt,
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = typer.Option(False, "--load-in-4bit"),
    load_in_8bit: bool = typer.Option(False, "--load-in-8bit"),
    contexts: str = typer.Option("256,1024,4096", "--contexts", help="KV-cache lengths to profile."),
    max_tokens: int = typer.Option(16, "--max-tokens", help="Profile 1..N new tokens per step (≥ γ+1)."),
    rounds: int = typer.Option(10, "--rounds", help="Shuffled rounds per context."),
    warmup: int = typer.Option(2, "--warmup"),
    drift_bound: float = typer.Option(0.10, "--drift-bound", help="Relative reference drift that re-measures a round."),
    max_remeasure: int = typer.Option(2, "--max-remeasure"),
    cooldown: float = typer.Option(5.0, "--cooldown", help="Seconds to rest before re-measuring a drifted round."),
    seed: int = typer.Option(0, "--seed"),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads (CPU targets)."),
    note: str = typer.Option("", "--note", help="Free text stored in the table's metadata."),
    allow_busy: bool = typer.Option(False, "--allow-busy", help="Write the table even if the CPU was busy (flagged)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default: the shipped sps_tables/)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also write a PNG of the SPS curves."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Measure this device's steps-per-second table for the target (throttle-aware, interleaved)."""
    from dataclasses import asdict

    from minispark.profile import SHIPPED_TABLES, ProfileConfig, format_table, run_profile

    config = ProfileConfig(contexts=[int(c) for c in _floats(contexts, "--contexts")], max_tokens=max_tokens,
                           rounds=rounds, warmup=warmup, drift_bound=drift_bound, max_remeasure=max_remeasure,
                           cooldown_s=cooldown, seed=seed, note=note, allow_busy=allow_busy)
    table, path = run_profile(config, target=target, dtype=dtype, device=device, load_in_4bit=load_in_4bit,
                              load_in_8bit=load_in_8bit, threads=threads, out_dir=out or SHIPPED_TABLES, plot=plot,
                              show_progress=not as_json)
    if as_json:
        _print_json({"path": str(path), **asdict(table)})
        return
    console.print(format_table(table, [n for n in (1, 2, 4, 8, 16) if n <= max_tokens]))
    console.print(f"wrote {path}")


@app.command()
@one_line_errors
def calibrate(
    drafter: Path = typer.Option(..., "--drafter", help="DSpark checkpoint directory (STS is stored there)."),
    prompts: Path = typer.Option(..., "--prompts", help="Held-out prompts JSONL (its last N prompts are used)."),
    num_prompts: int = typer.Option(16, "--num-prompts"),
    target: Optional[str] = TargetOpt,
    gamma: int = typer.Option(7, "--gamma"),
    temperature: float = typer.Option(1.0, "--temperature", help="Serving temperature the rollouts use."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens"),
    seed: int = typer.Option(0, "--seed"),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write reliability diagrams (PNG)."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Roll out the loop, report ECE/AUC/Brier per position, fit and store Sequential Temperature Scaling."""
    from dataclasses import asdict

    from minispark.calibrate import plot_reliability, reliability, render_metrics, render_reliability
    from minispark.prompts import load_prompt_inputs
    from minispark.rollouts import calibrate_drafter
    from minispark.sampling import SamplingConfig

    loaded = _load(target, dtype, device)
    inputs = load_prompt_inputs(loaded, prompts, num_prompts)
    with err_console.status("rolling out...") as status:
        report = calibrate_drafter(loaded, drafter, inputs, gamma, SamplingConfig(temperature), max_new_tokens,
                                   seed, progress=lambda i: status.update(f"rolled out {i}/{len(inputs)} prompts"))
    rollouts, calibration = report.pop("rollouts"), report.pop("calibration")
    if plot is not None:
        plot_reliability(plot, rollouts.confidences, rollouts.accepted, calibration)
    if as_json:
        _print_json({**report, "before": [asdict(m) for m in report["before"]],
                     "after": [asdict(m) for m in report["after"]]})
        return
    console.print(render_metrics(report["before"], report["after"]))
    for label, cal in (("raw", None), ("STS", calibration)):
        bins = reliability(rollouts.confidences, rollouts.accepted, 1, cal)
        console.print(render_reliability(bins, title=f"reliability of a_1 ({label})"))
    console.print(f"STS temperatures {', '.join(f'{t:.2f}' for t in report['temperatures'])} → {report['path']}")


@app.command()
@one_line_errors
def simulate(
    conf: Optional[str] = typer.Option(None, "--conf", help="Per-position confidences, e.g. 0.9,0.8,0.7."),
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table JSON."),
    sps_inline: Optional[str] = typer.Option(None, "--sps-inline", help="SPS for 1,2,3.. tokens: 1.0,0.5,0.45"),
    appendix_a: bool = typer.Option(False, "--appendix-a", help="Run §9's counterexample by Monte Carlo."),
    draws: int = typer.Option(100_000, "--draws"),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """The scheduler simulator (design notes §15): Θ(ℓ), causal vs peeking choices, Appendix A."""
    from minispark.simulate import appendix_a as run_appendix_a, render_appendix_a, render_theta_table, theta_table
    from minispark.sps import SPSTable

    if appendix_a:
        result = run_appendix_a(draws=draws, seed=seed)
        _print_json(result) if as_json else console.print(render_appendix_a(result))
        return
    if conf is None:
        raise MinisparkError("--conf is required (or use --appendix-a)")
    confidences = _floats(conf, "--conf")
    if sps is not None:
        table = SPSTable.load(sps)
    elif sps_inline is not None:
        table = SPSTable.from_inline(_floats(sps_inline, "--sps-inline"))
    else:
        raise MinisparkError("give --sps FILE or --sps-inline 1.0,0.5,...")
    result = theta_table(confidences, table)
    _print_json(result) if as_json else console.print(render_theta_table(result))


def _check_deepspec(drafter: str, target) -> None:
    """A DeepSpec-layout --drafter is checked against the target first, for errors naming the key."""
    from minispark.deepspec import check_against_target, is_deepspec_dir

    if is_deepspec_dir(drafter):
        check_against_target(drafter, target)


@app.command("import")
@one_line_errors
def import_(
    source: Path = typer.Argument(..., help="DeepSpec-layout drafter directory (Qwen3DSparkModel)."),
    out: Path = typer.Option(..., "--out", help="Output minispark drafter directory."),
    target: Optional[str] = TargetOpt,
    window: Optional[int] = typer.Option(None, "--window", help="Context window W (default: recorded, else 0 = all)."),
    device: Optional[str] = DeviceOpt,
) -> None:
    """Convert a DeepSpec DSpark/DFlash checkpoint into minispark's drafter layout."""
    from minispark.deepspec_export import import_deepspec

    report = import_deepspec(source, _load(target, None, device), out, window)
    _print_conversion(report)


@app.command()
@one_line_errors
def export(
    drafter_dir: Path = typer.Argument(..., help="minispark drafter directory (config.json + model.safetensors)."),
    out: Path = typer.Option(..., "--out", help="Output directory."),
    fmt: str = typer.Option("deepspec", "--format", help="Output layout: deepspec (vLLM / SGLang)."),
    target: Optional[str] = TargetOpt,
    device: Optional[str] = DeviceOpt,
) -> None:
    """Export a minispark drafter in DeepSpec's layout (bf16 safetensors, config.json, serving README)."""
    from minispark.deepspec_export import export_deepspec

    if fmt != "deepspec":
        raise MinisparkError(f"--format {fmt!r}: only 'deepspec' is supported")
    report = export_deepspec(drafter_dir, _load(target, None, device), out)
    _print_conversion(report)


def _print_conversion(report) -> None:
    for warning in report.warnings:
        err_console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False, soft_wrap=True)
    c = report.config
    console.print(f"wrote {report.out}: {c.num_layers} layers, head {c.head}, confidence head "
                  f"{'on' if c.confidence_head else 'off'}, γ={c.block_size}, window {c.window}", highlight=False)


def _floats(text: str, flag: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise MinisparkError(f"{flag}: expected comma-separated numbers, got {text!r}") from None


if __name__ == "__main__":
    app()
