"""The acceptance rules that make speculative decoding lossless.

Greedy (T = 0): accept draft tokens while they equal the target's argmax, then emit the target's
argmax at the first mismatch (or after the last draft: the bonus token). The output is exactly
target-only greedy decoding.

Sampling (T > 0), Leviathan et al. / Chen et al.: accept x_k with probability
min(1, p_t(x_k) / p_d(x_k)) left to right; at the first rejection emit a sample from the residual
norm(max(0, p_t − p_d)); if every draft survives, emit a bonus token from p_t. The emitted tokens
are then distributed exactly as tokens sampled from p_t one at a time. (The design notes' §11.1
step 5, "sample(p_t)" at a rejection, is *not* lossless: tests/test_accept.py shows it fails.)

    python -m pytest tests/test_accept.py -q
"""

from __future__ import annotations

import torch

from minispark.target.sampling import SamplingConfig, probabilities, sample


def leading_true(mask: torch.Tensor) -> int:
    """Number of leading True values of a 1D bool tensor."""
    return int(mask.long().cumprod(dim=0).sum()) if mask.numel() else 0


def accept_greedy(draft: torch.Tensor, target_logits: torch.Tensor) -> tuple[int, int]:
    """Greedy verification. ``draft`` (ℓ,), ``target_logits`` (ℓ+1, V) → (accepted count, next token)."""
    target_tokens = target_logits.argmax(dim=-1)  # (ℓ+1,)
    accepted = leading_true(draft == target_tokens[: draft.numel()])
    return accepted, int(target_tokens[accepted])


def accept_sampling(
    draft: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    residual: bool = True,
) -> tuple[int, int]:
    """Speculative rejection sampling.

    draft        (ℓ,) draft tokens x_1..x_ℓ
    draft_probs  (ℓ, V) the exact p_d each x_k was drawn from; None = one-hot (deterministic drafter)
    target_probs (ℓ+1, V) p_t after temperature/top-k/top-p; row k predicts x_{k+1}
    residual     False reproduces the (wrong) "sample p_t at a rejection" rule, for negative controls
    """
    n = draft.numel()
    rows = torch.arange(n, device=draft.device)
    p_target = target_probs[rows, draft]  # (ℓ,)
    p_draft = draft_probs[rows, draft] if draft_probs is not None else torch.ones_like(p_target)
    ratio = p_target / p_draft
    uniforms = torch.rand(n, generator=generator, device=draft.device)
    accepted = leading_true(uniforms < ratio)
    if accepted == n:
        return accepted, int(sample(target_probs[n], generator))
    emit_from = target_probs[accepted]
    if residual:
        if draft_probs is not None:
            leftover = (target_probs[accepted] - draft_probs[accepted]).clamp_min(0.0)
        else:
            leftover = target_probs[accepted].clone()
            leftover[draft[accepted]] = 0.0
        mass = leftover.sum()
        # mass == 0 means p_t == p_d, where a rejection has probability 0; guard rounding only.
        if mass > 0:
            emit_from = leftover / mass
    return accepted, int(sample(emit_from, generator))


def accept(
    draft: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """Dispatch on the sampling config: greedy or rejection sampling."""
    if sampling.greedy:
        return accept_greedy(draft, target_logits)
    return accept_sampling(draft, draft_probs, probabilities(target_logits, sampling), generator)
