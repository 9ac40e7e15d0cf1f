"""One remembered target: a trained drafter records its target (``target.json``); ``generate``/``chat``
given ``--drafter DIR`` load it without ``--target``, a mismatching explicit ``--target`` is refused in one
line (exit 2), every command that loads a target takes every loading flag, and 4-bit is chosen on CUDA
when the bf16 weights would not fit (the decision tested on a CPU).

    .venv/bin/python -m pytest -q tests/target/test_remembered_target.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from minispark.cli import app
from minispark.core.errors import MinisparkError
from minispark.target.remembered import (TARGET_FILE, TargetRecord, auto_4bit, auto_4bit_notice, bf16_weight_bytes,
                                         read_record, resolve_loading, write_record)

LOADING_FLAGS = ("--dtype", "--device", "--load-in-4bit", "--load-in-8bit")
LOADING_COMMANDS = ("generate", "chat", "bench", "calibrate", "profile", "cache", "answers", "import", "export")


def test_every_loading_command_takes_every_loading_flag():
    group = typer.main.get_command(app)
    for name in LOADING_COMMANDS + tuple(n for n in ("serve",) if n in group.commands):
        opts = {o for p in group.commands[name].params for o in getattr(p, "opts", [])}
        assert set(LOADING_FLAGS) <= opts, f"{name} lacks {set(LOADING_FLAGS) - opts}"
    assert "--drafter" in {o for p in group.commands["profile"].params for o in p.opts}


def test_trained_drafter_records_its_target(tiny_trained_drafter):
    target_dir, drafter_dir = tiny_trained_drafter
    record = read_record(drafter_dir)
    assert (drafter_dir / TARGET_FILE).is_file()
    assert record.source == str(Path(target_dir).resolve()) and record.quantization is None
    assert record.identity == json.loads((drafter_dir / "config.json").read_text())["target"]


def test_resolution_rules(tmp_path):
    write_record(tmp_path, TargetRecord("org/model", "org/model@abc", "bf16", "4bit"))
    on_cpu = resolve_loading(tmp_path, None, None, "cpu")
    assert (on_cpu.target, on_cpu.dtype, on_cpu.load_in_4bit) == ("org/model", None, False)  # bnb is CUDA-only
    on_cuda = resolve_loading(tmp_path, None, None, "cuda")
    assert (on_cuda.target, on_cuda.dtype, on_cuda.load_in_4bit, on_cuda.load_in_8bit) == ("org/model", "bf16", True, False)
    assert "recorded in" in on_cuda.notice
    flags_win = resolve_loading(tmp_path, None, "fp16", "cuda", load_in_8bit=True)
    assert (flags_win.dtype, flags_win.load_in_4bit, flags_win.load_in_8bit) == ("fp16", False, True)
    assert resolve_loading(tmp_path / "missing", None, None, "cpu").target is None
    with pytest.raises(MinisparkError, match="trained for org/model"):
        resolve_loading(tmp_path, "org/other", None, "cpu")


def test_cache_manifest_is_a_record(tiny_trained_drafter):
    target_dir, drafter_dir = tiny_trained_drafter
    cache = Path(drafter_dir).parent.parent / "cache"
    record = read_record(cache)
    assert record.source == str(Path(target_dir).resolve()) and record.dtype == "fp32"


def test_round_trip_generate_and_chat(tiny_trained_drafter, tiny_dir):
    target_dir, drafter_dir = tiny_trained_drafter
    runner = CliRunner()
    out = runner.invoke(app, ["generate", "--drafter", str(drafter_dir), "--prompt", "Hi", "--max-new-tokens", "4",
                              "--json", "--device", "cpu"])
    assert out.exit_code == 0, out.output
    assert f"target: {Path(target_dir).resolve()}" in out.output
    chat = runner.invoke(app, ["chat", "--drafter", str(drafter_dir), "--no-stats", "--max-new-tokens", "3"],
                         input="Hello\n/quit\n")
    assert chat.exit_code == 0, chat.output
    other = str(tiny_dir("qwen2"))
    refused = runner.invoke(app, ["chat", "--drafter", str(drafter_dir), "--target", other])
    assert refused.exit_code == 2
    lines = [line for line in refused.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --target") and "omit --target" in lines[0]
    same = runner.invoke(app, ["generate", "--drafter", str(drafter_dir), "--target", str(target_dir), "--prompt",
                               "Hi", "--max-new-tokens", "2", "--json"])
    assert same.exit_code == 0, same.output


def test_serve_loads_the_drafters_target(tiny_trained_drafter, tiny_dir, monkeypatch):
    """``serve --drafter DIR`` serves the target the drafter records (no --target), refuses another one."""
    import minispark.server.app as serve_app

    target_dir, drafter_dir = tiny_trained_drafter
    served = {}
    monkeypatch.setattr(serve_app, "run_server", lambda target, setup, config, host, port: served.update(
        target=target, drafter=setup.drafter_spec))
    out = CliRunner().invoke(app, ["serve", "--drafter", str(drafter_dir), "--port", "0"])
    assert out.exit_code == 0, out.output
    assert served["target"].name == str(Path(target_dir).resolve()) and served["drafter"] == str(drafter_dir)
    refused = CliRunner().invoke(app, ["serve", "--drafter", str(drafter_dir), "--target", str(tiny_dir("qwen2"))])
    assert refused.exit_code == 2 and "error: --target" in refused.output


def test_auto_4bit_decision(tiny_dir):
    assert auto_4bit(7_500_000_000, 5_800_000_000)  # Qwen2.5-VL-3B bf16 on a 6 GB card
    assert not auto_4bit(7_500_000_000, 23_000_000_000)  # a 24 GB card
    assert auto_4bit(4_500_000_000, 5_800_000_000)  # fits alone, not with the headroom
    location = tiny_dir("llama")
    from safetensors import safe_open

    with safe_open(str(location / "model.safetensors"), framework="pt") as handle:
        numel = sum(handle.get_tensor(k).numel() for k in handle.keys())
    assert bf16_weight_bytes(location) == 2 * numel
    assert auto_4bit_notice(str(location), "cpu", None, False, False) is None  # CUDA only
    assert auto_4bit_notice(str(location), "cuda", "bf16", False, False) is None  # an explicit flag wins
