"""The compiled target runtime: a static KV cache and compiled steps give eager's logits and features at
every verify width, crops are exact, caches grow and are pooled, greedy decoding is unchanged in every
drafting mode, the eager fallback is announced, and real compilation reuses its graphs across widths.

Most tests run the static-cache path with ``torch.compile`` switched off (compiling takes about a minute
on this CPU); ``test_real_compilation_*`` (slow) compiles."""

from __future__ import annotations

import pytest
import torch

from minispark.serving.drafters.lookup import LookupDrafter
from minispark.serving.engine import speculative_generate
from minispark.serving.schedule import FixedLength
from minispark.target import compile_fallback, compiled
from minispark.target.loading import load_target
from minispark.target.sampling import SamplingConfig
from tests.helpers import assert_modes_keep_greedy, assert_parity, hf_greedy

CLOSE = {"rtol": 1e-4, "atol": 1e-4}


@pytest.fixture
def uncompiled(monkeypatch):
    """The compiled runtime with its step forward left eager: the static-cache logic alone."""
    monkeypatch.setattr(compiled, "compile_or_eager", lambda fn, *args, **kwargs: fn)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "qwen2_5_vl"])
def test_static_steps_equal_eager_at_every_width(tiny_dir, test_image, uncompiled, family: str) -> None:
    eager = load_target(str(tiny_dir(family)), runtime="eager")
    static = load_target(str(tiny_dir(family)), runtime="compiled")
    assert static.runtime == "compiled" and static.static_steps is not None and eager.static_steps is None
    images = [test_image] if static.is_vlm else []
    prompt = eager.encode(prompt="Describe the picture, then count to ten.", images=images)
    with eager.session([0, 2], capture_final=True) as e, static.session([0, 2], capture_final=True) as s:
        want, got = e.prefill(prompt, all_logits=True), s.prefill(prompt, all_logits=True)
        torch.testing.assert_close(got.logits, want.logits, **CLOSE)
        torch.testing.assert_close(got.features, want.features, **CLOSE)
        torch.testing.assert_close(got.final_hidden, want.final_hidden, **CLOSE)
        for width in range(1, 9):
            tokens = prompt.input_ids[0, :width]
            want, got = e.step(tokens), s.step(tokens)
            torch.testing.assert_close(got.logits, want.logits, **CLOSE)
            torch.testing.assert_close(got.features, want.features, **CLOSE)
            torch.testing.assert_close(got.final_hidden, want.final_hidden, **CLOSE)
            assert s.cache_length == e.cache_length == prompt.length + width
            e.crop(prompt.length)
            s.crop(prompt.length)


def test_crop_after_rejection_then_verify_equals_fresh_prefill(tiny_dir, uncompiled) -> None:
    target = load_target(str(tiny_dir("llama")), runtime="compiled")
    prompt = target.encode(prompt="Once upon a time")
    tokens = torch.tensor([5, 17, 9, 33, 2, 41, 8, 12])
    with target.session() as session:
        session.prefill(prompt)
        session.step(tokens)
        session.crop(prompt.length + 3)  # 3 accepted, the rest rejected: their K/V stay, masked
        again = session.step(tokens[3:6]).logits
    extended = target.extend(prompt, torch.cat([tokens[:3], tokens[3:6]]))
    with target.session() as fresh:
        reference = fresh.prefill(extended, all_logits=True).logits[-3:]
    torch.testing.assert_close(again, reference, **CLOSE)


def test_cache_grows_past_its_first_size_and_is_pooled(tiny_dir, uncompiled, monkeypatch) -> None:
    monkeypatch.setattr(compiled, "STATIC_CACHE_TOKENS", 8)
    eager = load_target(str(tiny_dir("llama")), runtime="eager")
    target = load_target(str(tiny_dir("llama")), runtime="compiled")
    prompt = target.encode(prompt="Count: one two three")  # longer than 8 tokens
    assert prompt.length > 8
    tokens = torch.tensor([5, 17, 9, 33, 2, 41, 8, 12] * 3)
    with target.session() as s, eager.session() as e:
        want = e.prefill(prompt).logits
        torch.testing.assert_close(s.prefill(prompt).logits, want, **CLOSE)
        first = compiled.capacity(s.cache)
        torch.testing.assert_close(s.step(tokens).logits, e.step(tokens).logits, **CLOSE)
        assert compiled.capacity(s.cache) >= prompt.length + len(tokens) > first
        grown = s.cache
    with target.session() as again:  # the pooled cache, emptied
        assert again.cache is grown and again.cache_length == 0
        torch.testing.assert_close(again.prefill(prompt).logits, want, **CLOSE)


@pytest.mark.parametrize("family", ["llama", "qwen2_5_vl"])
def test_every_drafting_mode_keeps_greedy_output(tiny_dir, test_image, uncompiled, family: str) -> None:
    target = load_target(str(tiny_dir(family)), runtime="compiled")
    images = [test_image] if target.is_vlm else []
    assert_modes_keep_greedy(target, target.encode(prompt="Describe this, then count to ten.", images=images))


def test_compile_unavailable_is_announced_and_decodes_eagerly(tiny_dir, monkeypatch) -> None:
    monkeypatch.setattr(compile_fallback, "compile_unavailable", lambda device: "no C++ compiler found (test)")
    monkeypatch.setattr(torch, "compile", lambda *a, **k: pytest.fail("compile must not be called"))
    with pytest.warns(UserWarning, match="--runtime compiled: no C\\+\\+ compiler found .*decoding runs eagerly"):
        target = load_target(str(tiny_dir("llama")), runtime="compiled")
    assert target.runtime == "eager" and target.static_steps is None  # transformers' own cache, not a static one
    inputs = target.encode(prompt="Once upon a time")
    with target.session() as session:
        result = speculative_generate(session, inputs, LookupDrafter(), SamplingConfig(), FixedLength(4),
                                      max_new_tokens=12, eos_ids=target.eos_token_ids)
    assert_parity(target, inputs, result.token_ids, hf_greedy(target, inputs, 12))


def test_warm_up_is_a_no_op_for_other_runtimes(tiny_dir) -> None:
    assert load_target(str(tiny_dir("llama")), runtime="eager").warm_up(range(1, 9)) is None


@pytest.mark.slow
def test_real_compilation_reuses_graphs_across_widths(tiny_dir) -> None:
    """Compiled with inductor: two graphs serve every width and position, and the output is unchanged."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    target = load_target(str(tiny_dir("llama")), runtime="compiled")
    seconds = target.warm_up(range(1, 6))
    assert seconds is not None and seconds > 0
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert graphs <= 3  # a static first width, then one dynamic graph (a graph break may add one)
    inputs = target.encode(prompt="Describe this, then count to ten.")
    assert_modes_keep_greedy(target, inputs)
    with target.session([1]) as session:  # tokens that are views of a longer tensor, at another context length
        session.prefill(inputs)
        for width in (1, 4, 2):
            session.step(inputs.input_ids[0, :width])
            session.crop(inputs.length)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # no recompilation while decoding
