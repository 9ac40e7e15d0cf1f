"""The hybrid drafter (``serving/drafters/hybrid.py``): its choice sees only pre-draft state, it is
lossless (greedy parity with an always-matching and a never-matching lookup; the T = 1 joint law,
with a negative control whose choice peeks at a drafted token), and bench counts rounds by source.

    .venv/bin/python -m pytest -q tests/serving/test_hybrid.py
"""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest
import torch
from typer.testing import CliRunner

from minispark.cli import app
from minispark.measuring.bench import BenchConfig, build_modes, builtin_prompts, run_bench
from minispark.measuring.bench_report import render_bench
from minispark.serving.builder import build_serving
from minispark.serving.draft_block import DraftBlock
from minispark.serving.draft_skip import DraftSkip
from minispark.serving.drafters.hybrid import (AcceptanceEstimate, HybridDrafter, PreDraftState, Source,
                                               ThetaChoice, ThetaPricer)
from minispark.serving.drafters.lookup import LookupDrafter
from minispark.serving.engine import speculative_generate
from minispark.serving.generate import make_drafter
from minispark.target.sampling import SamplingConfig
from minispark.serving.schedule import FixedLength, ScheduledLength
from minispark.serving.sps import SPSTable
from minispark.target.loading import Target, load_target
from minispark.target.session import PromptInputs
from tests.helpers import JOINT_DRAWS, PROMPT, ConfidentFakeDrafter, FakeSession, chi_square_pvalue, exact_joint
from tests.helpers import assert_parity, hf_greedy

GAMMA = 3
#: Verifying costs, but a few drafts can pay: choices mix lookup, dspark and plain rounds.
SPS = SPSTable.from_inline([1.0, 0.7, 0.6, 0.5])
#: Priors that make the lookup worth it on some matches and not on others.
LOOKUP_PRIOR = {1: (0.5,), 2: (0.6,), 3: (0.75,)}


# ---- pricing ----------------------------------------------------------------------------------


def test_estimates_count_tried_positions_only() -> None:
    estimate = AcceptanceEstimate([0.5], weight=2.0)
    estimate.observe(verified=3, accepted=1)  # position 1 survived, 2 rejected, 3 never tried
    assert estimate.rates(3) == pytest.approx([2 / 3, 1 / 3, 0.5])


def test_pricer_is_the_theta_rule_and_flat_without_a_table() -> None:
    pricer = ThetaPricer(3, SPSTable.from_inline([1.0, 0.5, 0.45, 0.4]))
    assert pricer.best([0.8, 0.9, 0.9], 100) == (3, pytest.approx((1 + 0.8 + 0.72 + 0.648) * 0.4))
    assert pricer.best([0.1, 0.9, 0.9], 100) == (0, 1.0)  # no length pays: a plain step
    assert ThetaPricer(3).best([0.1, 0.1, 0.1], 100)[0] == 3  # flat: every draft adds tokens


def test_choice_prefers_what_pays_and_may_pick_neither() -> None:
    choice = ThetaChoice(GAMMA, has_confidence=True, sps_table=SPS, lookup_prior={1: (0.9,)})
    long_match = PreDraftState(context_length=10, match_length=3, lookup_tokens=3)
    assert choice.choose(long_match).source is Source.LOOKUP and choice.choose(long_match).length == 3
    no_match = PreDraftState(context_length=10, match_length=0, lookup_tokens=0)
    assert choice.choose(no_match).source is Source.DSPARK  # ask again with c_1
    assert choice.choose(dataclasses.replace(no_match, c1=0.9)).source is Source.DSPARK
    assert choice.choose(dataclasses.replace(no_match, c1=0.05)).source is Source.PLAIN
    weaker = ThetaChoice(GAMMA, has_confidence=True, sps_table=SPS, lookup_prior={1: (0.5,)})
    assert weaker.choose(long_match).source is Source.LOOKUP  # at the prior's c_1: no forward needed
    assert weaker.choose(dataclasses.replace(long_match, c1=1.0)).source is Source.DSPARK  # a sure c_1 wins


# ---- the choice sees only pre-draft state -----------------------------------------------------


