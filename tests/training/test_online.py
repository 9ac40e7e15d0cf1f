"""Online features: anchors computed from an answer set equal a feature cache's for the same answers, the
online plan is a resumable pure function of (seed, step), and ``train`` runs on an answer set."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from minispark.data.answers import AnswerConfig, AnswerSet, build_answers
from minispark.data.cache import CacheConfig, build_cache
from minispark.data.cache_format import CacheReader
from minispark.core.errors import MinisparkError
from minispark.target.loading import load_target
from minispark.training.online import MemoryReader, OnlinePlan, OnlineSource
from minispark.training.recipes import load_recipe
from minispark.training.train import train

PROMPTS = ["Tell me a story.", "What is 2 + 2?", "List three fruits.", "Explain gravity briefly.", "Hi there"]


@pytest.fixture(scope="module")
def llama(tiny_dir):
    return load_target(str(tiny_dir("llama")))


@pytest.fixture(scope="module")
def data(llama, tmp_path_factory) -> tuple[Path, Path, Path]:
    """(prompt file, greedy answer set, greedy dense fp32 cache of the same samples)."""
    root = tmp_path_factory.mktemp("online")
    prompts = root / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    # Greedy: the cache's generate path and the answer set's refill path give the same answers.
    build_answers(AnswerConfig(prompts=prompts, out=root / "answers", num_samples=5, max_new_tokens=20,
                               temperature=0.0, batch_size=2, samples_per_shard=2), target=llama, log=lambda _: None)
    build_cache(CacheConfig(prompts=prompts, out=root / "cache", num_samples=5, max_new_tokens=20, temperature=0.0,
                            layers="1,2", anchors_per_sample=100, anchor_run=1, window=6, block=3, dtype="fp32",
                            batch_size=2, samples_per_shard=2), target=llama, log=lambda _: None)
    return prompts, root / "answers", root / "cache"


def test_online_anchors_equal_cached_anchors(llama, data):
    _, answers, cache = data
    cached = CacheReader(cache)
    online = MemoryReader(OnlineSource(AnswerSet(answers), llama, [1, 2], window=6, block=3))
    assert len(online) == len(cached) > 20
    for i in range(len(cached)):
        a, b = cached[i], online[i]
        assert (a.sample_index, a.position) == (b.sample_index, b.position)
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)
        assert torch.equal(a.text_positions, b.text_positions)
        # generation captured features incrementally (KV cache, padded batch); online is one prefill
        torch.testing.assert_close(b.context_features, a.context_features, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(b.final_hidden, a.final_hidden, rtol=1e-4, atol=1e-4)


def test_answers_cut_to_n_tokens_equal_a_cache_regenerated_with_n_new_tokens(llama, data, tmp_path):
    """max_answer_tokens=N gives the anchors of answers regenerated with a cap of N (sampling is sequential:
    greedy here, so the cached generation's answers are exactly the cut ones)."""
    prompts, answers, _ = data
    build_cache(CacheConfig(prompts=prompts, out=tmp_path / "cache8", num_samples=5, max_new_tokens=8,
                            temperature=0.0, layers="1,2", anchors_per_sample=100, anchor_run=1, window=6, block=3,
                            dtype="fp32", batch_size=2, samples_per_shard=2), target=llama, log=lambda _: None)
    cached = CacheReader(tmp_path / "cache8")
    source = OnlineSource(AnswerSet(answers), llama, [1, 2], window=6, block=3, max_answer_tokens=8)
    online = MemoryReader(source)
    assert len(online) == len(cached) == int(source.anchors_per_sample().sum()) < \
        int(OnlineSource(AnswerSet(answers), llama, [1, 2], window=6, block=3).anchors_per_sample().sum())
    for i in range(len(cached)):
        a, b = cached[i], online[i]
        assert (a.sample_index, a.position) == (b.sample_index, b.position)
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)
        torch.testing.assert_close(b.context_features, a.context_features, rtol=1e-4, atol=1e-4)
    with pytest.raises(MinisparkError, match="max_answer_tokens"):
        load_recipe("tiny", ["max_answer_tokens=8", "cache_dir=runs/some-cache"])
    # the draft vocabulary counts the cut answers' tokens only
    from minispark.training.draft_vocab import answer_set_token_counts

    lengths = AnswerSet(answers).answer_lengths()
    counts = answer_set_token_counts(AnswerSet(answers), llama.vocab_size, max_answer_tokens=8)
    assert int(counts.sum()) == int(lengths.clip(max=8).sum()) < int(lengths.sum())


