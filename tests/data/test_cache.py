"""Target cache on tiny random models: stored windows equal a full-sequence capture (text and image).

Also covers batched regeneration (equal to one-by-one, stops at EOS), layer choice, anchors,
the dry-run estimate and the disk check.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import minispark.data.cache as cache_module
import minispark.data.cache_estimate as cache_estimate
from minispark.data.cache import CacheConfig, build_cache, estimate_cache
from minispark.data.cache_format import CACHE_DTYPES, CacheReader
from minispark.core.errors import MinisparkError
from minispark.data.regenerate import regenerate
from minispark.target.sampling import SamplingConfig
from minispark.target.loading import load_target
from tests.tiny_models import build_tiny, make_test_image

NUM_LAYERS = 6


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Tiny models on a shared 2-core box: extra intra-op threads only add contention.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return load_target(str(build_tiny("llama", tmp_path_factory.mktemp("llama"), num_layers=NUM_LAYERS)))


@pytest.fixture(scope="module")
def qwen_vl(tmp_path_factory):
    return load_target(str(build_tiny("qwen2_5_vl", tmp_path_factory.mktemp("qwen_vl"), num_layers=NUM_LAYERS)))


@pytest.fixture(scope="module")
def prompts(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("prompts")
    (root / "img").mkdir()
    make_test_image(root / "img" / "a.png")
    make_test_image(root / "img" / "b.png", size=(84, 56), seed=1)
    text = [{"prompt": "Write a short poem about rivers."}, {"prompt": "What is 17 times 23?"},
            {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]},
            {"prompt": "Explain recursion with an example in Python, please, in detail."}]
    vision = [{"prompt": "Describe this picture.", "images": ["img/a.png"]},
              {"prompt": "Say hello."},
              {"messages": [{"role": "user", "content": [{"type": "image", "image": "img/b.png"},
                                                         {"type": "text", "text": "What is in it?"}]}]}]
    files = {}
    for name, records in (("text", text), ("vision", vision)):
        files[name] = root / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps(r) + "\n" for r in records))
    return files


def build_recording(config: CacheConfig, target, monkeypatch) -> tuple[CacheReader, dict]:
    """Build a cache while recording each sample's full sequence (prompt + regenerated answer)."""
    fulls = {}
    original = cache_module.pack_sample

    def recording(target, index, prompt, answer, *args, **kwargs):
        fulls[index] = target.extend(prompt, answer.tokens)
        return original(target, index, prompt, answer, *args, **kwargs)

    monkeypatch.setattr(cache_module, "pack_sample", recording)
    build_cache(config, target=target)
    return CacheReader(config.out), fulls


def check_against_full_capture(reader: CacheReader, target, fulls: dict, prompts_by_sample: dict) -> int:
    """Every anchor's stored window equals the slice of a fresh full-sequence capture; returns #anchors."""
    config = reader.config
    layers, window, block, dtype = config["layers"], config["window"], config["block"], CACHE_DTYPES[config["dtype"]]
    assert target.num_layers - 1 not in layers, "the last layer must never be stored"
    captures = {i: target.capture(full, layers) for i, full in fulls.items()}  # (L, m, d), (L, d)
    per_sample: dict[int, list[int]] = {}
    for anchor in reader:
        i, a = anchor.sample_index, anchor.position
        full, (features, final) = fulls[i], captures[i]
        seq_len, prompt_len = full.length, prompts_by_sample[i].length
        assert torch.equal(full.input_ids[0, :prompt_len], prompts_by_sample[i].input_ids[0])
        # validity: the anchor token and its next token are inside the answer (the loss mask)
        assert prompt_len <= a < a + 1 < seq_len
        c = a if window == 0 else min(window, a)
        g, k = min(block, seq_len - a), min(block, seq_len - 1 - a)
        # Features come from the batched, KV-cached generation pass: equal to a fresh unpadded full
        # forward up to float noise (and one bf16 rounding step); the last row is never computed.
        tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(anchor.context_features.float(), features[a - c:a].to(dtype).float(), **tol)
        used = min(g, seq_len - 1 - a)  # the hidden rows with a label after them
        torch.testing.assert_close(anchor.final_hidden[:used].float(), final[a:a + used].to(dtype).float(), **tol)
        assert anchor.input_ids.tolist() == full.input_ids[0, a - c:a + k + 1].tolist()
        assert anchor.text_positions.tolist() == full.text_positions[a - c:a + k + 1].tolist()
        assert anchor.loss_mask.tolist() == [p >= prompt_len for p in range(a - c, a + k + 1)]
        assert anchor.token == int(full.input_ids[0, a]) and anchor.context_len == c
        per_sample.setdefault(i, []).append(a)
    num_anchors = 0
    for i, full in fulls.items():
        valid = max(0, full.length - 1 - prompts_by_sample[i].length)
        anchors = per_sample.get(i, [])
        assert len(anchors) == len(set(anchors)) == min(config["anchors_per_sample"], valid)
        num_anchors += len(anchors)
    return num_anchors


