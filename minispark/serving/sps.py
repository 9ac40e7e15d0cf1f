"""SPS tables: how many target forward steps per second the engine runs for n verified tokens.

The hardware-aware scheduler (design notes §8) maximises Θ = τ · SPS(B), so it needs the target's
step rate for every batch size B it may send, on *this* GPU, for *this* target, dtype and
quantization. The profiler measures median step times on a grid of (context length, n tokens) and
stores them here; lookups interpolate linearly in step time between profiled contexts (attention
cost grows roughly linearly with context) and clamp outside the profiled range. Token counts
between profiled ones are interpolated the same way; token counts beyond the largest profiled one
are refused (the scheduler checks coverage when it is built, so a too-small table fails early).

Tables live in ``<dir>/<device>__<target>.json`` (names sanitised by :func:`sanitize_name`): the
ones ``minispark profile`` measures in :func:`user_tables_dir`, the shipped ones in the package's
``sps_tables/`` (never written by a user command). :func:`find_table` picks the one for a device
and target, user tables first, and falls back, with a warning, to a deliberately pessimistic
generic cost model when none matches. A table given explicitly is checked against the run by
:func:`table_mismatch` (a warning, or an error when strict). This module is the serving side;
measuring is :mod:`minispark.measuring.profiler`'s.

    python -m minispark.serving.sps sps_tables    # list and validate every table in a directory
"""

from __future__ import annotations

import bisect
import json
import math
import re
import sys
import warnings
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

from minispark.core.atomic import write_json_atomic
from minispark.core.defaults import SHIPPED_TABLES  # noqa: F401  (re-exported: the tables looked up after the user's)
from minispark.core.errors import MinisparkError, option
from minispark.core.identity import dtype_name, quantization_name
from minispark.serving.sps_schema import INLINE_DTYPE, SCHEMA_VERSION, SPSTableError, validate_table
from minispark.core.checks import edited_text

#: Fallback cost model: each verified token beyond the first adds this fraction of a one-token
#: step. Real small-batch decode on a consumer GPU is memory-bound (8 tokens cost ~1.1–1.3× one),
#: so 0.1/token (8 tokens = 1.7×) understates SPS for longer prefixes: the scheduler proposes
#: fewer tokens than optimal rather than more.
GENERIC_TOKEN_COST = 0.1
GENERIC_MAX_TOKENS = 64


def sanitize_name(name: str) -> str:
    """File-name-safe form of a device or target name: lowercase ``[a-z0-9.-]``, other runs → '-'.

    Underscores become '-' too, so the ``__`` between device and target is unambiguous.
    ``"NVIDIA GeForce RTX 3050"`` → ``"nvidia-geforce-rtx-3050"``,
    ``"Qwen/Qwen3-VL-2B-Instruct"`` → ``"qwen-qwen3-vl-2b-instruct"``.
    """
    cleaned = re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-.")
    return cleaned or "unknown"


def table_filename(device: str, target: str) -> str:
    return f"{sanitize_name(device)}__{sanitize_name(target)}.json"


def table_path(directory: str | Path, device: str, target: str, *, eager_cpu: bool = False) -> Path:
    """Where ``profile`` files a table: ``<device>__<target>.json``, with ``__eager`` for a CPU table of the
    eager runtime, so comparing runtimes never overwrites the default (packed) one."""
    name = table_filename(device, target)
    return Path(directory) / (name.removesuffix(".json") + "__eager.json" if eager_cpu else name)


def replaceable_table_path(path: str | Path) -> Path:
    """``path`` if a table may be written there: nothing yet, or a table (an earlier profile's). Someone's file
    of the same name, or a symlink planted there, is refused, not replaced (profile checks before measuring)."""
    path = Path(path)
    if path.is_symlink() or (path.exists() and not _is_table(path)):
        raise SPSTableError(f"{path}: exists and is not an SPS table minispark wrote; move it away or choose "
                            f"another {option('out')}")
    return path


