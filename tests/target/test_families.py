"""Families by capability (``target/loading.py``'s ``check_family``): a decoder-only model transformers runs as a
causal LM is a target, whatever its name; what cannot work is refused naming why. Tiny Mistral and Gemma 3
targets (attention windows of 8) go through answers → train → generate with the trained drafter, past the window,
with greedy parity against transformers' own generation.

    .venv/bin/python -m pytest -q tests/target/test_families.py
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from minispark.data.answers import AnswerConfig, AnswerSet, build_answers
from minispark.core.errors import MinisparkError
from minispark.serving.generate import generate
from minispark.target.loading import check_family, load_target
from tests.tiny_models import build_tiny
from minispark.training.recipes import load_recipe
from minispark.training.train import train


@pytest.mark.parametrize("family", ["mistral", "gemma3_text"])
def test_a_windowed_family_answers_trains_and_drafts_with_parity(tmp_path: Path, family: str) -> None:
    target = load_target(str(build_tiny(family, tmp_path / family)))
    assert target.windowed
    prompts = tmp_path / "prompts.jsonl"
    lines = ["Tell me a story.", "What is 2 + 2?", "List three fruits.", "Explain gravity briefly."]
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in lines))
    build_answers(AnswerConfig(prompts=prompts, out=tmp_path / "answers", num_samples=8, max_new_tokens=24,
                               batch_size=4), target=target, log=lambda _: None)
    # at T 0 the batched regeneration past the window is transformers' own greedy continuation
    build_answers(AnswerConfig(prompts=prompts, out=tmp_path / "greedy", num_samples=4, max_new_tokens=24,
                               batch_size=4, temperature=0.0), target=target, log=lambda _: None)
    for sample, line in zip(AnswerSet(tmp_path / "greedy"), lines):
        ids = target.encode(prompt=line).input_ids
        greedy = target.model.generate(ids, max_new_tokens=24, do_sample=False)[0, ids.shape[1]:].tolist()
        assert sample.answer_ids.tolist() == greedy[:len(sample.answer_ids)]
    report = train(load_recipe("tiny", ["steps=12", f"answers_dir={tmp_path / 'answers'}", "feature_layers=[1,2]"]),
                   out_dir=tmp_path / "train", target=target, log=None)
    prompt = "Tell me a long story about the sea and the ships, " * 2  # longer than the window
    ids = target.encode(prompt=prompt).input_ids
    want = target.model.generate(ids, max_new_tokens=32, do_sample=False)[0, ids.shape[1]:].tolist()
    result = generate(target, prompt, drafter=str(report.drafter), max_new_tokens=32).result
    assert result.token_ids == want and sum(result.stats.proposed_lengths) > 0  # drafted, and rejected past the window


def test_what_cannot_be_drafted_for_is_refused_by_name() -> None:
    """An encoder-decoder model, a vision-language family whose images are not built here, and a type transformers
    has no causal LM for each get one line saying why; a decoder-only family passes."""
    check_family(SimpleNamespace(model_type="gemma3_text"), "g")
    check_family(SimpleNamespace(model_type="qwen2_5_vl"), "q")
    for model_type, why in (("t5", "encoder-decoder"), ("llava", "vision-language family whose image inputs"),
                            ("clip", "not a causal language model")):
        config = SimpleNamespace(model_type=model_type, is_encoder_decoder=model_type == "t5")
        with pytest.raises(MinisparkError, match=f"--target x: '{model_type}'.*{why}|{why}"):
            check_family(config, "x")


def test_a_decoder_without_layers_to_hook_is_refused() -> None:
    import torch

    from minispark.target.loading import check_layers_hookable

    model = torch.nn.Module()
    model.model = torch.nn.Module()
    model.model.norm = torch.nn.LayerNorm(4)
    with pytest.raises(MinisparkError, match="target x: Module has no decoder 'layers' module to capture"):
        check_layers_hookable(model, "x")
    model.model.layers = torch.nn.ModuleList()
    check_layers_hookable(model, "x")
