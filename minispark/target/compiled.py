"""The ``compiled`` runtime: decoding steps through a static KV cache and ``torch.compile``.

A decoding step of a small model at batch 1 is mostly fixed cost: Python, the dynamic cache's
bookkeeping and, on a GPU, one kernel launch per op. ``compiled`` keeps the HF model and its weights
and changes how a step runs:

* the session's KV cache is transformers' ``StaticCache`` (tensors allocated once, written in place;
  a rejected draft is dropped by moving its length back, and the causal mask hides what lies beyond);
* the step forward (1..γ+1 tokens: a plain step or a verify) is ``torch.compile``d — CUDA graphs
  (``mode="reduce-overhead"``) on a GPU, inductor's default on a CPU. Compiling matters beyond launch
  overhead: transformers builds a static cache's attention mask over every slot, which costs far more
  eagerly (~60 ms for one token, ~870 ms for two, on a tiny Llama with 4,096 slots) than compiled (~7 / 18 ms).
  Features come from forward hooks installed once, when the target loads, that keep every layer's
  output of a step: a hook added or removed per session would make the compiled graph recompile, and
  transformers' ``output_hidden_states`` installs hooks on every call (a graph break per layer);
* prefill (any length, images) runs eagerly, through a dynamic cache over the static one's filled
  part, and its K/V are then written into the static cache.

Widths share graphs: the first width compiles a static graph, the second a dynamic one that serves
every later width (torch's automatic dynamic shapes), so a scheduler asking for any γ+1 pays two
compilations, which inductor's on-disk cache makes seconds in the next process. Caches are pooled per
target (a session takes one and gives it back), so a graph recorded for a cache's addresses is reused
by the next session. Where compiling cannot work (no C++ compiler, no Triton) the same code runs
eagerly with a one-line notice (``compile_fallback.py``). ``compiled`` is built for CUDA; on this
project's CPU ``packed`` is the fast runtime (``docs/experiments.md``), and ``auto`` never picks
``compiled`` on a CPU.

    .venv/bin/python -m pytest -q tests/target/test_compiled_runtime.py
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from minispark.core.defaults import STATIC_CACHE_TOKENS
from minispark.target.compile_fallback import compile_or_eager


def capacity(cache: Any) -> int:
    """The positions a static cache holds."""
    return cache.layers[0].max_cache_len


def _forward(model: nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor, cache: Any) -> torch.Tensor:
    """Logits (1, n, V) of every new token (the hooks keep the layers' outputs)."""
    return model(input_ids=input_ids, position_ids=position_ids, cache=cache, use_cache=True).logits


def _keep(steps: "StaticSteps", key: int | str, _module: nn.Module, _inputs: Any, output: Any) -> None:
    # A compiled step keeps every layer (a choice read here would be a guard: one graph per choice);
    # an eager prefill only the ones asked for (its outputs are prompt-long).
    if torch.compiler.is_compiling() or key in steps.wanted:
        steps.outputs[key] = output[0] if isinstance(output, tuple) else output


class StaticSteps:
    """One target's compiled step forward, its output hooks and its pool of static KV caches (batch 1)."""

    def __init__(self, model: nn.Module, decoder: nn.Module, final_norm: nn.Module, device: torch.device) -> None:
        self.model, self.device = model, device
        text = model.config.get_text_config()
        self.limit = int(getattr(text, "max_position_embeddings", 0) or 1 << 20)  # before a Target exists
        # No freezing on a CPU: it folds the weights into the graph, which bypasses inductor's disk cache
        # and, with the dynamic width, made steps slower than unfrozen ones (measured on a tiny Llama).
        options: dict[str, Any] = {"mode": "reduce-overhead"} if device.type == "cuda" else {}
        self.step = compile_or_eager(_forward, device, what="decoding", flag="--runtime compiled", **options)
        self._free: list[Any] = []
        # layer index (or "final" for the final norm) → its output in the last forward
        self.outputs: dict[int | str, torch.Tensor] = {}
        self.wanted: frozenset[int | str] = frozenset()
        for index, layer in enumerate(decoder.layers):
            layer.register_forward_hook(functools.partial(_keep, self, index))
        final_norm.register_forward_hook(functools.partial(_keep, self, "final"))

    def run(self, step: bool, wanted: frozenset[int | str], **inputs: Any) -> tuple[torch.Tensor, dict]:
        """Logits of a decoding ``step`` (compiled) or a prefill (eager, any length, images) through
        ``inputs['cache']``, and the ``wanted`` outputs (copies: CUDA graphs reuse their output memory)."""
        self.wanted = wanted
        self.outputs.clear()
        if step:  # fresh tensors: a view's base is part of the graph's guards (one recompile per base shape)
            logits = self.step(self.model, inputs["input_ids"].clone(), inputs["position_ids"].clone(),
                               inputs["cache"])
        else:
            logits = self._prefill(**inputs)
        kept = {key: self.outputs[key].clone() for key in wanted}
        self.outputs.clear()
        self.wanted = frozenset()  # forwards outside a session (HF generate in bench) keep nothing
        return logits.clone(), kept

    def _prefill(self, cache: Any, **inputs: Any) -> torch.Tensor:
        """An eager prefill through a dynamic cache over the static one's filled part, the new K/V then
        written into the static cache: transformers' mask over every static slot would cost seconds for a
        prompt (it is built eagerly, per query row)."""
        from transformers import DynamicCache

        length = int(cache.get_seq_length()) if cache.is_initialized else 0
        held = [(layer.keys[:, :, :length], layer.values[:, :, :length]) for layer in cache.layers] if length else None
        dynamic = DynamicCache(ddp_cache_data=held) if held else DynamicCache(config=self.model.config)
        logits = self.model(use_cache=True, cache=dynamic, **inputs).logits
        first = dynamic.layers[0].keys  # (1, Hkv, length + n, D)
        if not cache.is_initialized:
            cache.early_initialization(first.shape[0], first.shape[1], first.shape[3], first.dtype, first.device)
        end = first.shape[2]
        for src, dst in zip(dynamic.layers, cache.layers):
            dst.keys[:, :, length:end] = src.keys[:, :, length:end]
            dst.values[:, :, length:end] = src.values[:, :, length:end]
            dst.cumulative_length.fill_(end)
        return logits

    def acquire(self, tokens: int = 0) -> Any:
        """An empty static cache of at least ``tokens`` slots (a pooled one when it is large enough)."""
        for i, cache in enumerate(self._free):
            if capacity(cache) >= tokens:
                return self._free.pop(i)
        return self._new(max(tokens, STATIC_CACHE_TOKENS))

    def release(self, cache: Any) -> None:
        """Give ``cache`` back emptied (its length set to 0; stale entries stay masked)."""
        if cache.is_initialized:
            cache.crop(-int(cache.get_seq_length()))
        self._free.append(cache)

    def fit(self, cache: Any, length: int, needed: int) -> Any:
        """``cache`` if it holds ``needed`` tokens, else a larger one (×2) holding its first ``length``."""
        if needed <= capacity(cache):
            return cache
        if needed > self.limit:
            raise RuntimeError(f"the sequence needs {needed} positions, the target's context is {self.limit}")
        bigger = self._new(min(self.limit, max(needed, 2 * capacity(cache))))
        if cache.is_initialized and length:
            old = cache.layers[0]
            bigger.early_initialization(1, old.num_heads, old.k_head_dim, old.keys.dtype, old.keys.device)
            for src, dst in zip(cache.layers, bigger.layers):
                dst.keys[:, :, :length] = src.keys[:, :, :length]
                dst.values[:, :, :length] = src.values[:, :, :length]
                dst.cumulative_length.fill_(length)
        return bigger

    def _new(self, tokens: int) -> Any:
        from transformers import StaticCache

        return StaticCache(config=self.model.config, max_cache_len=min(tokens, self.limit))