@dataclass
class SPSTable:
    """Profiled target step times on one device.

    contexts:       profiled committed context lengths, strictly increasing
    tokens:         profiled tokens per forward (anchor + drafts), strictly increasing, >= 1
    seconds:        [len(contexts)][len(tokens)] median seconds per forward step
    seconds_min:    same shape, fastest repetition (min <= median)
    seconds_spread: same shape, relative spread of repetitions, (p90 − p10) / median, >= 0
    metadata:       at least ``torch``, ``driver`` and ``date`` (ISO 8601); free-form otherwise
    batched:        optional, what serve's batched verify costs (``profile --batch-requests``): R sequences
                    at one context, each verifying W tokens in one padded forward —
                    ``{"context": c, "requests": [R…], "widths": [1…W], "seconds": [[s per W] per R]}``
    """

    device: str
    target: str
    dtype: str
    quantization: str
    contexts: list[int]
    tokens: list[int]
    seconds: list[list[float]]
    seconds_min: list[list[float]]
    seconds_spread: list[list[float]]
    metadata: dict[str, Any] = field(default_factory=dict)
    version: int = SCHEMA_VERSION
    batched: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        validate_table(asdict(self), "<in memory>", _FIELDS)

    # -- construction ---------------------------------------------------------------------------

    @staticmethod
    def from_inline(sps: list[float], device: str = "inline", target: str = "inline") -> SPSTable:
        """A context-independent table from a list where entry i is SPS for i+1 tokens.

        ``SPSTable.from_inline([1.0, 0.5, 0.45])`` is the curve of the Appendix A counterexample.
        """
        if not sps or not all(s > 0 and math.isfinite(s) for s in sps):
            raise ValueError(f"inline SPS values must be positive and finite, got {sps!r}")
        seconds = [1.0 / float(s) for s in sps]
        return SPSTable(
            device=device,
            target=target,
            dtype=INLINE_DTYPE,
            quantization="none",
            contexts=[0],
            tokens=list(range(1, len(sps) + 1)),
            seconds=[seconds],
            seconds_min=[list(seconds)],
            seconds_spread=[[0.0] * len(sps)],
            metadata={"torch": "n/a", "driver": "n/a", "date": "n/a", "source": "inline"},
        )

    @staticmethod
    def generic(max_tokens: int = GENERIC_MAX_TOKENS) -> SPSTable:
        """The fallback cost model: step time 1 + GENERIC_TOKEN_COST·(n − 1), unitless."""
        sps = [1.0 / (1.0 + GENERIC_TOKEN_COST * (n - 1)) for n in range(1, max_tokens + 1)]
        table = SPSTable.from_inline(sps, device="generic", target="generic")
        table.metadata["source"] = f"generic fallback, {GENERIC_TOKEN_COST} step per extra token"
        return table

    # -- lookup ---------------------------------------------------------------------------------

    @property
    def max_tokens(self) -> int:
        return self.tokens[-1]

    def step_seconds(self, n_tokens: int, context_length: int = 0) -> float:
        """Median seconds per forward of ``n_tokens`` at ``context_length`` (interpolated)."""
        if n_tokens < self.tokens[0] or n_tokens > self.tokens[-1]:
            raise SPSTableError(
                f"SPS table {self.device}/{self.target}: {n_tokens} tokens is outside the profiled "
                f"range {self.tokens[0]}..{self.tokens[-1]}; re-profile with more tokens "
                f"or lower {option('gamma')}"
            )
        ci, cw = _bracket(self.contexts, context_length)
        ti, tw = _bracket(self.tokens, n_tokens)

        def at(c: int) -> float:
            row = self.seconds[c]
            return row[ti] + tw * (row[ti + 1] - row[ti]) if tw else row[ti]

        low = at(ci)
        return low + cw * (at(ci + 1) - low) if cw else low

    def batched_seconds(self, requests: int, width: int, context_length: int = 0) -> float:
        """Seconds of one padded forward of ``requests`` sequences × ``width`` tokens (serve's batched verify).

        From the ``batched`` grid: linear in step time between profiled request counts, linear in the
        last two past the largest (the padded forward is compute-bound there), and from this table's
        one-sequence row at the grid's context below the smallest (R = 1 is one sequence). A table
        without the grid prices R·W tokens of one sequence instead (what it can say; optimistic for a
        padded forward: it knows nothing of R caches), at ``context_length``; the grid holds one context."""
        if self.batched is None:
            top = self.max_tokens
            tokens = requests * width
            if tokens <= top:
                return self.step_seconds(tokens, context_length)
            last = self.step_seconds(top, context_length)
            slope = last - self.step_seconds(top - 1, context_length) if top > 1 else last
            return last + max(slope, last / top * 0.5) * (tokens - top)  # never flatter than half a token's mean
        grid, widths = self.batched["requests"], self.batched["widths"]
        if not widths[0] <= width <= widths[-1]:
            raise SPSTableError(f"SPS table {self.device}/{self.target}: a batched verify of {width} tokens per "
                                f"request is outside the profiled widths {widths[0]}..{widths[-1]}; re-profile "
                                f"with a larger {option('max_tokens')} or lower {option('gamma')}")
        # R = 1 is one sequence: this table's own row at the grid's context.
        counts = [1] + grid
        column = [self.step_seconds(width, self.batched["context"])] + [row[widths.index(width)]
                                                                       for row in self.batched["seconds"]]
        if requests >= counts[-1]:
            slope = (column[-1] - column[-2]) / (counts[-1] - counts[-2])
            return column[-1] + max(slope, 0.0) * (requests - counts[-1])
        i, w = _bracket(counts, requests)
        return column[i] + w * (column[i + 1] - column[i]) if w else column[i]

    def sps(self, n_tokens: int, context_length: int = 0) -> float:
        """Steps per second for a forward of ``n_tokens`` tokens at ``context_length``."""
        return 1.0 / self.step_seconds(n_tokens, context_length)

    def curve(self, max_tokens: int, context_length: int = 0) -> list[float]:
        """``[SPS(1), …, SPS(max_tokens)]`` at one context length (what one round uses)."""
        return [self.sps(n, context_length) for n in range(1, max_tokens + 1)]

    # -- files ----------------------------------------------------------------------------------

    def path_in(self, directory: str | Path) -> Path:
        """Where ``profile`` files this table (see :func:`table_path`): beside, never over, a table of another
        dtype, quantization or runtime for the same device and target (lookups read every table's own fields).
        A ``--dtype bf16`` profile replaced the fp32 table without a word, and every fp32 run then found none."""
        path = table_path(directory, self.device, self.target,
                          eager_cpu=table_runtime(self) == "eager" and self.metadata.get("torch_device") == "cpu")
        try:
            there = SPSTable.load(path) if path.is_file() else None
        except SPSTableError:  # someone's file: ``save`` refuses it
            there = None
        if there is not None and _variant(there) != _variant(self):
            path = path.with_name(f"{path.stem}__{sanitize_name('-'.join(_variant(self)))}.json")
        return path

    def save(self, path: str | Path) -> Path:
        """Write the table at ``path``, replacing only a table already there (an earlier profile)."""
        return write_json_atomic(replaceable_table_path(path), asdict(self))

    @staticmethod
    def load(path: str | Path) -> SPSTable:
        path = Path(path)
        try:
            data = json.loads(edited_text(path))
        except FileNotFoundError:
            raise SPSTableError(f"{path}: SPS table not found") from None
        except (OSError, json.JSONDecodeError, RecursionError) as err:  # RecursionError: nested too deeply
            raise SPSTableError(f"{path}: not readable as JSON ({err})") from None
        except UnicodeDecodeError:  # an image or other binary file given as a table
            raise SPSTableError(f"{path}: not UTF-8 text (an SPS table is JSON)") from None
        except ValueError as err:  # an integer of more than 4300 digits: Python refuses to convert it
            raise SPSTableError(f"{path}: not readable as JSON ({str(err).partition(':')[0]})") from None
        validate_table(data, str(path), _FIELDS)
        return SPSTable(**data)


