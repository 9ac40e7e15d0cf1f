"""Throttle-aware SPS profiler: the target's forward step time for 1..max_tokens new tokens.

The scheduler (design notes §8, §8.1) needs SPS(n), steps per second of one target forward over n
new tokens (anchor + drafts) after a KV cache of the current context length, on the device and
precision it serves with. This module measures that grid and writes it as an
:class:`~minispark.serving.sps.SPSTable` to ``<user tables>/<device>__<target>.json``
(:func:`~minispark.serving.sps.user_tables_dir`; the shipped ``sps_tables/`` are only read).

Small GPUs throttle after a few seconds of load and shared CPUs change speed with their neighbours
(§14.2), so one timing per size would mostly measure *when* it ran. Per context length:

1. build the KV cache once (random token ids, prefilled in chunks); every timed step of n tokens
   is followed by ``crop(context)``, so each step sees exactly the same cache;
2. warm up (untimed passes over every size), then time a reference size a few times: the baseline;
3. run ``rounds`` rounds, each timing every size once in a fresh shuffled order, bracketed by the
   reference size at its start and end; a round whose reference median drifts more than
   ``drift_bound`` from the baseline is discarded and re-measured after ``cooldown_s`` of rest
   (up to ``max_remeasure`` times; after that the least-drifted attempt is kept and counted, and
   the baseline is re-taken: the speed has settled at a new level, or the first baseline was
   itself measured in a disturbed moment, and either way later rounds should be judged against
   the current level rather than all be re-measured);
4. report the median, the min and the spread (p90 − p10)/median of the kept rounds per size.

Steps 2-3 live in ``profile_rounds.py``. With ``--batch-requests`` the table also holds serve's batched
verify, R sequences × W tokens in one padded forward, measured the same way (``batch_profile.py``).

Drift control cannot tell a machine that is busy the whole time from an idle one. On CPU the
profiler therefore measures what other processes use: the CPU time of all cores minus its own
(``/proc/stat``), over one second before profiling and over the whole run. Where that is not
readable, it falls back to the load average minus an estimate of its own share. A table measured
while other processes wanted the cores is refused (``allow_busy`` records it anyway, flagged), and
every table stores the readings in ``metadata["machine_load"]`` (:mod:`~minispark.measuring.system_load`).

CUDA steps are timed with events after a synchronize; CPU steps with ``perf_counter``.

    minispark profile --contexts 256,1024 --max-tokens 16   # embedded target, this device
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import platform
import random
import shutil
import statistics
import subprocess
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from minispark.core.atomic import minispark_artifact
from minispark.measuring.figures import save_figure
from minispark.core.errors import MinisparkError, option
from minispark.core.identity import device_name, dtype_name, target_quantization
from minispark.measuring import system_load as load
from minispark.measuring.batch_profile import profile_batched
from minispark.measuring.profile_rounds import (MeasuredRounds, ProfileConfig, StepTimer, build_cache,
                                                measure_rounds, spread)
from minispark.serving.sps import SPSTable, replaceable_table_path, table_path, user_tables_dir
from minispark.target.loading import Target, load_target
from minispark.core.checks import not_shipped

#: ``progress(done, total, message)``: timed steps done / planned (re-measured rounds add to total).
ProgressFn = Callable[[int, int, str], None]


# ---------------------------------------------------------------------- device
def driver_version(device: torch.device) -> str:
    """The NVIDIA driver version for CUDA (nvidia-smi), ``"n/a"`` for CPU."""
    if device.type != "cuda":
        return "n/a"
    if shutil.which("nvidia-smi"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10, check=True).stdout
            if out.strip():
                return out.strip().splitlines()[0]
    return f"unknown (CUDA runtime {torch.version.cuda})"


# ---------------------------------------------------------------------- profiling
def _profile_context(target: Target, config: ProfileConfig, context: int, measure: StepTimer,
                     sleep: Callable[[float], None], rng: random.Random,
                     tick: Callable[..., None]) -> MeasuredRounds:
    generator = torch.Generator().manual_seed(config.seed + context)
    ids = torch.randint(0, target.vocab_size, (1, context + config.max_tokens), generator=generator)
    ids = ids.to(target.device)
    draft = ids[0, context:]  # (max_tokens,) the "new" tokens; their values do not change the cost

    with target.session() as session:
        build_cache(session, ids[:, :context])

        def timed(n: int) -> float:
            seconds = measure(lambda: session.step(draft[:n]))
            session.crop(context)  # every step sees the same cache
            return seconds

        return measure_rounds(timed, config.tokens, config.reference_tokens, config, sleep, rng, tick,
                              f"context {context}")


def fitting_contexts(config: ProfileConfig, name: str, max_positions: int | None) -> tuple[list[int], list[int]]:
    """The contexts of ``config`` whose steps fit a target's ``max_positions`` (None: no limit), and those
    skipped; a step longer than the target, or one that fits no context, is an error. The CLI checks this
    from the target's config before loading it, and the profile again from the loaded target."""
    if max_positions is not None and config.max_tokens >= max_positions:
        raise MinisparkError(f"{option('max_tokens')} {config.max_tokens}: more than {name}'s {max_positions} "
                             "positions; profile fewer tokens per step")
    contexts = [c for c in config.contexts
                if max_positions is None or c + config.max_tokens <= max_positions]
    skipped = [c for c in config.contexts if c not in contexts]
    if not contexts:  # before the notice, which would say the same thing first
        raise MinisparkError(f"{option('contexts')}: none of {config.contexts} leaves room for {option('max_tokens')} "
                             f"{config.max_tokens} in {name}'s {max_positions} positions")
    return contexts, skipped


