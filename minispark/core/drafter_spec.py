"""What drafts a request, as the user names it: ``none`` (the target alone), ``lookup`` (the n-gram lookup),
``hybrid`` or ``hybrid:DIR`` (the lookup and a trained drafter chosen per round: the shipped one, or DIR), or a
trained drafter's directory. The grammar lives here alone: the CLI parses ``--drafter`` with it, the Python API
parses its ``drafter=`` string with it, and everything below takes the parsed :class:`DrafterSpec`.

    python -c "from minispark.core.drafter_spec import DrafterSpec; print(repr(DrafterSpec.parse('hybrid:runs/d')))"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from minispark.core.errors import MinisparkError

NONE, LOOKUP, HYBRID, TRAINED = "none", "lookup", "hybrid", "trained"
GRAMMAR = "none, lookup, hybrid, hybrid:DIR or a drafter directory"


class DrafterSpecError(MinisparkError):
    """A drafter named in no form the grammar has; ``value`` is what was given."""

    def __init__(self, value: str, why: str) -> None:
        super().__init__(f"{value!r}: {why} (expected {GRAMMAR})")
        self.value = value


@dataclass(frozen=True)
class DrafterSpec:
    """``kind`` is none, lookup, hybrid or trained; ``directory`` the trained drafter's (for hybrid, the one it
    pairs with the lookup; None there means the drafter shipped for the target)."""

    kind: str
    directory: Path | None = None

    @classmethod
    def parse(cls, text: str | Path | DrafterSpec) -> DrafterSpec:
        if isinstance(text, DrafterSpec):
            return text
        text = str(text)
        if text in (NONE, LOOKUP, HYBRID):
            return cls(text)
        if text.startswith(HYBRID + ":"):
            rest = text.removeprefix(HYBRID + ":")
            if not rest.strip():  # Path("") is ".", which would be blamed instead
                raise DrafterSpecError(text, "empty")
            return cls(HYBRID, Path(rest))
        if not text.strip():
            raise DrafterSpecError(text, "empty")
        return cls(TRAINED, Path(text))

    @property
    def drafts(self) -> bool:
        return self.kind != NONE

    def __str__(self) -> str:
        if self.kind == TRAINED:  # a directory named like a keyword is written so that it parses back
            text = str(self.directory)
            return f"./{text}" if text in (NONE, LOOKUP, HYBRID) or text.startswith(HYBRID + ":") else text
        return f"{HYBRID}:{self.directory}" if self.kind == HYBRID and self.directory is not None else self.kind