#: The fields a table file holds (``sps_schema.validate_table`` refuses others).
_FIELDS = frozenset(f.name for f in fields(SPSTable))


def _is_table(path: Path) -> bool:
    try:
        SPSTable.load(path)
    except MinisparkError:
        return False
    return True


def monotone_envelope(curve: list[float]) -> tuple[list[float], list[int]]:
    """The step rate reachable by verifying *at least* n tokens, and the size that reaches it.

    ``curve[i]`` is SPS for i + 1 tokens. Returns ``(envelope, source)``: ``envelope[i] =
    max_{j ≥ i} curve[j]`` (step cost = min over m ≥ n of cost(m), so non-increasing in n) and
    ``source[i]`` the smallest such j. A measured curve is often jagged (GEMM shapes: on a 2-core
    CPU 2 tokens cost more than 4); the scheduler plans against the envelope and, when the size it
    settles on is cheaper to verify with more tokens, pads the verify up to ``source`` tokens.
    Ties keep the smaller size: padding only when the larger forward is strictly faster.
    """
    envelope, source = list(curve), list(range(len(curve)))
    for i in range(len(curve) - 2, -1, -1):
        if envelope[i + 1] > envelope[i]:
            envelope[i], source[i] = envelope[i + 1], source[i + 1]
    return envelope, source


