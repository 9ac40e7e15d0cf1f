"""``minispark chat``: a multi-turn REPL over a :class:`~minispark.serving.conversation.Conversation`.

Answers stream as the engine commits tokens; later turns reuse the KV cache of earlier ones.
Images attach on the command line (first message) or with ``/image PATH`` (next message).
Ctrl-C stops the current answer between two rounds and keeps the session (the partial answer is
the reply, consistent with the KV cache); Ctrl-D (EOF) or ``/quit`` exits. After each answer: new
tokens, tok/s, τ, drafts verified per round, the speedup the SPS table predicts for those rounds and,
on CUDA, the turn's peak device memory (what a 6 GB card has to hold).

    minispark chat --image examples/cat.png
"""

from __future__ import annotations

import json
import shlex
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch
from rich.console import Console
from rich.markup import escape

from minispark.wording import for_user
from minispark.core.atomic import write_json_atomic
from minispark.serving.conversation import Conversation, Turn
from minispark.serving.engine import GenerationStats
from minispark.core.errors import MinisparkError, option
from minispark.serving.builder import ServingSetup
from minispark.serving.sps import SPSTable, SPSTableError
from minispark.core.checks import dangling_link, expand_user, utf8_text

COMMANDS = {
    "/image PATH": "attach an image to your next message",
    "/reset": "forget the conversation (and the KV cache)",
    "/stats": "figures for the whole session",
    "/save FILE": "write the conversation as JSON",
    "/help": "this list",
    "/quit": "exit (Ctrl-D works too)",
}


def estimate_speedup(stats: GenerationStats, table: SPSTable | None, context: int) -> float | None:
    """Target-only time over speculative time for the same committed tokens, both priced by the SPS
    table at ``context`` (verification forwards only: the drafter's own time is not in the table)."""
    if table is None or not stats.rounds:
        return None
    try:
        speculative = sum(table.step_seconds(n + 1, context) for n in stats.proposed_lengths)
        alone = (sum(stats.accepted_lengths) + stats.rounds) * table.step_seconds(1, context)
    except SPSTableError:
        return None
    return alone / speculative


@contextmanager
def peak_memory(device: torch.device) -> Iterator[list[int]]:
    """Inside the block, on CUDA: afterwards the list holds the peak bytes allocated on ``device``
    during it (the allocator's counter, reset on entry); elsewhere it stays empty."""
    peak: list[int] = []
    if device.type != "cuda":
        yield peak
        return
    torch.cuda.reset_peak_memory_stats(device)
    try:
        yield peak
    finally:
        peak.append(int(torch.cuda.max_memory_allocated(device)))


@contextmanager
def ctrl_c_stops() -> Iterator[Callable[[], bool]]:
    """While active, Ctrl-C sets a flag (polled by the engine between rounds) instead of raising,
    so an answer never stops half-way through a forward."""
    pressed = [False]

    def handler(_signum: int, _frame: object) -> None:
        pressed[0] = True

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: no Ctrl-C handling
        previous = None
    try:
        yield lambda: pressed[0]
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


