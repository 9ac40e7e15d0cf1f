"""Argument checks the CLI runs before anything expensive: one-line errors naming the flag or file.

Every command checks its numbers, files and directories here before it loads a model, so a typo
costs milliseconds and prints one ``error: --flag ...`` line instead of a traceback minutes later.
The library keeps its own checks (dataclass ``__post_init__``); these only fail earlier and name
the flag.

    .venv/bin/python -m pytest -q tests/test_bad_input.py
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from pathlib import Path
from typing import Iterable, Sequence

from minispark.errors import MinisparkError

DTYPES = ("fp32", "bf16", "fp16")
MODES = ("fixed", "threshold", "schedule")
DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
#: Larger images are refused before decoding (a small PNG can claim billions of pixels).
MAX_IMAGE_PIXELS = 64_000_000
#: Weight files that unpickle arbitrary Python objects when loaded.
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
ALLOW_PICKLE_ENV = "MINISPARK_ALLOW_PICKLE_WEIGHTS"


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
        left = "(" if low_open else "["
        span = f" in {left}{_fmt(low, '-inf')}, {_fmt(high, 'inf')}]" if low is not None or high is not None else ""
        raise MinisparkError(f"{flag} must be a finite number{span}, got {value}")
    return value


def integer(value: int | None, flag: str, minimum: int) -> int | None:
    """``value`` (None passes: "use the default") if it is at least ``minimum``."""
    if value is not None and value < minimum:
        raise MinisparkError(f"{flag} must be >= {minimum}, got {value}")
    return value


def sampling(temperature: float, top_p: float, top_k: int) -> None:
    number(temperature, "--temperature", 0.0)
    number(top_p, "--top-p", 0.0, 1.0, low_open=True)
    integer(top_k, "--top-k", 0)


def floats(text: str, flag: str, *, low: float | None = None, high: float | None = None,
           low_open: bool = False) -> list[float]:
    """Comma-separated finite numbers (at least one), each in the given range."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise MinisparkError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise MinisparkError(f"{flag}: expected at least one number, got {text!r}")
    for value in values:
        number(value, flag, low, high, low_open=low_open)
    return values


def sps_values(text: str, flag: str = "--sps-inline") -> list[float]:
    """Steps per second for 1, 2, 3, ... tokens: positive, and never rising with more tokens (a
    verify of n + 1 tokens cannot be faster than one of n; a flat curve means free extra tokens)."""
    values = floats(text, flag, low=0.0, low_open=True)
    for n, (before, after) in enumerate(zip(values, values[1:]), start=2):
        if after > before:
            raise MinisparkError(f"{flag}: steps per second must not increase with more tokens "
                                 f"({before:g} for {n - 1}, {after:g} for {n})")
    return values


def choice(value: str | None, flag: str, choices: Sequence[str]) -> str | None:
    if value is not None and value not in choices:
        raise MinisparkError(f"{flag} {value}: choose from {', '.join(choices)}")
    return value


def device(value: str | None) -> str | None:
    if value is not None and not DEVICE_PATTERN.fullmatch(value):
        raise MinisparkError(f"--device {value!r}: expected cpu, cuda, cuda:N or mps")
    return value


def prompt(text: str | None, flag: str = "--prompt") -> str | None:
    if text is not None and not text.strip():
        raise MinisparkError(f"{flag}: empty (omit it for the built-in prompt)")
    return text


def stop_strings(stops: Sequence[str], flag: str = "--stop") -> list[str]:
    """Refuse an empty stop string: it matches at every position, so the answer would end after one token."""
    for stop in stops:
        if stop == "":
            raise MinisparkError(f"{flag}: empty string (it would end every answer after its first token)")
    return list(stops)


# ---------------------------------------------------------------------- files and directories
def input_file(path: Path | None, flag: str, *, allow_empty: bool = False) -> Path | None:
    """An existing, readable, non-empty regular file."""
    if path is None:
        return None
    if not path.exists():
        raise MinisparkError(f"{flag} {path}: file not found")
    if not path.is_file():
        raise MinisparkError(f"{flag} {path}: not a file")
    if not allow_empty and path.stat().st_size == 0:
        raise MinisparkError(f"{flag} {path}: empty file")
    if not os.access(path, os.R_OK):
        raise MinisparkError(f"{flag} {path}: not readable")
    return path


def input_dir(path: Path | None, flag: str) -> Path | None:
    if path is None:
        return None
    if not path.exists():
        raise MinisparkError(f"{flag} {path}: no such directory")
    if not path.is_dir():
        raise MinisparkError(f"{flag} {path}: not a directory")
    return path


def output_dir(path: Path | None, flag: str = "--out") -> Path | None:
    """A directory to write into: not an existing file, nor under one."""
    if path is None:
        return None
    if path.exists() and not path.is_dir():
        raise MinisparkError(f"{flag} {path}: is a file, not a directory")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise MinisparkError(f"{flag} {path}: {parent} is a file, not a directory")
    return path


def output_file(path: Path | None, flag: str) -> Path | None:
    """A file to write: not an existing directory, its parent not a file."""
    if path is None:
        return None
    if path.is_dir():
        raise MinisparkError(f"{flag} {path}: is a directory; give a file name")
    output_dir(path.parent, flag)
    return path


