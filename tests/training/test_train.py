"""The trainer on a tiny random target's cache: packing equals one-anchor-per-row windows, only
trainable weights move, the loss falls, resume continues bit-exactly, mismatched caches and
configs are refused, and the checkpoint loads as a drafter.

    .venv/bin/python -m pytest -q tests/training/test_train.py
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from minispark.core.atomic import WRITTEN_MANIFEST
from minispark.data.cache_format import CacheMismatchError, CacheReader
from minispark.serving.drafters.dspark import load_drafter
from minispark.core.errors import MinisparkError
from minispark.core.identity import target_id
from minispark.target.loading import load_target
from tests.tiny_models import build_tiny
from minispark.training.anchor_batches import AnchorPlan, make_batch
from minispark.training.draft_vocab import answer_token_counts
from minispark.training.train import train
from minispark.training.trainer import LATEST_FILE, Trainer
from tests.helpers import recipe


def test_plan_is_sample_major_and_covers_each_epoch(cache):
    reader = CacheReader(cache)
    plan = AnchorPlan(reader, batch_anchors=8, seed=3)
    steps = plan.total // 8 + 1
    stream = [i for s in range(2 * steps) for i in plan.step_anchors(s)]
    assert sorted(stream[:plan.total]) == list(range(plan.total))  # one epoch = every anchor once
    samples = [reader[i].sample_index for i in stream[:plan.total]]
    runs = [s for k, s in enumerate(samples) if k == 0 or samples[k - 1] != s]
    assert len(runs) == len(set(runs))  # a sample's anchors are contiguous in the stream
    assert AnchorPlan(reader, 8, 3).step_anchors(steps + 1) == plan.step_anchors(steps + 1)  # pure in (seed, step)
    assert AnchorPlan(reader, 8, 4).step_anchors(0) != plan.step_anchors(0)


def test_plan_with_runs_mixes_samples_and_covers_each_epoch(cache):
    reader = CacheReader(cache)
    plan = AnchorPlan(reader, batch_anchors=8, seed=3, run=2)
    stream = [i for s in range(plan.total // 8 + 1) for i in plan.step_anchors(s)]
    assert sorted(stream[:plan.total]) == list(range(plan.total))  # one epoch = every anchor once
    for k in range(0, plan.total - 1, 2):  # runs of 2 consecutive anchors of one sample (a shorter tail run aside)
        a, b = reader[stream[k]], reader[stream[k + 1]]
        if a.sample_index == b.sample_index:
            assert stream[k + 1] == stream[k] + 1
    whole = AnchorPlan(reader, batch_anchors=8, seed=3)
    mixed = lambda p: len({reader[i].sample_index for i in p.step_anchors(0)})  # noqa: E731
    assert mixed(plan) > mixed(whole)


def test_plan_subsets_samples_and_anchors(cache):
    """max_samples keeps the first N samples; anchors_per_sample a seeded subset of each sample's."""
    reader = CacheReader(cache)
    full = AnchorPlan(reader, 8, 3)
    first = AnchorPlan(reader, 8, 3, max_samples=4)
    assert first.samples == 4 and {reader[i].sample_index for g in first.groups for i in g} == {0, 1, 2, 3}
    sparse = AnchorPlan(reader, 8, 3, anchors_per_sample=2)
    assert sparse.samples == full.samples and all(len(g) <= 2 for g in sparse.groups)
    assert all(set(s) <= set(f) and s == sorted(s) for s, f in zip(sparse.groups, full.groups))
    assert sparse.groups == AnchorPlan(reader, 8, 3, anchors_per_sample=2).groups  # seeded
    vocab = int(reader.config["target_model"]["vocab_size"])
    counts = answer_token_counts(reader, vocab, max_samples=4)
    assert 0 < int(counts.sum()) < int(answer_token_counts(reader, vocab).sum())
    # a slice [3, 6) with the first 2 samples replayed beside it; replaying more than precedes the slice is refused
    sliced = AnchorPlan(reader, 8, 3, first_sample=3, max_samples=6, replay_samples=2)
    assert {reader[i].sample_index for g in sliced.groups for i in g} == {0, 1, 3, 4, 5}
    with pytest.raises(MinisparkError, match="replay_samples 4: .* at most 3"):
        recipe("first_sample=3", "replay_samples=4")