def encoded(target, path: Path, count: int) -> dict:
    samples = cache_module.load_prompts(path)
    return {i: target.encode(**samples[i % len(samples)].encode_kwargs()) for i in range(count)}


@pytest.mark.parametrize("dtype, window", [("fp32", 6), ("bf16", 3)])
def test_text_windows_equal_full_capture(llama, prompts, tmp_path, monkeypatch, dtype, window):
    config = CacheConfig(prompts=prompts["text"], out=tmp_path / "cache", num_samples=6, max_new_tokens=20,
                         layers="1,3", anchors_per_sample=5, window=window, block=4, dtype=dtype, batch_size=2,
                         samples_per_shard=4, seed=11)
    reader, fulls = build_recording(config, llama, monkeypatch)
    assert reader.layers == [1, 3] and reader.window == window and reader.block == 4
    assert len(fulls) == 6 and len(reader.shards) == 2
    # samples 4 and 5 reuse prompts 0 and 1 (6 samples, 4 prompts) with their own seeds
    assert fulls[4].input_ids[0, :20].tolist() == fulls[0].input_ids[0, :20].tolist()
    assert fulls[4].input_ids.tolist() != fulls[0].input_ids.tolist()
    assert check_against_full_capture(reader, llama, fulls, encoded(llama, prompts["text"], 6)) == len(reader)


def test_image_windows_equal_full_capture(qwen_vl, prompts, tmp_path, monkeypatch):
    config = CacheConfig(prompts=prompts["vision"], out=tmp_path / "cache", max_new_tokens=16, layers="2,4",
                         anchors_per_sample=4, window=0, block=3, dtype="fp32", batch_size=3, seed=5)
    reader, fulls = build_recording(config, qwen_vl, monkeypatch)
    by_sample = encoded(qwen_vl, prompts["vision"], 3)
    assert check_against_full_capture(reader, qwen_vl, fulls, by_sample) == len(reader) > 0
    image_id = qwen_vl.model.config.image_token_id
    with_images = [a for a in reader if (a.input_ids == image_id).any()]
    assert {a.sample_index for a in with_images} == {0, 2}  # image tokens are ordinary context rows
    for anchor in with_images:
        full = fulls[anchor.sample_index]
        # text positions follow the M-RoPE temporal component, which lags the index after an image
        assert torch.equal(full.position_ids[0, 0, :anchor.position].cpu().to(torch.int32),
                           anchor.text_positions[:anchor.context_len])
        assert int(anchor.text_positions[-1]) < anchor.position + len(anchor.labels)
    assert reader.config["target_model"]["uses_mrope"] is True
    assert "source" not in reader.config  # regenerated answers: the original, pre---source identity


