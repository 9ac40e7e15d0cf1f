"""Tree rounds: the best-first builder, the tree acceptance rules and the engine's tree loop.

The distribution tests run the whole tree loop on the synthetic 5-token target of ``helpers`` (whose
trees branch: a flat SPS curve admits every node up to the budget) and compare the joint law of the
first three emitted tokens with the target's exact one by a chi-square test; the negative control
breaks the rule (no residual after a rejection) and must fail.

    .venv/bin/python -m pytest -q tests/serving/test_draft_tree.py
"""

from __future__ import annotations

import functools

import pytest
import torch

import minispark.serving.engine as engine
from minispark.serving.accept import accept_tree_greedy, accept_tree_sampling
from minispark.serving.draft_tree import DraftTree, TreeBuilder, TreeBudget, TreeDrafts, TreePolicy
from minispark.serving.drafters.lookup import LookupDrafter
from minispark.serving.sps import SPSTable
from minispark.target.sampling import SamplingConfig
from tests.helpers import TableTreeDrafts, TreeFakeDrafter, chi_square_pvalue, empirical_joint, exact_joint


#: Engine runs of a default tree joint test (a tree round costs several chain rounds): the negative control fails at
#: it with p near 1e-68; the plain temperatures run 4,000 in make test-all.
TREE_DRAWS = 2_500


def tree_policy(drafts: int = 6, lookup: bool = True) -> TreePolicy:
    return TreePolicy(gamma=3, max_drafts=drafts, lookup=LookupDrafter() if lookup else None)


def branching(tree: DraftTree) -> int:
    """The most children any node has."""
    return max((len(tree.children(n)) for n in range(len(tree))), default=0)


# a tree at T > 0 is proved by the top-k/top-p case below; both plain temperatures in the slow run
@pytest.mark.parametrize("temperature", [pytest.param(0.7, marks=pytest.mark.slow), pytest.param(1.0, marks=pytest.mark.slow)])
def test_tree_sampling_matches_target_joint(temperature: float) -> None:
    sampling = SamplingConfig(temperature)
    counts = empirical_joint(sampling, 4000, 3, drafter=TreeFakeDrafter(), policy_factory=tree_policy)
    assert chi_square_pvalue(counts, exact_joint(sampling)) > 1e-3


def test_tree_sampling_with_top_k_and_top_p_matches_target_joint() -> None:
    sampling = SamplingConfig(0.8, top_p=0.9, top_k=3)
    counts = empirical_joint(sampling, TREE_DRAWS, 3, drafter=TreeFakeDrafter(), policy_factory=tree_policy)
    assert chi_square_pvalue(counts, exact_joint(sampling)) > 1e-3


def test_negative_control_tree_without_residual_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "accept_tree_sampling", functools.partial(accept_tree_sampling, residual=False))
    sampling = SamplingConfig(1.0)
    counts = empirical_joint(sampling, TREE_DRAWS, 3, drafter=TreeFakeDrafter(), policy_factory=tree_policy)
    assert chi_square_pvalue(counts, exact_joint(sampling)) < 1e-6


def test_the_test_trees_branch() -> None:
    """The trees the distribution tests verify have nodes with 2 or more children."""
    sampling = SamplingConfig(0.7)
    builder = tree_policy().builder(TableTreeDrafts([3, 1], sampling), sampling, torch.Generator().manual_seed(0), 2)
    trees = [builder.build(1) for _ in range(20)]
    assert all(tree.drafts == 6 for tree in trees)
    assert max(branching(tree) for tree in trees) >= 2


def test_greedy_tree_keeps_greedy_output() -> None:
    sampling = SamplingConfig(0.0)
    counts = empirical_joint(sampling, 3, 3, drafter=TreeFakeDrafter(), policy_factory=tree_policy)
    want = max(exact_joint(sampling).items(), key=lambda kv: kv[1])[0]
    assert list(counts) == [want]


