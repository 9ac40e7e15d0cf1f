"""Draft-skip: the policy's rule, causality, losslessness (greedy parity, the T = 1 joint law with a
negative control) and the DSpark drafter's context after skipped rounds.

    python -m pytest -q tests/serving/test_draft_skip.py
"""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from minispark.cli import app
from minispark.serving.draft_skip import BatchDraftSkip, DraftSkip, SkipPolicy, simulate
from minispark.serving.draft_block import DraftBlock, Proposal
from minispark.serving.drafters.base import Drafter, NoDrafter
from minispark.serving.schedule import FixedLength
from minispark.serving.drafters.dspark import DSparkDrafter
from minispark.serving.drafters.lookup import LookupDrafter
from minispark.serving.engine import speculative_generate
from minispark.serving.generate import make_drafter
from minispark.target.sampling import SamplingConfig
from minispark.serving.builder import build_serving
from minispark.target.loading import Target, load_target
from minispark.target.session import PromptInputs
from tests.helpers import JOINT_DRAWS, PROMPT, FakeDrafter, FakeSession, chi_square_pvalue, exact_joint, joint_draws
from tests.helpers import OracleDrafter, assert_parity, hf_greedy

PROPOSE_S, TARGET_S = 0.4, 1.0  # a drafter forward costs 0.4 target steps in the unit tests


def drive(policy: DraftSkip, rounds: int, accepted: int, proposed: int = 4) -> str:
    """Run ``rounds`` rounds in which a drafted round accepts ``accepted`` of ``proposed`` drafts;
    returns the decisions as a string, 'D' drafted, '.' skipped."""
    decisions = ""
    for _ in range(rounds):
        drafted = policy.should_draft()
        n = proposed if drafted else 0
        step = TARGET_S * (1 + 0.1 * n)
        policy.observe(drafted, n, accepted if drafted else 0, PROPOSE_S if drafted else 0.0, step)
        decisions += "D" if drafted else "."
    return decisions


def measured() -> DraftSkip:
    """A policy that has already timed a target-only step (as after an earlier turn)."""
    policy = DraftSkip()
    policy.observe(False, 0, 0, 0.0, TARGET_S)
    return policy


# ---- the rule ---------------------------------------------------------------------------------


def test_never_skips_when_drafting_pays() -> None:
    assert drive(measured(), 200, accepted=3) == "D" * 200
    # Without a timed target step yet, exactly one round is taken as one, to learn the break-even.
    assert drive(DraftSkip(), 200, accepted=3) == "D." + "D" * 198


def test_skips_after_losing_rounds_and_probes_within_the_budget() -> None:
    # A drafted round of 4 drafts, none accepted, loses 0.4 + 1.4 − 1 = 0.8 target steps: with a
    # 2 % budget the policy probes every 40 rounds, so the probes cost 2 % of a target step per round.
    decisions = drive(measured(), 200, accepted=0)
    assert decisions.startswith("D" + "." * 40 + "D")
    probes = [i for i, d in enumerate(decisions) if d == "D"]
    assert {b - a - 1 for a, b in zip(probes, probes[1:])} == {40}
    # A cheaper loss (1 draft: 0.5 target steps) is probed more often; the cap bounds the wait.
    assert drive(measured(), 60, accepted=0, proposed=1).startswith("D" + "." * 25 + "D")
    assert DraftSkip().wait(-10.0) == 64 and DraftSkip().wait(-0.001) == 2


def test_recovers_when_drafting_pays_again() -> None:
    policy = measured()
    drive(policy, 120, accepted=0)  # a long hard stretch: probes every 40 rounds
    easy = drive(policy, 100, accepted=4)
    first = easy.index("D")
    assert first <= 40 and easy[first:] == "D" * (100 - first)  # one paying probe lifts the surplus


def test_one_cheap_win_per_round_is_enough_to_draft() -> None:
    # A round is worth drafting as soon as its tokens beat its cost in target steps.
    assert drive(measured(), 50, accepted=1, proposed=1) == "D" * 50  # 2 tokens for 0.4 + 1.1 steps
    assert drive(measured(), 50, accepted=0, proposed=1).count("D") == 2  # 1 token for 1.5 steps