def replaceable_dir(path: Path, flag: str, ours: Iterable[str]) -> Path:
    """An output directory a command replaces as a whole: new, empty, or holding only files named
    ``ours`` (what the command itself writes). Anything else is someone's data: refuse."""
    output_dir(path, flag)
    if path.is_dir():
        foreign = sorted(p.name for p in path.iterdir() if p.name not in set(ours) or not p.is_file()
                         or p.is_symlink())
        if foreign:
            raise MinisparkError(f"{flag} {path}: holds files this command did not write ({foreign[0]}); "
                                 "choose a new or empty directory")
    return path


def drafter_spec(spec: str | None, flag: str = "--drafter") -> str | None:
    """``none``, ``lookup``, or a directory with ``config.json`` and safetensors weights."""
    if spec is None or spec in ("none", "lookup"):
        return spec
    if not Path(spec).exists():
        raise MinisparkError(f"{flag} {spec}: no such directory (expected none, lookup or a drafter directory)")
    checkpoint(Path(spec), flag)
    return spec


def checkpoint(path: Path, flag: str) -> Path:
    """A drafter directory: exists, has a JSON ``config.json`` and at least one ``*.safetensors``."""
    if not path.exists():
        raise MinisparkError(f"{flag} {path}: no such directory")
    if not path.is_dir():
        raise MinisparkError(f"{flag} {path}: not a directory (expected a drafter directory)")
    config = path / "config.json"
    if not config.is_file():
        raise MinisparkError(f"{flag} {path}: not a drafter directory (no config.json)")
    try:
        if not isinstance(json.loads(config.read_text()), dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:
        raise MinisparkError(f"{flag} {config}: unreadable config ({str(exc).splitlines()[0]})") from None
    if not any(path.glob("*.safetensors")):
        raise MinisparkError(f"{flag} {path}: no weights (no *.safetensors file)")
    return path


def image(path: Path, flag: str = "--image") -> Path:
    """A decodable image of at most ``MAX_IMAGE_PIXELS``: the header is read first, so a
    decompression bomb is refused before a single pixel is decoded."""
    from PIL import Image, UnidentifiedImageError

    input_file(path, flag)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                width, height = img.size
                if width * height > MAX_IMAGE_PIXELS:
                    raise MinisparkError(f"{flag} {path}: {width}x{height} pixels is too large "
                                         f"(at most {MAX_IMAGE_PIXELS:,}); resize it first")
                img.load()  # decodes: a truncated or corrupt file fails here, not inside the processor
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise MinisparkError(f"{flag} {path}: too many pixels (a decompression bomb?); resize it first") from None
    except UnidentifiedImageError:
        raise MinisparkError(f"{flag} {path}: not an image file PIL can read") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise MinisparkError(f"{flag} {path}: corrupt or truncated image ({_first_line(exc)})") from None
    return path


# ---------------------------------------------------------------------- targets
def target_location(source: str) -> Path | None:
    """The local directory ``source`` names, or None for a hub id; refuses a path that is clearly
    meant as one but does not exist (so a typo never downloads a stranger's model)."""
    location = Path(source).expanduser()
    if location.is_dir():
        return location
    if location.exists():
        raise MinisparkError(f"--target {source}: not a directory (give a model directory or a hub id org/name)")
    parts = source.split("/")
    looks_like_path = (source.startswith((".", "/", "~")) or len(parts) != 2 or not all(parts)
                       or Path(parts[0]).expanduser().is_dir() or os.sep != "/" and os.sep in source)
    if looks_like_path:
        raise MinisparkError(f"--target {source}: no such directory")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on") and not _hub_cached(source):
        raise MinisparkError(f"--target {source}: no such directory, and not a hub id in the local Hugging Face "
                             "cache (HF_HUB_OFFLINE is set)")
    return None


def _hub_cached(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repo id
        return False


def safetensors_only(location: Path, source: str) -> None:
    """Refuse a model directory whose weights are only pickle files (``*.bin``), unless allowed."""
    if any(location.glob("*.safetensors")) or allow_pickle_weights():
        return
    pickled = sorted(p.name for pattern in PICKLE_WEIGHTS for p in location.glob(pattern))
    if pickled:
        raise MinisparkError(f"--target {source}: weights are pickle files ({pickled[0]}), which can run code when "
                             "loaded; convert them to safetensors, or pass --allow-pickle-weights if you trust them")


def allow_pickle_weights() -> bool:
    """Whether ``minispark --allow-pickle-weights`` (or its environment variable) was given."""
    return os.environ.get(ALLOW_PICKLE_ENV, "") == "1"


def _fmt(value: float | None, default: str) -> str:
    return default if value is None else f"{value:g}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def not_shipped(path: Path, flag: str) -> None:
    """Refuse to write into a drafter shipped with minispark (``calibrate`` stores calibration.json in
    the drafter directory): shipped files are never written by a user command; calibrate a copy."""
    from minispark.defaults import SHIPPED_DRAFTERS

    resolved = Path(path).resolve()
    if resolved == SHIPPED_DRAFTERS.resolve() or SHIPPED_DRAFTERS.resolve() in resolved.parents:
        raise MinisparkError(f"{flag} {path}: a drafter shipped with minispark is never rewritten; copy it "
                             f"(cp -r {path} my-drafter) and calibrate the copy")
