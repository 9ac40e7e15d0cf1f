"""What the process does around a command: SIGTERM of a resumable command raised as :class:`Terminated` (a
kind of Ctrl-C, so ``app.one_line_errors`` prints the same resume hint), and standard output whose failed write
names it (a full disk under ``> file`` is then blamed on standard output, not on "a file being written").

    minispark answers --target DIR --prompts FILE --out DIR & sleep 30; kill %1
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Any, Callable, Iterator

#: What an OSError from a write to standard output is named (Python gives it no file name).
STDOUT_NAME = "standard output"


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a job scheduler's time limit) in a resumable command: handled as Ctrl-C, so the same
    resume hint is printed."""


@contextlib.contextmanager
def sigterm_interrupts(resumable: bool) -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` while a resumable command runs: by default it ended the process without
    a word, where Ctrl-C says how to resume. Only in the main thread, where Python runs signal handlers."""
    if not resumable or threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _NamedStdout:
    """``sys.stdout`` whose failed write names it: Python's OSError from standard output has no file name, and a
    full disk under ``> file`` was blamed on "a file being written". Everything else is the stream's own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._named(self._stream.write, text)

    def flush(self) -> None:
        self._named(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    @staticmethod
    def _named(call: Callable, *args: Any) -> Any:
        try:
            return call(*args)
        except OSError as exc:
            if exc.filename is None:
                exc.filename = STDOUT_NAME
            raise


@contextlib.contextmanager
def stdout_named() -> Iterator[None]:
    """``sys.stdout`` as a :class:`_NamedStdout` while a command runs (the consoles look it up at each write)."""
    stream = sys.stdout
    sys.stdout = _NamedStdout(stream)
    try:
        yield
    finally:
        if isinstance(sys.stdout, _NamedStdout):
            sys.stdout = stream


def stdout_full(no_space: bool) -> str:
    """A write to standard output that failed: redirected to a full disk (``> file``, ``/dev/full``) or past
    ``ulimit -f``. Unlike the files minispark writes, what was written before it stays."""
    if no_space:
        return (f"{STDOUT_NAME}: no space left on the device it is redirected to (the output is cut short); free "
                "some space or redirect it elsewhere, and run the command again")
    return (f"{STDOUT_NAME}: larger than this process may write (the file-size limit, ulimit -f; the output is cut "
            "short); raise the limit or redirect it elsewhere, and run the command again")
