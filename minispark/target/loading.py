"""The target model: loading (embedded GGUF, local dir, hub id, 4/8-bit), prompts, and KV-cached steps.

Everything model-specific lives here so the decoding engine sees only token ids and tensors:
chat templates, images (through qwen-vl-utils and the model's processor), M-RoPE positions, and
hidden-state capture for the drafter's KV-injection features.

    python -c "from minispark.target.loading import load_target; t = load_target(); print(t.name, t.num_layers)"
"""

from __future__ import annotations

import logging
import re
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import torch

from minispark.core.settings import settings
from minispark.target.compiled import StaticSteps
from minispark.target.kv_cache import slot_caches
from minispark.target.runtime import apply_runtime, requested_runtime
from minispark.target.plain_prompts import transcript
from minispark.target.session import PromptInputs, TargetSession
from minispark.target.target_ref import DIRECTORY, TargetRef
from minispark.target.threads import ThreadGovernor
from minispark.core.errors import MinisparkError, first_line, option, out_of_memory
from minispark.core.defaults import PICKLE_WEIGHTS
from minispark.core.identity import files_hash, torch_dtype, weights_hash
from minispark.core.checks import device as checked_device, lone_surrogate
from minispark.core.model_files import UnreadableConfig, is_minispark_config, read_config
from minispark.target.target_ref import target_weights

VLM_TYPES = {"qwen2_vl", "qwen2_5_vl", "qwen3_vl"}


