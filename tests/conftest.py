"""Shared fixtures: tiny random models built offline, the embedded target, deterministic torch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

# No hub access in tests: a hub id must fail fast instead of timing out.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Tiny models on a 2-core box run far faster single-threaded (no oversubscription).
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory):
    """Build (once per session) and return the directory of a tiny random model of ``family``."""
    from tests.tiny_models import build_tiny

    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            built[family] = build_tiny(family, tmp_path_factory.mktemp(family))
        return built[family]

    return get


@pytest.fixture(scope="session")
def test_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.tiny_models import make_test_image

    return make_test_image(tmp_path_factory.mktemp("images") / "cat.png")


@pytest.fixture(scope="session")
def embedded_target():
    """The embedded SmolLM2-135M-Instruct target (converted from its GGUF on first use)."""
    from minispark.target.loading import load_target

    return load_target()


@pytest.fixture(scope="session")
def tiny_trained_drafter(tiny_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(target dir, drafter dir): a DSpark drafter trained briefly on a tiny Llama's cache."""
    import json

    from minispark.data.cache import CacheConfig, build_cache
    from minispark.training.recipes import load_recipe
    from minispark.target.loading import load_target
    from minispark.training.train import train

    target_dir = tiny_dir("llama")
    target = load_target(str(target_dir))
    root = tmp_path_factory.mktemp("dspark")
    prompts = root / "prompts.jsonl"
    lines = ["Tell me a story.", "What is 2 + 2?", "List three fruits.", "Explain gravity briefly."]
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in lines))
    config = CacheConfig(prompts=prompts, out=root / "cache", num_samples=8, max_new_tokens=32, layers="1,2",
                         anchors_per_sample=8, window=16, block=4, dtype="fp32", batch_size=8)
    build_cache(config, target=target, log=lambda _: None)
    report = train(load_recipe("tiny", ["steps=30"]), config.out, root / "train", target=target, log=None)
    return target_dir, Path(report.drafter)


@pytest.fixture(scope="module")
def target(tiny_dir):
    """The tiny Llama target of the training tests (a module may define its own ``target``)."""
    from minispark.target.loading import load_target  # after HF_HUB_OFFLINE is set

    return load_target(str(tiny_dir("llama")))


@pytest.fixture(scope="module")
def cache(target, tmp_path_factory) -> Path:
    """A small fp32 feature cache of ``target`` (16 samples, 8 anchors each)."""
    from minispark.data.cache import CacheConfig, build_cache

    root = tmp_path_factory.mktemp("train-cache")
    prompts = root / "prompts.jsonl"
    lines = ["Tell me a story.", "What is 2 + 2?", "List three fruits.", "Explain gravity briefly.", "Write a haiku.",
             "Name four colours."]
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in lines))
    config = CacheConfig(prompts=prompts, out=root / "cache", num_samples=16, max_new_tokens=32, layers="1,2",
                         anchors_per_sample=8, window=16, block=4, dtype="fp32", batch_size=8)
    build_cache(config, target=target, log=lambda _: None)
    return config.out
