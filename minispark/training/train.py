"""Train a DSpark drafter on a target cache: packed anchor batches, chunked losses, checkpoints.

``train(load_recipe("tiny"), cache_dir, out_dir)`` opens the cache and refuses one built for
another target, tokenizer, layer set, window or γ; builds the draft model with the target's frozen
embedding and lm_head; then, step by step, packs ``batch_anchors`` anchors (all anchors of a
sample share one row, §10.2), runs the backbone once, computes the §10.3 losses a few anchors'
logits at a time (``losses.chunked_backward``) and takes an AdamW step (warmup, then cosine).

Output directory::

    OUT/train_config.json                  the TrainConfig of the run
    OUT/metrics.jsonl                      one JSON object per logged step
    OUT/latest                             name of the newest checkpoint directory
    OUT/checkpoint-000200/config.json      DraftConfig (load_drafter reads this directory)
                         /model.safetensors trainable weights (fp32; no embedding / lm_head)
                         /trainer.pt        step, optimizer, LR schedule and RNG state
                         /train_config.json
    OUT/best/                              with a held-out cache: the checkpoint with the best held-out
                                           τ proxy (config.json, model.safetensors, heldout.json)
    OUT/drafter/                           the final drafter (config.json + model.safetensors): ``best/``
                                           when a held-out cache was given, else the last checkpoint; with
                                           target.json and training_data.json (the prompts trained on)

Each checkpoint is written to a temporary directory and renamed into place; ``resume=True``
continues from ``latest`` with the identical next-step loss. A run stopped before its first checkpoint
(Ctrl-C, a full disk) starts again from step 0 when rerun, with or without ``--resume``.

    minispark train --recipe tiny --cache runs/cache-tiny --out runs/draft-tiny
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.utils.checkpoint

from minispark.core.atomic import adopt_written, foreign_entry, open_append, write_text_atomic
from minispark.data.answers import MANIFEST as ANSWERS_MANIFEST, AnswerSet
from minispark.data.cache_format import CacheReader
from minispark.data.provenance import sources_of_run, write_training_data
from minispark.target.remembered import record_from_manifest, write_record
from minispark.model.checkpoint import copy_drafter
from minispark.core.errors import MinisparkError, option
from minispark.core.checks import not_shipped, outside_inputs
from minispark.training.losses import LossStats
from minispark.training.onpolicy import ONPOLICY_FILE
from minispark.training.online import OnlineSource
from minispark.training.recipes import (TrainConfig)

from minispark.training.trainer import (BEST_DIR, CHECKPOINT_NAME, DRAFTER_DIR, LATEST_FILE, METRICS_FILE,
                                        TRAIN_CONFIG_FILE, TRAINER_FILE, Trainer)
from minispark.core.writer_lock import sole_writer


@dataclass
class TrainReport:
    """What a run did: per-step losses, the last logged metrics, where the drafter is."""

    out: Path
    drafter: Path
    first_step: int
    last_step: int
    losses: dict[int, float] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """What ``train --json`` prints: one object with the drafter's path, the steps, the logged rows."""
        return {"drafter": str(self.drafter), "out": str(self.out), "first_step": self.first_step,
                "last_step": self.last_step, "seconds": round(self.seconds, 2), "summary": self.summary(),
                "metrics": self.metrics, "evaluations": self.evaluations}

    def summary(self) -> str:
        if self.last_step < self.first_step:  # a resumed run that had already reached its last step
            return f"nothing to train: the run was already at step {self.last_step}; drafter at {self.drafter}"
        last = self.metrics[-1] if self.metrics else {}
        acc = " ".join("-" if a is None else f"{a:.2f}" for a in last.get("acceptance", []))
        return (f"steps {self.first_step}..{self.last_step} in {self.seconds:.0f} s; loss "
                f"{last.get('loss', math.nan):.4f}, acceptance proxy per position [{acc}], "
                f"τ≈{last.get('tau', math.nan):.2f}; drafter at {self.drafter}")


def train(config: TrainConfig, cache_dir: str | Path | None = None, out_dir: str | Path | None = None, *,
          resume: bool = False, progress: bool = False, target: Any = None,
          log: Callable[[str], None] | None = print) -> TrainReport:
    """Train (or, with ``resume``, continue) the recipe ``config`` on the cache at ``cache_dir``.

    ``target`` may be passed already loaded; otherwise the cache's target is loaded on the CPU
    (only its embedding, lm_head, sizes, tokenizer and identity are used).
    """
    if cache_dir is None and config.cache_dir is None and config.answers_dir is None:
        raise MinisparkError(f"{option('cache')}: recipe {config.name!r} names no cache_dir or answers_dir; pass {option('cache')} DIR "
                             f"or {option('answers')} DIR")
    out = Path(out_dir or config.out_dir or f"runs/draft-{config.name}")
    with sole_writer(out):  # a second run into this --out would interleave its checkpoints and metrics with these
        return _train(config, cache_dir, out, resume, progress, target, log)