def test_online_plan_covers_every_anchor_once_per_epoch_and_is_a_function_of_the_step(llama, data):
    _, answers, _ = data
    source = OnlineSource(AnswerSet(answers), llama, [1, 2], window=6, block=3)
    plan = OnlinePlan(source, batch_anchors=7, seed=3, run=2, pool=4, stay=2)
    packed: list[int] = []
    pack = source.pack
    source.pack = lambda indices: packed.extend(indices) or pack(indices)  # count the prefills
    per_epoch = plan.steps_per_epoch(0)
    seen = [(a.sample_index, a.position) for s in range(per_epoch) for a in plan.anchors(s)]
    assert len(seen) == len(set(seen)) == plan.total == int(source.anchors_per_sample().sum())
    assert sorted(packed) == list(range(len(source.anchors_per_sample())))  # one prefill per answer and epoch
    assert len(plan._shards) <= 4  # the buffer holds at most ``pool`` answers
    again = OnlinePlan(source, batch_anchors=7, seed=3, run=2, pool=4, stay=2)  # a resumed run: same steps
    for step in (per_epoch + 1, 0, 3):
        assert [(a.sample_index, a.position) for a in again.anchors(step)] == \
            [(a.sample_index, a.position) for a in plan.anchors(step)]
    mixed = [{a.sample_index for a in plan.anchors(s)} for s in range(per_epoch)]
    assert max(len(m) for m in mixed) > 1  # a step draws from several answers of the buffer
    # an answer's anchors spread over the phases it stays (not all in one run of steps)
    steps_of = {}
    for s in range(per_epoch):
        for a in plan.anchors(s):
            steps_of.setdefault(a.sample_index, set()).add(s)
    assert any(max(v) - min(v) > 1 for v in steps_of.values())
    sparse = OnlinePlan(source, batch_anchors=7, seed=3, run=2, pool=4, stay=2, anchors_per_sample=3)
    picked = [(a.sample_index, a.position) for s in range(sparse.steps_per_epoch(0)) for a in sparse.anchors(s)]
    assert len(picked) == len(set(picked)) == sparse.total <= 3 * len(source.anchors_per_sample())
    replayed = OnlinePlan(source, batch_anchors=7, seed=3, run=2, pool=4, stay=2, first_sample=3, replay_samples=1)
    drawn = {a.sample_index for s in range(replayed.steps_per_epoch(0)) for a in replayed.anchors(s)}
    assert drawn == {0} | set(range(3, len(source.anchors_per_sample())))  # [0, 1) replayed beside [3, N)


def test_answer_use_names_answers_used_whole_and_untouched_as_the_steps_drew_them(llama, data):
    _, answers, _ = data
    source = OnlineSource(AnswerSet(answers), llama, [1, 2], window=6, block=3)
    plan = OnlinePlan(source, batch_anchors=5, seed=1, run=2, pool=4, stay=2)
    per_epoch = plan.steps_per_epoch(0)
    drawn: dict[int, int] = {}
    for steps in range(per_epoch + 2):
        whole, untouched = plan.answer_use(steps)
        # what the first ``steps`` steps drew, anchor by anchor
        assert all(drawn.get(int(a), 0) == plan.counts[a] for a in whole)
        assert all(int(a) not in drawn for a in untouched)
        assert not set(whole.tolist()) & set(untouched.tolist())
        if steps < per_epoch:
            for anchor in plan.anchors(steps):
                drawn[anchor.sample_index] = drawn.get(anchor.sample_index, 0) + 1
    assert sorted(plan.answer_use(per_epoch + 1)[0].tolist()) == sorted(drawn)  # a second epoch: all used
    assert len(plan.answer_use(0)[1]) == plan.samples and len(plan.answer_use(1)[1]) > 0