def test_batch_policy_decides_per_requests_in_flight_on_the_mean_per_request() -> None:
    batch = BatchDraftSkip()
    batch.observe(8, False, 0, 0, 0.0, TARGET_S)  # a plain 8-row step
    # 8 requests, 16 drafts in all, 12 accepted in all: 1.5 accepted per request, as one request would count.
    batch.observe(8, True, 16, 12, PROPOSE_S, TARGET_S * 1.2)
    eight = batch.policy(8)
    assert eight.tokens == pytest.approx(2.5) and eight.seconds == pytest.approx(PROPOSE_S + 1.2)
    assert batch.should_draft(8)  # 2.5 tokens for 1.6 steps
    # Another number in flight starts from the nearest one's estimates, then learns on its own.
    assert batch.policy(3).tokens == pytest.approx(2.5) and batch.should_draft(3)
    for _ in range(3):  # losing rounds at 3 in flight do not touch the 8-request policy
        batch.observe(3, True, 12, 0, PROPOSE_S, TARGET_S * 1.5)
        batch.observe(3, False, 0, 0, 0.0, TARGET_S)
    assert not batch.should_draft(3) and batch.should_draft(8)
    # 2 in flight for the first time: its nearest (3) says drafting loses, so it skips at once.
    assert not batch.should_draft(2) and batch.policy(2).tokens == pytest.approx(batch.policy(3).tokens)
    assert BatchDraftSkip(budget=0.5).policy(2).budget == 0.5 and BatchDraftSkip().policy(2).tokens is None


def test_rejects_bad_settings() -> None:
    for kwargs in ({"weight": 0.0}, {"weight": 1.5}, {"budget": 0.0}, {"min_interval": 0},
                   {"min_interval": 8, "max_interval": 4}):
        with pytest.raises(ValueError):
            DraftSkip(**kwargs)


def test_simulator_hard_stretches_cost_about_target_only() -> None:
    hard = simulate([(2000, 0.1)])
    assert hard["always"]["speedup_vs_target"] < 0.6 and hard["draft-skip"]["speedup_vs_target"] > 0.95
    easy = simulate([(2000, 0.8)])
    assert easy["draft-skip"]["speedup_vs_target"] > 0.95 * easy["always"]["speedup_vs_target"]


# ---- causality and the loop -------------------------------------------------------------------


class ScriptedSkip(SkipPolicy):
    """Drafts in the rounds ``script`` marks 'D' (then always); records the loop's calls."""

    def __init__(self, script: str, events: list[str] | None = None) -> None:
        self.script, self.round, self.events = script, 0, events if events is not None else []

    def should_draft(self) -> bool:
        self.events.append("decide")
        drafted = self.round >= len(self.script) or self.script[self.round] == "D"
        self.round += 1
        return drafted

    def observe(self, drafted, proposed, accepted, propose_s, step_s) -> None:
        self.events.append("observe")


