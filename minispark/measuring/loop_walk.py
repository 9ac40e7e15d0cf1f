"""The greedy loop's τ on a held-out answer set, without running the target: every anchor scored, then walked.

The held-out proxy (``heldout.py``) averages each anchor's accepted length over anchors spread evenly
through the answers. The loop does not visit anchors evenly: a round that accepts k drafts skips the
next k anchors, so easy stretches take few rounds and hard ones many, and its τ (tokens per round) sits
near the *harmonic* mean of the per-anchor τ — below the proxy's mean wherever acceptance comes in
stretches, as on code. On answers regenerated greedily (``minispark answers --temperature 0``: the
target's own T 0 continuation) each anchor's T 0 outcome depends on the committed tokens alone, so
scoring every anchor of an answer once (:func:`run_lengths`) and walking them as the loop does —
the first round from the prompt's last token, then from the last committed token, 1 + accepted tokens
a round (:func:`walk`) — gives the rounds of ``speculative_generate`` at fixed γ, T 0, one by one
(tested against the loop on a tiny target).

    .venv/bin/python benchmarks/loop_walk.py runs/curve/16k-sparse-64/best \\
        --answers data/answers/smollm2-135m-instruct-heldout-t0 --category code --num-prompts 12
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from minispark.data.answers import AnswerSet
from minispark.data.cache_config import default_prompts
from minispark.data.prompts import load_prompts, prompt_file_hash
from minispark.core.errors import MinisparkError, option
from minispark.model.checkpoint import load_draft_model
from minispark.model.draft_model import DraftModel
from minispark.target.loading import Target
from minispark.training.anchor_batches import batch_rows, make_batch
from minispark.training.heldout import block_acceptance
from minispark.training.online import MemoryReader, OnlineSource

#: Anchors scored per forward (the held-out proxy's batch).
BATCH_ANCHORS = 64


@dataclass
class WalkScore:
    """The walked loop's rounds and tokens over some answers, beside the uniform and harmonic anchor means."""

    rounds: int
    tokens: int
    anchors: int
    uniform_tau: float
    harmonic_tau: float

    @property
    def tau(self) -> float:
        """Tokens committed per round, as ``GenerationStats.tau`` counts them."""
        return self.tokens / max(self.rounds, 1)


@torch.no_grad()
def run_lengths(model: DraftModel, reader: MemoryReader, full_lm_head: torch.Tensor | None = None,
                ) -> dict[int, dict[int, int]]:
    """{sample index: {anchor position: leading T 0 matches, 0..γ}} for every anchor of ``reader``."""
    gamma = model.config.block_size
    anchors = [reader[i] for i in range(len(reader))]
    out: dict[int, dict[int, int]] = {}
    for start in range(0, len(anchors), BATCH_ANCHORS):
        part = anchors[start:start + BATCH_ANCHORS]
        batch = make_batch(part, gamma).to(model.lm_head.weight.device)
        _, match, mask = block_acceptance(model, batch, full_lm_head, vocab_chunk=8)
        lengths = torch.cumprod(match * mask.double(), -1).sum(-1).long()  # (R·A,)
        rows = batch_rows(part)
        width = max(len(row) for row in rows)
        for r, row in enumerate(rows):
            for k, anchor in enumerate(row):
                out.setdefault(anchor.sample_index, {})[anchor.position] = int(lengths[r * width + k])
    return out


def walk(accepted: dict[int, int], prompt_length: int, answer_length: int, max_new_tokens: int) -> list[int]:
    """The drafts each round of the greedy loop accepts over one answer of ``answer_length`` tokens after a
    ``prompt_length``-token prompt. The first round anchors on the prompt's last token, which is no training
    anchor (it accepts nothing in the proxy's terms); each later one on the last committed token."""
    committed, rounds = 0, []
    while committed < min(answer_length, max_new_tokens):
        rounds.append(accepted.get(prompt_length + committed - 1, 0) if committed else 0)
        committed += 1 + rounds[-1]
    return rounds


def walk_score(accepted: dict[int, dict[int, int]], lengths: Sequence[tuple[int, int, int]],
               max_new_tokens: int) -> WalkScore:
    """The walked loop over answers given as (sample index, prompt length, answer length), with
    :func:`run_lengths`'s ``accepted``, each cut at ``max_new_tokens`` as the loop cuts it; the anchor
    means count the same stretch."""
    rounds = tokens = anchors = 0
    total = reciprocal = 0.0
    for sample, prompt_length, answer_length in lengths:
        mine = accepted.get(sample, {})
        walked = walk(mine, prompt_length, answer_length, max_new_tokens)
        rounds, tokens = rounds + len(walked), tokens + sum(walked) + len(walked)
        inside = [v for position, v in mine.items() if position - prompt_length < max_new_tokens]
        anchors += len(inside)
        total += sum(1 + v for v in inside)
        reciprocal += sum(1 / (1 + v) for v in inside)
    return WalkScore(rounds=rounds, tokens=tokens, anchors=anchors, uniform_tau=total / max(anchors, 1),
                     harmonic_tau=anchors / reciprocal if reciprocal else float("nan"))


def walk_drafter(drafter_dir: str | Path, answers_dir: str | Path, target: Target, category: str | None = None,
                 num_prompts: int = 0, max_new_tokens: int = 96) -> tuple[WalkScore, dict[int, dict[int, int]]]:
    """The walked loop of the drafter in ``drafter_dir`` over a greedy held-out answer set: the last
    ``num_prompts`` answers (0: all) whose prompt is of ``category`` (the prompt file's ``category`` key),
    the prompts ``minispark bench --prompts FILE --category C --num-prompts N`` runs, with
    :func:`run_lengths` (for comparing single answers with the loop)."""
    answers = AnswerSet(Path(answers_dir))
    temperature = answers.config["sampling"]["temperature"]
    if temperature != 0:
        raise MinisparkError(f"{answers_dir}: regenerated at T {temperature}; the walk needs greedy answers (T 0)")
    picked = list(range(len(answers)))
    if category is not None:  # categories are the shipped prompt file's: the set must come from it
        shipped = default_prompts(target.is_vlm, answers.config["split"])
        if answers.config["prompts"]["hash"] != prompt_file_hash(shipped):
            raise MinisparkError(f"{answers_dir}: its prompts are not the shipped {shipped.name}, whose categories "
                                 f"{option('category')} reads")
        prompts = load_prompts(shipped, check_images=False)
        picked = [i for i in picked if prompts[answers[i].prompt_line - 1].category == category]
    picked = picked[-num_prompts:] if num_prompts else picked
    head = target.lm_head.weight.detach()
    model = load_draft_model(drafter_dir, target.model.get_input_embeddings().weight.detach(), head,
                             target.device).float().eval()
    c = model.config
    source = OnlineSource(answers, target, list(c.feature_layers), c.window, c.block_size, "fp32")
    accepted = run_lengths(model, MemoryReader(source, picked), head)
    lengths = [(answers[i].sample_index, len(answers[i].prompt_ids), len(answers[i].answer_ids)) for i in picked]
    return walk_score(accepted, lengths, max_new_tokens), accepted
