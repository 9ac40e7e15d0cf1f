"""The measuring commands: ``bench`` (every decoding mode side by side), ``profile`` (a device's SPS
table), ``calibrate`` (fit and store STS) and ``simulate`` (the scheduler simulator). Each parses its
flags and calls ``minispark.measuring``.

    minispark bench --help
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from minispark.core import checks, check_lists, model_files
from minispark.core import defaults
from minispark.core.defaults import DEFAULT_THRESHOLD
from minispark.core.drafter_spec import HYBRID, DrafterSpec
from minispark.core.errors import MinisparkError
from minispark.measuring.figures import is_own_figure

from .app import (DeviceOpt, DtypeOpt, EightBitOpt, FourBitOpt, GammaOpt, JsonOpt, SeedOpt, StrictOpt, TargetOpt,
                  TopKOpt, TopPOpt, _auto_4bit, _check_prompts, _check_target_flags, _load,
                  _print_json, _remembered, app, checked_drafter, checked_sps, console, err_console, one_line_errors)


def figure_file(path: Path | None, flag: str = "--plot", inputs: dict[str, Any] | None = None) -> Path | None:
    """``--plot``: a PNG to write (``checks.output_file``), never among what minispark ships
    (``checks.not_shipped``), that replaces an existing file only if minispark wrote that one (a figure of an
    earlier run): someone's image or document of the same name is refused, not replaced."""
    path = checks.output_file(path, flag, inputs)
    if path is not None:  # bench and calibrate wrote a figure among the shipped tables (a link to them)
        checks.not_shipped(path, flag, "write the figure elsewhere")
    if path is not None and (path.is_file() or path.is_symlink()) and not is_own_figure(path):
        raise MinisparkError(f"{flag} {path}: exists and is not a figure minispark wrote; choose another name "
                             "(or delete it)")
    if path is not None and path.suffix.lower() != ".png":  # the bytes are PNG whatever the name says
        raise MinisparkError(f"{flag} {path}: figures are written as PNG; give a name ending in .png")
    return path


