"""`minispark chat`: the REPL's commands on a scripted input, its defaults, and — as a person would
use it — the real command in a pseudo-terminal: two turns with an image in the second (`/image`),
Ctrl-C during an answer, `/save`, Ctrl-D.
"""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import signal
import struct
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

from minispark.chat import ChatREPL, estimate_speedup, peak_memory
from minispark.model.checkpoint import save_drafter
from minispark.serving.conversation import Conversation
from minispark.serving.drafters.dspark import DSparkDrafter
from minispark.serving.engine import GenerationStats
from minispark.serving.generate import default_drafter
from minispark.core.identity import target_id
from minispark.serving.builder import PROFILE_HINT, TRAIN_HINT, build_serving, profile_command
from minispark.serving.sps import SPSTable
from minispark.target.loading import Target, load_target
from tests.helpers import random_dspark

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_llama(tiny_dir) -> Target:
    return load_target(str(tiny_dir("llama")))


@pytest.fixture(scope="module")
def vlm_with_drafter(tiny_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(target dir, drafter dir): the tiny Qwen2.5-VL and an untrained DSpark drafter saved for it."""
    target_dir = tiny_dir("qwen2_5_vl")
    target = load_target(str(target_dir))
    model = random_dspark(target).model
    model.config.target = target_id(target.identity())
    drafter_dir = tmp_path_factory.mktemp("chat-drafter") / "drafter"
    save_drafter(model, drafter_dir)
    return target_dir, drafter_dir


def scripted(lines: list[str]):
    """A ``read_line`` that returns ``lines`` one by one, then raises EOFError (Ctrl-D)."""
    pending = iter(lines)

    def read_line() -> str:
        try:
            return next(pending)
        except StopIteration:
            raise EOFError from None

    return read_line, pending


def repl(target: Target, lines: list[str], drafter: str = "lookup", **conversation_kwargs
         ) -> tuple[str, Conversation, object]:
    output = io.StringIO()
    setup = build_serving(target, drafter)
    read_line, pending = scripted(lines)
    conversation = Conversation(target, setup.drafter, policy=setup.policy, max_new_tokens=12, **conversation_kwargs)
    with conversation:
        ChatREPL(conversation, setup, Console(file=output, width=200), read_line).run()
    return output.getvalue(), conversation, pending


def test_save_reset_and_eof(tiny_llama: Target, tmp_path: Path) -> None:
    first, second = tmp_path / "first.json", tmp_path / "sub" / "second.json"
    out, conversation, _ = repl(tiny_llama, ["Hello there", "Tell me more", f"/save {first}", "/stats", "/reset",
                                             "Hi again", f"/save {second}"], system="Be brief.")
    saved = json.loads(first.read_text())
    assert [m["role"] for m in saved["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert saved["messages"][1]["content"] == "Hello there"
    assert [t["user"] for t in saved["turns"]] == ["Hello there", "Tell me more"]
    assert saved["turns"][1]["reused_tokens"] > 0 and saved["totals"]["turns"] == 2
    assert saved["messages"][2]["content"] == saved["turns"][0]["reply"]
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically: no temporary left behind
    after = json.loads(second.read_text())
    assert [t["user"] for t in after["turns"]] == ["Hi again"]
    assert after["turns"][0]["reused_tokens"] == 0  # /reset emptied the KV cache
    assert "2 turns" in out and "conversation cleared" in out and "tokens ·" in out and "τ" in out
    assert [t.user for t in conversation.turns] == ["Hi again"]  # EOF ended the loop after the last line


def test_turn_line_shows_peak_device_memory_on_cuda(tiny_llama: Target, monkeypatch) -> None:
    """On CUDA a turn's stats line ends with its peak memory (the counter reset at the turn's start);
    on a CPU nothing is read or shown."""
    calls: list[str] = []
    monkeypatch.setattr("torch.cuda.reset_peak_memory_stats", lambda device: calls.append("reset"))
    monkeypatch.setattr("torch.cuda.max_memory_allocated", lambda device: calls.append("read") or 3 * 2**29)
    with peak_memory(torch.device("cuda", 0)) as peak:
        assert calls == ["reset"]
    assert calls == ["reset", "read"] and peak == [3 * 2**29]
    with peak_memory(torch.device("cpu")) as peak:
        pass
    assert peak == [] and calls == ["reset", "read"]
    out, _, _ = repl(tiny_llama, ["Hello there"])
    assert "tokens ·" in out and "peak" not in out  # the CPU line
    setup = build_serving(tiny_llama, "lookup")
    with Conversation(tiny_llama, setup.drafter, policy=setup.policy, max_new_tokens=2) as conversation:
        turn = conversation.say("Hi")
        line = ChatREPL(conversation, setup, Console(file=io.StringIO())).turn_line(turn, 3 * 2**29)
    assert "reused · peak 1.50 GiB · threads=" in line


def test_commands_errors_and_quit(tiny_llama: Target, tmp_path: Path) -> None:
    out, conversation, pending = repl(tiny_llama, ["/help", "/image cat.png", "/bogus", "/save", "/quit now",
                                                   "/reset all", "/quit", "unread"])
    assert "/image PATH" in out and "/save FILE" in out
    assert "text-only" in out and "unknown command /bogus" in out and "/save needs a path" in out
    # words after a command that takes none are refused, not ignored: '/quit now' did not quit
    assert "/quit takes no argument (got 'now')" in out and "/reset takes no argument (got 'all')" in out
    assert next(pending) == "unread" and not conversation.turns


def test_a_line_not_in_utf8_is_refused_before_it_is_answered(tiny_llama: Target) -> None:
    """Read with surrogateescape, a Latin-1 'é' arrived as half a character: 'assistant ›', then the target's
    'a message holds '\\udce9' ... (a lone surrogate)'."""
    out, conversation, _ = repl(tiny_llama, ["caf\udce9", "/quit"])
    assert "error: that line: not UTF-8 text (byte 0xe9) at character 4" in out
    assert "assistant" not in out and "surrogate" not in out and not conversation.turns


def test_stats_before_any_turn_shows_no_tau(tiny_llama: Target) -> None:
    """/stats before the first answer said 'τ 0.00' (τ is at least 1 once a round has run)."""
    out, _, _ = repl(tiny_llama, ["/stats", "Hello there", "/stats"])
    before, after = [line for line in out.splitlines() if " turn" in line and "tokens in" in line]
    assert "τ" not in before and "0/0 rounds" in before and " τ " in after


def test_image_command_attaches_to_next_message(vlm_with_drafter, test_image) -> None:
    target = load_target(str(vlm_with_drafter[0]))
    output = io.StringIO()
    setup = build_serving(target, "lookup")
    read_line, _ = scripted(["/image no-such.png", f"/image {test_image.parent}", "/image " + "y" * 300 + ".png",
                             f"/image {test_image}", "What is this?", "And now?", f"/image {test_image}"])
    with Conversation(target, setup.drafter, policy=setup.policy, max_new_tokens=8) as conversation:
        ChatREPL(conversation, setup, Console(file=output, width=200), read_line).run()
    assert "image not found: no-such.png" in output.getvalue()
    assert f"{test_image.parent}: a directory, not an image file" in output.getvalue()  # said "image not found"
    assert "a name of 304 bytes in the path" in output.getvalue()  # its OSError ended the chat
    assert [t.images for t in conversation.turns] == [[str(test_image)], []]
    assert output.getvalue().rstrip().endswith("1 attached image not sent: no message followed")  # then Ctrl-D


def test_defaults_and_hints(tiny_llama: Target, vlm_with_drafter, tmp_path: Path) -> None:
    setup = build_serving(tiny_llama)  # no shipped drafter for a tiny model
    assert setup.drafter_spec == "lookup" and setup.mode == "fixed"
    assert setup.hints == [TRAIN_HINT.format(target=tiny_llama.name),
                           PROFILE_HINT.format(target=tiny_llama.name, fallback="no speedup estimate",
                                               command=profile_command(tiny_llama))]
    target_dir, drafter_dir = vlm_with_drafter
    target = load_target(str(target_dir))
    setup = build_serving(target, str(drafter_dir))  # a trained drafter, no SPS table for this device+target
    assert isinstance(setup.drafter, DSparkDrafter) and setup.mode == "tree"
    assert setup.hints == [PROFILE_HINT.format(target=target.name, fallback="tree mode uses the generic cost model",
                                               command=profile_command(target))]
    setup = build_serving(target, str(drafter_dir), "threshold")
    assert setup.sps_table is None and setup.hints == [
        PROFILE_HINT.format(target=target.name, fallback="no speedup estimate", command=profile_command(target))]
    assert setup.policy.gamma == setup.drafter.config.block_size
    # default_drafter: a directory whose config names the target; None when none does
    shipped = tmp_path / "drafters"
    (shipped / "other").mkdir(parents=True)
    (shipped / "other" / "config.json").write_text(json.dumps({"target": "someone-else@0"}))
    assert default_drafter(target, shipped) is None
    (shipped / "mine").mkdir()
    (shipped / "mine" / "config.json").write_text((drafter_dir / "config.json").read_text())
    assert default_drafter(target, shipped) == shipped / "mine"


def test_estimate_speedup_prices_rounds_with_the_table() -> None:
    stats = GenerationStats(rounds=2, accepted_lengths=[3, 1], proposed_lengths=[4, 4])
    flat = SPSTable.from_inline([10.0] * 8)
    assert estimate_speedup(stats, flat, 100) == pytest.approx(3.0)  # τ when verifying is free
    steep = SPSTable.from_inline([10.0 / n for n in range(1, 9)])  # cost linear in tokens
    assert estimate_speedup(stats, steep, 100) == pytest.approx(6 / 10)
    assert estimate_speedup(stats, None, 100) is None


# ---------------------------------------------------------------------- the real command in a pty
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


class Terminal:
    """A child process on a pseudo-terminal (its controlling tty: Ctrl-C is a real SIGINT)."""

    def __init__(self, argv: list[str]) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TERM": "xterm-256color",
               "PYTHONPATH": str(REPO), "COLUMNS": "200", "LINES": "50"}
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # child: become the command
            os.chdir(REPO)
            os.execvpe(argv[0], argv, env)
        import fcntl
        import termios

        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.seen = ""
        self.mark = 0

    def read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if ready:
            try:
                self.seen += ANSI.sub("", os.read(self.fd, 65536).decode(errors="replace"))
            except OSError:  # the child closed the terminal
                pass

    def expect(self, pattern: str, timeout: float = 180.0) -> re.Match:
        """Wait until ``pattern`` appears after the previous match; fail with the transcript."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if match := re.compile(pattern).search(self.seen, self.mark):
                self.mark = match.end()
                return match
            self.read(0.2)
        raise AssertionError(f"timed out waiting for {pattern!r}; transcript:\n{self.seen}")

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.read(0.1)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError(f"chat did not exit; transcript:\n{self.seen}")


