"""Held-out acceptance during training: the offline τ proxy on a cache of prompts training never sees.

A drafter that memorises its training answers looks excellent on its own data (training-set τ ≈ 2.8)
and useless on new prompts (τ ≈ 1.1), so runs are judged on held-out data. ``HeldoutProxy`` takes a
fixed, evenly spread slice of anchors from an evaluation cache (``minispark cache --split heldout``,
built from ``examples/prompts/heldout.jsonl``) and scores the drafter on it without gradients:

    accept_k = 1 − ½‖p_d,k − p_t,k‖₁   (teacher-forced, T = 1: the expected acceptance of x_k)
    τ_proxy  = 1 + Σ_k Π_{i≤k} accept_i  (bonus included), averaged over blocks

which is the expected accepted length of a γ-token round at T = 1 started from a real context of the
target's own answers — what the real loop measures on the same prompts (``minispark bench --temperature 1``).
The greedy proxy (T = 0) counts the leading positions where the drafter's argmax equals the target's;
it conditions the Markov head on the cached (sampled) answer, not on the greedy continuation, so it
is an estimate of the T = 0 loop, not an identity. The trainer evaluates every ``eval_every`` steps
and keeps the checkpoint with the best T = 1 τ_proxy; ``main`` scores finished drafters:

    minispark train --recipe cpu-smollm2 --cache runs/cache --heldout-cache runs/cache-heldout --out runs/draft
    .venv/bin/python -m minispark.training.heldout runs/cache-heldout runs/draft/drafter drafters/smollm2-135m-dspark

(the held-out argument may also be an answer set, ``minispark answers --split heldout``: its features
are computed with each drafter's layers and window).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from minispark.training.anchor_batches import Batch, make_batch
from minispark.data.cache_format import CacheReader
from minispark.model.draft_model import DraftModel
from minispark.training.losses import prefix_mask


#: A held-out batch packs this many loss chunks (``chunk_anchors``) of anchors: its backbone forward runs
#: once per batch, its vocabulary-sized work a chunk at a time.
CHUNKS_PER_BATCH = 8


def heldout_batch_anchors(config) -> int:
    """Anchors per held-out batch of a :class:`~minispark.training.recipes.TrainConfig`."""
    return config.chunk_anchors * CHUNKS_PER_BATCH


@dataclass
class HeldoutScore:
    """τ proxy and per-position acceptance on the held-out slice, plus its size."""

    tau: float
    acceptance: list[float]
    blocks: int
    tau_greedy: float = float("nan")
    acceptance_greedy: list[float] | None = None

    def to_json(self) -> dict:
        # Unrounded: the best checkpoint is chosen by comparing these values.
        return {"heldout_tau": self.tau, "heldout_acceptance": self.acceptance, "heldout_blocks": self.blocks,
                "heldout_tau_greedy": self.tau_greedy, "heldout_acceptance_greedy": self.acceptance_greedy}


class HeldoutProxy:
    """A fixed slice of ``max_anchors`` held-out anchors, batched once, scored on demand.

    It stays inside the training step's memory: the batches live on the CPU and go to ``device`` one at a
    time, the vocabulary-sized work runs ``vocab_chunk`` anchors at a time (the loss's chunk), and the
    target's whole lm_head is used (moved once per evaluation) only by a drafter with a draft vocabulary —
    otherwise the drafter's frozen lm_head *is* the target's.
    """

    def __init__(self, batches: list[Batch], gamma: int, device: str | torch.device = "cpu",
                 full_lm_head: torch.Tensor | None = None, vocab_chunk: int = 8) -> None:
        # The target's whole lm_head (V, d): p_t over every token, so a drafter with a draft
        # vocabulary is charged for the target mass it cannot propose.
        self.batches, self.full_lm_head = batches, full_lm_head
        self.gamma, self.device, self.vocab_chunk = gamma, torch.device(device), vocab_chunk

    @classmethod
    def from_reader(cls, reader: CacheReader, gamma: int, max_anchors: int = 512, batch_anchors: int = 64,
                    **kwargs) -> "HeldoutProxy":
        """``max_anchors`` anchors spread evenly over ``reader``, packed ``batch_anchors`` at a time."""
        picks = np.unique(np.linspace(0, len(reader) - 1, num=min(len(reader), max_anchors)).round().astype(int))
        anchors = [reader[int(i)] for i in picks]
        return cls([make_batch(anchors[i:i + batch_anchors], gamma) for i in range(0, len(anchors), batch_anchors)],
                   gamma, **kwargs)

    @torch.no_grad()
    def score(self, model: DraftModel, autocast: contextlib.AbstractContextManager | None = None) -> HeldoutScore:
        was_training = model.training
        model.eval()
        acc_sum = torch.zeros(self.gamma, dtype=torch.float64)
        greedy_sum = torch.zeros(self.gamma, dtype=torch.float64)
        counts = torch.zeros(self.gamma, dtype=torch.float64)
        tau_sum, greedy_tau_sum, blocks = 0.0, 0.0, 0
        head = None
        if model.config.draft_vocab and self.full_lm_head is not None:
            head = self.full_lm_head.to(self.device, model.lm_head.weight.dtype)
        for batch in self.batches:
            accept, match, mask = block_acceptance(model, batch.to(self.device), head, autocast, self.vocab_chunk)
            live = mask[:, 0]
            accept, match, mask = accept[live], match[live], mask[live].double()
            acc_sum += (accept * mask).sum(0)
            greedy_sum += (match * mask).sum(0)
            counts += mask.sum(0)
            tau_sum += float((1.0 + (torch.cumprod(accept, -1) * mask).sum(-1)).sum())
            greedy_tau_sum += float((1.0 + (torch.cumprod(match, -1) * mask).sum(-1)).sum())
            blocks += int(live.sum())
        model.train(was_training)
        per = lambda sums: [float(s / c) if c else float("nan") for s, c in zip(sums, counts)]  # noqa: E731
        return HeldoutScore(tau=tau_sum / max(blocks, 1), acceptance=per(acc_sum), blocks=blocks,
                            tau_greedy=greedy_tau_sum / max(blocks, 1), acceptance_greedy=per(greedy_sum))


@torch.no_grad()
def block_acceptance(model: DraftModel, batch: Batch, full_lm_head: torch.Tensor | None = None,
                     autocast: contextlib.AbstractContextManager | None = None, vocab_chunk: int = 0,
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per block position of every (row, anchor) slot of ``batch``, flattened to (R·A, γ) on the CPU:
    the T = 1 acceptance 1 − ½‖p_d − p_t‖₁ (float64), the T = 0 argmax match (float64) and the prefix
    mask of labels present (bool; padding slots are all False). With ``full_lm_head`` (V, d) and a draft
    vocabulary, p_t covers the whole vocabulary and the drafter is charged for the mass it cannot propose
    (without one, the drafter's lm_head is the target's). ``vocab_chunk`` > 0 bounds the vocabulary-sized
    tensors to that many blocks at a time."""
    gamma = batch.valid.shape[-1]
    with autocast or contextlib.nullcontext():
        fwd = model.forward_train(batch.features, batch.context_positions, batch.block_tokens,
                                  batch.anchor_positions, batch.context_valid)
    hidden, prev = fwd.hidden.flatten(0, 1), fwd.prev_tokens.flatten(0, 1)  # (R·A, γ, d), (R·A, γ)
    target_hidden = batch.target_hidden.flatten(0, 1)  # (R·A, γ, d)
    step = vocab_chunk or hidden.shape[0]
    parts = [_chunk_acceptance(model, hidden[i:i + step], prev[i:i + step], target_hidden[i:i + step],
                               full_lm_head if model.config.draft_vocab else None, autocast)
             for i in range(0, hidden.shape[0], step)]
    accept = torch.cat([a for a, _ in parts]) if parts else torch.zeros(0, gamma, dtype=torch.float64)
    match = torch.cat([m for _, m in parts]) if parts else torch.zeros(0, gamma, dtype=torch.float64)
    return accept, match, prefix_mask(batch.valid).reshape(-1, gamma).cpu()


def _chunk_acceptance(model: DraftModel, hidden: torch.Tensor, prev: torch.Tensor, target_hidden: torch.Tensor,
                      full_lm_head: torch.Tensor | None, autocast: contextlib.AbstractContextManager | None,
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """(acceptance, argmax match) (c, γ) float64 on the CPU of c blocks' hidden states (c, γ, d)."""
    with autocast or contextlib.nullcontext():
        p_d = model.head_logits(hidden, prev).float().softmax(-1)  # (c, γ, N)
    if full_lm_head is None:
        p_t = model.lm_head(target_hidden.to(model.lm_head.weight.dtype)).float().softmax(-1)  # (c, γ, V)
        l1 = (p_d - p_t).abs().sum(-1)
    else:
        p_t = (target_hidden.to(full_lm_head.dtype) @ full_lm_head.T).float().softmax(-1)  # (c, γ, V)
        inside = p_t[..., model.vocab_ids]  # (c, γ, N)
        l1 = (p_d - inside).abs().sum(-1) + (1.0 - inside.sum(-1))  # + the mass p_d cannot cover
    draft_top = p_d.argmax(-1)  # (c, γ) in draft-vocabulary ids when there is one
    if model.config.draft_vocab:
        draft_top = model.vocab_ids[draft_top]
    match = (draft_top == p_t.argmax(-1)).double().cpu()
    return (1.0 - 0.5 * l1).double().cpu(), match


def main(argv: list[str]) -> None:
    """Score drafter directories on a held-out cache (the trainer's slice); one JSON line each."""
    import json
    import sys

    from minispark.model.checkpoint import load_draft_model
    from minispark.target.loading import load_target

    from minispark.data.answers import MANIFEST, AnswerSet
    from minispark.training.online import open_reader

    if len(argv) < 2:
        sys.exit("usage: python -m minispark.training.heldout HELDOUT_CACHE_OR_ANSWERS DRAFTER_DIR [DRAFTER_DIR ...]")
    held = Path(argv[0])
    online = (held / MANIFEST).exists()
    cache = None if online else CacheReader(held, verify=False)  # a cache's features serve every drafter
    config = AnswerSet(held).config if online else cache.config
    target = load_target("embedded" if config["target"]["name"] == "SmolLM2-135M-Instruct"
                         else config["target"]["name"], device="cpu")
    embed, head = target.model.get_input_embeddings().weight.detach(), target.lm_head.weight.detach()
    proxies: dict[tuple, HeldoutProxy] = {}
    for path in argv[1:]:
        model = load_draft_model(path, embed, head, "cpu").float()
        c = model.config
        # a cache's features are fixed; an answer set's are computed with each drafter's layers and window
        key = (c.block_size,) if cache is not None else (c.block_size, tuple(c.feature_layers), c.window)
        if key not in proxies:
            reader = cache if cache is not None else open_reader(held, target, list(c.feature_layers), c.window,
                                                                 c.block_size)
            proxies[key] = HeldoutProxy.from_reader(reader, c.block_size, full_lm_head=head)
        print(json.dumps({"drafter": path} | proxies[key].score(model).to_json()), flush=True)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
