"""DSpark training losses (design notes §10.3), computed over γ×V logits a few anchors at a time.

For each anchor's block, position k = 1..γ (teacher-forced: the sequential head sees the true
previous tokens ``[anchor, x*_1..x*_{γ−1}]``):

    L_ce   = − Σ w_k m_k log p_d(x*_k)                              α_ce   = 0.1
    L_tv   =   Σ w_k m_k ‖p_d − p_t‖₁                                α_tv   = 0.9
    L_conf = − Σ w_k m_k [c*_k log c_k + (1−c*_k) log(1−c_k)]        α_conf = 1.0

with w_k = exp(−(k−1)/loss_decay_gamma), m_k the contiguous-valid-prefix mask (a block is
supervised up to its first invalid position), p_t = softmax(lm_head(final hidden)) from the frozen
lm_head at T = 1, and the confidence label c*_k = 1 − ½‖p_d − p_t‖₁ (detached). Each term is
normalised by Σ w_k m_k over the whole batch, so chunking never changes the loss.

Two optional variants (weight 0 by default):

    L_kl  =   Σ w_k m_k KL(p_t ‖ p_d)                                α_kl   (soft-label CE)
    L_tau = − 1/B Σ_blocks Σ_k m_k Π_{i≤k} a_i,   a_i = 1 − ½‖p_d − p_t‖₁_i    α_tau

L_tau is minus the expected number of accepted drafts per block at T = 1 (B supervised blocks):
it weights position j by how likely the round reaches it, W_j = Π_{i<j} a_i · Σ_{k≥j} m_k Π_{j<i≤k} a_i,
instead of the fixed w_j, so while early positions are rarely accepted the later ones cost little.

:func:`reference_losses` is the definition (plain autograd over all logits at once).
:func:`chunked_backward` is what the trainer runs: for ``chunk`` anchors at a time it builds the
(chunk, γ, V) logits, writes their gradient in closed form,

    ∂L/∂z_v = a_ce (p_v − 1[v = x*]) + (a_tv + ½ α_tau W_k / B) p_v (s_v − Σ_u p_u s_u) + a_kl (p_v − p_t,v),

s = sign(p_d − p_t), a_· = α_· w_k m_k / Σ w m (W detached: the product rule through every a_i of
the block is exactly this sum), backpropagates that chunk into the heads and the chunk's hidden
states, and frees it; the backbone is then backpropagated once from the collected hidden
gradient. At most ``LIVE_VOCAB_TENSORS`` (chunk, γ, V) fp32 tensors exist at a time.

With a draft vocabulary S (``DraftConfig.draft_vocab``) every V above is N = |S|: p_t is the
target's distribution restricted to S and renormalised (its frozen lm_head rows are all the model
holds), and L_ce skips labels outside S. That keeps the optimum honest: with p_d supported on S,
‖p_d − p_t‖₁ = Σ_S |p_d − p_t| + p_t(∉S), and p_d = p_t|S attains its minimum, so matching the
renormalised target is exactly minimising the true TV. The reported acceptance proxy ignores
p_t(∉S) (optimistic by at most that mass); the held-out proxy (``heldout.py``) uses the full p_t.

    .venv/bin/python -m pytest -q tests/training/test_losses.py
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from minispark.model.draft_model import DraftModel, TrainForward

#: Upper bound on the (chunk, γ, V) float32 tensors alive at once in :func:`chunked_backward`
#: (logits, p_d, p_t, p_d − p_t / its gradient, one temporary); the memory estimator uses it.
LIVE_VOCAB_TENSORS = 5


@dataclass(frozen=True)
class LossWeights:
    alpha_ce: float = 0.1
    alpha_tv: float = 0.9
    alpha_conf: float = 1.0
    decay_gamma: float = 4.0
    alpha_kl: float = 0.0
    alpha_tau: float = 0.0


def position_weights(gamma: int, decay_gamma: float, device: torch.device | str = "cpu") -> torch.Tensor:
    """(γ,) w_k = exp(−(k−1)/decay_gamma) for k = 1..γ."""
    return torch.exp(-torch.arange(gamma, device=device, dtype=torch.float32) / decay_gamma)


def prefix_mask(valid: torch.Tensor) -> torch.Tensor:
    """(..., γ) bool: True up to (not including) the first invalid position of each block."""
    return valid.long().cumprod(dim=-1).bool()


def reach_weights(accept: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(..., γ) W_j = −∂L_tau·B/∂a_j: Π_{i<j} a_i · S_j with S_j = m_j (1 + a_{j+1} S_{j+1}) (no division,
    so an a_i of 0 is fine). ``accept`` and ``mask`` are (..., γ); the result is detached."""
    a, m = accept.detach().float(), mask.float()
    before = torch.cumprod(torch.cat([torch.ones_like(a[..., :1]), a[..., :-1]], -1), -1)  # Π_{i<j} a_i
    after = torch.zeros_like(a)
    running = torch.zeros_like(a[..., 0])
    for j in range(a.shape[-1] - 1, -1, -1):  # γ steps, back to front
        running = m[..., j] * (1.0 + (a[..., j + 1] * running if j + 1 < a.shape[-1] else 0.0))
        after[..., j] = running
    return before * after