def _bracket(grid: list[int], x: float) -> tuple[int, float]:
    """Index i and weight w with x ≈ grid[i] + w·(grid[i+1] − grid[i]); clamped, w=0 at the ends."""
    if x <= grid[0]:
        return 0, 0.0
    if x >= grid[-1]:
        return len(grid) - 1, 0.0
    i = bisect.bisect_right(grid, x) - 1
    return i, (x - grid[i]) / (grid[i + 1] - grid[i])


def list_tables(directory: str | Path) -> list[Path]:
    """Every ``*.json`` under ``directory``, recursively (so no table is silently skipped)."""
    directory = Path(directory)
    return sorted(directory.rglob("*.json")) if directory.is_dir() else []


def user_tables_dir() -> Path:
    """Where ``minispark profile`` writes the tables it measures (never the shipped ``sps_tables/``):
    ``$MINISPARK_SPS_TABLES``, else ``sps_tables/`` in ``defaults.user_dir()`` (``$MINISPARK_CACHE``)."""
    from minispark.core.defaults import SPS_TABLES_ENV, env_dir, user_dir

    return env_dir(SPS_TABLES_ENV) or user_dir() / "sps_tables"


def find_table(
    directory: str | Path | Sequence[str | Path],
    device_name: str,
    target_name: str,
    *,
    dtype: str | None = None,
    quantization: str | None = None,
    runtime: str | None = None,
    strict: bool = False,
    skipped: list[str] | None = None,
) -> SPSTable:
    """The profiled table for this device and target, or the generic fallback with a warning.

    ``directory`` may be several directories, searched in order (the user's measured tables
    before the shipped ones); the first with a match wins. Matching within one directory, first
    hit wins: (1) the file ``<device>__<target>.json``; (2) any table with the same sanitised
    target whose sanitised device name occurs in ``device_name``'s at '-' boundaries
    (``"rtx-3050"`` matches ``"NVIDIA GeForce RTX 3050 Laptop GPU"``, ``"rtx-305"`` does not),
    longest device name first. ``dtype``/``quantization``/``runtime``, when given, must match too: a
    table for another precision or kernel path measures another workload. ``strict=True`` raises instead of falling back.
    A malformed table is an error; with ``skipped`` (a list) it is passed over instead and its one-line reason
    appended there, so one stray or damaged file does not hide every other table.
    """
    directories = [Path(directory)] if isinstance(directory, (str, Path)) else [Path(d) for d in directory]
    for where in directories:
        table = _match_in(where, device_name, target_name, dtype, quantization, runtime, skipped)
        if table is not None:
            return table

    found = ", ".join(p.name for where in directories for p in list_tables(where)) or "none"
    precision = "".join(
        f", {name}={value}"
        for name, value in (("dtype", dtype), ("quantization", quantization), ("runtime", runtime))
        if value
    )
    message = (
        f"no SPS table for device '{device_name}' and target '{target_name}'{precision} in "
        f"{' or '.join(str(d) for d in directories)} (expected "
        f"{table_filename(device_name, target_name)}; found: {found}); profile this device and target "
        f"to create it"
    )
    if strict:
        raise SPSTableError(message)
    warnings.warn(
        f"{message}. Using the generic cost model ({GENERIC_TOKEN_COST} step per extra token), "
        f"which schedules conservatively short prefixes.",
        stacklevel=2,
    )
    return SPSTable.generic()