class DrawnBlock(DraftBlock):
    """A block whose positions were drawn up front (``proposal``): replays them in order."""

    def __init__(self, proposal: Proposal) -> None:
        super().__init__(len(proposal))
        self.drawn = proposal

    def _confidence(self, k: int) -> torch.Tensor | None:
        return None if self.drawn.confidences is None else self.drawn.confidences[k - 1]

    def _draw(self, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.drawn.tokens[k - 1], None if self.drawn.probs is None else self.drawn.probs[k - 1]


class RecordingDrafter(FakeDrafter):
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        self.events.append("propose")
        return super().propose(ids, anchor_position, sampling, generator)

    def commit(self, num_accepted, new_cached_ids, features, text_positions) -> None:
        self.events.append(f"commit {new_cached_ids.numel()}")


def test_decision_precedes_the_draft_and_skipped_rounds_commit_the_anchor() -> None:
    """Each round decides before the drafter runs (it cannot see the round's draft) and observes
    after commit; a skipped round is a 1-token verify whose anchor the drafter is still given."""
    events: list[str] = []
    prompt = PromptInputs(input_ids=torch.tensor([PROMPT]), text_positions=torch.arange(len(PROMPT)))
    result = speculative_generate(FakeSession(), prompt, RecordingDrafter(events), SamplingConfig(1.0),
                                  FixedLength(2), max_new_tokens=12, generator=torch.Generator().manual_seed(0),
                                  skip=ScriptedSkip("D..D.", events))
    rounds, current = [], []
    for event in events:
        if event == "decide" and current:
            rounds.append(current)
            current = []
        current.append(event)
    rounds.append(current)
    assert [r[:2] for r in rounds[:5]] == [["decide", "propose"], ["decide", "commit 1"], ["decide", "commit 1"],
                                          ["decide", "propose"], ["decide", "commit 1"]]
    assert all(r[-1] == "observe" for r in rounds)
    assert result.stats.skipped_rounds == 3 and result.stats.proposed_lengths[1:3] == [0, 0]


class FixedCostSkip(DraftSkip):
    """DraftSkip on fixed costs (a drafted round of ℓ drafts costs 0.4 + 1 + 0.1ℓ target steps),
    so its decisions are a deterministic function of earlier acceptance, not of timing noise; a
    large budget makes it probe after a single skipped round, so short runs mix both kinds."""

    def __init__(self) -> None:
        super().__init__(budget=1.0, min_interval=1)
        super().observe(False, 0, 0, 0.0, TARGET_S)

    def observe(self, drafted, proposed, accepted, propose_s, step_s) -> None:
        super().observe(drafted, proposed, accepted, PROPOSE_S if drafted else 0.0, TARGET_S * (1 + 0.1 * proposed))


class PeekingSkip(Drafter):
    """The negative control: drafts, then drops the draft when its first token is 0, i.e. decides
    from the current round's draft. Biases the output law, and the test must see it."""

    name = "peeking"

    def __init__(self) -> None:
        self.inner = FakeDrafter()

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        proposal = self.inner.propose(ids, anchor_position, sampling, generator).proposal(2)  # FixedLength(2) below
        return DrawnBlock(Proposal.empty() if int(proposal.tokens[0]) == 0 else proposal)


def joint_with_skip(drafter: Drafter, skip_factory, draws: int = JOINT_DRAWS) -> tuple[dict, int]:
    sampling = SamplingConfig(1.0)
    generator = torch.Generator().manual_seed(1234)
    prompt = PromptInputs(input_ids=torch.tensor([PROMPT]), text_positions=torch.arange(len(PROMPT)))
    counts: dict[tuple[int, ...], int] = {}
    skipped = 0
    for _ in range(draws):
        result = speculative_generate(FakeSession(), prompt, drafter, sampling, FixedLength(2), max_new_tokens=4,
                                      generator=generator, skip=skip_factory())
        key = tuple(result.token_ids)
        counts[key] = counts.get(key, 0) + 1
        skipped += result.stats.skipped_rounds
    return counts, skipped


@joint_draws
def test_draft_skip_keeps_the_target_joint_at_t1(draws: int) -> None:
    """Skip decisions that depend on earlier rounds' acceptance leave the output law exactly p_t."""
    counts, skipped = joint_with_skip(FakeDrafter(), FixedCostSkip, draws)
    assert skipped > draws // 4  # the rule really skipped, in a history-dependent way
    assert chi_square_pvalue(counts, exact_joint(SamplingConfig(1.0), length=4)) > 1e-3


@pytest.mark.slow  # a negative control: its positive case runs in make test, both in make test-all
def test_negative_control_a_skip_that_peeks_at_the_draft_fails() -> None:
    counts, _ = joint_with_skip(PeekingSkip(), lambda: None)
    assert chi_square_pvalue(counts, exact_joint(SamplingConfig(1.0), length=4)) < 1e-6


# ---- real models ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def setup(tiny_trained_drafter) -> tuple[Target, str]:
    target_dir, drafter_dir = tiny_trained_drafter
    return load_target(str(target_dir)), str(drafter_dir)


def test_greedy_parity_with_draft_skip(setup) -> None:
    target, drafter_dir = setup
    for prompt in ["Tell me a story.", "List three fruits and a vegetable."]:
        inputs = target.encode(prompt=prompt)
        want = hf_greedy(target, inputs, 40)
        drafters = [make_drafter(drafter_dir, target), LookupDrafter(),
                    OracleDrafter(want, inputs.length, False, target.vocab_size)]
        for drafter in drafters:
            for skip in (DraftSkip(), ScriptedSkip("D...D.D..D")):
                with target.session(drafter.feature_layers) as session:
                    result = speculative_generate(session, inputs, drafter, SamplingConfig(), FixedLength(3),
                                                  max_new_tokens=40, eos_ids=target.eos_token_ids, skip=skip)
                assert_parity(target, inputs, result.token_ids, want)


class Twin(Drafter):
    """Runs a skipped DSpark drafter and one that never skips (it projects its context every round,
    as it would to propose) on the same committed tokens; every proposal of the first is compared
    with the second's at the same state and generator."""

    def __init__(self, lazy: DSparkDrafter, eager: DSparkDrafter) -> None:
        self.lazy, self.eager = lazy, eager
        self.feature_layers, self.has_confidence = lazy.feature_layers, lazy.has_confidence
        self.compared = 0

    def reset(self, cached_ids, features, text_positions) -> None:
        for d in (self.lazy, self.eager):
            d.reset(cached_ids, features, text_positions)

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        state = generator.get_state()
        block = self.eager.propose(ids, anchor_position, sampling, generator)
        want = block.proposal(block.size)
        generator.set_state(state)
        block = self.lazy.propose(ids, anchor_position, sampling, generator)
        got = block.proposal(block.size)
        assert torch.equal(got.tokens, want.tokens)
        if want.confidences is not None:
            torch.testing.assert_close(got.confidences, want.confidences)
        if want.probs is not None:
            torch.testing.assert_close(got.probs, want.probs)
        self.compared += 1
        return DrawnBlock(got)

    def commit(self, num_accepted, new_cached_ids, features, text_positions) -> None:
        for d in (self.lazy, self.eager):
            d.commit(num_accepted, new_cached_ids, features, text_positions)
        len(self.eager.context)  # the never-skipped drafter's context is brought up to date every round


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_context_after_skipped_rounds_equals_a_never_skipped_drafter(setup, temperature: float) -> None:
    target, drafter_dir = setup
    twin = Twin(make_drafter(drafter_dir, target), make_drafter(drafter_dir, target))
    inputs = target.encode(prompt="Tell me a story.")
    with target.session(twin.feature_layers) as session:
        result = speculative_generate(session, inputs, twin, SamplingConfig(temperature), FixedLength(3),
                                      max_new_tokens=40, generator=torch.Generator().manual_seed(0),
                                      skip=ScriptedSkip("D....D..D.D........D"))
    assert result.stats.skipped_rounds >= 14 and twin.compared >= 5
    assert len(twin.lazy.context) == len(twin.eager.context)


def test_serving_default_and_cli_flag(setup, tiny_trained_drafter) -> None:
    target, drafter_dir = setup
    assert isinstance(build_serving(target, drafter_dir, "schedule").skip, DraftSkip)
    assert build_serving(target, drafter_dir, "fixed").skip is None
    assert isinstance(build_serving(target, drafter_dir, "fixed", draft_skip=True).skip, DraftSkip)
    assert build_serving(target, drafter_dir, "schedule", draft_skip=False).skip is None
    assert build_serving(target, "none", draft_skip=True).skip is None
    assert isinstance(build_serving(target, "none").drafter, NoDrafter)
    args = ["generate", "--target", str(tiny_trained_drafter[0]), "--drafter", "lookup", "--mode", "fixed", "--prompt", "Hi",
            "--max-new-tokens", "12", "--json"]
    for flag, skips in (("--draft-skip", True), ("--no-draft-skip", False)):
        result = CliRunner().invoke(app, args + [flag])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        assert "skipped_rounds" in data and (data["skipped_rounds"] == 0 or skips)