PROMPT = r"you › "


def test_chat_in_a_terminal(vlm_with_drafter, test_image, tmp_path: Path) -> None:
    target_dir, drafter_dir = vlm_with_drafter
    saved = tmp_path / "conversation.json"
    term = Terminal([sys.executable, "-m", "minispark.cli", "chat", "--target", str(target_dir), "--drafter",
                     str(drafter_dir), "--max-new-tokens", "16", "--device", "cpu"])
    term.expect(r"minispark chat .*drafter .* mode tree")
    term.expect(r"hint: no SPS table")
    term.expect(PROMPT)
    term.send("Hello, who are you?\r")
    term.expect(r"assistant › ")
    term.expect(r"\d+ tokens · [\d.]+ tok/s · τ [\d.]+ · [\d.]+ drafts/round")
    term.expect(PROMPT)
    term.send(f"/image {test_image}\r")
    term.expect(r"attached .*cat\.png")
    term.expect(PROMPT)
    term.send("What is in this picture?\r")
    line = term.expect(r"prompt (\d+) prefilled, (\d+) reused")
    assert int(line.group(2)) > 0  # the first turn stayed in the KV cache
    term.expect(PROMPT)
    term.send(f"/save {saved}\r")
    term.expect(r"saved 2 turns")
    term.expect(PROMPT)
    term.send("\x04")  # Ctrl-D
    assert term.wait() == 0
    data = json.loads(saved.read_text())
    assert [t["images"] for t in data["turns"]] == [[], [str(test_image)]]
    assert data["drafter"] == "dspark" and data["turns"][1]["reused_tokens"] > 0
    assert data["messages"][2]["content"][0] == {"type": "image", "image": str(test_image)}


