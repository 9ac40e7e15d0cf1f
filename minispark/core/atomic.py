"""Atomic file and directory writes: a reader (or a resumed run after a kill) sees the old file or the new one,
never half of one. Every artifact minispark writes in place goes through here.

A directory written whole (``write_dir_atomic``: drafters, exports, checkpoints) records the sha256 of every
file it holds in ``.minispark-written.json``; it is only ever replaced while everything in it is still what
that record says minispark wrote, so a user's file that happens to share a name (``README.md``) is never lost.
``import`` and ``export`` also record that they wrote it, and replace only their own earlier output (never a
trained drafter or a checkpoint). A write holds a lock on its temporary until it has its name; what a SIGKILL
leaves (a temporary no process holds, the old directory moved aside) the next write of that path cleans up.

    python -c "from minispark.core.atomic import write_json_atomic; print(write_json_atomic('/tmp/x.json', {'a': 1}))"
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from minispark.core.errors import MinisparkError

try:
    import fcntl
except ImportError:  # Windows: no temporary is ever taken for a killed write's
    fcntl = None


def write_bytes_atomic(path: str | Path, data: bytes, sweep: bool = True) -> Path:
    """Write to a unique ``.NAME.*.tmp`` beside ``path``, fsync it, rename it over ``path``, fsync the dir; then
    remove what a killed write of ``path`` left (``sweep``: it lists the directory, ~6 µs an entry here, so a
    writer of thousands of files in one directory passes False and calls ``sweep_abandoned`` once instead)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():  # os.replace's IsADirectoryError named the temporary file
        raise MinisparkError(f"{path}: is a directory, where minispark writes this file; move it away")
    path.parent.mkdir(parents=True, exist_ok=True)
    with _named_by_directory(path.parent):
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        hold_lock(fd)  # held until the temporary has its name: a sweep after a kill takes only unheld ones
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would keep the file from every other user
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            os.replace(tmp, path)
    except BaseException as exc:
        failure = write_failure(exc, path, path.parent)  # before the unlink: a full disk has room again after it
        Path(tmp).unlink(missing_ok=True)
        if failure is not None:
            raise failure from None
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # make the rename itself durable
    finally:
        os.close(directory)
    if sweep:
        sweep_abandoned(path.parent, path.name)
    return path


def sweep_abandoned(directory: str | Path, name: str | None = None) -> None:
    """Remove the temporaries killed writes of ``directory/name`` (of any file in it: None) left behind."""
    directory = Path(directory)
    for stale in directory.glob(f".{glob.escape(name) if name else '*'}.*.tmp"):
        target = name or stale.name[1:-13]  # ".NAME.XXXXXXXX.tmp"
        if stale.name == f".{target}.{stale.name[-12:-4]}.tmp" and _TEMP_NAME.fullmatch(stale.name[-12:-4]) \
                and stale.is_file() and abandoned(stale):
            stale.unlink(missing_ok=True)


#: The random part of a temporary's name (``tempfile.mkstemp`` / ``mkdtemp``: eight of ``[a-z0-9_]``).
_TEMP_NAME = re.compile(r"[a-z0-9_]{8}")
#: A temporary younger than this is never taken for a killed write's (its writer may not hold its lock yet).
_TEMP_GRACE_S = 5.0


def hold_lock(fd: int) -> None:
    """Hold an exclusive lock on ``fd`` (a temporary being written) until it is closed; a kill releases it."""
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:  # a filesystem without locks (some NFS): the write goes on; abandoned cannot lock it either
        pass


