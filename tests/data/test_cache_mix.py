"""Mixing caches: every anchor of the mix equals its source anchor, sample indices run on across
parts, held-out and mismatched caches are refused with one-line errors, a killed mix resumes, and
the trainer reads a mix like any cache.

    .venv/bin/python -m pytest -q tests/data/test_cache_mix.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from minispark.cli import app
from minispark.data.cache import CacheConfig, build_cache
from minispark.data.cache_format import CacheError, CacheMismatchError, CacheReader, file_sha256
from minispark.data.cache_mix import MixPart, concat_shards, mix_caches, parse_part, slice_samples
from minispark.target.loading import load_target
from tests.tiny_models import build_tiny

COMMON = dict(max_new_tokens=6, layers="1,2", anchors_per_sample=4, anchor_run=2, window=16, block=4, dtype="fp32",
              samples_per_shard=2)


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> dict[str, Path]:
    """A regenerated cache of 5 answers, a teacher-forced one of 3 texts, and a held-out one (tiny Llama)."""
    root = tmp_path_factory.mktemp("mix")
    target = load_target(str(build_tiny("llama", root / "llama", num_layers=4)))
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Tell me about the number {i}."}) + "\n" for i in range(5)))
    texts = root / "texts.jsonl"
    texts.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Question {i}?"},
                                                      {"role": "assistant", "content": f"Answer number {i} is "
                                                       f"{'long ' * (i + 2)}enough."}]}) + "\n" for i in range(3)))
    out = {"answers": root / "answers", "texts": root / "texts", "heldout": root / "heldout",
           "target": root / "llama", "prompts": prompts}
    build_cache(CacheConfig(prompts=prompts, out=out["answers"], num_samples=5, **COMMON), target=target,
                log=lambda _: None)
    build_cache(CacheConfig(prompts=texts, out=out["texts"], source="text", **COMMON), target=target,
                log=lambda _: None)
    build_cache(CacheConfig(prompts=prompts, out=out["heldout"], num_samples=2, split="heldout", **COMMON),
                target=target, log=lambda _: None)
    return out


def anchors_of(reader: CacheReader) -> list:
    return list(reader)


def assert_same_anchor(a, b) -> None:
    assert a.position == b.position
    for name in ("context_features", "final_hidden", "input_ids", "text_positions", "loss_mask"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=0)


def test_mix_holds_exactly_its_parts_anchors(caches, tmp_path) -> None:
    manifest = mix_caches(tmp_path / "mix", [MixPart(caches["answers"], 3), MixPart(caches["texts"])],
                          samples_per_shard=4)
    mixed = CacheReader(tmp_path / "mix")
    answers, texts = CacheReader(caches["answers"]), CacheReader(caches["texts"])
    expected = [a for a in answers if a.sample_index < 3] + list(texts)
    got = anchors_of(mixed)
    assert len(got) == len(expected) == manifest["totals"]["anchors"]
    for a, b in zip(got, expected):
        assert_same_anchor(a, b)
    # Sample indices run on across parts: part 2's sample i is mix sample 3 + i.
    assert [a.sample_index for a in got] == [a.sample_index for a in expected[:len(got) - len(list(texts))]] + \
        [3 + a.sample_index for a in texts]
    config = mixed.config
    assert config["source"] == "mix" and config["split"] == "train" and mixed.num_samples == 6
    assert [p["mix_samples"] for p in config["parts"]] == [[0, 3], [3, 6]]
    assert [p["source"] for p in config["parts"]] == ["regenerate", "text"]
    assert len(manifest["shards"]) == 2 and manifest["complete"]


def test_reader_anchor_samples_match_the_anchors(caches, tmp_path) -> None:
    mix_caches(tmp_path / "mix", [MixPart(caches["answers"]), MixPart(caches["texts"])], samples_per_shard=2)
    reader = CacheReader(tmp_path / "mix")
    samples, positions = reader.anchor_samples()
    assert samples.tolist() == [a.sample_index for a in reader] and positions.tolist() == [a.position for a in reader]


def test_slices_concatenate_back_to_the_shard(caches) -> None:
    shard = CacheReader(caches["answers"]).shards[0]
    whole = {key: shard[key] for key in ("sample_index", "anchor_ctx", "features", "sample_anchor_offset")}
    joined = concat_shards([slice_samples(shard, 0, 1), slice_samples(shard, 1, 2)])
    for key, value in whole.items():
        assert torch.equal(joined[key], value), key


def test_held_out_and_mismatched_caches_are_refused(caches, tmp_path) -> None:
    with pytest.raises(CacheMismatchError, match="held-out evaluation cache") as error:
        mix_caches(tmp_path / "a", [MixPart(caches["answers"]), MixPart(caches["heldout"])])
    assert "\n" not in str(error.value)
    other = json.loads((caches["texts"] / "manifest.json").read_text())
    copy = tmp_path / "copy"
    copy.mkdir()
    for shard in other["shards"]:
        (copy / shard["file"]).symlink_to(caches["texts"] / shard["file"])
    other["config"]["window"] = 99
    (copy / "manifest.json").write_text(json.dumps(other))
    # Its shards no longer match the edited config: refused on open, blaming the manifest (not a shard).
    with pytest.raises(CacheError, match=r"manifest.json: its config differs from the one every shard"):
        mix_caches(tmp_path / "b", [MixPart(caches["answers"]), MixPart(copy)])
    # One shard of another cache among the rest, its manifest entry updated to match: that shard is named.
    planted = json.loads((caches["answers"] / "manifest.json").read_text())
    foreign = caches["texts"] / other["shards"][0]["file"]
    (tmp_path / "planted").mkdir()
    for entry in planted["shards"]:
        (tmp_path / "planted" / entry["file"]).symlink_to(caches["answers"] / entry["file"])
    (tmp_path / "planted" / planted["shards"][0]["file"]).unlink()
    (tmp_path / "planted" / planted["shards"][0]["file"]).symlink_to(foreign)
    planted["shards"][0] |= {"bytes": foreign.stat().st_size, "sha256": file_sha256(foreign)}
    (tmp_path / "planted" / "manifest.json").write_text(json.dumps(planted))
    with pytest.raises(CacheError, match=rf"{planted['shards'][0]['file']}: shard belongs to a different cache"):
        CacheReader(tmp_path / "planted")
    with pytest.raises(CacheError, match="asked for 9 samples, the cache holds 5"):
        mix_caches(tmp_path / "c", [MixPart(caches["answers"], 9), MixPart(caches["texts"])])
    with pytest.raises(CacheError, match="at least two caches"):
        mix_caches(tmp_path / "d", [MixPart(caches["answers"])])
    assert parse_part("runs/a:12") == MixPart(Path("runs/a"), 12) and parse_part("runs/a") == MixPart(Path("runs/a"))
    with pytest.raises(CacheError, match="'runs/a:0'"):
        parse_part("runs/a:0")


def test_a_copy_of_the_target_elsewhere_is_named_by_what_differs(caches, tmp_path) -> None:
    """The same weights at another path are another target; the refusal says which field differs, not two dicts."""
    import shutil

    copy = shutil.copytree(caches["target"], tmp_path / "llama-copy")
    build_cache(CacheConfig(prompts=caches["prompts"], out=tmp_path / "other", num_samples=2, **COMMON),
                target=load_target(str(copy)), log=lambda _: None)
    with pytest.raises(CacheMismatchError) as error:
        mix_caches(tmp_path / "mix", [MixPart(caches["answers"]), MixPart(tmp_path / "other")])
    message = str(error.value)
    assert f"target differs from {caches['answers'] / 'manifest.json'}'s (name {str(copy)!r} vs " in message
    assert "same tokenizer_hash, weights_hash" in message and "{" not in message


def test_a_count_is_read_by_the_one_number_rule(tmp_path) -> None:
    """parse_part had its own twin of validate's rule; digit grouping ('1_0', 10 to int()) is refused by both."""
    from minispark.core import check_lists

    assert [check_lists.is_number_text(t, whole=True) for t in ("12", "+3", "1_0", "٣", "1.5", "abc")] == [
        True, True, False, False, False, False]
    assert check_lists.is_number_text("1.5") and not check_lists.is_number_text("1_0.5")
    assert parse_part("runs/a:+3") == MixPart(Path("runs/a"), 3)
    assert parse_part("runs/a:1_0") == MixPart(Path("runs/a:1_0"))  # no directory runs/a: a name with a colon
    (tmp_path / "a").mkdir()
    with pytest.raises(CacheError, match="expected a whole number of samples, got '1_0'"):
        parse_part(f"{tmp_path / 'a'}:1_0")


