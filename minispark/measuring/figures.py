"""Figures minispark writes (bench, calibrate and profile ``--plot``): PNG bytes written atomically and marked as
minispark's, so a later run replaces its own figure and never someone's image of the same name.

    .venv/bin/python -m pytest -q tests/test_data_safety.py -k figure
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from minispark.core.atomic import write_bytes_atomic


#: The PNG ``Software`` text every figure minispark writes carries: a later ``--plot`` replaces a file
#: only when it holds this (``checks.figure_file``), never someone's own image or document.
FIGURE_SOFTWARE = "minispark"


def is_own_figure(path: str | Path) -> bool:
    """Whether ``path`` is a PNG :func:`save_figure` wrote (its text chunks come before the pixels)."""
    try:
        with open(path, "rb") as file:
            head = file.read(1 << 16)
    except OSError:
        return False
    return head.startswith(b"\x89PNG") and b"tEXtSoftware\x00" + FIGURE_SOFTWARE.encode() in head


def save_figure(fig: Any, path: str | Path, **kwargs: Any) -> Path:
    """A matplotlib figure as PNG bytes written atomically (a symlink at ``path`` is replaced, never followed),
    then closed: pyplot keeps every open figure alive otherwise. The PNG is marked as minispark's
    (``FIGURE_SOFTWARE``), so a rerun may replace it."""
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", metadata={"Software": FIGURE_SOFTWARE}, **kwargs)
    finally:
        plt.close(fig)
    return write_bytes_atomic(path, buffer.getvalue())