class WatchedDrafter(ConfidentFakeDrafter):
    """The trained side: remembers every block it hands out, so a test can see what was drawn when."""

    def __init__(self) -> None:
        self.blocks: list[DraftBlock] = []

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        self.blocks.append(super().propose(ids, anchor_position, sampling, generator))
        return self.blocks[-1]


class SpyChoice(ThetaChoice):
    """Fails the test if ``choose`` is handed anything but scalar pre-draft state, or runs after a
    token of the round's block was drawn."""

    def __init__(self, model: WatchedDrafter, **kwargs) -> None:
        super().__init__(GAMMA, has_confidence=True, sps_table=SPS, lookup_prior=LOOKUP_PRIOR, **kwargs)
        self.model, self.calls, self.with_c1 = model, 0, 0

    def choose(self, *args, **kwargs):
        assert not kwargs and len(args) == 1 and type(args[0]) is PreDraftState, (args, kwargs)
        state = args[0]
        for field in dataclasses.fields(state):
            value = getattr(state, field.name)
            assert value is None or type(value) in (int, float), f"{field.name} is a {type(value).__name__}"
        assert all(len(block.tokens) == 0 for block in self.model.blocks[-1:] if self._this_round), \
            "the choice ran after a draft token was drawn"
        self.calls += 1
        self.with_c1 += state.c1 is not None
        return super().choose(state)

    _this_round = False


class SpiedHybrid(HybridDrafter):
    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        self.choice._this_round = False
        count = len(self.model.blocks)
        original = self.model.propose

        def watched(*args):
            block = original(*args)
            self.choice._this_round = True  # from here on this round's block exists
            return block

        self.model.propose = watched
        try:
            return super().propose(ids, anchor_position, sampling, generator)
        finally:
            del self.model.propose
            assert len(self.model.blocks) <= count + 1


def fake_prompt() -> PromptInputs:
    return PromptInputs(input_ids=torch.tensor([PROMPT]), text_positions=torch.arange(len(PROMPT)))


def test_the_choice_sees_only_pre_draft_state() -> None:
    assert list(inspect.signature(ThetaChoice.choose).parameters) == ["self", "state"]
    model = WatchedDrafter()
    hybrid = SpiedHybrid(LookupDrafter(3), model, choice=SpyChoice(model))
    hybrid.price_with(SPS, GAMMA)
    generator = torch.Generator().manual_seed(0)
    sources: list[str] = []
    for _ in range(50):
        result = speculative_generate(FakeSession(), fake_prompt(), hybrid, SamplingConfig(1.0),
                                      ScheduledLength(SPS, GAMMA), max_new_tokens=12, generator=generator)
        sources += result.stats.sources
    assert hybrid.choice.calls >= len(sources) and hybrid.choice.with_c1 > 0
    assert {"lookup", "dspark", "plain"} <= set(sources)


def test_the_spy_catches_a_choice_handed_the_block() -> None:
    """The spy is not vacuous: a hybrid that hands its choice the block, or asks after drawing, fails it."""
    model = WatchedDrafter()
    spy = SpyChoice(model)
    block = model.propose(torch.tensor(PROMPT), 1, SamplingConfig(1.0), torch.Generator().manual_seed(0))
    with pytest.raises(AssertionError):
        spy.choose(PreDraftState(2, 0, 0), block)
    with pytest.raises(AssertionError):
        spy.choose(PreDraftState(2, 0, 0, c1=block.confidences))
    block.proposal(1)
    spy._this_round = True
    with pytest.raises(AssertionError, match="after a draft token was drawn"):
        spy.choose(PreDraftState(2, 0, 0))


# ---- the T = 1 joint law ----------------------------------------------------------------------


class PeekingHybrid(HybridDrafter):
    """The negative control: draws the trained drafter's x_1 and takes a plain step when it is 0,
    i.e. the choice depends on a drafted token's value. Biases the output law."""

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        block = self.model.propose(ids, anchor_position, sampling, generator)
        if int(block.proposal(1).tokens[0]) == 0:
            empty = DraftBlock(0)
            empty.source = "plain"
            return empty
        return block