class ForcedDraws(TreeBuilder):
    """Replaces the token of the ``at``-th drawn node by ``token``: only that draw changes."""

    def __init__(self, *args, at: int, token: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.at, self.token, self.drawn = at, token, 0

    def _draw(self, parent: int, survival: float) -> int:
        node = super()._draw(parent, survival)
        self.drawn += 1
        if self.drawn == self.at:
            self.tree.tokens[node] = self.token
        return node


@pytest.mark.parametrize("at", [1, 2, 3, 4])
def test_admission_never_reads_the_admitted_token(at: int) -> None:
    """Changing only the value drawn at the at-th node leaves every admission up to that node the same: the
    node was admitted (and placed) before its token existed (Appendix A cannot happen)."""
    sampling = SamplingConfig(1.0)
    sps = SPSTable.from_inline([1.0, 0.9, 0.85, 0.8, 0.7, 0.6, 0.55, 0.5])
    budget = TreeBudget(7, sps.curve(8))

    def build(builder_type, **kwargs) -> DraftTree:
        drafts = TableTreeDrafts([3, 1], sampling)
        builder = builder_type(drafts, sampling, torch.Generator().manual_seed(5), budget, **kwargs)
        return builder.build(1)

    plain = build(TreeBuilder)
    for token in range(5):
        forced = build(ForcedDraws, at=at, token=token)
        assert forced.parents[:at + 1] == plain.parents[:at + 1]
        assert forced.survival[:at + 1] == plain.survival[:at + 1]


def test_greedy_tree_rule() -> None:
    # anchor 0 → children 1 (token 2) and 2 (token 3); node 2 → child 3 (token 4)
    tokens, parents = [7, 2, 3, 4], [-1, 0, 0, 2]
    logits = torch.full((4, 6), -1.0)
    logits[0, 3] = logits[2, 4] = logits[3, 1] = 5.0
    logits[1, 0] = 5.0
    assert accept_tree_greedy(tokens, parents, logits) == ([2, 3], 1)
    logits[0, 3], logits[0, 5] = -1.0, 9.0  # the target's first token is no child: no draft survives
    assert accept_tree_greedy(tokens, parents, logits) == ([], 5)


def test_tree_sampling_one_level_is_exact() -> None:
    """One node with three children (two drawn without replacement from q, then a deterministic one): the
    first emitted token's law is p."""
    p = torch.tensor([0.1, 0.4, 0.2, 0.3])
    q = torch.tensor([0.5, 0.2, 0.2, 0.1])
    generator = torch.Generator().manual_seed(0)
    hits = torch.zeros(4)
    n = 20_000
    for _ in range(n):
        x1 = int(torch.multinomial(q, 1, generator=generator))
        q2 = q.clone()
        q2[x1] = 0.0
        q2 = q2 / q2.sum()
        x2 = int(torch.multinomial(q2, 1, generator=generator))
        tokens, parents = [9, x1, x2, 3], [-1, 0, 0, 0]
        path, token = accept_tree_sampling(tokens, parents, [None, q, q2, None], torch.stack([p] * 4), generator)
        hits[tokens[path[0]] if path else token] += 1
    assert torch.allclose(hits / n, p, atol=0.012)


def test_chain_is_a_tree_with_one_child_per_node() -> None:
    tree = DraftTree.chain(5, [1, 2, 3])
    assert tree.parents == [-1, 0, 1, 2] and tree.depths == [0, 1, 2, 3]
    assert tree.path(3) == [1, 2, 3]


def test_lookup_branch_shares_its_prefix_with_drafted_nodes() -> None:
    sampling = SamplingConfig(0.0)
    drafts = TableTreeDrafts([3, 1], sampling)
    greedy_first = int(drafts.distribution([1]).argmax())
    builder = TreeBuilder(drafts, sampling, None, TreeBudget(6))
    tree = builder.build(1, lookup=[greedy_first, 4], lookup_survival=[0.99, 0.99])
    first = [i for i in tree.children(0) if tree.tokens[i] == greedy_first]
    assert len(first) == 1  # one node for the token both propose
    assert len(set(tree.tokens[i] for i in tree.children(0))) == len(tree.children(0))


def test_a_drafter_without_trees_gets_the_lookup_branch_alone() -> None:
    builder = TreeBuilder(TreeDrafts(), SamplingConfig(0.0), None, TreeBudget(6))
    tree = builder.build(1, lookup=[2, 3, 4], lookup_survival=[0.9, 0.8, 0.7])
    assert tree.tokens == [1, 2, 3, 4] and tree.parents == [-1, 0, 1, 2]
    assert tree.sources[1:] == ["lookup"] * 3


def test_the_theta_rule_stops_a_tree_where_width_costs_more_than_it_wins() -> None:
    sampling = SamplingConfig(0.0)
    drafts = TableTreeDrafts([3, 1], sampling)
    steep = SPSTable.from_inline([1.0, 0.5, 0.3, 0.2, 0.1, 0.1, 0.1])
    flat = SPSTable.from_inline([1.0] * 7)
    small = TreeBuilder(drafts, sampling, None, TreeBudget(6, steep.curve(7))).build(1)
    full = TreeBuilder(drafts, sampling, None, TreeBudget(6, flat.curve(7))).build(1)
    assert small.drafts < full.drafts == 6


# ---- the tree loop on real (tiny and embedded) targets ----------------------------------------------------

def tree_generate(target, inputs, drafter, sampling=SamplingConfig(), max_new_tokens: int = 32, runtime_chain=False):
    from minispark.serving.engine import speculative_generate

    with target.session(drafter.feature_layers) as session:
        return speculative_generate(session, inputs, drafter, sampling, TreePolicy(gamma=4, max_drafts=8,
                                    lookup=LookupDrafter()), max_new_tokens=max_new_tokens,
                                    eos_ids=target.eos_token_ids)


@pytest.mark.parametrize("kind", ["llama", "qwen2_5_vl"])
def test_tree_greedy_parity_on_tiny_targets(tiny_dir, kind: str) -> None:
    from minispark.target.loading import load_target
    from tests.helpers import TreeOracleDrafter, assert_parity, hf_greedy, random_dspark

    target = load_target(str(tiny_dir(kind)))
    inputs = target.encode(prompt="Count: one two three one two three one")
    want = hf_greedy(target, inputs, 32)
    drafters = [TreeOracleDrafter(want, inputs.length, True, target.vocab_size),
                TreeOracleDrafter(want, inputs.length, False, target.vocab_size), random_dspark(target),
                LookupDrafter()]
    for drafter in drafters:
        result = tree_generate(target, inputs, drafter)
        assert_parity(target, inputs, result.token_ids, want)
    right = tree_generate(target, inputs, drafters[0])
    assert right.stats.tau > 3.0  # the always-right oracle's path is accepted whole
    assert max(right.stats.proposed_lengths) > 4  # and its trees are wider than a chain


def test_tree_greedy_parity_on_the_embedded_target(embedded_target) -> None:
    from minispark.serving.generate import make_drafter
    from tests.helpers import assert_parity, hf_greedy

    inputs = embedded_target.encode(prompt="Write a Python function that adds two numbers.")
    want = hf_greedy(embedded_target, inputs, 32)
    drafter = make_drafter("drafters/smollm2-135m-dspark", embedded_target)
    result = tree_generate(embedded_target, inputs, drafter)
    assert_parity(embedded_target, inputs, result.token_ids, want)
    assert result.stats.tau > 1.5


def test_a_target_that_cannot_verify_trees_verifies_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers import FakeSession

    monkeypatch.setattr(FakeSession, "supports_trees", False)
    monkeypatch.setattr(FakeSession, "step_tree", lambda *a: pytest.fail("a tree on a chain-only target"))
    sampling = SamplingConfig(1.0)
    counts = empirical_joint(sampling, 300, 3, drafter=TreeFakeDrafter(), policy_factory=tree_policy)
    assert sum(counts.values()) == 300
