"""Losslessness of speculative sampling, proved statistically on a synthetic target and drafter.

A context-dependent target and draft over a 5-token vocabulary run through the real loop
(``engine.speculative_generate``); the joint distribution of the first 3 emitted tokens is compared
with the target's exact joint distribution by a chi-square test. The negative control runs the same
test with the design notes' §11.1 rule (sample p_t at a rejection, no residual) and must fail.
"""

from __future__ import annotations


import pytest
import torch

from minispark.serving import engine
from minispark.serving.accept import accept_greedy, accept_sampling, accept_tree_sampling, leading_true
from minispark.target.sampling import SamplingConfig, sample
from minispark.serving.schedule import ScheduledLength
from minispark.serving.sps import SPSTable
from tests.helpers import (JOINT_DRAWS, ConfidentFakeDrafter, DraftVocabFakeDrafter, chi_square_pvalue, empirical_joint,
                           exact_joint, joint_draws)


CONFIGS = {
    "T=1": SamplingConfig(1.0),
    "T=0.7,top-k=3": SamplingConfig(0.7, top_k=3),
    "T=1.2,top-p=0.8": SamplingConfig(1.2, top_p=0.8),
}


# top-k's and top-p's truncations are also proved on trees (test_draft_tree: both together), so their chain cases
# are slow
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if "top" in name else name
                                  for name in CONFIGS])
@joint_draws
def test_speculative_sampling_matches_target_joint(name: str, draws: int) -> None:
    sampling = CONFIGS[name]
    counts = empirical_joint(sampling, draws=draws, gamma=2)
    assert chi_square_pvalue(counts, exact_joint(sampling)) > 1e-3


@pytest.mark.slow  # the envelope test below schedules too, and pads the verify besides
def test_schedule_mode_matches_target_joint() -> None:
    """Algorithm 1 (batch-1, early stop) keeps the output distribution exact (non-anticipation)."""
    sps = SPSTable.from_inline([1.0, 0.62, 0.5, 0.45])  # verifying costs: admission depends on c_k
    sampling = CONFIGS["T=1"]
    counts = empirical_joint(sampling, draws=JOINT_DRAWS, gamma=3, drafter=ConfidentFakeDrafter(),
                             policy_factory=lambda: ScheduledLength(sps, 3))
    assert chi_square_pvalue(counts, exact_joint(sampling)) > 1e-3


@pytest.mark.parametrize("name", ["T=1", pytest.param("T=0.7,top-k=3", marks=pytest.mark.slow)])
@joint_draws
def test_draft_vocabulary_keeps_the_target_joint(name: str, draws: int) -> None:
    """p_d zero outside a draft vocabulary: the residual covers the target mass the drafter cannot
    propose, so the output law is still exactly the target's."""
    sampling = CONFIGS[name]
    counts = empirical_joint(sampling, draws=draws, gamma=2, drafter=DraftVocabFakeDrafter())
    assert chi_square_pvalue(counts, exact_joint(sampling)) > 1e-3


@pytest.mark.slow  # a negative control: its positive case runs in make test, both in make test-all
def test_negative_control_draft_vocabulary_with_a_wrong_p_d_fails() -> None:
    """The same test catches a drafter that samples inside its vocabulary but reports the full softmax."""
    sampling = CONFIGS["T=1"]
    counts = empirical_joint(sampling, draws=JOINT_DRAWS, gamma=2, drafter=DraftVocabFakeDrafter(honest=False))
    assert chi_square_pvalue(counts, exact_joint(sampling)) < 1e-6


class CountingSchedule(ScheduledLength):
    """ScheduledLength that counts the positions it admits as padding (beyond the scheduled n)."""

    padded = 0

    def admit(self, position: int, confidence: float | None) -> bool:
        admitted = super().admit(position, confidence)
        CountingSchedule.padded += admitted and position > self.admitted
        return admitted


class ZeroConfidenceFakeDrafter(ConfidentFakeDrafter):
    """c_k = 0 after token 1: the scheduler stops there, and the envelope pads the verify."""

    def confidence(self, prev: int) -> float:
        return 0.0 if prev == 1 else super().confidence(prev)


@joint_draws
def test_envelope_schedule_with_padding_matches_target_joint(draws: int) -> None:
    """Scheduling on a jagged curve's envelope, padding the verify past the scheduled prefix, keeps
    the output distribution exact (the pad length is fixed before the padded drafts are drawn)."""
    sps = SPSTable.from_inline([0.8, 0.4, 0.9, 0.45])  # 3 tokens are the cheapest verify of >= 1
    sampling = CONFIGS["T=1"]
    CountingSchedule.padded = 0
    counts = empirical_joint(sampling, draws=draws, gamma=3, drafter=ZeroConfidenceFakeDrafter(),
                             policy_factory=lambda: CountingSchedule(sps, 3))
    assert CountingSchedule.padded > draws // 20
    assert chi_square_pvalue(counts, exact_joint(sampling)) > 1e-3


def test_negative_control_without_residual_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The §11.1 rule (sample p_t at a rejection) must be caught by the same test (a chain is verified by the
    tree rule, whose one child per node is exactly the chain's rule)."""
    wrong = lambda *args, **kwargs: accept_tree_sampling(*args, **kwargs, residual=False)  # noqa: E731
    monkeypatch.setattr(engine, "accept_tree_sampling", wrong)
    sampling = CONFIGS["T=1"]
    counts = empirical_joint(sampling, draws=JOINT_DRAWS, gamma=2)
    assert chi_square_pvalue(counts, exact_joint(sampling)) < 1e-6


def test_single_step_residual_distribution_exact() -> None:
    """One position, one-hot-free draft: the emitted token's law is p_t, computed analytically."""
    p_t = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25]])
    p_d = torch.tensor([[0.1, 0.6, 0.1, 0.2]])
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    draws = 20_000
    for _ in range(draws):
        x = sample(p_d[0], generator).view(1)
        accepted, token = accept_sampling(x, p_d, p_t, generator)
        counts[int(x) if accepted else token] += 1
    assert torch.allclose(counts / draws, p_t[0], atol=0.015)


def test_one_hot_drafter_residual_excludes_rejected_token() -> None:
    p_t = torch.tensor([[0.6, 0.4, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    generator = torch.Generator().manual_seed(0)
    emitted = torch.zeros(3)
    for _ in range(20_000):
        accepted, token = accept_sampling(torch.tensor([1]), None, p_t, generator)
        emitted[1 if accepted else token] += 1
    assert torch.allclose(emitted / emitted.sum(), p_t[0], atol=0.015)


def test_greedy_rule() -> None:
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 9.0]])  # argmax 1, 0, 2
    assert accept_greedy(torch.tensor([1, 0]), logits) == (2, 2)
    assert accept_greedy(torch.tensor([1, 2]), logits) == (1, 0)
    assert accept_greedy(torch.tensor([2, 0]), logits) == (0, 1)
    assert accept_greedy(torch.tensor([], dtype=torch.long), logits[:1]) == (0, 1)
    assert leading_true(torch.tensor([True, False, True])) == 1
