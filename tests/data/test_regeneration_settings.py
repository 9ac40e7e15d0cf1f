"""Regeneration samples exactly the settings it records, whatever the checkpoint's generation config says:
a tiny Llama whose ``generation_config`` sets a strong repetition penalty regenerates (batched ``generate``
and the refill sampler) the same tokens as a plain reference sampler, and so does bench's ``hf`` baseline;
with the guard removed (the negative control) the penalty leaks in and the tokens differ.

    .venv/bin/python -m pytest -q tests/data/test_regeneration_settings.py
"""

from __future__ import annotations

import pytest
import torch

from minispark.data.answer_sampler import sample_answers
from minispark.data.regenerate import regenerate
from minispark.target.sampling import SamplingConfig, draw_rows, make_generator, probabilities, sample
from minispark.target.loading import load_target

PROMPTS = ["Tell me a story.", "What is 2 + 2?", "List three fruits."]
NEW = 16
FEW = (100, 200, 300, 400)  # the tokens the model can say


@pytest.fixture(scope="module")
def penalized(tiny_dir):
    """A tiny Llama whose checkpoint generation config would reshape every distribution."""
    target = load_target(str(tiny_dir("llama")))
    # A random init almost never repeats a token, so a repetition penalty would change nothing: a bias on
    # the logits leaves the model only a few tokens to say, so every answer repeats them.
    bias = torch.full((target.vocab_size,), -30.0)
    bias[list(FEW)] = 0.0

    def biased(_module, _inputs, out):  # on the whole model: lm_head itself is swapped by the runtimes
        out.logits = out.logits + bias.to(out.logits.dtype)
        return out

    target.model.register_forward_hook(biased)
    target.model.generation_config.repetition_penalty = 1e4
    return target


@torch.no_grad()
def reference(target, prompt, config: SamplingConfig, seed: int, by_cdf: bool = False) -> list[int]:
    """The recorded law, drawn token by token from full forwards: no HF generation logic at all
    (``by_cdf``: with the refill sampler's inverse-CDF draw instead of ``multinomial``)."""
    ids, generator, out = prompt.input_ids, make_generator(seed, target.device), []
    for _ in range(NEW):
        logits = target.model(input_ids=ids).logits[:, -1].float()  # (1, V)
        token = (draw_rows(logits, config, [generator])[0] if by_cdf
                 else sample(probabilities(logits, config)[0], generator))
        out.append(int(token))
        if out[-1] in target.eos_token_ids:
            break
        ids = torch.cat([ids, token.view(1, 1)], dim=1)  # (1, P + t)
    return out


@pytest.mark.parametrize("config", [SamplingConfig(0.0), SamplingConfig(1.0), SamplingConfig(0.7, top_k=20, top_p=0.8)])
def test_regenerate_ignores_the_checkpoint_penalty(penalized, config):
    inputs = [penalized.encode(prompt=p) for p in PROMPTS]
    seeds = [11, 12, 13]
    got = [a.tokens.tolist() for a in regenerate(penalized, inputs, seeds, config, NEW)]
    want = [reference(penalized, x, config, s) for x, s in zip(inputs, seeds)]
    assert got == want
    assert penalized.model.generation_config.repetition_penalty == 1e4  # restored after the call


@pytest.mark.parametrize("config", [SamplingConfig(0.0), SamplingConfig(1.0)])
def test_refill_sampler_ignores_the_checkpoint_penalty(penalized, config):
    inputs = {i: penalized.encode(prompt=p) for i, p in enumerate(PROMPTS)}
    seeds = {0: 5, 1: 6, 2: 7}
    answers = sample_answers(penalized, inputs, seeds, config, NEW, batch_size=2)
    assert {i: a.tokens.tolist() for i, a in answers.items()} == {
        i: reference(penalized, x, config, seeds[i], by_cdf=True) for i, x in inputs.items()}


def test_bench_hf_baseline_ignores_the_checkpoint_penalty(penalized):
    from minispark.measuring.bench import hf_mode

    prompt = penalized.encode(prompt=PROMPTS[0])
    tokens, _ = hf_mode("hf", penalized, SamplingConfig(0.0), None).run(prompt, NEW, 0)
    assert tokens == reference(penalized, prompt, SamplingConfig(0.0), 0)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_negative_control_without_the_guard_the_penalty_leaks(penalized, monkeypatch, temperature):
    """Without the guard, transformers 5.x fills the fresh config's unset fields from the checkpoint's:
    the same regeneration then samples another law (so the tests above would catch a regression)."""
    import contextlib

    from minispark.data import regenerate as module

    config = SamplingConfig(temperature)
    inputs = [penalized.encode(prompt=p) for p in PROMPTS]
    want = [reference(penalized, x, config, s) for x, s in zip(inputs, [11, 12, 13])]
    assert all(len(set(w)) < len(w) for w in want)  # the recorded law repeats tokens: the penalty would forbid it
    monkeypatch.setattr(module, "without_checkpoint_defaults", lambda model: contextlib.nullcontext())
    got = [a.tokens.tolist() for a in regenerate(penalized, inputs, [11, 12, 13], config, NEW)]
    assert got != want
