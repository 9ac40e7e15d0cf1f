"""The data and training commands: ``cache`` (a feature cache), ``answers`` (an answer set), ``cache-mix``
(one training cache from several) and ``train`` (the drafter). Each parses its flags and calls
``minispark.data`` / ``minispark.training``.

    minispark cache --help
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import typer

from minispark.core import checks, model_files
from minispark.core.defaults import MAX_TEMPERATURE, REGEN_MAX_NEW_TOKENS, REGEN_TEMPERATURE, REGEN_TOP_K, REGEN_TOP_P
from minispark.core.errors import MinisparkError, option
from minispark.data.answer_config import AnswerConfig
from minispark.data.cache_config import CacheConfig

from .app import (DeviceOpt, DtypeOpt, EightBitOpt, FourBitOpt, JsonOpt, SeedOpt, TargetOpt, _check_prompts,
                  _check_target_flags, _load, _print_json, app, console, err_console, one_line_errors)


RegenMaxNewOpt = typer.Option(REGEN_MAX_NEW_TOKENS, "--max-new-tokens", help="Tokens per regenerated answer at most.")
RegenTemperatureOpt = typer.Option(REGEN_TEMPERATURE, "--temperature", help="Sampling temperature of the "
                                   f"regenerated answers, in [0, {MAX_TEMPERATURE:g}].")
RegenTopPOpt = typer.Option(REGEN_TOP_P, "--top-p", help="Nucleus sampling mass in (0, 1].")
RegenTopKOpt = typer.Option(REGEN_TOP_K, "--top-k", help="Sample from the k most likely tokens; 0 = off.")


def _check_regeneration(prompts: Optional[Path], out: Path, temperature: float, seed: int, target: Optional[str],
                        dtype: Optional[str], device: Optional[str], load_in_4bit: bool, load_in_8bit: bool,
                        check_out: Callable[[Path], Path]) -> None:
    """The flags cache and answers share, checked before the target loads; ``check_out`` is the command's own
    --out rule (new, empty, or a directory it wrote)."""
    _check_prompts(prompts)
    check_out(out)
    # shards among the model's files, as profile and train refuse (--target '' is the embedded target, no path)
    checks.outside_inputs(out, "--out", {"--target": target or None})
    checks.temperature(temperature)
    checks.seed(seed)
    _check_target_flags(target, dtype, device, load_in_4bit, load_in_8bit)


@app.command()
@one_line_errors
def cache(
    target: Optional[str] = TargetOpt,
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt JSONL (default: the shipped corpus)."),
    out: Path = typer.Option(Path("runs/cache"), "--out", help="Cache directory: new, empty, or a cache this "
                             "command wrote (resumed)."),
    num_samples: Optional[int] = typer.Option(None, "--num-samples", help="Samples to cache (default: one per "
                                              "prompt; more cycles through the prompts with new seeds)."),
    max_new_tokens: int = RegenMaxNewOpt,
    temperature: float = RegenTemperatureOpt,
    top_p: float = RegenTopPOpt,
    top_k: int = RegenTopKOpt,
    layers: str = typer.Option(CacheConfig.layers, "--layers",
                               help="auto | comma-separated decoder layer ids (never the last)."),
    anchors_per_sample: int = typer.Option(CacheConfig.anchors_per_sample, "--anchors-per-sample",
                                           help="Anchor positions drawn per answer."),
    anchor_run: int = typer.Option(CacheConfig.anchor_run, "--anchor-run",
                                   help="Anchors drawn as runs of this many consecutive tokens."),
    window: int = typer.Option(CacheConfig.window, "--window",
                               help="Context rows stored before each anchor; 0 = full context."),
    block: int = typer.Option(CacheConfig.block, "--block", help="Draft block size γ."),
    feature_dtype: str = typer.Option(CacheConfig.dtype, "--feature-dtype",
                                      help="Stored feature dtype: bf16 | fp16 | fp32."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    batch_size: int = typer.Option(CacheConfig.batch_size, "--batch-size", help="Answers regenerated together; "
                                   "0 = auto (64 on a CPU, what fits a quarter of free GPU memory, an existing "
                                   "cache's own when growing it)."),
    samples_per_shard: int = typer.Option(CacheConfig.samples_per_shard, "--samples-per-shard",
                                          help="Samples per shard file (the unit a resume keeps)."),
    seed: int = SeedOpt,
    split: str = typer.Option(CacheConfig.split, "--split",
                              help="train | heldout (an evaluation cache of held-out prompts)."),
    source: str = typer.Option(CacheConfig.source, "--source",
                               help="regenerate (the target answers) | text (teacher-force each line's assistant turn)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Estimate disk use and exit."),
    force: bool = typer.Option(False, "--force", help="Start even if the disk check fails."),
    as_json: bool = JsonOpt,
) -> None:
    """Regenerate answers with the target and cache its features for sampled anchor windows only."""
    from dataclasses import replace

    from minispark.data.cache import build_cache, check_out, estimate_cache
    from minispark.data.cache_config import default_prompts
    from minispark.data.regenerate import check_answer_room

    _check_regeneration(prompts, out, temperature, seed, target, dtype, device, load_in_4bit, load_in_8bit, check_out)
    try:  # every flag checked before the target loads (the default prompt file depends on it)
        config = CacheConfig(
            prompts=prompts or default_prompts(False, split if split in ("train", "heldout") else "train"), out=out,
            target=target, num_samples=num_samples, max_new_tokens=max_new_tokens, temperature=temperature,
            top_p=top_p, top_k=top_k, layers=layers, anchors_per_sample=anchors_per_sample, anchor_run=anchor_run,
            window=window, block=block, dtype=feature_dtype, target_dtype=dtype, device=device,
            load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit, batch_size=batch_size,
            samples_per_shard=samples_per_shard, seed=seed, split=split, source=source, force=force)
    except MinisparkError as exc:  # CacheConfig names the stored dtype ``dtype``; this command's flag for it differs
        raise MinisparkError(exc.template.replace(option("dtype"), option("feature_dtype"))) from None
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    check_answer_room(loaded, max_new_tokens)
    if prompts is None:
        config = replace(config, prompts=default_prompts(loaded.is_vlm, split))
    if dry_run:
        estimate = estimate_cache(config, target=loaded)
        _print_json(estimate.to_json()) if as_json else console.print(estimate.describe(), highlight=False,
                                                                      markup=False)
        return
    report = build_cache(config, target=loaded, progress=True)
    _print_json(report.to_json()) if as_json else console.print(report.summary(), highlight=False, markup=False)


@app.command()
@one_line_errors
def answers(
    target: Optional[str] = TargetOpt,
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt JSONL (default: the shipped corpus)."),
    out: Path = typer.Option(Path("runs/answers"), "--out", help="Answer-set directory: new, empty, "
                             "or a set this command wrote (resumed and grown)."),
    num_samples: Optional[int] = typer.Option(None, "--num-samples", help="Answers in the set (default: one per "
                                              "prompt; more cycles through the prompts with new seeds)."),
    max_new_tokens: int = RegenMaxNewOpt,
    temperature: float = RegenTemperatureOpt,
    top_p: float = RegenTopPOpt,
    top_k: int = RegenTopKOpt,
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    batch_size: int = typer.Option(AnswerConfig.batch_size, "--batch-size", help="Rows sampled together; 0 = auto "
                                   "(64, or the set's own when growing it)."),
    samples_per_shard: int = typer.Option(AnswerConfig.samples_per_shard, "--samples-per-shard",
                                          help="Answers per shard file (the unit a resume keeps)."),
    seed: int = SeedOpt,
    split: str = typer.Option(AnswerConfig.split, "--split",
                              help="train | heldout (an evaluation set of held-out prompts)."),
    as_json: bool = JsonOpt,
) -> None:
    """Regenerate answers with the target and store them as token ids (no features: training computes them)."""
    from minispark.data.answers import build_answers, check_out
    from minispark.data.cache_config import default_prompts
    from minispark.data.regenerate import check_answer_room

    _check_regeneration(prompts, out, temperature, seed, target, dtype, device, load_in_4bit, load_in_8bit, check_out)
    config = AnswerConfig(prompts=prompts or default_prompts(False, split if split in ("train", "heldout") else "train"),
                          out=out, target=target, num_samples=num_samples, max_new_tokens=max_new_tokens,
                          temperature=temperature, top_p=top_p, top_k=top_k, batch_size=batch_size,
                          samples_per_shard=samples_per_shard, seed=seed, split=split, target_dtype=dtype,
                          device=device, load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit)
    for value, flag in ((num_samples, "--num-samples"), (max_new_tokens, "--max-new-tokens"),
                        (batch_size, "--batch-size"), (samples_per_shard, "--samples-per-shard")):
        checks.integer(value, flag, 0)  # the upper bound; AnswerConfig checked each minimum
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    check_answer_room(loaded, max_new_tokens)
    if prompts is None:
        config.prompts = default_prompts(loaded.is_vlm, split)
    report = build_answers(config, target=loaded)
    _print_json(report.to_json()) if as_json else console.print(report.summary(), highlight=False, markup=False)


@app.command("cache-mix")
@one_line_errors
def cache_mix(
    parts: list[str] = typer.Argument(..., help="Training caches to mix, each DIR or DIR:N (its first N samples)."),
    out: Path = typer.Option(..., "--out", help="Directory of the mixed cache (a rerun resumes it)."),
    samples_per_shard: int = typer.Option(128, "--samples-per-shard", help="Samples per shard file of the mix."),
    as_json: bool = JsonOpt,
) -> None:
    """Mix finished training caches (e.g. regenerated answers and teacher-forced text) into one cache."""
    from minispark.data.cache_mix import mix_caches, parse_part

    checks.output_dir(out)
    checks.integer(samples_per_shard, "--samples-per-shard", 1)
    specs = [parse_part(spec) for spec in parts]
    for spec in specs:
        checks.input_dir(spec.directory, "PARTS")
    manifest = mix_caches(out, specs, samples_per_shard=samples_per_shard, log=err_console.print)
    totals = manifest["totals"]
    if as_json:
        _print_json({"out": str(out), "parts": manifest["config"]["parts"], **totals})
        return
    console.print(f"{out}: {totals['samples']} samples ({totals['generated_tokens']} answer tokens, "
                  f"{totals['anchors']} anchors) from " + ", ".join(
                      f"{p['samples']} of {p['directory']} ({p['source']})" for p in manifest["config"]["parts"]),
                  highlight=False, markup=False)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
@one_line_errors
def train(
    ctx: typer.Context,
    recipe: str = typer.Option(..., "--recipe", help="Recipe name (rtx3050, cpu-smollm2, tiny) or a TOML file."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache", help="Target cache directory."),
    answers_dir: Optional[Path] = typer.Option(None, "--answers", help="An answer set (`minispark answers`): the "
                                               "target computes the features as training goes, no cache on disk."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory for checkpoints and the drafter."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the latest checkpoint in --out."),
    init_from: Optional[Path] = typer.Option(None, "--init-from", help="Warm start: begin from this drafter's "
                                             "weights (same architecture and target) with a fresh optimizer, keeping "
                                             "its draft vocabulary (the recipe key init_from)."),
    heldout_cache: Optional[Path] = typer.Option(None, "--heldout-cache",
                                                 help="A --split heldout cache or answer set: evaluate τ on it, "
                                                 "keep the best."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the memory breakdown and predicted peak."),
    no_progress: bool = typer.Option(False, "--no-progress", help="Log lines instead of a progress bar."),
    as_json: bool = JsonOpt,
) -> None:
    """Train the DSpark drafter on a target cache or an answer set. Extra KEY=VALUE arguments override the recipe."""
    from minispark.training.memory import estimate_memory
    from minispark.training.recipes import load_recipe
    from minispark.training.train import train as run_train

    if cache_dir is not None and answers_dir is not None:
        raise MinisparkError("--cache and --answers: train on a feature cache or on an answer set, not both")
    given: dict[str, Optional[str]] = {}  # the flags' paths, set as they are (text overrides would be parsed)
    if answers_dir is not None:
        checks.input_dir(answers_dir, "--answers")
        from minispark.data.answers import listed_shards

        listed_shards(answers_dir)  # not an answer set: one line naming its manifest, before --out
        given |= {"cache_dir": None, "answers_dir": str(answers_dir)}  # --answers replaces the recipe's cache
    if init_from is not None:
        given["init_from"] = str(init_from)
    checks.input_dir(heldout_cache, "--heldout-cache")
    if heldout_cache is not None:
        given["heldout_cache"] = str(heldout_cache)
    config = load_recipe(recipe, list(ctx.args), given)
    if config.init_from:  # before the dry run's estimate too: it says what the run would do
        from minispark.model.checkpoint import init_from_config

        model_files.checkpoint(Path(config.init_from), "init_from")
        init_from_config(config.init_from)
    if dry_run:
        breakdown = estimate_memory(config)
        _print_json(breakdown.to_json()) if as_json else console.print(breakdown.describe(), markup=False)
        return
    checks.input_dir(cache_dir, "--cache")
    checks.output_dir(out)
    report = run_train(config, cache_dir, out, resume=resume, progress=not no_progress and not as_json,
                       log=lambda line: err_console.print(line, highlight=False, markup=False, soft_wrap=True))
    _print_json(report.to_json()) if as_json else console.print(report.summary(), highlight=False, markup=False)
