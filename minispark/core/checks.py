"""Checks of the values a user gives, run before anything expensive: one-line errors naming the option or file.

Every command checks its numbers, files and directories with these before it loads a model, so a typo costs
milliseconds and one line instead of a traceback minutes later; the configs check themselves with them as they
are built. Each check takes the name of the option it checks, an ``option`` reference (``core.errors``): the
CLI words it as its flag, a Python caller reads the library's name. Numbers, text, choices and paths are here;
comma-separated lists and numbers typed as text in ``core.check_lists``; drafter directories, weights files and
images in ``core.model_files``.

    .venv/bin/python -m pytest -q tests/cli/test_cli_input.py tests/cli/test_decode_input.py
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
from pathlib import Path
from typing import Any, Sequence

from minispark.core.defaults import DTYPE_SPELLINGS, MAX_INT  # flags are refused past MAX_INT
from minispark.core.errors import MinisparkError, OptionError, first_line, option
from minispark.core.writer_lock import check_free

DTYPES = tuple(DTYPE_SPELLINGS)
MODES = ("fixed", "threshold", "schedule", "tree")
DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
MAX_SEED = 2**32 - 1


# ---------------------------------------------------------------------- numbers
def number(value: float, flag: str, low: float | None = None, high: float | None = None, *,
           low_open: bool = False) -> float:
    """``value`` if finite and within [low, high] (``low_open``: (low, high]); else a one-line error."""
    ok = isinstance(value, (int, float)) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        if low is not None and high is not None:
            span = f" in {'(' if low_open else '['}{_fmt(low)}, {_fmt(high)}]"
        elif low is not None:  # no "[1, inf]": a finite number has no infinite end
            span = f" {'>' if low_open else '>='} {_fmt(low)}"
        else:
            span = f" <= {_fmt(high)}" if high is not None else ""
        raise OptionError(f"{flag} must be a finite number{span}, got {value}")
    return value


def integer(value: int | None, flag: str, minimum: int, maximum: int | None = None) -> int | None:
    """``value`` (None passes: "use the default") if it is in [minimum, maximum] (default maximum:
    ``MAX_INT``, past which torch and numpy overflow a C long instead of refusing)."""
    maximum = MAX_INT if maximum is None else maximum
    if value is not None and value < minimum:
        raise OptionError(f"{flag} must be >= {minimum}, got {value}")
    if value is not None and value > maximum:
        raise OptionError(f"{flag} must be at most {maximum}, got {value}")
    return value


def seed(value: int | None, flag: str = option("seed")) -> int | None:
    """A random seed in [0, MAX_SEED] (None: a fresh one): generators and seed arithmetic take 32 bits."""
    return integer(value, flag, 0, MAX_SEED)


def temperature(value: float, flag: str = option("temperature")) -> float:
    """A sampling temperature in [0, ``defaults.MAX_TEMPERATURE``] (0: greedy), and a positive one at least
    ``defaults.MIN_TEMPERATURE`` (below it the float32 logits divided by it overflow, or it rounds to 0)."""
    from minispark.core.defaults import MAX_TEMPERATURE, MIN_TEMPERATURE

    number(value, flag, 0.0, MAX_TEMPERATURE)
    if 0 < value < MIN_TEMPERATURE:
        raise OptionError(f"{flag} {value:g}: a positive temperature must be at least {MIN_TEMPERATURE:g} (below "
                             f"it the logits overflow; {option('temperature')} 0 is greedy decoding)")
    return value


def sampling(temp: float, top_p: float, top_k: int) -> None:
    """A temperature, top-p and top-k (``SamplingConfig`` checks itself with this: the one home of the ranges)."""
    temperature(temp)
    number(top_p, option("top_p"), 0.0, 1.0, low_open=True)
    integer(top_k, option("top_k"), 0)


def threshold_mode(threshold: float | None, mode: str | None, flag: str = option("threshold")) -> None:
    """A ``--threshold`` given (not None) with a length mode other than ``threshold`` (None: not chosen yet), which
    would ignore it without a word."""
    if threshold is not None and mode is not None and mode != "threshold":
        raise OptionError(f"{flag} {threshold:g}: only the threshold mode uses it, and this run decodes in {mode} "
                             f"mode; drop it or give {option('mode')} threshold")


def schedule_mode(sps: Path | None, strict: bool, mode: str | None) -> None:
    """``--sps`` or ``--strict`` given with a length mode other than ``schedule`` or ``tree`` (None: not chosen
    yet): only those read an SPS table, so either was ignored without a word (a table of another setup warned)."""
    given = [flag for flag, value in ((option("sps"), sps), (option("strict"), strict)) if value]
    if given and mode is not None and mode not in ("schedule", "tree"):
        them = "it" if len(given) == 1 else "them"
        raise MinisparkError(f"{' and '.join(given)}: only the schedule and tree modes read an SPS table, and this run "
                             f"decodes in {mode} mode; drop {them} or give {option('mode')} tree")


def choice(value: str | None, flag: str, choices: Sequence[str]) -> str | None:
    if value is not None and value not in choices:
        raise OptionError(f"{flag} {value}: choose from {', '.join(choices)}")
    return value


def device(value: str | None) -> str | None:
    """A device name this machine has (checked before a model loads onto it)."""
    if value is None or value in ("auto", "cpu"):
        return value
    if not DEVICE_PATTERN.fullmatch(value):
        raise MinisparkError(f"{option('device')} {value!r}: expected cpu, cuda, cuda:N or mps")
    import torch

    if value == "mps" and not (torch.backends.mps.is_built() and torch.backends.mps.is_available()):
        raise MinisparkError(f"{option('device')} mps: Apple's MPS is not available on this machine (use cpu)")
    if value.startswith("cuda"):
        if not torch.cuda.is_available():
            raise MinisparkError(f"{option('device')} {value}: CUDA is not available on this machine")
        index = int(value.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise MinisparkError(f"{option('device')} {value}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                                 f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    return value


def listen_address(host: str, port: int) -> int:
    """``--host``/``--port`` a server can bind now (checked before the model loads: a typo in the host
    or a port in use costs milliseconds, not a model load that ends in uvicorn's error). Returns the port
    to serve on: ``port``, or for 0 ("any free port") the one the system picked, so the URL printed is real."""
    import socket

    integer(port, option("port"), 0, 65535)
    if not host.strip():  # getaddrinfo's own error printed as "--host : not an address"
        raise MinisparkError(f"{option('host')} {host!r}: empty; give an address, e.g. 127.0.0.1 (this machine only) "
                             "or 0.0.0.0 (every interface)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise MinisparkError(f"{option('host')} {host}: not an address of this machine ({first_line(exc)})") from None
    family, kind, proto, _, address = infos[0]
    try:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(address)
            return probe.getsockname()[1]
    except OSError as exc:
        raise MinisparkError(f"{option('host')} {host} {option('port')} {port}: cannot listen there ({exc.strerror or exc})") from None


def lone_surrogate(text: str) -> int | None:
    """Where ``text`` holds a lone surrogate (half a character: an undecodable command-line byte, a JSON
    ``\\udce9`` escape), which UTF-8 cannot encode, no tokenizer encodes and no model output matches; None if
    nowhere."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def utf8_text(text: str, flag: str) -> str:
    """``text`` if it is UTF-8: bytes that are not (a Latin-1 ``é`` in a command line) reach Python as lone
    surrogates, which no tokenizer encodes and no model output can ever match."""
    index = lone_surrogate(text)
    if index is not None:
        byte = ord(text[index]) - 0xDC00 if 0xDC80 <= ord(text[index]) <= 0xDCFF else None
        what = f" (byte 0x{byte:02x})" if byte is not None else ""
        raise OptionError(f"{flag}: not UTF-8 text{what} at character {index + 1}; give it in UTF-8, "
                             "as your terminal or editor can encode it")
    return text


def control_character(text: str) -> str | None:
    """The first control character of ``text`` (a line break, a tab, DEL, ...), or None."""
    return next((char for char in text if ord(char) < 0x20 or ord(char) == 0x7F), None)


def one_line(text: str, flag: str) -> str:
    """Free text kept on one line (a note stored in metadata): UTF-8, no control character."""
    bad = control_character(utf8_text(text, flag))
    if bad is not None:
        raise OptionError(f"{flag}: holds control character {bad!r}; give it on one line, as plain text")
    return text


def prompt(text: str | None, flag: str = option("prompt")) -> str | None:
    if text is not None and not text.strip():
        raise OptionError(f"{flag}: empty (omit it for the built-in prompt)")
    return text if text is None else utf8_text(text, flag)


def system_message(text: str | None, flag: str = option("system")) -> str | None:
    """Refuse an empty or blank system message, as ``prompt`` refuses an empty prompt: it would silently
    mean "none", which many chat templates fill with a default system message of their own."""
    if text is not None and not text.strip():
        raise OptionError(f"{flag}: empty (omit it for the chat template's default system message, if any)")
    return text if text is None else utf8_text(text, flag)


def stop_strings(stops: Sequence[str], flag: str = option("stop")) -> list[str]:
    """Refuse an empty stop string: it matches at every position, so the answer would end after one token."""
    for stop in stops:
        if stop == "":
            raise OptionError(f"{flag}: empty string (it would end every answer after its first token)")
        utf8_text(stop, flag)
    return list(stops)


# ---------------------------------------------------------------------- files and directories
def edited_text(path: Path) -> str:
    """The text of a file people edit by hand (a recipe, an SPS table, a drafter's config.json, target.json or
    calibration.json): UTF-8, a leading byte-order mark dropped as prompt files drop it (Windows editors write one;
    JSON's reader refused it as 'Unexpected UTF-8 BOM (decode using utf-8-sig)', TOML's as 'Invalid statement (at
    line 1, column 1)')."""
    return path.read_text(encoding="utf-8-sig")


def dangling_link(path: Path, flag: str) -> None:
    """Refuse a symlink that leads nowhere (or loops) as one, not as "not found": the name the user sees exists
    (and a name too long for the file system, whose OSError every test of it raises)."""
    too_long = name_too_long(str(path))
    if too_long is not None:
        raise OptionError(f"{flag} {str(path)[:60]!r}...: {too_long}")
    if path.is_symlink() and not path.exists():
        raise OptionError(f"{flag} {path}: is a symlink to {os.readlink(path)}, which does not exist (or loops)")


def input_file(path: Path | None, flag: str, *, allow_empty: bool = False) -> Path | None:
    """An existing, readable, non-empty regular file."""
    if path is None:
        return None
    dangling_link(path, flag)
    if not path.exists():
        raise OptionError(f"{flag} {path}: file not found")
    if not path.is_file() and not path.is_dir():  # `--prompts <(grep ...)`: a pipe, read once, where it is read twice
        raise OptionError(f"{flag} {path}: not a file but a pipe or a device (as <(...) gives); minispark reads "
                             "it more than once: save it to a file first")
    if not path.is_file():
        raise OptionError(f"{flag} {path}: not a file")
    if not allow_empty and path.stat().st_size == 0:
        raise OptionError(f"{flag} {path}: empty file")
    if not os.access(path, os.R_OK):
        raise OptionError(f"{flag} {path}: not readable")
    return path


HOST_NAME = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?", re.I)


def host_name(name: str, flag: str) -> str:
    """A DNS host name (labels of letters, digits and inner hyphens), as a Host header would carry it."""
    if len(name) > 253 or not HOST_NAME.fullmatch(name):
        raise OptionError(f"{flag} {name!r}: not a host name (letters, digits, hyphens and dots, e.g. "
                             "myhost.lan; no port, no scheme)")
    return name


def input_dir(path: Path | None, flag: str) -> Path | None:
    if path is None:
        return None
    dangling_link(path, flag)
    if not path.exists():
        raise OptionError(f"{flag} {path}: no such directory")
    if not path.is_dir():
        raise OptionError(f"{flag} {path}: not a directory")
    return path


def output_dir(path: Path | None, flag: str = option("out")) -> Path | None:
    """A directory to write into: not an existing file, nor under one, nor a symlink that leads nowhere."""
    if path is None:
        return None
    unexpanded_home(path, flag)
    if path.exists() and not path.is_dir():
        raise OptionError(f"{flag} {path}: is a file, not a directory")
    for place in (path, *path.parents):
        if place.is_symlink() and not place.exists():  # mkdir would fail with "File exists"
            raise OptionError(f"{flag} {path}: {'' if place == path else f'{place} '}is a symlink to "
                                 f"{os.readlink(place)}, which does not exist (or loops); fix the link or "
                                 "choose another path")
        if place != path and place.exists() and not place.is_dir():
            raise OptionError(f"{flag} {path}: {place} is a file, not a directory")
    writable(path, flag)
    return path


def unexpanded_home(path: Path, flag: str) -> None:
    """Refuse an output path that starts with a ``~`` the shell left as typed (``~nosuchuser/x``, or a quoted
    ``"~/x"``) when no such directory exists here: writing would make a directory literally named ``~...`` in the
    working directory instead of under a home."""
    first = path.parts[0] if path.parts else ""
    if first.startswith("~") and not Path(first).exists():
        raise OptionError(f"{flag} {path}: {first} was not expanded to a home directory (no such user, or it was "
                             "quoted); give the full path")


def writable(path: Path, flag: str, named: Path | None = None) -> None:
    """Refuse a directory to write into (``path``, or the nearest one of its parents that exists, where it would
    be made) that this user may not write: caught before anything loads, not by the last write of a long run
    (bench --plot wrote its figure after the whole bench, naming its temporary file). ``named``: what the flag
    gave, when ``path`` is the directory of that file."""
    named = named or path
    place = next((p for p in (path, *path.parents) if p.exists()), None)
    if place is not None and place.is_dir() and not os.access(place, os.W_OK | os.X_OK):
        where = "" if place == named else f"{place} "
        if read_only_file_system(place):  # not a matter of this user's permissions: no one may write there
            raise OptionError(f"{flag} {named}: {where}is on a read-only file system; write elsewhere")
        raise OptionError(f"{flag} {named}: {where}is not writable by this user (permission denied)")


def read_only_file_system(path: str | Path) -> bool:
    """Whether ``path`` (or, for one not made yet, the nearest existing directory above it) lies on a file system
    mounted read-only."""
    try:  # also where a directory on the path may not be searched: asked while wording that very error
        place = next((p for p in (Path(path), *Path(path).parents) if p.exists()), None)
        return place is not None and bool(os.statvfs(place).f_flag & os.ST_RDONLY)
    except OSError:  # a file system that cannot say (or a path gone since): not known to be read-only
        return False


def file_name(text: str, flag: str) -> str:
    """``text`` as typed, unless it ends with a path separator: ``name/`` names a directory, and a ``Path`` made
    from it drops the slash, so the file would silently be written as ``name``."""
    if text.endswith(("/", os.sep)):
        raise OptionError(f"{flag} {text}: names a directory (it ends with '/'); give a file name")
    return text


def typed_path(text: str, flag: str, *, names_file: bool = False) -> str:
    """A path as typed on the command line, before it becomes a ``Path``: no control character (a line break or
    tab pasted into a name splits every log line, listing and shell command that shows it; always a quoting
    slip), and for a flag that ``names_file``, no trailing '/' (``file_name``: a ``Path`` drops it, so
    ``--plot figs/`` was checked, and would be written, as ``figs``)."""
    if not text.strip():  # Path("") is ".": the current directory would be read, written or blamed
        raise OptionError(f"{flag} {text!r}: empty; give a path")
    bad = control_character(text)
    if bad is not None:
        what = {"\n": "a line break", "\r": "a carriage return", "\t": "a tab"}.get(bad, f"control character {bad!r}")
        raise OptionError(f"{flag} {text!r}: a path with {what} in it (a quoting slip?); give the path on one "
                             "line, without control characters")
    too_long = name_too_long(text)
    if too_long is not None:
        raise OptionError(f"{flag} {text[:60]!r}...: {too_long}")
    return file_name(text, flag) if names_file else text


#: What Linux file systems allow: bytes in one name of a path, and in a whole path.
NAME_MAX, PATH_MAX = 255, 4095


def name_too_long(text: str) -> str | None:
    """Why ``text`` cannot be a path on this machine (a name past NAME_MAX bytes, the whole past PATH_MAX), or None:
    said before anything loads, not as the OSError of the first write, after the run."""
    longest = max((len(os.fsencode(part)) for part in text.split("/")), default=0)
    if longest > NAME_MAX:
        return f"a name of {longest} bytes in the path; a file system allows at most {NAME_MAX}"
    if len(os.fsencode(text)) > PATH_MAX:
        return f"a path of {len(os.fsencode(text))} bytes; a file system allows at most {PATH_MAX}"
    return None


def output_file(path: Path | None, flag: str, inputs: dict[str, Any] | None = None) -> Path | None:
    """A file to write: not an existing directory, its parent not a file; with ``inputs`` (flag → the file
    or directory it names; None, or a value that is no path on disk, is skipped), neither one of those
    files nor inside one of those directories, so an output never replaces what the command reads."""
    if path is None:
        return None
    unexpanded_home(path, flag)
    if path.is_dir():
        raise OptionError(f"{flag} {path}: is a directory; give a file name")
    writable(path.parent, flag, named=path)
    output_dir(path.parent, flag)
    return outside_inputs(path, flag, inputs or {})


def outside_inputs(path: Path, flag: str, inputs: dict[str, Any]) -> Path:
    """``path`` (an output file or directory) unless it is one of ``inputs`` (flag → the file or directory it
    names; None, or a value that is no path on disk, is skipped) or inside one of those directories: an
    output never replaces, or lands among, what the command reads (followed through symlinks)."""
    out = Path(path).resolve()
    for name, value in inputs.items():
        source = Path(str(value).removeprefix("hybrid:")) if value is not None else None
        if source is None or not source.exists():
            continue
        what = "directory" if source.is_dir() else "file"
        if out == source.resolve():
            raise OptionError(f"{flag} {path}: is the {name} {what}; write it elsewhere")
        if source.is_dir() and source.resolve() in out.parents:
            raise OptionError(f"{flag} {path}: is inside the {name} directory {source}; write it elsewhere")
    return path


def resumable_dir(path: Path, flag: str, writes: Sequence[str]) -> Path:
    """An output directory a command fills in place and resumes (``cache``, ``answers``, ``demo --train``):
    new, empty, or holding only entries named as that command names what it writes there (``writes``: glob
    patterns of top-level names, its temporary files included). Anything else is someone's data, which the
    command would write beside, so it is refused before anything loads; the command's own resume checks
    then decide whether what is named like its output is (a manifest's format, a shard's hashes)."""
    output_dir(path, flag)
    not_shipped(path, flag, "choose a directory of your own")  # cache/answers/demo wrote into drafters/ unsaid
    check_free(path, flag)  # another run writing it: refused before this one's target loads
    if not path.is_dir():
        return path
    from minispark.core.atomic import minispark_artifact

    foreign = [entry for entry in sorted(path.iterdir())
               if not any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in writes)]
    artifact = minispark_artifact(path) if foreign else None
    if artifact is not None and artifact[1] in {entry.name for entry in foreign}:  # minispark's own, of another kind
        raise OptionError(f"{flag} {path}: holds {artifact[0]}, not this command's output; choose a new or empty "
                             "directory")
    if foreign:
        name = foreign[0].name + ("/" if foreign[0].is_dir() and not foreign[0].is_symlink() else "")
        raise OptionError(f"{flag} {path}: holds {name}, which minispark did not write; minispark writes only "
                             "into a new or empty directory, or one it wrote itself: choose another directory")
    return path


