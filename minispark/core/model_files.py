"""Checks of the files a model is read from, before anything loads: drafter specs and directories, safetensors
that open whole, images that decode within bounds. One-line errors naming the option or file, as every check in
``core.checks`` (a target's directory and weights: ``target.target_ref``).

    .venv/bin/python -m pytest -q tests/cli/test_decode_input.py -k "drafter or image"
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from minispark.core.drafter_spec import HYBRID, DrafterSpec, DrafterSpecError
from minispark.core.errors import MinisparkError, OptionError, first_line, json_reason, option
from minispark.core.checks import dangling_link, edited_text, input_file

#: A model's or a drafter's configuration file (transformers', minispark's or DeepSpec's layout).
CONFIG_FILE = "config.json"

#: Larger images are refused before decoding (a small PNG can claim billions of pixels).
MAX_IMAGE_PIXELS = 64_000_000
#: Longer side over shorter side at most: Qwen-VL's resize (qwen-vl-utils, the processors) raises a ValueError
#: past it, from inside the target's encode.
MAX_IMAGE_ASPECT = 200


class UnreadableConfig(MinisparkError):
    """A ``config.json`` that is not a JSON object; ``reason`` says why."""

    def __init__(self, file: Path, reason: str) -> None:
        super().__init__(f"{file}: not readable JSON ({reason})")
        self.file, self.reason = file, reason


def read_config(directory: Path) -> dict[str, Any] | None:
    """``directory``'s ``config.json`` as a JSON object, or None when it has none: the one reader of the file,
    for a drafter directory (``model.drafter_dir``), its checks here, the target a drafter remembers
    (``target.remembered``) and the target loader asking whether it was given a drafter."""
    file = Path(directory) / CONFIG_FILE
    if not file.is_file():
        return None
    try:
        raw = json.loads(edited_text(file))
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: [[[[...]]]] nested too deeply
        raise UnreadableConfig(file, json_reason(exc)) from None
    return raw


def is_deepspec_config(raw: dict[str, Any]) -> bool:
    """A config in DeepSpec's layout: it names a ``*DSparkModel`` architecture."""
    architectures = raw.get("architectures")
    return isinstance(architectures, list) and any(str(name).endswith("DSparkModel") for name in architectures)


def is_minispark_config(raw: dict[str, Any]) -> bool:
    """A config in minispark's drafter layout: its own keys, no transformers ``model_type``."""
    return "model_type" not in raw and {"block_size", "feature_layers"} <= raw.keys()


def drafter_spec(spec: str | None, flag: str = option("drafter"), drafting: dict[str, Any] | None = None) -> DrafterSpec | None:
    """``spec`` parsed (:class:`DrafterSpec`), a trained drafter's directory checked to exist (what it holds:
    :func:`checkpoint`, which ``model.drafter_dir.open_drafter`` runs as it reads the directory). ``drafting``
    (flag → value, None when not given): flags that only shape drafting, refused with ``none``, which drafts
    nothing (they would be ignored without a word)."""
    if spec is None:
        return None
    try:
        parsed = DrafterSpec.parse(spec)
    except DrafterSpecError as exc:
        raise OptionError(f"{flag} {exc}") from None
    given = [name for name, value in (drafting or {}).items() if value is not None]
    if not parsed.drafts and given:
        raise OptionError(f"{flag} none drafts nothing, so {', '.join(given)} would have no effect; drop "
                             f"{'it' if len(given) == 1 else 'them'} or choose a drafter")
    if parsed.directory is None or parsed.kind == HYBRID:  # hybrid:DIR: checkpoint says "no such directory"
        return parsed
    dangling_link(parsed.directory, flag)
    if not parsed.directory.exists():
        raise OptionError(f"{flag} {spec}: no such directory (expected none, lookup, hybrid[:DIR] or a drafter "
                             "directory)")
    return parsed


def checkpoint(path: Path, flag: str) -> dict[str, Any]:
    """A drafter directory: exists, has a JSON ``config.json`` and at least one ``*.safetensors``. Returns the
    parsed ``config.json`` (read once: the drafter is built from it)."""
    if not path.exists():
        raise OptionError(f"{flag} {path}: no such directory")
    if not path.is_dir():
        raise OptionError(f"{flag} {path}: not a directory (expected a drafter directory)")
    try:
        data = read_config(path)
    except UnreadableConfig as exc:
        raise OptionError(f"{flag} {exc.file}: unreadable config ({exc.reason})") from None
    if data is None:
        raise OptionError(f"{flag} {path}: not a drafter directory (no {CONFIG_FILE}){_what_it_is(path)}")
    if "model_type" in data and not is_deepspec_config(data):
        # a target's directory: refused now, not once the target has loaded (seconds here, minutes for a 3B one)
        raise OptionError(f"{flag} {path}: a transformers model's config (model_type {data['model_type']!r}), not "
                             "a drafter's; give a drafter directory (train writes one)")
    if not any(path.glob("*.safetensors")):
        raise OptionError(f"{flag} {path}: no weights (no *.safetensors file)")
    safetensors_headers(path, flag)
    return data


def _what_it_is(path: Path) -> str:
    """What another minispark command left in ``path`` (a cache, an answer set, a training run: its drafter), as
    the end of a refusal; empty for anything else."""
    from minispark.core.atomic import minispark_artifact

    artifact = minispark_artifact(path)
    if artifact is None:
        return ""
    drafter = path / "drafter"  # a training run's final drafter (training.trainer.DRAFTER_DIR)
    return f"; it holds {artifact[0]}" + (f": its drafter is {drafter}" if (drafter / "config.json").is_file() else "")


def safetensors_headers(directory: Path, flag: str) -> None:
    """Every ``*.safetensors`` in ``directory`` opens, and its header covers the whole file: an
    interrupted copy (a truncated file) is refused in milliseconds, before anything loads."""
    from safetensors import SafetensorError, safe_open

    for file in sorted(directory.glob("*.safetensors")):
        if file.is_dir():
            raise OptionError(f"{flag} {file}: a directory, not a weights file; a broken copy? copy it again")
        try:
            with safe_open(str(file), framework="pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise OptionError(f"{flag} {file}: unreadable safetensors ({first_line(exc)}); a truncated or "
                                 "interrupted copy? copy it again") from None


def image(path: Path, flag: str = option("image")) -> Path:
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
                    raise OptionError(f"{flag} {path}: {width}x{height} pixels is too large "
                                         f"(at most {MAX_IMAGE_PIXELS:,}); resize it first")
                if max(width, height) > MAX_IMAGE_ASPECT * min(width, height):
                    raise OptionError(f"{flag} {path}: {width}x{height} pixels: one side is more than "
                                         f"{MAX_IMAGE_ASPECT} times the other, which vision-language targets refuse; "
                                         "crop or pad it")
                img.load()  # decodes: a truncated or corrupt file fails here, not inside the processor
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise OptionError(f"{flag} {path}: too many pixels (a decompression bomb?); resize it first") from None
    except UnidentifiedImageError:
        raise OptionError(f"{flag} {path}: not an image file PIL can read") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise OptionError(f"{flag} {path}: corrupt or truncated image ({first_line(exc)})") from None
    return path
