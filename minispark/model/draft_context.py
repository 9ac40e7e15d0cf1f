"""The draft context (design notes §11.2): the drafter's per-layer K/V of the projected target
features of committed tokens. Each round appends the newly committed span and drops rows that fell
out of the window; draft-block K/V are never cached, so the drafter never re-reads the context.

    .venv/bin/python -m pytest -q tests/model/test_draft_model.py -k context
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from minispark.model.draft_config import DraftConfig


@dataclass(frozen=True)
class HeldRows:
    """Context rows apart from a :class:`DraftContext`: K and V (L, Hkv, n, D) and their text positions (n,),
    a run of one sequence's rows in order (every row whose position lies in :attr:`span`)."""

    keys: torch.Tensor
    values: torch.Tensor
    positions: torch.Tensor

    @property
    def span(self) -> tuple[int, int]:
        """[first, last + 1) of the positions; (0, 0) for no rows."""
        if not self.positions.numel():
            return (0, 0)
        return int(self.positions[0]), int(self.positions[-1]) + 1

    def between(self, start: int, end: int) -> "HeldRows":
        """The rows at positions [start, end) (views)."""
        keep = (self.positions >= start) & (self.positions < end)
        first = int(keep.int().argmax()) if keep.any() else 0
        n = int(keep.sum())
        return HeldRows(self.keys[:, :, first : first + n], self.values[:, :, first : first + n],
                        self.positions[first : first + n])

    @staticmethod
    def joined(pieces: list["HeldRows"]) -> "HeldRows":
        """The runs one after another, in new buffers."""
        return HeldRows(torch.cat([p.keys for p in pieces], dim=2), torch.cat([p.values for p in pieces], dim=2),
                        torch.cat([p.positions for p in pieces]))


def pieces(sources: list[HeldRows], start: int, end: int) -> list[HeldRows] | None:
    """The rows at positions [start, end) as views into runs of one sequence (each run read from where the rows
    before it end); None when together the runs do not hold them all ([] for no positions)."""
    found, missing = [], start
    for source in sorted(sources, key=lambda rows: rows.span[0]):
        first, stop = source.span
        if first <= missing < stop and missing < end:
            found.append(source.between(missing, end))
            missing = min(stop, end)
    return found if missing >= end else None


def reach(sources: list[HeldRows], end: int) -> int:
    """The oldest position from which runs of one sequence hold every row up to ``end`` (``end``: none)."""
    start, moved = end, True
    while moved:
        moved = False
        for source in sources:
            first, stop = source.span
            if first < start <= stop:
                start, moved = first, True
    return start


class DraftContext:
    """Per-layer context K/V of committed tokens (§11.2), preallocated and grown by doubling.

    Holds, for each draft layer, K (rotary applied) and V of the *projected* target features of
    the tokens in the target KV cache, plus their 1D text positions. Draft-block K/V are never
    stored. Rows live in ``[start, end)`` of the buffers; dropping old rows moves ``start``.
    """

    def __init__(self, config: DraftConfig, device: torch.device | str, dtype: torch.dtype, capacity: int = 256) -> None:
        self.shape = (config.num_layers, config.num_kv_heads)  # buffers: (L, Hkv, cap, D)
        self.head_dim = config.head_dim
        self.device, self.dtype = torch.device(device), dtype
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        shape = (*self.shape, capacity, self.head_dim)
        self.keys = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self.values = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self.pos = torch.zeros(capacity, device=self.device, dtype=torch.long)
        self.start = self.end = 0

    def __len__(self) -> int:
        return self.end - self.start

    @property
    def positions(self) -> torch.Tensor:
        """(n,) text positions of the held rows."""
        return self.pos[self.start : self.end]

    def held(self) -> HeldRows:
        """The held rows (views: later appends overwrite the buffers)."""
        return HeldRows(self.keys[:, :, self.start : self.end], self.values[:, :, self.start : self.end],
                        self.positions)

    def layer_kv(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (K, V), each (1, Hkv, n, D)."""
        held = self.held()
        return [(held.keys[i][None], held.values[i][None]) for i in range(held.keys.shape[0])]

    def clear(self) -> None:
        self.start = self.end = 0

    def append(self, layer_kv: list[tuple[torch.Tensor, torch.Tensor]], positions: torch.Tensor) -> None:
        """Add rows: ``layer_kv`` per layer (1, Hkv, n, D) each, ``positions`` (n,)."""
        self.put(HeldRows(torch.stack([k[0] for k, _ in layer_kv]), torch.stack([v[0] for _, v in layer_kv]),
                          positions))  # (L, Hkv, n, D) each

    def put(self, rows: HeldRows) -> None:
        """Add ``rows`` after the held ones."""
        n = rows.positions.numel()
        if self.end + n > self.pos.numel():
            self._make_room(n)
        self.keys[:, :, self.end : self.end + n] = rows.keys
        self.values[:, :, self.end : self.end + n] = rows.values
        self.pos[self.end : self.end + n] = rows.positions
        self.end += n

    def _make_room(self, n: int) -> None:
        held = len(self)
        old = (self.keys, self.values, self.pos, self.start, self.end)
        capacity = self.pos.numel()
        while held + n > capacity:
            capacity *= 2
        if capacity != self.pos.numel():
            self._allocate(capacity)
        keys, values, pos, start, end = old
        # Compact to the front (copy via clone: source and destination may overlap).
        self.keys[:, :, :held] = keys[:, :, start:end].clone()
        self.values[:, :, :held] = values[:, :, start:end].clone()
        self.pos[:held] = pos[start:end].clone()
        self.start, self.end = 0, held

    def drop_before(self, position: int) -> None:
        """Forget rows with text position < ``position`` (positions increase along the rows)."""
        self.start += int((self.positions < position).sum())

    def crop(self, position: int) -> None:
        """Forget rows with text position >= ``position`` (roll back to an earlier context)."""
        self.end = self.start + int((self.positions < position).sum())