def _train(config: TrainConfig, cache_dir: str | Path | None, out_dir: Path, resume: bool, progress: bool,
           target: Any, log: Callable[[str], None] | None) -> TrainReport:
    started = time.perf_counter()
    out, resume = _output_dir(config, out_dir, resume, log, cache_dir)
    data, reader, target = _open_data(config, cache_dir, target)
    out.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(config, reader, target, out, log)
    del target  # when loaded here for a cache, the target's decoder is freed now (online, the source keeps it)
    if log:
        _log_plan(trainer, config, reader, log)
    _start(trainer, config, out, resume, log)
    report = TrainReport(out=out, drafter=out / DRAFTER_DIR, first_step=trainer.step + 1, last_step=trainer.step)
    _run(trainer, config, report, progress, log)
    # With a held-out cache the drafter is the best checkpoint by held-out τ, not the last one.
    best = out / BEST_DIR if trainer.heldout is not None else out / (out / LATEST_FILE).read_text().strip()
    record = record_from_manifest(data.config)  # chat --drafter DIR loads this target the same way
    # the prompts trained on, by content: calibrate says when its held-out prompts are among them
    sources = sources_of_run(data.config, len(data) if isinstance(data, AnswerSet) else data.num_samples,
                             config.first_sample, config.max_samples, config.init_from, config.replay_samples)
    copy_drafter(best, report.drafter,
                 extra=lambda tmp: (write_record(tmp, record), write_training_data(tmp, sources)))
    report.last_step, report.seconds = trainer.step, time.perf_counter() - started
    return report


def _output_dir(config: TrainConfig, out_dir: str | Path, resume: bool,
                log: Callable[[str], None] | None, cache_dir: str | Path | None = None) -> tuple[Path, bool]:
    """The run directory and whether this run resumes it; refuses a directory that is not a run's, and one
    inside what the run reads (it would land among a cache's shards, which a resumed `cache` then refuses)."""
    out = Path(out_dir)
    outside_inputs(out, option("out"), {option("cache"): cache_dir or config.cache_dir, option("answers"): config.answers_dir,
                                  option("heldout_cache"): config.heldout_cache, "init_from": config.init_from})
    not_shipped(out, option("out"), "choose a directory of your own")
    if resume and not out.exists():  # the recipe's own --out too: it trained from step 0 as if a run had stopped
        raise MinisparkError(f"{option('out')} {out}: no such directory, so no training run to resume; drop {option('resume')} to start "
                             "one")
    _repoint_latest(out, log)
    restart = not (out / LATEST_FILE).exists() and (not out.exists() or stopped_before_checkpoint(out))
    if restart and (resume or (out / TRAIN_CONFIG_FILE).is_file()) and log:
        log(f"{out}: no checkpoint written yet (stopped before its first one?); training from step 0")
    resume = resume and not restart
    if not resume and (out / LATEST_FILE).exists():
        raise MinisparkError(f"{option('out')} {out}: already holds a training run; pass {option('resume')} to continue it, or "
                             f"choose another {option('out')}")
    if not resume and not restart and out.is_dir() and any(out.iterdir()):
        # Checkpoints are pruned and drafter/ replaced: never in a directory holding someone else's files.
        raise MinisparkError(f"{option('out')} {out}: not empty and not a minispark training run; choose an empty or new "
                             "directory")
    if not resume and out.exists() and not out.is_dir():
        raise MinisparkError(f"{option('out')} {out}: is a file, not a directory")
    return out, resume


def _repoint_latest(out: Path, log: Callable[[str], None] | None) -> None:
    """A kill (SIGKILL: no handler runs) after a first checkpoint's rename and before ``latest`` names it leaves a
    run with checkpoints and no ``latest``, which --resume called a run without a checkpoint and a plain rerun not
    a run: ``latest`` is pointed at the newest checkpoint that is whole by its record again."""
    if out.is_symlink() or (out / LATEST_FILE).exists() or not (out / TRAIN_CONFIG_FILE).is_file():
        return
    whole = sorted(p.name for p in out.glob("checkpoint-*") if CHECKPOINT_NAME.fullmatch(p.name) and not p.is_symlink()
                   and (p / TRAINER_FILE).is_file() and foreign_entry(p) is None)
    if whole:
        write_text_atomic(out / LATEST_FILE, whole[-1] + "\n")
        if log:
            log(f"{out}: {LATEST_FILE} was missing (stopped between writing {whole[-1]} and naming it?); it names "
                f"{whole[-1]} again")