def replaceable_dir(path: Path, flag: str, source: Path | None = None, by: str | None = None) -> Path:
    """An output directory a command replaces as a whole: new, empty, or holding only files minispark's
    record says it wrote there, unchanged, and with ``by`` written by that command (``atomic.foreign_entry``);
    anything else is someone's data. With ``source``, also neither that input directory, nor inside it, nor
    holding it."""
    from minispark.core.atomic import foreign_entry

    output_dir(path, flag)
    not_shipped(path, flag, "choose a directory of your own")
    if source is not None:
        out, src = Path(path).resolve(), Path(source).resolve()
        if out == src or src in out.parents:
            raise OptionError(f"{flag} {path}: is {'' if out == src else 'inside '}the source {source}; "
                                 "choose a directory outside it")
        if out in src.parents:
            raise OptionError(f"{flag} {path}: holds the source {source}; choose another directory")
    foreign = foreign_entry(path, by)
    if foreign is not None:
        raise OptionError(f"{flag} {path}: {foreign}; choose a new or empty directory")
    return path


def expand_user(path: str | Path, flag: str) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded; a user with no home is one line, not pathlib's
    RuntimeError."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        raise OptionError(f"{flag} {path}: {str(path).split('/')[0]} names no user's home directory") from None


def _fmt(value: float) -> str:
    return f"{value:g}"


def not_shipped(path: Path, flag: str, advice: str) -> None:
    """Refuse to write at or under the drafters, SPS tables, recipes or prompt files shipped with minispark
    (followed through symlinks): shipped files are never written by a user command. ``advice`` says what to
    do instead."""
    from minispark.core.defaults import PROMPTS_DIR, RECIPE_DIR, SHIPPED_DRAFTERS, SHIPPED_TABLES

    resolved = Path(path).resolve()
    for root, what in ((SHIPPED_DRAFTERS, "drafters"), (SHIPPED_TABLES, "SPS tables"), (RECIPE_DIR, "recipes"),
                       (PROMPTS_DIR, "prompt files")):
        if resolved == root.resolve() or root.resolve() in resolved.parents:
            raise OptionError(f"{flag} {path}: the {what} shipped with minispark ({root}) are never rewritten; "
                                 f"{advice}")
