"""C kernels compiled on the machine that runs them: AVX-512 code built once per source and CPU, then loaded.

A kernel source beside this module (``block_kernels.c``, ``attention_kernels.c``) is compiled with the system's
C compiler (``gcc -O3 -march=native -fopenmp``) into minispark's user directory, under a name keyed by the
source, the flags and the CPU's model and flags, so a library built for one CPU is never loaded on another and
an edited source is rebuilt. The build is atomic (a half-written library is never loaded) and happens once per
machine; :func:`load` says in one line why a library cannot be had (no AVX-512, no compiler, a failed build),
and its callers fall back to torch's own kernels.

    .venv/bin/python -m pytest -q tests/target/test_block_quant.py -k build
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from minispark.core.defaults import user_dir

FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")


def cpu_signature() -> str:
    """What ``-march=native`` compiles for: the CPU's model and flags."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    lines = [line for line in info.splitlines() if line.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(lines)))


def compiler() -> str | None:
    return shutil.which("gcc") or shutil.which("cc")


def has_avx512() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64") and " avx512f" in cpu_signature()


def build(source: Path, directory: Path) -> Path:
    """``source`` compiled for this CPU into ``directory``, once (atomically: a half-written library is never
    loaded)."""
    text = source.read_bytes()
    key = hashlib.sha256(text + " ".join(FLAGS).encode() + cpu_signature().encode()).hexdigest()[:16]
    library = directory / f"{source.stem}-{key}.so"
    if library.is_file() and not library.is_symlink():
        return library
    directory.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(prefix=f".{source.stem}-", suffix=".so", dir=directory)
    os.close(handle)
    try:
        done = subprocess.run([compiler(), *FLAGS, str(source), "-o", scratch], capture_output=True, text=True)
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise OSError(f"compiling {source.name} failed: {lines[0] if lines else done.returncode}")
        os.replace(scratch, library)
    finally:
        if os.path.exists(scratch):
            os.unlink(scratch)
    return library


@functools.cache
def load(name: str, what: str) -> ctypes.CDLL | str:
    """The library built from the source ``name`` beside this module, or why ``what`` (its kernels, in words)
    cannot run here; asked once per process."""
    if not has_avx512():
        return f"{what} need an x86-64 CPU with AVX-512"
    if compiler() is None:
        return f"no C compiler found (install gcc) for {what}"
    try:
        return ctypes.CDLL(str(build(Path(__file__).with_name(name), user_dir() / "kernels")))
    except OSError as exc:
        return str(exc).splitlines()[0]
