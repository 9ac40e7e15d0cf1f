"""Sampling configuration and the logits → distribution transform shared by target and drafters.

Speculative sampling is lossless only if the target distribution used to accept draft tokens is the
same one the plain sampler would draw from. Every place that turns logits into probabilities
(the verifier, the bonus/residual sampler, every drafter) goes through :func:`probabilities` so that
temperature, top-k and top-p are applied identically.

    python -c "from minispark.target.sampling import *; import torch; print(probabilities(torch.randn(2, 8), SamplingConfig(1.0, top_k=3)))"
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

from minispark.core import checks
from minispark.core.defaults import DEFAULT_TEMPERATURE


@dataclass(frozen=True)
class SamplingConfig:
    """How tokens are drawn. ``temperature == 0`` means greedy (argmax) decoding.

    ``top_k == 0`` and ``top_p == 1.0`` disable those filters.
    """

    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        checks.sampling(self.temperature, self.top_p, self.top_k)  # the one home of these ranges

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def filter_logits(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """Apply temperature, then top-k, then top-p to ``logits`` (..., V); removed entries become -inf.

    Greedy configs are returned unscaled (only the argmax matters).
    """
    if config.greedy:
        return logits
    logits = logits.float() / config.temperature
    vocab = logits.shape[-1]
    if 0 < config.top_k < vocab:
        kth = torch.topk(logits, config.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if config.top_p < 1.0:
        # Sort only the entries still finite (top-k leaves few): same order and masses as a full sort,
        # without sorting the whole vocabulary every step.
        kept = int(torch.isfinite(logits).sum(dim=-1).max())
        if kept * 8 < vocab:
            sorted_logits, order = torch.topk(logits, kept, dim=-1, sorted=True)  # (..., kept) descending
        else:
            sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (..., V)
        sorted_probs = sorted_logits.softmax(dim=-1)
        # Keep the smallest prefix whose mass reaches top_p: drop a token when the mass strictly
        # before it already reaches top_p (so the most likely token is always kept).
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = mass_before >= config.top_p
        drop_sorted[..., 0] = False  # a top_p below float32's least value compares as 0 (mass_before[0] is 0)
        drop = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def probabilities(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """The distribution tokens are drawn from: (..., V) float32 summing to 1.

    For greedy configs this is the one-hot of the argmax, so greedy and sampling share one
    acceptance code path where convenient.
    """
    if config.greedy:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).float()
    return filter_logits(logits, config).softmax(dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row of ``probs`` (..., V) (unnormalised is fine) → (...,) long.

    By inverse CDF: one uniform per row against the row's cumulative sum, in float64 so a zero-probability
    token adds exactly nothing and is never drawn (the first index whose cdf exceeds u has mass). A tenth of
    ``multinomial``'s time over a 49k vocabulary on a CPU, which a tree round at T > 0 pays per drafted node."""
    flat = probs.reshape(-1, probs.shape[-1])  # (N, V)
    cdf = flat.double().cumsum(dim=-1)  # (N, V)
    u = torch.rand(flat.shape[0], 1, generator=generator, device=flat.device, dtype=torch.float64) * cdf[:, -1:]
    drawn = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=flat.shape[-1] - 1)  # (N,)
    return drawn.reshape(probs.shape[:-1])


def draw_rows(logits: torch.Tensor, config: SamplingConfig, generators: list[torch.Generator]) -> torch.Tensor:
    """One token per row of ``logits`` (B, V) from :func:`probabilities`, row i drawn with ``generators[i]``.

    The same law as :func:`sample`, by inverse CDF over only the few tokens top-k/top-p keep (``multinomial``'s
    pass over the whole vocabulary was a seventh of a batch-64 regeneration step on a 2-core CPU), one uniform
    per row from that row's own generator. Greedy configs return the argmax.
    """
    if config.greedy:
        return logits.argmax(dim=-1)
    filtered = filter_logits(logits, config)  # (B, V), -inf outside the kept set
    kept = int(torch.isfinite(filtered).sum(dim=-1).max())
    values, order = torch.topk(filtered, kept, dim=-1)  # (B, K) the kept tokens (and -inf fillers)
    cdf = values.softmax(dim=-1).cumsum(dim=-1)  # (B, K)
    u = torch.stack([torch.rand((), generator=g, device=g.device) for g in generators]).to(cdf.device)  # (B,)
    pick = (cdf < (u * cdf[:, -1]).unsqueeze(-1)).sum(dim=-1).clamp(max=kept - 1)  # (B,) first cdf ≥ u
    return order.gather(-1, pick.unsqueeze(-1)).squeeze(-1)


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator:
    """A seeded generator; ``None`` draws a fresh seed in the range ``--seed`` takes (reported, so a sampled run
    can be replayed: torch's own fresh seeds are 64-bit, which ``--seed`` refused)."""
    generator = torch.Generator(device=device)
    generator.manual_seed(secrets.randbelow(checks.MAX_SEED + 1) if seed is None else seed)
    return generator
