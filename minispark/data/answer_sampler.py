"""Batched answer sampling with refill: finished rows leave the batch and queued prompts take their place.

Hugging Face ``generate`` keeps every row of a batch until the longest answer ends (a finished row is
padded, still computed), so with answers of 30 to 512 tokens about half its work is thrown away.
Here a row that reaches EOS or the token cap leaves the batch at once, its KV rows are dropped, and
when enough rows are free the next prompts are prefilled as a small left-padded batch of their own and
joined to the running one (their KV is left-padded to the running width, the padding masked). Columns
that every live row masks are trimmed from the left, so the cache is as wide as the longest live row.

Every sample draws its tokens with its own seeded generator from ``target.sampling.probabilities``,
exactly as :func:`minispark.data.regenerate.regenerate` does; the batch only changes logits by float
noise. Positions are explicit per row, so a row's tokens sit at the same positions as in a batch of one.
Text targets only (M-RoPE prompts with images go through ``regenerate``).

    .venv/bin/python -m pytest -q tests/test_answer_sampler.py
"""

from __future__ import annotations

from minispark.core.errors import option

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, CacheLayerMixin

from minispark.data.regenerate import Answer
from minispark.target.kv_cache import plain_cache
from minispark.target.sampling import SamplingConfig, draw_rows, make_generator
from minispark.target.loading import Target
from minispark.target.session import PromptInputs


#: Free columns past the widest window: a compaction (one copy of the live window) per this many steps.
COMPACT_EVERY = 256


@dataclass
class _Row:
    """One live sample: its index, generator, and the answer tokens drawn so far."""

    index: int
    generator: torch.Generator
    position: int  # the position of the next token fed (= prompt length + answer tokens fed)
    tokens: list[int] = field(default_factory=list)


class _SlotLayer(CacheLayerMixin):
    """One decoder layer's view of :class:`_SlotKV`: writes the new column(s), returns the live window."""

    is_sliding = False
    is_croppable = False

    def __init__(self, store: _SlotKV, index: int) -> None:
        super().__init__()
        self.store, self.index = store, index
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
               ) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.store
        end = s.end + key_states.shape[2]
        s.keys[self.index][:, :, s.end:end] = key_states  # (S, H, t, D)
        s.values[self.index][:, :, s.end:end] = value_states
        return s.keys[self.index][:, :, s.start:end], s.values[self.index][:, :, s.start:end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_seq_length(self) -> int:
        return self.store.end - self.store.start

    def get_max_length(self) -> int:
        return -1


class _SlotKV:
    """Preallocated K/V of ``slots`` rows: per layer (S, H, C, D), live columns [start, end), mask (S, C).

    ``DynamicCache`` concatenates every layer's whole cache on every step (measured: 3/4 of a batch-64
    step on this CPU); here a step writes one column in place. Rows are left-padded: a joining prompt
    is written right-aligned at ``[end − P, end)``, a finished slot is masked out and later reused,
    and the columns every slot masks are trimmed from the left. When the buffer is full the live
    window is copied back to column ``headroom`` (≥ the longest prompt, so a join always fits); the
    window never exceeds ``span`` (prompt + answer cap), so that happens at most every ``COMPACT_EVERY`` steps.
    """

    def __init__(self, target: Target, slots: int, headroom: int, span: int) -> None:
        text = target.text_config
        heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        self.headroom, self.capacity = headroom, headroom + span + COMPACT_EVERY
        shape = (slots, heads, self.capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=target.dtype, device=target.device) for _ in range(target.num_layers)]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.mask = torch.zeros((slots, self.capacity), dtype=torch.long, device=target.device)
        self.start = self.end = headroom
        self.cache = Cache(layers=[_SlotLayer(self, i) for i in range(target.num_layers)])

    @property
    def slots(self) -> int:
        return self.mask.shape[0]

    def write_prompt(self, slot: int, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Place one prefilled prompt's per-layer (H, P, D) K/V right-aligned in ``slot``."""
        length = keys[0].shape[1]
        for layer, (k, v) in enumerate(zip(keys, values)):
            self.keys[layer][slot, :, self.end - length:self.end] = k
            self.values[layer][slot, :, self.end - length:self.end] = v
        self.mask[slot] = 0
        self.mask[slot, self.end - length:self.end] = 1
        self.start = min(self.start, self.end - length)

    def free(self, slot: int) -> None:
        self.mask[slot] = 0

    def trim(self) -> None:
        """Drop leading columns that no slot attends to."""
        live = self.mask[:, self.start:self.end].any(dim=0).nonzero()
        self.start = self.start + int(live[0]) if len(live) else self.end

    def open_column(self) -> torch.Tensor:
        """Make room for one more column, mark it live in every slot; the (S, W + 1) mask of the next step."""
        if self.end == self.capacity:
            self._compact()
        self.mask[:, self.end] = 1
        return self.mask[:, self.start:self.end + 1]

    def advance(self) -> None:
        self.end += 1

    def keep_slots(self, slots: list[int]) -> None:
        """Only these slots remain (the batch shrinks once no prompt is left to fill the others)."""
        index = torch.tensor(slots, device=self.mask.device)
        self.keys = [k[index] for k in self.keys]
        self.values = [v[index] for v in self.values]
        self.mask = self.mask[index]

    def _compact(self) -> None:
        width = self.end - self.start
        for buffers in (self.keys, self.values):
            for layer, buffer in enumerate(buffers):
                buffers[layer] = torch.zeros_like(buffer)
                buffers[layer][:, :, self.headroom:self.headroom + width] = buffer[:, :, self.start:self.end]
        mask = torch.zeros_like(self.mask)
        mask[:, self.headroom:self.headroom + width] = self.mask[:, self.start:self.end]
        self.mask, self.start, self.end = mask, self.headroom, self.headroom + width


def _prefill(target: Target, prompts: Sequence[PromptInputs], pad_id: int
             ) -> tuple[DynamicCache, torch.Tensor]:
    """Left-padded prefill of ``prompts``: (its cache, (b, V) last-token logits)."""
    width = max(p.length for p in prompts)
    device = target.device
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)  # (b, P)
    mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)  # (b, P)
    for row, prompt in enumerate(prompts):
        ids[row, width - prompt.length:] = prompt.input_ids[0]
        mask[row, width - prompt.length:] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (b, P): each row's own 0..P-1
    cache = plain_cache(target.model.config)  # whole keys: the slots copy every prompt column (windows by mask)
    out = target.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache,
                       use_cache=True, logits_to_keep=1)
    return cache, out.logits[:, -1].float()


