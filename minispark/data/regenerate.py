"""Regenerate answers with the target: batched sampling, each sample with its own seeded generator.

Drafts are trained on the target's own distribution (design notes §10.1), so the cache replaces
every reference answer by one the target samples itself. Prompts are left-padded into batches and
run through Hugging Face ``generate`` (which handles the KV cache, padding and M-RoPE positions of
VLMs); the token choice is taken over by :class:`RowSampler`, which draws row ``i`` from
``minispark.target.sampling.probabilities`` with generator ``i``. A sample's answer therefore depends
only on its own seed and on its logits; batching can change logits only by floating-point noise,
so the batch composition is fixed by the caller (see ``cache.py``: shard, then prompt length).

The drafter's training features are captured during generation itself (:class:`FeatureRecorder`):
every token the target reads passes through the hooked layers once, so no second full-sequence
forward is needed. The one row generation never computes is the last token's (nothing reads it);
training never uses that row either (an anchor needs a label after it).

    .venv/bin/python -m pytest -q tests/data/test_cache.py -k regenerate
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

from minispark.core.errors import MinisparkError, option
from minispark.target.sampling import SamplingConfig, make_generator, probabilities, sample
from minispark.target.loading import Target
from minispark.target.session import PromptInputs

# Per-token model inputs that must be padded with the prompt; every other tensor in
# ``PromptInputs.model_kwargs`` (pixel_values, image_grid_thw, ...) is concatenated along dim 0.
PER_TOKEN_KWARGS = ("mm_token_type_ids", "token_type_ids")


@dataclass
class Answer:
    """One regenerated answer: ``tokens`` (n,) long, up to and including the first EOS.

    With capture: ``features`` (P + n, m, d) raw outputs of the captured layers and ``final_hidden``
    (P + n, d) the final-norm hidden for prompt + answer, float32 on the CPU; the last row is zero
    (the last token is never fed to the target).
    """

    tokens: torch.Tensor
    stopped_at_eos: bool
    features: torch.Tensor | None = None
    final_hidden: torch.Tensor | None = None


class FeatureRecorder:
    """Forward hooks that keep every call's outputs of the captured layers and the final norm.

    ``generate`` calls the model once for the (left-padded) prompt and once per new token; each
    call appends (B, t, m, d) layer features and (B, t, d) final hidden. Use as a context manager.
    """

    def __init__(self, target: Target, layers: Sequence[int]) -> None:
        self.layers = list(layers)
        self.features: list[torch.Tensor] = []
        self.final: list[torch.Tensor] = []
        self._pending: dict[int, torch.Tensor] = {}
        self._hooks = [target.decoder.layers[i].register_forward_hook(self._layer_hook(i)) for i in self.layers]
        self._hooks.append(target.final_norm.register_forward_hook(self._final_hook))

    def _layer_hook(self, index: int):
        def hook(_module: torch.nn.Module, _inputs: object, output: object) -> None:
            self._pending[index] = (output[0] if isinstance(output, tuple) else output).float().cpu()
        return hook

    def _final_hook(self, _module: torch.nn.Module, _inputs: object, output: torch.Tensor) -> None:
        # The final norm runs after every captured layer: one model call is complete.
        self.features.append(torch.stack([self._pending.pop(i) for i in self.layers], dim=2))  # (B, t, m, d)
        self.final.append(output.float().cpu())  # (B, t, d)

    def __enter__(self) -> "FeatureRecorder":
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()

    def row(self, row: int, prompt_len: int, answer_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Row ``row``'s (P + n, m, d) features and (P + n, d) final hidden, left padding removed."""
        fed = answer_len - 1  # answer tokens the target has read (all but the last)
        feats = [self.features[0][row, -prompt_len:]] + [f[row] for f in self.features[1:1 + fed]]
        finals = [self.final[0][row, -prompt_len:]] + [f[row] for f in self.final[1:1 + fed]]
        features, final = torch.cat(feats), torch.cat(finals)  # (P + n − 1, m, d), (P + n − 1, d)
        features = torch.cat([features, features.new_zeros(1, *features.shape[1:])])  # (P + n, m, d)
        return features, torch.cat([final, final.new_zeros(1, final.shape[-1])])  # (P + n, d)


def check_answer_room(target: Target, max_new_tokens: int) -> None:
    """Refuse a ``--max-new-tokens`` the target's context cannot hold (an answer follows its prompt
    in the same positions): one line, before buffers of that length are allocated."""
    limit = target.context_limit
    if limit is not None and max_new_tokens >= limit:
        raise MinisparkError(f"{option('max_new_tokens')} {max_new_tokens}: {target.name} has a context of {limit} "
                             "positions, prompt and answer together; give fewer")


def sample_seed(seed: int, index: int, stream: int) -> int:
    """A 64-bit seed for sample ``index`` (stream 0: answer sampling, 1: anchors).

    Derived from (seed, index) alone, so any sample can be regenerated without replaying the ones
    before it — what makes an interrupted cache build resume to identical bytes.
    """
    return int(np.random.SeedSequence([seed, index, stream]).generate_state(1, np.uint64)[0])


