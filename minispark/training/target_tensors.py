"""The part of a target training from a cache needs, read from its safetensors: the embedding, the lm_head,
the tokenizer and the identity, with no full model on the host.

Training from a cache never runs the target: the drafter takes the frozen embedding and lm_head, the mask
token comes from the tokenizer, the cache is checked against the identity. Loading Qwen2.5-VL-3B whole for
that (vision tower included, ~7.5 GB in fp32 on the CPU) is what made training need 10–11 GB of host RAM;
:func:`load_frozen_parts` builds the model on the meta device (no memory), reads only the embedding and
lm_head tensors from the safetensors files (their headers say where), and returns an ordinary
:class:`~minispark.target.loading.Target` whose other weights are meta tensors. Anything that would run it
fails loudly; ``init_layers`` other than ``random`` (copying decoder layers) loads the whole target instead.

    .venv/bin/python -m pytest -q tests/training/test_target_tensors.py
"""

from __future__ import annotations

from pathlib import Path

import torch

from minispark.core.errors import MinisparkError, option
from minispark.target.loading import VLM_TYPES, Target, model_config

#: Checkpoint key endings of the two tensors (every supported family names them so; VL checkpoints may
#: prefix them with ``model.`` or ``model.language_model.``).
EMBED_SUFFIX, HEAD_SUFFIX = "embed_tokens.weight", "lm_head.weight"


def _locate(source: str | None) -> tuple[str, Path]:
    """(name, local directory) of ``source`` as ``load_target`` names them (a hub id from the HF cache)."""
    from minispark.target.target_ref import DIRECTORY, HUB, TargetRef
    from minispark.target.target_ref import target_weights

    ref = TargetRef.parse(source)
    if ref.kind == DIRECTORY:
        target_weights(ref.directory, source)
    if ref.kind != HUB:
        return ref.name, ref.local_directory()
    from huggingface_hub import snapshot_download

    return source, Path(snapshot_download(source, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.jinja",
                                                                  "*.model"]))


def read_frozen_tensors(location: Path, vocab_size: int, hidden_size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The (V, d) embedding and lm_head (None when the checkpoint ties them and stores one) from the
    safetensors files of ``location``; nothing else is read."""
    from safetensors import safe_open

    found: dict[str, torch.Tensor] = {}
    for file in sorted(location.glob("*.safetensors")):
        with safe_open(str(file), framework="pt", device="cpu") as handle:
            for key in handle.keys():
                if "visual" in key or not key.endswith((EMBED_SUFFIX, HEAD_SUFFIX)):
                    continue
                if tuple(handle.get_slice(key).get_shape()) == (vocab_size, hidden_size):
                    found.setdefault(EMBED_SUFFIX if key.endswith(EMBED_SUFFIX) else HEAD_SUFFIX,
                                     handle.get_tensor(key))
    if EMBED_SUFFIX not in found:
        raise MinisparkError(f"{option('target')} {location}: no ({vocab_size}, {hidden_size}) *{EMBED_SUFFIX} in its "
                             "safetensors")
    return found[EMBED_SUFFIX], found.get(HEAD_SUFFIX)


def load_frozen_parts(source: str | None) -> Target:
    """A :class:`Target` for training from a cache: real tokenizer, identity, embedding and lm_head (the
    checkpoint's dtype, on the CPU), every other weight on the meta device."""
    from transformers import (AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer,
                              GenerationConfig)

    name, location = _locate(source)
    if not any(location.glob("*.safetensors")):
        raise MinisparkError(f"{option('target')} {source}: no safetensors weights to read the embedding from")
    config = model_config(str(location), source)
    auto = AutoModelForImageTextToText if config.model_type in VLM_TYPES else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config, dtype=torch.float32)
    text = config.get_text_config()
    embed, head = read_frozen_tensors(location, text.vocab_size, text.hidden_size)
    # In the checkpoint's dtype: the drafter converts once into its own (bf16 stays shared, not copied via fp32).
    embedding = torch.nn.Parameter(embed, requires_grad=False)
    model.get_input_embeddings().weight = embedding
    tied = head is None or bool(getattr(config, "tie_word_embeddings", False))
    model.get_output_embeddings().weight = embedding if tied else torch.nn.Parameter(head, requires_grad=False)
    try:
        model.generation_config = GenerationConfig.from_pretrained(str(location))  # its EOS ids
    except OSError:
        pass
    tokenizer = AutoTokenizer.from_pretrained(str(location))
    processor = AutoProcessor.from_pretrained(str(location)) if config.model_type in VLM_TYPES else None
    return Target(name, model, tokenizer, processor, location)