def test_ctrl_c_stops_the_answer_and_keeps_the_session(vlm_with_drafter, tmp_path: Path) -> None:
    target_dir, _ = vlm_with_drafter
    saved = tmp_path / "interrupted.json"
    term = Terminal([sys.executable, "-m", "minispark.cli", "chat", "--target", str(target_dir), "--drafter",
                     "lookup", "--max-new-tokens", "3000", "--no-stats", "--device", "cpu"])
    term.expect(PROMPT)
    term.send("Write a very long story.\r")
    term.expect(r"assistant › [^\n]*\S")  # streaming has started
    term.send("\x03")  # Ctrl-C
    term.expect(r"interrupted: the partial answer is kept")
    term.expect(PROMPT)
    term.send(f"/save {saved}\r")
    term.expect(r"saved 1 turn ")
    term.send("/quit\r")
    assert term.wait() == 0
    turn = json.loads(saved.read_text())["turns"][0]
    assert turn["stop_reason"] == "interrupted" and 0 < turn["new_tokens"] < 3000


def test_cli_bad_inputs_are_one_line_errors(tiny_dir, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from minispark.cli import app

    runner = CliRunner()
    missing = runner.invoke(app, ["chat", "--image", str(tmp_path / "missing.png")])
    assert missing.exit_code == 2 and "--image" in missing.output and "not found" in missing.output
    image = tmp_path / "cat.png"
    image.write_bytes((REPO / "examples" / "cat.png").read_bytes())
    text_only = runner.invoke(app, ["chat", "--target", str(tiny_dir("llama")), "--image", str(image)])
    assert text_only.exit_code == 2 and "text-only" in text_only.output
    bad_mode = runner.invoke(app, ["chat", "--target", str(tiny_dir("llama")), "--mode", "fastest"])
    assert bad_mode.exit_code == 2 and "--mode fastest" in bad_mode.output


def test_builder_gamma_sps_and_calibration_checks(vlm_with_drafter, tmp_path: Path) -> None:
    """γ defaults to the checkpoint's block size and may not exceed it; an explicit --sps table
    profiled elsewhere is a one-line warning (an error with strict); a calibration is refused for
    another target and warned about at other sampling settings."""
    from minispark.model.calibration import Calibration
    from minispark.model.checkpoint import CALIBRATION_FILE
    from minispark.core.errors import MinisparkError
    from minispark.target.sampling import SamplingConfig

    target_dir, drafter_dir = vlm_with_drafter
    target = load_target(str(target_dir))
    block = build_serving(target, str(drafter_dir)).gamma
    with pytest.raises(MinisparkError, match=f"gamma {block + 1}: .*at most {block}") as error:
        build_serving(target, str(drafter_dir), gamma=block + 1)
    assert "\n" not in str(error.value)
    assert build_serving(target, "lookup").gamma == 7

    table = tmp_path / "elsewhere.json"
    SPSTable.from_inline([1.0] * 16, device="some-gpu", target="another-model").save(table)
    setup = build_serving(target, str(drafter_dir), "schedule", sps=table)
    [warning] = [h for h in setup.hints if h.startswith("--sps")]
    assert "device 'some-gpu'" in warning and "target 'another-model'" in warning and "\n" not in warning
    with pytest.raises(MinisparkError, match="sps .*profiled for another setup"):
        build_serving(target, str(drafter_dir), "schedule", sps=table, strict=True)

    identity = target_id(target.identity())
    Calibration([1.0] * block, target_identity=identity,
                sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0}).save(drafter_dir / CALIBRATION_FILE)
    try:
        setup = build_serving(target, str(drafter_dir), "schedule", sps=table, sampling=SamplingConfig(0.0))
        assert setup.calibration is not None and any("fitted at temperature 1" in h for h in setup.hints)
        Calibration([1.0] * block, target_identity="another@0").save(drafter_dir / CALIBRATION_FILE)
        with pytest.raises(MinisparkError, match="fitted for target 'another@0'"):
            build_serving(target, str(drafter_dir), "schedule", sps=table)
    finally:
        (drafter_dir / CALIBRATION_FILE).unlink()


def test_without_a_drafter_no_drafting_figures_or_profile_hint(tiny_llama: Target) -> None:
    """``--drafter none`` printed 'τ 1.00 · 0.0 drafts/round' every turn and advised `minispark profile`,
    whose table it never reads."""
    assert not any("minispark profile" in hint for hint in build_serving(tiny_llama, "none").hints)
    out, _, _ = repl(tiny_llama, ["Hello there", "/stats"], drafter="none")
    assert "tok/s" in out and "no drafter (target-only)" in out
    assert "τ" not in out and "drafts/round" not in out and "SPS" not in out

