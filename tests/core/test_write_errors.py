"""The atomic writers where the file system refuses: a full disk as torch and safetensors report it, a file past
``ulimit -f``, and the umask every written file takes.

    .venv/bin/python -m pytest -q tests/core/test_write_errors.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file


def test_a_full_disk_torch_reports_as_a_runtime_error_is_recognised(tmp_path, monkeypatch) -> None:
    """torch.save on a full disk raises a bare RuntimeError; with no free space left it is a full disk."""
    from types import SimpleNamespace

    from minispark.core.atomic import NoSpaceError, write_dir_atomic

    def fill(tmp: Path) -> None:
        (tmp / "trainer_state.pt").write_bytes(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    with pytest.raises(RuntimeError, match="unexpected pos"):  # a real failure with space left: kept as it is
        write_dir_atomic(tmp_path / "ckpt", fill)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=100, used=100, free=0))
    with pytest.raises(NoSpaceError, match="ckpt: no space left"):
        write_dir_atomic(tmp_path / "ckpt", fill)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_safetensors_reports_in_its_own_error_is_recognised(tmp_path) -> None:
    """safetensors deletes its half-written file before raising, so the disk has room again by then (a
    checkpoint, an export or an import on a nearly full disk was a traceback); its message names the errno."""
    from safetensors import SafetensorError

    from minispark.core.atomic import NoSpaceError, write_dir_atomic

    def fill(tmp: Path) -> None:
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    with pytest.raises(NoSpaceError, match="ckpt: no space left"):
        write_dir_atomic(tmp_path / "ckpt", fill)
    assert list(tmp_path.iterdir()) == []

    def fail(tmp: Path) -> None:  # another I/O error stays what it is
        raise SafetensorError("Error while serializing: I/O error: Permission denied (os error 13)")

    with pytest.raises(SafetensorError, match="os error 13"):
        write_dir_atomic(tmp_path / "ckpt", fail)


@pytest.mark.parametrize("writer", ["bytes", "safetensors", "torch"])
def test_a_file_past_ulimit_f_is_one_line(tmp_path, writer: str) -> None:
    """``ulimit -f``: Python ignores SIGXFSZ, so the write fails with EFBIG (safetensors names it in its message,
    torch.save raises a bare RuntimeError); each was a traceback. Nothing half-written is kept."""
    import resource

    from safetensors.torch import save_file

    from minispark.core.atomic import FileTooLargeError, write_bytes_atomic, write_dir_atomic

    tensor = torch.zeros(50_000)  # 200 kB, past the limit below
    write = {"bytes": lambda: write_bytes_atomic(tmp_path / "out" / "x.bin", bytes(200_000)),
             "safetensors": lambda: write_dir_atomic(tmp_path / "out", lambda d: save_file({"x": tensor},
                                                                                           str(d / "w.safetensors"))),
             "torch": lambda: write_dir_atomic(tmp_path / "out", lambda d: torch.save({"x": tensor}, d / "t.pt"))}
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))
    try:
        with pytest.raises(FileTooLargeError, match="larger than this process may write"):
            write[writer]()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_written_files_take_the_umask(tmp_path) -> None:
    """mkstemp's 0600 and mkdtemp's 0700 kept an exported drafter from every other user (a vLLM server's)."""
    import os

    from minispark.core.atomic import write_dir_atomic, write_json_atomic

    old = os.umask(0o027)
    try:
        write_json_atomic(tmp_path / "a.json", {})
        write_dir_atomic(tmp_path / "d", lambda tmp: save_file({"x": torch.zeros(1)}, str(tmp / "w.safetensors")))
    finally:
        os.umask(old)
    names = ("a.json", "d", "d/.minispark-written.json", "d/w.safetensors")  # save_file makes 0600 files
    modes = {name: os.stat(tmp_path / name).st_mode & 0o777 for name in names}
    assert modes == {"a.json": 0o640, "d": 0o750, "d/.minispark-written.json": 0o640, "d/w.safetensors": 0o640}