class ChatREPL:
    """Reads lines, runs slash commands, streams answers. ``read_line`` raises EOFError to exit."""

    def __init__(self, conversation: Conversation, setup: ServingSetup, console: Console,
                 read_line: Callable[[], str] | None = None, show_stats: bool = True) -> None:
        self.conversation = conversation
        self.setup = setup
        self.console = console
        self.read_line = read_line or (lambda: console.input("[bold cyan]you ›[/] "))
        self.show_stats = show_stats
        self.pending: list[str] = []
        self.saved: set[Path] = set()  # the files this session's /save wrote: the only ones it replaces

    def run(self, images: Sequence[str | Path] = ()) -> None:
        target = self.conversation.target
        # names and paths escaped: a "[v2]" in a directory name is text, not markup
        self.console.print(f"[bold]minispark chat[/] · {escape(target.name)} · drafter "
                           f"{escape(self.setup.drafter_spec)} · mode {self.setup.mode} · /help for commands, "
                           "Ctrl-D to exit", highlight=False)
        for hint in self.setup.hints:
            self.console.print(f"[yellow]hint:[/] {escape(hint)}", highlight=False)
        for image in images:
            self.attach(str(image))
        while True:
            try:
                line = self.read_line()
            except EOFError:
                self.console.print()
                self.unsent()
                return
            except KeyboardInterrupt:
                self.console.print("\n[dim](Ctrl-D or /quit to exit)[/]")
                continue
            except UnicodeDecodeError as exc:  # a pasted Latin-1 "é": the line is lost, the session is not
                self.error(f"that line is not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); type it again in "
                           "UTF-8")
                continue
            try:  # stdin read with surrogateescape (a C locale): a Latin-1 "é" arrives as half a character, which
                utf8_text(line, "that line")  # the target refused after 'assistant ›' as "a lone surrogate"
            except MinisparkError as exc:
                self.error(exc.template)
                continue
            if not self.handle(line.strip()):
                self.unsent()
                return

    def unsent(self) -> None:
        """On leaving: say so when images were attached and no message followed to send them (the chat ended
        without a word, as if they had been seen)."""
        if self.pending:
            count = len(self.pending)
            self.console.print(f"[dim]{count} attached image{'' if count == 1 else 's'} not sent: no message "
                               "followed[/]")

    def handle(self, line: str) -> bool:
        """One input line; False to exit."""
        if not line:
            return True
        if not line.startswith("/"):
            self.answer(line)
            return True
        command, _, argument = line.partition(" ")
        argument = argument.strip()
        actions = {"/image": self.attach, "/reset": self.reset, "/stats": self.stats, "/save": self.save,
                   "/help": self.help}
        takes_path = command in ("/image", "/save")
        if argument and not takes_path and command in {*actions, "/quit", "/exit"}:
            # '/reset now' or '/quit later' did what the bare command does, the words ignored without a word
            self.error(f"{command} takes no argument (got {argument!r})")
            return True
        if command in ("/quit", "/exit"):
            return False
        if command not in actions:
            self.error(f"unknown command {command} (try /help)")
        elif takes_path and not argument:
            self.error(f"{command} needs a path")
        elif takes_path and argument[0] in "'\"":  # /image "my photo.png": the quotes were part of the name
            try:
                words = shlex.split(argument)
            except ValueError as exc:
                self.error(f"{command} {argument}: {exc}")
                return True
            if len(words) != 1:
                self.error(f"{command} takes one path (got {len(words)}: quote a name with spaces whole)")
            else:
                actions[command](words[0])
        else:
            actions[command](argument) if takes_path else actions[command]()
        return True

    def answer(self, text: str) -> None:
        self.console.print("[bold green]assistant ›[/] ", end="")
        # soft_wrap: the terminal wraps the streamed pieces, rich would break each one on its own
        on_text = lambda piece: self.console.print(piece, end="", highlight=False, markup=False,  # noqa: E731
                                                   soft_wrap=True)
        try:
            with ctrl_c_stops() as interrupted, peak_memory(self.conversation.target.device) as peak:
                turn = self.conversation.say(text, self.pending, on_text=on_text, interrupt=interrupted)
        except MinisparkError as exc:
            self.console.print()
            self.error(exc.template)
            return
        self.pending = []
        self.console.print()
        if turn.stop_reason == "interrupted":
            self.console.print("[dim](interrupted: the partial answer is kept)[/]")
        if self.show_stats:
            self.console.print(f"[dim]{self.turn_line(turn, peak[0] if peak else None)}[/]", highlight=False)

    def turn_line(self, turn: Turn, peak_bytes: int | None = None) -> str:
        stats = turn.stats
        drafts = sum(stats.proposed_lengths) / stats.rounds if stats.rounds else 0.0
        context = self.conversation.session.cache_length - stats.new_tokens // 2
        speedup = estimate_speedup(stats, self.setup.sps_table, context)
        estimate = f"≈{speedup:.2f}× est. (SPS table)" if speedup is not None else "no SPS estimate"
        # Without a drafter every round is one target token: τ, drafts and an estimate would say nothing.
        drafting = "" if self.setup.drafter_spec == "none" else (
            f"τ {stats.tau:.2f} · {drafts:.1f} drafts/round · {stats.skipped_rounds}/{stats.rounds} rounds "
            f"draft-skipped · {estimate} · ")
        return (f"{stats.new_tokens} tokens · {stats.tokens_per_s:.1f} tok/s · {drafting}prompt {stats.prefill_tokens} prefilled, "
                f"{stats.reused_tokens} reused" + (f" · peak {peak_bytes / 2**30:.2f} GiB" if peak_bytes else "")
                + f" · {self.conversation.session.target.threads_line()}")

    def attach(self, path: str) -> None:
        try:
            file = expand_user(path, "/image")
            dangling_link(file, "/image")  # and a name too long: its OSError, from is_dir below, ended the chat
        except MinisparkError as exc:
            self.error(exc.template)
            return
        if not self.conversation.target.is_vlm:
            self.error(f"target {self.conversation.target.name} is text-only: it cannot take images")
        elif file.is_dir():
            self.error(f"{path}: a directory, not an image file")
        elif not file.is_file():
            self.error(f"image not found: {path}")
        elif (problem := _image_problem(file)) is not None:
            self.error(problem)
        else:
            self.pending.append(str(file))
            self.console.print(f"[dim]attached {escape(path)} (sent with your next message)[/]", highlight=False)

    def reset(self) -> None:
        self.conversation.reset()
        self.pending = []
        self.console.print("[dim]conversation cleared[/]")

    def stats(self) -> None:
        totals = self.conversation.totals()
        tau = f"τ {totals['tau']:.2f} · " if totals["rounds"] else ""  # before any round: 'τ 0.00', below its floor of 1
        self.console.print(
            f"{totals['turns']} turn{'' if totals['turns'] == 1 else 's'} · {totals['new_tokens']} tokens in {totals['wall_s']:.2f}s "
            f"({totals['tokens_per_s']:.1f} tok/s) · "
            + ("no drafter (target-only)\n" if self.setup.drafter_spec == "none" else
               f"{tau}{totals['drafts_per_round']:.1f} drafts/round · "
               f"{totals['skipped_rounds']}/{totals['rounds']} rounds draft-skipped · "
               f"drafter {self.setup.drafter_spec}, mode {self.setup.mode}\n") +
            f"prompt tokens: {totals['prefill_tokens']} prefilled, {totals['reused_tokens']} reused from the KV "
            f"cache ({totals['recomputed_tokens']} re-prefilled after a template mismatch); KV cache holds "
            f"{totals['kv_cache_tokens']} tokens", highlight=False)

    def save(self, path: str) -> None:
        data = {**self.conversation.to_json(), "drafter_spec": self.setup.drafter_spec, "mode": self.setup.mode}
        try:
            inputs = {option("target"): self.conversation.target.name, option("drafter"): self.setup.drafter_spec}
            written = write_json_atomic(_save_path(path, inputs, self.saved), data)
            self.saved.add(written.resolve())
        except MinisparkError as exc:
            self.error(exc.template)
            return
        except OSError as exc:
            self.error(f"/save {path}: {exc.strerror or exc}")
            return
        turns = len(self.conversation.turns)
        self.console.print(f"[dim]saved {turns} turn{'' if turns == 1 else 's'} to {escape(str(written))}[/]",
                           highlight=False)

    def help(self) -> None:
        for command, what in COMMANDS.items():
            self.console.print(f"  {command:<12} {what}", highlight=False, markup=False)
        self.console.print("  Ctrl-C stops the current answer and keeps the conversation.", highlight=False)

    def error(self, message: str) -> None:
        self.console.print(f"[red]error:[/] {escape(for_user(message))}", highlight=False, soft_wrap=True)