def test_train_on_an_answer_set(llama, data, tmp_path):
    _, answers, cache = data
    config = load_recipe("tiny", ["steps=6", "checkpoint_every=3", "window=6", "block_size=3",
                                  "feature_layers=[1,2]", f"answers_dir={answers}", "online_pool=2"])
    report = train(config, out_dir=tmp_path / "run", target=llama, log=None)
    assert report.last_step == 6 and all(torch.isfinite(torch.tensor(list(report.losses.values()))))
    again = train(config, out_dir=tmp_path / "again", target=llama, log=None)
    assert again.losses == report.losses  # the online stream is a function of (seed, step)
    with pytest.raises(MinisparkError, match="not both"):
        load_recipe("tiny", [f"answers_dir={answers}", f"cache_dir={cache}"])


def test_online_anchors_of_image_prompts_equal_cached_anchors(tiny_dir, tmp_path):
    """A VLM's image prompts are encoded again (pixels, M-RoPE positions) from the recorded prompt file."""
    from tests.tiny_models import make_test_image

    qwen = load_target(str(tiny_dir("qwen2_5_vl")))
    make_test_image(tmp_path / "a.png")
    prompts = tmp_path / "v.jsonl"
    prompts.write_text(json.dumps({"prompt": "What is in the picture?", "images": ["a.png"]}) + "\n"
                       + json.dumps({"prompt": "Say hello."}) + "\n")
    build_answers(AnswerConfig(prompts=prompts, out=tmp_path / "answers", num_samples=2, max_new_tokens=12,
                               temperature=0.0, batch_size=2, samples_per_shard=2), target=qwen, log=lambda _: None)
    build_cache(CacheConfig(prompts=prompts, out=tmp_path / "cache", num_samples=2, max_new_tokens=12, temperature=0.0,
                            layers="1,2", anchors_per_sample=100, anchor_run=1, window=6, block=3, dtype="fp32",
                            batch_size=2, samples_per_shard=2), target=qwen, log=lambda _: None)
    with pytest.raises(MinisparkError, match="online_prompts=FILE"):
        OnlineSource(AnswerSet(tmp_path / "answers"), qwen, [1, 2], window=6, block=3)
    cached = CacheReader(tmp_path / "cache")
    online = MemoryReader(OnlineSource(AnswerSet(tmp_path / "answers"), qwen, [1, 2], window=6, block=3,
                                       prompts=prompts))
    assert len(online) == len(cached) > 5
    for i in range(len(cached)):
        a, b = cached[i], online[i]
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.text_positions, b.text_positions)
        torch.testing.assert_close(b.context_features, a.context_features, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(b.final_hidden, a.final_hidden, rtol=1e-4, atol=1e-4)


def _shard(source: OnlineSource) -> dict[str, torch.Tensor]:
    return MemoryReader(source).shard


def test_a_feature_store_gives_the_prefills_numbers_and_runs_no_second_prefill(tiny_dir, llama, data, tmp_path,
                                                                               monkeypatch):
    """Read back, a stored answer's features are bit-equal to its prefill's (fp32 and bf16 targets alike)."""
    _, answers, _ = data
    bf16 = load_target(str(tiny_dir("llama")), dtype="bf16")
    for target, store in ((llama, tmp_path / "fp32"), (bf16, tmp_path / "bf16")):
        want = _shard(OnlineSource(AnswerSet(answers), target, [1, 2], window=6, block=3))
        first = _shard(OnlineSource(AnswerSet(answers), target, [1, 2], window=6, block=3, store=store))
        assert len(list(store.glob("*.safetensors"))) == 5
        with monkeypatch.context() as patch:
            patch.setattr(target, "capture", lambda *_: pytest.fail("prefilled an answer the store holds"))
            again = _shard(OnlineSource(AnswerSet(answers), target, [1, 2], window=6, block=3, store=store))
        for shard in (first, again):
            assert shard.keys() == want.keys() and all(torch.equal(shard[k], want[k]) for k in want)
    with pytest.raises(MinisparkError, match="another dtype"):  # the bf16 target's features are not the fp32 one's
        OnlineSource(AnswerSet(answers), llama, [1, 2], window=6, block=3, store=tmp_path / "bf16")


def test_a_feature_store_refuses_other_features_and_recomputes_a_damaged_or_planted_file(llama, data, tmp_path):
    _, answers, _ = data
    store = tmp_path / "store"
    want = _shard(OnlineSource(AnswerSet(answers), llama, [1, 2], window=6, block=3, store=store))
    with pytest.raises(MinisparkError, match="holds features of another layers"):
        OnlineSource(AnswerSet(answers), llama, [1], window=6, block=3, store=store)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(MinisparkError, match="not empty and not a minispark feature store"):
        OnlineSource(AnswerSet(answers), llama, [1, 2], window=6, block=3, store=tmp_path / "mine")
    files = sorted(store.glob("*.safetensors"))
    files[0].write_bytes(files[0].read_bytes()[:100])  # cut short
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"someone else's")
    files[1].unlink()
    files[1].symlink_to(outside)  # planted: never read, never written through
    files[2].unlink()
    stale = store / f".{files[2].name}.abcd1234.tmp"
    stale.write_bytes(b"half")  # a write killed before its rename: it goes when the store is next opened
    os.utime(stale, (time.time() - 60,) * 2)
    got = _shard(OnlineSource(AnswerSet(answers), llama, [1, 2], window=6, block=3, store=store))
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert outside.read_bytes() == b"someone else's" and not files[1].is_symlink()
    assert files[2].is_file() and not stale.exists()
    assert len(files[0].read_bytes()) > 100
    (store / "feature_store.json").write_text("{")
    with pytest.raises(MinisparkError, match="feature_store.json: unreadable"):
        OnlineSource(AnswerSet(answers), llama, [1, 2], window=6, block=3, store=store)


