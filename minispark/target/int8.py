"""Weight-only int8 matrices: per-output-row symmetric int8 weights, bf16 activations, one CPU kernel.

``torch._weight_int8pack_mm`` (the CPU kernel torchao's weight-only int8 uses) multiplies bf16 rows by
int8 weights and a per-row bf16 scale, reading a quarter of fp32's bytes: on the project's 2-core CPU
the embedded target's linear layers run a one-token step in 12 ms instead of 41 ms (prepacked fp32).
Two users: the drafter's int8 serving (``model/draft_quant.py``) and the int8 target runtime
(``target/runtime.py``, ``--runtime int8``).

    .venv/bin/python -m pytest -q tests/model/test_draft_quant.py
"""

from __future__ import annotations

import torch


#: The kernel's inner dimension must be a multiple of this: measured on an Intel Xeon (torch 2.14.1, CPU), K = 8,
#: 24, 40 or 72 gave wrong, run-to-run different products (errors up to 1e31, and a segfault) for M >= 2 rows,
#: while every multiple of 16 tried (16 … 1536) was exact; on an AMD EPYC all of them were. Narrower weights
#: are zero-padded once (a tiny model's rank-8 Markov head), which leaves every product unchanged.
K_MULTIPLE = 16


def int8_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, K) float weight → (N, K′) int8 rows and their (N,) bf16 scales; K′ is K rounded up to
    :data:`K_MULTIPLE` (zero columns), which :func:`int8_matmul` matches by padding its input."""
    weight = weight.detach().float()
    # The kernel takes a bf16 scale: round it first (up by one bf16 step at most, so the row's largest
    # weight still fits in ±127) and quantize against the rounded value.
    scale = (weight.abs().amax(dim=1).clamp_min(1e-12) / 127.0 * (1 + 2**-7)).to(torch.bfloat16)  # (N,)
    rows = torch.round(weight / scale.float()[:, None]).clamp_(-127, 127)  # (N, K)
    rows = torch.nn.functional.pad(rows, (0, -weight.shape[1] % K_MULTIPLE))  # (N, K′)
    return rows.to(torch.int8), scale


def int8_matmul(x: torch.Tensor, rows: torch.Tensor, scale: torch.Tensor,
                bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x Wᵀ (+ b)`` for x (..., K) of any float dtype and ``rows`` from :func:`int8_rows`; the result
    (..., N) in ``x``'s dtype."""
    flat = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)  # (M, K): the kernel takes 2-D bf16
    if flat.shape[1] < rows.shape[1]:  # rows padded to K_MULTIPLE: zero columns meet zero inputs
        flat = torch.nn.functional.pad(flat, (0, rows.shape[1] - flat.shape[1]))  # (M, K′)
    y = torch._weight_int8pack_mm(flat, rows, scale).to(x.dtype).view(*x.shape[:-1], rows.shape[0])  # (..., N)
    return y if bias is None else y + bias.to(y.dtype)


def int8_supported(device: torch.device | str) -> bool:
    """Whether this torch build runs the int8 weight-only kernel on ``device`` (CPU only here)."""
    if torch.device(device).type != "cpu":
        return False
    try:
        torch._weight_int8pack_mm(torch.zeros(1, K_MULTIPLE, dtype=torch.bfloat16),
                                  torch.zeros(8, K_MULTIPLE, dtype=torch.int8), torch.ones(8, dtype=torch.bfloat16))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return True