def test_feature_noise_trains_and_resumes_exactly(cache, target, tmp_path):
    config = recipe("steps=4", "checkpoint_every=2", "feature_noise=0.1", "max_samples=8")
    run = train(config, cache, tmp_path / "n", target=target, log=None).losses
    clean = train(recipe("steps=4", "max_samples=8"), cache, tmp_path / "c", target=target, log=None).losses
    assert run[1] != clean[1] and all(torch.isfinite(torch.tensor(v)) for v in run.values())
    (tmp_path / "n" / LATEST_FILE).write_text("checkpoint-000002\n")
    assert train(config, cache, tmp_path / "n", resume=True, target=target, log=None).losses == {3: run[3], 4: run[4]}


def test_packed_rows_equal_one_anchor_per_row(cache, target, tmp_path):
    """§10.2 packing: a row holding all anchors of a sample over the union of their windows gives
    each block the same hidden states as a row holding only that anchor and its own window."""
    reader = CacheReader(cache)
    trainer = Trainer(recipe(), reader, target, tmp_path)
    model = trainer.model.eval()
    anchors = [reader[i] for i in trainer.plan.step_anchors(0)]
    packed = make_batch(anchors, 4)
    assert packed.features.shape[0] < len(anchors)  # anchors really share rows
    rows = [make_batch([a], 4) for a in anchors]
    with torch.no_grad():
        hidden = model.forward_train(packed.features, packed.context_positions, packed.block_tokens,
                                     packed.anchor_positions, packed.context_valid).hidden
        flat = hidden[packed.valid[..., 0]]  # (anchors, γ, d), in row order
        singles = torch.cat([model.forward_train(b.features, b.context_positions, b.block_tokens,
                                                 b.anchor_positions, b.context_valid).hidden[0] for b in rows])
    # packed order: rows in stream order (one per run of a sample), anchors by position within a row
    runs = [k for k in range(len(anchors)) if k == 0 or anchors[k].sample_index != anchors[k - 1].sample_index]
    order = [i for start, end in zip(runs, runs[1:] + [len(anchors)])
             for i in sorted(range(start, end), key=lambda i: anchors[i].position)]
    torch.testing.assert_close(flat, singles[order], rtol=1e-5, atol=1e-5)
    assert torch.equal(packed.valid[packed.valid[..., 0]], torch.cat([b.valid[0] for b in rows])[order])


def test_only_trainable_weights_change(cache, target, tmp_path):
    trainer = Trainer(recipe(), CacheReader(cache), target, tmp_path)
    model = trainer.model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with_grad: list[set[str]] = []
    trainer.optimizer.register_step_pre_hook(
        lambda *_: with_grad.append({n for n, p in model.named_parameters() if p.grad is not None}))
    for _ in range(3):
        trainer.train_one()
    trainable = {n for n, p in model.named_parameters() if not n.startswith(("embed_tokens.", "lm_head."))}
    assert with_grad == [trainable] * 3
    embed, lm_head = target.model.get_input_embeddings().weight, target.lm_head.weight
    assert torch.equal(model.embed_tokens.weight, embed) and torch.equal(model.lm_head.weight, lm_head)
    for name, p in model.named_parameters():
        frozen = name.startswith(("embed_tokens.", "lm_head."))
        assert p.requires_grad != frozen and p.grad is None, name
        assert torch.equal(p, before[name]) == frozen, name


@pytest.mark.parametrize("which", ["first", "last"])
def test_init_layers_start_from_the_target_layers(cache, target, tmp_path, which):
    trainer = Trainer(recipe(f"init_layers={which}"), CacheReader(cache), target, tmp_path)
    layers, n = list(target.decoder.layers), len(trainer.model.layers)
    for layer, source in zip(trainer.model.layers, layers[:n] if which == "first" else layers[-n:]):
        theirs = source.state_dict()
        for name, weight in layer.state_dict().items():
            if name in theirs:
                torch.testing.assert_close(weight, theirs[name].float())
            else:  # a Llama target has no q/k norms: those keep their init
                assert name.split(".")[-2] in ("q_norm", "k_norm") and torch.equal(weight, torch.ones_like(weight))
    stats, _, _ = trainer.train_one()
    assert torch.isfinite(torch.tensor(stats.total))


def test_init_layers_refuses_a_differently_sized_layer(cache, target, tmp_path):
    trainer = Trainer(recipe(), CacheReader(cache), target, tmp_path)
    source = torch.nn.Module()
    source.mlp = torch.nn.Module()
    source.mlp.up_proj = torch.nn.Linear(3, 5, bias=False)
    with pytest.raises(ValueError, match="mlp.up_proj.weight"):
        trainer.model.copy_layers([source] * len(trainer.model.layers))


