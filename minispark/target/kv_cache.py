"""A KV cache that grows in place: preallocated per-layer buffers, views of the filled columns.

transformers' ``DynamicCache`` concatenates each layer's whole cache with the new keys and values on
every forward, so a decode step copies the full context 2 × layers times (measured on the embedded
target at a 238-token context: ``aten::cat`` ~15 ms of a ~100 ms one-token step, most of it fresh
allocations). :class:`GrowingLayer` keeps buffers with spare columns, writes the new columns with one
copy, and hands attention a view of the filled ones; a crop (rejected drafts) only shortens the view.
Capacity doubles when it runs out, so the copies amortize to O(1) per token. The numbers are the same
as ``DynamicCache``'s: the same keys and values, in the same order (tested). Sequences a batch decodes together
keep their caches as rows of shared per-layer buffers (:class:`SlotRows`, one :class:`RowLayer` each), which a
batched forward writes in place and attends as they lie (:class:`RowsInPlace`).

    python -c "from minispark.target.loading import load_target; s = load_target().session(); print(type(s.cache.layers[0]).__name__)"
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

#: Spare columns allocated past the first forward's length (then capacity doubles as needed).
INITIAL_SPARE = 256


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``keys``/``values`` are views of larger preallocated buffers.

    ``keys``/``values`` are (B, H, n, D) views of ``_keys``/``_values`` (B, H, capacity, D): every
    reader of a ``DynamicLayer`` (masks, ``get_seq_length``, the batched verifier) sees what it
    expects. Columns past ``n`` are scratch: a view handed out before a crop must not be kept across
    a later update (none of minispark's readers does).
    """

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._keys = self._values = None

    def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, filled: int, needed: int) -> None:
        """Make room for ``needed`` columns, keeping the ``filled`` ones (one copy per doubling)."""
        capacity = 0 if self._keys is None else self._keys.shape[-2]
        if needed <= capacity:
            return
        capacity = max(needed + INITIAL_SPARE, 2 * capacity)
        batch, heads, _, dim = key_states.shape
        keys = key_states.new_empty(batch, heads, capacity, dim)  # (B, H, C, D)
        values = value_states.new_empty(batch, heads, capacity, value_states.shape[-1])
        if filled:
            keys[..., :filled, :] = self.keys
            values[..., :filled, :] = self.values
        self._keys, self._values = keys, values

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.get_seq_length()
        end = start + key_states.shape[-2]
        self._reserve(key_states, value_states, start, end)
        self._keys[..., start:end, :] = key_states
        self._values[..., start:end, :] = value_states
        self.keys, self.values = self._keys[..., :end, :], self._values[..., :end, :]
        return self.keys, self.values

    def reset(self) -> None:
        self._keys = self._values = None
        super().reset()

    def _rebase(self) -> None:
        """After a batch reindexing replaced the views with new tensors: they become the buffers."""
        self._keys, self._values = self.keys, self.values

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._rebase()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self._rebase()


class SlotRows:
    """One layer's keys and values for S sequences decoded together: (S, H, C, D) buffers, zero-filled (a masked
    column must hold a finite number: attention weighs it by exactly 0), one :class:`RowLayer` per sequence
    viewing its row. A batched forward reads the rows of the sequences in flight as they lie (a view when their
    slots are consecutive) and writes each one's new columns in place, instead of copying every sequence's cache
    into a padded one and back (``serving/batched.py``). Capacity grows for all rows at once (×2, amortized)."""

    def __init__(self, slots: int) -> None:
        self.keys: torch.Tensor | None = None  # (S, H, C, D)
        self.values: torch.Tensor | None = None
        self.rows = [RowLayer(self, slot) for slot in range(slots)]

    @property
    def capacity(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, needed: int) -> None:
        """Room for ``needed`` columns in every row, shaped like ``key_states``/``value_states`` (1, H, n, D)."""
        if needed <= self.capacity:
            return
        capacity = max(needed + INITIAL_SPARE, 2 * self.capacity)
        _, heads, _, dim = key_states.shape
        keys = key_states.new_zeros(len(self.rows), heads, capacity, dim)  # (S, H, C, D)
        values = value_states.new_zeros(len(self.rows), heads, capacity, value_states.shape[-1])
        if self.keys is not None:
            keys[..., : self.capacity, :] = self.keys
            values[..., : self.capacity, :] = self.values
        self.keys, self.values = keys, values
        for row in self.rows:
            row.bind()


