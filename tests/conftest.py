"""Shared fixtures: tiny random models built offline, the embedded target, deterministic torch."""

from __future__ import annotations

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
    from minispark.tiny_models import build_tiny

    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            built[family] = build_tiny(family, tmp_path_factory.mktemp(family))
        return built[family]

    return get


@pytest.fixture(scope="session")
def test_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from minispark.tiny_models import make_test_image

    return make_test_image(tmp_path_factory.mktemp("images") / "cat.png")


@pytest.fixture(scope="session")
def embedded_target():
    """The embedded SmolLM2-135M-Instruct target (converted from its GGUF on first use)."""
    from minispark.target import load_target

    return load_target()