class Target:
    """A loaded target model with its tokenizer (and processor for VLMs)."""

    def __init__(self, name: str, model: torch.nn.Module, tokenizer: Any, processor: Any | None,
                 model_dir: Path | None, runtime: str = "eager") -> None:
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.processor = processor
        self.model_dir = model_dir
        config = model.config
        self.model_type: str = config.model_type
        self.text_config = config.get_text_config()
        self.is_vlm = self.model_type in VLM_TYPES
        self.uses_mrope = self.is_vlm
        self.decoder = model.model.language_model if hasattr(model.model, "language_model") else model.model
        self.num_layers: int = self.text_config.num_hidden_layers
        self.hidden_size: int = self.text_config.hidden_size
        self.lm_head: torch.nn.Module = model.get_output_embeddings()
        self.final_norm: torch.nn.Module = self.decoder.norm
        self.vocab_size: int = self.lm_head.weight.shape[0]
        self.eos_token_ids = _eos_ids(model, tokenizer)
        self.runtime = runtime  # how its linears run: what ``runtime.apply_runtime`` did to ``model``
        # the compiled runtime's step forward and static KV caches (sessions take theirs from here)
        self.static_steps = StaticSteps(self.model, self.decoder, self.final_norm, self.device) \
            if runtime == "compiled" else None
        self.max_pixels: int | None = None  # pixel budget per image; None: ``settings().max_pixels``
        # on a CPU, torch's threads follow the cores other processes leave free unless a count is fixed
        fixed = settings().threads
        if fixed is not None and self.device.type == "cpu":
            torch.set_num_threads(fixed)
        self.threads = ThreadGovernor() if fixed is None and self.device.type == "cpu" else None

    def threads_line(self) -> str:
        """The status line's word on threads: what the governor chose and why, or the fixed count."""
        return self.threads.describe() if self.threads is not None else f"threads={torch.get_num_threads()}"

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def context_limit(self) -> int | None:
        """The positions the target has for prompt and answer together: :func:`context_limit` of its config."""
        return context_limit(self.model.config)

    @property
    def windowed(self) -> bool:
        """Whether some decoder layer attends a sliding window. The model's own masks apply it (the session keeps
        every layer's keys whole, so rollback works past the window); a mask built here (a tree's, a padded
        batch's) does not, so those verifies are not used for such a target."""
        if not getattr(self.text_config, "sliding_window", None):
            return False
        types = getattr(self.text_config, "layer_types", None)
        return "sliding_attention" in types if types is not None else True

    @property
    def plain_prompts(self) -> bool:
        """Whether prompts are plain text (``plain_prompts.py``): the tokenizer (a VLM's processor) has no chat
        template, as a base model has none."""
        templater = self.processor if self.is_vlm else self.tokenizer
        return getattr(templater, "chat_template", None) is None

    def room(self, prompt_tokens: int, wanted: int) -> int:
        """``wanted`` new tokens capped to what the context leaves after a prompt, at least 1."""
        limit = self.context_limit
        return wanted if limit is None else max(1, min(wanted, limit - prompt_tokens))

    # ------------------------------------------------------------------ identity and layers
    def identity(self) -> dict[str, str]:
        """Name plus content hashes of weights/config and tokenizer, to refuse mismatched artifacts."""
        return {
            "name": self.name,
            "weights_hash": weights_hash(self.model_dir),
            "tokenizer_hash": files_hash(self.model_dir, ("tokenizer*.json", "chat_template*", "vocab*",
                                                         "merges.txt", "*processor*.json")),
        }

    def auto_layers(self, m: int | None = None) -> list[int]:
        """m decoder layers (3–5 by depth) spread evenly from layer 1, never the last one."""
        n = self.num_layers
        if m is None:
            m = max(1, min(5, (n - 1) // 7 + 1, n - 1))
        if n < 2:
            raise MinisparkError(f"target {self.name} has {n} layer(s): no non-final layer to capture")
        step = max(1, (n - 2) // max(1, m - 1)) if m > 1 else 1
        layers = [min(1 + i * step, n - 2) for i in range(m)]
        return sorted(set(layers))

    def check_layers(self, layers: Sequence[int], what: str = option("layers")) -> list[int]:
        """Validate captured layer ids: in range, and never the final layer. ``what`` names where they came
        from in the error (a drafter's ``feature_layers`` are not the user's ``--layers``)."""
        for layer in layers:
            if layer == self.num_layers - 1 or layer == -1:
                raise MinisparkError(
                    f"{what}: layer {layer} is the final decoder layer of {self.name}; its hidden state "
                    "is post-norm in transformers' outputs and inconsistent with hooked features"
                )
            if not 0 <= layer < self.num_layers:
                raise MinisparkError(f"{what}: layer {layer} out of range for {self.name} "
                                     f"({self.num_layers} layers)")
        return list(layers)

    # ------------------------------------------------------------------ prompts
    def encode(self, messages: list[dict] | None = None, *, prompt: str | None = None,
               images: Sequence[str | Path] = (), add_generation_prompt: bool = True) -> PromptInputs:
        """Apply the chat template (and the processor for images) to one conversation; a target without one
        takes a lone ``prompt`` as it is and ``messages`` as a plain transcript (``plain_prompts.py``)."""
        if self.plain_prompts:
            if messages is None and prompt is not None and not images:
                return self.encode_text(prompt)
            if messages is None:
                messages = [{"role": "user", "content": [{"type": "image"}] if images else prompt}]
            return self.encode_text(transcript(messages, self.name, add_generation_prompt))
        if messages is None:
            if prompt is None:
                raise MinisparkError("encode: give messages or a prompt")
            content: list[dict] = [{"type": "image", "image": str(p)} for p in images]
            content.append({"type": "text", "text": prompt})
            messages = [{"role": "user", "content": content if images else prompt}]
        image_paths = _message_images(messages)
        for path in image_paths:
            if Path(path).is_dir():
                raise MinisparkError(f"image {path}: a directory, not an image file")
            if not Path(path).is_file():
                raise MinisparkError(f"image not found: {path}")
        if image_paths and not self.is_vlm:
            raise MinisparkError(f"target {self.name} is text-only ({self.model_type}); it cannot take images")
        if self.is_vlm:
            return self._encode_vlm(messages, add_generation_prompt)
        text = self._render(self.tokenizer, messages, add_generation_prompt)
        ids = self.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        return PromptInputs(input_ids=ids.to(self.device), text_positions=torch.arange(ids.shape[1]))

    def encode_text(self, text: str) -> PromptInputs:
        """Plain text as the tokenizer reads it, its special tokens added (a base model's BOS), without the chat
        template: a completion's prompt, and every prompt of a target that has no template."""
        text = _utf8(text)
        if not self.is_vlm:
            ids = self.tokenizer(text, add_special_tokens=True, return_tensors="pt")["input_ids"]
            return PromptInputs(input_ids=ids.to(self.device), text_positions=torch.arange(ids.shape[1]))
        input_ids = self.processor(text=[text], return_tensors="pt")["input_ids"].to(self.device)
        position_ids, _ = self.mrope_positions(input_ids, {})
        return PromptInputs(input_ids=input_ids, text_positions=position_ids[0, 0].cpu(), position_ids=position_ids)

    def _render(self, templater: Any, messages: list[dict], add_generation_prompt: bool) -> str:
        """The conversation through the target's chat template; a template that does not parse (a damaged
        chat_template.jinja: jinja2's traceback) or refuses the conversation is one line naming the target."""
        from jinja2 import TemplateError

        try:
            return _utf8(templater.apply_chat_template(messages, tokenize=False,
                                                       add_generation_prompt=add_generation_prompt))
        except TemplateError as exc:
            raise MinisparkError(f"target {self.name}: its chat template fails on this conversation "
                                 f"({first_line(exc)}); a damaged chat_template.jinja, or a conversation the "
                                 "template refuses") from None

    def _encode_vlm(self, messages: list[dict], add_generation_prompt: bool) -> PromptInputs:
        text = self._render(self.processor, messages, add_generation_prompt)
        image_inputs = self._budgeted_images(messages)
        batch = self.processor(text=[text], images=image_inputs, return_tensors="pt")
        input_ids = batch.pop("input_ids").to(self.device)
        batch.pop("attention_mask", None)
        kwargs = {k: v.to(self.device) for k, v in batch.items()}
        if "pixel_values" in kwargs:
            kwargs["pixel_values"] = kwargs["pixel_values"].to(self.dtype)
        position_ids, _ = self.mrope_positions(input_ids, kwargs)
        return PromptInputs(input_ids=input_ids, text_positions=position_ids[0, 0].cpu(),
                            model_kwargs=kwargs, position_ids=position_ids)

    def _budgeted_images(self, messages: list[dict]) -> list[Any] | None:
        """The messages' images read by qwen-vl-utils, each downscaled to the pixel budget
        (``self.max_pixels``, default ``settings().max_pixels``) unless its item sets its own
        ``max_pixels``; one warning line (a CLI ``notice:``) per image made smaller."""
        from PIL import Image
        from qwen_vl_utils import process_vision_info

        budget = self.max_pixels or settings().max_pixels
        # Copies with the budget added: the caller's messages (a conversation's history) stay as they were.
        messages = [{**m, "content": [{"max_pixels": budget, **i} if isinstance(i, dict) and i.get("type") == "image"
                                      else i for i in m["content"]]} if isinstance(m.get("content"), list) else m
                    for m in messages]
        items = [item for message in messages if isinstance(message.get("content"), list)
                 for item in message["content"] if isinstance(item, dict) and item.get("type") == "image"]
        sizes = []
        for item in items:
            image = item.get("image")
            if isinstance(image, (str, Path)):
                with Image.open(str(image).removeprefix("file://")) as img:  # header only: no decode
                    sizes.append((str(image), img.size))
            else:
                sizes.append((type(image).__name__, getattr(image, "size", None)))
        image_inputs, _ = process_vision_info(messages)
        for (name, size), image, item in zip(sizes, image_inputs or [], items):
            if size is not None and size[0] * size[1] > item["max_pixels"]:  # not the rounding to 28-pixel tiles
                warnings.warn(f"image {name}: {size[0]}x{size[1]} downscaled to {image.size[0]}x{image.size[1]} "
                              f"(pixel budget {item['max_pixels']:,}; minispark --max-pixels N changes it)", stacklevel=2)
        return image_inputs

    def mrope_positions(self, input_ids: torch.Tensor, kwargs: dict[str, Any]) -> tuple[torch.Tensor, int]:
        """(3, 1, P) M-RoPE positions and the rope delta (position − index after the last image)."""
        length = input_ids.shape[1]
        if kwargs.get("image_grid_thw") is None and kwargs.get("video_grid_thw") is None:
            positions = torch.arange(length, device=input_ids.device).view(1, 1, -1).expand(3, 1, -1)
            return positions, 0
        rope_kwargs = {k: kwargs[k] for k in ("mm_token_type_ids", "image_grid_thw", "video_grid_thw",
                                              "second_per_grid_ts") if kwargs.get(k) is not None}
        positions, deltas = self.model.model.get_rope_index(input_ids, **rope_kwargs)
        return positions, int(deltas.reshape(-1)[0])

    def extend(self, inputs: PromptInputs, new_ids: torch.Tensor) -> PromptInputs:
        """Append generated tokens; their positions continue +1 after the last one."""
        n = int(new_ids.numel())
        start = int(inputs.text_positions[-1]) + 1 if inputs.length else 0
        new_positions = torch.arange(start, start + n)
        position_ids = None
        if inputs.position_ids is not None:
            extra = new_positions.to(inputs.position_ids.device).view(1, 1, -1).expand(3, 1, -1)
            position_ids = torch.cat([inputs.position_ids, extra], dim=2)  # (3, 1, P+n)
        ids = torch.cat([inputs.input_ids, new_ids.view(1, -1).to(inputs.input_ids.device)], dim=1)
        kwargs = dict(inputs.model_kwargs)
        if "mm_token_type_ids" in kwargs:  # generated tokens are text (type 0)
            types = kwargs["mm_token_type_ids"]
            kwargs["mm_token_type_ids"] = torch.cat([types, types.new_zeros(1, n)], dim=1)
        return replace(inputs, input_ids=ids, text_positions=torch.cat([inputs.text_positions, new_positions]),
                       position_ids=position_ids, model_kwargs=kwargs)

    # ------------------------------------------------------------------ forwards
    def session(self, capture_layers: Sequence[int] = (), capture_final: bool = False) -> "TargetSession":
        """A KV-cached decoding session; use as a context manager so hooks are removed."""
        return TargetSession(self, self.check_layers(capture_layers), capture_final)

    def slot_sessions(self, slots: int, capture_layers: Sequence[int] = ()) -> list["TargetSession"]:
        """``slots`` sessions whose KV caches are rows of shared buffers (``kv_cache.slot_caches``), which a batched
        forward reads and writes in place; plain sessions where the runtime keeps caches of its own (eager:
        transformers' cache as it is; compiled: static caches)."""
        if self.runtime in ("eager", "compiled"):
            return [self.session(capture_layers) for _ in range(slots)]
        layers = self.check_layers(capture_layers)
        return [TargetSession(self, layers, False, cache) for cache in slot_caches(self.model.config, slots)]

    def warm_up(self, widths: Sequence[int]) -> float | None:
        """Compile the decoding steps of ``widths`` tokens now (the compiled runtime; None elsewhere): a
        short prompt, one step of each width, each cropped away. Returns the seconds it took."""
        if self.static_steps is None:
            return None
        start = time.perf_counter()
        inputs = self.encode(prompt="Hello")
        with self.session(capture_layers=()) as session:
            first = session.prefill(inputs)
            token = first.logits[-1].argmax().view(1)
            for width in sorted(set(widths)):
                session.step(token.repeat(width))
                session.crop(inputs.length)
        return time.perf_counter() - start

    @torch.no_grad()
    def capture(self, inputs: PromptInputs, layers: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """One full forward: raw outputs of ``layers`` (P, m, d) and the final-norm hidden (P, d), fp32 CPU."""
        with self.session(layers, capture_final=True) as session:
            out = session.prefill(inputs, all_logits=False)
        m = len(layers)
        features = out.features.float().cpu().view(inputs.length, m, self.hidden_size)  # (P, m, d)
        return features, out.final_hidden.float().cpu()


# ---------------------------------------------------------------------- loading
def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """``None``/"auto": bf16 on CUDA (fp16 without bf16 support), fp32 on CPU."""
    if dtype in (None, "auto"):
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    try:
        return torch_dtype(dtype)
    except MinisparkError as exc:
        raise MinisparkError(f"{option('dtype')}: {exc}") from None


def resolve_device(device: str | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(checked_device(device))


def quiet_library_logs() -> None:
    """Silence the libraries' own log lines, which are about their internals, never the user's input: called
    before transformers loads a model and before bitsandbytes is imported (its 8-bit AdamW)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the CLI shows its own status; keep stderr to one line on errors
    # transformers' log lines ("Loading a GGUF checkpoint ...", "Token indices sequence length is longer ...")
    # are about its internals, not the user's input: minispark checks the context itself and says so.
    hf_logging.set_verbosity_error()
    # bitsandbytes logs per forward ("MatMul8bitLt: inputs will be cast ...": 110 lines through a 3-token answer,
    # in its text) and advises `pip install kernels` for a CPU kernel: its internals too, never the user's input
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    # the kernels package it loads them through: "Skipping publisher trust check ... offline mode" on every load
    logging.getLogger("kernels").setLevel(logging.ERROR)


def load_target(source: str | None = None, *, dtype: str | None = None, device: str | None = None,
                load_in_4bit: bool = False, load_in_8bit: bool = False,
                trust_remote_code: bool = False, runtime: str | None = None) -> Target:
    """Load a target from a hub id, a local directory, or the embedded default (``None``/"embedded").

    ``runtime`` (default: ``minispark --runtime``, else auto) is how its linears run; see ``runtime.py``.
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer, \
        BitsAndBytesConfig

    quiet_library_logs()
    if load_in_4bit and load_in_8bit:
        raise MinisparkError(f"{option('load_in_4bit')} and {option('load_in_8bit')} are exclusive")
    runtime = requested_runtime(runtime)
    settings()  # its variables checked on every target, not only once a vision one encodes an image
    ref = TargetRef.parse(source)
    name, location = ref.name, ref.local_directory()
    if ref.kind == DIRECTORY:
        target_weights(location, source)
    ref = str(location) if location is not None else name
    config = model_config(ref, source, trust_remote_code)
    model_type = config.model_type
    if not trust_remote_code:
        check_family(config, source)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "trust_remote_code": trust_remote_code}
    if not settings().allow_pickle_weights:
        kwargs["use_safetensors"] = True  # a hub repo with only pickle weights is refused too
    if load_in_4bit or load_in_8bit:
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=load_in_4bit, load_in_8bit=load_in_8bit,
            bnb_4bit_compute_dtype=torch_dtype, bnb_4bit_quant_type="nf4")
        kwargs["device_map"] = {"": torch_device.index or 0} if torch_device.type == "cuda" else {"": "cpu"}
    try:  # before the weights: a missing or damaged tokenizer is one line, and costs no model load
        tokenizer = AutoTokenizer.from_pretrained(ref, trust_remote_code=trust_remote_code)
        processor = AutoProcessor.from_pretrained(ref, trust_remote_code=trust_remote_code) \
            if model_type in VLM_TYPES else None
    except (OSError, ValueError) as exc:
        first = first_line(exc)
        raise MinisparkError(f"{option('target')} {source}: cannot load its tokenizer ({first}); an incomplete download "
                             "or copy?") from None
    model_cls = AutoModelForImageTextToText if model_type in VLM_TYPES else AutoModelForCausalLM
    model = _load_weights(model_cls, ref, source, location, kwargs)
    if "device_map" not in kwargs:
        model = model.to(torch_device)
    if location is None:
        location = _hub_snapshot_dir(model)
    check_layers_hookable(model, source)
    used = apply_runtime(model, runtime)  # before Target reads its lm_head module
    loaded = Target(name, model, tokenizer, processor, location, used)
    if loaded.plain_prompts:
        warnings.warn(f"target {name} has no chat template (a base model?): a prompt is given to it as plain text, "
                      "a conversation as a 'User: / Assistant:' transcript", stacklevel=2)
    return loaded


def check_family(config: Any, source: str | None) -> None:
    """Refuse, naming why, a model minispark cannot draft for: families are taken by what they are (a decoder-only
    model transformers runs as a causal LM, or one of the vision-language families whose image path is built
    here: :data:`VLM_TYPES`), not by a list of names."""
    from transformers.models.auto.modeling_auto import (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
                                                        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES)

    model_type = config.model_type
    if model_type in VLM_TYPES:
        return
    if getattr(config, "is_encoder_decoder", False):
        raise MinisparkError(f"{option('target')} {source}: {model_type!r} is an encoder-decoder model; speculative decoding "
                             "here drafts for decoder-only targets")
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return
    if model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        raise MinisparkError(f"{option('target')} {source}: {model_type!r} is a vision-language family whose image inputs "
                             f"minispark does not build (it builds Qwen-VL's: {', '.join(sorted(VLM_TYPES))}); "
                             "its text-only model, where the family has one, works")
    raise MinisparkError(f"{option('target')} {source}: model type {model_type!r} is not a causal language model "
                         "transformers knows (a decoder-only text model, or a Qwen-VL family)")


def check_layers_hookable(model: torch.nn.Module, source: str | None) -> None:
    """The drafter reads features from the decoder's layers: a model whose decoder has no ``layers`` list and
    final ``norm`` cannot give them (a design minispark does not know), which is refused by name."""
    inner = getattr(model, "model", None)
    decoder = getattr(inner, "language_model", inner)
    missing = [name for name in ("layers", "norm") if not isinstance(getattr(decoder, name, None), torch.nn.Module)]
    if missing:
        raise MinisparkError(f"{option('target')} {source}: {type(model).__name__} has no decoder "
                             f"{' or '.join(repr(m) for m in missing)} module to capture features from; "
                             "minispark drafts from its decoder layers' outputs")


def context_limit(config: Any) -> int | None:
    """The positions a model config gives prompt and answer together (its text config's
    ``max_position_embeddings``); None when it states none."""
    return getattr(config.get_text_config(), "max_position_embeddings", None)


def model_config(ref: str, source: str | None, trust_remote_code: bool = False) -> Any:
    """``AutoConfig.from_pretrained(ref)``, a damaged ``config.json`` one line naming ``--target``: a value of the
    wrong type (``"num_hidden_layers": "4"``) raised huggingface_hub's strict-dataclass error as a traceback."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(ref, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        if _is_drafter_dir(Path(ref)):  # transformers said only "Should have a model_type key"
            raise MinisparkError(f"{option('target')} {source}: a minispark drafter, not a target model; give it to {option('drafter')}, "
                                 f"and {option('target')} the model it drafts for") from None
        raise MinisparkError(f"{option('target')} {source}: cannot load a model config ({first_line(exc)})") from None
    except StrictDataclassError as exc:  # its first line only names the field; the cause says what is wrong
        raise MinisparkError(f"{option('target')} {source}: cannot load a model config ({Path(ref) / 'config.json'}: "
                             f"{first_line(exc.__cause__ or exc)})") from None


def _is_drafter_dir(directory: Path) -> bool:
    """Whether ``directory``'s config.json reads as a minispark drafter's."""
    try:
        config = read_config(directory)
    except UnreadableConfig:
        return False
    return config is not None and is_minispark_config(config)


def _load_weights(model_cls: Any, ref: str, source: str | None, location: Path | None,
                  kwargs: dict[str, Any]) -> torch.nn.Module:
    """``model_cls.from_pretrained``, with a damaged or refused weight file as one line naming it, and
    weights missing from the checkpoint refused (transformers, whose log is silenced, would only warn and
    initialize them at random)."""
    import pickle

    from safetensors import SafetensorError

    try:
        model, info = model_cls.from_pretrained(ref, output_loading_info=True, **kwargs)
    except pickle.UnpicklingError as exc:  # torch's weights-only loader met a pickle that would run code
        pickled = sorted(p for pattern in PICKLE_WEIGHTS for p in (location or Path(ref)).glob(pattern))
        name = str(pickled[0]) if pickled else f"a pickle weight file of {source}"
        blocked = re.search(r"GLOBAL (\S+)", str(exc))
        raise MinisparkError(f"{option('target')} {source}: refused {name}: it asks to run code when loaded"
                             f"{f' ({blocked.group(1)})' if blocked else ''}, which torch's weights-only loader "
                             "blocks; nothing ran. Use safetensors weights from a source you trust") from None
    except (OSError, SafetensorError) as exc:
        first = first_line(exc)
        raise MinisparkError(f"{option('target')} {source}: cannot load the weights ({first})") from None
    except (RuntimeError, ValueError, TypeError, ArithmeticError, AssertionError) as exc:  # "hidden_size": -64
        # built no tensor; "vocab_size": 0 failed torch's assert on the embedding's padding index
        if out_of_memory(exc) is not None:  # one_line_errors says that one
            raise
        raise MinisparkError(f"{option('target')} {source}: cannot build the model ({first_line(exc)}); a damaged or "
                             "hand-edited config.json?") from None
    absent = sorted(info.get("missing_keys") or ()) + sorted(str(k[0]) if isinstance(k, tuple) else str(k)
                                                             for k in info.get("mismatched_keys") or ())
    if absent:
        raise MinisparkError(f"{option('target')} {source}: its weights lack or mis-shape {absent[0]!r}"
                             f"{f' and {len(absent) - 1} more' if len(absent) > 1 else ''} (an incomplete or "
                             "mismatched checkpoint: config.json and the weights differ)")
    return model


def _hub_snapshot_dir(model: torch.nn.Module) -> Path | None:
    path = getattr(model.config, "_name_or_path", "")
    return Path(path) if path and Path(path).is_dir() else None


def _eos_ids(model: torch.nn.Module, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if value is None:
            continue
        ids.update(value if isinstance(value, (list, tuple, set)) else [value])
    for token in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
        token_id = tokenizer.convert_tokens_to_ids(token) if token in tokenizer.get_vocab() else None
        if token_id is not None:
            ids.add(int(token_id))
    return {int(i) for i in ids}


def _utf8(text: str) -> str:
    """The rendered prompt, refused (one line) when it holds a lone surrogate, which no tokenizer encodes:
    an undecodable command-line byte, or a JSON ``\\udce9`` escape of half a character in a request."""
    index = lone_surrogate(text)
    if index is not None:
        raise MinisparkError(f"a message holds {text[index]!r}, half a character (a lone surrogate), "
                             "which is not text; send UTF-8")
    return text


def _message_images(messages: list[dict]) -> list[str]:
    paths = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for item in content:
                if isinstance(item, dict) and item.get("type") == "image":
                    image = item.get("image")
                    if isinstance(image, (str, Path)):
                        paths.append(str(image).removeprefix("file://"))
    return paths
