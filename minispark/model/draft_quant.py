"""Weight-only int8 for the drafter's large linear layers when it serves on a CPU.

A round's ``propose`` reads every drafter weight once (two layers, the feature projection, the
draft-vocabulary lm_head and the Markov table: ~50 MB in fp32), and on a small CPU that read is
what a proposal costs: GEMMs of 1–8 rows are memory-bound. Per-output-row symmetric int8 weights
with bf16 activations (``torch._weight_int8pack_mm``, the CPU kernel torchao's weight-only int8
uses) read a quarter of the bytes; measured on the project's 2-core CPU with cold caches, the
7 × 576 × 8192 lm_head GEMM drops from 9.5 ms (fp32) to 2.2 ms.

Losslessness is untouched: the quantized drafter *is* the drafter, its p_d is exactly the
distribution it samples from, and verification uses the target's full-precision distribution. Only
how often drafts are accepted can change (by the quantization error; ``bench`` reports τ).

    .venv/bin/python -m pytest -q tests/model/test_draft_quant.py
"""

from __future__ import annotations

import torch
from torch import nn

from minispark.target.int8 import int8_matmul, int8_rows

#: Linear layers quantized, by name suffix: everything read once per proposal and large enough to
#: matter; small heads (confidence, gates) keep full precision.
QUANTIZED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "fc", "lm_head",
             "markov_w2")


class Int8Linear(nn.Module):
    """``y = x Wᵀ (+ b)`` with W stored as int8 rows times a per-row scale; output in ``x``'s dtype."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        rows, scale = int8_rows(linear.weight)  # (N, K) int8, (N,) bf16
        self.register_buffer("weight_int8", rows)
        self.register_buffer("scale", scale)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int8_matmul(x, self.weight_int8, self.scale, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights"


@torch.no_grad()
def quantize_int8(model: nn.Module) -> int:
    """Replace the drafter's large ``nn.Linear`` layers (see :data:`QUANTIZED`) by :class:`Int8Linear`
    in place, for inference; returns how many were replaced."""
    targets = [(name, module) for name, module in model.named_modules()
               if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in QUANTIZED]
    for name, linear in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, Int8Linear(linear).to(linear.weight.device))
    return len(targets)
