"""Which target a ``--target`` (or ``load_target``'s ``source``) names, decided in one place: the embedded default
(omitted, empty, ``embedded`` or its model name), a local model directory, or a Hugging Face hub id. A path that
is clearly meant as one but does not exist is refused here, so a typo never downloads a stranger's model; a local
directory's weights are checked before they load (safetensors that open whole; pickle files only when allowed).

    python -c "from minispark.target.target_ref import TargetRef; print(TargetRef.parse('embedded'))"
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from minispark.core.checks import dangling_link, expand_user
from minispark.core.defaults import PICKLE_WEIGHTS
from minispark.core.errors import MinisparkError, option
from minispark.core.model_files import safetensors_headers
from minispark.core.settings import settings
from minispark.target.embedded import EMBEDDED_NAME, EMBEDDED_SPELLINGS, embedded_model_dir

EMBEDDED, DIRECTORY, HUB = "embedded", "directory", "hub"


@dataclass(frozen=True)
class TargetRef:
    """``kind`` is embedded, directory or hub; ``source`` the text as given; ``directory`` a local model's."""

    kind: str
    source: str | None
    directory: Path | None = None

    @classmethod
    def parse(cls, source: str | None) -> TargetRef:
        if source in EMBEDDED_SPELLINGS:
            return cls(EMBEDDED, source)
        location = target_location(source)  # refuses a missing path; None for a hub id
        return cls(HUB, source) if location is None else cls(DIRECTORY, source, location)

    @property
    def name(self) -> str:
        """How a loaded target is named: the embedded model's name, a directory's resolved path (every spelling
        of it is one target), or the hub id."""
        if self.kind == EMBEDDED:
            return EMBEDDED_NAME
        return str(self.directory.resolve()) if self.kind == DIRECTORY else str(self.source)

    def local_directory(self) -> Path | None:
        """The model directory on this machine (the embedded target's is converted on first use); None for a
        hub id, which only a load may fetch."""
        return embedded_model_dir() if self.kind == EMBEDDED else self.directory


def target_location(source: str) -> Path | None:
    """The local directory ``source`` names, or None for a hub id; refuses a path that is clearly
    meant as one but does not exist (so a typo never downloads a stranger's model)."""
    location = expand_user(source, option("target"))
    if location.is_dir():
        return location
    dangling_link(location, option("target"))
    if location.exists():
        raise MinisparkError(f"{option('target')} {source}: not a directory (give a model directory or a hub id org/name)")
    parts = source.split("/")
    looks_like_path = (source.startswith((".", "/", "~")) or len(parts) != 2 or not all(parts)
                       or Path(parts[0]).expanduser().is_dir() or os.sep != "/" and os.sep in source)
    if looks_like_path:
        raise MinisparkError(f"{option('target')} {source}: no such directory")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on") and not _hub_cached(source):
        raise MinisparkError(f"{option('target')} {source}: no such directory, and not a hub id in the local Hugging Face "
                             "cache (HF_HUB_OFFLINE is set)")
    return None


def _hub_cached(repo_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repo id
        return False


def target_weights(location: Path, source: str) -> None:
    """A local model directory's weights: safetensors that open whole (pickle files ``*.bin`` only
    with ``--allow-pickle-weights``), not none at all."""
    if not (location / "config.json").is_file():
        raise MinisparkError(f"{option('target')} {source}: not a model directory (no config.json)")
    safetensors_headers(location, option("target"))
    if any(location.glob("*.safetensors")):
        return
    pickled = sorted(p.name for pattern in PICKLE_WEIGHTS for p in location.glob(pattern))
    if pickled and not settings().allow_pickle_weights:
        raise MinisparkError(f"{option('target')} {source}: weights are pickle files ({pickled[0]}), which can run code when "
                             f"loaded; convert them to safetensors, or pass {option('allow_pickle_weights')} if you trust them")
    if not pickled:
        raise MinisparkError(f"{option('target')} {source}: no weights (no *.safetensors file beside config.json); "
                             "an incomplete download or copy?")