def test_loss_falls_and_resume_is_exact(cache, target, tmp_path):
    config = recipe("steps=40", "checkpoint_every=20", "keep_checkpoints=3")
    full = train(config, cache, tmp_path / "a", target=target, log=None)
    losses = [full.losses[s] for s in range(1, 41)]
    assert sum(losses[-5:]) / 5 < 0.85 * sum(losses[:5]) / 5
    assert [row["step"] for row in full.metrics] == [10, 20, 30, 40]
    assert len(full.metrics[-1]["acceptance"]) == 4 and full.metrics[-1]["tokens_per_s"] > 0

    resumed_dir = tmp_path / "b"
    shutil.copytree(tmp_path / "a", resumed_dir)
    shutil.rmtree(resumed_dir / "checkpoint-000040")
    (resumed_dir / LATEST_FILE).write_text("checkpoint-000020\n")
    resumed = train(config, cache, resumed_dir, resume=True, target=target, log=None)
    assert resumed.first_step == 21
    assert resumed.losses[21] == full.losses[21]  # bit-identical next-step loss
    assert all(resumed.losses[s] == full.losses[s] for s in range(21, 41))
    rows = [json.loads(line) for line in (resumed_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [10, 20, 30, 40]
    for name in ("model.safetensors", "config.json"):
        assert (resumed_dir / "drafter" / name).read_bytes() == (tmp_path / "a" / "drafter" / name).read_bytes()


def test_checkpoint_layout_loads_as_a_drafter(cache, target, tmp_path):
    report = train(recipe("steps=4", "checkpoint_every=2"), cache, tmp_path, target=target, log=None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-000002", "checkpoint-000004", "drafter", "latest",
                                                          "metrics.jsonl", "train_config.json"]
    assert sorted(p.name for p in (tmp_path / "checkpoint-000004").iterdir()) == [
        WRITTEN_MANIFEST, "config.json", "model.safetensors", "train_config.json", "trainer.pt"]
    embed, lm_head = target.model.get_input_embeddings().weight, target.lm_head.weight
    drafter = load_drafter(report.drafter, embed, lm_head, "cpu", target_identity=target_id(target.identity()))
    assert drafter.config.mask_token_id == 16 and drafter.config.block_size == 4
    assert drafter.config.feature_layers == (1, 2) and drafter.config.window == 16
    with pytest.raises(MinisparkError, match="already holds a training run"):
        train(recipe("steps=4"), cache, tmp_path, target=target, log=None)
    with pytest.raises(MinisparkError, match=r"resume: lr differs from the checkpoint's"):
        train(recipe("steps=4", "checkpoint_every=2", "lr=1e-3"), cache, tmp_path, resume=True, target=target, log=None)


@pytest.mark.parametrize("override, message", [
    ("window=8", "built with window 16, the recipe's window is 8; add the override window=16"),
    ("block_size=3", "built with block 4, the recipe's block_size is 3; add the override block_size=4"),
    ("feature_layers=1,3", r"built with layers \[1, 2\], the recipe's feature_layers is \[1, 3\]; add the override "
                           "feature_layers=1,2")])
def test_refuses_a_mismatched_cache(cache, target, tmp_path, override, message):
    with pytest.raises(CacheMismatchError, match=message):
        Trainer(recipe(override), CacheReader(cache), target, tmp_path)


def test_refuses_another_target(cache, tmp_path):
    other = load_target(str(build_tiny("llama", tmp_path / "other", seed=1)))
    with pytest.raises(CacheMismatchError, match="target mismatch"):
        Trainer(recipe(), CacheReader(cache), other, tmp_path)


def test_variants_train(cache, target, tmp_path):
    """Gradient checkpointing changes no number; 8-bit AdamW and bf16 autocast run on CPU."""
    base = train(recipe("steps=3"), cache, tmp_path / "base", target=target, log=None).losses
    ckpt = train(recipe("steps=3", "grad_checkpointing=true"), cache, tmp_path / "ckpt", target=target, log=None).losses
    assert ckpt == base
    for override in ("optimizer=adamw8bit", "dtype=bf16"):
        config = recipe("steps=4", "checkpoint_every=2", override)
        out = tmp_path / override
        losses = train(config, cache, out, target=target, log=None).losses
        assert all(torch.isfinite(torch.tensor(v)) for v in losses.values())
        assert losses[1] == pytest.approx(base[1], rel=0.05)
        (out / LATEST_FILE).write_text("checkpoint-000002\n")  # resume is exact here too
        assert train(config, cache, out, resume=True, target=target, log=None).losses == {3: losses[3], 4: losses[4]}


@pytest.mark.slow
def test_compiled_training_matches_eager(cache, target, tmp_path):
    """torch.compile (inductor; ~1–2 min to compile on a CPU) gives the eager losses."""
    eager = train(recipe("steps=3"), cache, tmp_path / "eager", target=target, log=None).losses
    compiled = train(recipe("steps=3", "compile=true"), cache, tmp_path / "compiled", target=target, log=None).losses
    assert compiled == pytest.approx(eager, rel=1e-5)


def test_out_with_foreign_files_is_refused_and_left_untouched(cache, target, tmp_path):
    """HF-style checkpoint-500/-1000 and user files in --out: refused, nothing deleted or replaced."""
    out = tmp_path / "o"
    for name in ("checkpoint-500", "checkpoint-1000", "drafter"):
        (out / name).mkdir(parents=True)
        (out / name / "weights.bin").write_bytes(name.encode())
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(MinisparkError, match=rf"out {out}: not empty and not a minispark training run"):
        train(recipe("steps=4", "checkpoint_every=2"), cache, out, target=target, log=None)
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_warm_start_continues_its_source_and_beats_a_cold_start(cache, target, tmp_path):
    """``init_from`` (``train --init-from``): the warm run's first loss is its source's (no update has run yet,
    whatever the fresh optimizer does), and a few warm steps end below as many cold ones."""
    source = train(recipe("steps=30"), cache, tmp_path / "source", target=target, log=None)
    warm = train(recipe("steps=8", f"init_from={source.drafter}"), cache, tmp_path / "warm", target=target, log=None)
    cold = train(recipe("steps=8"), cache, tmp_path / "cold", target=target, log=None)
    late = sum(source.losses[s] for s in range(26, 31)) / 5
    assert abs(warm.losses[1] - late) < 0.2 * late
    assert sum(warm.losses.values()) / 8 < 0.9 * sum(cold.losses.values()) / 8
    recorded = json.loads((tmp_path / "warm" / "train_config.json").read_text())
    assert recorded["init_from"] == str(source.drafter)  # the source is recorded with the run


def test_a_warm_start_grows_its_draft_vocabulary_and_keeps_its_scores(cache, target, tmp_path):
    """A ``draft_vocab`` above its source's grows the vocabulary by the most frequent tokens it lacks: every old
    token keeps its logit (whatever the previous token), a new token is scored by the target's lm_head row alone,
    and a smaller one is refused."""
    source = train(recipe("steps=6", "draft_vocab=64"), cache, tmp_path / "source", target=target, log=None)
    reader = CacheReader(cache)
    kept = Trainer(recipe("draft_vocab=64", f"init_from={source.drafter}"), reader, target, tmp_path / "kept").model
    grown = Trainer(recipe("draft_vocab=128", f"init_from={source.drafter}"), reader, target, tmp_path / "grown").model
    old, new = kept.vocab_ids, grown.vocab_ids
    assert set(old.tolist()) < set(new.tolist())
    fresh = torch.tensor(sorted(set(new.tolist()) - set(old.tolist())))
    outside = torch.tensor([i for i in range(4000) if i not in set(new.tolist())][:3])
    torch.manual_seed(0)
    hidden = torch.randn(9, 1, 64)  # (B, γ=1, d)
    prev = torch.cat([old[:3], fresh[:3], outside]).view(9, 1)  # an old, a new and an outside previous token each
    with torch.no_grad():
        before = kept.head_logits(hidden, prev)  # (9, 1, 64)
        after = grown.head_logits(hidden, prev)  # (9, 1, 128)
    torch.testing.assert_close(after[..., grown.draft_index(old)], before)
    lm_head = target.lm_head.weight.detach()[fresh]  # (F, d)
    torch.testing.assert_close(after[..., grown.draft_index(fresh)], hidden @ lm_head.T)
    with torch.no_grad():  # the confidence reads W1 of the previous token: unchanged too
        torch.testing.assert_close(grown.confidence_logits(hidden, prev), kept.confidence_logits(hidden, prev))
    with pytest.raises(MinisparkError, match="draft_vocab is 64, this run's is 32"):
        Trainer(recipe("draft_vocab=32", f"init_from={source.drafter}"), reader, target, tmp_path / "shrunk")
