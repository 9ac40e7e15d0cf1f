"""Atomic file and directory writes: a reader (or a resumed run after a kill) sees the old file or the new one,
never half of one. Every artifact minispark writes in place goes through here.

    python -c "from minispark.atomic import write_json_atomic; print(write_json_atomic('/tmp/x.json', {'a': 1}))"
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any, Callable

from minispark.errors import MinisparkError


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write to a unique ``.NAME.*.tmp`` beside ``path``, fsync it, rename it over ``path``, fsync the dir."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # make the rename itself durable
    finally:
        os.close(directory)
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode())


def write_json_atomic(path: str | Path, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def write_dir_atomic(path: str | Path, fill: Callable[[Path], None]) -> Path:
    """Build a directory with ``fill(tmp)`` in a temporary sibling, then rename it over ``path``:
    a reader sees the old directory or the complete new one."""
    path = refuse_symlink(path, "output directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        fill(tmp)
        old = None
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)  # a directory cannot be renamed over a non-empty one
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def save_figure(fig: Any, path: str | Path, **kwargs: Any) -> Path:
    """A matplotlib figure as PNG bytes written atomically (a symlink at ``path`` is replaced, never followed),
    then closed: pyplot keeps every open figure alive otherwise."""
    import io

    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", **kwargs)
    finally:
        plt.close(fig)
    return write_bytes_atomic(path, buffer.getvalue())


def open_append(path: str | Path, truncate: bool = False) -> IO[str]:
    """Open a log file for appending without following a symlink planted at ``path``."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
    if truncate:
        flags |= os.O_TRUNC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError:
        if Path(path).is_symlink():
            raise MinisparkError(f"{path}: is a symbolic link; minispark does not write through links") from None
        raise
    return os.fdopen(fd, "a")


def refuse_symlink(path: str | Path, what: str) -> Path:
    """``path`` unless it is a symbolic link (replacing or deleting it would act on someone else's file)."""
    path = Path(path)
    if path.is_symlink():
        raise MinisparkError(f"{what} {path}: is a symbolic link, not something minispark wrote; remove it first")
    return path