def test_training_with_an_online_store_gives_the_same_losses(llama, data, tmp_path, monkeypatch):
    """Two epochs (~12 steps each): without a store every answer is prefilled twice, with one once."""
    _, answers, cache = data
    base = ["steps=30", "checkpoint_every=10", "window=6", "block_size=3", "feature_layers=[1,2]",
            f"answers_dir={answers}", "online_pool=2"]
    prefills = []
    capture = llama.capture
    monkeypatch.setattr(llama, "capture", lambda *a: prefills.append(1) or capture(*a))
    plain = train(load_recipe("tiny", base), out_dir=tmp_path / "plain", target=llama, log=None)
    assert len(prefills) >= 10
    prefills.clear()
    lines: list[str] = []
    stored = train(load_recipe("tiny", [*base, f"online_store={tmp_path / 'store'}"]), out_dir=tmp_path / "stored",
                   target=llama, log=lines.append)
    assert stored.losses == plain.losses and len(prefills) == 5
    assert any(f"features kept in {tmp_path / 'store'} (0 answers so far" in line for line in lines)
    with pytest.raises(MinisparkError, match="online_store: keeps the features an answer set"):
        train(load_recipe("tiny", ["steps=2", f"cache_dir={cache}", f"online_store={tmp_path / 'store'}"]),
              out_dir=tmp_path / "cached", target=llama, log=None)
