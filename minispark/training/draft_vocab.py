"""The draft vocabulary: which N target tokens a reduced-vocabulary drafter scores, and what it covers.

A drafter that can only propose tokens in a set S loses nothing in correctness (p_d is zero outside
S and verification uses the full target distribution) but every rejection-free round needs the
target's tokens to be in S. S is the N most frequent tokens of the regenerated answers in a training
cache (the loss-masked token rows), plus any ``required`` ids (EOS); ties break by token id, so the
same cache always gives the same S. ``coverage`` measures the share of answer tokens inside S on any
cache — run it on the held-out cache to choose N from measured coverage rather than training data.

    .venv/bin/python -m minispark.training.draft_vocab runs/cache-train runs/cache-heldout 1000 2000 4096 8192
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

import torch

from minispark.data.answers import AnswerSet
from minispark.data.cache_format import CacheReader


def answer_token_counts(reader: CacheReader, vocab_size: int, max_samples: int = 0,
                        first_sample: int = 0) -> torch.Tensor:
    """(V,) int64: how often each token occurs in the cache's answers (each stored token row once),
    counting only samples with ``first_sample <= sample_index < max_samples`` (each bound when positive)."""
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    for shard in reader.shards:
        keep = shard["loss_mask"].bool()
        if max_samples > 0 or first_sample > 0:
            # token row r belongs to the shard-local sample whose [offset, next offset) holds it
            offsets = shard["sample_tok_offset"].long()  # (S+1,)
            rows = torch.arange(keep.numel())
            local = torch.searchsorted(offsets, rows, right=True) - 1  # (R_tok,)
            sample = shard["sample_index"].long()[local]
            keep &= sample >= first_sample
            if max_samples > 0:
                keep &= sample < max_samples
        ids = shard["input_ids"].long()[keep]
        counts += torch.bincount(ids, minlength=vocab_size)[:vocab_size]
    return counts


def answer_set_token_counts(answers: AnswerSet, vocab_size: int, max_samples: int = 0,
                            max_answer_tokens: int = 0, first_sample: int = 0) -> torch.Tensor:
    """(V,) int64: how often each token occurs in an answer set's answers (those in [first_sample, max_samples),
    the upper bound when > 0, each cut to its first ``max_answer_tokens`` when > 0)."""
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    n = len(answers) if max_samples <= 0 else min(max_samples, len(answers))
    for i in range(first_sample, n):
        ids = answers[i].answer_ids
        counts += torch.bincount(ids[:max_answer_tokens] if max_answer_tokens > 0 else ids, minlength=vocab_size)
    return counts


def top_tokens(counts: torch.Tensor, n: int, required: Iterable[int] = ()) -> torch.Tensor:
    """(n,) the ``required`` ids, then the most frequent others (ties by id), sorted ascending."""
    required = sorted(set(int(i) for i in required))
    if n < len(required) or n > counts.numel():
        raise ValueError(f"draft vocabulary of {n} cannot hold {len(required)} required ids within {counts.numel()}")
    ranked = counts.double() - torch.arange(counts.numel(), dtype=torch.float64) / (2 * counts.numel())
    ranked[required] = float("inf")  # always in
    return torch.sort(torch.topk(ranked, n).indices).values


def coverage(counts: torch.Tensor, vocab_ids: torch.Tensor) -> float:
    """Share of the counted answer tokens that lie inside ``vocab_ids``."""
    total = int(counts.sum())
    return float(counts[vocab_ids].sum()) / total if total else float("nan")


def main(argv: list[str]) -> None:
    train, held, *sizes = argv
    train_reader, held_reader = CacheReader(train, verify=False), CacheReader(held, verify=False)
    vocab_size = int(train_reader.config["target_model"]["vocab_size"])
    train_counts = answer_token_counts(train_reader, vocab_size)
    held_counts = answer_token_counts(held_reader, vocab_size)
    for n in (int(s) for s in sizes):
        ids = top_tokens(train_counts, n)
        print(f"N={n}: coverage train {coverage(train_counts, ids):.4f}  held-out {coverage(held_counts, ids):.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
