"""Block-quantized weights computed as they are: a GGUF's 4-bit and 8-bit blocks read instead of their fp32 copy.

A target converted from a GGUF (the embedded SmolLM2: Q4_1 layers, a Q8_0 embedding) holds fp32 weights that
are exact dequantizations: in each block of 32 weights along a row, w = scale·q + offset, q a 4-bit integer
(or an 8-bit one and no offset), scale and offset half-precision numbers. :func:`find_blocks` finds that
structure in a weight and proves it (every weight rebuilt from q, scale and offset equals the stored one, bit
for bit; one that does not leaves the whole matrix as it is), keeping 0.75 bytes a weight (4-bit) or 1.125
(8-bit) instead of 4. :func:`block_matmul` multiplies with them in ``block_kernels.c``, compiled once per
machine and CPU into minispark's user directory (``native.py``): each block is expanded to those same fp32
weights in registers and multiplied in fp32, so the products are the fp32 target's, summed in another order (outputs
~1e-6 apart, as the packed runtime's). A decoding step reads ~5× fewer bytes, and on a CPU whose memory
bandwidth bounds a one-token step that is what it costs (``benchmarks/target_runtime.py``). The kernel needs
AVX-512 and a C compiler with OpenMP; :func:`kernel_unavailable` says when it cannot be had.

    .venv/bin/python -m pytest -q tests/target/test_block_quant.py
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import torch

from minispark.target import native

#: Weights per block along a row (GGUF's Q4_0/Q4_1/Q8_0 and the K-quants' sub-blocks).
BLOCK = 32
#: Rows checked before the rest of a matrix: a weight without the structure fails there, at little cost.
_PROBE_ROWS = 64


@dataclass(frozen=True)
class BlockWeights:
    """A weight (N, K) as blocks of 32 along its rows.

    bits:   4 (w = scale·q + offset, q in 0..15) or 8 (w = scale·q, q in -128..127)
    codes:  4-bit: (N, K/2) uint8, block b's byte j holding q_j (low nibble) and q_{j+16} (high); 8-bit: (N, K) int8
    scale:  (N, K/32) float32
    offset: (N, K/32) float32 for 4-bit blocks, else None
    """

    bits: int
    codes: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor | None

    @property
    def shape(self) -> tuple[int, int]:
        rows = self.codes.shape[0]
        return rows, self.scale.shape[1] * BLOCK

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scale, self.offset) if t is not None)

    def dequantize(self) -> torch.Tensor:
        """The fp32 weight (N, K) these blocks hold (each value rounded once, as the kernel expands it)."""
        rows, cols = self.shape
        if self.bits == 4:
            pairs = self.codes.view(rows, cols // BLOCK, BLOCK // 2)
            q = torch.cat([pairs & 15, pairs >> 4], dim=-1)  # (N, K/32, 32)
        else:
            q = self.codes.view(rows, cols // BLOCK, BLOCK)
        offset = 0.0 if self.offset is None else self.offset.double()[..., None]
        return (self.scale.double()[..., None] * q.double() + offset).float().view(rows, cols)


def _four_bit(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """q, scale, offset of (n, K/32, 32) fp32 blocks that are w = scale·q + offset exactly, q in 0..15; else None.
    The quantizer puts the block's minimum at q = 0 and its maximum at q = 15, both stored half precision."""
    low, high = blocks.amin(-1), blocks.amax(-1)
    scale = ((high - low) / 15).half().float()
    if not (torch.isfinite(scale).all() and torch.isfinite(low.half()).all()):
        return None
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))[..., None]
    q = torch.where(scale[..., None] > 0, ((blocks - low[..., None]) / safe).round(), torch.zeros_like(blocks))
    if q.min() < 0 or q.max() > 15:
        return None
    rebuilt = (scale.double()[..., None] * q.double() + low.double()[..., None]).float()
    return (q.to(torch.uint8), scale, low) if torch.equal(rebuilt, blocks) else None


def _eight_bit(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """q, scale of (n, K/32, 32) fp32 blocks that are w = scale·q exactly, q in -128..127; else None. The
    quantizer maps the block's largest magnitude to ±127."""
    scale = blocks.abs().amax(-1) / 127
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))[..., None]
    q = (blocks / safe).round()
    if q.min() < -128 or q.max() > 127:
        return None
    rebuilt = (scale.double()[..., None] * q.double()).float()
    return (q.to(torch.int8), scale) if torch.equal(rebuilt, blocks) else None


def find_blocks(weight: torch.Tensor) -> BlockWeights | None:
    """``weight`` (N, K) as exact 4-bit or 8-bit blocks of 32, or None when it is not one (checked on a few rows
    first, then on all of them)."""
    if weight.dtype != torch.float32 or weight.dim() != 2 or weight.shape[1] % BLOCK or weight.device.type != "cpu":
        return None
    rows, cols = weight.shape
    blocks = weight.detach().reshape(rows, cols // BLOCK, BLOCK)
    probe = blocks[:_PROBE_ROWS]
    if _four_bit(probe) is not None and (found := _four_bit(blocks)) is not None:
        q, scale, offset = found
        codes = (q[..., : BLOCK // 2] | (q[..., BLOCK // 2:] << 4)).reshape(rows, cols // 2)
        return BlockWeights(4, codes.contiguous(), scale.contiguous(), offset.contiguous())
    if _eight_bit(probe) is not None and (found8 := _eight_bit(blocks)) is not None:
        q, scale = found8
        return BlockWeights(8, q.reshape(rows, cols).contiguous(), scale.contiguous(), None)
    return None


@functools.cache
def _kernels() -> ctypes.CDLL | str:
    """The loaded kernels, or why they cannot be had here (asked once per process)."""
    library = native.load("block_kernels.c", "the block kernels")
    if isinstance(library, str):
        return library
    pointer, count = ctypes.c_void_p, ctypes.c_int
    library.q4_matmul.argtypes = [pointer, count, count, pointer, pointer, pointer, count, pointer, count]
    library.q8_matmul.argtypes = [pointer, count, count, pointer, pointer, count, pointer, count]
    library.q4_matmul.restype = library.q8_matmul.restype = None
    return library


def kernel_unavailable() -> str | None:
    """Why the block kernels cannot run here (no AVX-512, no compiler, a failed build), or None when they can."""
    found = _kernels()
    return found if isinstance(found, str) else None


def block_matmul(x: torch.Tensor, weight: BlockWeights, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, W, bias)`` for fp32 ``x`` (..., K), W the fp32 weight ``weight`` holds: (..., N)."""
    library = _kernels()
    if isinstance(library, str):
        raise RuntimeError(library)
    rows, cols = weight.shape
    flat = x.reshape(-1, cols).contiguous()  # (M, K)
    out = torch.empty(flat.shape[0], rows, dtype=torch.float32)  # (M, N)
    threads = torch.get_num_threads()
    if weight.bits == 4:
        library.q4_matmul(flat.data_ptr(), flat.shape[0], cols, weight.codes.data_ptr(), weight.scale.data_ptr(),
                          weight.offset.data_ptr(), rows, out.data_ptr(), threads)
    else:
        library.q8_matmul(flat.data_ptr(), flat.shape[0], cols, weight.codes.data_ptr(), weight.scale.data_ptr(),
                          rows, out.data_ptr(), threads)
    if bias is not None:
        out += bias
    return out.view(*x.shape[:-1], rows)
