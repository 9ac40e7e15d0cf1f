"""Greedy parity and KV-cache correctness of the speculative loop on real (tiny and embedded) models.

Reference: target-only greedy decoding (HF ``generate``). Every drafter — n-gram lookup, one that
is always right, one that is always wrong — must reproduce it token for token. If a divergence ever
appears it must be a logit near-tie (top-2 gap < 1e-4), which ``assert_parity`` checks and reports.
"""

from __future__ import annotations

import pytest
import torch

from minispark.serving.drafters.base import Drafter, NoDrafter
from minispark.serving.drafters.lookup import LookupDrafter
from minispark.serving.engine import speculative_generate
from minispark.target.sampling import SamplingConfig
from minispark.serving.schedule import FixedLength
from minispark.target.loading import Target, load_target
from minispark.target.session import PromptInputs
from tests.helpers import OracleDrafter, hf_greedy, assert_parity


def run(target: Target, inputs: PromptInputs, drafter: Drafter, gamma: int, max_new_tokens: int) -> list[int]:
    with target.session(drafter.feature_layers) as session:
        result = speculative_generate(session, inputs, drafter, SamplingConfig(), FixedLength(gamma),
                                      max_new_tokens=max_new_tokens, eos_ids=target.eos_token_ids)
    return result.token_ids


def drafters_for(reference: list[int], prompt_length: int, vocab: int) -> list[Drafter]:
    return [NoDrafter(), LookupDrafter(), OracleDrafter(reference, prompt_length, True, vocab),
            OracleDrafter(reference, prompt_length, False, vocab)]


@pytest.fixture(scope="module")
def tiny_llama(tiny_dir) -> Target:
    return load_target(str(tiny_dir("llama")))


@pytest.fixture(scope="module")
def tiny_vlm(tiny_dir) -> Target:
    return load_target(str(tiny_dir("qwen2_5_vl")))


@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_parity_tiny_llama(tiny_llama: Target, gamma: int) -> None:
    for prompt in ["Count: one two three one two three one", "Hello there, how are you?"]:
        inputs = tiny_llama.encode(prompt=prompt)
        want = hf_greedy(tiny_llama, inputs, 40)
        for drafter in drafters_for(want, inputs.length, tiny_llama.vocab_size):
            assert_parity(tiny_llama, inputs, run(tiny_llama, inputs, drafter, gamma, 40), want)


def test_greedy_parity_tiny_qwen25vl_with_image(tiny_vlm: Target, test_image) -> None:
    inputs = tiny_vlm.encode(prompt="Describe the picture.", images=[test_image])
    assert "pixel_values" in inputs.model_kwargs
    assert inputs.text_positions[-1] < inputs.length - 1  # image tokens compress M-RoPE positions
    want = hf_greedy(tiny_vlm, inputs, 32)
    for drafter in drafters_for(want, inputs.length, tiny_vlm.vocab_size):
        assert_parity(tiny_vlm, inputs, run(tiny_vlm, inputs, drafter, 3, 32), want)


EMBEDDED_PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how photosynthesis works to a ten-year-old.",
    "List five tips for writing clean Python code, with one sentence each.",
    "What are the main differences between a list and a tuple in Python?",
    "Describe the water cycle step by step.",
]


@pytest.mark.slow  # the embedded target's parity in the default run: test_shipped_drafter.py
def test_greedy_parity_embedded_smollm2(embedded_target: Target) -> None:
    target = embedded_target
    for prompt in EMBEDDED_PROMPTS:
        inputs = target.encode(prompt=prompt)
        want = hf_greedy(target, inputs, 64)
        assert len(want) >= 64 or want[-1] in target.eos_token_ids
        drafters = [LookupDrafter(), OracleDrafter(want, inputs.length, True, target.vocab_size),
                    OracleDrafter(want, inputs.length, False, target.vocab_size)]
        for drafter in drafters:
            assert_parity(target, inputs, run(target, inputs, drafter, 5, 64), want)


