"""Text-level generation: prompt and images in, text and metrics out, through the speculative loop.

This is the Python API behind ``minispark generate`` (``conversation.py`` runs chat turns on it):
it builds the drafter and length policy from names, applies the chat template, runs
``engine.speculative_generate`` and decodes the result.

    python -c "from minispark.serving.generate import generate; from minispark.target.loading import load_target; \
print(generate(load_target(), prompt='Hi!', drafter='lookup').text)"
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from minispark.serving.draft_skip import SkipPolicy
from minispark.serving.drafters.base import Drafter, NoDrafter, default_policy
from minispark.serving.drafters.lookup import LookupDrafter
from minispark.serving.engine import GenerationResult, speculative_generate
from minispark.core.defaults import SHIPPED_DRAFTERS
from minispark.core.drafter_spec import HYBRID, LOOKUP, NONE, DrafterSpec
from minispark.core.errors import MinisparkError, option
from minispark.model.drafter_dir import OpenDrafter, open_drafter
from minispark.target.sampling import SamplingConfig, make_generator
from minispark.serving.schedule import LengthPolicy
from minispark.target.loading import Target

#: Trained drafters shipped with the repository, one directory each (config.json + model.safetensors).
DEFAULT_PROMPT = "Explain in a few sentences why the sky is blue, then list three other colours of the sky."


@dataclass
class GenerateOutput:
    text: str
    result: GenerationResult
    seed: int

    def as_dict(self, target: Target, drafter: Drafter) -> dict:
        return {
            "text": self.text,
            "token_ids": self.result.token_ids,
            "stop_reason": self.result.stop_reason,
            "target": target.name,
            "drafter": drafter.name,
            "seed": self.seed,
            "threads": torch.get_num_threads(),
            **self.result.stats.as_dict(),
        }


def default_drafter(target: Target, directory: Path = SHIPPED_DRAFTERS) -> Path | None:
    """The shipped drafter for ``target``: a directory under ``drafters/`` whose ``config.json``
    names it (``DraftConfig.target`` = name@weights-hash; the exact identity first, else the same
    target name, which loading then checks), or None when nothing matches."""
    from minispark.core.identity import same_target, target_id
    from minispark.core.model_files import CONFIG_FILE, UnreadableConfig
    from minispark.model.drafter_dir import read_drafter_dir

    want = target_id(target.identity())
    same_name = []
    for config_path in sorted(directory.glob(f"*/{CONFIG_FILE}")):
        try:
            named = str((read_drafter_dir(config_path.parent).raw or {}).get("target", ""))
        except UnreadableConfig as exc:
            raise MinisparkError(f"shipped drafter {config_path}: unreadable config ({exc.reason})") from None
        if same_target(named, want):
            return config_path.parent
        if named.split("@")[0] == target.name:
            same_name.append(config_path.parent)
    return same_name[0] if same_name else None


def shipped_drafter(target: Target) -> tuple[Drafter | None, OpenDrafter | None, str | None]:
    """The drafter shipped for ``target``, loaded: (drafter, its directory opened, None); (None, None, None)
    when none is shipped for it; (None, None, why) when the one found cannot serve it (e.g. trained
    on another conversion of the target). The one rule generate, chat, serve and the demo share."""
    shipped = default_drafter(target)
    if shipped is None:
        return None, None, None
    try:
        opened = open_drafter(Path(shipped))
        return make_drafter(opened, target), opened, None
    except MinisparkError as exc:
        return None, None, f"shipped drafter not usable ({exc})"


def make_drafter(spec: OpenDrafter | DrafterSpec | str, target: Target, precision: str | None = None) -> Drafter:
    """The drafter ``spec`` names (opened by ``model.drafter_dir.open_drafter``, or a spec to open): none, the
    lookup, a DSpark checkpoint directory, or the hybrid (the lookup and the shipped drafter / DIR, chosen per
    round: ``drafters/hybrid.py``); a DSpark drafter is served at ``precision`` (``auto`` / ``float`` / ``int8``;
    default: ``minispark --draft-precision``, else ``auto``)."""
    opened = open_drafter(spec)
    if opened.spec.kind == NONE:
        return NoDrafter()
    if opened.spec.kind == LOOKUP:
        return LookupDrafter()
    if opened.spec.kind == HYBRID:
        from minispark.serving.drafters.hybrid import make_hybrid

        if opened.found is None:
            directory = default_drafter(target)
            if directory is None:
                raise MinisparkError(f"{option('drafter')} {opened}: no trained drafter is shipped for "
                                     f"{target.name}; pass hybrid:DIR with a drafter directory")
            opened = opened.with_directory(directory)
        hybrid = make_hybrid(_trained_drafter(opened, target, precision))
        hybrid.source = opened
        return hybrid
    return _trained_drafter(opened, target, precision)


def _trained_drafter(opened: OpenDrafter, target: Target, precision: str | None) -> Drafter:
    """The DSpark drafter of the opened directory (see :func:`make_drafter`). One in DeepSpec's layout is first
    checked against the whole target (its depth too) without reading the weights, for one-line errors naming
    the key."""
    from minispark.core.settings import settings
    from minispark.core.identity import target_id
    from minispark.model.deepspec import check_against_target
    from minispark.model.draft_quant import quantize_int8
    from minispark.model.drafter_dir import DEEPSPEC
    from minispark.target.int8 import int8_supported
    from minispark.serving.drafters.dspark import load_drafter

    found, where = opened.found, f"{option('drafter')} {opened.directory}"
    if found.kind == DEEPSPEC:
        check_against_target(found, target)
    try:
        precision = precision or settings().draft_precision
        int8 = int8_supported(target.device)
        if precision == "int8" and not int8:
            raise MinisparkError(f"{option('draft_precision')} int8: no int8 kernel for {target.device.type} in this "
                                 "torch build (CPU only); use auto or float")
        drafter = load_drafter(found, target.model.get_input_embeddings().weight, target.lm_head.weight,
                               target.device, target_identity=target_id(target.identity()))
    except (ValueError, MinisparkError) as exc:
        raise MinisparkError(f"{where}: {exc}") from None
    target.check_layers(drafter.feature_layers, f"{where}: feature_layers")
    if int8 and precision != "float":
        quantize_int8(drafter.model)
    return drafter


def fit_context(target: Target, prompt_tokens: int, max_new_tokens: int, what: str = option("prompt"),
                fix: str = "shorten the prompt") -> int:
    """``max_new_tokens`` capped (with a warning) to the room the target's context leaves after the
    prompt; a prompt that alone fills the context is refused rather than decoded into garbage."""
    limit = target.context_limit
    if limit is None:
        return max_new_tokens
    if prompt_tokens >= limit:
        raise MinisparkError(f"{what}: {prompt_tokens} tokens, but {target.name} has a context of {limit} "
                             f"positions; {fix}")
    room = limit - prompt_tokens
    if max_new_tokens > room:
        warnings.warn(f"--max-new-tokens {max_new_tokens}: only {room} tokens fit after the {prompt_tokens}-token "
                      f"prompt in {target.name}'s context of {limit}; generating at most {room}", stacklevel=2)
    return min(max_new_tokens, room)


def stop_on_strings(target: Target, stop_strings: Sequence[str]) -> Callable[[list[int]], int | None] | None:
    """A ``stop`` callback for the engine: the shortest prefix whose text contains a stop string."""
    if not stop_strings:
        return None

    def decode(ids: list[int]) -> str:
        return target.tokenizer.decode(ids, skip_special_tokens=True)

    def stop(new_ids: list[int]) -> int | None:
        if not any(s in decode(new_ids) for s in stop_strings):
            return None
        low, high = 1, len(new_ids)  # containment is monotone in the prefix length: bisect it
        while low < high:
            mid = (low + high) // 2
            if any(s in decode(new_ids[:mid]) for s in stop_strings):
                high = mid
            else:
                low = mid + 1
        return low

    return stop


def text_streamer(target: Target, on_text: Callable[[str], None]) -> Callable[[list[int]], None]:
    """An ``on_tokens`` callback for the engine that passes newly committed *text* to ``on_text``."""
    streamed: list[int] = []
    printed = [""]

    def on_tokens(ids: list[int]) -> None:
        # Decode the whole reply each time: byte-level BPE can split a character across tokens.
        streamed.extend(ids)
        text = target.tokenizer.decode(streamed, skip_special_tokens=True)
        if len(text) > len(printed[0]) and not text.endswith("\ufffd"):
            on_text(text[len(printed[0]):])
            printed[0] = text

    return on_tokens


def generate(
    target: Target,
    prompt: str | None = None,
    *,
    images: Sequence[str | Path] = (),
    messages: list[dict] | None = None,
    drafter: Drafter | OpenDrafter | DrafterSpec | str = "none",
    sampling: SamplingConfig = SamplingConfig(),
    policy: LengthPolicy | None = None,
    gamma: int | None = None,
    max_new_tokens: int = 256,
    stop_strings: Sequence[str] = (),
    seed: int | None = None,
    on_text: Callable[[str], None] | None = None,
    skip: SkipPolicy | None = None,
) -> GenerateOutput:
    """Generate a reply to ``prompt`` (or ``messages``) with speculative decoding; ``skip``
    (draft-skip) leaves the drafter out of rounds where drafting is predicted not to pay."""
    if isinstance(drafter, (str, DrafterSpec, OpenDrafter)):
        drafter = make_drafter(drafter, target)
    if policy is None:
        policy = default_policy(drafter, gamma)
    inputs = target.encode(messages, prompt=prompt if messages is None else None, images=images)
    max_new_tokens = fit_context(target, inputs.length, max_new_tokens)
    generator = make_generator(seed, target.device)
    used_seed = generator.initial_seed()
    on_tokens = text_streamer(target, on_text) if on_text is not None else None
    with target.session(drafter.feature_layers) as session:
        result = speculative_generate(
            session, inputs, drafter, sampling=sampling, policy=policy, max_new_tokens=max_new_tokens,
            eos_ids=target.eos_token_ids, stop=stop_on_strings(target, stop_strings), on_tokens=on_tokens,
            generator=generator, skip=skip,
        )
    text = target.tokenizer.decode(result.token_ids, skip_special_tokens=True)
    return GenerateOutput(text=text, result=result, seed=used_seed)
