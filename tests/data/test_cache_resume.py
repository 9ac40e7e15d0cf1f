"""Durability of the target cache: kill/resume gives identical bytes; bad inputs fail in one line.

A clean build and an interrupted-then-resumed build (in-process interruption, a stale temp file,
a shard renamed but not yet listed, and a real SIGKILL of a child process) must leave
byte-identical shards and manifests. Corrupt or truncated shards, a mismatched manifest, a
malformed prompt line and a missing image each raise a one-line error naming the culprit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from minispark.data.cache import CacheConfig, build_cache
from minispark.data.cache_format import MANIFEST, CacheError, CacheMismatchError, CacheReader, ShardFile, shard_name
from minispark.core.errors import MinisparkError
from minispark.data.prompts import PromptFileError
from minispark.target.loading import load_target
from tests.tiny_models import build_tiny
from tests.helpers import REPO



@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny("llama", tmp_path_factory.mktemp("llama"), num_layers=4)


@pytest.fixture(scope="module")
def llama(model_dir):
    return load_target(str(model_dir))


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "p.jsonl"
    lines = ["Tell me a story.", "What is 2 + 2?", "List three fruits.", "Explain gravity briefly."]
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in lines))
    return path


def make_config(prompt_file: Path, out: Path, **overrides) -> CacheConfig:
    settings = dict(prompts=prompt_file, out=out, num_samples=7, max_new_tokens=12, layers="1,2",
                    anchors_per_sample=3, window=4, block=3, dtype="bf16", batch_size=2, samples_per_shard=2, seed=3)
    return CacheConfig(**(settings | overrides))


@pytest.fixture(scope="module")
def clean(llama, prompt_file, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clean") / "cache"
    report = build_cache(make_config(prompt_file, out), target=llama)
    assert report.shards == 4 and report.resumed_shards == 0
    return out


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


class Interrupted(Exception):
    pass


def interrupt_after(shard: int):
    def on_shard(k: int) -> None:
        if k == shard:
            raise Interrupted
    return on_shard


def test_interrupted_build_resumes_to_identical_bytes(llama, prompt_file, clean, tmp_path):
    out = tmp_path / "cache"
    with pytest.raises(Interrupted):
        build_cache(make_config(prompt_file, out), target=llama, on_shard=interrupt_after(1))
    assert not json.loads((out / MANIFEST).read_text())["complete"]
    with pytest.raises(CacheError, match="incomplete cache"):
        CacheReader(out)
    (out / f".{shard_name(2)}.k1ll3d.tmp").write_bytes(b"half a shard")  # the write a kill cut short (atomic.py names)
    report = build_cache(make_config(prompt_file, out), target=llama)
    assert report.resumed_shards == 2
    assert files(out) == files(clean)


def test_shard_renamed_but_not_listed_is_adopted(llama, prompt_file, clean, tmp_path):
    out = tmp_path / "cache"
    with pytest.raises(Interrupted):
        build_cache(make_config(prompt_file, out), target=llama, on_shard=interrupt_after(2))
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["shards"] = manifest["shards"][:2]  # killed between renaming shard 2 and listing it
    (out / MANIFEST).write_text(json.dumps(manifest))
    report = build_cache(make_config(prompt_file, out), target=llama)
    assert report.resumed_shards == 3
    assert files(out) == files(clean)


@pytest.mark.parametrize("listed", ["none", "all but the last"])
def test_the_last_shard_renamed_but_not_listed_is_adopted_and_listed(llama, prompt_file, clean, tmp_path,
                                                                     listed: str) -> None:
    """A kill (or Ctrl-C) after the last shard's rename, before the manifest listed it, left a
    rerun with nothing to build, which never wrote the manifest: it reported the whole cache and left no
    manifest (`demo --train` then failed in train: "manifest.json: missing"), or one short of its last shard."""
    out = tmp_path / "cache"
    build_cache(make_config(prompt_file, out), target=llama)
    if listed == "none":
        (out / MANIFEST).unlink()  # one shard: killed between renaming it and the first manifest
    else:
        manifest = json.loads((out / MANIFEST).read_text())
        manifest["shards"], manifest["complete"] = manifest["shards"][:-1], False
        (out / MANIFEST).write_text(json.dumps(manifest))
    report = build_cache(make_config(prompt_file, out), target=llama)
    assert report.resumed_shards == 4
    assert files(out) == files(clean)
    CacheReader(out)


def test_sigkill_at_any_moment_then_resume_is_identical(model_dir, llama, prompt_file, clean, tmp_path):
    out = tmp_path / "cache"
    script = (
        "import sys, torch; torch.set_num_threads(1)\n"
        "from pathlib import Path\n"
        "from minispark.target.loading import load_target\n"
        "from minispark.data.cache import CacheConfig, build_cache\n"
        f"settings = dict(prompts=Path({str(prompt_file)!r}), out=Path({str(out)!r}), num_samples=7,\n"
        "    max_new_tokens=12, layers='1,2', anchors_per_sample=3, window=4, block=3, dtype='bf16',\n"
        "    batch_size=2, samples_per_shard=2, seed=3)\n"
        f"build_cache(CacheConfig(**settings), target=load_target({str(model_dir)!r}))\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)})
    deadline = time.monotonic() + 600  # a loaded machine can take minutes to import torch and build
    while not (out / shard_name(1)).exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)  # mid-run: possibly inside a shard write or a manifest write
    assert child.wait() == -signal.SIGKILL, "the child finished before it could be killed"
    assert (out / shard_name(0)).exists()
    build_cache(make_config(prompt_file, out), target=llama)
    assert files(out) == files(clean)


def test_corrupt_shard_is_named_by_the_reader_and_regenerated_on_resume(llama, prompt_file, clean, tmp_path):
    out = tmp_path / "cache"
    out.mkdir()
    for name, data in files(clean).items():
        (out / name).write_bytes(data)
    shard = out / shard_name(1)
    data = bytearray(shard.read_bytes())
    data[-5] ^= 0xFF  # one flipped bit pattern inside the tensor data
    shard.write_bytes(bytes(data))
    with pytest.raises(CacheError) as info:
        CacheReader(out)
    assert str(shard) in str(info.value) and "corrupt" in str(info.value) and "\n" not in str(info.value)
    CacheReader(out, verify=False)  # size and header still look right: only the checksum can tell

    logged = []
    build_cache(make_config(prompt_file, out), target=llama, log=logged.append)
    assert len(logged) == 1 and str(shard) in logged[0]
    assert files(out) == files(clean)


def test_truncated_shard_is_named(clean, tmp_path):
    out = tmp_path / "cache"
    out.mkdir()
    for name, data in files(clean).items():
        (out / name).write_bytes(data)
    shard = out / shard_name(3)
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(CacheError, match=rf"{shard}: truncated or corrupt shard"):
        CacheReader(out, verify=False)
    with pytest.raises(CacheError, match=rf"{shard}: truncated shard"):
        ShardFile(shard)
    shard.write_bytes(b"\x00" * 4)
    with pytest.raises(CacheError, match=rf"{shard}: truncated shard"):
        ShardFile(shard)


def test_mismatched_manifest_is_refused(llama, prompt_file, clean, tmp_path):
    reader = CacheReader(clean)
    reader.require(target=llama.identity(), layers=[1, 2], block=3, window=4, dtype="bf16")
    with pytest.raises(CacheMismatchError) as info:
        reader.require(layers=[1, 2, 3])
    message = str(info.value)
    assert message.startswith(str(clean / MANIFEST)) and "layers mismatch" in message and "\n" not in message
    with pytest.raises(CacheMismatchError, match="target mismatch"):
        reader.require(target={"weights_hash": "0123456789abcdef"})
    with pytest.raises(CacheMismatchError, match=r"manifest.json: out holds a cache built with a different window"):
        build_cache(make_config(prompt_file, clean, window=8), target=llama)
    other = tmp_path / "other"
    other.mkdir()
    (other / MANIFEST).write_text("{not json")
    with pytest.raises(CacheError, match=rf"{other / MANIFEST}: unreadable manifest"):
        CacheReader(other)


def test_foreign_shard_is_refused(llama, prompt_file, clean, tmp_path):
    other = tmp_path / "other"
    build_cache(make_config(prompt_file, other, seed=4), target=llama)
    out = tmp_path / "mixed"
    out.mkdir()
    for name, data in files(clean).items():
        (out / name).write_bytes(data)
    (out / shard_name(0)).write_bytes((other / shard_name(0)).read_bytes())
    manifest = json.loads((out / MANIFEST).read_text())
    entry = json.loads((other / MANIFEST).read_text())["shards"][0]
    manifest["shards"][0] = entry  # even with a matching checksum entry, the config stamp differs
    (out / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CacheError, match=rf"{out / shard_name(0)}: shard belongs to a different cache"):
        CacheReader(out)


@pytest.mark.parametrize("line, reason", [
    ('{"prompt": "ok"}\n{"prompt": "unterminated\n', ":2: malformed JSON"),
    ('{"prompt": "ok"}\n{"prompt": "look", "images": ["nowhere.png"]}\n', ":2: image 'nowhere.png' is "),
])
def test_prompt_errors_come_before_any_expensive_work(tmp_path, line, reason):
    path = tmp_path / "bad.jsonl"
    path.write_text(line)
    config = make_config(path, tmp_path / "cache", target=str(tmp_path / "no-such-model"))
    with pytest.raises(PromptFileError) as info:
        build_cache(config)  # the prompt file is validated before the (missing) target is loaded
    assert str(info.value).startswith(str(path)) and reason in str(info.value) and "\n" not in str(info.value)
    assert isinstance(info.value, MinisparkError) and not (tmp_path / "cache").exists()


def test_cache_grows_to_the_bytes_of_a_larger_build_and_never_shrinks(llama, prompt_file, clean, tmp_path):
    out = tmp_path / "cache"
    build_cache(make_config(prompt_file, out, num_samples=3), target=llama)  # shards [0, 1], [2]
    small = files(out)
    with pytest.raises(Interrupted):  # growth killed after the first new shard: resumes like any build
        build_cache(make_config(prompt_file, out), target=llama, on_shard=interrupt_after(1))
    assert files(out)[shard_name(0)] == small[shard_name(0)]  # earlier full shards are kept, not redone
    assert not json.loads((out / MANIFEST).read_text())["complete"]
    logged = []
    report = build_cache(make_config(prompt_file, out), target=llama, log=logged.append)
    assert report.resumed_shards == 2 and report.samples == 7
    assert files(out) == files(clean)
    with pytest.raises(CacheMismatchError, match=r"already holds 7 samples; num_samples 5 would shrink it"):
        build_cache(make_config(prompt_file, out, num_samples=5), target=llama)
    assert files(out) == files(clean)


def test_an_interrupted_build_can_finish_smaller_than_planned(llama, prompt_file, clean, tmp_path):
    """Stopped after its first shard (2 samples of 7 planned), a build asked for 3 was refused as "already holds
    7 samples": the plan, not what the cache holds. It grows from the 2 it holds."""
    out = tmp_path / "cache"
    with pytest.raises(Interrupted):
        build_cache(make_config(prompt_file, out), target=llama, on_shard=interrupt_after(0))
    with pytest.raises(CacheMismatchError, match=r"already holds 2 samples; num_samples 1 would shrink it"):
        build_cache(make_config(prompt_file, out, num_samples=1), target=llama)
    report = build_cache(make_config(prompt_file, out, num_samples=3), target=llama)
    assert report.samples == 3 and report.resumed_shards == 1
    assert files(out)[shard_name(0)] == files(clean)[shard_name(0)]


def test_files_the_cache_did_not_write_are_never_deleted(llama, prompt_file, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "t.tmp").write_text("x")
    (out / shard_name(0)).write_text("not a shard")
    before = files(out)
    with pytest.raises(MinisparkError, match=rf"out {out}: holds t.tmp, which minispark did not write"):
        build_cache(make_config(prompt_file, out, num_samples=2), target=llama)
    assert files(out) == before
    (out / "t.tmp").unlink()  # left: a file named like a shard, which is not one
    before = files(out)
    with pytest.raises(CacheMismatchError, match=rf"{out / shard_name(0)}: exists but is not a shard of this cache"):
        build_cache(make_config(prompt_file, out, num_samples=2), target=llama)
    assert files(out) == before
