"""Tiny random models: build offline, load back through Auto* classes, generate greedily.

Run: .venv/bin/python -m pytest -q tests/test_tiny_models.py
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    BatchEncoding,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    ProcessorMixin,
)

from tests import tiny_models
from tests.tiny_models import (
    FAMILIES,
    TEXT_FAMILIES,
    VISION_FAMILIES,
    VISION_TOKENS,
    base_tokenizer,
    build_tiny,
    make_test_image,
)

NEW_TOKENS = 8
MODEL_CLASSES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mistral": "MistralForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "qwen2_vl": "Qwen2VLForConditionalGeneration",
    "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
}
PROCESSOR_CLASSES = {
    "qwen2_vl": "Qwen2VLProcessor",
    "qwen2_5_vl": "Qwen2_5_VLProcessor",
    "qwen3_vl": "Qwen3VLProcessor",
}


@pytest.fixture(scope="module", autouse=True)
def _single_thread_and_warm_tokenizer() -> Iterator[None]:
    # Ops on 64-wide tensors gain nothing from threads, and on a shared, oversubscribed CPU
    # the intra-op thread pool spin-waits: generate ran ~40x slower with 2 threads than 1.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # The GGUF read takes seconds once per process; keep it out of the per-build timing.
    base_tokenizer()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image.Image:
    return Image.open(make_test_image(tmp_path_factory.mktemp("img") / "test.png")).convert("RGB")


def _load(family: str, path: Path) -> tuple[PreTrainedModel, ProcessorMixin | PreTrainedTokenizerBase]:
    if family in VISION_FAMILIES:
        return AutoModelForImageTextToText.from_pretrained(path), AutoProcessor.from_pretrained(path)
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _chat_inputs(
    family: str, processor: ProcessorMixin | PreTrainedTokenizerBase, image: Image.Image
) -> BatchEncoding:
    if family in VISION_FAMILIES:
        content = [{"type": "image", "image": image}, {"type": "text", "text": "Describe the picture."}]
    else:
        content = "Tell me a story."
    return processor.apply_chat_template(
        [{"role": "user", "content": content}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )


def _greedy(model: PreTrainedModel, inputs: BatchEncoding) -> torch.Tensor:
    # min_new_tokens keeps a random model from stopping early on EOS.
    return model.generate(**inputs, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)


@pytest.mark.parametrize("family", FAMILIES)
def test_build_load_generate(family: str, tmp_path: Path, image: Image.Image) -> None:
    start = time.perf_counter()
    path = build_tiny(family, tmp_path / family)
    build_s = time.perf_counter() - start
    assert build_s < 10.0, f"building {family} took {build_s:.1f}s"
    assert (path / "model.safetensors").is_file() and (path / "config.json").is_file()

    model, processor = _load(family, path)
    assert type(model).__name__ == MODEL_CLASSES[family]
    assert model.dtype == torch.float32
    inputs = _chat_inputs(family, processor, image)
    input_ids = inputs["input_ids"]  # (1, L)
    assert input_ids.shape[0] == 1

    if family in VISION_FAMILIES:
        assert type(processor).__name__ == PROCESSOR_CLASSES[family]
        assert {"pixel_values", "image_grid_thw", "mm_token_type_ids"} <= set(inputs.keys())
        grid = inputs["image_grid_thw"]  # (num_images, 3) as (t, h, w) in patches
        assert grid.shape == (1, 3)
        merge = model.config.vision_config.spatial_merge_size
        num_image_tokens = int(grid.prod()) // merge**2
        assert 1 <= num_image_tokens <= 16, "tiny pixel bounds should keep the image to a few tokens"
        assert int((input_ids == model.config.image_token_id).sum()) == num_image_tokens
        assert inputs["mm_token_type_ids"].shape == input_ids.shape
        assert int(inputs["mm_token_type_ids"].sum()) == num_image_tokens
        assert inputs["pixel_values"].shape[0] == int(grid.prod())

    out = _greedy(model, inputs)  # (1, L + NEW_TOKENS)
    assert out.shape == (1, input_ids.shape[1] + NEW_TOKENS)
    assert torch.equal(out[:, : input_ids.shape[1]], input_ids)
    assert int(out.max()) < model.config.get_text_config().vocab_size


@pytest.mark.parametrize("family", FAMILIES)
def test_config_matches_tokenizer(family: str) -> None:
    tokenizer = tiny_models.tiny_tokenizer(family)
    config = tiny_models.tiny_config(family, tokenizer)
    text = config.get_text_config()
    assert text.vocab_size % 64 == 0 and len(tokenizer) <= text.vocab_size < len(tokenizer) + 64
    assert config.tie_word_embeddings is False
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id == text.eos_token_id
    if family in TEXT_FAMILIES:
        assert len(tokenizer) == len(base_tokenizer())
        return
    assert len(tokenizer) == len(base_tokenizer()) + len(VISION_TOKENS)
    for token in VISION_TOKENS:
        assert tokenizer.encode(token, add_special_tokens=False) == [tokenizer.convert_tokens_to_ids(token)]
    assert config.image_token_id == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert config.video_token_id == tokenizer.convert_tokens_to_ids("<|video_pad|>")
    assert config.vision_start_token_id == tokenizer.convert_tokens_to_ids("<|vision_start|>")
    assert config.vision_end_token_id == tokenizer.convert_tokens_to_ids("<|vision_end|>")
    assert sum(text.rope_parameters["mrope_section"]) == text.head_dim // 2


def test_base_tokenizer_not_mutated() -> None:
    before = len(base_tokenizer())
    tiny_models.tiny_tokenizer("qwen2_5_vl")
    assert len(base_tokenizer()) == before


def test_chat_template_renders_image_placeholder() -> None:
    tokenizer = tiny_models.tiny_tokenizer("qwen2_5_vl")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>hi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_same_seed_same_weights(tmp_path: Path) -> None:
    first = build_tiny("qwen3", tmp_path / "a", seed=3)
    second = build_tiny("qwen3", tmp_path / "b", seed=3)
    other = build_tiny("qwen3", tmp_path / "c", seed=4)
    a, b, c = (load_file(p / "model.safetensors") for p in (first, second, other))
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_seeding_leaves_global_rng_alone(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(4)
    torch.manual_seed(123)
    build_tiny("llama", tmp_path / "m", num_layers=1)
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.parametrize("family", ["llama", "qwen2_5_vl"])
def test_greedy_logits_are_well_separated(family: str, tmp_path: Path, image: Image.Image) -> None:
    model, processor = _load(family, build_tiny(family, tmp_path / family))
    inputs = _chat_inputs(family, processor, image)
    out = model.generate(
        **inputs,
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        do_sample=False,
        output_scores=True,
        return_dict_in_generate=True,
    )
    top2 = torch.cat(out.scores).topk(2, dim=-1).values  # (NEW_TOKENS, 2)
    gaps = top2[:, 0] - top2[:, 1]  # (NEW_TOKENS,)
    # fp32 drift between cached and batched forwards is ~1e-5; ties near that would flip argmax.
    assert float(gaps.min()) > 1e-3
    assert float(gaps.median()) > 0.1


def test_num_layers(tmp_path: Path) -> None:
    model = AutoModelForImageTextToText.from_pretrained(build_tiny("qwen3_vl", tmp_path / "m", num_layers=2))
    assert model.config.text_config.num_hidden_layers == 2


def test_qwen2_5_vl_rope_index(tmp_path: Path, image: Image.Image) -> None:
    model, processor = _load("qwen2_5_vl", build_tiny("qwen2_5_vl", tmp_path / "m"))
    inputs = _chat_inputs("qwen2_5_vl", processor, image)
    input_ids = inputs["input_ids"]  # (1, L)
    length = input_ids.shape[1]
    positions, rope_deltas = model.model.get_rope_index(
        input_ids,
        mm_token_type_ids=inputs["mm_token_type_ids"],
        image_grid_thw=inputs["image_grid_thw"],
    )
    assert positions.shape == (3, 1, length)
    assert rope_deltas.numel() == 1
    # Image tokens share a temporal index, so the sequence's last position falls short of L - 1
    # by exactly -rope_deltas; decoding continues from there.
    assert int(positions.max()) == length - 1 + int(rope_deltas)
    is_image = inputs["mm_token_type_ids"][0].bool()  # (L,)
    assert positions[0, 0, is_image].unique().numel() == 1
    text_pos = positions[:, 0, ~is_image]  # (3, L_text)
    assert torch.equal(text_pos[0], text_pos[1]) and torch.equal(text_pos[1], text_pos[2])


def test_vision_processor_handles_text_only_prompt(tmp_path: Path) -> None:
    model, processor = _load("qwen2_5_vl", build_tiny("qwen2_5_vl", tmp_path / "m"))
    inputs = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "No picture today."}]}],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
    )
    assert "pixel_values" not in inputs
    out = _greedy(model, inputs)  # (1, L + NEW_TOKENS)
    assert out.shape == (1, inputs["input_ids"].shape[1] + NEW_TOKENS)


def test_make_test_image_is_deterministic(tmp_path: Path) -> None:
    a = make_test_image(tmp_path / "a.png", size=(64, 48), seed=1)
    b = make_test_image(tmp_path / "b.png", size=(64, 48), seed=1)
    c = make_test_image(tmp_path / "c.png", size=(64, 48), seed=2)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    with Image.open(a) as img:
        assert img.size == (64, 48) and img.mode == "RGB"


def test_unknown_family_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown family"):
        build_tiny("gpt2", tmp_path / "m")


def test_cli_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "cli"
    argv = ["tiny_models", "qwen2", str(out_dir), "--num-layers", "1", "--seed", "5"]
    monkeypatch.setattr(sys, "argv", argv)
    tiny_models.main()
    assert capsys.readouterr().out.strip() == str(out_dir)
    assert AutoModelForCausalLM.from_pretrained(out_dir).config.num_hidden_layers == 1