class RowSampler(LogitsProcessor):
    """Draw each row's next token with that row's generator, then force ``generate`` to take it."""

    def __init__(self, config: SamplingConfig, generators: Sequence[torch.Generator]) -> None:
        self.config = config
        self.generators = list(generators)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.config.greedy:
            return scores  # generate's argmax is the greedy choice
        probs = probabilities(scores.float(), self.config)  # (B, V)
        tokens = torch.stack([sample(probs[i], g) for i, g in enumerate(self.generators)])  # (B,)
        forced = torch.full_like(scores, float("-inf"))
        forced[torch.arange(len(tokens), device=scores.device), tokens] = 0.0
        return forced


def collate(prompts: Sequence[PromptInputs], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-pad a batch of prompts into ``generate`` inputs (input_ids, attention_mask, model kwargs)."""
    batch, width = len(prompts), max(p.length for p in prompts)
    device = prompts[0].input_ids.device
    input_ids = torch.full((batch, width), pad_id, dtype=torch.long, device=device)  # (B, P_max)
    attention_mask = torch.zeros((batch, width), dtype=torch.long, device=device)  # (B, P_max)
    per_token: dict[str, torch.Tensor] = {}
    stacked: dict[str, list[torch.Tensor]] = {}
    for row, prompt in enumerate(prompts):
        start = width - prompt.length
        input_ids[row, start:] = prompt.input_ids[0]
        attention_mask[row, start:] = 1
        for key, value in prompt.model_kwargs.items():
            if key in PER_TOKEN_KWARGS:
                if key not in per_token:
                    per_token[key] = torch.zeros((batch, width), dtype=value.dtype, device=device)
                per_token[key][row, start:] = value[0]
            else:
                stacked.setdefault(key, []).append(value)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, **per_token}
    inputs |= {key: torch.cat(values, dim=0) for key, values in stacked.items()}  # images in prompt order
    return inputs


@contextlib.contextmanager
def without_checkpoint_defaults(model: torch.nn.Module) -> Iterator[None]:
    """Run ``model.generate`` with none of the checkpoint's generation defaults.

    transformers 5.x fills every field a passed ``GenerationConfig`` leaves unset from
    ``model.generation_config`` (Qwen's sets ``repetition_penalty=1.05``, top-k, ...), so a fresh
    config alone does not drop them. Answers must follow the plain target distribution the drafter
    is verified against (and the sampling the manifest records), so the checkpoint's config is swapped
    for a blank one, keeping only its special-token ids, while ``generate`` runs.
    """
    saved = getattr(model, "generation_config", None)
    if saved is None:
        yield
        return
    tokens = {key: getattr(saved, key, None) for key in ("bos_token_id", "eos_token_id", "pad_token_id",
                                                         "decoder_start_token_id")}
    model.generation_config = GenerationConfig(**{k: v for k, v in tokens.items() if v is not None})
    try:
        yield
    finally:
        model.generation_config = saved


@torch.no_grad()
def regenerate(target: Target, prompts: Sequence[PromptInputs], seeds: Sequence[int],
               config: SamplingConfig, max_new_tokens: int, capture_layers: Sequence[int] | None = None
               ) -> list[Answer]:
    """Sample one answer per prompt in a single batched ``generate`` call; stop at EOS or the cap.

    With ``capture_layers`` every answer also carries its features (see :class:`Answer`).
    """
    if max_new_tokens < 1:
        raise ValueError(f"{option('max_new_tokens')} must be >= 1, got {max_new_tokens}")
    eos = sorted(target.eos_token_ids)
    pad_id = target.tokenizer.pad_token_id
    pad_id = eos[0] if pad_id is None else pad_id
    inputs = collate(prompts, pad_id)
    generators = [make_generator(seed, target.device) for seed in seeds]
    generation = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos,
                                  pad_token_id=pad_id)
    recorder = FeatureRecorder(target, capture_layers) if capture_layers is not None else contextlib.nullcontext()
    with recorder, without_checkpoint_defaults(target.model):
        sequences = target.model.generate(
            **inputs, generation_config=generation,
            logits_processor=LogitsProcessorList([RowSampler(config, generators)]),  # does the sampling
        )
    new = sequences[:, inputs["input_ids"].shape[1]:].cpu()  # (B, T) with T <= max_new_tokens
    answers = []
    for i, row in enumerate(new):
        hits = torch.isin(row, torch.tensor(eos)).nonzero()
        end = int(hits[0]) + 1 if len(hits) else len(row)
        answer = Answer(tokens=row[:end].clone(), stopped_at_eos=bool(len(hits)))
        if capture_layers is not None:
            answer.features, answer.final_hidden = recorder.row(i, prompts[i].length, end)
        answers.append(answer)
    return answers
