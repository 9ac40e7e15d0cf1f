"""The packed target runtime: same logits as eager at every verify width, row-invariant, cache crops
exact, weights shared and tied, the eager fallback announced, SPS tables matched by runtime."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from minispark.cli import app
from minispark.core.errors import MinisparkError
from minispark.target import runtime as runtime_module
from minispark.target.block_quant import kernel_unavailable
from minispark.target.int8 import int8_supported
from minispark.target.runtime import Int8WeightLinear, PackedLinear, apply_runtime, eager_linears
from minispark.serving.builder import INT8_NOTICE, build_serving
from minispark.serving.sps import SPSTable, find_table, table_mismatch, table_runtime
from minispark.target.loading import load_target
from minispark.serving.drafters.base import NoDrafter
from minispark.serving.engine import speculative_generate
from minispark.serving.schedule import FixedLength
from minispark.target.sampling import SamplingConfig
from tests.helpers import assert_modes_keep_greedy, assert_steps_agree, hf_greedy

FAMILIES = ["llama", "qwen2", "qwen3", "qwen2_5_vl"]


def _packed_count(model: nn.Module) -> int:
    return sum(isinstance(module, PackedLinear) for module in model.modules())


@pytest.mark.parametrize("family", FAMILIES)
def test_packed_logits_equal_eager_at_every_width(tiny_dir, test_image, family: str) -> None:
    eager = load_target(str(tiny_dir(family)), runtime="eager")
    packed = load_target(str(tiny_dir(family)), runtime="packed")
    assert (eager.runtime, packed.runtime) == ("eager", "packed")
    assert _packed_count(eager.model) == 0 and _packed_count(packed.model) > 0
    close = {"rtol": 1e-4, "atol": 1e-4}  # fp32 sums in another order: ~1e-5 apart
    images = [test_image] if packed.is_vlm else []
    prompt = eager.encode(prompt="Describe the picture, then count to ten.", images=images)
    with eager.session([1]) as e_session, packed.session([1]) as p_session:
        torch.testing.assert_close(p_session.prefill(prompt, all_logits=True).logits,
                                   e_session.prefill(prompt, all_logits=True).logits, **close)
        assert_steps_agree(p_session, e_session, prompt.input_ids[0], range(1, 9), **close)


def test_packed_verify_equals_single_steps_and_crop(tiny_dir) -> None:
    """A verified block's logits equal one-token steps over the same tokens, and a crop after a
    rejection followed by a new verify equals a fresh prefill."""
    target = load_target(str(tiny_dir("llama")), runtime="packed")
    prompt = target.encode(prompt="Once upon a time")
    tokens = torch.tensor([5, 17, 9, 33, 2, 41, 8, 12])
    with target.session() as block, target.session() as single:
        block.prefill(prompt)
        single.prefill(prompt)
        wide = block.step(tokens).logits  # (8, V)
        rows = torch.cat([single.step(tokens[i:i + 1]).logits for i in range(len(tokens))])
        torch.testing.assert_close(wide, rows, rtol=1e-4, atol=1e-4)
        block.crop(prompt.length + 3)  # 3 accepted, the rest rejected
        again = block.step(tokens[3:6]).logits
    extended = target.extend(prompt, torch.cat([tokens[:3], tokens[3:6]]))
    with target.session() as fresh:
        reference = fresh.prefill(extended, all_logits=True).logits[-3:]
    torch.testing.assert_close(again, reference, rtol=1e-4, atol=1e-4)


def test_weights_stay_shared_and_tied(embedded_target) -> None:
    model = embedded_target.model
    # an fp32 CPU target: auto packs, and computes the GGUF's blocks where the kernels build
    assert embedded_target.runtime == ("blocks" if kernel_unavailable() is None else "packed")
    assert isinstance(embedded_target.lm_head, PackedLinear)
    assert embedded_target.lm_head.weight is model.get_input_embeddings().weight
    names = {name for name, _ in model.named_parameters()}
    assert all("packed" not in name for name in model.state_dict())
    assert names <= set(model.state_dict())


def test_eager_linears_swaps_and_restores(tiny_dir) -> None:
    target = load_target(str(tiny_dir("llama")), runtime="packed")
    count = _packed_count(target.model)
    ids = target.encode(prompt="hello").input_ids
    with torch.no_grad():
        before = target.model(input_ids=ids).logits
        with eager_linears(target.model):
            assert _packed_count(target.model) == 0
            inside = target.model(input_ids=ids).logits
        after = target.model(input_ids=ids).logits
    assert _packed_count(target.model) == count
    torch.testing.assert_close(inside, before)
    assert torch.equal(after, before)


def test_gradients_flow_through_eager_path() -> None:
    linear = nn.Linear(8, 4)
    packed = PackedLinear.from_linear(linear)
    x = torch.randn(3, 8)
    packed(x).sum().backward()  # grad enabled and weight trainable: the differentiable path
    assert linear.weight.grad is not None
    with torch.no_grad():
        torch.testing.assert_close(packed(x), linear(x))


@pytest.mark.skipif(not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="no bf16 oneDNN kernels on this CPU")
def test_a_bf16_target_packs_and_decodes_like_itself(tiny_dir) -> None:
    """oneDNN's bf16 kernels (avx512_bf16 or AMX) pack a bf16 target too: logits as eager bf16's at every
    width up to bf16 rounding of sums taken in another order, and target-only decoding gives transformers'
    own greedy output. (Drafting modes of a bf16 target, eager or packed, are lossless only up to bf16
    near-ties: a wide verify rounds differently from one-token steps; docs/how-it-works.md.)"""
    eager = load_target(str(tiny_dir("llama")), dtype="bf16", runtime="eager")
    packed = load_target(str(tiny_dir("llama")), dtype="bf16")
    assert packed.runtime == "packed" and _packed_count(packed.model) > 0
    prompt = eager.encode(prompt="Describe the picture, then count to ten.")
    with eager.session() as e_session, packed.session() as p_session:
        e_session.prefill(prompt)
        p_session.prefill(prompt)
        assert_steps_agree(p_session, e_session, prompt.input_ids[0], range(1, 9), rtol=0.02, atol=0.02)
    with packed.session() as session:
        result = speculative_generate(session, prompt, NoDrafter(), SamplingConfig(), FixedLength(0),
                                      max_new_tokens=24, eos_ids=packed.eos_token_ids)
    assert result.token_ids == hf_greedy(eager, prompt, 24)


def test_auto_stays_eager_where_packing_does_not_apply(tiny_dir) -> None:
    fp16 = load_target(str(tiny_dir("llama")), dtype="fp16")
    assert fp16.runtime == "eager" and _packed_count(fp16.model) == 0
    with pytest.raises(MinisparkError, match="runtime packed: the target computes in torch.float16"):
        load_target(str(tiny_dir("llama")), dtype="fp16", runtime="packed")
    with pytest.raises(MinisparkError, match="runtime int8: the target computes in torch.bfloat16"):
        load_target(str(tiny_dir("llama")), dtype="bf16", runtime="int8")
    with pytest.raises(MinisparkError, match="not one of auto, eager, packed, blocks, int8, compiled"):
        load_target(str(tiny_dir("llama")), runtime="fast")


def test_failed_packing_falls_back_with_a_notice(tiny_dir, monkeypatch) -> None:
    target = load_target(str(tiny_dir("llama")), runtime="eager")

    def refuse(weight, batch_size):
        raise RuntimeError("mkldnn_reorder_linear_weight: this CPU lacks the instructions\nmore detail")

    monkeypatch.setattr(runtime_module.torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    with pytest.warns(UserWarning, match="cannot prepack .* lacks the instructions\\); running eager"):
        assert apply_runtime(target.model, "auto") == "eager"
    assert _packed_count(target.model) == 0


def test_environment_and_cli_choose_the_runtime(tiny_dir, monkeypatch) -> None:
    monkeypatch.setenv("MINISPARK_RUNTIME", "eager")
    assert load_target(str(tiny_dir("llama"))).runtime == "eager"
    result = CliRunner().invoke(app, ["--runtime", "fast", "generate", "--prompt", "hi"])
    assert result.exit_code == 2 and "--runtime" in result.output


def test_sps_tables_match_by_runtime(tmp_path) -> None:
    table = replace(SPSTable.generic(), device="NVIDIA GeForce RTX 3050", target="some/target", dtype="float32",
                    metadata={"torch": "2.14.1", "driver": "n/a", "date": "2026-12-01T00:00:00Z"})
    assert table_runtime(table) == "eager"  # tables from before runtimes: eager
    table.save(table.path_in(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert find_table(tmp_path, table.device, table.target, runtime="eager") == table
    with pytest.warns(UserWarning, match="runtime=packed"):
        assert find_table(tmp_path, table.device, table.target, runtime="packed").device == "generic"
    line = table_mismatch(table, "t.json", device=table.device, target=table.target, dtype=table.dtype,
                          quantization="none", runtime="packed")
    assert "runtime 'eager' (this run: 'packed')" in line


@pytest.mark.skipif(not int8_supported("cpu"), reason="no int8 weight-only kernel in this torch build")
@pytest.mark.parametrize("family", ["llama", "qwen2_5_vl"])
def test_int8_runtime_decodes_like_itself(tiny_dir, test_image, family: str) -> None:
    """``--runtime int8``: the text linears (not the vision tower) run int8, weights stay shared, the
    logits stay near fp32's, drafting on it (not loading it) says that near-ties may differ, and every
    drafting mode equals the int8 target's own greedy decoding (up to near-ties, which these prompts do
    not meet)."""
    target = load_target(str(tiny_dir(family)), runtime="int8")
    assert INT8_NOTICE in build_serving(target, "lookup").hints  # said where it drafts, not where it loads
    assert INT8_NOTICE not in build_serving(target, "none").hints
    reference = load_target(str(tiny_dir(family)), runtime="eager")
    assert target.runtime == "int8"
    names = [name for name, module in target.model.named_modules() if isinstance(module, Int8WeightLinear)]
    assert names and not any("visual" in name.split(".") for name in names)
    assert isinstance(target.lm_head, Int8WeightLinear) and target.lm_head.weight.dtype == torch.float32
    images = [test_image] if target.is_vlm else []
    inputs = target.encode(prompt="Describe this, then count to ten.", images=images)
    with target.session() as q, reference.session() as f:
        got, want = q.prefill(inputs, all_logits=True).logits, f.prefill(inputs, all_logits=True).logits
    assert torch.nn.functional.cosine_similarity(got, want, dim=-1).min() > 0.99  # near, not equal
    assert_modes_keep_greedy(target, inputs)


def test_a_large_tied_lm_head_stays_one_tensor(tiny_dir) -> None:
    """The packed runtime copies each linear's weight into oneDNN's layout; an lm_head tied to the embedding whose
    copy would pass the bound is left unpacked, one tensor with the embedding, and the logits do not change."""
    from transformers import AutoModelForCausalLM

    from minispark.target.runtime import PACKED_TIED_MAX_BYTES

    def tied() -> nn.Module:
        model = AutoModelForCausalLM.from_pretrained(str(tiny_dir("llama")))
        model.lm_head.weight = model.get_input_embeddings().weight
        return model.eval()

    ids = torch.tensor([[1, 5, 9, 14]])
    eager = tied()
    want = eager(ids).logits
    for bound, head_packed in ((PACKED_TIED_MAX_BYTES, True), (0, False)):
        model = tied()
        assert apply_runtime(model, "packed", tied_copy_max=bound) == "packed"
        assert isinstance(model.lm_head, PackedLinear) == head_packed
        assert model.lm_head.weight is model.get_input_embeddings().weight
        assert isinstance(model.model.layers[0].mlp.up_proj, PackedLinear)
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-4, atol=1e-4)
