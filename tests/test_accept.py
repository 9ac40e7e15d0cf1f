"""Losslessness of speculative sampling, proved statistically on a synthetic target and drafter.

A context-dependent target and draft over a 5-token vocabulary run through the real loop
(``engine.speculative_generate``); the joint distribution of the first 3 emitted tokens is compared
with the target's exact joint distribution by a chi-square test. The negative control runs the same
test with the design notes' §11.1 rule (sample p_t at a rejection, no residual) and must fail.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from scipy.stats import chisquare

from minispark.serving import accept as accept_module
from minispark.serving.accept import accept_greedy, accept_sampling, leading_true
from minispark.serving.draft_block import DraftBlock
from minispark.serving.drafters.base import Drafter
from minispark.serving.engine import speculative_generate
from minispark.serving.sampling import SamplingConfig, probabilities, sample
from minispark.serving.schedule import FixedLength, ScheduledLength
from minispark.serving.sps import SPSTable
from minispark.serving.target import PromptInputs, StepOutput

VOCAB = 5
PROMPT = [3, 1]


def _table(seed: int, scale: float) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(VOCAB, VOCAB, VOCAB, generator=generator) * scale  # (prev2, prev1, next)


TARGET_TABLE = _table(1, 1.5)
DRAFT_TABLE = _table(2, 1.5)


def target_logits(prefix: list[int]) -> torch.Tensor:
    return TARGET_TABLE[prefix[-2], prefix[-1]]


class FakeSession:
    """A target whose next-token logits depend on the last two tokens; tracks a fake KV cache."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.target = SimpleNamespace(device=torch.device("cpu"))

    @property
    def cache_length(self) -> int:
        return len(self.tokens)

    def prefill(self, prompt: PromptInputs, length: int, start: int = 0) -> StepOutput:
        assert start == len(self.tokens) == 0  # a fresh session: the engine prefills from the start
        self.tokens = prompt.input_ids[0, :length].tolist()
        return StepOutput(logits=torch.zeros(1, VOCAB))  # the engine never reads prefill logits

    def step(self, block: torch.Tensor) -> StepOutput:
        rows = []
        for token in block.tolist():
            self.tokens.append(token)
            rows.append(target_logits(self.tokens))
        return StepOutput(logits=torch.stack(rows))  # (n, V)

    def crop(self, length: int) -> None:
        del self.tokens[length:]

    def text_positions(self, start: int, n: int) -> torch.Tensor:
        return torch.arange(start, start + n)


