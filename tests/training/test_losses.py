"""§10.3 losses: the chunked closed-form backward equals plain autograd over all logits, for every
head and chunk size; weights, masks, the TV label and p_t behave as specified; chunking really
bounds the largest vocabulary-sized tensor. Tiny random models on CPU, seeded.

    .venv/bin/python -m pytest -q tests/training/test_losses.py
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from minispark.model.draft_model import DraftConfig, DraftModel
from minispark.training.losses import LossWeights, chunked_backward, position_weights, prefix_mask, reference_losses

D, V, GAMMA, M = 32, 101, 4, 2
WEIGHTS = LossWeights()


def make_model(head: str = "vanilla", confidence: bool = True, seed: int = 0, draft_vocab: int = 0) -> DraftModel:
    config = DraftConfig(target="t@0", hidden_size=D, num_heads=4, num_kv_heads=2, head_dim=8, intermediate_size=48,
                         vocab_size=V, feature_layers=(1, 2), mask_token_id=V - 1, block_size=GAMMA, window=6,
                         head=head, markov_rank=8, confidence_head=confidence, draft_vocab=draft_vocab, dtype="float32")
    g = torch.Generator().manual_seed(seed)
    ids = torch.randperm(V, generator=g)[:draft_vocab] if draft_vocab else None  # most labels fall outside
    model = DraftModel.from_target(config, torch.randn(V, D, generator=g), 0.3 * torch.randn(V, D, generator=g), ids)
    torch.manual_seed(seed + 1)
    with torch.no_grad():  # weights large enough that every term has a real gradient
        for name, p in model.named_parameters():
            if p.requires_grad and "norm" not in name:
                p.normal_(0.0, 0.3)
    return model


def make_batch(seed: int = 0):
    """2 rows × 3 anchors; row 1's last anchor is padding, two blocks are cut short."""
    g = torch.Generator().manual_seed(seed)
    rows, n, anchors = 2, 9, 3
    features = torch.randn(rows, n, M * D, generator=g)
    positions = torch.arange(n).expand(rows, n).clone()
    block_tokens = torch.randint(0, V - 1, (rows, anchors, GAMMA + 1), generator=g)
    anchor_positions = torch.tensor([[4, 6, 9], [3, 8, 0]])
    target_hidden = 2.0 * torch.randn(rows, anchors, GAMMA, D, generator=g)
    valid = torch.ones(rows, anchors, GAMMA, dtype=torch.bool)
    valid[0, 1, 2:] = False  # labels past the sequence end
    valid[1, 0, 1] = False  # a hole: positions after it are unsupervised too
    valid[1, 2] = False  # a padding anchor
    context_valid = torch.ones(rows, n, dtype=torch.bool)
    context_valid[1, -2:] = False
    return (features, positions, block_tokens, anchor_positions, context_valid), target_hidden, valid


def grads(model: DraftModel) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def run_reference(model, inputs, target_hidden, valid, weights=WEIGHTS):
    model.zero_grad(set_to_none=True)
    total, stats = reference_losses(model, model.forward_train(*inputs), target_hidden, valid, weights)
    total.backward()
    return stats, grads(model)


def run_chunked(model, inputs, target_hidden, valid, chunk, weights=WEIGHTS):
    model.zero_grad(set_to_none=True)
    stats = chunked_backward(model, model.forward_train(*inputs), target_hidden, valid, weights, chunk)
    return stats, grads(model)


def test_position_weights_and_prefix_mask():
    w = position_weights(4, 4.0)
    torch.testing.assert_close(w, torch.tensor([1.0, math.exp(-0.25), math.exp(-0.5), math.exp(-0.75)]))
    valid = torch.tensor([[True, True, False, True], [False, True, True, True], [True] * 4])
    assert prefix_mask(valid).tolist() == [[True, True, False, False], [False] * 4, [True] * 4]


@pytest.mark.parametrize("head, confidence, draft_vocab", [
    ("vanilla", True, 0), ("none", True, 0), ("gated", True, 0), ("rnn", True, 0), ("vanilla", False, 0),
    ("vanilla", True, 40), ("rnn", True, 40), ("none", False, 40)])