def _fitting_contexts(target: Target, config: ProfileConfig) -> tuple[list[int], list[int]]:
    """:func:`fitting_contexts` of the loaded target, the skipped contexts a warning."""
    max_positions = target.context_limit
    contexts, skipped = fitting_contexts(config, target.name, max_positions)
    if skipped:  # stacklevel 3: the warning names profile_target's caller
        warnings.warn(f"profile: skipping contexts {skipped}: context + max_tokens ({config.max_tokens}) "
                      f"exceeds {target.name}'s {max_positions} positions", stacklevel=3)
    return contexts, skipped


def profile_target(target: Target, config: ProfileConfig, progress: ProgressFn | None = None, *,
                   timer: Callable[[], float] | None = None,
                   sleep: Callable[[float], None] = time.sleep) -> SPSTable:
    """Measure the SPS table of ``target`` on the device it is loaded on (see the module docstring).

    ``timer`` and ``sleep`` are injectable for tests (a fake clock that throttles, a cooldown that
    cools it); by default CUDA events / ``perf_counter`` and ``time.sleep``.
    """
    contexts, skipped = _fitting_contexts(target, config)
    device = target.device
    load_before = load.machine_load(device)
    load.check_load(load_before, "before profiling", config.allow_busy)
    cpu_start = load.read_cpu_times() if load_before is not None else None
    measure = StepTimer(device, timer)
    rng = random.Random(config.seed)
    total = (len(contexts) + len(config.batch_requests)) * config.rounds * config.max_tokens
    done = 0

    def tick(steps: int, message: str, *, replanned: int = 0) -> None:
        nonlocal done, total
        done += steps
        total += replanned  # a discarded round is measured again
        if progress is not None:
            progress(done, total, message)

    started = time.monotonic()
    results: list[MeasuredRounds] = []
    batched, batched_rounds = None, None
    gc_was_enabled = gc.isenabled()
    gc.disable()  # a collection inside a timed step is noise, not model cost
    try:
        for context in contexts:
            gc.collect()
            results.append(_profile_context(target, config, context, measure, sleep, rng, tick))
        if config.batch_requests:  # serve's batched verify, at the first context
            gc.collect()
            batched, batched_rounds = profile_batched(target, config, contexts[0], measure, sleep, rng, tick)
    finally:
        if gc_was_enabled:
            gc.enable()

    wall_s = time.monotonic() - started
    load_after = load.machine_load(device, own_seconds=wall_s, since=cpu_start)
    if load_before is None or not load_before.busy:  # busy before: refused, or (--allow-busy) said once already
        load.check_load(load_after, "during profiling", config.allow_busy)
    metadata = _metadata(target, config, device, skipped, wall_s)
    if load_before is not None and load_after is not None:
        metadata["machine_load"] = {"before": load_before.as_dict(), "after": load_after.as_dict(),
                                    "busy": load_before.busy or load_after.busy}
    metadata["drift"] = {str(context): _drift(res) for context, res in zip(contexts, results)}
    if batched_rounds is not None:
        metadata["drift"]["batched"] = _drift(batched_rounds)
    samples = [[res.samples[n] for n in config.tokens] for res in results]  # [context][token][round]
    return SPSTable(
        device=device_name(device),
        target=target.name,
        dtype=dtype_name(target.dtype),
        quantization=target_quantization(target),
        contexts=contexts,
        tokens=config.tokens,
        seconds=[[statistics.median(times) for times in row] for row in samples],
        seconds_min=[[min(times) for times in row] for row in samples],
        seconds_spread=[[spread(times) for times in row] for row in samples],
        metadata=metadata,
        batched=batched,
    )


