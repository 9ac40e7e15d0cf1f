"""A trained DSpark drafter in the real loop: greedy parity in every length mode, the CLI, and
calibration (rollouts → STS stored beside the checkpoint)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from minispark.model.calibration import Calibration
from minispark.model.drafter_dir import calibration_name
from minispark.cli import app
from minispark.serving.generate import generate, make_drafter
from minispark.measuring.rollouts import calibrate_drafter
from minispark.target.sampling import SamplingConfig
from minispark.serving.schedule import FixedLength, ScheduledLength, ThresholdLength
from minispark.serving.builder import build_serving
from minispark.serving.sps import SPSTable
from minispark.target.loading import load_target
from tests.helpers import assert_parity, hf_greedy

PROMPTS = ["Tell me a story.", "List three fruits and a vegetable.", "Why is the sky blue?"]


@pytest.fixture(scope="module")
def setup(tiny_trained_drafter):
    target_dir, drafter_dir = tiny_trained_drafter
    return load_target(str(target_dir)), drafter_dir


def policies(max_tokens: int):
    # A flat SPS curve makes the scheduler verify long prefixes; a steep one makes it stop early.
    flat = SPSTable.from_inline([1.0] * (max_tokens + 1))
    steep = SPSTable.from_inline([1.0 / (1 + 0.5 * n) for n in range(max_tokens + 1)])
    return {"fixed": FixedLength(max_tokens), "threshold": ThresholdLength(0.3, max_tokens),
            "schedule-flat": ScheduledLength(flat, max_tokens), "schedule-steep": ScheduledLength(steep, max_tokens)}


@pytest.mark.parametrize("mode", ["fixed", "threshold", "schedule-flat", "schedule-steep"])
def test_greedy_parity_with_trained_drafter(setup, mode: str) -> None:
    target, drafter_dir = setup
    drafter = make_drafter(str(drafter_dir), target)
    gamma = drafter.config.block_size
    for prompt in PROMPTS:
        inputs = target.encode(prompt=prompt)
        want = hf_greedy(target, inputs, 40)
        out = generate(target, prompt, drafter=drafter, policy=policies(gamma)[mode], max_new_tokens=40)
        assert_parity(target, inputs, out.result.token_ids, want)


def test_cli_generate_with_drafter_checkpoint(setup, tiny_trained_drafter) -> None:
    target_dir, drafter_dir = tiny_trained_drafter
    result = CliRunner().invoke(app, ["generate", "--target", str(target_dir), "--drafter", str(drafter_dir),
                                      "--prompt", "Tell me a story.", "--max-new-tokens", "16", "--json",
                                      "--mode", "threshold", "--threshold", "0.2"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["drafter"] == "dspark" and len(data["token_ids"]) == 16


def test_calibrate_stores_sts_and_reduces_ece(setup) -> None:
    target, drafter_dir = setup
    inputs = [target.encode(prompt=p) for p in PROMPTS * 3]
    drafter = build_serving(target, str(drafter_dir), "fixed").drafter
    report = calibrate_drafter(target, drafter, drafter_dir, inputs, gamma=4, sampling=SamplingConfig(1.0),
                               max_new_tokens=48, seed=0)
    assert report["rounds"] > 30
    stored = Calibration.load(drafter_dir / calibration_name(1.0))  # beside the T 0 one: a fit per temperature
    assert stored.temperatures == report["temperatures"] and len(stored.temperatures) == 4
    before, after = report["before"][0], report["after"][0]
    assert after.ece <= before.ece + 1e-12  # STS minimizes ECE; T=1 is in the grid
    assert after.auc == pytest.approx(before.auc, abs=1e-9) or before.auc != before.auc  # order-preserving at k=1