def test_a_killed_mix_resumes_to_the_same_bytes(caches, tmp_path, monkeypatch) -> None:
    parts = [MixPart(caches["answers"]), MixPart(caches["texts"])]
    reference = mix_caches(tmp_path / "whole", parts, samples_per_shard=2)
    import minispark.data.cache_mix as mix_module

    real, calls = mix_module.write_shard, []

    def dies_on_the_third(path, tensors, metadata):
        calls.append(path)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(path, tensors, metadata)

    monkeypatch.setattr(mix_module, "write_shard", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        mix_caches(tmp_path / "killed", parts, samples_per_shard=2)
    with pytest.raises(CacheError, match="incomplete cache"):  # two shards of three listed, the build not done
        CacheReader(tmp_path / "killed")
    monkeypatch.setattr(mix_module, "write_shard", real)
    resumed = mix_caches(tmp_path / "killed", parts, samples_per_shard=2)
    assert [e["sha256"] for e in resumed["shards"]] == [e["sha256"] for e in reference["shards"]]
    with pytest.raises(CacheMismatchError, match="another cache or mix"):
        mix_caches(tmp_path / "killed", parts[::-1], samples_per_shard=2)


def test_a_mix_cannot_be_grown_by_the_cache_build(caches, tmp_path) -> None:
    mix_caches(tmp_path / "mix", [MixPart(caches["answers"]), MixPart(caches["texts"])])
    target = load_target(str(caches["target"]))
    with pytest.raises(CacheMismatchError, match=r"a mix of caches \(`minispark cache-mix`\), which cannot grow"):
        build_cache(CacheConfig(prompts=caches["prompts"], out=tmp_path / "mix", num_samples=9, **COMMON),
                    target=target, log=lambda _: None)


def test_cli_mix_and_train_on_it(caches, tmp_path) -> None:
    from typer.testing import CliRunner

    runner = CliRunner()
    result = runner.invoke(app, ["cache-mix", "--out", str(tmp_path / "mix"), f"{caches['answers']}:2",
                                 str(caches["texts"]), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["samples"] == 5
    result = runner.invoke(app, ["train", "--recipe", "tiny", "--cache", str(tmp_path / "mix"), "--out",
                                 str(tmp_path / "draft"), "--no-progress", "steps=2", "batch_anchors=4",
                                 "checkpoint_every=2", "log_every=1"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "draft" / "drafter" / "config.json").is_file()
    result = runner.invoke(app, ["cache-mix", "--out", str(tmp_path / "m2"), str(caches["answers"]),
                                 str(caches["heldout"])])
    assert result.exit_code == 2 and "held-out evaluation cache" in result.output


def test_a_copy_of_the_same_cache_is_refused_by_content(caches, tmp_path) -> None:
    """The same cache at another path (a byte-identical copy) was mixed twice without a word: the path check
    compares paths, so the shards' hashes are compared."""
    import shutil

    from typer.testing import CliRunner

    copy = tmp_path / "copy-of-answers"
    shutil.copytree(caches["answers"], copy)
    for parts in ([MixPart(caches["answers"]), MixPart(copy)], [MixPart(caches["answers"], 2), MixPart(copy, 4)]):
        with pytest.raises(CacheError, match=rf"cache-mix: {copy} and {caches['answers']} hold the same samples "
                                             r"\(shard shard-00000.safetensors of one is byte-identical"):
            mix_caches(tmp_path / "mix", parts)
    assert not (tmp_path / "mix" / "manifest.json").exists()
    result = CliRunner().invoke(app, ["cache-mix", "--out", str(tmp_path / "cli"), str(caches["answers"]), str(copy)])
    assert result.exit_code == 2 and result.stderr.startswith("error: cache-mix: ") and result.stderr.count("\n") == 1
    assert f"{copy} and {caches['answers']} hold the same samples" in result.stderr, result.stderr