def test_loss_mask_is_exactly_the_answer(llama, prompts, tmp_path, monkeypatch):
    config = CacheConfig(prompts=prompts["text"], out=tmp_path / "cache", num_samples=2, max_new_tokens=12,
                         layers="1", anchors_per_sample=64, window=0, block=2, dtype="fp32")
    reader, fulls = build_recording(config, llama, monkeypatch)
    shard = reader.shards[0]
    for s in range(2):
        t0, t1 = shard["sample_tok_offset"][s:s + 2].tolist()
        prompt_len = int(shard["prompt_len"][s])
        positions = shard["tok_pos"][t0:t1].tolist()
        assert shard["loss_mask"][t0:t1].tolist() == [int(p >= prompt_len) for p in positions]
        assert int(shard["seq_len"][s]) - prompt_len == 12  # random tiny model: runs to the cap


def test_batched_regeneration_equals_one_by_one(qwen_vl, prompts):
    samples = cache_module.load_prompts(prompts["vision"])
    inputs = [qwen_vl.encode(**s.encode_kwargs()) for s in samples]
    config = SamplingConfig(0.7, top_k=20, top_p=0.8)
    batched = regenerate(qwen_vl, inputs, [10, 11, 12], config, 12)
    single = [regenerate(qwen_vl, [x], [seed], config, 12)[0] for x, seed in zip(inputs, [10, 11, 12])]
    assert [a.tokens.tolist() for a in batched] == [a.tokens.tolist() for a in single]
    again = regenerate(qwen_vl, inputs, [10, 11, 13], config, 12)
    assert again[0].tokens.tolist() == batched[0].tokens.tolist() != []
    assert again[2].tokens.tolist() != batched[2].tokens.tolist()  # a different seed, a different answer


