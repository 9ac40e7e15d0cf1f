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
                                           when a held-out cache was given, else the last checkpoint

Each checkpoint is written to a temporary directory and renamed into place; ``resume=True``
continues from ``latest`` with the identical next-step loss. A run stopped before its first checkpoint
(Ctrl-C, a full disk) starts again from step 0 when rerun, with or without ``--resume``.

    minispark train --recipe tiny --cache runs/cache-tiny --out runs/draft-tiny
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.utils.checkpoint

from minispark.training.anchor_batches import AnchorPlan, Batch, make_batch
from minispark.atomic import adopt_written, open_append, write_text_atomic
from minispark.data.answers import AnswerSet
from minispark.data.cache_format import CacheReader, config_hash
from minispark.training.compile_fallback import compile_or_eager
from minispark.target.remembered import record_from_manifest, write_record
from minispark.model.checkpoint import apply_weights, copy_drafter, read_weights, save_drafter, start_from_drafter
from minispark.model.draft_config import DraftConfig
from minispark.model.draft_model import DraftModel
from minispark.training.draft_vocab import answer_set_token_counts, answer_token_counts, coverage, top_tokens
from minispark.errors import MinisparkError
from minispark.training.heldout import HeldoutProxy, HeldoutScore
from minispark.identity import target_id
from minispark.training.losses import LossStats, LossWeights, chunked_backward
from minispark.training.onpolicy import ONPOLICY_FILE, Replay, load_or_replay
from minispark.training.online import OnlinePlan, OnlineSource, open_reader
from minispark.training.recipes import (TrainConfig, check_target_dims, config_differences, draft_config, mask_token,
                               target_dims)

TRAINER_FILE, TRAIN_CONFIG_FILE = "trainer.pt", "train_config.json"
METRICS_FILE, LATEST_FILE = "metrics.jsonl", "latest"
#: Fields that may change on ``--resume`` without changing the math of the next steps.
RESUMABLE_CHANGES = ("log_every", "checkpoint_every", "keep_checkpoints", "cache_dir", "answers_dir", "online_prompts",
                     "out_dir", "heldout_cache", "eval_every", "eval_anchors", "patience")
BEST_DIR, HELDOUT_FILE, DRAFTER_DIR = "best", "heldout.json", "drafter"
CHECKPOINT_NAME = re.compile(r"checkpoint-\d{6}")


# ---------------------------------------------------------------------- model and optimiser
def build_model(draft: DraftConfig, embed: torch.Tensor, lm_head: torch.Tensor, config: TrainConfig,
                vocab_ids: torch.Tensor | None = None) -> DraftModel:
    """fp32 trainable weights (initialised on CPU from ``config.seed``), frozen embedding/lm_head in
    the compute dtype and shared when the target ties them (and the drafter scores the whole
    vocabulary); then gradient checkpointing / compile."""
    torch.manual_seed(config.seed)
    model = DraftModel.from_target(replace(draft, dtype="float32"), embed.cpu(), lm_head.cpu(), vocab_ids)
    if not draft.draft_vocab and (embed.data_ptr() == lm_head.data_ptr() or torch.equal(embed, lm_head)):
        model.lm_head.weight = model.embed_tokens.weight  # one frozen copy, as in the target
    frozen = torch.bfloat16 if config.compute_dtype == "bf16" else torch.float32
    model.embed_tokens.to(frozen)
    model.lm_head.to(frozen)
    model = model.to(config.resolved_device)
    if config.grad_checkpointing:
        for layer in model.layers:  # instance attribute: state_dict keys stay unchanged
            layer.forward = functools.partial(torch.utils.checkpoint.checkpoint, layer.forward, use_reentrant=False)
    if config.compile:  # eager with a one-line notice where Triton / a C++ compiler is missing
        device = config.resolved_device
        model.forward_train = compile_or_eager(model.forward_train, device, dynamic=True)
        model.head_logits = compile_or_eager(model.head_logits, device, dynamic=True)
    return model