def _rounds_with_rejections(target: Target, inputs: PromptInputs, sampling: SamplingConfig) -> list[int]:
    """Run a few sampled rounds with a wrong-ish drafter, then compare the next logits with a fresh forward."""
    reference = hf_greedy(target, inputs, 24)
    drafter = OracleDrafter(reference, inputs.length, False, target.vocab_size)
    generator = torch.Generator().manual_seed(0)
    with target.session() as session:
        result = speculative_generate(session, inputs, drafter, sampling, FixedLength(4), max_new_tokens=12,
                                      generator=generator)
        assert sum(result.stats.proposed_lengths) > sum(result.stats.accepted_lengths)  # rejections happened
        committed = result.token_ids
        # The cache holds prompt + committed minus the last token (the next anchor).
        assert session.cache_length == inputs.length + len(committed) - 1
        anchor = torch.tensor(committed[-1:])
        cached_next = session.step(anchor).logits[-1]
    full = target.extend(inputs, torch.tensor(committed))
    with target.session() as session:
        fresh_next = session.prefill(full).logits[-1]
    torch.testing.assert_close(cached_next, fresh_next, rtol=1e-4, atol=1e-4)
    return committed


def test_cache_matches_fresh_forward_text(tiny_llama: Target) -> None:
    inputs = tiny_llama.encode(prompt="Tell me about the sea and the sky.")
    _rounds_with_rejections(tiny_llama, inputs, SamplingConfig(1.0))


def test_cache_matches_fresh_forward_mrope_image(tiny_vlm: Target, test_image) -> None:
    inputs = tiny_vlm.encode(prompt="What is in the image?", images=[test_image])
    _rounds_with_rejections(tiny_vlm, inputs, SamplingConfig(1.0))


def test_eos_inside_accepted_block_is_not_exceeded(tiny_llama: Target) -> None:
    inputs = tiny_llama.encode(prompt="Hello there, how are you?")
    want = hf_greedy(tiny_llama, inputs, 20)
    eos = {want[5]}  # pretend the 6th generated token is EOS: an always-right drafter overshoots it
    drafter = OracleDrafter(want, inputs.length, True, tiny_llama.vocab_size)
    with tiny_llama.session() as session:
        result = speculative_generate(session, inputs, drafter, SamplingConfig(), FixedLength(8),
                                      max_new_tokens=20, eos_ids=eos)
    assert result.token_ids == want[: want.index(want[5]) + 1]
    assert result.stop_reason == "eos"


def test_max_new_tokens_and_metrics(tiny_llama: Target) -> None:
    inputs = tiny_llama.encode(prompt="Count: one two three one two three one")
    want = hf_greedy(tiny_llama, inputs, 30)
    drafter = OracleDrafter(want, inputs.length, True, tiny_llama.vocab_size)
    with tiny_llama.session() as session:
        result = speculative_generate(session, inputs, drafter, SamplingConfig(), FixedLength(4),
                                      max_new_tokens=10)
    stats = result.stats
    assert result.token_ids == want[:10] and result.stop_reason == "max_tokens"
    assert stats.rounds == 2 and stats.tau == 5.0  # 4 accepted + 1 per round
    assert stats.acceptance_per_position == [1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "qwen2_vl", "qwen3_vl"])
def test_greedy_parity_other_families(tiny_dir, test_image, family: str) -> None:
    target = load_target(str(tiny_dir(family)))
    images = [test_image] if target.is_vlm else []
    inputs = target.encode(prompt="Describe this, please.", images=images)
    want = hf_greedy(target, inputs, 24)
    for drafter in [LookupDrafter(), OracleDrafter(want, inputs.length, False, target.vocab_size),
                    OracleDrafter(want, inputs.length, True, target.vocab_size)]:
        assert_parity(target, inputs, run(target, inputs, drafter, 3, 24), want)