@pytest.mark.parametrize("model", ["llama", "qwen_vl"])
def test_padded_batched_capture_equals_unpadded_full_forward(model, prompts, request):
    """Features captured while generating a left-padded batch equal one unpadded full forward."""
    target = request.getfixturevalue(model)
    samples = cache_module.load_prompts(prompts["vision" if model == "qwen_vl" else "text"])
    inputs = [target.encode(**s.encode_kwargs()) for s in samples]
    assert len({x.length for x in inputs}) > 1  # the batch really is padded
    layers = [0, 1]
    answers = regenerate(target, inputs, [3, 4, 5][:len(inputs)], SamplingConfig(0.7, top_k=20), 9,
                         capture_layers=layers)
    for prompt, answer in zip(inputs, answers):
        features, final = target.capture(target.extend(prompt, answer.tokens), layers)  # (L, m, d), (L, d)
        n = prompt.length + len(answer.tokens)
        assert answer.features.shape == features.shape and answer.final_hidden.shape == final.shape
        # every row but the last (never fed to the target, never read by training)
        torch.testing.assert_close(answer.features[:n - 1], features[:n - 1], rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(answer.final_hidden[:n - 1], final[:n - 1], rtol=1e-4, atol=1e-4)
        assert not answer.features[-1].any()


def test_regeneration_stops_at_eos(llama, prompts, monkeypatch):
    samples = cache_module.load_prompts(prompts["text"])
    inputs = [llama.encode(**s.encode_kwargs()) for s in samples[:2]]
    greedy = SamplingConfig(0.0)
    free = regenerate(llama, inputs, [0, 1], greedy, 10)
    stop = int(free[0].tokens[3])
    monkeypatch.setattr(llama, "eos_token_ids", {stop})
    stopped = regenerate(llama, inputs, [0, 1], greedy, 10)
    first = free[0].tokens.tolist().index(stop)
    assert stopped[0].tokens.tolist() == free[0].tokens[:first + 1].tolist() and stopped[0].stopped_at_eos
    if stop not in free[1].tokens.tolist():
        assert stopped[1].tokens.tolist() == free[1].tokens.tolist() and not stopped[1].stopped_at_eos


def test_layers_auto_and_the_last_layer_is_refused(llama, prompts, tmp_path):
    base = dict(prompts=prompts["text"], num_samples=1, max_new_tokens=4, dtype="fp32")
    with pytest.raises(MinisparkError, match="final decoder layer"):
        build_cache(CacheConfig(out=tmp_path / "refused", layers=f"1,{NUM_LAYERS - 1}", **base), target=llama)
    assert not (tmp_path / "refused").exists()  # refused before any work
    with pytest.raises(MinisparkError, match="layers"):
        CacheConfig(out=tmp_path / "x", layers="1,two", **base)
    build_cache(CacheConfig(out=tmp_path / "auto", **base), target=llama)
    layers = CacheReader(tmp_path / "auto").layers
    assert layers == llama.auto_layers() and NUM_LAYERS - 1 not in layers


def test_images_on_a_text_target_are_refused_before_work(llama, prompts, tmp_path):
    with pytest.raises(MinisparkError, match=r"vision.jsonl:1: has images, but target .* is text-only"):
        build_cache(CacheConfig(prompts=prompts["vision"], out=tmp_path / "c"), target=llama)


def test_dry_run_estimate_tracks_the_real_size(llama, prompts, tmp_path, monkeypatch):
    config = CacheConfig(prompts=prompts["text"], out=tmp_path / "cache", num_samples=8, max_new_tokens=24,
                         layers="1,2", anchors_per_sample=4, window=5, block=3, dtype="bf16", samples_per_shard=8)
    estimate = estimate_cache(config, target=llama)
    assert estimate.fits and estimate.layers == [1, 2] and not (tmp_path / "cache").exists()
    report = build_cache(config, target=llama)
    assert report.samples == 8 and report.generated_tokens == 8 * 24  # random model: no EOS
    assert report.anchors == 8 * 4 and 0 < report.ratio_to_full < 1
    # estimate counts tensor bytes only; shard headers add a little on top
    assert estimate.estimate.bytes_per_sample == pytest.approx(report.bytes_per_sample, rel=0.35)
    assert set(report.to_json()) >= {"samples", "generated_tokens", "anchors", "bytes_per_sample", "ratio_to_full"}
    assert f"{report.samples} samples" in report.summary()

    monkeypatch.setattr(cache_estimate, "free_bytes", lambda path: 1000)
    assert not estimate_cache(config, target=llama).fits
    refused = CacheConfig(**{**vars(config), "out": tmp_path / "small_disk"})
    with pytest.raises(MinisparkError, match="force"):
        build_cache(refused, target=llama)
    forced = CacheConfig(**{**vars(config), "out": tmp_path / "small_disk", "force": True, "num_samples": 1})
    assert build_cache(forced, target=llama).samples == 1


def test_anchor_rows_map_into_unique_sorted_unions(llama, prompts, tmp_path):
    config = CacheConfig(prompts=prompts["text"], out=tmp_path / "cache", num_samples=4, max_new_tokens=30,
                         layers="1", anchors_per_sample=6, window=4, block=3, dtype="fp32", samples_per_shard=4)
    build_cache(config, target=llama)
    shard = CacheReader(config.out).shards[0]
    for s in range(4):
        anchors = range(*shard["sample_anchor_offset"][s:s + 2].tolist())
        for kind in ("tok", "ctx", "hid"):
            r0, r1 = shard[f"sample_{kind}_offset"][s:s + 2].tolist()
            rows = shard[f"{kind}_pos"][r0:r1].numpy()
            assert np.all(np.diff(rows) > 0), f"duplicate {kind} rows in sample {s}"
            covered = set()
            for i in anchors:
                start, end = shard[f"anchor_{kind}"][i].tolist()
                assert r0 <= start <= end <= r1
                covered.update(range(start, end))
            assert covered == set(range(r0, r1)), f"{kind} rows not used by any anchor"


def test_teacher_forced_source_caches_the_given_answers(llama, tmp_path):
    """--source text: no generation; the answer is the line's assistant turn as the template renders it."""
    records = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
               for q, a in [("What is 2 + 2?", "2 + 2 = 4."), ("Name a fruit.", "An apple, for example.")]]
    path = tmp_path / "texts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    config = CacheConfig(prompts=path, out=tmp_path / "cache", source="text", layers="1", anchors_per_sample=64,
                         window=0, block=2, dtype="fp32")
    build_cache(config, target=llama, log=lambda _: None)
    reader = CacheReader(config.out)
    assert reader.config["source"] == "text"
    shard = reader.shards[0]
    for s, record in enumerate(records):
        full = llama.encode(record["messages"], add_generation_prompt=False)
        prompt_len, seq_len = int(shard["prompt_len"][s]), int(shard["seq_len"][s])
        t0, t1 = shard["sample_tok_offset"][s:s + 2].tolist()
        stored = shard["input_ids"][t0:t1].tolist()
        eos = next(i for i, t in enumerate(full.input_ids[0, prompt_len:].tolist()) if t in llama.eos_token_ids)
        assert stored == full.input_ids[0, :prompt_len + eos + 1].tolist() and seq_len == prompt_len + eos + 1
        features, _ = llama.capture(full, [1])
        c0, c1 = shard["sample_ctx_offset"][s:s + 2].tolist()
        torch.testing.assert_close(shard["features"][c0:c1].float(), features[:c1 - c0], rtol=1e-5, atol=1e-5)
    path.write_text(json.dumps({"prompt": "No answer here."}) + "\n")
    with pytest.raises(MinisparkError, match=rf"{path}:1: source text needs a trailing assistant message"):
        build_cache(CacheConfig(prompts=path, out=tmp_path / "c2", source="text"), target=llama)