def _open_data(config: TrainConfig, cache_dir: str | Path | None, target: Any
               ) -> tuple[AnswerSet | CacheReader, CacheReader | OnlineSource, Any]:
    """(the answer set or cache, what the trainer reads anchors from, the target)."""
    online = cache_dir is None and config.cache_dir is None
    if config.max_answer_tokens and not online:
        raise MinisparkError(f"max_answer_tokens: cuts the answers of an answer set ({option('answers')}); a cache's anchors are "
                             "fixed when it is built")
    if config.online_store and not online:
        raise MinisparkError(f"online_store: keeps the features an answer set's prefill computes ({option('answers')}); a cache "
                             "holds its features already")
    data = AnswerSet(Path(config.answers_dir)) if online else CacheReader(Path(cache_dir or config.cache_dir))
    # A held-out answer set is encoded by the target's decoder as a held-out cache is not: the whole target then
    heldout_answers = config.heldout_cache is not None and (Path(config.heldout_cache) / ANSWERS_MANIFEST).exists()
    if target is None and not online and config.init_layers == "random" and not heldout_answers:
        from minispark.training.target_tensors import load_frozen_parts

        # From a cache the target never runs: its embedding, lm_head, tokenizer and identity are read from
        # its safetensors, with no whole model on the host (see target_tensors.py).
        target = load_frozen_parts(config.target or data.config["target"]["name"])
    elif target is None:
        from minispark.target.loading import load_target

        # Online, the target computes features as training goes, on the training device and in the compute dtype: a
        # drafter trained on bf16 features scored the same on fp32 ones (held-out τ 1.321 both; the lab book).
        target = load_target(config.target or data.config["target"]["name"],
                             device=config.resolved_device if online else "cpu",
                             dtype="bf16" if config.compute_dtype == "bf16" else None)
    if not online:
        return data, data, target
    layers = target.auto_layers() if config.feature_layers is None else target.check_layers(config.feature_layers)
    return data, OnlineSource(data, target, layers, config.window, config.block_size,
                              prompts=config.online_prompts, max_answer_tokens=config.max_answer_tokens,
                              store=config.online_store), target


def _log_plan(trainer: Trainer, config: TrainConfig, reader: CacheReader | OnlineSource,
              log: Callable[[str], None]) -> None:
    from minispark.training.memory import estimate_memory

    estimate = estimate_memory(replace(config, tie_embeddings=trainer.dims.tie_embeddings), draft=trainer.draft_config)
    if trainer.draft_config.draft_vocab:
        chosen = (f"{config.init_from}'s vocabulary ({trainer.draft_config.draft_vocab} tokens) covers" if config.init_from
                  else f"the {trainer.draft_config.draft_vocab} most frequent answer tokens cover")
        log(f"draft vocabulary: {chosen} {trainer.vocab_coverage:.2%} of the training answers")
    if trainer.replay is not None:
        log(f"on-policy: {trainer.replay.rounds} round anchors of {trainer.replay.anchors_scored} replayed "
            f"(τ {trainer.replay.tau:.3f} on the training answers)")
    log(f"{trainer.plan.total} anchors from {trainer.plan.samples} samples; predicted peak memory "
        f"{estimate.predicted_peak / 1e9:.2f} GB ({config.resolved_device}, {config.compute_dtype}, "
        f"{config.optimizer_name})" + (online_memory(config, reader) if isinstance(reader, OnlineSource) else ""))


def _start(trainer: Trainer, config: TrainConfig, out: Path, resume: bool, log: Callable[[str], None] | None) -> None:
    """Restore the latest checkpoint (metrics cut back to it), or write a fresh run's config."""
    metrics_path = out / METRICS_FILE
    if resume:
        path = trainer.restore()
        for mine in (BEST_DIR, DRAFTER_DIR):  # this run's own, written by a minispark that kept no record
            adopt_written(out / mine)
        kept = [line for line in _read_lines(metrics_path) if _logged_step(line) <= trainer.step]
        write_text_atomic(metrics_path, "".join(kept))
        if log:
            log(f"resumed from {path} at step {trainer.step}")
    else:
        write_text_atomic(out / TRAIN_CONFIG_FILE, config.to_json() + "\n")
        open_append(metrics_path, truncate=True).close()