def hybrid_joint(hybrid: HybridDrafter, draws: int = JOINT_DRAWS) -> tuple[dict, dict]:
    sampling = SamplingConfig(1.0)
    generator = torch.Generator().manual_seed(1234)
    counts: dict[tuple[int, ...], int] = {}
    sources: dict[str, int] = {}
    for _ in range(draws):
        result = speculative_generate(FakeSession(), fake_prompt(), hybrid, sampling, ScheduledLength(SPS, GAMMA),
                                      max_new_tokens=3, generator=generator)
        key = tuple(result.token_ids)
        counts[key] = counts.get(key, 0) + 1
        for source in result.stats.sources:
            sources[source] = sources.get(source, 0) + 1
    return counts, sources


def test_hybrid_keeps_the_target_joint_at_t1() -> None:
    hybrid = HybridDrafter(LookupDrafter(3), ConfidentFakeDrafter(),
                           choice=ThetaChoice(GAMMA, True, SPS, lookup_prior=LOOKUP_PRIOR))
    hybrid.price_with(SPS, GAMMA)
    counts, sources = hybrid_joint(hybrid)
    assert min(sources.get(s, 0) for s in ("lookup", "dspark", "plain")) > 1_000, sources  # every source, often
    assert chi_square_pvalue(counts, exact_joint(SamplingConfig(1.0))) > 1e-3


@pytest.mark.slow  # a negative control: its positive case runs in make test, both in make test-all
def test_negative_control_a_hybrid_that_peeks_at_a_drafted_token_fails() -> None:
    counts, _ = hybrid_joint(PeekingHybrid(LookupDrafter(3), ConfidentFakeDrafter()))
    assert chi_square_pvalue(counts, exact_joint(SamplingConfig(1.0))) < 1e-6


# ---- real models: greedy parity, serving, bench -----------------------------------------------


class OracleLookup(LookupDrafter):
    """A lookup side that always matches (with the reference continuation, or a wrong one) or never."""

    def __init__(self, reference: list[int], prompt_length: int, kind: str, vocab: int) -> None:
        super().__init__()
        self.reference, self.prompt_length, self.kind, self.vocab = reference, prompt_length, kind, vocab

    def match(self, ids: torch.Tensor) -> tuple[int, torch.Tensor]:
        if self.kind == "never":
            return 0, ids[:0]
        rest = self.reference[ids.numel() - self.prompt_length:]
        tokens = rest if self.kind == "right" else [(t + 1) % self.vocab for t in rest]
        return 3, torch.tensor(tokens, dtype=torch.long)


@pytest.fixture(scope="module")
def setup(tiny_trained_drafter) -> tuple[Target, str]:
    target_dir, drafter_dir = tiny_trained_drafter
    return load_target(str(target_dir)), str(drafter_dir)


@pytest.mark.parametrize("kind", ["right", "wrong", "never"])
def test_greedy_parity_with_always_and_never_matching_lookups(setup, kind: str) -> None:
    target, drafter_dir = setup
    gamma = 4  # the tiny drafter's block size
    sps = SPSTable.from_inline([1.0, 0.9, 0.85, 0.8, 0.75])
    for prompt in ["Tell me a story.", "List three fruits and a vegetable."]:
        inputs = target.encode(prompt=prompt)
        want = hf_greedy(target, inputs, 40)
        for policy, table, skip in ((FixedLength(gamma), None, None), (ScheduledLength(sps, gamma), sps, None),
                                    (ScheduledLength(sps, gamma), sps, DraftSkip())):
            hybrid = HybridDrafter(OracleLookup(want, inputs.length, kind, target.vocab_size),
                                   make_drafter(drafter_dir, target))
            hybrid.price_with(table, gamma)
            with target.session(hybrid.feature_layers) as session:
                result = speculative_generate(session, inputs, hybrid, SamplingConfig(), policy, max_new_tokens=40,
                                              eos_ids=target.eos_token_ids, skip=skip)
            assert_parity(target, inputs, result.token_ids, want)
            sources = set(result.stats.sources)
            if kind == "never":
                assert "lookup" not in sources
            elif kind == "right":
                assert sources <= {"lookup", "skipped"} and result.stats.tau > 2.0  # copies the answer


class NeverDraft(DraftSkip):
    """Draft-skip that skips every round it is asked about, and records what it was told."""

    def __init__(self) -> None:
        super().__init__()
        self.asked, self.observed = 0, 0

    def should_draft(self) -> bool:
        self.asked += 1
        return False

    def observe(self, *args) -> None:
        self.observed += 1