def _match_in(directory: Path, device_name: str, target_name: str, dtype: str | None,
              quantization: str | None, runtime: str | None, skipped: list[str] | None) -> SPSTable | None:
    """The best table for the device and target in one directory (see :func:`find_table`), or None."""
    want_device, want_target = sanitize_name(device_name), sanitize_name(target_name)

    def load(path: Path) -> SPSTable | None:
        try:
            return SPSTable.load(path)
        except SPSTableError as error:
            if skipped is None:
                raise
            skipped.append(str(error))
            return None

    def fits(table: SPSTable) -> bool:
        return (dtype is None or table.dtype == dtype) and (
            quantization is None or table.quantization == quantization
        ) and (runtime is None or table_runtime(table) == runtime)

    exact = directory / table_filename(device_name, target_name)
    if exact.is_file():
        table = load(exact)
        if table is not None and fits(table):
            return table
    candidates = []
    for path in list_tables(directory):
        table = None if path == exact else load(path)  # the exact file was tried above
        if table is None:
            continue
        device = sanitize_name(table.device)
        if sanitize_name(table.target) != want_target or not fits(table):
            continue
        if f"-{device}-" in f"-{want_device}-":
            candidates.append((len(device), str(path), table))
    if candidates:
        return max(candidates, key=lambda item: (item[0], item[1]))[2]
    return None



def _variant(table: SPSTable) -> tuple[str, str, str]:
    """What, besides device and target, a table is looked up by: its dtype, quantization and runtime."""
    return table.dtype, table.quantization, table_runtime(table)


def table_runtime(table: SPSTable) -> str:
    """The target runtime a table was profiled with (``target/runtime.py``); tables from before
    runtimes existed measured the eager one."""
    return str(table.metadata.get("runtime", "eager"))


def _stored_dtype(name: str) -> str:
    """A table's dtype in the one vocabulary (INLINE_DTYPE, measured on no target, as written)."""
    return name if name == INLINE_DTYPE else dtype_name(name)


def _device_matches(table_device: str, device: str) -> bool:
    """As :func:`find_table` matches: the table's sanitised device name within the run's."""
    return f"-{sanitize_name(table_device)}-" in f"-{sanitize_name(device)}-"


def table_mismatch(table: SPSTable, source: str | Path, *, device: str, target: str, dtype: str,
                   quantization: str, runtime: str = "eager", strict: bool = False) -> str | None:
    """One line naming what an explicitly chosen table was profiled for that this run is not
    (device, target, dtype, quantization, runtime), or None when it fits; ``strict`` raises instead."""
    if table.device == "inline":  # hand-written (``from_inline``): no measured setup to compare
        return None
    differ = []
    if not _device_matches(table.device, device):
        differ.append(f"device {table.device!r} (this run: {device!r})")
    if sanitize_name(table.target) != sanitize_name(target):
        differ.append(f"target {table.target!r} (this run: {target!r})")
    if _stored_dtype(table.dtype) != dtype_name(dtype):
        differ.append(f"dtype {table.dtype!r} (this run: {dtype_name(dtype)!r})")
    if quantization_name(table.quantization) != quantization_name(quantization):
        differ.append(f"quantization {table.quantization!r} (this run: {quantization_name(quantization)!r})")
    if table_runtime(table) != runtime:
        differ.append(f"runtime {table_runtime(table)!r} (this run: {runtime!r})")
    if not differ:
        return None
    message = f"--sps {source}: profiled for another setup: {'; '.join(differ)}"
    if strict:
        raise SPSTableError(message)
    return message + "; its speed estimates may not hold (--strict refuses)"


if __name__ == "__main__":
    tables_dir = sys.argv[1] if len(sys.argv) > 1 else "sps_tables"
    if not list_tables(tables_dir):
        print(f"no SPS tables under {tables_dir}")
    for table_path in list_tables(tables_dir):
        t = SPSTable.load(table_path)
        print(
            f"{table_path}: {t.device} / {t.target} ({t.dtype}, {t.quantization}), "
            f"contexts {t.contexts}, tokens {t.tokens[0]}..{t.tokens[-1]}"
        )


def checked_table_file(path: Path | None, flag: str = option("sps")) -> Path | None:
    """An SPS table file that loads (read before any model: a bad table costs milliseconds, and is
    refused even where the modes asked for would not read it)."""
    from minispark.core.checks import input_file

    if input_file(path, flag) is not None:
        try:
            SPSTable.load(path)
        except SPSTableError as exc:
            raise MinisparkError(f"{flag} {exc}") from None
    return path