@app.command()
@one_line_errors
def bench(
    target: Optional[str] = TargetOpt,
    drafter: Optional[str] = typer.Option(None, "--drafter", help="Drafter DIR for fixed/threshold/schedule (default: "
                                          "the drafter shipped for the target; none: no drafter); hybrid or "
                                          "hybrid:DIR: that drafter, and the hybrid modes by default."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="Prompt JSONL (its last N prompts); default: built-in set."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", help="Prompts used (default: 6 built-in / 16 from a "
                                               "file; more than there are: all of them, with a notice)."),
    category: Optional[str] = typer.Option(None, "--category", help="Only the --prompts lines of this category (chat, code, ...)."),
    modes: Optional[str] = typer.Option(None, "--modes", help="Comma-separated, from: target,hf,hf-lookup,lookup,fixed,"
                                        "threshold,schedule,schedule-noskip,schedule-raw,hybrid,hybrid-schedule (target always runs). "
                                        "Default: target,hf,hf-lookup,lookup, plus fixed,threshold,schedule with "
                                        "--drafter (and hybrid,hybrid-schedule with --drafter hybrid)."),
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", help="Tokens per answer at most."),
    temperature: float = typer.Option(defaults.DEFAULT_TEMPERATURE, "--temperature",
                                      help=f"0 = greedy (parity checked); > 0 = samples "
                                      f"(at most {defaults.MAX_TEMPERATURE:g})."),
    top_p: float = TopPOpt,
    top_k: int = TopKOpt,
    gamma: Optional[int] = GammaOpt,
    threshold: Optional[float] = typer.Option(None, "--threshold", help="Confidence threshold in [0, 1] of the threshold "
                                              f"mode (default: {DEFAULT_THRESHOLD:g}); refused when --modes leaves it out."),
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table for the schedule modes (default: the one for "
                                       "this device, target and dtype)."),
    strict: bool = StrictOpt,
    repeats: int = typer.Option(1, "--repeats", help="Passes over all prompts and modes."),
    seed: int = SeedOpt,
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    as_json: bool = typer.Option(False, "--json", help="Only the JSON report on stdout (progress on stderr)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also write tok/s and acceptance per position as a PNG."),
) -> None:
    """Every decoding mode on every prompt, interleaved in one process: speed, τ, time split and parity."""
    config, named = _bench_config(drafter, prompts, num_prompts, category, modes, max_new_tokens, temperature, top_p,
                                  top_k, gamma, threshold, sps, repeats, seed, plot, strict)
    figure_file(plot, "--plot", {"--prompts": prompts, "--sps": sps, "--drafter": drafter, "--target": target})
    target, dtype, load_in_4bit, load_in_8bit = _remembered(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    drafter = _bench_drafter(loaded, drafter)
    if not named and drafter:
        config = _with_drafter_modes(config, drafter)
    from minispark.measuring.bench import BenchInterrupted

    try:
        report = _bench_run(loaded, config, drafter, prompts, num_prompts, category, sps, strict)
    except BenchInterrupted as interrupted:  # Ctrl-C: the finished repeats are shown (and plotted), then said so
        report = interrupted.report
        _bench_render(report, plot, as_json)
        cut = report["interrupted"]
        err_console.print(f"interrupted; the report covers the {cut['repeats_done']} of {cut['repeats_asked']} "
                          "repeats that finished (the one cut short is left out)", highlight=False, markup=False)
        raise typer.Exit(130) from None
    _bench_render(report, plot, as_json)


#: bench modes that draft nothing, so --gamma has no effect on them.
UNDRAFTED_MODES = frozenset({"target", "hf"})


def _bench_config(drafter: Optional[str], prompts: Optional[Path], num_prompts: Optional[int], category: Optional[str],
                  modes: Optional[str], max_new_tokens: int, temperature: float, top_p: float, top_k: int,
                  gamma: Optional[int], threshold: Optional[float], sps: Optional[Path], repeats: int, seed: int,
                  plot: Optional[Path], strict: bool = False) -> tuple[Any, bool]:
    """bench, resolving its inputs: every flag checked and the ``BenchConfig`` built before the target loads;
    with whether --modes named the modes (if not, :func:`_with_drafter_modes` adds the drafter's)."""
    checks.integer(num_prompts, "--num-prompts", 1)  # the numbers first: before any import that takes seconds
    for value, flag in ((max_new_tokens, "--max-new-tokens"), (gamma, "--gamma")):
        checks.integer(value, flag, 1)
    checks.integer(repeats, "--repeats", 1, defaults.BENCH_MAX_REPEATS)
    checks.sampling(temperature, top_p, top_k)
    checks.seed(seed)
    checked_drafter(drafter)
    samples = _check_prompts(prompts)
    if category is not None and prompts is None:
        raise MinisparkError("--category selects lines of --prompts FILE; give the file")
    if category is not None and not category.strip():  # it said "--category : no line of --prompts ... is of it"
        raise MinisparkError(f"--category {category!r}: empty; give a category of the --prompts lines (chat, code, ...)")
    categories = sorted({s.category for s in samples if s.category is not None})
    if category is not None and category not in categories:  # after the load, it said "no prompt ... usable"
        has = f"its categories: {', '.join(categories)}" if categories else 'no line has a "category" key'
        raise MinisparkError(f"--category {category}: no line of --prompts {prompts} is of it ({has})")
    names = None if modes is None else check_lists.items(modes, "--modes", "mode")
    if names is not None:
        check_lists.distinct_items(names, "--modes")
    if threshold is not None and names is not None and "threshold" not in names:  # it would be ignored without a word
        raise MinisparkError(f"--threshold {threshold:g}: only the threshold mode uses it, and --modes {modes} leaves "
                             "it out; drop --threshold or add threshold to --modes")
    if gamma is not None and names is not None and set(names) <= UNDRAFTED_MODES:  # ignored, yet printed as γ=
        raise MinisparkError(f"--gamma {gamma}: --modes {modes} drafts nothing (the target alone, HF's plain "
                             "generate); drop --gamma or add a drafting mode to --modes")
    from minispark.measuring.bench import BASELINE_MODES, DRAFTER_MODES, SCHEDULE_MODES, BenchConfig
    from minispark.target.sampling import SamplingConfig

    trained = [name for name in names or () if name in DRAFTER_MODES]
    if drafter is not None and not DrafterSpec.parse(drafter).drafts and trained:  # each was skipped, with a notice, only once the target had loaded
        one = len(trained) == 1
        raise MinisparkError(f"--modes {modes}: {', '.join(trained)} {'needs' if one else 'need'} a trained drafter, "
                             f"and --drafter none gives none; drop {'it' if one else 'them'} or give --drafter DIR")
    table_flags = [flag for flag, value in (("--sps", sps), ("--strict", strict)) if value]
    if table_flags and names is not None and not set(names) & set(SCHEDULE_MODES):  # read by no mode
        raise MinisparkError(f"{' and '.join(table_flags)}: only the schedule modes use an SPS table, and --modes "
                             f"{modes} leaves them out; drop {'it' if len(table_flags) == 1 else 'them'} or add "
                             "schedule to --modes")
    checked_sps(sps)
    checks.output_file(plot, "--plot")
    config = BenchConfig(modes=names or BASELINE_MODES, max_new_tokens=max_new_tokens, gamma=gamma,
                         threshold=DEFAULT_THRESHOLD if threshold is None else threshold, sampling=SamplingConfig(temperature, top_k=top_k, top_p=top_p),
                         repeats=repeats, seed=seed)  # checks the rest before the target loads
    return config, names is not None


def _bench_drafter(loaded: Any, drafter: Optional[str]) -> Optional[str]:
    """bench's drafter: the one shipped for the target when --drafter is not given, none for ``none``."""
    if drafter is None:
        from minispark.serving.generate import default_drafter

        shipped = default_drafter(loaded)
        drafter = None if shipped is None else str(shipped)
        if shipped is not None:
            err_console.print(f"[dim]drafter: {escape(str(shipped))} (shipped for this target; --drafter none to "
                              "leave it out)[/dim]")
    elif not DrafterSpec.parse(drafter).drafts:
        drafter = None
    return drafter


def _with_drafter_modes(config: Any, drafter: str) -> Any:
    """bench, building its modes when --modes is not given: the baselines plus the drafter's modes (and
    the hybrid modes for a hybrid drafter)."""
    from minispark.measuring.bench import BASELINE_MODES, BenchConfig

    hybrid = ["hybrid", "hybrid-schedule"] if DrafterSpec.parse(drafter).kind == HYBRID else []
    return BenchConfig(**{**config.__dict__, "modes": BASELINE_MODES + ["fixed", "threshold", "schedule"] + hybrid})


def _bench_run(loaded: Any, config: Any, drafter: Optional[str], prompts: Optional[Path], num_prompts: Optional[int],
               category: Optional[str], sps: Optional[Path], strict: bool) -> dict:
    """bench, running: the prompts chosen, each mode built (a notice for one left out), then every mode on
    every prompt under a progress bar; the report."""
    from minispark.measuring.bench import build_modes, builtin_prompts, file_prompts, run_bench
    from minispark.measuring.profiler import rich_progress

    chosen = (file_prompts(loaded, prompts, num_prompts, category) if prompts
              else builtin_prompts(loaded, num_prompts))
    runnable, notices = build_modes(loaded, config, drafter, sps, strict)
    for notice in notices:
        err_console.print(f"[yellow]{escape(notice)}[/yellow]", highlight=False)
    with rich_progress(True, label="bench") as progress:
        return run_bench(loaded, runnable, chosen, config, progress, drafter=drafter, notices=notices)


def _bench_render(report: dict, plot: Optional[Path], as_json: bool) -> None:
    """bench, rendering: the JSON report or the table, then the --plot PNG (a plot that cannot be written, on a
    full disk, loses no measurement: the figures are on the screen before its error)."""
    from minispark.measuring.bench_report import plot_bench, render_bench

    if as_json:
        _print_json(report)
    else:
        console.print(render_bench(report))
    if plot is not None:
        plot_bench(report, plot)
        if not as_json:
            console.print(f"wrote {plot}", highlight=False, markup=False)


@app.command()
@one_line_errors
def profile(
    target: Optional[str] = TargetOpt,
    drafter: Optional[Path] = typer.Option(None, "--drafter", help="A drafter directory: profile the target it "
                                           "records (as it was loaded) when --target is not given."),
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    contexts: str = typer.Option(",".join(map(str, defaults.PROFILE_CONTEXTS)), "--contexts",
                                 help="KV-cache lengths to profile."),
    max_tokens: int = typer.Option(defaults.PROFILE_MAX_TOKENS, "--max-tokens", help="Profile 1..N new tokens per step (≥ γ+1)."),
    batch_requests: str = typer.Option("", "--batch-requests", help="Request counts R whose batched verify (serve "
                                       "with R requests in flight: R sequences × 1..--max-tokens tokens in one forward, "
                                       "at the first context) is profiled too; e.g. 2,4,8,16."),
    rounds: int = typer.Option(defaults.PROFILE_ROUNDS, "--rounds", help="Shuffled rounds per context."),
    warmup: int = typer.Option(defaults.PROFILE_WARMUP, "--warmup", help="Untimed passes over every size per context."),
    drift_bound: float = typer.Option(defaults.PROFILE_DRIFT_BOUND, "--drift-bound",
                                      help="Relative reference drift that re-measures a round."),
    max_remeasure: int = typer.Option(defaults.PROFILE_MAX_REMEASURE, "--max-remeasure",
                                      help="Re-measurements of a drifted round at most."),
    cooldown: float = typer.Option(defaults.PROFILE_COOLDOWN_S, "--cooldown",
                                   help="Seconds to rest before re-measuring a drifted round."),
    seed: int = SeedOpt,
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads (CPU targets)."),
    note: str = typer.Option("", "--note", help="Free text stored in the table's metadata."),
    allow_busy: bool = typer.Option(False, "--allow-busy", help="Write the table even if the CPU was busy (flagged)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default: the user table directory, "
                                       "$MINISPARK_SPS_TABLES or sps_tables/ in the user cache dir; looked up before "
                                       "the shipped tables)."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also write a PNG of the SPS curves."),
    as_json: bool = JsonOpt,
) -> None:
    """Measure this device's steps-per-second table for the target (throttle-aware, interleaved)."""
    from minispark.measuring.profiler import PlotFailed, fitting_contexts, run_profile
    from minispark.target.embedded import EMBEDDED_NAME
    from minispark.target.remembered import context_limit_before_loading, read_record

    config = _profile_config(contexts, max_tokens, rounds, warmup, drift_bound, max_remeasure, cooldown, seed, threads,
                             note, allow_busy, out, plot, batch_requests)
    if drafter is not None:
        model_files.checkpoint(drafter, "--drafter")
        if target is None and read_record(drafter) is None:  # else the embedded target would be profiled instead
            raise MinisparkError(f"--drafter {drafter}: records no target (a drafter from before records, or an "
                                 "import); give its target with --target")
    figure_file(plot, "--plot", {"--drafter": drafter, "--target": target})
    if out is not None:  # a table inside the model directories is never looked up there
        checks.outside_inputs(out, "--out", {"--drafter": drafter, "--target": target})
    target, dtype, load_in_4bit, load_in_8bit = _remembered(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    _check_target_flags(target, dtype, device, load_in_4bit, load_in_8bit)
    load_in_4bit = _auto_4bit(target, dtype, device, load_in_4bit, load_in_8bit)
    # before the load (seconds here, minutes for a 3B target), from the config alone
    fitting_contexts(config, target or EMBEDDED_NAME, context_limit_before_loading(target))
    try:
        table, path = run_profile(config, target=target, dtype=dtype, device=device, load_in_4bit=load_in_4bit,
                                  load_in_8bit=load_in_8bit, threads=threads, out_dir=out, plot=plot,
                                  show_progress=not as_json)
    except PlotFailed as failed:  # the table was written: shown as usual, then the plot's one-line error
        _render_profile(failed.table, failed.path, max_tokens, as_json)
        raise
    _render_profile(table, path, max_tokens, as_json)


def _render_profile(table: Any, path: Path, max_tokens: int, as_json: bool) -> None:
    """profile's output: the JSON, or the table and where it was written."""
    from dataclasses import asdict

    from minispark.measuring.profiler import format_batched, format_table

    if as_json:
        _print_json({"path": str(path), **asdict(table)})
        return
    console.print(format_table(table, [n for n in (1, 2, 4, 8, 16) if n <= max_tokens]),
                  highlight=False,
                  markup=False)  # "median [min]" and the target's path as they are
    if table.batched is not None:
        console.print(format_batched(table), highlight=False, markup=False)
    console.print(f"wrote {path}", highlight=False, markup=False)


def _profile_config(contexts: str, max_tokens: int, rounds: int, warmup: int, drift_bound: float, max_remeasure: int,
                    cooldown: float, seed: int, threads: Optional[int], note: str, allow_busy: bool,
                    out: Optional[Path], plot: Optional[Path], batch_requests: str = "") -> Any:
    """profile's measuring flags checked (before anything loads) and its ``ProfileConfig``."""
    from minispark.measuring.profiler import ProfileConfig

    lengths = check_lists.integers(contexts, "--contexts", 0, distinct=True)
    counts = (check_lists.integers(batch_requests, "--batch-requests", 2, defaults.PROFILE_MAX_BATCH_REQUESTS,
                                distinct=True) if batch_requests.strip() else [])
    checks.one_line(note, "--note")
    checks.number(drift_bound, "--drift-bound", 0.0, low_open=True)
    checks.number(cooldown, "--cooldown", 0.0, 3600.0)
    checks.integer(threads, "--threads", 1)
    for value, flag, minimum in ((rounds, "--rounds", 1), (warmup, "--warmup", 0),
                                 (max_remeasure, "--max-remeasure", 0)):
        checks.integer(value, flag, minimum)
    if threads is not None and threads > (os.cpu_count() or 1):
        raise MinisparkError(f"--threads {threads}: this machine has {os.cpu_count()} CPUs (a table keyed to more "
                             "threads than it can run is never matched)")
    if max_tokens < defaults.PROFILE_MIN_TOKENS:
        raise MinisparkError(f"--max-tokens {max_tokens}: schedule mode verifies up to γ + 1 = "
                             f"{defaults.PROFILE_MIN_TOKENS} tokens per round; profile at least that many")
    checks.seed(seed)
    checks.output_dir(out)
    checks.output_file(plot, "--plot")
    return ProfileConfig(contexts=lengths, max_tokens=max_tokens, batch_requests=counts,
                         rounds=rounds, warmup=warmup, drift_bound=drift_bound, max_remeasure=max_remeasure,
                         cooldown_s=cooldown, seed=seed, note=note, allow_busy=allow_busy)


@app.command()
@one_line_errors
def calibrate(
    drafter: Path = typer.Option(..., "--drafter", help="DSpark checkpoint directory (STS is stored there)."),
    prompts: Path = typer.Option(..., "--prompts", help="Held-out prompts JSONL (its last N prompts are used)."),
    num_prompts: int = typer.Option(16, "--num-prompts", help="Prompts rolled out (the file's last N)."),
    target: Optional[str] = TargetOpt,
    gamma: Optional[int] = GammaOpt,
    temperature: float = typer.Option(defaults.DEFAULT_TEMPERATURE, "--temperature", help="Serving temperature "
                                     f"the rollouts use, in [0, {defaults.MAX_TEMPERATURE:g}] (the fit is kept per "
                                     "temperature: calibration.json at 0, calibration-t{T}.json at others)."),
    top_p: float = TopPOpt,
    top_k: int = TopKOpt,
    max_new_tokens: int = typer.Option(128, "--max-new-tokens", help="Tokens per rollout at most."),
    min_rounds: int = typer.Option(defaults.CALIBRATION_MIN_ROUNDS, "--min-rounds",
                                   help="Refuse to fit (keeping the stored calibration) on fewer rounds at any "
                                        "draft position."),
    seed: int = SeedOpt,
    dtype: Optional[str] = DtypeOpt,
    device: Optional[str] = DeviceOpt,
    load_in_4bit: bool = FourBitOpt,
    load_in_8bit: bool = EightBitOpt,
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write reliability diagrams (PNG)."),
    as_json: bool = JsonOpt,
) -> None:
    """Roll out the loop, report ECE/AUC/Brier per position, fit and store Sequential Temperature Scaling."""
    _check_calibration(drafter, prompts, num_prompts, gamma, temperature, max_new_tokens, min_rounds, seed, plot)
    from minispark.measuring.profiler import rich_progress  # seconds of imports: after the checks
    from minispark.data.prompts import load_prompt_inputs
    from minispark.measuring.rollouts import calibrate_drafter
    from minispark.target.sampling import SamplingConfig
    from minispark.serving.builder import build_serving

    figure_file(plot, "--plot", {"--prompts": prompts, "--drafter": drafter, "--target": target})
    target, dtype, load_in_4bit, load_in_8bit = _remembered(drafter, target, dtype, device, load_in_4bit, load_in_8bit)
    loaded = _load(target, dtype, device, load_in_4bit, load_in_8bit)
    sampling = SamplingConfig(temperature, top_k=top_k, top_p=top_p)
    setup = build_serving(loaded, drafter, "fixed", gamma, sampling=sampling)  # fixed: every position rolled out
    inputs = load_prompt_inputs(loaded, prompts, num_prompts)
    if not inputs:
        raise MinisparkError(f"--prompts {prompts}: no prompt usable with target {loaded.name}")
    with rich_progress(True, label="calibrate") as progress:
        report = calibrate_drafter(loaded, setup.drafter, drafter, inputs, setup.gamma, sampling, max_new_tokens, seed,
                                   progress=None if progress is None else
                                   (lambda i: progress(i, len(inputs), f"rolled out {i}/{len(inputs)} prompts")),
                                   min_rounds=min_rounds)
    _render_calibration(report, plot, as_json)


def _check_calibration(drafter: Path, prompts: Path, num_prompts: int, gamma: Optional[int], temperature: float,
                       max_new_tokens: int, min_rounds: int, seed: int, plot: Optional[Path]) -> None:
    """calibrate's flags, checked before the target loads (the numbers before any import that takes seconds)."""
    checks.integer(num_prompts, "--num-prompts", 1)
    checks.integer(gamma, "--gamma", 1)
    checks.integer(max_new_tokens, "--max-new-tokens", 1)
    checks.integer(min_rounds, "--min-rounds", 1)
    checks.seed(seed)
    temperature = checks.temperature(temperature)
    from minispark.data.provenance import warn_if_trained_on
    from minispark.model.drafter_dir import calibration_name
    from minispark.target.sampling import SamplingConfig

    model_files.checkpoint(drafter, "--drafter")
    # cp -rL: the contents, also through a symlink to the shipped directory (cp -r would copy the link)
    checks.not_shipped(drafter, "--drafter", f"copy it (cp -rL {shlex.quote(str(drafter))} my-drafter) and "
                         "calibrate the copy")
    checks.writable(drafter, "--drafter")  # calibration.json goes there: refused after the rollouts, naming a temp file
    name = calibration_name(temperature)
    if (drafter / name).is_dir():  # the same, as a traceback
        raise MinisparkError(f"--drafter {drafter}: its {name} is a directory, where calibrate writes "
                             "the fit; move it away")
    samples = _check_prompts(prompts)
    warn_if_trained_on(drafter, prompts, samples, num_prompts)  # a notice now, not after the rollouts
    checks.output_file(plot, "--plot")
    SamplingConfig(temperature)  # the temperature alone, as a sampling setting


def _render_calibration(report: dict, plot: Optional[Path], as_json: bool) -> None:
    """calibrate's report: the JSON or the metrics, the reliability of a_1 before and after STS, and where the
    temperatures were stored; then the --plot reliability diagrams (a plot that cannot be written, on a full
    disk, does not hide that the calibration was stored)."""
    from dataclasses import asdict

    from minispark.measuring.calibrate import plot_reliability, reliability, render_metrics, render_reliability

    rollouts, calibration = report.pop("rollouts"), report.pop("calibration")
    if as_json:
        _print_json({**report, "before": [asdict(m) for m in report["before"]],
                     "after": [asdict(m) for m in report["after"]]})
    else:
        console.print(render_metrics(report["before"], report["after"]))
        for label, cal in (("raw", None), ("STS", calibration)):
            bins = reliability(rollouts.confidences, rollouts.accepted, 1, cal)
            console.print(render_reliability(bins, title=f"reliability of a_1 ({label})"))
        console.print(f"STS temperatures {', '.join(f'{t:.2f}' for t in report['temperatures'])} → "
                      f"{report['path']}", highlight=False, markup=False)
    if plot is not None:
        plot_reliability(plot, rollouts.confidences, rollouts.accepted, calibration)


@app.command()
@one_line_errors
def simulate(
    conf: Optional[str] = typer.Option(None, "--conf", help="Per-position confidences in [0, 1], e.g. 0.9,0.8,0.7."),
    sps: Optional[Path] = typer.Option(None, "--sps", help="SPS table JSON."),
    sps_inline: Optional[str] = typer.Option(None, "--sps-inline", help="Steps per second for 1,2,3.. tokens, "
                                             "positive and never rising: 1.0,0.5,0.45"),
    appendix_a: bool = typer.Option(False, "--appendix-a", help="Run the peeking-scheduler counterexample "
                                    "(Appendix A) by Monte Carlo."),
    draws: Optional[int] = typer.Option(None, "--draws", show_default=False,
                                        help=f"Monte Carlo draws (--appendix-a; default: {defaults.APPENDIX_A_DRAWS:,}; at "
                                        f"most {defaults.APPENDIX_A_MAX_DRAWS:,})."),
    seed: Optional[int] = typer.Option(None, "--seed", show_default=False,
                                       help="Random seed (--appendix-a; default: 0)."),
    as_json: bool = JsonOpt,
) -> None:
    """The scheduler simulator: Θ(ℓ), causal vs peeking choices, the Appendix A counterexample."""
    from minispark.measuring.simulate import appendix_a as run_appendix_a, render_appendix_a, render_theta_table, theta_table
    from minispark.serving.sps import SPSTable

    checks.seed(seed)
    if appendix_a:
        given = [flag for flag, value in (("--conf", conf), ("--sps", sps), ("--sps-inline", sps_inline)) if value is not None]
        if given:  # the counterexample has its own confidences and costs: these would be ignored
            raise MinisparkError(f"--appendix-a runs a fixed counterexample; {', '.join(given)} cannot be used with it")
        checks.integer(draws, "--draws", 1, defaults.APPENDIX_A_MAX_DRAWS)
        result = run_appendix_a(**{key: value for key, value in (("draws", draws), ("seed", seed)) if value is not None})
        _print_json(result) if as_json else console.print(render_appendix_a(result))
        return
    given = [flag for flag, value in (("--draws", draws), ("--seed", seed)) if value is not None]
    if given:  # Θ(ℓ) is computed, not drawn: these were ignored without a word
        raise MinisparkError(f"{', '.join(given)}: only --appendix-a draws at random; drop "
                             f"{'it' if len(given) == 1 else 'them'} or add --appendix-a")
    if conf is None:
        raise MinisparkError("--conf is required (or use --appendix-a)")
    confidences = check_lists.floats(conf, "--conf", low=0.0, high=1.0)
    if sps is not None and sps_inline is not None:
        raise MinisparkError("--sps and --sps-inline are exclusive; give one")
    if sps is not None:
        table = SPSTable.load(checked_sps(sps))
    elif sps_inline is not None:
        table = SPSTable.from_inline(check_lists.sps_values(sps_inline))
    else:
        raise MinisparkError("give --sps FILE or --sps-inline 1.0,0.5,...")
    result = theta_table(confidences, table, source=f"--sps {sps}" if sps is not None else "--sps-inline")
    _print_json(result) if as_json else console.print(render_theta_table(result))