def _run(trainer: Trainer, config: TrainConfig, report: TrainReport, progress: bool,
         log: Callable[[str], None] | None) -> None:
    """Steps until ``config.steps`` or early stopping: metrics, held-out evaluations, checkpoints."""
    with _Meter(config, trainer.step, progress) as meter, open_append(trainer.out / METRICS_FILE) as metrics:
        while trainer.step < config.steps:
            stats, norm, anchors = trainer.train_one()
            if not math.isfinite(stats.total):  # every later step is NaN too: a drafter of NaN weights was saved
                raise MinisparkError(f"training diverged: the loss at step {trainer.step} is {stats.total}; lower lr "
                                     f"(now {config.lr:g}) and train into a new {option('out')} (nothing of this step is saved)")
            report.losses[trainer.step] = stats.total
            row = meter.update(trainer.step, stats, norm, trainer.scheduler.get_last_lr()[0], anchors)
            if row is not None:
                metrics.write(json.dumps(row) + "\n")
                metrics.flush()
                report.metrics.append(row)
                if log and not progress:
                    log(format_metrics(row, config.steps))
            every = config.eval_every or config.checkpoint_every
            if trainer.heldout is not None and (trainer.step % every == 0 or trainer.step == config.steps):
                evaluation = trainer.evaluate()
                metrics.write(json.dumps(evaluation) + "\n")
                metrics.flush()
                report.evaluations.append(evaluation)
                if log:
                    log(format_evaluation(evaluation))
            # Early stopping: the drafter is the best held-out checkpoint anyway, so steps past the
            # point where held-out τ stopped improving are spent on memorising the training answers.
            stop = (config.patience > 0 and trainer.best is not None
                    and trainer.step - trainer.best["step"] >= config.patience)
            if trainer.step % config.checkpoint_every == 0 or trainer.step == config.steps or stop:
                trainer.save()
            if stop:
                if log:
                    log(f"held-out τ has not improved for {config.patience} steps (best at step "
                        f"{trainer.best['step']}); stopping")
                break


#: What a run writes into ``--out`` before its first checkpoint (and the temporary names of its atomic writes).
EARLY_FILES = (TRAIN_CONFIG_FILE, METRICS_FILE, ONPOLICY_FILE, BEST_DIR)
_EARLY_TEMP = re.compile(r"\.(checkpoint-\d{6}|best|latest|metrics\.jsonl|train_config\.json|onpolicy\.json)\..+")
_CONFIG_TEMP = re.compile(r"\.train_config\.json\.[a-z0-9_]{8}\.tmp")  # write_text_atomic's temporary of it


def stopped_before_checkpoint(out: Path) -> bool:
    """Whether ``out`` is empty, or holds a run of ours that stopped (Ctrl-C, a full disk) before its first
    checkpoint: its ``train_config.json`` and nothing but what a run writes before one. Such a run is
    started again from step 0, with or without ``--resume``: there is nothing to continue or to lose."""
    entries = [p for p in out.iterdir()] if out.is_dir() and not out.is_symlink() else None
    if entries is None:
        return False
    if not entries:
        return True
    if not (out / TRAIN_CONFIG_FILE).is_file():  # killed while writing it, the run's first file: its temporary alone
        return all(not p.is_symlink() and p.is_file() and _CONFIG_TEMP.fullmatch(p.name) for p in entries)
    return all(not p.is_symlink() and (p.name in EARLY_FILES or _EARLY_TEMP.fullmatch(p.name)) for p in entries)


def online_memory(config: TrainConfig, source: OnlineSource) -> str:
    """What online training keeps beside the drafter's step: the target's weights (on its device) and one
    pool's features (every position of ``online_pool`` answers at the longest answer of the set, fp32, in
    CPU memory), and what a feature store keeps on disk."""
    target = source.target.model
    weights = sum(p.numel() * p.element_size() for p in target.parameters())
    lengths = [len(source.answers[i].ids) for i in range(min(len(source.answers), 4096))]  # (prompt + answer)
    pool = config.online_pool * max(lengths, default=0) * (len(source.layers) + 1) * source.target.hidden_size * 4
    text = (f" + online: target weights {weights / 1e9:.2f} GB on {source.target.device.type}, one pool's features "
            f"{pool / 1e9:.2f} GB in CPU memory")
    if source.store is not None:  # its disk: every position's features, in the target's dtype
        row = (len(source.layers) + 1) * source.target.hidden_size * source.store.dtype.itemsize
        each = np.mean(lengths or [0]) * row
        text += (f"; features kept in {source.store.directory} ({len(source.store)} answers so far, "
                 f"~{each / 1e6:.1f} MB an answer)")
    return text


