"""The mission's four commands as a vision-language user types them, end to end on a tiny Qwen2.5-VL:
``cache --target DIR`` → ``train --recipe`` → ``profile --drafter`` → ``chat --drafter --image``, the
last two with no ``--target`` (the drafter remembers the target and how it was loaded).

    .venv/bin/python -m pytest -q tests/cli/test_vl_walkthrough.py
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from minispark.cli import app


def test_four_commands_on_a_tiny_vl_target(tiny_dir, test_image: Path, tmp_path: Path) -> None:
    target_dir = str(tiny_dir("qwen2_5_vl"))
    prompts = tmp_path / "prompts.jsonl"
    rows = [{"prompt": "Describe the picture.", "images": [str(test_image)]},
            {"prompt": "What colours do you see?", "images": [str(test_image)]},
            {"prompt": "Count to five."}]
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    runner = CliRunner()

    def run(*argv: str, **kwargs) -> str:
        result = runner.invoke(app, list(argv), **kwargs)
        assert result.exit_code == 0, f"{argv[0]}: {result.output}"
        return result.output

    run("cache", "--target", target_dir, "--prompts", str(prompts), "--out", str(tmp_path / "cache"),
        "--num-samples", "3", "--max-new-tokens", "12", "--layers", "1,2", "--anchors-per-sample", "4",
        "--window", "16", "--block", "4", "--feature-dtype", "fp32")
    run("train", "--recipe", "tiny", "--cache", str(tmp_path / "cache"), "--out", str(tmp_path / "draft"),
        "steps=8", "vocab_size=49216")  # the tiny VL tokenizer adds the Qwen-VL special tokens
    drafter = tmp_path / "draft" / "drafter"
    run("profile", "--drafter", str(drafter), "--contexts", "32", "--max-tokens", "8", "--rounds", "1",
        "--warmup", "0", "--cooldown", "0", "--allow-busy", "--out", str(tmp_path / "sps"))
    table = next((tmp_path / "sps").glob("*.json"))
    assert json.loads(table.read_text())["target"] == str(Path(target_dir).resolve())  # the remembered target
    out = run("chat", "--drafter", str(drafter), "--image", str(test_image), "--sps", str(table), "--no-stats",
              "--max-new-tokens", "3", input="What is in the picture?\n/quit\n")
    assert "text-only target" not in out and "error" not in out.lower()