@dataclass
class LossStats:
    """Loss terms of one batch (already normalised) and the acceptance proxy per position.

    acceptance_sum / counts: (γ,) Σ over supervised blocks of 1 − ½‖p_d − p_t‖₁, and how many.
    tau_sum: Σ over blocks of 1 + Σ_k Π_{i≤k} (1 − ½‖p_d − p_t‖₁)_i over the supervised prefix.
    """

    ce: float = 0.0
    tv: float = 0.0
    conf: float = 0.0
    kl: float = 0.0
    tau_term: float = 0.0
    total: float = 0.0
    positions: int = 0
    blocks: int = 0
    acceptance_sum: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    counts: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    tau_sum: float = 0.0

    @property
    def acceptance(self) -> list[float]:
        """Mean 1 − ½‖p_d − p_t‖₁ per block position (NaN where nothing was supervised)."""
        return [s / c if c else math.nan for s, c in zip(self.acceptance_sum.tolist(), self.counts.tolist())]

    @property
    def tau(self) -> float:
        """Mean proxy of the accepted length per round (bonus token included)."""
        return self.tau_sum / self.blocks if self.blocks else math.nan


def _supervised(valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mask m_k of every block, flattened to (B·A, γ), and the indices of the blocks with
    anything supervised (padding anchors have nothing)."""
    mask = prefix_mask(valid).reshape(-1, valid.shape[-1])  # (B·A, γ)
    return mask[:, 0].nonzero().squeeze(-1), mask


def _acceptance(accept: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-position Σ of the acceptance proxy ``accept`` (c, γ) under ``mask`` (c, γ), the per-position
    counts, and Σ over blocks of 1 + Σ_k Π_{i≤k} accept_i (the τ proxy), all on the device."""
    m = mask.float()
    return (accept * m).sum(0), m.sum(0), (1.0 + (torch.cumprod(accept, -1) * m).sum(-1)).sum()


def _stats(sums: torch.Tensor, acceptance: list[torch.Tensor], blocks: int, positions: int,
           weights: LossWeights) -> LossStats:
    """LossStats from device accumulators (one host sync per step)."""
    ce, tv, conf, kl, tau_term = sums.tolist()
    acc, counts, tau = (x.detach().cpu() for x in acceptance)
    total = (weights.alpha_ce * ce + weights.alpha_tv * tv + weights.alpha_conf * conf + weights.alpha_kl * kl
             + weights.alpha_tau * tau_term)
    return LossStats(ce=ce, tv=tv, conf=conf, kl=kl, tau_term=tau_term, total=total, positions=positions,
                     blocks=blocks, acceptance_sum=acc.float(), counts=counts.float(), tau_sum=float(tau))


def _draft_labels(model: DraftModel, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels as indices into the drafter's output space (clamped) and a float mask of those in it."""
    index = model.draft_index(labels)
    size = model.config.output_size
    return index.clamp_max(size - 1), (index < size).float()


def reference_losses(model: DraftModel, fwd: TrainForward, target_hidden: torch.Tensor, valid: torch.Tensor,
                     weights: LossWeights) -> tuple[torch.Tensor, LossStats]:
    """The §10.3 loss over all logits at once (differentiable total); the definition the chunked
    path must reproduce. ``target_hidden`` (B, A, γ, d) cached final hidden, ``valid`` (B, A, γ)."""
    gamma = fwd.hidden.shape[-2]
    m = prefix_mask(valid).float()  # (B, A, γ)
    wm = position_weights(gamma, weights.decay_gamma, m.device) * m
    denom = wm.sum().clamp_min(1e-12)
    logp = model.head_logits(fwd.hidden, fwd.prev_tokens).float().log_softmax(-1)  # (B, A, γ, V)
    p_d = logp.exp()
    with torch.no_grad():
        p_t = model.lm_head(target_hidden.to(model.lm_head.weight.dtype)).float().softmax(-1)
    labels, in_vocab = _draft_labels(model, fwd.labels)
    nll = -logp.gather(-1, labels[..., None]).squeeze(-1) * in_vocab  # (B, A, γ)
    l1 = (p_d - p_t).abs().sum(-1)
    ce, tv = (wm * nll).sum() / denom, (wm * l1).sum() / denom
    kl = (wm * (torch.xlogy(p_t, p_t) - p_t * logp).sum(-1)).sum() / denom
    live, mask = _supervised(valid)
    a = (1.0 - 0.5 * l1).reshape(-1, gamma)  # differentiable: autograd through every a_i is the definition
    tau_term = -(torch.cumprod(a, -1) * mask.float()).sum() / max(1, live.numel())
    accept = 1.0 - 0.5 * l1.detach()
    conf = torch.zeros((), device=ce.device)
    if model.confidence_proj is not None:
        bce = F.binary_cross_entropy_with_logits(model.confidence_logits(fwd.hidden, fwd.prev_tokens), accept,
                                                 reduction="none")
        conf = (wm * bce).sum() / denom
    total = (weights.alpha_ce * ce + weights.alpha_tv * tv + weights.alpha_conf * conf + weights.alpha_kl * kl
             + weights.alpha_tau * tau_term)
    acceptance = _acceptance(accept.reshape(-1, gamma)[live], mask[live])
    sums = torch.stack([ce, tv, conf, kl, tau_term]).detach().double()
    return total, _stats(sums, list(acceptance), live.numel(), int(m.sum()), weights)


def chunked_backward(model: DraftModel, fwd: TrainForward, target_hidden: torch.Tensor, valid: torch.Tensor,
                     weights: LossWeights, chunk: int, autocast: contextlib.AbstractContextManager | None = None,
                     ) -> LossStats:
    """Accumulate ∂L/∂θ into ``.grad`` of every trainable parameter, ``chunk`` anchors' logits at a time.

    ``fwd`` is the output of :meth:`DraftModel.forward_train` with its graph; the backbone is
    backpropagated once at the end. Returns the (normalised) loss terms for logging.
    """
    autocast = autocast or contextlib.nullcontext()
    hidden = fwd.hidden.detach()
    gamma, d = hidden.shape[-2:]
    live, mask = _supervised(valid)
    w = position_weights(gamma, weights.decay_gamma, hidden.device)
    wm = w * mask.float()  # (B·A, γ)
    denom = float(wm.sum().clamp_min(1e-12))
    flat_hidden = hidden.reshape(-1, gamma, d)
    flat = [t.reshape(-1, gamma, *t.shape[3:]) for t in (fwd.prev_tokens, fwd.labels, target_hidden)]
    hidden_grad = torch.zeros_like(flat_hidden)  # (B·A, γ, d)
    sums = torch.zeros(5, dtype=torch.float64, device=hidden.device)  # ce, tv, conf, kl, tau_term
    acceptance = [torch.zeros(gamma, device=hidden.device), torch.zeros(gamma, device=hidden.device),
                  torch.zeros((), device=hidden.device)]
    for start in range(0, live.numel(), chunk):
        idx = live[start:start + chunk]
        h = flat_hidden[idx].requires_grad_()  # (c, γ, d), a leaf: its .grad is this chunk's share
        prev, labels, th = (t[idx] for t in flat)
        chunk_sums, accept = _chunk_backward(model, h, prev, labels, th, wm[idx] / denom, mask[idx],
                                             1.0 / max(1, live.numel()), weights, autocast)
        sums += chunk_sums
        hidden_grad[idx] = h.grad.to(hidden_grad.dtype)
        for running, part in zip(acceptance, _acceptance(accept, mask[idx])):
            running += part
    if live.numel():
        fwd.hidden.backward(hidden_grad.view_as(fwd.hidden))
    return _stats(sums, acceptance, live.numel(), int(mask.sum()), weights)


def _chunk_backward(model: DraftModel, h: torch.Tensor, prev: torch.Tensor, labels: torch.Tensor,
                    target_hidden: torch.Tensor, scale: torch.Tensor, mask: torch.Tensor, per_block: float,
                    weights: LossWeights, autocast: contextlib.AbstractContextManager,
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Losses of one chunk of c blocks and their backward; ``scale`` (c, γ) = w_k m_k / Σ w m,
    ``mask`` (c, γ) the m_k, ``per_block`` = 1/B.

    Returns the chunk's (ce, tv, conf, kl, tau_term) sums (already scaled) and the acceptance proxy (c, γ).
    """
    with autocast:
        logits = model.head_logits(h, prev)  # (c, γ, V), graph through lm_head(h) and the Markov bias
        conf_logits = model.confidence_logits(h, prev) if model.confidence_proj is not None else None
    with torch.no_grad():
        p_t = model.lm_head(target_hidden.to(model.lm_head.weight.dtype)).float().softmax(-1)  # (c, γ, V)
        logp = logits.float().log_softmax(-1)
        labels, in_vocab = _draft_labels(model, labels)
        ce_scale = scale * in_vocab  # labels outside a draft vocabulary have no CE term
        nll = -logp.gather(-1, labels[..., None]).squeeze(-1)  # (c, γ)
        kl = torch.zeros_like(nll)
        if weights.alpha_kl:  # KL(p_t ‖ p_d) = Σ p_t log p_t − p_t log p_d; one temporary
            kl = torch.xlogy(p_t, p_t).addcmul_(p_t, logp, value=-1.0).sum(-1)  # (c, γ)
        p_d = logp.exp_()  # reuses logp's memory
        del logp
        diff = p_d - p_t
        del p_t
        l1 = diff.abs().sum(-1)  # (c, γ) ‖p_d − p_t‖₁
        accept = 1.0 - 0.5 * l1
        reach = reach_weights(accept, mask)  # (c, γ) W_k
        # ∂KL(p_t ‖ p_d)/∂z = p_d − p_t: taken from diff before it becomes the sign
        kl_grad = diff * (weights.alpha_kl * scale)[..., None] if weights.alpha_kl else None
        sign = diff.sign_()
        # ∂‖p − q‖₁/∂z = p ⊙ (s − ⟨p, s⟩);  ∂(−log p_y)/∂z = p − onehot(y);  ∂a_k/∂z = −½ ∂‖p − q‖₁/∂z
        p_dot_s = torch.einsum("cgv,cgv->cg", p_d, sign)[..., None]  # (c, γ, 1)
        tv_scale = weights.alpha_tv * scale + (0.5 * weights.alpha_tau * per_block) * reach
        grad = sign.sub_(p_dot_s).mul_(p_d).mul_(tv_scale[..., None])
        if kl_grad is not None:
            grad.add_(kl_grad)
            del kl_grad
        grad.addcmul_(p_d, (weights.alpha_ce * ce_scale)[..., None])
        grad.scatter_add_(-1, labels[..., None], -(weights.alpha_ce * ce_scale)[..., None])
        del p_d, sign
        tau_term = -(torch.cumprod(accept, -1) * mask.float()).sum() * per_block
    roots, grads = [logits], [grad.to(logits.dtype)]
    conf = torch.zeros((), device=h.device)
    if conf_logits is not None:
        bce = F.binary_cross_entropy_with_logits(conf_logits, accept, reduction="none")
        conf = (scale * bce).sum()
        roots.append(weights.alpha_conf * conf)
        grads.append(None)
    del grad
    torch.autograd.backward(roots, grads)
    sums = [(ce_scale * nll).sum(), (scale * l1).sum(), conf.detach(), (scale * kl).sum(), tau_term]
    return torch.stack(sums).double(), accept
