"""Grouped-query attention without copying the KV cache: a kernel of ours for a few queries, SDPA's ``enable_gqa``
for masked longer forwards.

transformers' SDPA path handles a model with fewer KV heads than query heads (SmolLM2: 9 vs 3,
Qwen2.5-VL-3B: 16 vs 2) by folding the heads for a one-token step, but for any forward of n > 1
tokens with a mask (verifying a drafted block, a batched round) it calls ``repeat_kv``: a copy of
the whole cached context, heads × groups, in every layer. Measured on the embedded target at a
238-token context, that copy (``aten::copy_``) is ~26 ms of a ~180 ms profiled 8-token forward,
and it grows with the context. PyTorch's CPU flash kernel takes the grouped keys and values as they
are (``enable_gqa=True``) with a mask, bit-identical to the repeated ones (tested).

A forward whose kv heads each attend with at most ``SMALL_ATTENTION_QUERIES`` queries (query heads per kv head ×
new tokens: a decoding step, a batched round, a short verify) in fp32 on a CPU with AVX-512 runs
``attention_kernels.c`` instead (:func:`small_attention`): reading the cache is what such a forward costs, and
PyTorch's flash kernel spent ~200 µs a layer on a round of 8 one-token requests at a ~95-token context where ours
spends ~150 (the embedded target's round: 32.4 against 33.9 ms; a one-token step 16.5 against 17.9). Each
query's result depends on its own row alone, so within that size a token computes the same alone, in a block or
beside other sequences; outputs are ~1e-7 from SDPA's (tested). Wider verifies run the flash kernel, whose rows
differ from a one-token step's by ~1e-7 (as they did before this kernel).

:func:`use_grouped_attention` registers this function with transformers and switches a CPU model to
it; everything this path does not cover (position biases, soft-capping, CUDA, where masked GQA would fall
back to the math kernel) runs transformers' own SDPA function unchanged.

    python -c "from minispark.target.loading import load_target; print(load_target().model.config._attn_implementation)"
"""

from __future__ import annotations

import ctypes
import functools

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from minispark.core.defaults import SMALL_ATTENTION_QUERIES
from minispark.target import native

#: The name this implementation is registered under (masks are SDPA's).
GROUPED_SDPA = "minispark_grouped_sdpa"


def grouped_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         is_causal: bool | None = None, **kwargs: object) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query (B, H, q, D), key/value (B, H_kv, L, D)."""
    groups = getattr(module, "num_key_value_groups", 1)
    special = kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None \
        or (attention_mask is None and key.shape[2] != query.shape[2])  # transformers slices that case
    if not special and dropout == 0.0 and _small(query, key, value, attention_mask):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        return small_attention(query, key, value, attention_mask, scale).transpose(1, 2).contiguous(), None
    if groups == 1 or query.shape[2] == 1 or query.device.type != "cpu" or special:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(causal) and attention_mask is None  # SDPA's is_causal aligns top-left: only without a cache
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, is_causal=causal, enable_gqa=True)  # (B, H, q, D)
    return out.transpose(1, 2).contiguous(), None  # (B, q, H, D), as transformers expects


def _small(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None) -> bool:
    """Whether :func:`small_attention` computes this forward: few fp32 queries on a CPU whose kernel builds, one
    mask for every head (or none for a single query: it sees the whole cache)."""
    batch, heads, rows, dim = query.shape
    return (query.device.type == "cpu" and heads % key.shape[1] == 0
            and heads // key.shape[1] * rows <= SMALL_ATTENTION_QUERIES and dim % 16 == 0
            and query.dtype == key.dtype == value.dtype == torch.float32 and key.shape == value.shape
            and (rows == 1 if mask is None
                 else mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[-1] == key.shape[2])
            and _kernel() is not None)


@functools.cache
def _kernel() -> ctypes.CDLL | None:
    library = native.load("attention_kernels.c", "the attention kernels")
    if isinstance(library, str):
        return None
    pointer, count, stride = ctypes.c_void_p, ctypes.c_int, ctypes.c_long
    library.small_attention.argtypes = [pointer, count, count, count, count, pointer, pointer, stride, stride, count,
                                        count, pointer, ctypes.c_float, pointer, pointer, count]
    library.small_attention.restype = None
    return library


def small_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                    scale: float) -> torch.Tensor:
    """Attention of query (B, H, Q, D) over key / value (B, H_kv, L, D) with an additive or boolean ``mask``
    (B or 1, 1, Q, L) or none, by ``attention_kernels.c``: (B, H, Q, D)."""
    batch, heads, rows, dim = query.shape
    length = key.shape[2]
    query = query.contiguous()
    if key.stride(-1) != 1 or key.stride(-2) != dim or key.stride() != value.stride():
        key, value = key.contiguous(), value.contiguous()
    if mask is not None:
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape).masked_fill_(~mask, torch.finfo(torch.float32).min)
        mask = mask.to(torch.float32).expand(batch, 1, rows, length).contiguous()  # (B, 1, Q, L)
    out = torch.empty_like(query)
    scratch = torch.empty(batch * heads * rows * length)  # the softmax rows
    _kernel().small_attention(query.data_ptr(), batch, heads, rows, dim, key.data_ptr(), value.data_ptr(),
                              key.stride(0), key.stride(1), key.shape[1], length,
                              None if mask is None else mask.data_ptr(), scale, out.data_ptr(), scratch.data_ptr(),
                              torch.get_num_threads())
    return out


def use_grouped_attention(model: torch.nn.Module) -> bool:
    """Switch ``model`` (an SDPA model on a CPU) to :func:`grouped_sdpa_forward`; whether it did."""
    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(GROUPED_SDPA, sdpa_mask)
    model.set_attn_implementation(GROUPED_SDPA)
    return True
