"""On-policy refinement: the round replay, its anchors, and fine-tuning from a drafter.

    .venv/bin/python -m pytest -q tests/training/test_onpolicy.py
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from minispark.data.cache_format import CacheReader
from minispark.core.errors import MinisparkError
from minispark.model.checkpoint import read_weights
from minispark.training.anchor_batches import make_batch
from minispark.training.heldout import block_acceptance
from minispark.training.onpolicy import ONPOLICY_FILE, acceptance_table, replay_sample, sample_anchors
from minispark.training.train import train
from minispark.training.trainer import Trainer
from tests.helpers import recipe

GAMMA = 4


def test_replay_follows_the_accepted_drafts():
    """Certain coins: all 4 drafts accepted at position 0 → next round at 5; none at 5 → 6; ..."""
    anchors = [(p, 100 + p) for p in range(12)]
    table = {100 + p: np.zeros(GAMMA) for p in range(12)}
    table[100] = np.ones(GAMMA)
    table[106] = np.array([1.0, 1.0, 0.0, 1.0])  # two accepted, then a rejection
    chosen, accepted = replay_sample(anchors, table, np.random.default_rng(0))
    assert [i - 100 for i in chosen] == [0, 5, 6, 9, 10, 11]
    assert accepted == [4, 0, 2, 0, 0, 0]


def test_replay_jumps_to_the_next_anchor_a_sparse_cache_holds():
    anchors = [(0, 0), (3, 1), (4, 2), (9, 3)]
    table = {0: np.array([1.0, 0.0, 0.0, 0.0]), 1: np.ones(GAMMA), 2: np.zeros(GAMMA), 3: np.zeros(GAMMA)}
    chosen, accepted = replay_sample(anchors, table, np.random.default_rng(0))
    assert chosen == [0, 1, 3] and accepted == [1, 4, 0]  # 0+1+1 = 2 → anchor at 3; 3+4+1 = 8 → anchor at 9


@pytest.mark.parametrize("rates, matches", [([0.6, 0.5, 0.4, 0.3], True), ([0.3, 0.5, 0.4, 0.3], False)])
def test_replay_accepts_with_the_acceptance_probabilities(rates, matches):
    """Mean accepted drafts per round = Σ_k Π_{i≤k} a_i for the table's rates (0.6 …); the negative
    control expects the first table's mean from a replay of another one and must fail."""
    expected = float(np.cumprod([0.6, 0.5, 0.4, 0.3]).sum())
    anchors = [(p, p) for p in range(60_000)]
    table = {p: np.array(rates) for p in range(60_000)}
    _, accepted = replay_sample(anchors, table, np.random.default_rng(7))
    mean, stderr = np.mean(accepted), np.std(accepted) / np.sqrt(len(accepted))
    assert (abs(mean - expected) < 4 * stderr) == matches, (mean, expected, stderr)


@pytest.fixture(scope="module")
def drafter(cache, target, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("onpolicy") / "base"
    return train(recipe("steps=8"), cache, out, target=target, log=None).drafter


def test_acceptance_table_equals_one_anchor_at_a_time(cache, target, drafter, tmp_path):  # noqa: F811
    """The packed per-sample batch maps slot j to anchor j: same values as scoring each anchor alone."""
    trainer = Trainer(recipe(f"init_from={drafter}"), CacheReader(cache), target, tmp_path)
    reader, head = CacheReader(cache), target.lm_head.weight.detach()
    anchors = next(iter(sample_anchors(reader).values()))
    indices = [i for _, i in anchors]
    table = acceptance_table(trainer.model, reader, indices, head, batch_anchors=3)
    for index in indices:
        accept, _, mask = block_acceptance(trainer.model, make_batch([reader[index]], GAMMA), head)
        torch.testing.assert_close(torch.from_numpy(table[index]), (accept * mask)[0], rtol=1e-5, atol=1e-6)


def test_onpolicy_run_starts_from_the_drafter_and_trains_on_round_anchors(cache, target, drafter, tmp_path):  # noqa: F811
    config = recipe(f"init_from={drafter}", "onpolicy=true", "steps=4", "checkpoint_every=2")
    trainer = Trainer(config, CacheReader(cache), target, tmp_path)
    start = read_weights(drafter, "cpu")
    for name, weight in trainer.model.state_dict().items():
        if name in start:
            assert torch.equal(weight, start[name]), name
    record = json.loads((tmp_path / ONPOLICY_FILE).read_text())
    reader = CacheReader(cache)
    samples = sample_anchors(reader)
    chosen = {i for starts in trainer.replay.starts.values() for i in starts}
    assert set(int(k) for k in record["starts"]) == set(samples)
    for sample, anchors in samples.items():
        starts = record["starts"][str(sample)]
        assert starts[0] == anchors[0][1]  # every answer's first round
        positions = [reader[i].position for i in starts]
        assert positions == sorted(set(positions))
    assert record["rounds"] == len(chosen) <= record["anchors_scored"] == len(reader)
    stream = {i for s in range(3 * trainer.plan.total) for i in trainer.plan.step_anchors(s)}
    assert stream == chosen

    report = train(config, cache, tmp_path / "run", target=target, log=None)
    before = (tmp_path / "run" / ONPOLICY_FILE).read_text()
    (tmp_path / "run" / "latest").write_text("checkpoint-000002\n")
    resumed = train(config, cache, tmp_path / "run", resume=True, target=target, log=None)
    assert resumed.losses[3] == report.losses[3] and (tmp_path / "run" / ONPOLICY_FILE).read_text() == before


def test_onpolicy_needs_a_drafter_and_init_from_must_match(cache, target, drafter, tmp_path):  # noqa: F811
    with pytest.raises(MinisparkError, match="onpolicy: needs init_from"):
        recipe("onpolicy=true")
    with pytest.raises(MinisparkError, match=r"init_from: .*config.json: markov_rank is"):
        Trainer(recipe(f"init_from={drafter}", "markov_rank=8"), CacheReader(cache), target, tmp_path / "a")
    with pytest.raises(MinisparkError, match="init_from: .* is not a drafter directory"):
        Trainer(recipe(f"init_from={tmp_path}"), CacheReader(cache), target, tmp_path / "b")