class TableBlock(DraftBlock):
    """Draws x_k from DRAFT_TABLE given the two tokens before it. ``confidence(prev)`` gives c_k
    from x_{k-1} (like the Markov confidence head); ``support`` restricts the draws to a draft
    vocabulary, and ``honest=False`` then reports the unrestricted softmax (a wrong p_d)."""

    def __init__(self, context: list[int], generator: torch.Generator, confidence=None, support=None,
                 honest: bool = True) -> None:
        super().__init__(BLOCK)
        self.context, self.generator, self.confidence_of = context, generator, confidence
        self.support, self.honest = support, honest

    def _prefix(self) -> list[int]:
        return self.context + [int(token) for token in self.tokens]

    def _confidence(self, k: int) -> torch.Tensor | None:
        return None if self.confidence_of is None else torch.tensor(self.confidence_of(self._prefix()[-1]))

    def _draw(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        prefix = self._prefix()
        logits = DRAFT_TABLE[prefix[-2], prefix[-1]]
        reported = probabilities(logits, SamplingConfig(1.0))
        if self.support is not None:
            outside = torch.ones(VOCAB, dtype=torch.bool)
            outside[list(self.support)] = False
            p = probabilities(logits.masked_fill(outside, float("-inf")), SamplingConfig(1.0))
            reported = p if self.honest else reported
        else:
            p = reported
        return sample(p, self.generator), reported


BLOCK = 4  # draft positions per block (≥ every γ below)


class FakeDrafter(Drafter):
    """Samples each draft token from its own context-dependent distribution and reports it."""

    name = "fake"

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        return TableBlock(ids.tolist(), generator)


class DraftVocabFakeDrafter(Drafter):
    """A drafter with a draft vocabulary: it only ever proposes tokens of ``SUPPORT`` and reports p_d
    over the whole vocabulary, exactly zero elsewhere (as DraftModel does with ``draft_vocab``).
    ``honest=False`` reports the unrestricted distribution instead: the negative control."""

    name = "fake-draft-vocab"
    SUPPORT = (0, 2, 4)

    def __init__(self, honest: bool = True) -> None:
        self.honest = honest

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        return TableBlock(ids.tolist(), generator, support=self.SUPPORT, honest=self.honest)


class ConfidentFakeDrafter(FakeDrafter):
    """Reports a confidence c_k that depends on x_{k-1} (like the Markov confidence head), asked
    before x_k is drawn, so a scheduler's admission can vary with the realized draft prefix."""

    has_confidence = True

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        return TableBlock(ids.tolist(), generator, confidence=self.confidence)

    def confidence(self, prev: int) -> float:
        return 0.95 if prev % 2 == 0 else 0.35


def exact_joint(sampling: SamplingConfig, length: int = 3) -> dict[tuple[int, ...], float]:
    joint = {}
    for seq in itertools.product(range(VOCAB), repeat=length):
        prefix, prob = list(PROMPT), 1.0
        for token in seq:
            prob *= float(probabilities(target_logits(prefix), sampling)[token])
            prefix.append(token)
        joint[seq] = prob
    return joint


def empirical_joint(sampling: SamplingConfig, draws: int, gamma: int, drafter: Drafter | None = None,
                    policy_factory=None) -> dict[tuple[int, ...], int]:
    generator = torch.Generator().manual_seed(1234)
    prompt = PromptInputs(input_ids=torch.tensor([PROMPT]), text_positions=torch.arange(len(PROMPT)))
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(draws):
        policy = policy_factory() if policy_factory else FixedLength(gamma)
        result = speculative_generate(FakeSession(), prompt, drafter or FakeDrafter(), sampling=sampling,
                                      policy=policy, max_new_tokens=3, generator=generator)
        key = tuple(result.token_ids)
        counts[key] = counts.get(key, 0) + 1
    return counts


def chi_square_pvalue(counts: dict, joint: dict) -> float:
    total = sum(counts.values())
    assert all(joint[key] > 0 for key in counts), "a token outside the target's support was emitted"
    observed, expected = [], []
    small_obs, small_exp = 0, 0.0
    for key, prob in joint.items():
        if prob == 0:
            continue
        if prob * total < 5:  # pool sparse cells so the chi-square approximation holds
            small_obs += counts.get(key, 0)
            small_exp += prob * total
        else:
            observed.append(counts.get(key, 0))
            expected.append(prob * total)
    if small_exp > 0:
        observed.append(small_obs)
        expected.append(small_exp)
    scale = total / sum(expected)  # float rounding: scipy wants equal sums
    return float(chisquare(observed, [e * scale for e in expected]).pvalue)


CONFIGS = {
    "T=1": SamplingConfig(1.0),
    "T=0.7,top-k=3": SamplingConfig(0.7, top_k=3),
    "T=1.2,top-p=0.8": SamplingConfig(1.2, top_p=0.8),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_speculative_sampling_matches_target_joint(name: str) -> None:
    sampling = CONFIGS[name]
    counts = empirical_joint(sampling, draws=20_000, gamma=2)
    assert chi_square_pvalue(counts, exact_joint(sampling)) > 1e-3


def test_schedule_mode_matches_target_joint() -> None:
    """Algorithm 1 (batch-1, early stop) keeps the output distribution exact (non-anticipation)."""
    sps = SPSTable.from_inline([1.0, 0.62, 0.5, 0.45])  # verifying costs: admission depends on c_k
    sampling = CONFIGS["T=1"]
    counts = empirical_joint(sampling, draws=20_000, gamma=3, drafter=ConfidentFakeDrafter(),
                             policy_factory=lambda: ScheduledLength(sps, 3))
    assert chi_square_pvalue(counts, exact_joint(sampling)) > 1e-3


@pytest.mark.parametrize("name", ["T=1", pytest.param("T=0.7,top-k=3", marks=pytest.mark.slow)])
def test_draft_vocabulary_keeps_the_target_joint(name: str) -> None:
    """p_d zero outside a draft vocabulary: the residual covers the target mass the drafter cannot
    propose, so the output law is still exactly the target's."""
    sampling = CONFIGS[name]
    counts = empirical_joint(sampling, draws=20_000, gamma=2, drafter=DraftVocabFakeDrafter())
    assert chi_square_pvalue(counts, exact_joint(sampling)) > 1e-3


def test_negative_control_draft_vocabulary_with_a_wrong_p_d_fails() -> None:
    """The same test catches a drafter that samples inside its vocabulary but reports the full softmax."""
    sampling = CONFIGS["T=1"]
    counts = empirical_joint(sampling, draws=20_000, gamma=2, drafter=DraftVocabFakeDrafter(honest=False))
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


def test_envelope_schedule_with_padding_matches_target_joint() -> None:
    """Scheduling on a jagged curve's envelope, padding the verify past the scheduled prefix, keeps
    the output distribution exact (the pad length is fixed before the padded drafts are drawn)."""
    sps = SPSTable.from_inline([0.8, 0.4, 0.9, 0.45])  # 3 tokens are the cheapest verify of >= 1
    sampling = CONFIGS["T=1"]
    CountingSchedule.padded = 0
    counts = empirical_joint(sampling, draws=20_000, gamma=3, drafter=ZeroConfidenceFakeDrafter(),
                             policy_factory=lambda: CountingSchedule(sps, 3))
    assert CountingSchedule.padded > 1000
    assert chi_square_pvalue(counts, exact_joint(sampling)) > 1e-3


def test_negative_control_without_residual_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The §11.1 rule (sample p_t at a rejection) must be caught by the same test."""
    wrong = lambda *args, **kwargs: accept_sampling(*args, **kwargs, residual=False)  # noqa: E731
    monkeypatch.setattr(accept_module, "accept_sampling", wrong)
    sampling = CONFIGS["T=1"]
    counts = empirical_joint(sampling, draws=20_000, gamma=2)
    assert chi_square_pvalue(counts, exact_joint(sampling)) < 1e-6


def test_single_step_residual_distribution_exact() -> None:
    """One position, one-hot-free draft: the emitted token's law is p_t, computed analytically."""
    p_t = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25]])
    p_d = torch.tensor([[0.1, 0.6, 0.1, 0.2]])
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    draws = 40_000
    for _ in range(draws):
        x = sample(p_d[0], generator).view(1)
        accepted, token = accept_sampling(x, p_d, p_t, generator)
        counts[int(x) if accepted else token] += 1
    assert torch.allclose(counts / draws, p_t[0], atol=0.01)


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