@pytest.mark.parametrize("kind", ["right", "never"])
def test_draft_skip_decides_only_the_trained_drafters_rounds(setup, kind: str) -> None:
    """A lookup round costs no forward: draft-skip is neither asked nor taught by it (it runs even when
    every asked round is skipped), while rounds the plan gives the trained drafter are its to skip."""
    target, drafter_dir = setup
    gamma, sps = 4, SPSTable.from_inline([1.0, 0.9, 0.85, 0.8, 0.75])
    inputs = target.encode(prompt="Tell me a story.")
    want = hf_greedy(target, inputs, 40)
    hybrid = HybridDrafter(OracleLookup(want, inputs.length, kind, target.vocab_size), make_drafter(drafter_dir, target))
    hybrid.price_with(sps, gamma)
    skip = NeverDraft()
    with target.session(hybrid.feature_layers) as session:
        result = speculative_generate(session, inputs, hybrid, SamplingConfig(), ScheduledLength(sps, gamma),
                                      max_new_tokens=40, eos_ids=target.eos_token_ids, skip=skip)
    assert_parity(target, inputs, result.token_ids, want)
    sources = result.stats.sources
    if kind == "right":  # every round copies the answer: none asked, none skipped
        assert set(sources) == {"lookup"} and skip.asked == skip.observed == 0
    else:  # every round would be the trained drafter's: each asked, each skipped
        assert set(sources) == {"skipped"} and skip.asked == skip.observed == len(sources)


def test_serving_builds_and_prices_the_hybrid(setup, tiny_trained_drafter) -> None:
    target, drafter_dir = setup
    spec = f"hybrid:{drafter_dir}"
    for mode, priced in (("schedule", True), ("fixed", False)):
        setup_ = build_serving(target, spec, mode)
        assert isinstance(setup_.drafter, HybridDrafter) and setup_.mode == mode
        assert (setup_.drafter.choice.pricer.sps_table is not None) is priced
    with pytest.raises(Exception, match="no trained drafter is shipped"):
        make_drafter("hybrid", target)  # nothing is shipped for the tiny target
    args = ["generate", "--target", str(tiny_trained_drafter[0]), "--drafter", spec, "--prompt", "Hi",
            "--max-new-tokens", "12", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["drafter"] == "hybrid" and sum(row["rounds"] for row in data["by_source"].values()) == data["rounds"]
    bad = CliRunner().invoke(app, args[:4] + ["hybrid:/no/such/dir"] + args[5:])
    assert bad.exit_code == 2 and "--drafter" in bad.stderr


def test_bench_reports_rounds_and_tau_by_source(setup) -> None:
    target, drafter_dir = setup
    config = BenchConfig(modes=["target", "lookup", "fixed", "hybrid", "hybrid-schedule"], max_new_tokens=16,
                         warmup=False)
    modes, notices = build_modes(target, config, f"hybrid:{drafter_dir}")
    assert [m.name for m in modes] == ["target", "lookup", "fixed", "hybrid", "hybrid-schedule"]
    report = run_bench(target, modes, builtin_prompts(target, 2), config, drafter=f"hybrid:{drafter_dir}")
    summary = report["summary"]
    for name in ("lookup", "fixed", "hybrid", "hybrid-schedule"):
        by_source = summary[name]["by_source"]
        assert sum(row["rounds"] for row in by_source.values()) == summary[name]["rounds"], name
        assert summary[name]["parity"], name
    assert set(summary["lookup"]["by_source"]) == {"lookup"} and set(summary["fixed"]["by_source"]) == {"dspark"}
    assert set(summary["hybrid"]["by_source"]) <= {"lookup", "dspark", "plain"}
    rounds = summary["hybrid"]["by_source"]
    tau = (sum(r["rounds"] * r["tau"] for r in rounds.values())) / summary["hybrid"]["rounds"]
    assert tau == pytest.approx(summary["hybrid"]["tau"])
    from rich.console import Console

    console = Console(record=True, width=300)
    console.print(render_bench(report))
    text = console.export_text()
    assert "τ by source" in text and "dspark " in text