class _RowView:
    """:attr:`RowLayer.keys` / :attr:`RowLayer.values`: once the row is bound, a view of its first columns, made at
    the first read after the length changed; assigning a view of the row sets the length, anything else (what
    transformers assigns before binding, an empty tensor) is held as it is."""

    def __init__(self, index: int, buffer: str) -> None:
        self.index, self.buffer = index, buffer  # which of RowLayer._held, and the row's buffer attribute

    def __get__(self, layer: "RowLayer | None", owner: type) -> "torch.Tensor | None | _RowView":
        if layer is None:
            return self
        row, held = getattr(layer, self.buffer), layer._held[self.index]
        if row is None:
            return held[2]
        if held[0] is None:
            held[0] = row[..., : held[1], :]
        return held[0]

    def __set__(self, layer: "RowLayer", value: torch.Tensor | None) -> None:
        row, held = getattr(layer, self.buffer), layer._held[self.index]
        if row is not None and value is not None and value.numel() and value.data_ptr() == row.data_ptr():
            held[0], held[1] = value, value.shape[-2]  # a view of the row's first columns
        else:
            held[0], held[2] = None, value
            if value is None or not value.numel():
                held[1] = 0


class RowLayer(GrowingLayer):
    """A :class:`GrowingLayer` whose buffers are one row of a :class:`SlotRows` (a sequence of a batch decoded
    together): prefill, steps, crops and tree compaction work on it as on any growing layer.

    Once the row is bound, ``keys``/``values`` are views of its first columns made when read: a batched round only
    records each row's new length (:meth:`set_length`), where making two views per layer and row cost 0.7 ms a
    round of 8 requests. Assigning a view of the row (a crop, an update) sets its length."""

    _keys: torch.Tensor | None = None  # (1, H, C, D): this row of the shared buffers, once bound
    _values: torch.Tensor | None = None
    # keys, then values: the view handed out (None: made at the next read), its columns, what was assigned before
    # binding; kept apart because a crop assigns one, then reads the other.
    _held: tuple[list, list]
    keys = _RowView(0, "_keys")
    values = _RowView(1, "_values")

    def __init__(self, rows: SlotRows, slot: int) -> None:
        self._held = ([None, 0, None], [None, 0, None])
        super().__init__()
        self.rows, self.slot = rows, slot

    def get_seq_length(self) -> int:
        if self._keys is None:
            return super().get_seq_length()
        return self._held[0][1] if self.is_initialized else 0

    def bind(self) -> None:
        """View this row of the shared buffers (after they were allocated or grown), keeping the length."""
        self._keys = self.rows.keys[self.slot: self.slot + 1]  # (1, H, C, D)
        self._values = self.rows.values[self.slot: self.slot + 1]
        self._held[0][0] = self._held[1][0] = None

    def set_length(self, length: int) -> None:
        """Hold the row's first ``length`` columns (a batched forward wrote the new ones in place)."""
        keys, values = self._held
        keys[0] = values[0] = None
        keys[1] = values[1] = length

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        DynamicLayer.lazy_initialization(self, key_states, value_states)
        if self.rows.keys is not None:
            self.bind()

    def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, filled: int, needed: int) -> None:
        self.rows.reserve(key_states, value_states, needed)

    def reset(self) -> None:
        if self.is_initialized:
            self.set_length(0)

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError("a slot's cache row holds one sequence")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError("a slot's cache row holds one sequence")


