"""The in-place KV cache and grouped attention of the packed runtime: the same numbers as
transformers' ``DynamicCache`` and SDPA, through prefill, verify widths, crops, growth and reindexing.

    .venv/bin/python -m pytest -q tests/target/test_kv_cache.py
"""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from minispark.target import kv_cache
from minispark.target.attention import GROUPED_SDPA
from minispark.target.kv_cache import GrowingLayer, RowLayer, growing_cache
from minispark.target.loading import load_target
from minispark.target.runtime import eager_linears

TOKENS = torch.tensor([5, 17, 9, 33, 2, 41, 8, 12])


def _walk(session, prompt) -> list[torch.Tensor]:
    """Prefill, then verify widths 1..8 with crops between them (a rejected tail each time)."""
    out = [session.prefill(prompt, all_logits=True).logits]
    for width in range(1, 9):
        out.append(session.step(TOKENS[:width]).logits)
        session.crop(session.cache_length - width // 2)
    return out


def test_growing_cache_equals_dynamic_cache(tiny_dir, monkeypatch) -> None:
    monkeypatch.setattr(kv_cache, "INITIAL_SPARE", 3)  # several doublings inside the walk
    target = load_target(str(tiny_dir("llama")), runtime="packed")
    prompt = target.encode(prompt="Once upon a time there was a lighthouse")
    with target.session() as growing, target.session() as plain:
        plain.cache = DynamicCache(config=target.model.config)
        assert all(type(layer) is GrowingLayer for layer in growing.cache.layers)
        for got, want in zip(_walk(growing, prompt), _walk(plain, prompt)):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
        for g, p in zip(growing.cache.layers, plain.cache.layers):
            assert torch.equal(g.keys, p.keys) and torch.equal(g.values, p.values)
        assert growing.cache.layers[0]._keys.shape[-2] > growing.cache_length  # spare columns kept


def test_slot_rows_equal_dynamic_caches_and_keep_each_other(tiny_dir, monkeypatch) -> None:
    """Two sessions whose caches are rows of shared buffers walk as transformers' caches do, while the shared
    buffers grow under them (one row's growth moves every row and keeps what each holds)."""
    monkeypatch.setattr(kv_cache, "INITIAL_SPARE", 3)  # several doublings inside the walks
    target = load_target(str(tiny_dir("llama")), runtime="packed")
    first, second = target.slot_sessions(2)
    assert all(type(layer) is RowLayer for layer in first.cache.layers)
    prompts = [target.encode(prompt="Once upon a time there was a lighthouse"), target.encode(prompt="Hi there")]
    kept = _walk(second, prompts[1])  # row 1 filled first; row 0's walk then grows the buffers several times
    row_one = [(layer.keys.clone(), layer.values.clone()) for layer in second.cache.layers]
    walked = _walk(first, prompts[0])
    with target.session() as plain:
        plain.cache = DynamicCache(config=target.model.config)
        for got, want in zip(walked, _walk(plain, prompts[0])):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    for layer, (keys, values) in zip(second.cache.layers, row_one):
        assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)
        assert layer._keys.data_ptr() == layer.rows.keys[1].data_ptr()  # still a view of the grown buffers
    with target.session() as plain:
        plain.cache = DynamicCache(config=target.model.config)
        for got, want in zip(kept, _walk(plain, prompts[1])):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_growing_layer_reindexing_keeps_updating() -> None:
    layer, plain = GrowingLayer(), DynamicLayer()
    for state in (torch.randn(2, 3, 4, 8), torch.randn(2, 3, 1, 8)):
        layer.update(state, state + 1)
        plain.update(state, state + 1)
    for cache in (layer, plain):
        cache.batch_select_indices(torch.tensor([1]))
        cache.batch_repeat_interleave(2)
    new = torch.randn(2, 3, 2, 8)
    got, want = layer.update(new, new), plain.update(new, new)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    layer.crop(-3)
    assert layer.get_seq_length() == 4


