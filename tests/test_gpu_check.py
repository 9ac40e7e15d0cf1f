"""The prepared GPU check runs end to end on a CPU at tiny scale (so it cannot rot before a GPU is at hand),
and fails loudly on a CUDA peak above 5.5 GB.

    .venv/bin/python -m pytest -q tests/test_gpu_check.py
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # an end-to-end run of the GPU script (on a lent GPU it runs for real)
def test_runs_at_tiny_scale_on_a_cpu(gpu_check, tmp_path, monkeypatch):
    monkeypatch.setenv("MINISPARK_SPS_TABLES", str(tmp_path / "tables"))
    assert gpu_check.main(["--scale", "tiny", "--device", "cpu", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["serving"]["drafter_shares_embedding_and_lm_head"] is True
    assert report["serving"]["new_tokens"] > 0 and report["training"]["predicted_gb"] > 0
    assert 0 < report["training"]["heldout_predicted_gb"] and report["training_host"]["rss_peak_gb"] > 0
    assert Path(report["serving"]["sps_table"]).is_file()
    assert "serving peak" in (tmp_path / "gpu_check.txt").read_text()
    runtimes = report["runtimes"]  # on a CPU: eager vs packed (same numbers: same greedy tokens)
    assert set(runtimes) == {"eager", "packed", "identical_greedy"} and runtimes["identical_greedy"] is True
    assert all(ms > 0 for ms in runtimes["packed"]["step_ms"].values())
    assert "runtime packed: step ms" in (tmp_path / "gpu_check.txt").read_text()
    tree = report["tree"]  # fp32 on a CPU: the tree mask's logits are the per-path forwards'
    assert tree["argmax_agree"] == tree["nodes"] and tree["max_abs_logit_diff"] < 1e-3


def test_a_cuda_peak_over_the_limit_fails(gpu_check):
    report = {"device": "cuda", "training": {"measured_gb": 4.0}, "serving": {"serving_gb": 5.9}}
    assert gpu_check.over_limit(report) == ["serving peak 5.90 GB > 5.5 GB"]
    assert gpu_check.over_limit({**report, "device": "cpu"}) == []