def test_chunked_backward_equals_autograd_reference(head, confidence, draft_vocab):
    model = make_model(head, confidence, draft_vocab=draft_vocab)
    inputs, target_hidden, valid = make_batch()
    ref_stats, ref_grads = run_reference(model, inputs, target_hidden, valid)
    assert set(ref_grads) == {n for n, p in model.named_parameters() if p.requires_grad}
    for chunk in (1, 2, 100):
        stats, chunk_grads = run_chunked(model, inputs, target_hidden, valid, chunk)
        for key in ("ce", "tv", "conf", "total"):
            assert getattr(stats, key) == pytest.approx(getattr(ref_stats, key), rel=1e-5, abs=1e-7), key
        assert stats.positions == ref_stats.positions == int(prefix_mask(valid).sum())
        torch.testing.assert_close(stats.acceptance_sum, ref_stats.acceptance_sum)
        assert stats.tau == pytest.approx(ref_stats.tau)
        assert set(chunk_grads) == set(ref_grads)
        for name, grad in ref_grads.items():
            torch.testing.assert_close(chunk_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    # frozen weights never receive a gradient
    assert model.embed_tokens.weight.grad is None and model.lm_head.weight.grad is None


@pytest.mark.parametrize("weights", [LossWeights(alpha_kl=0.7), LossWeights(alpha_tau=2.0),
                                     LossWeights(alpha_ce=0.0, alpha_tv=0.0, alpha_kl=0.5, alpha_tau=1.0)])
def test_kl_and_tau_variants_equal_autograd_reference(weights):
    model = make_model("vanilla", True, draft_vocab=40)
    inputs, target_hidden, valid = make_batch()
    ref_stats, ref_grads = run_reference(model, inputs, target_hidden, valid, weights)
    assert ref_stats.kl > 0 and -GAMMA < ref_stats.tau_term < 0
    for chunk in (1, 100):
        stats, chunk_grads = run_chunked(model, inputs, target_hidden, valid, chunk, weights)
        for key in ("kl", "tau_term", "total") if weights.alpha_kl else ("tau_term", "total"):  # KL only when used
            assert getattr(stats, key) == pytest.approx(getattr(ref_stats, key), rel=1e-5, abs=1e-7), key
        for name, grad in ref_grads.items():
            torch.testing.assert_close(chunk_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_tau_term_is_minus_the_expected_accepted_drafts():
    model = make_model()
    inputs, target_hidden, valid = make_batch()
    stats, plain = run_reference(model, inputs, target_hidden, valid)
    assert stats.tau_term == pytest.approx(-(stats.tau - 1.0), rel=1e-5)
    # negative control: the term really moves the gradient, so the comparison above can fail
    _, with_tau = run_chunked(model, inputs, target_hidden, valid, 2, LossWeights(alpha_tau=2.0))
    assert any(not torch.allclose(with_tau[n], g, rtol=1e-3, atol=1e-5) for n, g in plain.items())


def test_comparison_catches_a_wrong_rule():
    """Negative control: the same comparison fails when the position weights are wrong."""
    model = make_model()
    inputs, target_hidden, valid = make_batch()
    _, ref_grads = run_reference(model, inputs, target_hidden, valid)
    _, wrong = run_chunked(model, inputs, target_hidden, valid, 2, LossWeights(decay_gamma=1e9))
    assert any(not torch.allclose(wrong[n], g, rtol=1e-3, atol=1e-5) for n, g in ref_grads.items())


def test_masked_positions_do_not_matter():
    """Labels, target hidden and tokens outside the supervised prefix leave the loss unchanged."""
    model = make_model()
    inputs, target_hidden, valid = make_batch()
    stats, _ = run_chunked(model, inputs, target_hidden, valid, 2)
    mask = prefix_mask(valid)
    hidden2 = torch.where(mask[..., None], target_hidden, torch.randn_like(target_hidden))
    tokens2 = inputs[2].clone()
    tokens2[..., 1:] = torch.where(mask, tokens2[..., 1:], torch.randint_like(tokens2[..., 1:], V - 1))
    # Changing a masked label also changes the next position's teacher-forced input, which is masked too.
    stats2, _ = run_chunked(model, (*inputs[:2], tokens2, *inputs[3:]), hidden2, valid, 2)
    assert stats2.total == pytest.approx(stats.total, rel=1e-6)


def test_target_distribution_and_tv_label():
    """With p_t = p_d (target hidden = draft hidden, no sequential bias) TV is 0, the acceptance
    proxy is 1 and c* = 1; p_t is the frozen lm_head's softmax at T = 1."""
    model = make_model("none")
    inputs, _, valid = make_batch()
    fwd = model.forward_train(*inputs)
    _, stats = reference_losses(model, fwd, fwd.hidden.detach(), valid, WEIGHTS)
    assert stats.tv == pytest.approx(0.0, abs=1e-6)
    assert all(a == pytest.approx(1.0) for a, c in zip(stats.acceptance, stats.counts) if c)
    mask = prefix_mask(valid)
    assert stats.tau == pytest.approx(float((1 + mask.sum(-1)).float()[mask[..., 0]].mean()))
    # conf loss is then the BCE against c* = 1, i.e. softplus(−logit) averaged with the weights
    logits = model.confidence_logits(fwd.hidden, fwd.prev_tokens)
    wm = position_weights(GAMMA, WEIGHTS.decay_gamma) * mask
    expected = float((wm * torch.nn.functional.softplus(-logits.detach())).sum() / wm.sum())
    assert stats.conf == pytest.approx(expected, rel=1e-5)


class MaxVocabTensor(TorchDispatchMode):
    """Records the largest tensor (in elements) with V in its last dimension that any op creates
    (views of the model's weights, such as ``lm_head.weight.t()``, are not new tensors)."""

    def __init__(self, model: DraftModel) -> None:
        super().__init__()
        self.largest = 0
        self.weights = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == V \
                    and t.untyped_storage().data_ptr() not in self.weights:
                self.largest = max(self.largest, t.numel())
        return out


def test_chunking_bounds_the_logits():
    model = make_model()
    inputs, target_hidden, valid = make_batch()
    fwd = model.forward_train(*inputs)
    with MaxVocabTensor(model) as spy:
        chunked_backward(model, fwd, target_hidden, valid, WEIGHTS, chunk=2)
    markov = model.markov.markov_w2.weight.numel()  # its (V, r) gradient also ends in V
    assert spy.largest <= max(2 * GAMMA * V, markov)
    model.zero_grad(set_to_none=True)
    with MaxVocabTensor(model) as spy:
        reference_losses(model, model.forward_train(*inputs), target_hidden, valid, WEIGHTS)
    assert spy.largest == valid.numel() * V  # the reference materialises every anchor's logits
