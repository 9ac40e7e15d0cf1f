"""One writer per output directory: a command that fills an ``--out`` over time (cache, answers, cache-mix, train,
demo --train) holds an exclusive lock on it while it runs, so a second run on the same directory (another
terminal, a resume typed while the first still runs) is refused with one line instead of interleaving its shards,
checkpoints and metrics with the first's (two trains into one --out both ran to the end: one ``metrics.jsonl`` of
both runs' lines, the drafter of whichever finished last).

The lock is a file in minispark's user directory (``locks/``) named by the directory's resolved path, not a file
in ``--out``: nothing is added to the output, a new directory is locked before it exists, and every spelling of
one directory (a symlink, ``./x``) takes the same lock. A kill releases it (flock). Where no lock can be taken (a
read-only user directory, a file system without locks) the command runs unlocked, as before.

    .venv/bin/python -m pytest -q tests/core/test_data_safety.py -k second_writer
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Iterator

from minispark.core.defaults import user_dir
from minispark.core.errors import MinisparkError, option

try:
    import fcntl
except ImportError:  # Windows: no lock, as for the atomic writes' temporaries
    fcntl = None

LOCK_DIR = "locks"
#: The output directories (resolved) this process holds: its own checks and nested writes pass.
_HELD: set[Path] = set()


def lock_file(path: str | Path) -> Path:
    """The lock file of the output directory ``path`` (resolved through symlinks)."""
    key = hashlib.sha256(os.fsencode(Path(path).resolve())).hexdigest()[:32]  # a name's bytes, UTF-8 or not
    return user_dir() / LOCK_DIR / f"{key}.lock"


@contextlib.contextmanager
def sole_writer(path: str | Path, flag: str = option("out")) -> Iterator[None]:
    """Hold the lock of the output directory ``path`` for the ``with`` block; refuse (``flag`` names it) while
    another process holds it."""
    resolved = Path(path).resolve()
    if resolved in _HELD:
        yield
        return
    fd = _take(path, flag)
    if fd is not None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD.add(resolved)
    try:
        yield
    finally:
        if fd is not None:
            _HELD.discard(resolved)
            os.close(fd)


def check_free(path: str | Path, flag: str = option("out")) -> None:
    """Refuse ``path`` while another process writes it: the check a command makes before its target loads."""
    if Path(path).resolve() not in _HELD:
        fd = _take(path, flag)
        if fd is not None:
            os.close(fd)


def _take(path: str | Path, flag: str) -> int | None:
    """An open descriptor of ``path``'s lock file, locked; None where no lock can be taken (no fcntl, a user
    directory that cannot hold the file, a file system without locks)."""
    if fcntl is None:
        return None
    lock = lock_file(path)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        by = f" (pid {holder})" if holder.isdigit() else ""
        raise MinisparkError(f"{flag} {path}: another minispark process{by} is writing it; wait for it to finish "
                             f"(or stop it), or choose another {flag}") from None
    except OSError:
        os.close(fd)
        return None
    return fd