def make_optimizer(model: DraftModel, config: TrainConfig):
    """AdamW (torch, fused) or bitsandbytes 8-bit AdamW, with linear warmup then cosine decay."""
    params = [p for p in model.parameters() if p.requires_grad]
    if config.optimizer_name == "adamw8bit":
        import bitsandbytes as bnb

        optimizer = bnb.optim.AdamW8bit(params, lr=config.lr, weight_decay=config.weight_decay)
    else:
        optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay, fused=True)
    warmup = math.ceil(config.warmup_frac * config.steps)

    def factor(i: int) -> float:  # i = steps taken so far
        if i < warmup:
            return (i + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * (i - warmup) / max(1, config.steps - warmup)))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def autocast(config: TrainConfig) -> contextlib.AbstractContextManager:
    if config.compute_dtype == "bf16":
        return torch.autocast(torch.device(config.resolved_device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def loss_weights(config: TrainConfig) -> LossWeights:
    return LossWeights(config.alpha_ce, config.alpha_tv, config.alpha_conf, config.loss_decay_gamma,
                       config.alpha_kl, config.alpha_tau)


def noisy_features(features: torch.Tensor, num_layers: int, scale: float, generator: torch.Generator) -> torch.Tensor:
    """``features`` (R, N, m·d) plus Gaussian noise of ``scale`` times each layer's row RMS: the
    drafter learns to tolerate the small feature errors it meets at inference (EAGLE's trick)."""
    x = features.float().unflatten(-1, (num_layers, -1))  # (R, N, m, d)
    rms = x.pow(2).mean(-1, keepdim=True).sqrt()
    noise = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
    return (x + scale * rms * noise).flatten(-2).to(features.dtype)


def train_step(model: DraftModel, optimizer, scheduler, batch: Batch, config: TrainConfig,
               generator: torch.Generator | None = None) -> tuple[LossStats, float]:
    """Forward, chunked losses and backward, clip, step; returns the loss stats and the grad norm."""
    features = batch.features
    if config.feature_noise > 0:
        features = noisy_features(features, len(model.config.feature_layers), config.feature_noise, generator)
    with autocast(config):
        fwd = model.forward_train(features, batch.context_positions, batch.block_tokens,
                                  batch.anchor_positions, batch.context_valid)
    stats = chunked_backward(model, fwd, batch.target_hidden, batch.valid, loss_weights(config),
                             config.chunk_anchors, autocast(config))
    del fwd
    params = [p for p in model.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, config.grad_clip) if config.grad_clip > 0 else torch.zeros(())
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return stats, float(norm)


# ---------------------------------------------------------------------- the run
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
        last = self.metrics[-1] if self.metrics else {}
        acc = " ".join("-" if a is None else f"{a:.2f}" for a in last.get("acceptance", []))
        return (f"steps {self.first_step}..{self.last_step} in {self.seconds:.0f} s; loss "
                f"{last.get('loss', math.nan):.4f}, acceptance proxy per position [{acc}], "
                f"τ≈{last.get('tau', math.nan):.2f}; drafter at {self.drafter}")


class Trainer:
    """Model, optimiser and data plan of one run, with checkpoint save and restore."""

    def __init__(self, config: TrainConfig, reader: CacheReader | OnlineSource, target: Any, out_dir: Path,
                 log: Callable[[str], None] | None = None) -> None:
        self.config, self.reader, self.out = config, reader, Path(out_dir)
        if config.resolved_device == "cuda" and not torch.cuda.is_available():
            raise MinisparkError("device: this run trains on CUDA (device = 'cuda', from the recipe or an override), "
                                 "but this machine has none; override device=cpu dtype=fp32 optimizer=adamw to "
                                 "train on the CPU")
        if reader.config.get("split", "train") != "train":
            raise MinisparkError(f"--cache: {reader.directory} is a held-out evaluation cache; train on a "
                                 "--split train cache and pass this one as --heldout-cache")
        identity = target.identity()
        # Content hashes decide (a hub id and a local copy of it are the same target); the name only
        # when the target's files could not be hashed.
        known = identity["weights_hash"] != "unknown"
        reader.require(target={k: v for k, v in identity.items() if k != "name" or not known},
                       block=config.block_size, window=config.window)
        if config.feature_layers is not None:
            reader.require(layers=config.feature_layers)
        self.dims = dims = target_dims(target)
        check_target_dims(config, dims)
        self.draft_config = draft_config(config, dims, feature_layers=reader.layers,
                                         mask_token_id=mask_token(config, target), target=target_id(identity),
                                         dtype="bfloat16" if config.compute_dtype == "bf16" else "float32")
        embed = target.model.get_input_embeddings().weight.detach()
        vocab_ids = None
        online = isinstance(reader, OnlineSource)
        if config.draft_vocab:  # the most frequent answer tokens of the training data, EOS always in
            counts = (answer_set_token_counts(reader.answers, dims.vocab_size, config.max_samples) if online
                      else answer_token_counts(reader, dims.vocab_size, config.max_samples))
            vocab_ids = top_tokens(counts, config.draft_vocab, sorted(target.eos_token_ids))
            self.vocab_coverage = coverage(counts, vocab_ids)
        self.model = build_model(self.draft_config, embed, target.lm_head.weight.detach(), config, vocab_ids)
        if config.init_layers != "random":  # a resumed run loads its own weights over these
            layers = list(target.decoder.layers)
            n = len(self.model.layers)
            if n > len(layers):
                raise MinisparkError(f"init_layers: the draft has {n} layers, the target only {len(layers)}")
            try:
                self.model.copy_layers(layers[:n] if config.init_layers == "first" else layers[-n:])
            except ValueError as exc:
                raise MinisparkError(f"init_layers={config.init_layers}: {exc}") from None
        if config.init_from:  # fine-tuning a drafter of this config (a resumed run loads its own weights over it)
            start_from_drafter(self.model, config.init_from, self.draft_config)
        self.replay: Replay | None = None
        if config.onpolicy:
            # p_t over the draft vocabulary only: the whole-vocabulary GEMM would make the replay 2.5× slower
            self.replay = load_or_replay(self.out, self.model, reader, config.init_from, config.seed,
                                         max_samples=config.max_samples, log=log)
        self.optimizer, self.scheduler = make_optimizer(self.model, config)
        if online:
            self.plan: AnchorPlan | OnlinePlan = OnlinePlan(
                reader, config.batch_anchors, config.seed, config.anchor_run, pool=config.online_pool,
                max_samples=config.max_samples, anchors_per_sample=config.max_anchors_per_sample)
        else:
            self.plan = AnchorPlan(reader, config.batch_anchors, config.seed, config.anchor_run,
                                   max_samples=config.max_samples, anchors_per_sample=config.max_anchors_per_sample,
                                   samples=self.replay.starts if self.replay else None)
        self.cache_hash = config_hash(reader.config)
        self.step = 0
        self.heldout: HeldoutProxy | None = None
        self.best: dict[str, Any] | None = None  # the best held-out score so far, with its step
        if config.heldout_cache:
            held = open_reader(Path(config.heldout_cache), target, reader.layers, reader.window, config.block_size)
            if held.config.get("split") != "heldout":
                raise MinisparkError(f"heldout_cache: {config.heldout_cache} is a training cache; build the "
                                     "held-out one with `minispark cache --split heldout`")
            held.require(target=reader.config["target"], layers=reader.layers, block=config.block_size,
                         window=reader.window)
            self.heldout = HeldoutProxy(held, config.block_size, config.eval_anchors, config.chunk_anchors * 8,
                                        config.resolved_device, full_lm_head=target.lm_head.weight.detach())
            best = self.out / BEST_DIR / HELDOUT_FILE
            self.best = json.loads(best.read_text()) if best.is_file() else None

    def evaluate(self) -> dict[str, Any]:
        """Score the held-out slice now; keep ``best/`` (drafter files + score) when it improves."""
        score: HeldoutScore = self.heldout.score(self.model, autocast(self.config))
        row = {"step": self.step} | score.to_json()
        if self.best is None or score.tau > self.best["heldout_tau"]:
            self.best = row
            save_drafter(self.model, self.out / BEST_DIR, self.draft_config,
                         extra=lambda tmp: (tmp / HELDOUT_FILE).write_text(json.dumps(row) + "\n"))
        return row | {"best_step": self.best["step"], "best_heldout_tau": self.best["heldout_tau"]}

    def train_one(self) -> tuple[LossStats, float, int]:
        """Run step ``self.step + 1``; returns its stats, grad norm and anchor count."""
        anchors = self.plan.anchors(self.step)
        batch = make_batch(anchors, self.config.block_size).to(self.config.resolved_device)
        # noise seeded by (seed, step): a resumed run draws what it would have drawn
        generator = torch.Generator(self.config.resolved_device).manual_seed(self.config.seed * 1_000_003 + self.step)
        stats, norm = train_step(self.model, self.optimizer, self.scheduler, batch, self.config, generator)
        self.step += 1
        return stats, norm, len(anchors)

    def save(self) -> Path:
        """Write ``checkpoint-{step}`` atomically, point ``latest`` at it, prune old ones."""
        name = f"checkpoint-{self.step:06d}"
        state = {"step": self.step, "optimizer": self.optimizer.state_dict(),
                 "scheduler": self.scheduler.state_dict(), "rng": torch.get_rng_state(),
                 "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                 "cache_hash": self.cache_hash, "train_config": self.config.to_dict()}

        def trainer_files(tmp: Path) -> None:
            (tmp / TRAIN_CONFIG_FILE).write_text(self.config.to_json() + "\n")
            torch.save(state, tmp / TRAINER_FILE)

        # draft_config, not the model's: it records the inference dtype.
        save_drafter(self.model, self.out / name, self.draft_config, extra=trainer_files)
        write_text_atomic(self.out / LATEST_FILE, name + "\n")
        # Only our own checkpoints (our name pattern, our trainer state) are ever pruned.
        kept = sorted(p for p in self.out.glob("checkpoint-*")
                      if CHECKPOINT_NAME.fullmatch(p.name) and not p.is_symlink() and (p / TRAINER_FILE).is_file())
        for old in kept[:-self.config.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return self.out / name

    def restore(self) -> Path:
        """Load the checkpoint ``latest`` names; refuse one from a different config or cache."""
        latest = self.out / LATEST_FILE
        if not latest.is_file():
            raise MinisparkError(f"--resume: {self.out} holds no checkpoint ({LATEST_FILE} is missing)")
        path = self.out / latest.read_text().strip()
        state = torch.load(path / TRAINER_FILE, map_location="cpu", weights_only=True)
        saved = TrainConfig.from_dict(state["train_config"], str(path / TRAINER_FILE))
        changed = config_differences(saved, self.config, ignore=RESUMABLE_CHANGES)
        if changed:
            key = changed[0]
            raise MinisparkError(f"--resume: {key} differs from the checkpoint's ({getattr(saved, key)!r}, now "
                                 f"{getattr(self.config, key)!r}); it would change the next steps")
        if state["cache_hash"] != self.cache_hash:
            raise MinisparkError(f"--resume: {path} was trained on a different cache than {self.reader.directory}")
        try:
            apply_weights(self.model, read_weights(path, self.config.resolved_device), path)
        except MinisparkError as exc:
            raise MinisparkError(f"--resume: {exc}") from None
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        self.step = int(state["step"])
        return path


def train(config: TrainConfig, cache_dir: str | Path | None = None, out_dir: str | Path | None = None, *,
          resume: bool = False, progress: bool = False, target: Any = None,
          log: Callable[[str], None] | None = print) -> TrainReport:
    """Train (or, with ``resume``, continue) the recipe ``config`` on the cache at ``cache_dir``.

    ``target`` may be passed already loaded; otherwise the cache's target is loaded on the CPU
    (only its embedding, lm_head, sizes, tokenizer and identity are used).
    """
    started = time.perf_counter()
    if cache_dir is None and config.cache_dir is None and config.answers_dir is None:
        raise MinisparkError(f"--cache: recipe {config.name!r} names no cache_dir or answers_dir; pass --cache DIR "
                             "or --answers DIR")
    out, resume = _output_dir(config, out_dir, resume, log)
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
    copy_drafter(best, report.drafter, extra=lambda tmp: write_record(tmp, record))
    report.last_step, report.seconds = trainer.step, time.perf_counter() - started
    return report


def _output_dir(config: TrainConfig, out_dir: str | Path | None, resume: bool,
                log: Callable[[str], None] | None) -> tuple[Path, bool]:
    """The run directory and whether this run resumes it; refuses a directory that is not a run's."""
    out = Path(out_dir or config.out_dir or f"runs/draft-{config.name}")
    restart = not (out / LATEST_FILE).exists() and (not out.exists() or stopped_before_checkpoint(out))
    if restart and (resume or (out / TRAIN_CONFIG_FILE).is_file()) and log:
        log(f"{out}: no checkpoint written yet (stopped before its first one?); training from step 0")
    resume = resume and not restart
    if not resume and (out / LATEST_FILE).exists():
        raise MinisparkError(f"--out {out}: already holds a training run; pass --resume to continue it, or "
                             "choose another --out")
    if not resume and not restart and out.is_dir() and any(out.iterdir()):
        # Checkpoints are pruned and drafter/ replaced: never in a directory holding someone else's files.
        raise MinisparkError(f"--out {out}: not empty and not a minispark training run; choose an empty or new "
                             "directory")
    if not resume and out.exists() and not out.is_dir():
        raise MinisparkError(f"--out {out}: is a file, not a directory")
    return out, resume


def _open_data(config: TrainConfig, cache_dir: str | Path | None, target: Any
               ) -> tuple[AnswerSet | CacheReader, CacheReader | OnlineSource, Any]:
    """(the answer set or cache, what the trainer reads anchors from, the target)."""
    online = cache_dir is None and config.cache_dir is None
    data = AnswerSet(Path(config.answers_dir)) if online else CacheReader(Path(cache_dir or config.cache_dir))
    if target is None and not online and config.init_layers == "random":
        from minispark.training.target_tensors import load_frozen_parts

        # From a cache the target never runs: its embedding, lm_head, tokenizer and identity are read from
        # its safetensors, with no whole model on the host (see target_tensors.py).
        target = load_frozen_parts(config.target or data.config["target"]["name"])
    elif target is None:
        from minispark.target.loading import load_target

        # Online, the target computes features as training goes: on the training device, in fp32 on a CPU.
        target = load_target(config.target or data.config["target"]["name"],
                             device=config.resolved_device if online else "cpu",
                             dtype="bf16" if config.compute_dtype == "bf16" else None)
    if not online:
        return data, data, target
    layers = target.auto_layers() if config.feature_layers is None else target.check_layers(config.feature_layers)
    return data, OnlineSource(data, target, layers, config.window, config.block_size,
                              prompts=config.online_prompts), target


def _log_plan(trainer: Trainer, config: TrainConfig, reader: CacheReader | OnlineSource,
              log: Callable[[str], None]) -> None:
    from minispark.training.memory import estimate_memory

    estimate = estimate_memory(replace(config, tie_embeddings=trainer.dims.tie_embeddings), draft=trainer.draft_config)
    if config.draft_vocab:
        log(f"draft vocabulary: the {config.draft_vocab} most frequent answer tokens cover "
            f"{trainer.vocab_coverage:.2%} of the training answers")
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
        kept = [line for line in _read_lines(metrics_path) if json.loads(line)["step"] <= trainer.step]
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


def stopped_before_checkpoint(out: Path) -> bool:
    """Whether ``out`` is empty, or holds a run of ours that stopped (Ctrl-C, a full disk) before its first
    checkpoint: its ``train_config.json`` and nothing but what a run writes before one. Such a run is
    started again from step 0, with or without ``--resume``: there is nothing to continue or to lose."""
    entries = [p for p in out.iterdir()] if out.is_dir() and not out.is_symlink() else None
    if entries is None:
        return False
    if not entries:
        return True
    if not (out / TRAIN_CONFIG_FILE).is_file():
        return False
    return all(not p.is_symlink() and (p.name in EARLY_FILES or _EARLY_TEMP.fullmatch(p.name)) for p in entries)


def online_memory(config: TrainConfig, source: OnlineSource) -> str:
    """What online training keeps beside the drafter's step: the target's weights (on its device) and one
    pool's features (every position of ``online_pool`` answers at the longest answer of the set, fp32, in
    CPU memory)."""
    target = source.target.model
    weights = sum(p.numel() * p.element_size() for p in target.parameters())
    longest = max((len(source.answers[i].ids) for i in range(min(len(source.answers), 4096))), default=0)
    pool = config.online_pool * longest * (len(source.layers) + 1) * source.target.hidden_size * 4
    return (f" + online: target weights {weights / 1e9:.2f} GB on {source.target.device.type}, one pool's features "
            f"{pool / 1e9:.2f} GB in CPU memory")


def _read_lines(path: Path) -> list[str]:
    """Our log's lines; nothing from a symlink planted in its place (it is replaced, never read or followed)."""
    return path.read_text().splitlines(keepends=True) if path.is_file() and not path.is_symlink() else []


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

            from minispark.defaults import make_console

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
