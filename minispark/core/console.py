"""The one way minispark makes a rich Console: piped output keeps a wide line, and no emoji substitution.

    python -c "from minispark.core.console import make_console; make_console().print('a[start:end:step]')"
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console


#: Width of rich output written to a pipe or a file: rich's 80 columns would cut the bench table's cells
#: and wrap every training log line.
PIPED_WIDTH = 160


def make_console(stderr: bool = False) -> "Console":
    """The one way minispark makes a rich Console: the width rule below, and no ``:name:`` emoji
    substitution, which rich applies even with ``markup=False`` and which turns a model's
    ``a[start:end:step]`` into ``a[start🔚step]`` on screen."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream is None:  # closed (`minispark ... >&-`): Python sets it to None, and every command failed at import
        return Console(file=open(os.devnull, "w"), width=PIPED_WIDTH, emoji=False)
    return Console(stderr=stderr, width=console_width(stream), emoji=False)


def console_width(stream: TextIO) -> int | None:
    """Width for a rich Console writing to ``stream``: rich's own (the terminal, or ``$COLUMNS``) on a
    terminal or when ``$COLUMNS`` is set, else ``PIPED_WIDTH``."""
    return None if stream.isatty() or "COLUMNS" in os.environ else PIPED_WIDTH
