"""The acceptance rules that make speculative decoding lossless.

Greedy (T = 0): accept draft tokens while they equal the target's argmax, then emit the target's
argmax at the first mismatch (or after the last draft: the bonus token). The output is exactly
target-only greedy decoding.

Sampling (T > 0), Leviathan et al. / Chen et al.: accept x_k with probability
min(1, p_t(x_k) / p_d(x_k)) left to right; at the first rejection emit a sample from the residual
norm(max(0, p_t − p_d)); if every draft survives, emit a bonus token from p_t. The emitted tokens
are then distributed exactly as tokens sampled from p_t one at a time. (The design notes' §11.1
step 5, "sample(p_t)" at a rejection, is *not* lossless: tests/serving/test_accept.py shows it fails.)

    python -m pytest tests/serving/test_accept.py -q
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


def accept_tree_greedy(tokens: list[int], parents: list[int], target_logits: torch.Tensor) -> tuple[list[int], int]:
    """Greedy verification of a tree (``draft_tree.DraftTree``'s ``tokens``/``parents``, node 0 the anchor;
    ``target_logits`` (n, V), row i after node i's path): from the anchor, descend into the child whose token
    is the target's argmax while there is one. → (accepted nodes in depth order, the target's next token).
    Exactly target-only greedy decoding: every emitted token is the argmax after the tokens before it."""
    best = target_logits.argmax(dim=-1).tolist()  # (n,)
    children: dict[int, dict[int, int]] = {}
    for node in range(1, len(tokens)):
        children.setdefault(parents[node], {}).setdefault(tokens[node], node)
    node, path = 0, []
    while (child := children.get(node, {}).get(best[node])) is not None:
        path.append(child)
        node = child
    return path, int(best[node])


def accept_tree_sampling(tokens: list[int], parents: list[int], q: list[torch.Tensor | None],
                         target_probs: torch.Tensor, generator: torch.Generator | None = None,
                         residual: bool = True) -> tuple[list[int], int]:
    """Multi-candidate speculative sampling over a tree (recursive rejection sampling).

    At a node with target distribution p, its children x_1..x_m are tried in the order they were drawn:
    x_j is accepted with probability min(1, p(x_j) / q_j(x_j)), where q_j is the distribution x_j was drawn
    from given the siblings drawn before it (None: one-hot, a deterministic token); on a rejection p becomes
    the residual norm(max(0, p − q_j)) and the next child is tried. An accepted child is descended into
    with the target's distribution after it; when no child is accepted, a token is drawn from the residual.

    Why it is exact: one step emits min(q_j, p)(y) + Σ max(0, p − q_j) · residual(y) = p(y), so by induction
    over the children (each q_j may depend on the siblings drawn before it, never on the verification) the
    token emitted at a node is distributed as p, and the descent repeats that with the target's own
    conditional after it. ``target_probs`` (n, V): row i after node i's path, temperature/top-k/top-p
    applied. ``residual=False`` draws from the unchanged p after a rejection: wrong, the negative control.
    → (accepted nodes in depth order, the next token)."""
    children: dict[int, list[int]] = {}
    for node in range(1, len(tokens)):
        children.setdefault(parents[node], []).append(node)
    node, path = 0, []
    while True:
        p = target_probs[node]
        accepted = None
        for child in children.get(node, []):
            x = tokens[child]
            ratio = p[x] if q[child] is None else p[x] / q[child][x]
            u = torch.rand((), generator=generator, device=p.device)
            if u < ratio:
                accepted = child
                break
            if residual:
                leftover = p.clone() if q[child] is None else (p - q[child]).clamp_min(0.0)
                if q[child] is None:
                    leftover[x] = 0.0
                mass = leftover.sum()
                if mass > 0:  # mass 0: p equals q_j, where a rejection has probability 0 (rounding only)
                    p = leftover / mass
        if accepted is None:
            return path, int(sample(p, generator))
        path.append(accepted)
        node = accepted
