"""Checks of numbers typed as text: comma-separated lists of them (``--contexts 256,1024``, ``--conf``,
``--sps-inline``, ``--modes``), recipe and command-line overrides, cache-mix counts and typer's number flags read
by one rule (ASCII digits, no ``_`` grouping). One-line errors naming the option and the bad item, never the
whole list, as every check in ``core.checks``.

    .venv/bin/python -m pytest -q tests/cli/test_measure_input.py -k "contexts or conf or comma or digit"
"""

from __future__ import annotations

from typing import Any, Sequence

from minispark.core.errors import OptionError, option
from minispark.core.checks import integer, number


def items(text: str, flag: str, what: str) -> list[str]:
    """The comma-separated items of ``text``, stripped; an empty item (``2,,4``, a trailing comma) is refused,
    not dropped: it is a typo more often than not, and the run would quietly use a shorter list."""
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise OptionError(f"{flag}: expected at least one {what}, got {excerpt(text)}")
    if not all(parts):
        raise OptionError(f"{flag}: empty item {parts.index('') + 1} in {excerpt(text)} (a doubled or trailing "
                             "comma?)")
    return parts


#: The most characters of a flag's value an error line repeats (a 300-item --conf was echoed whole).
EXCERPT_CHARS = 60


def excerpt(text: str) -> str:
    """``repr(text)``, cut to about ``EXCERPT_CHARS`` characters with its length said when longer."""
    if len(text) <= EXCERPT_CHARS:
        return repr(text)
    return f"{text[:EXCERPT_CHARS]!r}... ({len(text):,} characters)"


def _item_numbers(parts: list[str], flag: str, what: str, *, whole: bool) -> list[Any]:
    """``parts`` read as numbers by :func:`is_number_text`'s rule; the first that is not one refused, by name."""
    for k, part in enumerate(parts, start=1):
        if not is_number_text(part, whole=whole):
            where = f"item {k} {excerpt(part)}" if len(parts) > 1 else excerpt(part)
            raise OptionError(f"{flag}: expected comma-separated {what}, got {where}")
    return [(int if whole else float)(part) for part in parts]


def is_number_text(text: str, *, whole: bool = False) -> bool:
    """Whether ``text`` is a number as minispark reads one from text (lists, overrides, cache-mix counts): read by
    int() (``whole``) or float(), ASCII (they read other scripts' digits too, '٣' is 3, where typer's integer
    flags refuse them) and without '_' (they read Python's digit grouping too: the typo ``--contexts 16_32`` was
    the one context 1632)."""
    if not text.isascii() or "_" in text:
        return False
    try:
        (int if whole else float)(text)
    except ValueError:
        return False
    return True


def typed_number(text: str, flag: str, *, whole: bool) -> str:
    """A number flag's text as typed (``whole``: an integer flag's), by :func:`is_number_text`'s rule, before typer
    converts it: typer reads '1_000' as 1000 and '5.0' as the whole number 5, where every other number minispark
    reads from text is refused so (``--contexts 16_32``)."""
    if is_number_text(text, whole=whole):
        return text
    why = " (no '_': digit grouping is refused)" if "_" in text else " (in ASCII digits)" if not text.isascii() else ""
    raise OptionError(f"{flag} {text!r}: expected {'a whole number' if whole else 'a number'}{why}")


def number_text(text: str) -> str:
    """``text`` when :func:`is_number_text`, else ValueError: the one rule, for ``int(number_text(part))``."""
    if not is_number_text(text):
        raise ValueError(text)
    return text


def floats(text: str, flag: str, *, low: float | None = None, high: float | None = None,
           low_open: bool = False) -> list[float]:
    """Comma-separated finite numbers (at least one), each in the given range."""
    parts = items(text, flag, "number")
    values = _item_numbers(parts, flag, "numbers", whole=False)
    for value in values:
        number(value, flag, low, high, low_open=low_open)
    return values


def integers(text: str, flag: str, minimum: int, maximum: int | None = None, *, distinct: bool = False) -> list[int]:
    """Comma-separated whole numbers (at least one), each in [minimum, maximum] (default: ``MAX_INT``); with
    ``distinct``, a number given twice is refused (a list of sizes to measure: the second would be dropped)."""
    parts = items(text, flag, "whole number")
    values = _item_numbers(parts, flag, "whole numbers", whole=True)
    for value in values:
        integer(value, flag, minimum, maximum)
    if distinct:
        distinct_items(values, flag)
    return values


def distinct_items(values: Sequence[Any], flag: str) -> None:
    """Refuse an item given twice (``--contexts 16,16``, ``--modes target,target``): a typo, and the run would
    quietly measure or print it once."""
    twice = next((value for k, value in enumerate(values) if value in values[:k]), None)
    if twice is not None:
        raise OptionError(f"{flag}: {twice} is given twice")


#: Steps per second an inline curve may give: outside it Θ = τ · SPS overflows to inf, or the step
#: time 1 / SPS does (a table stores seconds per step, which must be finite).
SPS_RANGE = (1e-6, 1e6)


def sps_values(text: str, flag: str = option("sps_inline")) -> list[float]:
    """Steps per second for 1, 2, 3, ... tokens: in ``SPS_RANGE``, and never rising with more tokens (a
    verify of n + 1 tokens cannot be faster than one of n; a flat curve means free extra tokens)."""
    values = floats(text, flag, low=SPS_RANGE[0], high=SPS_RANGE[1])
    for n, (before, after) in enumerate(zip(values, values[1:]), start=2):
        if after > before:
            raise OptionError(f"{flag}: steps per second must not increase with more tokens "
                                 f"({before:g} for {n - 1}, {after:g} for {n})")
    return values
