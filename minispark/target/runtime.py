"""How the target's forward runs on a CPU: eager PyTorch, or ``packed`` (oneDNN-prepacked weights,
grouped-query attention without ``repeat_kv`` and a KV cache that grows in place).

Eager ``F.linear`` on this project's CPUs re-packs each weight matrix on every call, so a forward of
n > 1 rows (verifying a drafted block, a batched regeneration step) costs ~1.8× a one-row step, and a
one-row step pays the packing too. ``packed`` reorders every ``nn.Linear`` weight once, when the
target loads, into oneDNN's blocked layout and calls the prepacked kernel (the one inductor's
``freezing`` uses), without compiling anything: same weights, same fp32 arithmetic up to summation
order (logits ~1e-5 apart). It costs one extra copy of the linear weights in RAM. The same runtime
also switches attention to :mod:`~minispark.target.attention` (a kernel of ours for decoding steps and
verifies, ~1e-7 from SDPA), the session's KV cache to :mod:`~minispark.target.kv_cache` and a Llama's decoder
layers to :mod:`~minispark.target.lean_layers` (both bit-identical to transformers' own). ``auto`` picks
``packed`` for an fp32 CPU target whose kernels pack, and for a bf16 one where oneDNN has bf16 kernels
for the CPU (avx512_bf16 or AMX: its linears read half the bytes), ``eager`` everywhere else (CUDA,
quantized or fp16 targets). ``int8`` (opt-in, never picked by ``auto``) computes the text model's
linears with weight-only int8 weights and bf16 activations (``target/int8.py``): its linears read a
quarter of the bytes (one-token steps ~1.4× faster here, 8-token verifies no faster) and it is a
different target. Its drafting modes are lossless relative to it only up to near-ties: the bf16
rounding of activations makes a near-tied argmax depend on the verify width (a notice says so).
``compiled`` (opt-in; the CUDA path) leaves the modules as they are and runs decoding steps through a
static KV cache and ``torch.compile`` (:mod:`~minispark.target.compiled`).

    python -c "from minispark.target.loading import load_target; print(load_target().runtime)"
    python benchmarks/target_runtime.py     # eager vs packed forward times of the embedded target
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from typing import Iterator

import torch
from torch import nn

from minispark.core.defaults import BLOCK_MAX_ROWS, PACKED_TIED_MAX_BYTES, TARGET_RUNTIME_ENV, TARGET_RUNTIMES
from minispark.core.errors import MinisparkError, option
from minispark.core.settings import settings
from minispark.target.attention import GROUPED_SDPA, use_grouped_attention
from minispark.target import compile_fallback
from minispark.target.block_quant import BlockWeights, block_matmul, find_blocks, kernel_unavailable
from minispark.target.int8 import int8_matmul, int8_rows, int8_supported
from minispark.target.lean_layers import plain_layers, use_lean_layers


def requested_runtime(runtime: str | None = None) -> str:
    """The runtime asked for: the argument, else the settings' (``minispark --runtime`` / its variable, else auto)."""
    value = runtime or settings().runtime
    if value not in TARGET_RUNTIMES:
        raise MinisparkError(f"{option('runtime')} / ${TARGET_RUNTIME_ENV}: {value!r} is not one of "
                             f"{', '.join(TARGET_RUNTIMES)}")
    return value


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` whose forward uses a oneDNN-prepacked copy of its (frozen) weight.

    It keeps the original ``weight`` Parameter, so tied weights stay tied, ``state_dict`` and every
    reader of ``.weight`` see the checkpoint's tensor, and the module still is an ``nn.Linear``.
    """

    packed: torch.Tensor

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "PackedLinear":
        module = _sharing(cls, linear)
        # (out, in) in oneDNN's blocked layout; a plain attribute, not a buffer: never saved.
        module.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None)
        return module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and self.weight.requires_grad:
            return super().forward(x)  # the prepacked kernel has no backward
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


class BlockLinear(PackedLinear):
    """A :class:`PackedLinear` whose weight is an exact dequantization of 4-/8-bit blocks (a GGUF's): forwards of
    up to ``BLOCK_MAX_ROWS`` rows (decoding steps, verifies, batched rounds) compute from the blocks
    (``target/block_quant.py``: the same products, a fifth of the bytes read), wider ones (prefills) with the
    prepacked fp32 kernel, or the plain one where the weight has no packed copy (a large tied lm_head)."""

    blocks: BlockWeights

    @classmethod
    def from_blocks(cls, linear: nn.Linear, blocks: BlockWeights, pack: bool) -> "BlockLinear":
        module = PackedLinear.from_linear(linear) if pack else _sharing(PackedLinear, linear)
        module.__class__ = cls
        module.blocks = blocks  # a plain attribute, as the packed copy: never saved
        if not pack:
            module.packed = None
        return module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        training = torch.is_grad_enabled() and self.weight.requires_grad
        if not training and x.dtype == torch.float32 and x.numel() <= BLOCK_MAX_ROWS * self.in_features:
            return block_matmul(x, self.blocks, self.bias)
        return nn.Linear.forward(self, x) if training or self.packed is None else super().forward(x)


class Int8WeightLinear(nn.Linear):
    """An ``nn.Linear`` computing with a weight-only int8 copy of its weight (``target/int8.py``).

    Like :class:`PackedLinear` it keeps the checkpoint's ``weight`` Parameter for every reader of it
    (the drafter shares the target's lm_head, in full precision), and only its forward changes.
    """

    rows: torch.Tensor
    scale: torch.Tensor

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int8WeightLinear":
        module = _sharing(cls, linear)
        module.rows, module.scale = int8_rows(linear.weight)  # plain attributes: never saved
        return module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int8_matmul(x, self.rows, self.scale, self.bias)


def _sharing(cls: type[nn.Linear], linear: nn.Linear) -> nn.Linear:
    """A ``cls`` module holding ``linear``'s own weight and bias Parameters (no new tensors)."""
    module = cls.__new__(cls)
    nn.Module.__init__(module)
    module.in_features, module.out_features = linear.in_features, linear.out_features
    module.weight, module.bias = linear.weight, linear.bias
    return module


def _plain_linears(model: nn.Module, text_only: bool = False) -> list[tuple[str, nn.Linear]]:
    """The exact ``nn.Linear`` modules (bitsandbytes' quantized subclasses are left alone); with
    ``text_only``, not a VLM's vision tower (it runs once per image: int8 would only cost quality)."""
    return [(name, module) for name, module in model.named_modules() if type(module) is nn.Linear
            and not (text_only and "visual" in name.split("."))]


@functools.cache  # the CPU does not change; read on every training step (the autocast dtype)
def cpu_bf16_kernels() -> bool:
    """Whether oneDNN has bf16 matmul kernels for this CPU (avx512_bf16 or AMX): there a bf16 GEMM of a hundred
    rows or more runs several times faster than fp32 (measured: 112×576 by 576×1536, 1.4 vs 7 ms on one core);
    without them bf16 is emulated and many times slower."""
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def packable(model: nn.Module, kernel: str = "packed") -> str | None:
    """Why ``model``'s linears cannot run the ``kernel`` runtime here (packed: oneDNN-prepacked, for an
    fp32 target, or a bf16 one where oneDNN has bf16 kernels for this CPU; int8: weight-only int8, for
    an fp32 target), or None when they can."""
    linears = _plain_linears(model)
    if not linears:
        return "the target has no plain linear layers (a quantized target?)"
    weight = linears[0][1].weight
    if weight.device.type != "cpu":
        return f"the target runs on {weight.device.type}"
    dtypes = {module.weight.dtype for _, module in linears}
    covered = {torch.float32, torch.bfloat16} if kernel == "packed" else {torch.float32}
    if len(dtypes) > 1 or not dtypes <= covered:
        return f"the target computes in {', '.join(sorted(map(str, dtypes)))} ({kernel} covers " \
               f"{' and '.join(str(d).removeprefix('torch.') for d in sorted(covered, key=str))})"
    if kernel == "packed" and not torch.backends.mkldnn.is_available():
        return "this PyTorch build has no oneDNN"
    if dtypes == {torch.bfloat16} and not cpu_bf16_kernels():
        return "this CPU has no bf16 oneDNN kernels (avx512_bf16 or AMX)"
    if kernel == "int8" and not int8_supported("cpu"):
        return "this torch build has no int8 weight-only CPU kernel"
    return None


def apply_runtime(model: nn.Module, runtime: str | None = None, tied_copy_max: int = PACKED_TIED_MAX_BYTES) -> str:
    """Switch ``model``'s plain ``nn.Linear`` layers to the requested runtime; the one it now runs.

    ``packed`` where it cannot pack is refused; ``auto`` then stays ``eager`` silently, and a kernel
    that fails to pack (an unsupported CPU) falls back to eager with a one-line warning. A packed copy is a
    second tensor beside the weight; an lm_head tied to the embedding whose copy would exceed ``tied_copy_max``
    bytes stays one tensor, unpacked (a 262k-token vocabulary's copy is 0.67 GB; a small one's packed copy
    halves an 8-row verify's lm_head time, 24 against 47 ms for SmolLM2's on one core).
    """
    runtime = requested_runtime(runtime)
    if runtime == "eager":
        return runtime
    if runtime == "compiled":  # eager modules: the Target compiles its steps (target/compiled.py)
        device = next(model.parameters()).device
        reason = compile_fallback.compile_unavailable(device)
        if reason is None:
            return runtime
        # a static cache run eagerly is slower than transformers' own cache: run the plain eager target
        warnings.warn(f"--runtime compiled: {reason}; decoding runs eagerly (same results, slower)")
        return "eager"
    reason = packable(model, "int8" if runtime == "int8" else "packed")
    if reason is not None:
        if runtime != "auto":
            raise MinisparkError(f"{option('runtime')} {runtime}: {reason}; use {option('runtime')} eager or auto")
        return "eager"
    if runtime == "int8":
        for name, module in _plain_linears(model, text_only=True):
            _replace(model, name, Int8WeightLinear.from_linear(module))
        use_grouped_attention(model)  # drafting on it says what int8 changes (serving.builder.INT8_NOTICE)
        use_lean_layers(model)
        return "int8"
    shared = _large_tied_head(model, tied_copy_max)
    blocks = block_weights(model) if runtime in ("auto", "blocks") else {}
    if runtime == "blocks" and isinstance(blocks, str):
        raise MinisparkError(f"{option('runtime')} blocks: {blocks}; use {option('runtime')} packed or auto")
    blocks = {} if isinstance(blocks, str) else blocks
    try:
        packed = [(name, BlockLinear.from_blocks(module, blocks[name], pack=module is not shared) if name in blocks
                   else PackedLinear.from_linear(module))
                  for name, module in _plain_linears(model) if module is not shared or name in blocks]
    except RuntimeError as exc:  # oneDNN refuses this CPU or shape
        warnings.warn(f"runtime: cannot prepack the target's linear layers ({str(exc).splitlines()[0]}); "
                      "running eager")
        return "eager"
    for name, module in packed:
        _replace(model, name, module)
    use_grouped_attention(model)  # masked multi-token forwards without repeat_kv (attention.py)
    use_lean_layers(model)  # the decoder layers' operations without the module machinery (lean_layers.py)
    return "blocks" if blocks else "packed"


def block_weights(model: nn.Module) -> dict[str, BlockWeights] | str:
    """The exact 4-/8-bit blocks of each of ``model``'s fp32 linear weights that has them (a GGUF conversion's),
    by module name, or why the ``blocks`` runtime cannot run (no such weight, or no kernel here)."""
    linears = _plain_linears(model)
    if any(module.weight.dtype != torch.float32 for _, module in linears):
        return "the target is not fp32 (a GGUF conversion's dequantized weights are)"
    found = {name: blocks for name, module in linears if (blocks := find_blocks(module.weight)) is not None}
    if not found:
        return "no linear weight of the target is an exact 4- or 8-bit block quantization (a GGUF's)"
    return kernel_unavailable() or found


def _large_tied_head(model: nn.Module, most: int) -> nn.Module | None:
    """The lm_head module when it shares the input embedding's weight and a copy of it would pass ``most`` bytes."""
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or embed is None or head.weight.data_ptr() != embed.weight.data_ptr():
        return None
    return head if head.weight.numel() * head.weight.element_size() > most else None


@contextlib.contextmanager
def eager_linears(model: nn.Module) -> Iterator[None]:
    """Run ``model``'s packed linears eagerly, its attention as transformers' SDPA and its decoder layers as
    transformers' modules inside the block (the transformers ``generate`` baseline of ``bench`` measures HF as
    HF runs), then switch back; the weights are shared."""
    packed = [(name, module) for name, module in model.named_modules() if isinstance(module, PackedLinear)]
    attention = model.config._attn_implementation
    for name, module in packed:
        _replace(model, name, _sharing(nn.Linear, module))
    if attention == GROUPED_SDPA:
        model.set_attn_implementation("sdpa")
    try:
        with plain_layers(model):
            yield
    finally:
        for name, module in packed:
            _replace(model, name, module)
        if attention == GROUPED_SDPA:
            model.set_attn_implementation(GROUPED_SDPA)


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent), child, module)
