"""One training run's state: the draft model, optimiser, LR schedule and anchor plan, one step at a
time, with checkpoint save and restore (the resumed run's next step has the identical loss).

:func:`train_step` is one optimiser step on a packed batch; :class:`Trainer` builds the model with the
target's frozen embedding and lm_head, the data plan (a cache's anchors or an answer set's, online),
the held-out proxy, and writes/reads ``checkpoint-NNNNNN/``, ``latest`` and ``best/``. The run around
it (output directory rules, logging, early stopping) is ``training/train.py``'s.

    .venv/bin/python -m pytest -q tests/training/test_train.py
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.utils.checkpoint

from minispark.training.anchor_batches import AnchorPlan, Batch, make_batch
from minispark.core.atomic import write_text_atomic
from minispark.data.cache_format import CacheMismatchError, CacheReader, config_hash
from minispark.target.compile_fallback import compile_or_eager
from minispark.model.checkpoint import (apply_weights, drafter_vocab, read_weights, save_drafter,
                                        start_from_drafter)
from minispark.model.draft_config import DraftConfig
from minispark.model.draft_model import DraftModel
from minispark.training.draft_vocab import answer_set_token_counts, answer_token_counts, coverage, top_tokens
from minispark.core.errors import MinisparkError, first_line, option
from minispark.training.heldout import HeldoutProxy, HeldoutScore, heldout_batch_anchors
from minispark.core.identity import content_identity, same_target, target_id
from minispark.training.losses import LossStats, LossWeights, chunked_backward
from minispark.training.onpolicy import Replay, load_or_replay
from minispark.training.online import OnlinePlan, OnlineSource, open_reader
from minispark.training.draft_sizes import check_target_dims, draft_config, mask_token, target_dims
from minispark.training.recipes import TrainConfig, config_differences

TRAINER_FILE, TRAIN_CONFIG_FILE = "trainer.pt", "train_config.json"
METRICS_FILE, LATEST_FILE = "metrics.jsonl", "latest"
#: Fields that may change on ``--resume`` without changing the math of the next steps.
RESUMABLE_CHANGES = ("log_every", "checkpoint_every", "keep_checkpoints", "cache_dir", "answers_dir", "online_prompts",
                     "online_store", "out_dir", "heldout_cache", "eval_every", "eval_anchors", "patience")
BEST_DIR, HELDOUT_FILE, DRAFTER_DIR = "best", "heldout.json", "drafter"
CHECKPOINT_NAME = re.compile(r"checkpoint-\d{6}")


# ---------------------------------------------------------------------- model and optimiser
def build_model(draft: DraftConfig, embed: torch.Tensor, lm_head: torch.Tensor, config: TrainConfig,
                vocab_ids: torch.Tensor | None = None) -> DraftModel:
    """fp32 trainable weights (initialised on CPU from ``config.seed``), frozen embedding/lm_head in
    the compute dtype and shared when the target ties them (and the drafter scores the whole
    vocabulary); then gradient checkpointing / compile."""
    torch.manual_seed(config.seed)
    frozen = torch.bfloat16 if config.compute_dtype == "bf16" else torch.float32
    # Frozen tensors straight into their dtype: a bf16 checkpoint's embedding is shared, not copied via fp32.
    model = DraftModel.from_target(replace(draft, dtype="float32"), embed.cpu(), lm_head.cpu(), vocab_ids,
                                   frozen_dtype=frozen)
    if not draft.draft_vocab and (embed.data_ptr() == lm_head.data_ptr() or torch.equal(embed, lm_head)):
        model.lm_head.weight = model.embed_tokens.weight  # one frozen copy, as in the target
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
        from minispark.target.loading import quiet_library_logs

        quiet_library_logs()  # from a cache no target loads first: its import logged two lines about CPU kernels
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



def _require_recipe_sizes(reader: CacheReader, config: TrainConfig) -> None:
    """The cache's block, window and layers are the recipe's; a mismatch names the recipe key and the override
    that matches the cache (it said "window mismatch: it has 8, expected 16", not whose 16 or what to type)."""
    for key, recipe_key, want in (("block", "block_size", config.block_size), ("window", "window", config.window),
                                  ("layers", "feature_layers", config.feature_layers)):
        have = reader.config.get(key)
        if want is None or have == (list(want) if isinstance(want, tuple) else want):
            continue
        typed = ",".join(map(str, have)) if isinstance(have, list) else have
        raise CacheMismatchError(f"{reader.manifest_path}: the cache was built with {key} {have!r}, the recipe's "
                             f"{recipe_key} is {want!r}; add the override {recipe_key}={typed}, or build a cache "
                             "that matches the recipe")

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
            raise MinisparkError(f"{option('cache')}: {reader.directory} is a held-out evaluation cache; train on a "
                                 f"{option('split')} train cache and pass this one as {option('heldout_cache')}")
        identity = target.identity()
        reader.require(target=content_identity(identity))
        _require_recipe_sizes(reader, config)
        self.dims = dims = target_dims(target)
        check_target_dims(config, dims)
        self.draft_config = draft_config(config, dims, feature_layers=reader.layers,
                                         mask_token_id=mask_token(config, target), target=target_id(identity),
                                         dtype="bfloat16" if config.compute_dtype == "bf16" else "float32")
        embed = target.model.get_input_embeddings().weight.detach()
        vocab_ids = None
        online = isinstance(reader, OnlineSource)
        draft_vocab = self.draft_config.draft_vocab
        if draft_vocab:  # the most frequent answer tokens of the training data, EOS always in
            def token_counts(first: int, stop: int) -> torch.Tensor:  # (V,) over the samples [first, stop)
                return (answer_set_token_counts(reader.answers, dims.vocab_size, stop, config.max_answer_tokens, first)
                        if online else answer_token_counts(reader, dims.vocab_size, stop, first))
            counts = token_counts(config.first_sample, config.max_samples)
            if config.replay_samples:
                counts += token_counts(0, config.replay_samples)
            # a warm start keeps its source's vocabulary (the rows it learned are the rows it drafts) and a larger
            # draft_vocab grows it by the most frequent tokens it lacks
            source = drafter_vocab(config.init_from, draft_vocab) if config.init_from else None
            vocab_ids = (source if source is not None and source.numel() == draft_vocab
                         else top_tokens(counts, draft_vocab, sorted(target.eos_token_ids) if source is None
                                         else source.tolist()))
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
            source_target = start_from_drafter(self.model, config.init_from, self.draft_config)
            if log is not None and not same_target(source_target, self.draft_config.target):
                log(f"init_from: {config.init_from} was trained for {source_target}; adapting it to "
                    f"{self.draft_config.target}")
        self.replay: Replay | None = None
        if config.onpolicy:
            # p_t over the draft vocabulary only: the whole-vocabulary GEMM would make the replay 2.5× slower
            self.replay = load_or_replay(self.out, self.model, reader, config.init_from, config.seed,
                                         max_samples=config.max_samples, log=log)
        self.optimizer, self.scheduler = make_optimizer(self.model, config)
        if online:
            self.plan: AnchorPlan | OnlinePlan = OnlinePlan(
                reader, config.batch_anchors, config.seed, config.anchor_run, pool=config.online_pool,
                max_samples=config.max_samples, first_sample=config.first_sample,
                replay_samples=config.replay_samples, anchors_per_sample=config.max_anchors_per_sample)
        else:
            self.plan = AnchorPlan(reader, config.batch_anchors, config.seed, config.anchor_run,
                                   max_samples=config.max_samples, first_sample=config.first_sample,
                                   replay_samples=config.replay_samples,
                                   anchors_per_sample=config.max_anchors_per_sample,
                                   samples=self.replay.starts if self.replay else None)
        self.cache_hash = config_hash(reader.config)
        self.step = 0
        self.heldout: HeldoutProxy | None = None
        self.best: dict[str, Any] | None = None  # the best held-out score so far, with its step
        if config.heldout_cache:
            held = open_reader(Path(config.heldout_cache), target, reader.layers, reader.window, config.block_size)
            if held.config.get("split") != "heldout":
                raise MinisparkError(f"{option('heldout_cache')} (recipe key heldout_cache) {config.heldout_cache}: is a training "
                                     "cache (split train); build the held-out one with `minispark cache` (or `minispark "
                                     "answers`) on the held-out split")
            held.require(target=reader.config["target"], layers=reader.layers, block=config.block_size,
                         window=reader.window)
            self.heldout = HeldoutProxy.from_reader(
                held, config.block_size, config.eval_anchors, heldout_batch_anchors(config),
                device=config.resolved_device, full_lm_head=target.lm_head.weight.detach(),
                vocab_chunk=config.chunk_anchors)
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
            raise MinisparkError(f"{option('resume')}: {self.out} holds no checkpoint ({LATEST_FILE} is missing)")
        path = self._latest_checkpoint(latest)
        try:
            state = torch.load(path / TRAINER_FILE, map_location="cpu", weights_only=True)
        except (RuntimeError, OSError, EOFError, ValueError) as exc:  # torch: "failed finding central directory"
            reason = first_line(exc).split(". ")[0]  # torch's first sentence; the rest is advice on checkpoints
            raise MinisparkError(f"{option('resume')}: {path / TRAINER_FILE}: unreadable ({reason}); a damaged or "
                                 f"truncated copy? {self._other_checkpoints(path)}") from None
        saved = TrainConfig.from_dict(state["train_config"], str(path / TRAINER_FILE))
        changed = config_differences(saved, self.config, ignore=RESUMABLE_CHANGES)
        if changed:
            key = changed[0]
            raise MinisparkError(f"{option('resume')}: {key} differs from the checkpoint's ({getattr(saved, key)!r}, now "
                                 f"{getattr(self.config, key)!r}); it would change the next steps")
        if state["cache_hash"] != self.cache_hash:
            raise MinisparkError(f"{option('resume')}: {path} was trained on a different cache than {self.reader.directory}")
        try:
            apply_weights(self.model, read_weights(path, self.config.resolved_device), path)
        except MinisparkError as exc:
            raise MinisparkError(f"{option('resume')}: {exc}") from None
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        if state["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        self.step = int(state["step"])
        return path

    def _latest_checkpoint(self, latest: Path) -> Path:
        """The checkpoint ``latest`` names: one of this run's (our name pattern, our trainer state), never what a
        planted symlink or an edited file points to (a FileNotFoundError traceback before)."""
        name = "" if latest.is_symlink() else latest.read_text(errors="replace").strip()
        path = self.out / name
        if not CHECKPOINT_NAME.fullmatch(name) or path.is_symlink() or not (path / TRAINER_FILE).is_file():
            what = "is a symlink" if latest.is_symlink() else f"names {name[:80]!r}, which is not a checkpoint there"
            raise MinisparkError(f"{option('resume')}: {latest} {what}; {self._other_checkpoints(None)}")
        return path

    def _other_checkpoints(self, bad: Path | None) -> str:
        """What to do instead: the newest of this run's other checkpoints, if any."""
        kept = sorted(p.name for p in self.out.glob("checkpoint-*") if p != bad and CHECKPOINT_NAME.fullmatch(p.name)
                      and not p.is_symlink() and (p / TRAINER_FILE).is_file())
        if not kept:
            return f"no other checkpoint is there: train into a new {option('out')}"
        return f"write {kept[-1]} into {self.out / LATEST_FILE} to resume from that checkpoint"
