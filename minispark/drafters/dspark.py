"""The DSpark drafter: a trained :class:`~minispark.draft_model.DraftModel` plus its draft context
(the K/V of the target features of committed tokens), behind the shared
:class:`~minispark.drafters.base.Drafter` interface. The directory it loads from is
:mod:`minispark.checkpoint`'s.

    .venv/bin/python -m pytest -q tests/test_draft_model.py -k checkpoint
"""

from __future__ import annotations

from pathlib import Path

import torch

from minispark.checkpoint import load_draft_model
from minispark.draft_cache import ContextCache
from minispark.draft_model import DraftModel
from minispark.draft_block import DraftBlock
from minispark.drafters.base import Drafter
from minispark.sampling import SamplingConfig

class DSparkDrafter(Drafter):
    """Drafts one block per round: one backbone forward over γ tokens, then the sequential head.

    The draft cache holds per-layer K/V of the projected features of every token in the target
    KV cache (bounded by the window W); ``commit`` appends the newly cached span.
    """

    name = "dspark"

    def __init__(self, model: DraftModel) -> None:
        self.model = model.eval()
        self.config = model.config
        self.feature_layers = tuple(model.config.feature_layers)
        self.has_confidence = model.config.confidence_head
        self.max_gamma = model.config.block_size
        weight = model.lm_head.weight
        self.cache = ContextCache(model.config, weight.device, weight.dtype)

    @torch.no_grad()
    def reset(self, cached_ids: torch.Tensor, features: torch.Tensor | None, text_positions: torch.Tensor) -> None:
        self.cache.clear()
        self._append(features, text_positions)

    @torch.no_grad()
    def propose(
        self,
        ids: torch.Tensor,
        anchor_position: int,
        sampling: SamplingConfig,
        generator: torch.Generator,
    ) -> DraftBlock:
        anchor = ids[-1]
        hidden = self.model.forward_block(self.cache, anchor, int(anchor_position))  # (γ, d)
        return self.model.draft_block(hidden, anchor, sampling, generator)

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

    def rollback(self, text_position: int) -> None:
        self.cache.crop(text_position)

    def _append(self, features: torch.Tensor | None, text_positions: torch.Tensor) -> None:
        if features is None:
            raise ValueError("the DSpark drafter needs target features for every cached token")
        if features.shape[0] != text_positions.numel() or features.shape[-1] != self.config.feature_size:
            raise ValueError(
                f"features {tuple(features.shape)} do not match {text_positions.numel()} positions "
                f"× feature size {self.config.feature_size}"
            )
        if text_positions.numel() == 0:
            return
        device = self.model.lm_head.weight.device
        positions = text_positions.to(device=device, dtype=torch.long)
        layer_kv = self.model.context_kv(features.to(device)[None], positions[None])  # (1, Hkv, n, D) each
        self.cache.append(layer_kv, positions)


def load_drafter(
    path: str | Path,
    target_embed: torch.Tensor,
    target_lm_head: torch.Tensor,
    device: torch.device | str,
    target_identity: str | None = None,
) -> DSparkDrafter:
    """A ready :class:`DSparkDrafter` from a drafter directory (see :func:`~minispark.checkpoint.load_draft_model`)."""
    return DSparkDrafter(load_draft_model(path, target_embed, target_lm_head, device, target_identity))