def sample_answers(target: Target, prompts: Mapping[int, PromptInputs], seeds: Mapping[int, int],
                   config: SamplingConfig, max_new_tokens: int, batch_size: int, *,
                   refill_at: int | None = None) -> dict[int, Answer]:
    """Sample one answer per prompt (keyed by sample index), at most ``batch_size`` rows at a time."""
    return dict(iter_answers(target, prompts, seeds, config, max_new_tokens, batch_size, refill_at=refill_at))


@torch.no_grad()
def iter_answers(target: Target, prompts: Mapping[int, PromptInputs], seeds: Mapping[int, int],
                 config: SamplingConfig, max_new_tokens: int, batch_size: int, *,
                 refill_at: int | None = None) -> Iterator[tuple[int, Answer]]:
    """Yield ``(sample index, answer)`` as each answer finishes.

    Prompts enter in the order of ``prompts``; a refill waits until ``refill_at`` slots are free
    (default an eighth of the batch) so each prefill is a small batch, not a row.
    """
    if max_new_tokens < 1:
        raise ValueError(f"{option('max_new_tokens')} must be >= 1, got {max_new_tokens}")
    if target.uses_mrope:
        raise ValueError("iter_answers takes text targets; M-RoPE targets regenerate through generate")
    eos = set(target.eos_token_ids)
    pad_id = target.tokenizer.pad_token_id
    pad_id = min(eos) if pad_id is None else pad_id
    refill_at = max(1, batch_size // 8) if refill_at is None else refill_at
    if not prompts:  # a finished answer set asked again has nothing to sample
        return
    queue = list(prompts)
    longest = max(p.length for p in prompts.values())
    kv = _SlotKV(target, min(batch_size, len(queue)), headroom=longest, span=longest + max_new_tokens)
    rows: list[_Row | None] = [None] * kv.slots  # the sample in each slot (None: free)
    logits = torch.zeros((kv.slots, target.vocab_size), device=target.device)  # (S, V) next-token logits

    while queue or any(rows):
        free = [s for s, row in enumerate(rows) if row is None]
        if queue and free and (len(free) >= min(refill_at, len(queue)) or not any(rows)):
            entering, queue = queue[:len(free)], queue[len(free):]
            cache, new_logits = _prefill(target, [prompts[i] for i in entering], pad_id)
            for j, (slot, i) in enumerate(zip(free, entering)):
                length = prompts[i].length
                kv.write_prompt(slot, [layer.keys[j, :, -length:] for layer in cache.layers],
                                [layer.values[j, :, -length:] for layer in cache.layers])
                rows[slot] = _Row(i, make_generator(seeds[i], target.device), length)
                logits[slot] = new_logits[j]
        live = [s for s, row in enumerate(rows) if row is not None]
        drawn = draw_rows(logits[live], config, [rows[s].generator for s in live]).tolist()  # next token per live row
        for slot, token in zip(live, drawn):
            row = rows[slot]
            row.tokens.append(token)
            if token in eos or len(row.tokens) >= max_new_tokens:
                yield row.index, Answer(tokens=torch.tensor(row.tokens, dtype=torch.long), stopped_at_eos=token in eos)
                rows[slot] = None
                kv.free(slot)
        if not any(rows):
            continue
        if not queue and 2 * sum(r is not None for r in rows) <= kv.slots:  # drain: shrink the batch
            keep = [s for s, row in enumerate(rows) if row is not None]
            kv.keep_slots(keep)
            rows, logits = [rows[s] for s in keep], logits[keep]
        kv.trim()
        tokens = torch.tensor([row.tokens[-1] if row else pad_id for row in rows], device=target.device)
        positions = torch.tensor([row.position if row else 0 for row in rows], device=target.device)
        mask = kv.open_column()  # (S, W + 1)
        out = target.model(input_ids=tokens.view(-1, 1), attention_mask=mask, position_ids=positions.view(-1, 1),
                           cache=kv.cache, use_cache=True)
        kv.advance()
        for row in rows:
            if row is not None:
                row.position += 1
        logits = out.logits[:, -1].float()
