"""The target's KV-cached forwards over one sequence: prefill, steps, crop, and hidden-state capture.

A :class:`TargetSession` holds one sequence's KV cache and the tokens it covers; prefill and step
return the logits of their new tokens (and the captured layers' outputs the drafter's KV injection
reads). :meth:`TargetSession.step_tree` verifies a draft tree in one forward (a 4D mask over the
block) and :meth:`TargetSession.keep_rows` compacts the cache to the accepted path afterwards.
Prompt encoding and model loading stay in :mod:`minispark.target.loading`.

    python -c "from minispark.target.loading import load_target; t = load_target(); s = t.session(); print(s.prefill(t.encode(prompt='Hi')).logits.shape)"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import torch
from transformers.cache_utils import DynamicLayer

from minispark.core.errors import MinisparkError
from minispark.target.attention import GROUPED_SDPA
from minispark.target.compiled import StaticSteps
from minispark.target.kv_cache import GrowingLayer, RowLayer, growing_cache, plain_cache

#: Attention implementations that read a 4D mask as given: transformers' ``masking_utils`` returns a
#: 4D ``attention_mask`` untouched, and these apply it as a dense (boolean, or additive for eager) mask.
#: flash / flex attention take padding masks or block masks of their own, so a tree cannot reach them.
TREE_ATTENTION = frozenset({"sdpa", GROUPED_SDPA, "eager"})


@dataclass
class PromptInputs:
    """A tokenized prompt (batch of one).

    input_ids:      (1, P) long
    model_kwargs:   extra forward inputs for the prefill (pixel_values, image_grid_thw, ...)
    text_positions: (P,) long, 1D text-stream position (M-RoPE temporal component; arange otherwise)
    position_ids:   (3, 1, P) M-RoPE positions, or None for 1D-RoPE models
    """

    input_ids: torch.Tensor
    text_positions: torch.Tensor
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    position_ids: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[1])


@dataclass
class StepOutput:
    """What one KV-cached target forward returns for its n new tokens.

    logits:       (n, V) float32 (only the last row for a prefill)
    features:     (n, m·d) concatenated raw outputs of the captured decoder layers, or None
    final_hidden: (n, d) final-norm hidden (pre lm_head), or None
    """

    logits: torch.Tensor
    features: torch.Tensor | None = None
    final_hidden: torch.Tensor | None = None


class Target(Protocol):
    """What a session reads of :class:`minispark.target.loading.Target` (which builds sessions, so
    this module cannot import it)."""

    model: torch.nn.Module
    decoder: torch.nn.Module
    final_norm: torch.nn.Module
    runtime: str
    uses_mrope: bool
    static_steps: StaticSteps | None

    @property
    def device(self) -> torch.device: ...

    def mrope_positions(self, input_ids: torch.Tensor, kwargs: dict[str, Any]) -> tuple[torch.Tensor, int]: ...


class TargetSession:
    """KV-cached forwards over one sequence, with optional hidden-state capture hooks."""

    def __init__(self, target: Target, capture_layers: Sequence[int], capture_final: bool,
                 cache: Any | None = None) -> None:
        self.target = target
        # compiled: a pooled static cache, features from the hooks StaticSteps installed once (a hook added
        # per session would recompile the step); eager stays transformers as transformers runs (the baseline)
        self.static: StaticSteps | None = target.static_steps
        if self.static is not None:
            self.cache = self.static.acquire()
        elif cache is not None:  # a row of caches decoded together (kv_cache.slot_caches)
            self.cache = cache
        elif target.runtime == "eager":
            self.cache = plain_cache(target.model.config)
        else:
            self.cache = growing_cache(target.model.config)
        # (cache_length,) on the target device (no sync per step): the tokens the KV cache holds
        self.ids = torch.empty(0, dtype=torch.long, device=target.device)
        self.rope_delta = 0
        # (cache length it began at, parent of each node) of the last step_tree: what keep_rows checks
        self._tree: tuple[int, list[int]] | None = None
        self._captured: dict[int, torch.Tensor] = {}
        self._final: list[torch.Tensor] = []
        self.capture_layers = list(capture_layers)
        self._hooks = [] if self.static is not None else \
            [target.decoder.layers[i].register_forward_hook(self._layer_hook(i)) for i in self.capture_layers]
        if capture_final and self.static is None:
            self._hooks.append(target.final_norm.register_forward_hook(
                lambda _m, _i, out: self._final.append(out)))
        self.capture_final = capture_final

    def __enter__(self) -> "TargetSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        if self.static is not None and self.cache is not None:
            self.static.release(self.cache)
            self.cache = None

    def _layer_hook(self, index: int):
        def hook(_module: torch.nn.Module, _inputs: Any, output: Any) -> None:
            self._captured[index] = output[0] if isinstance(output, tuple) else output
        return hook

    @property
    def cache_length(self) -> int:
        return self.ids.numel()  # the cached tokens, kept beside the cache (a static cache's length is a tensor)

    def _forward(self, step: bool, **inputs: Any) -> torch.Tensor:
        """The model on ``inputs`` through this session's cache (a decoding ``step``, else a prefill);
        its logits, with the captured states kept for :meth:`_collect`."""
        if self.target.threads is not None:
            self.target.threads.tick()  # between steps: the cores other processes leave free
        if self.static is None:
            return self.target.model(cache=self.cache, use_cache=True, **inputs).logits
        needed = self.cache_length + inputs["input_ids"].shape[1]
        self.cache = self.static.fit(self.cache, self.cache_length, needed)
        wanted = frozenset(self.capture_layers) | ({"final"} if self.capture_final else set())
        logits, kept = self.static.run(step, wanted, cache=self.cache, **inputs)
        self._captured.update({i: kept[i] for i in self.capture_layers})
        if self.capture_final:
            self._final.append(kept["final"])
        return logits

    def _collect(self, logits: torch.Tensor) -> StepOutput:
        features = None
        if self.capture_layers:
            # (1, n, d) per layer → (n, m·d), layer-major within a row as the drafter's fc expects.
            features = torch.cat([self._captured.pop(i)[0] for i in self.capture_layers], dim=-1)
        final = self._final.pop()[0] if self.capture_final else None
        return StepOutput(logits=logits[0].float(), features=features, final_hidden=final)

    @torch.no_grad()
    def prefill(self, inputs: PromptInputs, length: int | None = None, all_logits: bool = False,
                start: int = 0) -> StepOutput:
        """Forward prompt tokens [start, length) (all by default) after the ``start`` cached ones.

        ``start`` > 0 continues a session on a longer prompt (a new chat turn): the cache must hold
        exactly ``inputs``' first ``start`` tokens. Positions, the rope delta and the images come
        from the whole prompt, so the result equals a prefill of ``inputs`` from scratch.
        """
        length = inputs.length if length is None else length
        if start != self.cache_length:
            raise RuntimeError(f"prefill from token {start} on a session holding {self.cache_length}")
        if not torch.equal(inputs.input_ids[0, :start].cpu(), self.ids.cpu()):
            raise RuntimeError("prefill: the cached tokens are not a prefix of the prompt")
        if not start <= length <= inputs.length:
            raise RuntimeError(f"prefill: out-of-range span [{start}, {length}) of {inputs.length}")
        if start == length:  # a one-token prompt (plain text, no template around it): nothing before the anchor
            return self._nothing()
        kwargs = _span_inputs(self.target, inputs, start, length)
        if inputs.position_ids is not None:
            _, self.rope_delta = self.target.mrope_positions(inputs.input_ids, inputs.model_kwargs)
            kwargs["position_ids"] = inputs.position_ids[:, :, start:length]
        elif start:
            kwargs["position_ids"] = torch.arange(start, length, device=self.target.device).view(1, -1)
        tokens = inputs.input_ids[:, start:length]
        logits = self._forward(False, input_ids=tokens, logits_to_keep=0 if all_logits else 1, **kwargs)
        self.ids = torch.cat([self.ids, tokens[0].to(self.ids.device)])
        return self._collect(logits)

    def _nothing(self) -> StepOutput:
        """A forward of no tokens: no logits, and (0, ·) features and final hidden states where captured."""
        device, width = self.target.device, self.target.hidden_size
        features = (torch.zeros(0, len(self.capture_layers) * width, device=device, dtype=self.target.dtype)
                    if self.capture_layers else None)
        final = torch.zeros(0, width, device=device, dtype=self.target.dtype) if self.capture_final else None
        return StepOutput(logits=torch.zeros(0, self.target.vocab_size, device=device), features=features,
                          final_hidden=final)

    def reusable(self, inputs: PromptInputs) -> int:
        """How many cached tokens a prefill of ``inputs`` can keep: their common prefix with the
        cache, never splitting an image's placeholder run, and leaving at least one token to forward
        besides the anchor (so every prefill returns features)."""
        prompt = inputs.input_ids[0].cpu()
        n = min(self.cache_length, max(0, inputs.length - 2))
        differs = (prompt[:n] != self.ids[:n].cpu()).nonzero()
        keep = int(differs[0]) if differs.numel() else n
        image_id = getattr(self.target.model.config, "image_token_id", None)
        while 0 < keep < inputs.length and image_id is not None and prompt[keep] == image_id \
                and prompt[keep - 1] == image_id:
            keep -= 1
        return keep

    def shareable(self, inputs: PromptInputs) -> int:
        """How many of this session's cached tokens another session of the same batch could take for ``inputs``
        (:meth:`adopt_prefix`): their common text prefix, 0 for a prompt with images (two prompts with the same
        image placeholders may hold different images) or a cache that is not a row of shared buffers."""
        if inputs.model_kwargs or inputs.position_ids is not None or not self._rows():
            return 0
        return self.reusable(inputs)

    def _rows(self) -> bool:
        return all(type(layer) is RowLayer and layer.is_initialized for layer in self.cache.layers)

    def adopt_prefix(self, donor: "TargetSession", length: int) -> None:
        """Hold ``donor``'s first ``length`` cached tokens (a copy of their keys and values within the shared
        buffers: what a prefill of them computes), dropping this session's own; ``length`` ≤
        ``donor.shareable(prompt)`` for the prompt this session prefills next."""
        if not donor._rows() or not all(type(layer) is RowLayer for layer in self.cache.layers) \
                or length > donor.cache_length:
            raise RuntimeError("adopt_prefix: both sessions must be rows of one batch's buffers, the donor holding "
                               f"{length} tokens")
        self._tree = None
        for mine, theirs in zip(self.cache.layers, donor.cache.layers):
            if not mine.is_initialized:
                mine.lazy_initialization(theirs.keys, theirs.values)
            rows = theirs.rows
            rows.keys[mine.slot, :, :length] = rows.keys[theirs.slot, :, :length]
            rows.values[mine.slot, :, :length] = rows.values[theirs.slot, :, :length]
            mine.set_length(length)
        self.ids = donor.ids[:length].clone()
        self.rope_delta = 0  # a text prefix: positions are its indices

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> StepOutput:
        """Forward ``tokens`` (n,) after the cached ones; logits for every new token."""
        n = tokens.numel()
        start = self.cache_length
        positions = torch.arange(start, start + n, device=tokens.device) + self.rope_delta  # (n,)
        if self.target.uses_mrope:
            position_ids = positions.view(1, 1, n).expand(3, 1, n)
        else:
            position_ids = positions.view(1, n)
        logits = self._forward(True, input_ids=tokens.view(1, n), position_ids=position_ids)
        self.ids = torch.cat([self.ids, tokens.reshape(-1).to(self.ids.device)])
        return self._collect(logits)

    def _tree_refusal(self) -> str | None:
        """Why this session cannot verify a tree in one forward, or None when it can."""
        plain = "tree verification needs a plain KV cache"
        if self.static is not None:
            return f"{plain} (the compiled runtime's static cache is not one); verify chains instead"
        if any(type(layer) not in (DynamicLayer, GrowingLayer, RowLayer) for layer in self.cache.layers):
            return f"{plain} (this target's cache has special layers); verify chains instead"
        if self.target.windowed:  # the tree mask built here would let a node see past its window
            return "tree verification does not apply a sliding window (this target has one); verify chains instead"
        attention = self.target.decoder.config._attn_implementation
        if attention not in TREE_ATTENTION:
            return f"tree verification needs SDPA or eager attention, not {attention}; verify chains instead"
        return None

    @property
    def supports_trees(self) -> bool:
        """Whether :meth:`step_tree` can run here (no forward tried): the engine falls back to chains."""
        return self._tree_refusal() is None

    @torch.no_grad()
    def step_tree(self, tokens: torch.Tensor, parents: torch.Tensor) -> StepOutput:
        """Forward a draft tree after the cached tokens in one target forward.

        ``tokens`` (n,) are the tree's nodes, node 0 the round's anchor (its root, ``parents[0] == -1``)
        and every other node's parent earlier in the block (``parents[i]`` in [0, i)). Each node sits at
        position cache_length + its depth and attends the cache and exactly its own ancestors and itself,
        so row i of the logits is what the target predicts after node i's root-to-node path: a chain
        (parents -1, 0, 1, ...) gives :meth:`step`'s numbers. The cache then holds all n nodes (the ids
        grow by them too) until :meth:`keep_rows` keeps the accepted path.
        """
        reason = self._tree_refusal()
        if reason is not None:
            raise MinisparkError(reason)
        n = tokens.numel()
        parent = [int(p) for p in parents.reshape(-1).tolist()]
        ancestors, depth = tree_ancestors(parent, n)  # (n, n) bool, (n,) long, on the CPU
        start = self.cache_length
        device = tokens.device
        positions = depth.to(device) + start + self.rope_delta  # (n,)
        if self.target.uses_mrope:
            position_ids = positions.view(1, 1, n).expand(3, 1, n)
        else:
            position_ids = positions.view(1, n)
        visible = torch.cat([torch.ones(n, start, dtype=torch.bool), ancestors], dim=1)  # (n, start + n)
        mask = visible.view(1, 1, n, start + n).to(self.target.device)  # True = attend, as SDPA reads it
        if self.target.decoder.config._attn_implementation == "eager":  # eager adds its mask to the scores
            dtype = self.target.final_norm.weight.dtype  # the hidden states' (transformers' eager mask uses it)
            mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)
        logits = self._forward(True, input_ids=tokens.view(1, n), position_ids=position_ids, attention_mask=mask)
        self.ids = torch.cat([self.ids, tokens.reshape(-1).to(self.ids.device)])
        self._tree = (start, parent)
        return self._collect(logits)

    def keep_rows(self, start: int, rows: list[int]) -> None:
        """Keep only block rows ``rows`` of the :meth:`step_tree` that began at cache length ``start``.

        ``rows`` are ascending block indices from the anchor (0) along the accepted path. Each kept
        node's K/V were computed at position start + its depth, and an accepted path's depths are
        0..len(rows)-1, so moving the columns down to start, start+1, ... leaves exactly what a prefill of
        the committed tokens would have written: no re-forward is needed.
        """
        end = start + len(rows)
        pairs = list(zip(rows, rows[1:]))  # (parent, child) along the path
        if not rows or rows[0] != 0 or any(b <= a for a, b in pairs) or start + rows[-1] >= self.cache_length:
            raise ValueError(f"keep_rows: rows {rows} are not ascending block rows from 0 after token {start} "
                             f"of {self.cache_length}")
        if self._tree is not None and self._tree[0] == start:  # the tree is known: the rows must be a path of it
            parent = self._tree[1]
            if rows[-1] >= len(parent) or any(parent[b] != a for a, b in pairs):
                raise ValueError(f"keep_rows: rows {rows} are not a root-to-node path of the tree {parent}")
        if rows == list(range(len(rows))):  # a prefix of the block: nothing moves
            self.crop(end)
            return
        reason = self._tree_refusal()
        if reason is not None:  # a sliding window's or static cache's columns are not plain rows to move
            raise MinisparkError(reason)
        index = torch.tensor(rows, device=self.ids.device) + start  # (k,) cache columns to keep
        kept = torch.cat([self.ids[:start], self.ids[index]])  # (end,)
        for layer in self.cache.layers:
            if not layer.is_initialized:
                continue
            # In place: a GrowingLayer's keys/values are views of its buffers, a DynamicLayer's are its
            # own tensors; index_select copies before the write, so overlapping columns are safe.
            columns = index.to(layer.keys.device)
            layer.keys[..., start:end, :] = layer.keys.index_select(-2, columns)  # (B, H, k, D)
            layer.values[..., start:end, :] = layer.values.index_select(-2, columns)
        self.crop(end)
        self.ids = kept

    def text_positions(self, start: int, n: int) -> torch.Tensor:
        """1D text positions of cache indices [start, start+n) past the prompt's last image."""
        return torch.arange(start, start + n) + self.rope_delta

    def crop(self, length: int) -> None:
        """Drop cached tokens beyond ``length`` (rejected drafts); no re-prefill needed."""
        self._tree = None  # its rows are gone or no longer at the cache's end
        excess = self.cache_length - length
        if excess > 0:
            self.cache.crop(-excess)  # transformers 5.x: a negative count drops the last tokens
            self.ids = self.ids[:length]


