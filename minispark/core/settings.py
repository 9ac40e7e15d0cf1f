"""The process-wide options a user sets once for every command — how the target runs, the drafter's precision,
an image's pixel budget, whether pickle weights may load, torch's CPU threads — as one :class:`Settings` value.

The environment variables (``$MINISPARK_RUNTIME``, ``$MINISPARK_DRAFT_PRECISION``, ``$MINISPARK_MAX_PIXELS``,
``$MINISPARK_ALLOW_PICKLE_WEIGHTS``, ``$MINISPARK_THREADS`` / ``$OMP_NUM_THREADS``) are user-facing overrides read
here alone: the CLI builds the settings once per command from its global flags and the variables and installs
them (:func:`use`); the library reads :func:`settings`, never the environment. A library caller who installs
nothing gets the variables as they are when asked.

    python -c "from minispark.core.settings import settings; print(settings())"
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from minispark.core import defaults
from minispark.core.defaults import ALLOW_PICKLE_ENV, IMAGE_MAX_PIXELS, TARGET_RUNTIME_ENV, TARGET_RUNTIMES
from minispark.core.errors import MinisparkError, option


@dataclass(frozen=True)
class Settings:
    """``runtime``: how the target's forward runs (``TARGET_RUNTIMES``); ``draft_precision``: a DSpark drafter's
    weights (auto / float / int8); ``max_pixels``: one image's budget; ``allow_pickle_weights``: target weights
    stored as pickle may load; ``threads``: torch's CPU threads, fixed (None: chosen as decoding goes)."""

    runtime: str = "auto"
    draft_precision: str = "auto"
    max_pixels: int = IMAGE_MAX_PIXELS
    allow_pickle_weights: bool = False
    threads: int | None = None

    @classmethod
    def from_environment(cls, runtime: str | None = None, draft_precision: str | None = None,
                         max_pixels: int | None = None, allow_pickle_weights: bool = False,
                         threads: int | None = None) -> Settings:
        """The settings given (the CLI's flags, already checked), each absent one from its variable (checked
        here: a bad value is one line naming the flag and the variable)."""
        runtime = runtime or os.environ.get(TARGET_RUNTIME_ENV) or "auto"
        if runtime not in TARGET_RUNTIMES:
            raise MinisparkError(f"{option('runtime')} / ${TARGET_RUNTIME_ENV}: {runtime!r} is not one of "
                                 f"{', '.join(TARGET_RUNTIMES)}")
        return cls(runtime=runtime, draft_precision=draft_precision or defaults.draft_precision(),
                   max_pixels=max_pixels or defaults.image_max_pixels(),
                   allow_pickle_weights=allow_pickle_weights or os.environ.get(ALLOW_PICKLE_ENV, "") == "1",
                   threads=threads or defaults.fixed_threads())


_installed: list[Settings] = []


def settings() -> Settings:
    """The settings in force: those installed by :func:`use` (the CLI's command), else the environment's now."""
    return _installed[-1] if _installed else Settings.from_environment()


@contextmanager
def use(chosen: Settings) -> Iterator[Settings]:
    """Install ``chosen`` for the library to read until the block ends."""
    _installed.append(chosen)
    try:
        yield chosen
    finally:
        _installed.pop()
