"""A round's draft tree, built best-first and scheduled node by node (propose + schedule of a tree round).

A chain of γ drafts lives or dies on its first token; a tree verifies several candidates for it (and for
every later position) in the same target forward. The tree here:

* **Nodes.** Node 0 is the anchor (the last committed token). Every other node has a parent, a token, a
  depth (1..γ) and the distribution ``q`` its token was drawn from (None: a deterministic token, whose
  ``q`` is the one-hot of it: greedy top-k children, the n-gram lookup's branch). Children of a node are
  kept in the order they were drawn; that is the order the sampling rule tries them in (``accept.py``).
* **Expansion.** A node's children come from the drafter's distribution at the node's depth given the
  node's own token (``TreeDrafts.distribution``: for DSpark the backbone's base logits U_{d+1} plus the
  Markov head's bias of the node's token; without a head the base logits alone, i.e. per-position top-k).
  At T 0 the j-th child is the j-th most probable token not yet a child; at T > 0 it is drawn from the
  distribution with the node's existing children removed (sampling without replacement), and that
  renormalised distribution is its ``q``.
* **The lookup branch.** The n-gram lookup's continuation is a chain from the anchor whose tokens are known
  before the round; it shares every prefix it has with drafted nodes (a drafted child with the lookup's
  token *is* that branch's node, and no child is drawn twice).
* **Best-first schedule (Algorithm 1 over nodes).** Every slot (a parent and the next child it would get)
  has an estimated survival ``a`` = the parent's ``a`` × the chance that child is accepted: the calibrated
  confidence head's c at the parent (c_{d+1} from h_{d+1} and the parent's token) scaled by the slot's
  draft probability relative to the parent's best, or the draft probability alone without a head; a lookup
  slot's by the prior for its matched n-gram length. Slots are admitted by ``a`` descending while
  Θ = (1 + Σ a) · SPS(1 + nodes) rises, and the loop **stops at the first drop**, as the chain's scheduler
  does (``schedule.py``).

Why this keeps the output distribution exactly the target's. Every decision to add a node is taken from
quantities that exist before that node's token is drawn: the parent's token and distribution, the
confidence at the parent, and the tokens of nodes already drawn. The node's own token is drawn only after
its slot is admitted, and an admitted node is always verified. So a node's value never decides whether it
is verified (the design notes' Appendix A case cannot be written here: ``TreeBuilder`` only calls ``draw``
on an admitted slot, tested), and the verifier's rule (``accept.accept_tree_sampling``) is exact for any
children drawn this way: each child's ``q`` is the distribution it was actually drawn from given the draws
before it. Nothing of the target's forward or its random draws is read while building the tree. At T 0 the
output is the target's argmax path whatever the tree holds.

    .venv/bin/python -m pytest -q tests/serving/test_draft_tree.py
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from minispark.core.defaults import DEFAULT_TREE_DRAFTS, HYBRID_LOOKUP_PRIOR
from minispark.target.sampling import SamplingConfig, sample

if TYPE_CHECKING:
    from minispark.model.calibration import Calibration
    from minispark.serving.sps import SPSTable


@dataclass
class DraftTree:
    """The nodes of one round's tree; node 0 is the anchor.

    tokens:   per node, its target token id
    parents:  per node, its parent's index (−1 for the anchor); parents come before children
    depths:   per node, its depth (0 for the anchor)
    q:        per node, the distribution (V,) over the target vocabulary its token was drawn from, or None
              for a deterministic token (one-hot); None for the anchor
    survival: per node, the estimated survival the schedule admitted it with (1 for the anchor)
    sources:  per node, "draft" or "lookup" (the anchor: "anchor")
    """

    tokens: list[int]
    parents: list[int] = field(default_factory=lambda: [-1])
    depths: list[int] = field(default_factory=lambda: [0])
    q: list[torch.Tensor | None] = field(default_factory=lambda: [None])
    survival: list[float] = field(default_factory=lambda: [1.0])
    sources: list[str] = field(default_factory=lambda: ["anchor"])

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def drafts(self) -> int:
        """Draft nodes (the anchor excluded): the verify is 1 + drafts tokens."""
        return len(self.tokens) - 1

    def add(self, parent: int, token: int, q: torch.Tensor | None, survival: float, source: str) -> int:
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.depths.append(self.depths[parent] + 1)
        self.q.append(q)
        self.survival.append(survival)
        self.sources.append(source)
        return len(self.tokens) - 1

    def children(self, node: int) -> list[int]:
        """``node``'s children in the order they were drawn."""
        return [i for i, p in enumerate(self.parents) if p == node]

    def child_with(self, node: int, token: int) -> int | None:
        return next((i for i in self.children(node) if self.tokens[i] == token), None)

    def path(self, node: int) -> list[int]:
        """Node indices from the first draft after the anchor down to ``node`` (empty for the anchor)."""
        out = []
        while node > 0:
            out.append(node)
            node = self.parents[node]
        return out[::-1]

    @staticmethod
    def chain(anchor: int, tokens: Sequence[int], q: Sequence[torch.Tensor | None] | None = None) -> "DraftTree":
        """A chain: one child per node (what a fixed-length round verifies)."""
        tree = DraftTree(tokens=[int(anchor)])
        for k, token in enumerate(tokens):
            tree.add(k, int(token), None if q is None else q[k], 1.0, "draft")
        return tree

    @staticmethod
    def chain_parents(n: int) -> list[int]:
        """The parents of a chain of ``n`` nodes: each node's parent is the one before it."""
        return list(range(-1, n - 1))

    @property
    def is_chain(self) -> bool:
        return self.parents == DraftTree.chain_parents(len(self.parents))

    def tensors(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens (n,), parents (n,)) long: what ``TargetSession.step_tree`` forwards."""
        return (torch.tensor(self.tokens, dtype=torch.long, device=device),
                torch.tensor(self.parents, dtype=torch.long, device=device))


class TreeDrafts:
    """What a drafter offers a tree: the distribution of a node's children given the node's path.
    Subclassed per drafter; the base class drafts nothing (a tree of the lookup branch alone).

    ``depth_limit`` is the deepest node it can draft (γ)."""

    depth_limit: int = 0

    def distribution(self, path: Sequence[int]) -> torch.Tensor:
        """(V,) float, the draft distribution of the children of the node whose tokens from the anchor down
        are ``path`` (so the children sit at depth ``len(path)``), after the sampling settings' temperature,
        top-k and top-p (at T 0: temperature 1, used for ranking only); zero outside the drafter's
        vocabulary."""
        raise NotImplementedError

    def confidence(self, path: Sequence[int]) -> float | None:
        """The raw confidence c at depth ``len(path)`` below the node ``path`` (None without a head)."""
        return None


@dataclass(order=True)
class _Slot:
    """A candidate child: admitted by ``-neg_survival`` descending (``order`` breaks ties, first pushed first)."""

    neg_survival: float
    order: int
    owner: int = field(compare=False)  # which tree of the round (one per request in flight)
    parent: int = field(compare=False)
    lookup_index: int = field(compare=False, default=-1)  # ≥ 0: the lookup branch's token at this index


class _Frontier:
    """Every tree's candidate slots in one heap, so several requests' trees compete for one verify."""

    def __init__(self) -> None:
        self.heap: list[_Slot] = []
        self.pushed = 0

    def push(self, survival: float, owner: int, parent: int, lookup_index: int = -1) -> None:
        self.pushed += 1
        heapq.heappush(self.heap, _Slot(-survival, self.pushed, owner, parent, lookup_index))


@dataclass
class TreeBudget:
    """How big a tree may grow: at most ``max_drafts`` draft nodes (the lookup branch's included) and an SPS
    curve (``sps[n-1]`` = steps/s of a verify of n tokens; None: flat, every node up to the budget pays);
    ``chain`` allows one child per node."""

    max_drafts: int
    sps: Sequence[float] | None = None
    chain: bool = False  # one child per node: a target whose KV cache cannot verify a tree verifies chains

    def rate(self, tokens: int) -> float:
        if self.sps is None:
            return 1.0
        return self.sps[min(tokens, len(self.sps)) - 1]


class TreeBuilder:
    """Builds one request's :class:`DraftTree`: best-first slots, admitted by the Θ rule, drawn only once
    admitted. :func:`grow_trees` runs several builders (the requests in flight) against one verify.

    ``scale(depth, c)`` maps a raw confidence to a calibrated one (identity without a calibration);
    ``lookup`` is the lookup branch (tokens after the anchor) with ``lookup_survival[k]``, the chance its
    k-th token survives given the ones before it did."""

    def __init__(self, drafts: TreeDrafts, sampling: SamplingConfig, generator: torch.Generator | None,
                 budget: TreeBudget, scale: Callable[[int, float], float] | None = None) -> None:
        self.drafts, self.sampling, self.generator, self.budget = drafts, sampling, generator, budget
        self.scale = scale or (lambda _depth, c: c)

    def build(self, anchor: int, lookup: Sequence[int] = (), lookup_survival: Sequence[float] = ()) -> DraftTree:
        """The tree of one request verified alone (priced on the budget's curve)."""
        return grow_trees([self], [(anchor, lookup, lookup_survival)], self.budget.rate)[0]

    def begin(self, frontier: _Frontier, owner: int, anchor: int, lookup: Sequence[int] = (),
              lookup_survival: Sequence[float] = ()) -> None:
        """Start a tree at ``anchor``: its first slots go into ``frontier`` under the index ``owner``."""
        self.frontier, self.owner = frontier, owner
        self.tree = DraftTree(tokens=[int(anchor)])
        self.lookup, self.lookup_survival = lookup, lookup_survival
        self._confidences: dict[int, float | None] = {}
        self._distributions: dict[int, tuple[torch.Tensor, float]] = {}  # node -> (probs (V,), best)
        self._push_child(0)
        if lookup:
            self._push_lookup(0, 0, 1.0)

    @property
    def full(self) -> bool:
        return self.tree.drafts >= self.budget.max_drafts

    def shared(self, slot: _Slot) -> int | None:
        """A lookup slot whose token needs no new node: the drafted child that already holds it (the branch
        goes on below it, its survival raised) or −1 where a chain's one child took the place; else None."""
        if slot.lookup_index < 0:
            return None
        tree = self.tree
        existing = tree.child_with(slot.parent, int(self.lookup[slot.lookup_index]))
        if existing is None:
            return -1 if self.budget.chain and tree.children(slot.parent) else None
        tree.survival[existing] = max(tree.survival[existing], -slot.neg_survival)
        self._push_lookup(existing, slot.lookup_index + 1, -slot.neg_survival)
        return existing

    def admit(self, slot: _Slot) -> None:
        """Add the admitted slot's node (drawn now) and push the slots it opens."""
        survival = -slot.neg_survival
        if slot.lookup_index >= 0:
            node = self.tree.add(slot.parent, int(self.lookup[slot.lookup_index]), None, survival, "lookup")
            self._push_lookup(node, slot.lookup_index + 1, survival)
        else:
            node = self._draw(slot.parent, survival)
            self._push_child(slot.parent)  # the parent's next child, ranked from what exists now
        self._push_child(node)

    # ---- slots ---------------------------------------------------------------------------------------

    def _path(self, node: int) -> list[int]:
        return [self.tree.tokens[0]] + [self.tree.tokens[i] for i in self.tree.path(node)]

    def _confidence(self, node: int) -> float | None:
        """The calibrated chance the node's best child survives, from the node's path alone (None without a
        confidence head: the draft probability stands in for it)."""
        if node not in self._confidences:
            raw = self.drafts.confidence(self._path(node))
            self._confidences[node] = None if raw is None else self.scale(self.tree.depths[node] + 1, raw)
        return self._confidences[node]

    def _distribution(self, node: int) -> tuple[torch.Tensor, float]:
        """The node's children's distribution (V,) and its best probability (computed once per node)."""
        if node not in self._distributions:
            probs = self.drafts.distribution(self._path(node))  # (V,)
            self._distributions[node] = (probs, float(probs.max()))
        return self._distributions[node]

    def _remaining(self, node: int) -> torch.Tensor:
        """(V,) the node's distribution without the tokens of its existing children (unnormalised)."""
        probs = self._distribution(node)[0]
        taken = [self.tree.tokens[i] for i in self.tree.children(node)]
        if not taken:
            return probs
        rest = probs.clone()
        rest[taken] = 0.0
        return rest

    def _push_child(self, node: int) -> None:
        """Push ``node``'s next drafted child slot, if it can have one: its estimate is the node's survival ×
        c × the best remaining probability relative to the best (c for the first child, less for later ones).
        A first child's estimate needs only c: the node's distribution is computed once a child is drawn."""
        tree = self.tree
        if tree.depths[node] >= self.drafts.depth_limit or (self.budget.chain and tree.children(node)):
            return
        c = self._confidence(node)
        if c is not None and not tree.children(node):
            share = c
        else:
            best = self._distribution(node)[1]
            left = float(self._remaining(node).max())
            if left <= 0.0:
                return
            share = (best if c is None else c) * left / max(best, 1e-30)
        self.frontier.push(tree.survival[node] * share, self.owner, node)

    def _push_lookup(self, parent: int, index: int, survival: float) -> None:
        if index >= min(len(self.lookup_survival), len(self.lookup)):  # the policy already cut the branch at γ
            return
        self.frontier.push(survival * float(self.lookup_survival[index]), self.owner, parent, index)

    # ---- drawing --------------------------------------------------------------------------------------

    def _draw(self, parent: int, survival: float) -> int:
        """Draw the admitted slot's token: the best token not yet a child at T 0, else a sample from the
        distribution without the existing children, renormalised (that is its ``q``)."""
        rest = self._remaining(parent)
        if self.sampling.greedy:
            token, q = int(rest.argmax()), None
        else:
            q = rest / rest.sum()
            token = int(sample(q, self.generator))
        return self.tree.add(parent, token, q, survival, "draft")


Root = tuple[int, Sequence[int], Sequence[float]]  # (anchor, lookup branch, its tokens' survival)


def grow_trees(builders: Sequence[TreeBuilder], roots: Sequence[Root], rate: Callable[[int], float]) -> list[DraftTree]:
    """The trees of the requests verified in one forward (``builders[r]`` grows request r's from ``roots[r]``),
    best slot first across all of them (Algorithm 1 over nodes): Θ = (R + Σ a) · rate(W), where W is the
    widest tree's node count (the verify's padded row; one tree: its size) and ``rate(W)`` its steps/s. A slot
    inside the current width adds expected tokens for free, one past it widens every row. Stops at the first
    slot that does not raise Θ; a tree at its budget's ``max_drafts`` takes no more nodes."""
    frontier = _Frontier()
    for owner, (builder, (anchor, lookup, survival)) in enumerate(zip(builders, roots)):
        builder.begin(frontier, owner, anchor, lookup, survival)
    expected = float(len(builders))  # each anchor yields one token
    width = 1
    theta = expected * rate(width)
    while frontier.heap:
        slot = heapq.heappop(frontier.heap)
        builder = builders[slot.owner]
        if builder.full or builder.shared(slot) is not None:
            continue
        survival = -slot.neg_survival
        grown, grown_width = expected + survival, max(width, len(builder.tree) + 1)
        grown_theta = grown * rate(grown_width)
        if survival <= 0.0 or grown_theta <= theta:
            break  # the losslessness rule: never look past the first drop
        expected, theta, width = grown, grown_theta, grown_width
        builder.admit(slot)
    return [builder.tree for builder in builders]


class LookupMatch(Protocol):
    def match(self, ids: torch.Tensor) -> tuple[int, torch.Tensor]: ...


@dataclass
class TreePolicy:
    """How a tree round is shaped: nodes at most ``gamma`` deep (the drafter's block size), at most
    ``max_drafts`` draft nodes, admitted by the Θ rule against ``sps_table`` (None: a flat curve, every node
    up to the budget), confidences mapped through ``calibration``; ``lookup`` (an n-gram matcher, e.g.
    ``LookupDrafter``) adds its continuation as a branch, its tokens' survival taken from ``lookup_prior``
    by matched n-gram length."""

    gamma: int
    max_drafts: int = DEFAULT_TREE_DRAFTS
    sps_table: SPSTable | None = None
    calibration: Calibration | None = None
    lookup: LookupMatch | None = None
    lookup_prior: Mapping[int, Sequence[float]] = field(default_factory=lambda: HYBRID_LOOKUP_PRIOR)

    def budget(self, context_length: int, chain: bool = False) -> TreeBudget:
        """The round's budget at ``context_length``: never wider than the SPS table measured."""
        if self.sps_table is None:
            return TreeBudget(self.max_drafts, chain=chain)
        drafts = min(self.max_drafts, self.sps_table.max_tokens - 1)
        return TreeBudget(drafts, self.sps_table.curve(drafts + 1, context_length), chain)

    def scale(self, depth: int, confidence: float) -> float:
        """The calibrated confidence at ``depth`` (raw where the calibration has no position for it)."""
        if self.calibration is None or depth > len(self.calibration.temperatures):
            return confidence
        return self.calibration.scale(depth, confidence)

    def lookup_branch(self, ids: torch.Tensor) -> tuple[list[int], list[float]]:
        """The lookup's continuation after ``ids`` (at most ``gamma`` tokens) and each token's chance to
        survive given the ones before it did (the prior's last value past its end)."""
        if self.lookup is None:
            return [], []
        n, continuation = self.lookup.match(ids)
        if n == 0 or not continuation.numel():
            return [], []
        prior = self.lookup_prior.get(n) or self.lookup_prior[max(self.lookup_prior)]
        tokens = continuation[: self.gamma].tolist()
        return tokens, [prior[min(k, len(prior) - 1)] for k in range(len(tokens))]

    def builder(self, drafts: TreeDrafts, sampling: SamplingConfig, generator: torch.Generator | None,
                context_length: int, chain: bool = False) -> TreeBuilder:
        return TreeBuilder(drafts, sampling, generator, self.budget(context_length, chain), self.scale)

    def grow_across(self, drafts: Sequence[TreeDrafts], ids: Sequence[torch.Tensor], samplings: Sequence[SamplingConfig],
                    generators: Sequence[torch.Generator | None], rate: Callable[[int], float], max_drafts: int,
                    chain: bool = False) -> list[DraftTree]:
        """The trees of R requests verified together (request r: its drafter's ``drafts[r]``, committed ``ids[r]``
        with the anchor last), each at most ``max_drafts`` nodes, priced by ``rate(W)``: steps/s of the padded
        verify whose widest row is W tokens."""
        builders = [TreeBuilder(d, s, g, TreeBudget(min(self.max_drafts, max_drafts), chain=chain), self.scale)
                    for d, s, g in zip(drafts, samplings, generators)]
        return grow_trees(builders, [(int(i[-1]), *self.lookup_branch(i)) for i in ids], rate)