def tree_ancestors(parent: list[int], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, n) bool, row i True at node i's ancestors and itself, and the (n,) depths, on the CPU: a tree
    is a few dozen nodes at most, and its shape is checked here before any forward reads it."""
    if len(parent) != n or not n or parent[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parent) if i):
        raise ValueError(f"step_tree: parents {parent} are not a tree over {n} nodes "
                         "(root first, parents before children)")
    ancestors = torch.eye(n, dtype=torch.bool)
    for i in range(1, n):
        ancestors[i] |= ancestors[parent[i]]  # a parent's row is complete before its children's
    return ancestors, ancestors.sum(dim=1) - 1


def _span_inputs(target: Target, inputs: PromptInputs, start: int, end: int) -> dict[str, Any]:
    """The extra forward inputs for prompt tokens [start, end): the images whose placeholder runs lie
    inside the span (pixel rows and grid rows of the others dropped) and the span's token types."""
    kwargs = dict(inputs.model_kwargs)
    if "mm_token_type_ids" in kwargs:
        kwargs["mm_token_type_ids"] = kwargs["mm_token_type_ids"][:, start:end]
    if start == 0 and end == inputs.length:
        return kwargs
    if kwargs.get("video_grid_thw") is not None:
        raise MinisparkError("a prompt with video cannot be forwarded in parts (chat turns take images only)")
    grid = kwargs.get("image_grid_thw")
    if grid is None:
        return kwargs
    merge = target.model.config.vision_config.spatial_merge_size
    is_image = (inputs.input_ids[0] == target.model.config.image_token_id).cpu()
    before, inside = int(is_image[:start].sum()), int(is_image[start:end].sum())
    rows = grid.prod(-1).cpu()  # (N,) pixel rows per image, in prompt order
    token_ends = torch.cumsum(rows // merge**2, 0).tolist()  # placeholder tokens up to each image
    bounds = [0] + token_ends
    if before not in bounds or before + inside not in bounds:
        raise RuntimeError(f"prompt span [{start}, {end}) splits an image's placeholder tokens")
    first, last = bounds.index(before), bounds.index(before + inside)
    row_bounds = [0] + torch.cumsum(rows, 0).tolist()
    kwargs.pop("pixel_values")
    kwargs.pop("image_grid_thw")
    if last > first:
        kwargs["pixel_values"] = inputs.model_kwargs["pixel_values"][row_bounds[first]:row_bounds[last]]
        kwargs["image_grid_thw"] = grid[first:last]
    return kwargs
