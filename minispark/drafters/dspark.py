"""The DSpark drafter: a trained :class:`~minispark.draft_model.DraftModel` plus its context cache,
behind the shared :class:`~minispark.drafters.base.Drafter` interface; and its checkpoint format.

A checkpoint is a directory holding ``config.json`` (a :class:`DraftConfig`) and
``model.safetensors`` with every weight except the frozen embedding and lm_head, which are always
taken from the target at load time. The config names the target; loading refuses another one.
A directory in DeepSpec's layout (``Qwen3DSparkModel``, see :mod:`minispark.deepspec`) loads too.

    .venv/bin/python -m pytest -q tests/test_draft_model.py -k checkpoint
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file, save_file

from minispark.deepspec import is_deepspec_dir, load_deepspec_model
from minispark.draft_cache import ContextCache
from minispark.draft_model import DraftConfig, DraftModel
from minispark.drafters.base import Drafter, LengthPolicy, Proposal
from minispark.sampling import SamplingConfig

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"


class DSparkDrafter(Drafter):
    """Drafts one block per round: one backbone forward over γ tokens, then the sequential head.

    The draft cache holds per-layer K/V of the projected features of every token in the target
    KV cache (bounded by the window W). A prefill's rows are projected at once; ``commit`` only
    queues the newly cached span, and the queue is projected in one batch when the cache is next
    read (the next proposal). So rounds that draft-skip leaves the drafter out of cost it nothing,
    and the next proposal equals the one a drafter that was never skipped would make.
    """

    name = "dspark"

    def __init__(self, model: DraftModel, capacity: int = 256) -> None:
        self.model = model.eval()
        self.config = model.config
        self.feature_layers = tuple(model.config.feature_layers)
        self.has_confidence = model.config.confidence_head
        weight = model.lm_head.weight
        self._cache = ContextCache(model.config, weight.device, weight.dtype, capacity)
        # Committed rows not yet projected into the cache: [(features (n, m·d), positions (n,))].
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def cache(self) -> ContextCache:
        """The draft context with every committed row in it (the queued rows projected first)."""
        self._flush()
        return self._cache

    @torch.no_grad()
    def reset(self, cached_ids: torch.Tensor, features: torch.Tensor | None, text_positions: torch.Tensor) -> None:
        self._cache.clear()
        self._pending.clear()
        self._append(features, text_positions)
        self._flush()  # with the prefill, not charged to the first round's proposal

    @torch.no_grad()
    def propose(
        self,
        ids: torch.Tensor,
        anchor_position: int,
        policy: LengthPolicy,
        sampling: SamplingConfig,
        generator: torch.Generator,
    ) -> Proposal:
        anchor = ids[-1]
        hidden = self.model.forward_block(self.cache, anchor, int(anchor_position))  # (γ, d)
        return self.model.sample_block(hidden, anchor, policy, sampling, generator)

    @torch.no_grad()
    def commit(
        self,
        num_accepted: int,
        new_cached_ids: torch.Tensor,
        features: torch.Tensor | None,
        text_positions: torch.Tensor,
    ) -> None:
        self._append(features, text_positions)

    @torch.no_grad()
    def extend(self, new_cached_ids: torch.Tensor, features: torch.Tensor | None,
               text_positions: torch.Tensor) -> None:
        self._append(features, text_positions)
        self._flush()

    def rollback(self, text_position: int) -> None:
        self._cache.crop(text_position)
        kept = [(f[p < text_position], p[p < text_position]) for f, p in self._pending]
        self._pending = [(f, p) for f, p in kept if p.numel()]

    def _append(self, features: torch.Tensor | None, text_positions: torch.Tensor) -> None:
        """Queue committed rows (checked now, projected by :meth:`_flush`)."""
        if features is None:
            raise ValueError("the DSpark drafter needs target features for every cached token")
        if features.shape[0] != text_positions.numel() or features.shape[-1] != self.config.feature_size:
            raise ValueError(
                f"features {tuple(features.shape)} do not match {text_positions.numel()} positions "
                f"× feature size {self.config.feature_size}"
            )
        if text_positions.numel():
            self._pending.append((features, text_positions.to(dtype=torch.long)))

    @torch.no_grad()
    def _flush(self) -> None:
        """Project the queued rows into the cache, all in one batch."""
        if not self._pending:
            return
        device = self.model.lm_head.weight.device
        features = torch.cat([f.to(device) for f, _ in self._pending])  # (n, m·d)
        positions = torch.cat([p.to(device) for _, p in self._pending])  # (n,)
        self._pending.clear()
        layer_kv = self.model.context_kv(features[None], positions[None])  # (1, Hkv, n, D) each
        self._cache.append(layer_kv, positions)


def write_dir_atomic(path: str | Path, fill: Callable[[Path], None]) -> None:
    """Build a directory with ``fill(tmp)`` in a temporary sibling, then rename it over ``path``:
    a reader sees the old directory or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        fill(tmp)
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def save_drafter(model: DraftModel, path: str | Path) -> None:
    """Write ``config.json`` + ``model.safetensors`` (no embedding/lm_head) to ``path`` atomically."""

    def fill(tmp: Path) -> None:
        model.config.save(tmp / CONFIG_FILE)
        weights = {k: v.detach().contiguous().cpu() for k, v in model.trainable_state_dict().items()}
        save_file(weights, str(tmp / WEIGHTS_FILE), metadata={"target": model.config.target})

    write_dir_atomic(path, fill)


def load_draft_model(
    path: str | Path,
    target_embed: torch.Tensor,
    target_lm_head: torch.Tensor,
    device: torch.device | str,
    target_identity: str | None = None,
) -> DraftModel:
    """Rebuild a :class:`DraftModel` from a checkpoint directory and the target's frozen weights.

    ``target_identity``, when given, must equal the identity the drafter was trained against; a
    DeepSpec-layout directory records no identity and is checked by shapes (it is given this one)."""
    path = Path(path)
    if is_deepspec_dir(path):
        return load_deepspec_model(path, target_embed, target_lm_head, device, target=target_identity or "deepspec")
    config = DraftConfig.load(path / CONFIG_FILE)
    if target_identity is not None and target_identity != config.target:
        raise ValueError(f"drafter {path} was trained for target {config.target!r}, not {target_identity!r}")
    weights = load_file(str(path / WEIGHTS_FILE), device=str(device))
    vocab_ids = weights.get("vocab_ids") if config.draft_vocab else None  # which lm_head rows to take
    model = DraftModel.from_target(config, target_embed.to(device), target_lm_head.to(device), vocab_ids)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.startswith(("embed_tokens.", "lm_head."))]
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not match its config: missing {missing}, unexpected {unexpected}")
    return model


def load_drafter(
    path: str | Path,
    target_embed: torch.Tensor,
    target_lm_head: torch.Tensor,
    device: torch.device | str,
    target_identity: str | None = None,
) -> DSparkDrafter:
    """A ready :class:`DSparkDrafter` from a checkpoint directory (see :func:`load_draft_model`)."""
    return DSparkDrafter(load_draft_model(path, target_embed, target_lm_head, device, target_identity))