class RowsInPlace(DynamicLayer):
    """One layer of a batched forward over sequences whose caches are rows of one :class:`SlotRows`: row r's new
    keys and values are written at its own length L_r in its slot, and attention reads columns [0, L_max + Q) of
    the rows in flight (a view when their slots are consecutive). Row r's columns past L_r + Q hold stale or
    other entries, which the batched mask hides (``serving/batched.batched_step`` builds it). ``where`` (the
    slots (R, 1, 1) and the columns (R, 1, Q) the new keys go to, :func:`rows_written`) is shared by every layer."""

    def __init__(self, rows: SlotRows, where: tuple[torch.Tensor, torch.Tensor], slots: list[int],
                 columns: int) -> None:
        super().__init__()
        self.rows, self.where, self.slots = rows, where, slots
        self.is_initialized = True
        self.columns = columns
        self.width = where[1].shape[-1]

    def get_seq_length(self) -> int:
        return self.columns - self.width

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
               ) -> tuple[torch.Tensor, torch.Tensor]:
        # key_states (R, H, Q, D): row r's columns L_r .. L_r + Q of its slot, every row in one indexed write
        self.rows.reserve(key_states[:1], value_states[:1], self.columns)
        slots, columns = self.where
        heads = torch.arange(key_states.shape[1], device=key_states.device).view(1, -1, 1)  # (1, H, 1)
        self.rows.keys.index_put_((slots, heads, columns), key_states)
        self.rows.values.index_put_((slots, heads, columns), value_states)
        first = self.slots[0]
        if self.slots == list(range(first, first + len(self.slots))):
            return (self.rows.keys[first: first + len(self.slots), :, : self.columns],
                    self.rows.values[first: first + len(self.slots), :, : self.columns])
        chosen = slots.view(-1)
        return (self.rows.keys[:, :, : self.columns].index_select(0, chosen),
                self.rows.values[:, :, : self.columns].index_select(0, chosen))


def rows_written(slots: list[int], lengths: list[int], width: int, device: torch.device | str
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Where a batched forward writes its new keys: the slots (R, 1, 1) and each row's columns L_r .. L_r + Q
    (R, 1, Q), as :class:`RowsInPlace` indexes its buffers."""
    where = torch.tensor(slots, device=device).view(-1, 1, 1)
    columns = torch.tensor(lengths, device=device).view(-1, 1, 1) + torch.arange(width, device=device).view(1, 1, -1)
    return where, columns


def slot_caches(config: object, slots: int) -> list[DynamicCache]:
    """``slots`` caches for ``config``'s decoder whose layers are rows of shared per-layer buffers (:class:`SlotRows`):
    the sequences a batch decodes together, each a growing cache of its own to every other reader."""
    caches = [DynamicCache(config=config) for _ in range(slots)]
    for index in range(len(caches[0].layers)):
        rows = SlotRows(slots)
        for cache, row in zip(caches, rows.rows):
            cache.layers[index] = row
    return caches


def growing_cache(config: object) -> DynamicCache:
    """A ``DynamicCache`` for ``config``'s decoder whose layers all grow in place, sliding-window ones included.

    transformers' sliding-window layer keeps only the last window of keys, so a rejected draft past the window
    cannot be cropped away (it raises). A full-length layer can; the window itself is applied by the attention
    mask, which the model builds from its config whatever the cache keeps (tested: equal to transformers' own
    generation with its windowed layers), at the memory cost of the whole context.
    """
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() for _ in cache.layers]
    return cache


def plain_cache(config: object) -> DynamicCache:
    """transformers' ``DynamicCache`` for ``config`` with every layer a plain, full-length ``DynamicLayer``
    (the eager runtime's: rollback past a sliding window needs the keys the window dropped)."""
    cache = DynamicCache(config=config)
    cache.layers = [DynamicLayer() for _ in cache.layers]
    return cache