def _drift(rounds: MeasuredRounds) -> dict[str, Any]:
    return {"baselines_s": rounds.baselines_s, "max_abs_drift": max(rounds.drifts),
            "median_abs_drift": statistics.median(rounds.drifts), "remeasured_rounds": rounds.remeasured,
            "kept_drifted_rounds": rounds.kept_drifted}


def _metadata(target: Target, config: ProfileConfig, device: torch.device, skipped: list[int],
              wall_s: float) -> dict[str, Any]:
    import transformers

    meta: dict[str, Any] = {
        "torch": torch.__version__,
        "driver": driver_version(device),
        "date": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat(),
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch_device": str(device),
        "target_identity": target.identity(),
        "runtime": target.runtime,  # find_table matches it: packed and eager steps cost differently
        "timer": "cuda-events" if device.type == "cuda" else "perf_counter",
        "config": asdict(config),
        "contexts_skipped": skipped,
        "wall_seconds": round(wall_s, 1),
    }
    if device.type == "cuda":
        meta["cuda"] = torch.version.cuda or "unknown"
    else:
        meta["threads"] = torch.get_num_threads()
    if config.note:
        meta["note"] = config.note
    return meta


# ---------------------------------------------------------------------- reporting
def format_table(table: SPSTable, tokens: list[int] | None = None) -> str:
    """Median ms per step (min in brackets) for ``tokens`` at every context, as aligned text."""
    tokens = [n for n in (tokens or table.tokens) if n in table.tokens]
    head = f"{'context':>8} " + " ".join(f"{'n=' + str(n):>20}" for n in tokens)
    lines = [f"{table.device} / {table.target} ({table.dtype}, {table.quantization}): ms per step, "
             f"median [min] spread", head]
    for ci, context in enumerate(table.contexts):
        cells = []
        for n in tokens:
            j = table.tokens.index(n)
            cells.append(f"{table.seconds[ci][j] * 1e3:7.2f} [{table.seconds_min[ci][j] * 1e3:6.2f}] "
                         f"{table.seconds_spread[ci][j]:4.0%}")
        lines.append(f"{context:>8} " + " ".join(cells))
    return "\n".join(lines)


def format_batched(table: SPSTable) -> str:
    """The batched grid (serve's verify of R requests) as aligned text: median ms per forward, and per request."""
    grid = table.batched
    widths = [w for w in (1, 2, 4, 8, 16) if w in grid["widths"]]
    lines = [f"batched verify at context {grid['context']}: ms per forward of R requests × W tokens "
             "(ms per request)", f"{'R':>8} " + " ".join(f"{'W=' + str(w):>16}" for w in widths)]
    for requests, row in zip(grid["requests"], grid["seconds"]):
        cells = [f"{row[w - 1] * 1e3:8.1f} ({row[w - 1] * 1e3 / requests:5.1f})" for w in widths]
        lines.append(f"{requests:>8} " + " ".join(cells))
    return "\n".join(lines)