def test_auto_batch_size_is_64_on_a_cpu_and_a_grown_cache_keeps_its_own(llama, prompts, tmp_path):
    common = dict(prompts=prompts["text"], out=tmp_path / "cache", max_new_tokens=4, layers="1,3",
                  anchors_per_sample=2, window=4, block=2, dtype="fp32", samples_per_shard=2)
    build_cache(CacheConfig(num_samples=2, **common), target=llama, log=lambda _: None)
    assert CacheReader(tmp_path / "cache").config["batching"]["batch_size"] == cache_module.AUTO_BATCH == 64
    built_with_3 = dict(common, out=tmp_path / "grown")
    build_cache(CacheConfig(num_samples=2, batch_size=3, **built_with_3), target=llama, log=lambda _: None)
    build_cache(CacheConfig(num_samples=4, **built_with_3), target=llama, log=lambda _: None)  # auto: its own 3
    reader = CacheReader(tmp_path / "grown")
    assert reader.num_samples == 4 and reader.config["batching"]["batch_size"] == 3


def test_auto_batch_size_on_a_gpu_fits_a_quarter_of_free_memory(tmp_path, monkeypatch):
    """36 layers × 2 KV heads × 128 dims × K and V × 2 bytes = 36,864 B per token; a 200-token prompt plus
    512 new tokens per row; a quarter of 4 GB free holds 37 such rows."""
    from types import SimpleNamespace

    text = SimpleNamespace(num_attention_heads=16, hidden_size=2048, num_hidden_layers=36, num_key_value_heads=2,
                           head_dim=128)
    target = SimpleNamespace(device=torch.device("cuda"), dtype=torch.bfloat16, text_config=text,
                             encode=lambda **_: SimpleNamespace(length=200))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (4_000_000_000, 6_000_000_000))
    sample = SimpleNamespace(encode_kwargs=lambda: {})
    config = CacheConfig(prompts=tmp_path / "p.jsonl", out=tmp_path / "new", max_new_tokens=512)
    assert cache_module.auto_batch_size(config, target, [sample]) == 1_000_000_000 // (36_864 * 712) == 38
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1_000_000, 6_000_000_000))
    assert cache_module.auto_batch_size(config, target, [sample]) == 1  # never below one row
