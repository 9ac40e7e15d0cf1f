"""On-policy refinement: continue training a drafter on the anchors where its own rounds start.

In serving, a round starts right after the previous round's accepted drafts and the target's token
that ended it, so the anchors a drafter meets are not a uniform draw of answer positions: a run of
easy positions the drafter got right is passed over inside one round, and every position that
follows a rejection (where the target's token surprised the drafter) is a round start. Uniform
anchors spend the same effort on both. ``round_starts`` replays a drafter's rounds over each cached
answer, the target's own sample path, at T = 1: draft k is accepted with probability
``1 − ½‖p_d,k − p_t,k‖₁`` (the held-out proxy's per-position acceptance) given the drafts before it
were, a coin seeded by (seed, sample); a round accepting n drafts is followed by the round anchored
n + 1 positions later. Its anchors are the ones the refinement trains on.

    # a recipe (or overrides) with init_from = "runs/draft/drafter" and onpolicy = true
    minispark train --recipe smollm2-dspark --cache C --heldout-cache H --out runs/refined \\
        init_from=runs/draft/drafter onpolicy=true steps=750 lr=3e-4

The chosen anchors are written to ``OUT/onpolicy.json`` (atomically) with the replay's figures, and
a resumed run reads them back instead of replaying again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from minispark.core.atomic import write_text_atomic
from minispark.data.cache_format import CacheReader
from minispark.core.errors import MinisparkError
from minispark.model.draft_model import DraftModel
from minispark.training.anchor_batches import make_batch
from minispark.training.heldout import block_acceptance

ONPOLICY_FILE = "onpolicy.json"


@dataclass
class Replay:
    """The round-start anchors (reader indices, per sample in position order) and what the replay saw."""

    starts: dict[int, list[int]]
    anchors_scored: int
    rounds: int
    tau: float  # mean accepted drafts + 1 per replayed round: the drafter's τ on its training answers

    def to_json(self, init_from: str, seed: int) -> str:
        record = asdict(self) | {"init_from": init_from, "seed": seed}
        record["starts"] = {str(k): v for k, v in self.starts.items()}
        return json.dumps(record) + "\n"


def sample_anchors(reader: CacheReader, max_samples: int = 0) -> dict[int, list[tuple[int, int]]]:
    """Per sample, its anchors as (position, reader index) in position order."""
    samples: dict[int, list[tuple[int, int]]] = {}
    sample_of, positions = reader.anchor_samples()
    for index, (sample, position) in enumerate(zip(sample_of.tolist(), positions.tolist())):
        if max_samples <= 0 or sample < max_samples:
            samples.setdefault(sample, []).append((position, index))
    return {k: sorted(v) for k, v in sorted(samples.items())}


@torch.no_grad()
def acceptance_table(model: DraftModel, reader: CacheReader, indices: list[int], full_lm_head: torch.Tensor | None,
                     batch_anchors: int = 64) -> dict[int, np.ndarray]:
    """T = 1 acceptance per block position for each anchor of ``indices`` (one sample's, in
    position order), 0 past the labels present: reader index → (γ,) array."""
    gamma = model.config.block_size
    was_training = model.training
    model.eval()
    table: dict[int, np.ndarray] = {}
    device = next(model.parameters()).device
    for start in range(0, len(indices), batch_anchors):
        chunk = indices[start:start + batch_anchors]
        # One sample's anchors, sorted: make_batch packs them into a single row, slot j = chunk[j].
        batch = make_batch([reader[i] for i in chunk], gamma).to(device)
        if batch.block_tokens.shape[0] != 1:
            raise MinisparkError(f"{reader.directory}: anchors {chunk[0]}..{chunk[-1]} span several samples")
        accept, _, mask = block_acceptance(model, batch, full_lm_head)
        accept = (accept * mask).numpy()  # (A, γ)
        for j, index in enumerate(chunk):
            table[index] = accept[j]
    model.train(was_training)
    return table


def replay_sample(anchors: list[tuple[int, int]], table: dict[int, np.ndarray], rng: np.random.Generator,
                  ) -> tuple[list[int], list[int]]:
    """The rounds over one answer: (reader indices of the round anchors, accepted drafts per round).

    Starts at the first anchor; after n accepted drafts the next round is anchored n + 1 positions
    later, or at the next anchor the cache holds past that point (a sparse cache)."""
    positions = np.array([p for p, _ in anchors])
    chosen, accepted = [], []
    k = 0
    while k < len(anchors):
        index = anchors[k][1]
        coins = rng.random(len(table[index])) < table[index]  # (γ,) draft k accepted if its coin lands
        n = len(coins) if coins.all() else int(np.argmin(coins))
        chosen.append(index)
        accepted.append(n)
        k = int(np.searchsorted(positions, positions[k] + n + 1))
    return chosen, accepted


def round_starts(model: DraftModel, reader: CacheReader, seed: int, *, full_lm_head: torch.Tensor | None = None,
                 max_samples: int = 0, log: Callable[[str], None] | None = None) -> Replay:
    """Replay ``model``'s rounds over every answer of ``reader`` (the first ``max_samples``)."""
    starts: dict[int, list[int]] = {}
    scored = rounds = accepted_total = 0
    samples = sample_anchors(reader, max_samples)
    for done, (sample, anchors) in enumerate(samples.items(), 1):
        table = acceptance_table(model, reader, [i for _, i in anchors], full_lm_head)
        chosen, accepted = replay_sample(anchors, table, np.random.default_rng([seed, 2, sample]))
        starts[sample] = chosen
        scored, rounds, accepted_total = scored + len(anchors), rounds + len(chosen), accepted_total + sum(accepted)
        if log and done % 64 == 0:
            log(f"on-policy replay: {done}/{len(samples)} samples, {rounds} rounds of {scored} anchors")
    return Replay(starts, scored, rounds, 1.0 + accepted_total / max(rounds, 1))


def load_or_replay(out: Path, model: DraftModel, reader: CacheReader, init_from: str, seed: int, *,
                   full_lm_head: torch.Tensor | None = None, max_samples: int = 0,
                   log: Callable[[str], None] | None = None) -> Replay:
    """``OUT/onpolicy.json`` when it was written for the same drafter and seed, else a fresh replay
    (written there atomically)."""
    path = Path(out) / ONPOLICY_FILE
    if path.is_file() and not path.is_symlink():
        record = json.loads(path.read_text())
        if record.get("init_from") == init_from and record.get("seed") == seed:
            return Replay({int(k): v for k, v in record["starts"].items()}, record["anchors_scored"],
                          record["rounds"], record["tau"])
    replay = round_starts(model, reader, seed, full_lm_head=full_lm_head, max_samples=max_samples, log=log)
    write_text_atomic(path, replay.to_json(init_from, seed))
    return replay