def abandoned(temporary: Path) -> bool:
    """Whether the temporary ``temporary`` (a file or a directory) was left by a write that is no longer running:
    no live process holds its lock (:func:`hold_lock`), and it is not brand new."""
    if fcntl is None or temporary.is_symlink():  # cannot tell: kept
        return False
    try:
        fd = os.open(temporary, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return time.time() - os.fstat(fd).st_mtime > _TEMP_GRACE_S
    except OSError:  # held: a write in progress, in this process or another
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def _named_by_directory(directory: Path) -> Iterator[None]:
    """A temporary refused in ``directory`` reported as that directory refusing it, not as the random temporary
    name that never existed (os.access can pass a directory a write is then refused in: an ACL, NFS root squash)."""
    try:
        yield
    except PermissionError as exc:
        raise PermissionError(exc.errno, exc.strerror, str(directory)) from None


def _umask() -> int:
    """The process's umask (read by setting it, so set back at once): the modes an ordinary ``open`` and
    ``mkdir`` would give, which the temporaries of the atomic writes take instead of 0600 / 0700."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode())


def write_json_atomic(path: str | Path, data: Any) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def write_dir_atomic(path: str | Path, fill: Callable[[Path], None], by: str | None = None) -> Path:
    """Build a directory with ``fill(tmp)`` in a temporary sibling, record what it holds (and ``by``, the
    command writing it), then rename it over ``path``: a reader sees the old directory or the complete new
    one. An existing ``path`` is replaced only if minispark wrote everything in it, with the same ``by``
    when one is given (see :func:`foreign_entry`); else nothing is written."""
    path = refuse_symlink(path, "output directory")
    recover_dir(path)
    foreign = foreign_entry(path, by)
    if foreign is not None:
        raise MinisparkError(f"output directory {path}: {foreign}; minispark replaces only directories it wrote "
                             "itself: choose a new or empty directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    with _named_by_directory(path.parent):
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    held = os.open(tmp, os.O_RDONLY)
    hold_lock(held)  # until the end: recover_dir in another process never takes a temporary still being filled
    old, existed = path.with_name(f".{path.name}.old"), False
    try:
        tmp.chmod(0o777 & ~_umask())  # mkdtemp's 0700: a drafter another user's server loads must be listable
        _write_record(tmp, {}, by, partial=True)  # marks the temporary as ours, for recover_dir after a kill
        fill(tmp)
        for file in tmp.rglob("*"):  # safetensors' save_file creates 0600 files (0.8): the umask decides, as above
            if file.is_file() and not file.is_symlink():
                file.chmod(0o666 & ~_umask())
        _write_record(tmp, _hashes(tmp), by)
        existed = path.exists()
        if existed:
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)  # a directory cannot be renamed over a non-empty one
        os.replace(tmp, path)
        if existed:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as exc:
        if existed and not path.exists() and old.exists():  # Ctrl-C between the two renames: the old one goes back
            os.replace(old, path)
        if isinstance(exc, (NoSpaceError, FileTooLargeError)):  # a file fill() wrote atomically: name the output
            raise type(exc)(path) from None
        failure = write_failure(exc, path, tmp)
        if failure is not None:
            raise failure from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.close(held)
    return path


class NoSpaceError(MinisparkError):
    """The disk filled while writing ``path``; the half-written temporary file is already gone."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"{path}: no space left on the device (nothing half-written is kept); free some space "
                         "and run the command again")


