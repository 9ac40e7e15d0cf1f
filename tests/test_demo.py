"""``minispark demo``: the side-by-side demo and the pipeline's stage reuse, on a tiny random Llama.

    .venv/bin/python -m pytest -q tests/test_demo.py
"""

from __future__ import annotations

import json

import pytest

from minispark.demo import STAGES, PipelineSizes, demo_samples, run_demo, run_pipeline
from minispark.core.errors import MinisparkError
from minispark.target.loading import load_target


def tiny_sizes(**changes) -> PipelineSizes:
    sizes = PipelineSizes(recipe="tiny", train_overrides=["steps=6", "checkpoint_every=3", "log_every=3"],
                          cache_samples=4, cache_tokens=12, cache_batch=4, calibrate_prompts=2, calibrate_tokens=12,
                          profile_contexts=[16], profile_rounds=1, bench_prompts=2, bench_tokens=8, chat_tokens=8)
    for key, value in changes.items():
        setattr(sizes, key, value)
    return sizes


def test_demo_samples_are_the_heldout_chat_and_code_tail():
    samples = demo_samples(3)
    assert [s.category for s in samples] in (["code", "chat", "code"], ["chat", "code", "chat"])
    assert all(s.id.startswith("heldout-") for s in samples)
    assert demo_samples(2, skip=1)[-1].id == samples[-2].id  # skip drops the tail, for disjoint stages
    with pytest.raises(MinisparkError, match="num_prompts"):
        demo_samples(0)


def test_demo_falls_back_to_lookup_and_shows_parity(tiny_dir):
    target = load_target(str(tiny_dir("llama")))
    result = run_demo(target, num_prompts=2, max_new_tokens=6)
    assert result.drafter == "lookup" and result.drafting_mode == "lookup"
    assert any("no shipped drafter" in n for n in result.notices)
    assert list(result.report["summary"]) == ["target", "lookup"]
    assert result.report["summary"]["lookup"]["parity"]  # greedy: lossless
    assert result.answers["target"] == result.answers["lookup"] and len(result.answers["target"]) == 2
    assert result.speedup > 0


def test_pipeline_reuses_finished_stages(tiny_dir, tmp_path, monkeypatch):
    target = str(tiny_dir("llama"))
    lines: list[str] = []
    first = run_pipeline(tmp_path / "demo", tiny_sizes(), target=target, progress=False, log=lines.append)
    assert first.ran == list(STAGES)
    assert (first.drafter / "config.json").is_file() and (first.drafter / "calibration.json").is_file()
    assert first.sps.is_file() and first.sps.parent == tmp_path / "demo" / "sps_tables"
    assert set(first.bench["summary"]) == {"target", "lookup", "fixed", "schedule"}
    assert all(row["parity"] for row in first.bench["summary"].values())
    assert first.chat_answer and f"--drafter {first.drafter}" in first.chat_command
    assert all(any(line.startswith(f"[{i + 1}/6] {stage}: done") for line in lines) for i, stage in enumerate(STAGES))

    # A rerun touches nothing: no target is even loaded.
    monkeypatch.setattr("minispark.demo.load_target", lambda *a, **k: pytest.fail("a reused stage loaded the target"))
    lines.clear()
    again = run_pipeline(tmp_path / "demo", tiny_sizes(), target=target, progress=False, log=lines.append)
    assert again.ran == [] and all("reused" in line for line in lines) and len(lines) == len(STAGES)
    assert again.bench == json.loads(json.dumps(first.bench, default=float))
    assert again.chat_answer == first.chat_answer
    monkeypatch.undo()

    # Changing a late stage reruns it and everything after it, and only that.
    third = run_pipeline(tmp_path / "demo", tiny_sizes(bench_tokens=6), target=target, progress=False,
                         log=lambda _: None)
    assert third.ran == ["bench", "chat"]
    # An interrupted stage (no marker) reruns; the training run resumes instead of starting over.
    (tmp_path / "demo" / "stages" / "train.json").unlink()
    fourth = run_pipeline(tmp_path / "demo", tiny_sizes(bench_tokens=6), target=target, progress=False,
                          log=lambda _: None)
    assert fourth.ran == ["train", "calibrate", "profile", "bench", "chat"]
    # The cache cannot be redone in place with other sizes.
    with pytest.raises(MinisparkError, match="cache stage was made with other settings"):
        run_pipeline(tmp_path / "demo", tiny_sizes(cache_samples=5), target=target, progress=False,
                     log=lambda _: None)


def test_cli_demo_prints_answers_and_speedup(tiny_dir):
    from typer.testing import CliRunner

    from minispark.cli import app

    result = CliRunner().invoke(app, ["demo", "--target", str(tiny_dir("llama")), "--num-prompts", "1",
                                      "--max-new-tokens", "4"])
    assert result.exit_code == 0, result.output
    assert "measured speedup of lookup over target-only" in result.output
    assert demo_samples(1)[0].prompt.split()[0] in result.output  # rich wraps the rest at the runner's width
    bad = CliRunner().invoke(app, ["demo", "--train", "--drafter", "lookup"])
    assert bad.exit_code == 2 and "--drafter: not with --train" in bad.output
