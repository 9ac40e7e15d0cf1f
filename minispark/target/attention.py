"""Grouped-query attention without copying the KV cache: SDPA's ``enable_gqa`` for masked forwards.

transformers' SDPA path handles a model with fewer KV heads than query heads (SmolLM2: 9 vs 3,
Qwen2.5-VL-3B: 16 vs 2) by folding the heads for a one-token step, but for any forward of n > 1
tokens with a mask (verifying a drafted block, a batched round) it calls ``repeat_kv``: a copy of
the whole cached context, heads × groups, in every layer. Measured on the embedded target at a
238-token context, that copy (``aten::copy_``) is ~26 ms of a ~180 ms profiled 8-token forward,
and it grows with the context. PyTorch's CPU flash kernel takes the grouped keys and values as they
are (``enable_gqa=True``) with a mask, bit-identical to the repeated ones (tested).

:func:`use_grouped_attention` registers this function with transformers and switches a CPU model to
it; everything this path does not cover (one-token steps, position biases, soft-capping, CUDA, where
masked GQA would fall back to the math kernel) runs transformers' own SDPA function unchanged.

    python -c "from minispark.target.loading import load_target; print(load_target().model.config._attn_implementation)"
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

#: The name this implementation is registered under (masks are SDPA's).
GROUPED_SDPA = "minispark_grouped_sdpa"


def grouped_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                         is_causal: bool | None = None, **kwargs: object) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query (B, H, q, D), key/value (B, H_kv, L, D)."""
    groups = getattr(module, "num_key_value_groups", 1)
    special = kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None \
        or (attention_mask is None and key.shape[2] != query.shape[2])  # transformers slices that case
    if groups == 1 or query.shape[2] == 1 or query.device.type != "cpu" or special:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, is_causal=is_causal, **kwargs)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = bool(causal) and attention_mask is None  # SDPA's is_causal aligns top-left: only without a cache
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, is_causal=causal, enable_gqa=True)  # (B, H, q, D)
    return out.transpose(1, 2).contiguous(), None  # (B, q, H, D), as transformers expects


def use_grouped_attention(model: torch.nn.Module) -> bool:
    """Switch ``model`` (an SDPA model on a CPU) to :func:`grouped_sdpa_forward`; whether it did."""
    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(GROUPED_SDPA, sdpa_mask)
    model.set_attn_implementation(GROUPED_SDPA)
    return True
