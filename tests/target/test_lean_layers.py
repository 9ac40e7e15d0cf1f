"""The lean Llama decoder layer: bit for bit transformers' module, on every kind of forward a session runs."""

from __future__ import annotations

import pytest
import torch

from minispark.serving.batched import batched_step
from minispark.target.lean_layers import plain_layers, use_lean_layers
from minispark.target.loading import load_target
from minispark.target.runtime import eager_linears


def _lean_count(model: torch.nn.Module) -> int:
    return sum("forward" in vars(module) for module in model.modules())


def _forwards(target, prompt) -> list[torch.Tensor]:
    """Logits and features of a prefill, a one-token step, a verify, a tree and a batched round after a crop."""
    tokens = torch.tensor([5, 17, 9, 33, 2])
    out = []
    with target.session([0, 2]) as session:
        first = session.prefill(prompt, all_logits=True)
        out += [first.logits, first.features]
        for step in (session.step(tokens[:1]), session.step(tokens[1:]),
                     session.step_tree(tokens, torch.tensor([-1, 0, 0, 1, 1]))):
            out += [step.logits, step.features]
    sessions = target.slot_sessions(2, [0, 2])
    try:
        for session, tail in zip(sessions, ([7], [7, 8, 9])):
            session.prefill(target.extend(prompt, torch.tensor(tail)), prompt.length + len(tail) - 1)
        for step in batched_step(sessions, [tokens[:3], tokens[:1]]):
            out += [step.logits, step.features]
    finally:
        for session in sessions:
            session.close()
    return out


def test_lean_layers_compute_what_the_modules_do(tiny_dir) -> None:
    target = load_target(str(tiny_dir("llama")), runtime="packed")
    assert _lean_count(target.model) == target.model.config.num_hidden_layers
    prompt = target.encode(prompt="Once upon a time there was a tiny model.")
    lean = _forwards(target, prompt)
    with plain_layers(target.model):
        assert _lean_count(target.model) == 0
        plain = _forwards(target, prompt)
    assert _lean_count(target.model) == target.model.config.num_hidden_layers
    for got, want in zip(lean, plain, strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("family", ["qwen2", "mistral", "gemma3_text"])
def test_other_architectures_keep_their_modules(tiny_dir, family: str) -> None:
    target = load_target(str(tiny_dir(family)), runtime="packed")
    assert _lean_count(target.model) == 0 and use_lean_layers(target.model) == 0


def test_the_transformers_baseline_runs_the_modules(tiny_dir) -> None:
    target = load_target(str(tiny_dir("llama")), runtime="packed")
    with eager_linears(target.model):
        assert _lean_count(target.model) == 0
    assert _lean_count(target.model) == target.model.config.num_hidden_layers
