"""Rich output written to a pipe or a file is 160 columns wide, not rich's 80, so bench tables and
training log lines arrive whole in logs; a terminal or ``$COLUMNS`` keeps rich's own width.

    .venv/bin/python -m pytest -q tests/cli/test_console.py
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

from minispark.core.console import PIPED_WIDTH, console_width


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_width_rule(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert console_width(io.StringIO()) == PIPED_WIDTH == 160
    assert console_width(_Terminal()) is None
    monkeypatch.setenv("COLUMNS", "100")
    assert console_width(io.StringIO()) is None


def test_a_piped_progress_log_line_is_not_wrapped():
    """The trainer's progress console (stderr) prints a 120-character line on one line when piped."""
    code = ("import sys; from rich.console import Console; from minispark.core.console import console_width; "
            "Console(stderr=True, width=console_width(sys.stderr)).print('x' * 120)")
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stderr
    assert err == "x" * 120 + "\n"


def test_model_text_is_printed_verbatim_not_as_emoji():
    """rich turns ``:name:`` into emoji even with markup off; every minispark console prints it as is."""
    from minispark.cli.app import console as cli_console, err_console as cli_err_console
    from minispark.core.console import make_console

    text = 'print(a[start:end:step], b[1:x:2], "ok:cat:ok")'
    for console in (make_console(), make_console(stderr=True), cli_console, cli_err_console):
        with console.capture() as captured:
            console.print(text, end="", highlight=False, markup=False)
        assert captured.get() == text