class FileTooLargeError(MinisparkError):
    """A file grew past the largest this process may write (``ulimit -f``) or the filesystem holds."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"{path}: larger than this process may write (the file-size limit, ulimit -f, or the "
                         "filesystem's largest file; nothing half-written is kept); raise the limit or write elsewhere")


#: A full disk, an exhausted quota.
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
#: Free bytes below which a failed write is taken as a full disk: torch.save reports one as a bare
#: RuntimeError ("unexpected pos"), not as ENOSPC.
FULL_DISK_BYTES = 1 << 20
#: How Rust libraries (safetensors) spell the errno of a failed write in their own error type's message.
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def error_number(exc: BaseException) -> int | None:
    """The errno behind ``exc``: an OSError's own, or the one a Rust library's message names (safetensors
    deletes its half-written file, so the disk no longer looks full by the time the error is seen)."""
    if isinstance(exc, OSError):
        return exc.errno
    found = _RUST_OS_ERROR.search(str(exc)) if isinstance(exc, Exception) else None
    return int(found.group(1)) if found else None


def out_of_space(exc: BaseException, directory: str | Path) -> bool:
    """Whether ``exc``, raised while writing into ``directory``, is a full disk (or an exhausted quota)."""
    if error_number(exc) in NO_SPACE_ERRNOS:
        return True
    if not isinstance(exc, Exception):  # Ctrl-C is never a full disk
        return False
    try:
        return shutil.disk_usage(directory).free < FULL_DISK_BYTES
    except OSError:
        return False


def write_failure(exc: BaseException, path: str | Path, directory: str | Path) -> MinisparkError | None:
    """The one-line error for ``exc``, raised while writing ``path`` into ``directory``, when it is a full disk
    or a file past the size limit (None for any other failure)."""
    if out_of_space(exc, directory):
        return NoSpaceError(path)
    if error_number(exc) == errno.EFBIG or isinstance(exc, RuntimeError) and _past_size_limit(directory):
        return FileTooLargeError(path)
    return None


def _past_size_limit(directory: str | Path) -> bool:
    """Whether a file in ``directory`` (a temporary being filled) reached ``ulimit -f``: torch.save reports
    that as a bare RuntimeError, with no errno."""
    try:
        import resource
    except ImportError:  # not on Windows
        return False
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit == resource.RLIM_INFINITY or not Path(directory).is_dir():
        return False
    return any(p.is_file() and p.stat().st_size >= limit for p in Path(directory).iterdir())


#: The record ``write_dir_atomic`` leaves in each directory it writes: every file's sha256.
WRITTEN_MANIFEST = ".minispark-written.json"
WRITTEN_FORMAT = "minispark-written-files"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _hashes(directory: Path) -> dict[str, str]:
    """sha256 of every file under ``directory`` (by path relative to it), the record itself excepted."""
    return {p.relative_to(directory).as_posix(): file_sha256(p) for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != WRITTEN_MANIFEST}


def _write_record(directory: Path, files: dict[str, str], by: str | None = None, partial: bool = False) -> None:
    record = {"format": WRITTEN_FORMAT, "files": files} | ({"by": by} if by else {}) | (
        {"partial": True} if partial else {})
    write_json_atomic(directory / WRITTEN_MANIFEST, record)


def recover_dir(path: str | Path) -> None:
    """Undo what a kill (SIGKILL, a power cut: no handler runs) inside :func:`write_dir_atomic` left beside
    ``path``: the old directory, moved aside as ``.NAME.old`` just before the new one would have taken its place,
    goes back; temporaries ``.NAME.XXXXXXXX`` that minispark's record marks as its own and no live writer holds
    (:func:`abandoned`) are removed (a checkpoint's is the drafter's size). Nothing without minispark's record is
    touched, and nothing while another process is writing ``path``."""
    path = Path(path)
    if not path.parent.is_dir():
        return
    running = False
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*"):
        temporary = _TEMP_NAME.fullmatch(stale.name[len(path.name) + 2:]) is not None
        if not (temporary and stale.is_dir() and not stale.is_symlink() and _ours(stale)):
            continue
        if abandoned(stale):
            shutil.rmtree(stale, ignore_errors=True)
        else:  # another process is writing this directory now: its renames are its own
            running = True
    old = path.with_name(f".{path.name}.old")
    if not running and not os.path.lexists(path) and not old.is_symlink() and old.is_dir() and _record(old):
        os.replace(old, path)


def _ours(temporary: Path) -> bool:
    """Whether ``temporary`` (a ``write_dir_atomic`` temporary) is minispark's: its record says so, or a kill came
    inside that record's own first write, so the temporary of the record is all it holds."""
    if _record(temporary) is not None:
        return True
    entries = list(temporary.iterdir())
    prefix = f".{WRITTEN_MANIFEST}."
    return (len(entries) == 1 and entries[0].is_file() and not entries[0].is_symlink()
            and entries[0].name.startswith(prefix) and entries[0].name.endswith(".tmp")
            and _TEMP_NAME.fullmatch(entries[0].name[len(prefix):-4]) is not None)


def _record(directory: Path) -> dict[str, Any] | None:
    """``directory``'s record (``files``: the hashes minispark wrote; ``by``: the command, if it says), or None
    without a valid one."""
    record = directory / WRITTEN_MANIFEST
    if record.is_symlink() or not record.is_file():
        return None
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    ok = isinstance(data, dict) and data.get("format") == WRITTEN_FORMAT and isinstance(data.get("files"), dict)
    return data if ok else None


def _written(directory: Path) -> dict[str, str] | None:
    """The file hashes ``directory``'s record says minispark wrote, or None without a valid record."""
    record = _record(directory)
    return None if record is None else record["files"]


def written_by(directory: str | Path) -> str | None:
    """The command ``directory``'s record says wrote it (``import``, ``export``), or None (a drafter or
    checkpoint ``train`` wrote, a record from before commands were recorded, or no record)."""
    record = _record(Path(directory))
    by = None if record is None else record.get("by")
    return by if isinstance(by, str) else None