def _save_path(path: str, inputs: dict[str, Any] | None = None, mine: set[Path] = frozenset()) -> Path:
    """Where ``/save path`` writes: a new file, or one this session's ``/save`` wrote (``mine``: replaced);
    never another session's saved conversation, a directory, a path under a file, someone's other file, a
    name with a control character, or a file among ``inputs`` (the target's and the drafter's directories) or
    what minispark ships."""
    from minispark.core.checks import not_shipped, output_file, typed_path

    file = output_file(expand_user(typed_path(path, "/save", names_file=True), "/save"), "/save", inputs)
    not_shipped(file, "/save", "save the conversation elsewhere")
    if file.exists():
        try:
            saved = json.loads(file.read_text())
            ours = isinstance(saved, dict) and {"messages", "turns", "drafter_spec"} <= set(saved)
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            ours = False
        if not ours:
            raise MinisparkError(f"/save {path}: exists and is not a saved conversation; choose another name")
        if file.resolve() not in mine:  # another session's conversation was replaced without a word
            raise MinisparkError(f"/save {path}: holds a conversation saved earlier (not by this session); choose "
                                 "another name, or delete it first")
    return file


def _image_problem(path: Path) -> str | None:
    """Why ``path`` cannot be attached (corrupt, truncated, far too large), or None."""
    from minispark.core.model_files import image

    try:
        image(path, "/image")
    except MinisparkError as exc:
        return str(exc)
    return None