def test_every_layer_keeps_its_whole_cache(tiny_dir) -> None:
    """A sliding-window layer is full length too: transformers' own drops the keys a crop past the window needs."""
    config = load_target(str(tiny_dir("qwen3")), runtime="eager").model.config
    config.layer_types = ["sliding_attention"] + config.layer_types[1:]
    config.sliding_window = 4
    assert all(type(layer) is GrowingLayer for layer in growing_cache(config).layers)
    assert all(type(layer) is DynamicLayer for layer in kv_cache.plain_cache(config).layers)


@pytest.mark.parametrize("runtime", ["eager", "packed"])
@pytest.mark.parametrize("family", ["qwen2", "mistral", "gemma3_text"])
def test_drafting_past_a_sliding_window_keeps_greedy_parity(tmp_path, family: str, runtime: str) -> None:
    """Tiny models attending a window of 8 (a Qwen2 with every layer windowed, a Mistral, a Gemma 3 with its
    global layer): drafts rejected past the window crashed the crop ("the current layer does not track past
    states"). Full-length layers and the model's windowed mask give transformers' own greedy generation (its
    windowed cache), drafted by lookup and DSpark, chains and batches."""
    import json

    from minispark.serving.batched import BatchDecoder, BatchRequest
    from minispark.serving.generate import generate
    from tests.tiny_models import build_tiny
    from tests.helpers import random_dspark

    directory = build_tiny(family, tmp_path / "windowed")
    if family == "qwen2":
        config = json.loads((directory / "config.json").read_text())
        config |= {"sliding_window": 8, "use_sliding_window": True, "max_window_layers": 0,
                   "layer_types": ["sliding_attention"] * config["num_hidden_layers"]}
        (directory / "config.json").write_text(json.dumps(config))
    target = load_target(str(directory), runtime=runtime)
    assert target.windowed
    prompt = "Tell me a long story about the sea and the ships, " * 2
    ids = target.encode(prompt=prompt).input_ids
    want = target.model.generate(ids, max_new_tokens=40, do_sample=False)[0, ids.shape[1]:].tolist()
    assert generate(target, prompt, drafter="none", max_new_tokens=40).result.token_ids == want[:40]
    for drafter in ("lookup", random_dspark(target)):
        result = generate(target, prompt, drafter=drafter, max_new_tokens=40).result
        assert result.token_ids == want and sum(result.stats.accepted_lengths) < sum(result.stats.proposed_lengths)
    with target.session() as session:
        assert not session.supports_trees  # a tree mask built here would not apply the window
    decoder = BatchDecoder(target, random_dspark(target), slots=2, gamma=4)
    requests = [BatchRequest(target.encode(prompt=prompt), 40), BatchRequest(target.encode(prompt=prompt), 40)]
    assert [r.token_ids for r in decoder.run(requests)] == [want, want]
    decoder.close()


@pytest.mark.parametrize("family", ["llama", "qwen2_5_vl"])
def test_grouped_attention_equals_sdpa(tiny_dir, test_image, family: str) -> None:
    """The grouped (no repeat_kv) attention gives transformers' SDPA numbers at every width (the few-query kernel
    sums in its own order: logits ~1e-5 apart, as fp32 sums in another order are)."""
    grouped = load_target(str(tiny_dir(family)), runtime="packed")
    config = grouped.model.config.get_text_config()
    assert config.num_key_value_heads < config.num_attention_heads  # the case it exists for
    assert grouped.model.config._attn_implementation == GROUPED_SDPA
    sdpa = load_target(str(tiny_dir(family)), runtime="packed")
    sdpa.model.set_attn_implementation("sdpa")
    images = [test_image] if grouped.is_vlm else []
    prompt = grouped.encode(prompt="Describe the picture, then count to ten.", images=images)
    with grouped.session() as g, sdpa.session() as s:
        for got, want in zip(_walk(g, prompt), _walk(s, prompt)):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-4)


def test_eager_linears_restores_transformers_attention(tiny_dir) -> None:
    target = load_target(str(tiny_dir("llama")), runtime="packed")
    with eager_linears(target.model):
        assert target.model.config._attn_implementation == "sdpa"
    assert target.model.config._attn_implementation == GROUPED_SDPA
    eager = load_target(str(tiny_dir("llama")), runtime="eager")
    assert eager.model.config._attn_implementation == "sdpa"
    assert type(eager.session().cache.layers[0]) is DynamicLayer  # eager is transformers as it runs
