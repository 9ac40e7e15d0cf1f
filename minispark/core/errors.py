"""The exception types user-facing errors are raised as, worded in the library's terms.

The CLI prints a ``MinisparkError`` as a single line (naming the file, line or flag at fault) and exits 2;
anything else is a bug and keeps its traceback. The library names an option by its own name (a config field,
a function's parameter), written ``option("heldout_cache")`` inside the message; the error reads
``heldout_cache`` to a Python caller and ``--heldout-cache`` once the CLI words it (``worded``), so flags are
spelled in one place, the CLI's declarations.

    .venv/bin/python -m pytest -q tests/core/test_errors.py
"""

from __future__ import annotations

import re
from typing import Callable

#: An option named inside a message: its name between shift-out and shift-in, two control characters that no
#: value or path an error quotes can hold (control characters are refused at the edge).
_OPTION = re.compile("\x0e([a-z0-9_]+)\x0f")


def option(name: str) -> str:
    """A reference to the library option ``name`` inside an error message (see the module docstring)."""
    return f"\x0e{name}\x0f"


def worded(text: str, name_of: Callable[[str], str]) -> str:
    """``text`` with each option reference (``option``) named by ``name_of(option)``."""
    return _OPTION.sub(lambda match: name_of(match[1]), text)


class MinisparkError(Exception):
    """A user-facing error with a one-line message, which may name options (``option``)."""

    @property
    def template(self) -> str:
        """The message with its option references (what ``worded`` names)."""
        return str(self.args[0]) if self.args else ""

    @property
    def options(self) -> tuple[str, ...]:
        """The options the message names, first mention first."""
        return tuple(dict.fromkeys(_OPTION.findall(self.template)))

    def worded(self, name_of: Callable[[str], str]) -> str:
        """The message with each option named by ``name_of(option)`` (the CLI: its flag)."""
        return worded(self.template, name_of)

    def __str__(self) -> str:
        return self.worded(lambda name: name)

    def __format__(self, spec: str) -> str:
        # an error quoted in another's message (f"{exc}") keeps its references, so the outer one words them all
        return format(self.template, spec)


class OptionError(MinisparkError):
    """A value refused for an option: ``field`` is the option the message names first, ``value`` what was
    given (None where the message says it)."""

    def __init__(self, message: str, value: object = None) -> None:
        super().__init__(message)
        self.value = value

    @property
    def field(self) -> str | None:
        return self.options[0] if self.options else None


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when it has none): what a one-line error quotes
    (a ``MinisparkError``'s with its option references)."""
    text = format(exc, "").strip()
    return text.splitlines()[0] if text else type(exc).__name__


def out_of_memory(exc: BaseException) -> str | None:
    """The one-line error for an allocation this machine cannot make (torch's CPU allocator and CUDA report
    it as a RuntimeError, Python as a MemoryError), or None for any other exception."""
    text = first_line(exc)
    if isinstance(exc, MemoryError) or "can't allocate memory" in text or type(exc).__name__ == "OutOfMemoryError":
        return (f"out of memory ({text}); the sizes asked for (a recipe's, a batch) need more memory than this "
                "machine has: use smaller ones (`minispark train --dry-run` predicts a recipe's peak)")
    return None


def json_reason(exc: BaseException) -> str:
    """Why JSON (or TOML) text could not be read, in words a user can act on: Python refuses an integer of more
    than 4300 digits with advice to raise its own limit (``sys.set_int_max_str_digits``), which no user can take."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    text = first_line(exc)
    if isinstance(exc, ValueError) and "integer string conversion" in text:
        return "a number too long to read (more than 4300 digits)"
    return text


class DuplicateKey(ValueError):
    """A JSON object gave one key twice (``unique_keys``); its argument is the key."""


def unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``json.loads``'s ``object_pairs_hook`` refusing a key given twice (``{"prompt": "a", "prompt": "b"}``):
    JSON keeps the last one without a word, so the one meant may not be the one used."""
    record: dict[str, object] = {}
    for key, value in pairs:
        if key in record:
            raise DuplicateKey(key)
        record[key] = value
    return record
