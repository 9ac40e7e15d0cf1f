"""What a drafter is built with: a recipe's sizes resolved against the target's (``draft_config``), the target's
sizes (``target_dims``, or the recipe's own for ``--dry-run``), and the mask token it may use.

    .venv/bin/python -m pytest -q tests/training/test_recipes.py tests/training/test_memory.py
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minispark.core.defaults import auto_draft_vocab
from minispark.core.errors import MinisparkError, option
from minispark.model.draft_config import DraftConfig
from minispark.training.recipes import TrainConfig, blame


@dataclass(frozen=True)
class TargetDims:
    """The target sizes a draft model is built from (read from a loaded target, or from the recipe)."""

    hidden_size: int
    vocab_size: int
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int | None = None
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-6
    tie_embeddings: bool = False


def check_target_dims(config: TrainConfig, dims: TargetDims) -> None:
    """Refuse a target whose sizes differ from what the recipe declares."""
    for key in ("hidden_size", "vocab_size", "tie_embeddings"):
        want, have = getattr(config, key), getattr(dims, key)
        if want is not None and want != have:
            raise MinisparkError(f"{key}: the recipe says {want}, but the target has {have}")


def recipe_dims(config: TrainConfig) -> TargetDims:
    """Target sizes from the recipe alone (``--dry-run`` loads no model)."""
    for key in ("hidden_size", "vocab_size"):
        if getattr(config, key) is None:
            raise MinisparkError(f"{key}: not set in recipe {config.name!r}; {option('dry_run')} needs it ([target] section)")
    return TargetDims(hidden_size=config.hidden_size, vocab_size=config.vocab_size,
                      tie_embeddings=bool(config.tie_embeddings))


def draft_config(config: TrainConfig, dims: TargetDims, *, feature_layers: list[int] | None = None,
                 mask_token_id: int | None = None, target: str = "unknown", dtype: str = "float32") -> DraftConfig:
    """The :class:`DraftConfig` a recipe trains: recipe values first, then the target's."""
    def pick(key: str, fallback: Any) -> Any:
        value = getattr(config, key)
        value = fallback if value is None else value
        if value is None:
            raise MinisparkError(f"{key}: not set in recipe {config.name!r} and not known from a target "
                                 f"({option('dry_run')} needs it in the recipe)")
        return value

    heads = pick("num_heads", dims.num_heads)
    sizes = dict(
        target=target, hidden_size=dims.hidden_size, vocab_size=dims.vocab_size,
        num_heads=heads, num_kv_heads=pick("num_kv_heads", dims.num_kv_heads),
        head_dim=pick("head_dim", dims.head_dim or dims.hidden_size // heads),
        intermediate_size=pick("intermediate_size", dims.intermediate_size),
        feature_layers=tuple(pick("feature_layers", feature_layers)),
        mask_token_id=pick("mask_token_id", mask_token_id),
        num_layers=config.num_layers, rms_eps=dims.rms_eps, rope_theta=dims.rope_theta,
        block_size=config.block_size, window=config.window, head=config.head, markov_rank=config.markov_rank,
        markov_w1=config.markov_w1, confidence_head=config.confidence_head,
        draft_vocab=auto_draft_vocab(config.draft_vocab, dims.vocab_size), dtype=dtype)
    try:
        return DraftConfig(**sizes)
    except ValueError as exc:  # a recipe size the target's contradict (num_heads vs its key/value heads, ...)
        who = blame(str(exc), f"recipe {config.name!r}", config.overrides)  # the override of a key named, else the recipe
        raise MinisparkError(f"{who}, against the target's sizes where the recipe sets none: {exc}") from None


def target_dims(target: Any) -> TargetDims:
    """Sizes of a loaded :class:`~minispark.target.loading.Target` (its text decoder)."""
    tc = target.text_config
    rope = getattr(tc, "rope_parameters", None) or {}
    theta = rope.get("rope_theta") if isinstance(rope, dict) else None
    return TargetDims(hidden_size=target.hidden_size, vocab_size=target.vocab_size,
                      num_heads=tc.num_attention_heads, num_kv_heads=tc.num_key_value_heads,
                      head_dim=getattr(tc, "head_dim", None), intermediate_size=tc.intermediate_size,
                      rope_theta=float(theta or getattr(tc, "rope_theta", None) or 1_000_000.0),
                      rms_eps=float(getattr(tc, "rms_norm_eps", 1e-6)),
                      tie_embeddings=bool(getattr(target.model.config, "tie_word_embeddings", False)))


def mask_token(config: TrainConfig, target: Any) -> int:
    """The recipe's mask id (checked), else the first id past the tokenizer (an id no text can produce)."""
    if config.mask_token_id is not None:
        check_mask_token(config.mask_token_id, target)
        return config.mask_token_id
    if target.vocab_size > len(target.tokenizer):
        return len(target.tokenizer)
    raise MinisparkError(f"mask_token_id: target {target.name} has no unused token id past its tokenizer; set "
                         "mask_token_id in the recipe to a token the target never generates")


def check_mask_token(token_id: int, target: Any) -> None:
    """Refuse a mask id the target could meet in real text: it must be an unused embedding row past
    the tokenizer, or a special token that is not EOS/BOS/PAD and never appears in chat templates."""
    tokenizer = target.tokenizer
    where = f"mask_token_id={token_id}"
    if not 0 <= token_id < target.vocab_size:
        raise MinisparkError(f"{where}: outside the vocabulary of {target.name} ({target.vocab_size} ids)")
    if token_id >= len(tokenizer):
        return
    reserved = {tokenizer.eos_token_id, tokenizer.bos_token_id, tokenizer.pad_token_id} | set(target.eos_token_ids)
    if token_id in reserved:
        raise MinisparkError(f"{where}: is the target's EOS/BOS/PAD token")
    if token_id not in set(tokenizer.all_special_ids) and token_id not in {
            i for i, t in tokenizer.added_tokens_decoder.items() if t.special}:
        raise MinisparkError(f"{where} ({tokenizer.convert_ids_to_tokens(token_id)!r}) is an ordinary token that "
                             "normal text produces; pick a reserved special token or an id past the tokenizer")
    conversation = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hi, who are you?"},
                    {"role": "assistant", "content": "I am an assistant."}]
    # the prompt format the target is given (its chat template, or a plain transcript without one)
    if token_id in target.encode(conversation, add_generation_prompt=False).input_ids[0].tolist():
        raise MinisparkError(f"{where} ({tokenizer.convert_ids_to_tokens(token_id)!r}) appears in the chat template")
