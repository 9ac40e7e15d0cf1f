"""The CLI's words for the library's options: each option an error names is shown as the flag that gave it.

The library names an option by its own name (``core.errors.option``: a config field, a function's parameter);
the command being run declares a parameter of that name for each flag that hands a value down, so the flag is
found there, in the CLI's own declarations, and nowhere else. The CLI's command classes mark the command
running (``running``) for the time it runs.

    .venv/bin/python -m pytest -q tests/test_wording.py
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

from minispark.core.errors import worded

#: The (typer / click) context of the command running: its parameters, its parent group's above it.
_RUNNING: ContextVar[Any] = ContextVar("running_command", default=None)


@contextmanager
def running(ctx: Any) -> Iterator[None]:
    """Name options as the flags of the command whose context is ``ctx`` while it runs."""
    token = _RUNNING.set(ctx)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def flag(name: str) -> str:
    """The flag the running command (or a group above it) declares for the library option ``name``: the
    parameter of that name; else ``name`` spelled as a flag (an option of another command, in advice)."""
    ctx = _RUNNING.get()
    while ctx is not None:
        for param in ctx.command.params:
            if param.name == name and param.opts:
                return next((opt for opt in param.opts if opt.startswith("--")), param.opts[0])
        ctx = ctx.parent
    return "--" + name.replace("_", "-")


def for_user(text: str) -> str:
    """``text`` (an error's template, a warning) with every option it names shown as its flag."""
    return worded(text, flag)
