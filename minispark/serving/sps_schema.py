"""What an SPS table file must hold: every field checked on load, the first bad one named in one line with
the file (a hand-edited or damaged table fails there, not as a wrong schedule later).

    .venv/bin/python -m pytest -q tests/serving/test_sps.py -k schema
"""

from __future__ import annotations

import math
from typing import Any

from minispark.core.errors import MinisparkError
from minispark.core.defaults import DTYPE_SPELLINGS
from minispark.core.identity import DTYPES
from minispark.core.check_lists import SPS_RANGE

SCHEMA_VERSION = 1
_REQUIRED_METADATA = ("torch", "driver", "date")
#: A table's dtype: a stored name, an alias, or INLINE_DTYPE (a table of hand-given rates, measured on no target).
INLINE_DTYPE = "n/a"
_DTYPE_NAMES = (*DTYPES, *DTYPE_SPELLINGS, INLINE_DTYPE)
#: Fields a table may leave out (tables written before they existed).
_OPTIONAL = ("batched",)


class SPSTableError(MinisparkError):
    """A table file is missing, unreadable or malformed (one-line message: file and field)."""


def validate_table(data: Any, source: str, known: frozenset[str]) -> None:
    """Raise SPSTableError naming ``source`` and the first bad field; ``known``: the table's field names."""

    def fail(name: str, why: str) -> None:
        raise SPSTableError(f"{source}: field '{name}': {why}")

    if not isinstance(data, dict):
        raise SPSTableError(f"{source}: expected a JSON object, got {type(data).__name__}")
    if not {"device", "target", "seconds"} & set(data):  # another artifact (a cache manifest): field by field misled
        keys = ", ".join(sorted(data)[:4]) + (", ..." if len(data) > 4 else "")
        raise SPSTableError(f"{source}: not an SPS table (a JSON object with {keys or 'no keys'}); give a table "
                            "`minispark profile` wrote")
    for name in sorted(set(data) - known):
        fail(name, "unknown field (typo, or a newer minispark wrote this table?)")
    for name in sorted(known - set(data) - set(_OPTIONAL)):
        fail(name, "missing")
    if data["version"] != SCHEMA_VERSION or isinstance(data["version"], bool):  # true == 1 in Python
        fail("version", f"expected {SCHEMA_VERSION}, got {data['version']!r}")
    for name in ("device", "target", "dtype", "quantization"):
        if not isinstance(data[name], str) or not data[name]:
            fail(name, f"expected a non-empty string, got {data[name]!r}")
    if data["dtype"] not in _DTYPE_NAMES:  # free text was compared as written: 'float' fit no run, without a word
        fail("dtype", f"expected one of {', '.join(_DTYPE_NAMES)}, got {data['dtype']!r}")
    for name, least in (("contexts", 0), ("tokens", 1)):
        grid = data[name]
        if not isinstance(grid, list) or not grid:
            fail(name, "expected a non-empty list of integers")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= least for v in grid):
            fail(name, f"expected integers >= {least}, got {grid!r}")
        if any(b <= a for a, b in zip(grid, grid[1:])):
            fail(name, f"must be strictly increasing, got {grid!r}")
    if data["tokens"][0] != 1:  # a one-token step is every schedule's reference (a target-only round)
        fail("tokens", f"must start at 1 (the profiler measures 1..N tokens), got {data['tokens']!r}")
    shape = (len(data["contexts"]), len(data["tokens"]))
    for name in ("seconds", "seconds_min", "seconds_spread"):
        grid = data[name]
        if not isinstance(grid, list) or len(grid) != shape[0]:
            fail(name, f"expected {shape[0]} rows (one per context), got {_len(grid)}")
        for i, row in enumerate(grid):
            if not isinstance(row, list) or len(row) != shape[1]:
                fail(
                    name,
                    f"row {i}: expected {shape[1]} values (one per token count), got {_len(row)}",
                )
            for j, v in enumerate(row):
                if name != "seconds_spread":
                    _step_seconds(v, name, f"[{i}][{j}]", fail)
                elif not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                    fail(name, f"[{i}][{j}]: expected a finite positive number, got {v!r}")
    for i, (med, low) in enumerate(zip(data["seconds"], data["seconds_min"])):
        for j, (m, lo) in enumerate(zip(med, low)):
            if lo > m:
                fail("seconds_min", f"[{i}][{j}]: min {lo} exceeds median {m}")
    if data.get("batched") is not None:
        _validate_batched(data["batched"], data["tokens"][-1], data["contexts"], fail)
    meta = data["metadata"]
    if not isinstance(meta, dict):
        fail("metadata", "expected an object")
    for key in _REQUIRED_METADATA:
        if not isinstance(meta.get(key), str):
            fail(f"metadata.{key}", "missing (expected a string)")


def _validate_batched(grid: Any, max_tokens: int, contexts: list[int], fail: Any) -> None:
    """The ``batched`` grid: one of the table's contexts (R = 1 is the table's own row there), increasing
    request counts and widths, positive seconds [R][W]."""
    if not isinstance(grid, dict) or set(grid) != {"context", "requests", "widths", "seconds"}:
        fail("batched", "expected an object with context, requests, widths and seconds")
    context = grid["context"]
    if not isinstance(context, int) or isinstance(context, bool) or context not in contexts:
        fail("batched.context", f"expected one of the table's contexts {contexts}, got {context!r}")
    for name, least in (("requests", 2), ("widths", 1)):
        axis = grid[name]
        if (not isinstance(axis, list) or not axis or not all(isinstance(v, int) and not isinstance(v, bool)
                                                             and v >= least for v in axis)):
            fail(f"batched.{name}", f"expected a non-empty list of integers >= {least}, got {axis!r}")
        if any(b <= a for a, b in zip(axis, axis[1:])):
            fail(f"batched.{name}", f"must be strictly increasing, got {axis!r}")
    if grid["widths"] != list(range(1, len(grid["widths"]) + 1)) or grid["widths"][-1] > max_tokens:
        fail("batched.widths", f"expected 1..W with W <= the table's {max_tokens} tokens, got {grid['widths']!r}")
    rows = grid["seconds"]
    if not isinstance(rows, list) or len(rows) != len(grid["requests"]):
        fail("batched.seconds", f"expected {len(grid['requests'])} rows (one per request count), got {_len(rows)}")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(grid["widths"]):
            fail("batched.seconds", f"row {i}: expected {len(grid['widths'])} values (one per width), got {_len(row)}")
        for j, v in enumerate(row):
            _step_seconds(v, "batched.seconds", f"[{i}][{j}]", fail)


def _step_seconds(value: Any, name: str, where: str, fail: Any) -> None:
    """A step time: a finite positive number whose steps per second (1 / seconds) are in ``SPS_RANGE``, as
    ``--sps-inline`` requires: past it Θ = τ · SPS overflowed to inf (1e-320 s) or printed as 0 (1e308 s)."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        fail(name, f"{where}: expected a finite positive number, got {value!r}")
    if not 1 / SPS_RANGE[1] <= value <= 1 / SPS_RANGE[0]:
        fail(name, f"{where}: {value!r} seconds per step is outside [{1 / SPS_RANGE[1]:g}, {1 / SPS_RANGE[0]:g}]")


def _len(value: Any) -> str:
    return str(len(value)) if isinstance(value, list) else type(value).__name__
