"""Every bad input gets exit status 2 and one ``error:`` line naming the flag or file, no traceback.

Most cases fail before any model loads (the CLI validates flags first), so the suite runs in
seconds; the few that need a model use a tiny random one.

    .venv/bin/python -m pytest -q tests/test_bad_input.py
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import zlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minispark.cli import app
from minispark.tiny_models import make_test_image

LONG_PROMPT = "word " * 5000  # more tokens than the tiny models' 4096 positions


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def bomb_png(path: Path, side: int = 100_000) -> Path:
    """A valid ~100-byte PNG whose header claims side × side pixels (10 gigapixels)."""
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header)
                     + _png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + _png_chunk(b"IEND", b""))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_dir) -> dict[str, str]:
    """Bad and odd inputs, by name, as strings for the command lines."""
    d = tmp_path_factory.mktemp("bad")
    (d / "afile").write_text("x\n")
    for name in ("empty.json", "empty.jsonl", "empty.png"):
        (d / name).write_bytes(b"")
    (d / "emptydir").mkdir()
    (d / "noweights").mkdir()
    (d / "noweights" / "config.json").write_text('{"block_size": 4}')
    (d / "badconfig").mkdir()
    (d / "badconfig" / "config.json").write_text("{not json")
    (d / "badconfig" / "model.safetensors").write_bytes(b"x")
    (d / "fakedrafter").mkdir()
    (d / "fakedrafter" / "config.json").write_text("{}")
    (d / "fakedrafter" / "model.safetensors").write_bytes(b"x")
    (d / "userdir").mkdir()
    (d / "userdir" / "notes.txt").write_text("my notes\n")
    (d / "corrupt.png").write_bytes(b"this is not an image")
    full = make_test_image(d / "full.png").read_bytes()
    (d / "truncated.png").write_bytes(full[: len(full) // 2])
    bomb_png(d / "bomb.png")
    (d / "corrupt.json").write_text("{")
    (d / "ok.jsonl").write_text(json.dumps({"prompt": "Hi there"}) + "\n")
    (d / "corrupt.jsonl").write_text("{bad json\n")
    (d / "binonly").mkdir()
    shutil.copy(tiny_dir("llama") / "config.json", d / "binonly" / "config.json")
    (d / "binonly" / "pytorch_model.bin").write_bytes(b"pickle")
    names = {p.name: str(p) for p in d.iterdir()}
    from minispark.data.prompts import HELDOUT_FILE

    names |= {"dir": str(d), "missing": str(d / "missing"), "tiny": str(tiny_dir("llama")), "heldout": str(HELDOUT_FILE),
              "out": str(d / "new-out")}
    return names


# (id, argv with {placeholders} from ``files``, what the error line must name)
CASES = [
    # generate: text, numbers, choices, files
    ("gen-empty-prompt", ["generate", "--prompt", ""], "--prompt"),
    ("gen-blank-prompt", ["generate", "--prompt", "   "], "--prompt"),
    ("gen-negative-max-new", ["generate", "--max-new-tokens", "-1"], "--max-new-tokens"),
    ("gen-zero-max-new", ["generate", "--max-new-tokens", "0"], "--max-new-tokens"),
    ("gen-temperature-nan", ["generate", "--temperature", "nan"], "--temperature"),
    ("gen-temperature-inf", ["generate", "--temperature", "inf"], "--temperature"),
    ("gen-temperature-negative", ["generate", "--temperature", "-1"], "--temperature"),
    ("gen-top-p-zero", ["generate", "--top-p", "0"], "--top-p"),
    ("gen-top-p-big", ["generate", "--top-p", "1.5"], "--top-p"),
    ("gen-top-p-nan", ["generate", "--top-p", "nan"], "--top-p"),
    ("gen-top-k-negative", ["generate", "--top-k", "-1"], "--top-k"),
    ("gen-threshold-2", ["generate", "--threshold", "2"], "--threshold"),
    ("gen-threshold-nan", ["generate", "--threshold", "nan"], "--threshold"),
    ("gen-gamma-zero", ["generate", "--gamma", "0"], "--gamma"),
    ("gen-unknown-mode", ["generate", "--mode", "turbo"], "--mode"),
    ("gen-negative-seed", ["generate", "--seed", "-1"], "--seed"),
    ("gen-unknown-dtype", ["generate", "--dtype", "fp8"], "--dtype"),
    ("gen-unknown-device", ["generate", "--device", "tpu"], "--device"),
    ("gen-4bit-and-8bit", ["generate", "--load-in-4bit", "--load-in-8bit"], "--load-in-4bit"),
    ("gen-sps-missing", ["generate", "--sps", "{missing}"], "--sps"),
    ("gen-sps-empty", ["generate", "--sps", "{empty.json}"], "--sps"),
    ("gen-sps-dir", ["generate", "--sps", "{dir}"], "--sps"),
    ("gen-drafter-empty-dir", ["generate", "--drafter", "{emptydir}"], "--drafter"),
    ("gen-drafter-no-weights", ["generate", "--drafter", "{noweights}"], "no weights"),
    ("gen-drafter-missing", ["generate", "--drafter", "{missing}"], "--drafter"),
    ("gen-drafter-bad-config", ["generate", "--drafter", "{badconfig}"], "config.json"),
    ("gen-drafter-file", ["generate", "--drafter", "{afile}"], "--drafter"),
    ("gen-image-missing", ["generate", "--image", "{missing}"], "--image"),
    ("gen-image-corrupt", ["generate", "--image", "{corrupt.png}"], "--image"),
    ("gen-image-truncated", ["generate", "--image", "{truncated.png}"], "truncated.png"),
    ("gen-image-bomb", ["generate", "--image", "{bomb.png}"], "bomb.png"),
    ("gen-image-empty", ["generate", "--image", "{empty.png}"], "--image"),
    ("gen-image-dir", ["generate", "--image", "{dir}"], "--image"),
    ("gen-target-missing-abs", ["generate", "--target", "{missing}"], "no such directory"),
    ("gen-target-missing-rel", ["generate", "--target", "./no-such-model"], "no such directory"),
    ("gen-target-hub-offline", ["generate", "--target", "nobody-here/no-model"], "--target"),
    ("gen-target-file", ["generate", "--target", "{afile}"], "--target"),
    ("gen-target-pickle", ["generate", "--target", "{binonly}"], "pickle"),
    ("gen-target-empty-dir", ["generate", "--target", "{emptydir}"], "--target"),
    ("gen-prompt-too-long", ["generate", "--target", "{tiny}", "--drafter", "none", "--prompt", LONG_PROMPT],
     "--prompt"),
    # chat
    ("chat-threshold-2", ["chat", "--threshold", "2"], "--threshold"),
    ("chat-unknown-mode", ["chat", "--mode", "turbo"], "--mode"),
    ("chat-image-corrupt", ["chat", "--image", "{corrupt.png}"], "--image"),
    ("chat-negative-max-new", ["chat", "--max-new-tokens", "-5"], "--max-new-tokens"),
    ("chat-temperature-nan", ["chat", "--temperature", "nan"], "--temperature"),
    ("chat-drafter-empty-dir", ["chat", "--drafter", "{emptydir}"], "--drafter"),
    # bench
    ("bench-num-prompts-zero", ["bench", "--num-prompts", "0"], "--num-prompts"),
    ("bench-num-prompts-negative", ["bench", "--num-prompts", "-1"], "--num-prompts"),
    ("bench-unknown-mode", ["bench", "--modes", "target,turbo"], "--modes"),
    ("bench-no-modes", ["bench", "--modes", ","], "--modes"),
    ("bench-repeats-zero", ["bench", "--repeats", "0"], "--repeats"),
    ("bench-gamma-zero", ["bench", "--gamma", "0"], "--gamma"),
    ("bench-category-without-prompts", ["bench", "--category", "chat"], "--category"),
    ("bench-prompts-missing", ["bench", "--prompts", "{missing}"], "--prompts"),
    ("bench-prompts-empty", ["bench", "--prompts", "{empty.jsonl}"], "--prompts"),
    ("bench-threshold-2", ["bench", "--threshold", "2"], "--threshold"),
    ("bench-plot-dir", ["bench", "--plot", "{dir}"], "--plot"),
    ("bench-drafter-no-weights", ["bench", "--drafter", "{noweights}"], "--drafter"),
    # demo
    ("demo-num-prompts-zero", ["demo", "--num-prompts", "0"], "--num-prompts"),
    ("demo-negative-max-new", ["demo", "--max-new-tokens", "-1"], "--max-new-tokens"),
    ("demo-out-file", ["demo", "--train", "--out", "{afile}"], "--out"),
    ("demo-train-with-drafter", ["demo", "--train", "--drafter", "lookup"], "--drafter"),
    ("demo-drafter-empty-dir", ["demo", "--drafter", "{emptydir}"], "--drafter"),
    # cache
    ("cache-out-file", ["cache", "--out", "{afile}"], "--out"),
    ("cache-num-samples-zero", ["cache", "--num-samples", "0"], "--num-samples"),
    ("cache-negative-max-new", ["cache", "--max-new-tokens", "-1"], "--max-new-tokens"),
    ("cache-temperature-nan", ["cache", "--temperature", "nan"], "--temperature"),
    ("cache-top-p-zero", ["cache", "--top-p", "0"], "--top-p"),
    ("cache-feature-dtype", ["cache", "--feature-dtype", "int8"], "--feature-dtype"),
    ("cache-dtype", ["cache", "--dtype", "fp8"], "--dtype"),
    ("cache-window-negative", ["cache", "--window", "-1"], "--window"),
    ("cache-block-zero", ["cache", "--block", "0"], "--block"),
    ("cache-layers-text", ["cache", "--layers", "a,b"], "--layers"),
    ("cache-unknown-split", ["cache", "--split", "test"], "--split"),
    ("cache-unknown-source", ["cache", "--source", "web"], "--source"),
    ("cache-prompts-missing", ["cache", "--prompts", "{missing}"], "--prompts"),
    ("cache-prompts-empty", ["cache", "--prompts", "{empty.jsonl}"], "--prompts"),
    ("cache-prompts-corrupt", ["cache", "--prompts", "{corrupt.jsonl}"], "corrupt.jsonl"),
    ("cache-batch-size-negative", ["cache", "--batch-size", "-1"], "--batch-size"),
    # train
    ("train-unknown-recipe", ["train", "--recipe", "no-such-recipe"], "--recipe"),
    ("train-lr-nan", ["train", "--recipe", "tiny", "lr=nan"], "lr"),
    ("train-lr-inf", ["train", "--recipe", "tiny", "lr=inf"], "lr"),
    ("train-steps-zero", ["train", "--recipe", "tiny", "steps=0"], "steps"),
    ("train-steps-negative", ["train", "--recipe", "tiny", "steps=-1"], "steps"),
    ("train-unknown-key", ["train", "--recipe", "tiny", "bogus=1"], "bogus"),
    ("train-steps-text", ["train", "--recipe", "tiny", "steps=abc"], "steps"),
    ("train-cache-missing", ["train", "--recipe", "tiny", "--cache", "{missing}"], "--cache"),
    ("train-cache-file", ["train", "--recipe", "tiny", "--cache", "{afile}"], "--cache"),
    ("train-cache-empty-dir", ["train", "--recipe", "tiny", "--cache", "{emptydir}"], "emptydir"),
    ("train-out-file", ["train", "--recipe", "tiny", "--cache", "{emptydir}", "--out", "{afile}"], "--out"),
    ("train-heldout-missing", ["train", "--recipe", "tiny", "--heldout-cache", "{missing}"], "--heldout-cache"),
    ("train-resume-missing-out", ["train", "--recipe", "tiny", "--cache", "{emptydir}", "--out", "{missing}",
                                  "--resume"], "--out"),
    # profile
    ("profile-contexts-text", ["profile", "--contexts", "abc"], "--contexts"),
    ("profile-contexts-nan", ["profile", "--contexts", "nan"], "--contexts"),
    ("profile-contexts-negative", ["profile", "--contexts", "-5"], "--contexts"),
    ("profile-contexts-fraction", ["profile", "--contexts", "1.5"], "--contexts"),
    ("profile-contexts-empty", ["profile", "--contexts", ""], "--contexts"),
    ("profile-max-tokens-zero", ["profile", "--max-tokens", "0"], "--max-tokens"),
    ("profile-max-tokens-below-gamma", ["profile", "--max-tokens", "1"], "--max-tokens"),
    ("profile-threads-above-cpus", ["profile", "--threads", "999"], "--threads"),
    ("profile-rounds-zero", ["profile", "--rounds", "0"], "--rounds"),
    ("profile-drift-nan", ["profile", "--drift-bound", "nan"], "--drift-bound"),
    ("profile-cooldown-inf", ["profile", "--cooldown", "inf"], "--cooldown"),
    ("profile-threads-zero", ["profile", "--threads", "0"], "--threads"),
    ("profile-out-file", ["profile", "--out", "{afile}"], "--out"),
    ("profile-plot-dir", ["profile", "--plot", "{dir}"], "--plot"),
    # calibrate
    ("cal-drafter-empty-dir", ["calibrate", "--drafter", "{emptydir}", "--prompts", "{ok.jsonl}"], "--drafter"),
    ("cal-drafter-no-weights", ["calibrate", "--drafter", "{noweights}", "--prompts", "{ok.jsonl}"], "no weights"),
    ("cal-drafter-missing", ["calibrate", "--drafter", "{missing}", "--prompts", "{ok.jsonl}"], "--drafter"),
    ("cal-prompts-missing", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{missing}"], "--prompts"),
    ("cal-num-prompts-zero", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                              "--num-prompts", "0"], "--num-prompts"),
    ("cal-gamma-zero", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}", "--gamma", "0"],
     "--gamma"),
    ("cal-temperature-nan", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                             "--temperature", "nan"], "--temperature"),
    ("cal-max-new-zero", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                          "--max-new-tokens", "0"], "--max-new-tokens"),
    # simulate
    ("sim-conf-above-one", ["simulate", "--conf", "1.5", "--sps-inline", "1,0.5"], "--conf"),
    ("sim-conf-negative", ["simulate", "--conf", "-0.1", "--sps-inline", "1,0.5"], "--conf"),
    ("sim-conf-nan", ["simulate", "--conf", "nan", "--sps-inline", "1,0.5"], "--conf"),
    ("sim-conf-empty", ["simulate", "--conf", "", "--sps-inline", "1,0.5"], "--conf"),
    ("sim-conf-missing", ["simulate", "--sps-inline", "1,0.5"], "--conf"),
    ("sim-sps-inline-empty", ["simulate", "--conf", "0.9", "--sps-inline", ""], "--sps-inline"),
    ("sim-sps-inline-negative", ["simulate", "--conf", "0.9", "--sps-inline", "-1,0.5"], "--sps-inline"),
    ("sim-sps-inline-rising", ["simulate", "--conf", "0.9", "--sps-inline", "1,0.5,0.6"], "--sps-inline"),
    ("sim-sps-inline-zero", ["simulate", "--conf", "0.9", "--sps-inline", "0,0"], "--sps-inline"),
    ("sim-sps-inline-text", ["simulate", "--conf", "0.9", "--sps-inline", "fast"], "--sps-inline"),
    ("sim-sps-missing", ["simulate", "--conf", "0.9", "--sps", "{missing}"], "--sps"),
    ("sim-sps-corrupt", ["simulate", "--conf", "0.9", "--sps", "{corrupt.json}"], "corrupt.json"),
    ("sim-no-sps", ["simulate", "--conf", "0.9"], "--sps"),
    ("sim-draws-zero", ["simulate", "--appendix-a", "--draws", "0"], "--draws"),
    ("gen-empty-stop", ["generate", "--stop", ""], "--stop"),
    ("chat-empty-stop", ["chat", "--stop", "x", "--stop", ""], "--stop"),
    # answers / train --answers
    ("answers-zero-samples", ["answers", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out", "{out}",
                              "--num-samples", "0"], "--num-samples"),
    ("answers-corrupt-prompts", ["answers", "--prompts", "{corrupt.jsonl}", "--out", "{out}"], "corrupt.jsonl"),
    ("answers-bad-top-p", ["answers", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out", "{out}",
                           "--top-p", "0"], "--top-p"),
    ("answers-heldout-as-train", ["answers", "--target", "{tiny}", "--prompts", "{heldout}", "--out", "{out}"],
     "held-out split"),
    ("train-answers-missing", ["train", "--recipe", "tiny", "--answers", "{missing}"], "--answers"),
    ("train-answers-and-cache", ["train", "--recipe", "tiny", "--answers", "{dir}", "--cache", "{dir}"], "--cache"),
    ("train-answers-not-a-set", ["train", "--recipe", "tiny", "--answers", "{dir}", "--out", "{out}"],
     "answers.json"),
    # import / export
    ("import-empty-dir", ["import", "{emptydir}", "--out", "{out}"], "SOURCE"),
    ("import-missing", ["import", "{missing}", "--out", "{out}"], "SOURCE"),
    ("import-window-negative", ["import", "{fakedrafter}", "--out", "{out}", "--window", "-1"], "--window"),
    ("import-out-user-dir", ["import", "{fakedrafter}", "--out", "{userdir}"], "--out"),
    ("export-empty-dir", ["export", "{emptydir}", "--out", "{out}"], "DRAFTER_DIR"),
    ("export-out-user-dir", ["export", "{fakedrafter}", "--out", "{userdir}"], "--out"),
    ("export-out-file", ["export", "{fakedrafter}", "--out", "{afile}"], "--out"),
    ("export-unknown-format", ["export", "{fakedrafter}", "--out", "{out}", "--format", "onnx"], "--format"),
]


def test_enough_cases() -> None:
    assert len(CASES) >= 60
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("argv, needle", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line(files: dict[str, str], argv: list[str], needle: str) -> None:
    args = [re.sub(r"\{([\w.-]+)\}", lambda m: files[m.group(1)], arg) for arg in argv]
    result = CliRunner().invoke(app, args)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    # One error line, last; anything before it is a one-line notice of what was loaded.
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    assert needle in errors[0], errors[0]
    assert "Traceback" not in result.output and "§" not in result.output and not result.stdout.strip()


def test_every_option_has_help() -> None:
    import typer.main

    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, f"minispark {name} {param.opts[0]}: no help text"


def test_no_design_note_sections_in_help() -> None:
    for name in ("generate", "chat", "bench", "cache", "train", "profile", "calibrate", "simulate"):
        result = CliRunner().invoke(app, [name, "--help"])
        assert result.exit_code == 0 and "§" not in result.output, name


@pytest.mark.parametrize("argv, names", [
    (["generate", "--gamma", "abc"], "--gamma"),
    (["generate", "--bogus"], "--bogus"),
    (["frobnicate"], "frobnicate"),
    (["bench", "--modes"], "--modes"),
])
def test_console_entry_point_turns_usage_errors_into_one_line(argv, names, capsys) -> None:
    """What the installed `minispark` script runs: click's usage errors become one line, exit 2."""
    from minispark.cli import run

    with pytest.raises(SystemExit) as exit_info:
        run(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert exit_info.value.code == 2 and captured.out == ""
    assert len(lines) == 1 and lines[0].startswith("error:") and names in lines[0]


def test_a_prompt_that_fills_the_context_is_refused_everywhere(tiny_dir, tmp_path) -> None:
    """bench and calibrate name the prompt file's line; chat refuses the turn and keeps the session."""
    from minispark.data.prompts import PromptFileError, load_prompt_inputs
    from minispark.errors import MinisparkError
    from minispark.measuring.bench import file_prompts
    from minispark.serving.conversation import Conversation
    from minispark.serving.drafters.base import NoDrafter
    from minispark.serving.target import load_target

    target = load_target(str(tiny_dir("llama")))
    long = " ".join(["word"] * (target.text_config.max_position_embeddings + 10))
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "Hi there."}) + "\n" + json.dumps({"prompt": long}) + "\n")
    with pytest.raises(PromptFileError, match=r"prompts.jsonl:2: \d+ tokens fill .* context of 4096"):
        file_prompts(target, path)
    with pytest.raises(PromptFileError, match=r"prompts.jsonl:2:"):
        load_prompt_inputs(target, path, 2)
    conversation = Conversation(target, NoDrafter(), max_new_tokens=4)
    with pytest.raises(MinisparkError, match="the conversation: .* /reset"):
        conversation.say(long)
    assert conversation.messages == [] or len(conversation.messages) <= 1  # nothing was added
    assert len(conversation.say("Hi there.").token_ids) > 0


def test_calibrate_never_rewrites_a_shipped_drafter() -> None:
    from minispark.data.prompts import HELDOUT_FILE
    from minispark.serving.generate import SHIPPED_DRAFTERS

    shipped = next(p for p in sorted(SHIPPED_DRAFTERS.iterdir()) if p.is_dir())
    before = {p: p.read_bytes() for p in shipped.iterdir()}
    result = CliRunner().invoke(app, ["calibrate", "--drafter", str(shipped), "--prompts", str(HELDOUT_FILE)])
    assert result.exit_code == 2 and "never rewritten" in result.output
    assert {p: p.read_bytes() for p in shipped.iterdir()} == before