def _logged_step(line: str) -> float:
    """The step a metrics line logs; a line cut short by a kill mid-append (or damaged) is dropped on resume as
    one past the checkpoint (a JSONDecodeError traceback before)."""
    try:
        row = json.loads(line)
        return float(row["step"]) if isinstance(row, dict) else math.inf
    except (ValueError, KeyError, TypeError, RecursionError):
        return math.inf


def _read_lines(path: Path) -> list[str]:
    """Our log's lines; nothing from a symlink planted in its place (it is replaced, never read or followed). A line
    that is not UTF-8 (damaged bytes: a UnicodeDecodeError traceback before) is dropped, as a line cut short is."""
    if not path.is_file() or path.is_symlink():
        return []
    lines = []
    for raw in path.read_bytes().splitlines(keepends=True):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            continue
    return lines


# ---------------------------------------------------------------------- progress and metrics
def format_evaluation(row: dict[str, Any]) -> str:
    acc = " ".join(f"{a:.2f}" for a in row["heldout_acceptance"])
    return (f"step {row['step']} held-out τ≈{row['heldout_tau']:.3f} (T=0 {row['heldout_tau_greedy']:.3f}) acc [{acc}] "
            f"on {row['heldout_blocks']} blocks "
            f"(best {row['best_heldout_tau']:.3f} at step {row['best_step']})")


def format_metrics(row: dict[str, Any], steps: int) -> str:
    acc = " ".join("-" if a is None else f"{a:.2f}" for a in row["acceptance"])
    minutes, seconds = divmod(int(row["eta_s"]), 60)
    eta = f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"
    return (f"step {row['step']}/{steps} loss {row['loss']:.4f} (ce {row['ce']:.3f} tv {row['tv']:.3f} "
            f"conf {row['conf']:.3f}) acc [{acc}] τ≈{row['tau']:.2f} | {row['tokens_per_s']:.0f} tok/s ETA {eta}")


class _Meter:
    """Averages loss terms over each logging interval; tokens/s counts supervised draft positions.
    With ``progress``, shows a rich bar (loss, tokens/s, ETA) with each logged line printed above it."""

    def __init__(self, config: TrainConfig, start_step: int, progress: bool) -> None:
        self.config, self.start_step = config, start_step
        self.started = self.interval_start = time.perf_counter()
        self.reset()
        self.bar = None
        if progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            from minispark.core.console import make_console

            self.bar = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[info]}"), TextColumn("ETA"), TimeRemainingColumn(),
                                console=make_console(stderr=True))  # stdout stays clean for --json
            self.task = self.bar.add_task("train", total=config.steps, completed=start_step, info="")

    def reset(self) -> None:
        gamma = self.config.block_size
        self.sums = dict(loss=0.0, ce=0.0, tv=0.0, conf=0.0, grad_norm=0.0)
        self.acc, self.counts = torch.zeros(gamma), torch.zeros(gamma)
        self.tau, self.blocks, self.positions, self.steps, self.anchors = 0.0, 0, 0, 0, 0

    def __enter__(self) -> "_Meter":
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def update(self, step: int, stats: LossStats, norm: float, lr: float, anchors: int) -> dict[str, Any] | None:
        for key, value in (("loss", stats.total), ("ce", stats.ce), ("tv", stats.tv), ("conf", stats.conf),
                           ("grad_norm", norm)):
            self.sums[key] += value
        self.acc += stats.acceptance_sum
        self.counts += stats.counts
        self.tau += stats.tau_sum
        self.blocks, self.positions = self.blocks + stats.blocks, self.positions + stats.positions
        self.steps, self.anchors = self.steps + 1, self.anchors + anchors
        if self.bar is not None:
            self.bar.update(self.task, advance=1)
        if step % self.config.log_every and step != self.config.steps:
            return None
        now = time.perf_counter()
        per_step = (now - self.started) / max(1, step - self.start_step)
        row = {key: value / self.steps for key, value in self.sums.items()}
        row |= {"step": step, "lr": lr, "anchors": self.anchors, "positions": self.positions,
                "acceptance": [round(a / c, 4) if c else None for a, c in zip(self.acc.tolist(), self.counts.tolist())],
                "tau": self.tau / max(1, self.blocks),
                "tokens_per_s": self.positions / max(now - self.interval_start, 1e-9),
                "elapsed_s": now - self.started, "eta_s": per_step * (self.config.steps - step)}
        if self.bar is not None:  # the full line scrolls above the bar; the bar keeps the headline
            self.bar.console.print(format_metrics(row, self.config.steps), highlight=False)
            self.bar.update(self.task, info=f"loss {row['loss']:.3f}  {row['tokens_per_s']:.0f} tok/s")
        self.interval_start = now
        self.reset()
        return row
