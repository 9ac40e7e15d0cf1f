"""Training from a cache reads only the tensors it needs from the target's safetensors (embedding, lm_head,
tokenizer, identity): it runs with whole-model loading made to fail, and trains exactly as with the
whole target loaded.

    .venv/bin/python -m pytest -q tests/training/test_target_tensors.py
"""

from __future__ import annotations


import pytest
import torch

from minispark.target.loading import load_target
from minispark.training.target_tensors import load_frozen_parts


@pytest.mark.parametrize("family", ["llama", "qwen2_5_vl"])
def test_frozen_parts_equal_the_loaded_targets(tiny_dir, family):
    full = load_target(str(tiny_dir(family)))
    parts = load_frozen_parts(str(tiny_dir(family)))
    assert parts.identity() == full.identity()
    assert parts.eos_token_ids == full.eos_token_ids and len(parts.tokenizer) == len(full.tokenizer)
    assert torch.equal(parts.model.get_input_embeddings().weight, full.model.get_input_embeddings().weight)
    assert torch.equal(parts.lm_head.weight, full.lm_head.weight)
    decoder_weights = [p for n, p in parts.model.named_parameters() if "layers." in n]
    assert decoder_weights and all(p.is_meta for p in decoder_weights)  # nothing else was read


def test_training_from_a_cache_never_instantiates_the_whole_target(cache, target, tmp_path, monkeypatch):
    import transformers

    from minispark.training.recipes import load_recipe
    from minispark.training.train import train

    with_target = train(load_recipe("tiny", ["steps=2"]), cache, tmp_path / "a", target=target, log=None).losses

    def refuse(*_args, **_kwargs):
        raise AssertionError("the whole target was instantiated")

    for auto in (transformers.AutoModelForCausalLM, transformers.AutoModelForImageTextToText):
        monkeypatch.setattr(auto, "from_pretrained", refuse)
    alone = train(load_recipe("tiny", ["steps=2"]), cache, tmp_path / "b", log=None).losses
    assert alone == with_target