def plot_sps(table: SPSTable, path: str | Path) -> Path:
    """PNG: step time (median, min) vs tokens per context, and the cost relative to one token."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax_ms, ax_rel) = plt.subplots(1, 2, figsize=(11, 4.2))
    for ci, context in enumerate(table.contexts):
        med = [s * 1e3 for s in table.seconds[ci]]
        low = [s * 1e3 for s in table.seconds_min[ci]]
        line, = ax_ms.plot(table.tokens, med, marker="o", ms=3, label=f"context {context}")
        ax_ms.plot(table.tokens, low, ls="--", lw=0.8, color=line.get_color())
        ax_rel.plot(table.tokens, [m / med[0] for m in med], marker="o", ms=3, color=line.get_color(),
                    label=f"context {context}")
    ax_ms.set(xlabel="tokens per forward (anchor + drafts)", ylabel="ms per step (— median, -- min)",
              title="target step time")
    ax_rel.set(xlabel="tokens per forward (anchor + drafts)", ylabel="step time / step time at 1 token",
               title="relative cost (1 = free extra tokens)")
    for ax in (ax_ms, ax_rel):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{table.device} / {table.target} ({table.dtype}, {table.quantization}), "
                 f"{table.metadata.get('date', '')}", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return path


@contextlib.contextmanager
def rich_progress(enabled: bool = True, label: str = "profile") -> Iterator[ProgressFn | None]:
    """A rich progress bar on stderr as a ``progress`` callback (``None`` when disabled). The bar appears at
    the first progress reported: a check that fails before any (a step past the target's context, a busy
    machine) prints its one error line alone, not under an empty ``0/?`` bar."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from minispark.core.console import make_console

    bar = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TextColumn("ETA"),
                   TimeRemainingColumn(), TextColumn("{task.description}"), console=make_console(stderr=True))
    task = bar.add_task("", total=None)

    def update(done: int, total: int, message: str) -> None:
        if not bar.live.is_started:
            bar.start()
        bar.update(task, completed=done, total=total, description=message)

    try:
        yield update
    finally:
        if bar.live.is_started:
            bar.stop()


# ---------------------------------------------------------------------- one call for the CLI
class PlotFailed(MinisparkError):
    """The SPS table was measured and written, and only its --plot could not be (a full disk, ulimit -f): the
    error says so, and carries the ``table`` and its ``path`` for the caller to show."""

    def __init__(self, table: SPSTable, path: Path, cause: MinisparkError) -> None:
        super().__init__(f"the SPS table was written to {path}; only the plot failed: {cause}")
        self.table, self.path = table, path


def run_profile(config: ProfileConfig, *, target: str | None = None, dtype: str | None = None,
                device: str | None = None, load_in_4bit: bool = False, load_in_8bit: bool = False,
                threads: int | None = None, out_dir: str | Path | None = None, plot: str | Path | None = None,
                show_progress: bool = True) -> tuple[SPSTable, Path]:
    """Load the target, profile it, write ``<out_dir>/<device>__<target>.json`` (and the plot);
    ``out_dir`` defaults to the user's table directory; the shipped ``sps_tables/`` are refused before the
    target loads. A plot that cannot be written after the table was raises :class:`PlotFailed`."""
    if out_dir is not None:
        not_shipped(out_dir, option("out"), "omit --out: measured tables go to the user table directory, which is "
                    "looked up before the shipped ones")
    flag = option("out") if out_dir is not None else "$MINISPARK_SPS_TABLES"
    if out_dir is None:  # a file at $MINISPARK_SPS_TABLES is refused now, not by mkdir once the profile is measured
        out_dir = user_tables_dir()
    not_shipped(out_dir, "$MINISPARK_SPS_TABLES", "point it at a directory of your own")
    # a table written into a cache (or a drafter, an answer set, a run) was a file its own command had not written:
    # `cache` then refused to resume it, saying minispark had not written the table
    if (artifact := minispark_artifact(out_dir)) is not None:
        raise MinisparkError(f"{flag} {out_dir}: holds {artifact[0]}; write SPS tables into a directory of their own")
    if plot is not None:
        not_shipped(plot, option("plot"), "write the plot elsewhere")
    if threads is not None and threads < 1:
        raise MinisparkError(f"{option('threads')} must be >= 1")
    loaded = load_target(target, dtype=dtype, device=device, load_in_4bit=load_in_4bit,
                         load_in_8bit=load_in_8bit)
    loaded.threads = None  # a table is timed at one thread count, the one it is keyed to: never changed under it
    if threads is not None:
        torch.set_num_threads(threads)
    # where the table will go, refused now if someone's file holds the name, not after minutes of measuring
    replaceable_table_path(table_path(out_dir, device_name(loaded.device), loaded.name,
                                      eager_cpu=loaded.runtime == "eager" and loaded.device.type == "cpu"))
    with rich_progress(show_progress) as progress:
        table = profile_target(loaded, config, progress)
    path = table.save(table.path_in(out_dir))
    if plot is not None:
        try:
            plot_sps(table, plot)
        except MinisparkError as exc:  # minutes of measuring are kept: the error must not read as if lost
            raise PlotFailed(table, path, exc) from None
    return table, path
