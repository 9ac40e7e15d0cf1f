"""Block-quantized weights: found exactly in what a GGUF conversion loads and nowhere else (one weight one ulp off
is refused), multiplied as their fp32 weights are at every width the kernel tiles, and the blocks runtime decoding
as the packed one does."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize
from torch import nn

from minispark.core.defaults import BLOCK_MAX_ROWS
from minispark.core.errors import MinisparkError
from minispark.serving.drafters.base import NoDrafter
from minispark.serving.engine import speculative_generate
from minispark.serving.schedule import FixedLength
from minispark.target import block_quant, native
from minispark.target.block_quant import block_matmul, find_blocks, kernel_unavailable
from minispark.target.loading import load_target
from minispark.target.runtime import BlockLinear
from minispark.target.sampling import SamplingConfig
from tests.helpers import assert_modes_keep_greedy, assert_steps_agree
from tests.tiny_models import gguf_quantized

KINDS = [(GGMLQuantizationType.Q4_1, 4), (GGMLQuantizationType.Q8_0, 8)]
needs_kernel = pytest.mark.skipif(kernel_unavailable() is not None, reason=str(kernel_unavailable()))


def _gguf_weight(kind: GGMLQuantizationType, rows: int = 45, cols: int = 96, seed: int = 0) -> torch.Tensor:
    """A (rows, cols) weight as a GGUF conversion loads it: quantized by gguf, dequantized to fp32."""
    weight = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed)) * 0.05
    return torch.from_numpy(dequantize(quantize(weight.numpy(), kind), kind)).reshape(rows, cols)


@pytest.mark.parametrize("kind,bits", KINDS)
def test_finds_a_gguf_weights_blocks_exactly(kind: GGMLQuantizationType, bits: int) -> None:
    weight = _gguf_weight(kind)
    found = find_blocks(weight)
    assert found is not None and found.bits == bits and found.shape == tuple(weight.shape)
    assert torch.equal(found.dequantize(), weight)  # bit for bit
    assert found.nbytes <= weight.numel() * 4 * 0.3


@pytest.mark.parametrize("kind", [k for k, _ in KINDS])
@pytest.mark.parametrize("row", [3, 44])  # in the rows probed first, and past them
def test_one_weight_one_ulp_off_is_not_blocks(kind: GGMLQuantizationType, row: int) -> None:
    weight = _gguf_weight(kind, rows=80)
    weight[row, 50] = torch.nextafter(weight[row, 50], torch.tensor(1.0))
    assert find_blocks(weight) is None


def test_other_weights_are_not_blocks() -> None:
    assert find_blocks(torch.randn(64, 96)) is None  # trained fp32 weights
    assert find_blocks(_gguf_weight(GGMLQuantizationType.Q4_1).bfloat16()) is None
    assert find_blocks(_gguf_weight(GGMLQuantizationType.Q4_1)[:, :80]) is None  # rows not whole blocks
    zeros = find_blocks(torch.zeros(8, 64))
    assert zeros is not None and torch.equal(zeros.dequantize(), torch.zeros(8, 64))


@needs_kernel
@pytest.mark.parametrize("kind", [k for k, _ in KINDS])
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 9, 17])  # each tile width and its tails
def test_block_matmul_equals_the_fp32_linear(kind: GGMLQuantizationType, rows: int) -> None:
    weight = _gguf_weight(kind)  # 45 weight rows: 5 tiles of 8 and a tail
    blocks = find_blocks(weight)
    generator = torch.Generator().manual_seed(rows)
    x = torch.randn(2, rows, 96, generator=generator)
    bias = torch.randn(45, generator=generator)
    got = block_matmul(x, blocks, bias)
    assert got.shape == (2, rows, 45)
    torch.testing.assert_close(got, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


@needs_kernel
def test_threads_give_the_same_sums() -> None:
    blocks = find_blocks(_gguf_weight(GGMLQuantizationType.Q4_1, rows=200))
    x = torch.randn(3, 96, generator=torch.Generator().manual_seed(0))
    before = torch.get_num_threads()
    try:
        one = block_matmul(x, blocks)
        torch.set_num_threads(2)
        assert torch.equal(block_matmul(x, blocks), one)  # each output is one thread's, summed in one order
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def gguf_llama(tiny_dir, tmp_path_factory) -> str:
    return str(gguf_quantized(tiny_dir("llama"), tmp_path_factory.mktemp("gguf-llama")))


@needs_kernel
def test_blocks_runtime_decodes_as_the_packed_one(gguf_llama: str) -> None:
    blocks, packed = load_target(gguf_llama), load_target(gguf_llama, runtime="packed")
    assert (blocks.runtime, packed.runtime) == ("blocks", "packed")  # auto finds the blocks
    linears = [m for m in blocks.model.modules() if isinstance(m, nn.Linear)]
    assert linears and all(isinstance(m, BlockLinear) for m in linears)
    prompt = blocks.encode(prompt="Once upon a time, in a land far away")
    close = {"rtol": 1e-4, "atol": 1e-4}  # fp32 products summed in another order
    with blocks.session([1]) as b_session, packed.session([1]) as p_session:
        torch.testing.assert_close(b_session.prefill(prompt).logits, p_session.prefill(prompt).logits, **close)
        # blocks up to BLOCK_MAX_ROWS rows, then the prepacked kernel
        assert_steps_agree(b_session, p_session, prompt.input_ids[0], (1, 2, 5, BLOCK_MAX_ROWS, BLOCK_MAX_ROWS + 1),
                           **close)
    outputs = []
    for target in (blocks, packed):
        with target.session() as session:
            outputs.append(speculative_generate(session, prompt, NoDrafter(), SamplingConfig(), FixedLength(0),
                                                max_new_tokens=24, eos_ids=target.eos_token_ids).token_ids)
    assert outputs[0] == outputs[1]
    assert_modes_keep_greedy(blocks, prompt)  # every drafting mode: target-only greedy, on this runtime


def test_blocks_asked_for_without_blocks_is_refused(tiny_dir) -> None:
    with pytest.raises(MinisparkError, match="runtime blocks: no linear weight"):
        load_target(str(tiny_dir("llama")), runtime="blocks")
    assert load_target(str(tiny_dir("llama"))).runtime == "packed"  # auto: random fp32 weights stay packed


def test_without_the_kernel_auto_packs(gguf_llama: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "has_avx512", lambda: False)
    native.load.cache_clear()
    block_quant._kernels.cache_clear()
    try:
        assert "AVX-512" in kernel_unavailable()
        assert load_target(gguf_llama).runtime == "packed"
        with pytest.raises(MinisparkError, match="runtime blocks: the block kernels need"):
            load_target(gguf_llama, runtime="blocks")
    finally:
        native.load.cache_clear()
        block_quant._kernels.cache_clear()


def test_a_failed_build_leaves_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(native, "compiler", lambda: "false")  # a compiler that fails without a word
    with pytest.raises(OSError, match="compiling block_kernels.c failed"):
        native.build(Path(native.__file__).with_name("block_kernels.c"), tmp_path)
    assert list(tmp_path.iterdir()) == []