def format_manifest(directory: str | Path) -> tuple[str, str] | None:
    """(format, file name) of the first minispark manifest at the top of ``directory`` (a JSON object of at
    most 1 MiB whose ``format`` starts with ``minispark-``: a cache's, an answer set's, a mix's), or None."""
    directory = Path(directory)
    for candidate in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            data = json.loads(candidate.read_text()) if candidate.stat().st_size <= 2**20 else None
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and str(data.get("format", "")).startswith("minispark-"):
            return str(data["format"]), candidate.name
    return None


def minispark_artifact(directory: str | Path) -> tuple[str, str] | None:
    """What another minispark command left in ``directory`` (a drafter, a cache, a training run) as a phrase, and
    the top-level file that marks it; or None. A refusal to write there names it instead of calling minispark's
    own files someone else's."""
    directory = Path(directory)
    if _record(directory) is not None:
        by = written_by(directory)
        return (f"what `minispark {by}` wrote" if by else "a drafter or checkpoint minispark wrote"), WRITTEN_MANIFEST
    if (manifest := format_manifest(directory)) is not None:
        return f"a {manifest[0]} manifest ({manifest[1]})", manifest[1]
    if (directory / "train_config.json").is_file():
        return "a minispark training run (train_config.json)", "train_config.json"
    return None


def foreign_entry(path: str | Path, by: str | None = None) -> str | None:
    """Why ``path`` may not be replaced as a whole (one phrase naming the first file at fault), or None when
    it is absent, empty, or holds only files minispark's record lists, each unchanged since it was written;
    with ``by``, also written by that command (an export never replaces a trained drafter, say)."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        return "is not a directory minispark wrote"
    if not path.exists() or not any(path.iterdir()):
        return None
    written = _written(path)
    if written is None and (artifact := minispark_artifact(path)) is not None:
        return f"holds {artifact[0]}, not an earlier `minispark {by}` output" if by else f"holds {artifact[0]}"
    for entry in sorted(path.rglob("*")):
        name = entry.relative_to(path).as_posix()
        if entry.name == WRITTEN_MANIFEST and entry.parent == path:
            continue
        if entry.is_symlink() or not (entry.is_file() or entry.is_dir()):
            return f"holds {name}, which minispark did not write"
        if entry.is_dir():
            if written is None or not any(key.startswith(name + "/") for key in written):
                return f"holds {name}/, which minispark did not write"
            continue
        if written is None or name not in written:
            return f"holds {name}, which minispark did not write"
        if file_sha256(entry) != written[name]:
            return f"holds {name}, changed since minispark wrote it"
    other = written_by(path)
    if by is not None and other != by:
        what = f"what `minispark {other}` wrote" if other else "a drafter or checkpoint minispark wrote"
        return f"holds {what}, not an earlier `minispark {by}` output"
    return None


def adopt_written(directory: str | Path) -> None:
    """Record the files of ``directory`` as minispark's when it has no record yet: only for a directory the
    caller knows minispark wrote (a training run's own ``drafter/``, written before records existed)."""
    directory = Path(directory)
    if directory.is_dir() and not directory.is_symlink() and _written(directory) is None and all(
            p.is_file() and not p.is_symlink() for p in directory.iterdir()):
        _write_record(directory, _hashes(directory))


def record_written(directory: str | Path, name: str) -> None:
    """Add the file ``name`` just written into ``directory`` (e.g. ``calibration.json``) to the directory's
    record, when it has one: a directory minispark did not write gets no record."""
    directory = Path(directory)
    written = _written(directory)
    if written is not None:
        written[name] = file_sha256(directory / name)
        _write_record(directory, written, written_by(directory))


@contextlib.contextmanager
def removed_if_left_empty(path: str | Path | None) -> Iterator[None]:
    """If the block raises, remove ``path`` and each parent the block created, while still empty: a
    refused or failed command leaves no empty output directory behind. What existed before is never touched."""
    created = []
    for entry in () if path is None else (Path(path), *Path(path).parents):
        if os.path.lexists(entry):
            break
        created.append(entry)
    try:
        yield
    except BaseException:
        for entry in created:  # deepest first; rmdir removes only an empty directory, never a file or a link
            try:
                entry.rmdir()
            except FileNotFoundError:  # never made (a directory written whole makes only its parent)
                continue
            except OSError:
                break
        raise


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
