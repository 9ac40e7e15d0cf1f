"""Which target a ``--target`` (or ``load_target``'s ``source``) names, decided in one place: the embedded default
(omitted, empty, ``embedded`` or its model name), a local model directory, or a Hugging Face hub id. A path that
is clearly meant as one but does not exist is refused here, so a typo never downloads a stranger's model.

    python -c "from minispark.target.target_ref import TargetRef; print(TargetRef.parse('embedded'))"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from minispark.target.embedded import EMBEDDED_NAME, EMBEDDED_SPELLINGS, embedded_model_dir
from minispark.validate_models import target_location

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
