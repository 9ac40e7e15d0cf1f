"""The speculative decoding loop: propose → schedule → verify → accept → commit.

The engine sees token ids and tensors only (prompts, templates and images stay in ``target``).
One round:

1. propose:  the drafter returns a draft block after the anchor (the last committed token):
   up to γ positions with p_d and confidences, drawn lazily (``draft_block.DraftBlock``).
2. schedule: the length policy admits positions in order, each from c_k before x_k is drawn
   (``schedule.scheduled_length``) → the proposal x_1..x_ℓ; ℓ = 0 is a plain decode step.
   Draft-skip (``draft_skip.py``) may leave the drafter out of a round beforehand (steps 1-2):
   the round is then a plain decode step too.
3. verify:   ONE target forward over [anchor, x_1..x_ℓ] on the KV cache.
4. accept:   greedy or rejection sampling (``accept.py``) → n accepted drafts and one next token.
5. commit:   crop the target KV cache to the committed length (no re-prefill) and hand the drafter
   the features of the newly cached tokens.

Every round is a tree (``draft_tree.DraftTree``); a chain is a tree with one child per node, so one verify,
accept and commit serve both. A length policy's round (``propose_chain``) is the scheduled block as a chain;
a tree round (``TreePolicy``, ``propose_tree``) is built best-first under the Θ rule. Verify is one forward
(a plain step for a chain, a tree attention mask otherwise: ``TargetSession.step_tree``), accept walks the
tree (``accept.accept_tree_*``: for a chain exactly the rules above) and commit keeps the accepted path's KV
rows (``TargetSession.keep_rows``: a crop for a chain). ``verify``/``accept``/``commit`` below are the chain
steps the batched decoder runs for several requests at once (``batched.py``).

The anchor is never in the target KV cache: the prefill covers the prompt minus its last token,
which is the first round's anchor. So every round, prefill included, has the same shape.

A session spans turns: after a stop the KV cache and the drafter's context hold exactly the kept
output (minus its last token, the next anchor), so a later turn's prompt — the whole conversation
so far plus the new user turn — only prefills what the cache does not already hold (``reuse``).

    minispark generate --drafter lookup --prompt "Say hello" --json
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from minispark.serving.accept import accept as accept_rule, accept_tree_greedy, accept_tree_sampling
from minispark.serving.draft_block import DraftBlock, Proposal
from minispark.serving.draft_tree import DraftTree, TreeDrafts, TreePolicy
from minispark.serving.drafters.base import Drafter
from minispark.serving.draft_skip import SkipPolicy
from minispark.target.sampling import SamplingConfig, make_generator, probabilities
from minispark.serving.schedule import LengthPolicy, scheduled_length
from minispark.target.session import PromptInputs, StepOutput, TargetSession


@dataclass
class GenerationStats:
    """Per-generation metrics: τ counts the emitted target token, so a plain decode step has τ = 1."""

    rounds: int = 0
    accepted_lengths: list[int] = field(default_factory=list)
    proposed_lengths: list[int] = field(default_factory=list)
    new_tokens: int = 0
    prefill_tokens: int = 0  # prompt tokens forwarded by this generation's prefill
    reused_tokens: int = 0  # prompt tokens already in the KV cache from earlier turns
    prefill_s: float = 0.0
    wall_s: float = 0.0
    # Seconds spent in each step, summed over rounds (bench's per-round breakdown of where a round's time goes).
    # propose_s is the drafter's time: the block's forward and the draws the schedule step makes.
    propose_s: float = 0.0
    verify_s: float = 0.0
    accept_commit_s: float = 0.0
    skipped_rounds: int = 0  # rounds draft-skip left the drafter out of (a plain target step)
    # Per round, the source of its proposal: the drafter's name, the hybrid drafter's choice
    # (lookup / dspark / plain) or "skipped" (draft-skip); bench breaks τ and rounds down by it.
    sources: list[str] = field(default_factory=list)

    @property
    def tau(self) -> float:
        """Mean tokens committed per round (accepted drafts + the target's own token)."""
        return (sum(self.accepted_lengths) + self.rounds) / self.rounds if self.rounds else 0.0

    @property
    def acceptance_per_position(self) -> list[float]:
        """Acceptance rate of draft position k; denominator = rounds that proposed position k."""
        longest = max(self.proposed_lengths, default=0)
        rates = []
        for k in range(1, longest + 1):
            proposed = sum(1 for length in self.proposed_lengths if length >= k)
            accepted = sum(1 for length in self.accepted_lengths if length >= k)
            rates.append(accepted / proposed)
        return rates

    @property
    def by_source(self) -> dict[str, dict]:
        """Rounds, drafts verified per round and τ of the rounds of each source."""
        rounds: dict[str, list[int]] = {}
        for index, source in enumerate(self.sources):
            rounds.setdefault(source, []).append(index)
        return {source: {"rounds": len(rows),
                         "drafts_per_round": sum(self.proposed_lengths[i] for i in rows) / len(rows),
                         "tau": 1.0 + sum(self.accepted_lengths[i] for i in rows) / len(rows)}
                for source, rows in rounds.items()}

    @property
    def verify_width(self) -> float:
        """Mean tokens a round's verify forwarded: the anchor plus the drafts (a chain's length, a tree's nodes)."""
        return 1.0 + sum(self.proposed_lengths) / self.rounds if self.rounds else 0.0

    @property
    def accepted_depth(self) -> float:
        """Mean drafts accepted per round (the accepted path's depth in a tree)."""
        return sum(self.accepted_lengths) / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            "rounds": self.rounds,
            "tau": self.tau,
            "acceptance_per_position": self.acceptance_per_position,
            "mean_proposed": sum(self.proposed_lengths) / self.rounds if self.rounds else 0.0,
            "verify_width": self.verify_width,
            "accepted_depth": self.accepted_depth,
            "new_tokens": self.new_tokens,
            "prefill_tokens": self.prefill_tokens,
            "reused_tokens": self.reused_tokens,
            "prefill_s": self.prefill_s,
            "wall_s": self.wall_s,
            "tokens_per_s": self.tokens_per_s,
            "propose_s": self.propose_s,
            "verify_s": self.verify_s,
            "accept_commit_s": self.accept_commit_s,
            "skipped_rounds": self.skipped_rounds,
            "by_source": self.by_source,
        }


@dataclass
class GenerationResult:
    token_ids: list[int]
    stop_reason: str  # "eos" | "stop" | "max_tokens" | "interrupted"
    stats: GenerationStats


@dataclass
class DecodeState:
    """Committed tokens (prompt included) on CPU; the last one is the anchor, not yet in the KV cache."""

    ids: torch.Tensor
    prompt_length: int

    @property
    def anchor(self) -> torch.Tensor:
        return self.ids[-1:]

    @property
    def new_ids(self) -> list[int]:
        return self.ids[self.prompt_length:].tolist()


def prefill(session: TargetSession, drafter: Drafter, prompt: PromptInputs, reuse: bool) -> int:
    """Bring the KV cache and the drafter's context to ``prompt`` minus its last token (the anchor).

    With ``reuse`` the longest cached prefix of ``prompt`` is kept (a later turn of a session) and
    only the rest is forwarded; otherwise the session must be empty. Returns the tokens kept."""
    keep = kept_prefix(session, drafter, prompt) if reuse else 0
    if reuse:
        session.crop(keep)
    out = session.prefill(prompt, prompt.length - 1, start=keep)
    new_ids = prompt.input_ids[0, keep:-1].cpu()  # (P-1-keep,)
    positions = prompt.text_positions[keep:-1]
    if keep == 0:
        drafter.reset(new_ids, out.features, positions)
    else:
        drafter.rollback(int(prompt.text_positions[keep]))
        drafter.extend(new_ids, out.features, positions)
    return keep


def kept_prefix(session: TargetSession, drafter: Drafter, prompt: PromptInputs, offered: int | None = None) -> int:
    """How many cached tokens a prefill of ``prompt`` keeps: the ``offered`` prefix (the session's own common
    prefix by default), when ``drafter`` holds every row its first anchor reads before it; else no more than
    the tokens before those rows, which the prefill then forwards."""
    keep = session.reusable(prompt) if offered is None else offered
    if not keep:
        return 0
    positions = prompt.text_positions  # (P,)
    oldest = drafter.oldest_read(int(positions[-1]))
    if drafter.holds(oldest, int(positions[keep])):
        return keep
    return min(keep, int((positions[:-1] < oldest).sum()))


def propose(drafter: Drafter, state: DecodeState, session: TargetSession, sampling: SamplingConfig,
            generator: torch.Generator) -> DraftBlock:
    """Step 1: the drafter's block after the anchor (nothing drawn past what the schedule asks)."""
    anchor_position = int(session.text_positions(session.cache_length, 1)[0])
    return drafter.propose(state.ids, anchor_position, sampling, generator)


def schedule(block: DraftBlock, policy: LengthPolicy, state: DecodeState) -> Proposal:
    """Step 2: the prefix of the block to verify, admitted position by position before each draw
    (all of a block whose length its drafter fixed before drawing it, up to γ)."""
    if block.fixed_length:
        return block.proposal(min(block.size, policy.gamma))
    return block.proposal(scheduled_length(policy, block.confidence, block.size, state.ids.numel()))


def verify(session: TargetSession, state: DecodeState, proposal: Proposal) -> StepOutput:
    """Step 3: one target forward over [anchor, x_1..x_ℓ] → (ℓ+1, V) logits."""
    device = session.target.device
    block = torch.cat([state.anchor, proposal.tokens.cpu()]).to(device)  # (ℓ+1,)
    return session.step(block)


def accept(proposal: Proposal, verified: StepOutput, sampling: SamplingConfig,
           generator: torch.Generator) -> tuple[int, int]:
    """Step 4: how many drafts survive, and the token the target emits after them."""
    device = verified.logits.device
    draft_probs = proposal.probs.to(device) if proposal.probs is not None else None
    return accept_rule(proposal.tokens.to(device), draft_probs, verified.logits, sampling, generator)


def commit(session: TargetSession, drafter: Drafter, state: DecodeState, proposal: Proposal,
           accepted: int, next_token: int, verified: StepOutput) -> list[int]:
    """Step 5: keep [anchor, x_1..x_n] in the KV cache, append [x_1..x_n, next] to the sequence."""
    start = session.cache_length - len(proposal) - 1  # cache length before this round's verify
    session.crop(start + accepted + 1)
    cached = torch.cat([state.anchor, proposal.tokens[:accepted].cpu()])  # (n+1,)
    features = verified.features[: accepted + 1] if verified.features is not None else None
    drafter.commit(accepted, cached, features, session.text_positions(start, accepted + 1))
    emitted = proposal.tokens[:accepted].tolist() + [next_token]
    state.ids = torch.cat([state.ids, torch.tensor(emitted, dtype=state.ids.dtype)])
    return emitted


def propose_chain(drafter: Drafter, state: DecodeState, session: TargetSession, sampling: SamplingConfig,
                  generator: torch.Generator, policy: LengthPolicy, drafting: bool = True) -> tuple[DraftTree, str]:
    """Steps 1-2 of a chain round (the length policies): the drafter's block, its scheduled prefix as a tree of
    one child per node, and the round's source; a round draft-skip leaves the drafter out of is the anchor alone."""
    if not drafting:
        return DraftTree(tokens=[int(state.ids[-1])]), "skipped"
    block = propose(drafter, state, session, sampling, generator)
    proposal = schedule(block, policy, state)
    q = None if proposal.probs is None else list(proposal.probs)  # (V,) per draft: what each was drawn from
    return DraftTree.chain(int(state.ids[-1]), proposal.tokens.tolist(), q), block.source or drafter.name


def propose_tree(drafter: Drafter, state: DecodeState, session: TargetSession, sampling: SamplingConfig,
                 generator: torch.Generator, policy: TreePolicy, drafting: bool = True) -> DraftTree:
    """Steps 1-2 of a tree round: the drafter's expansions and the lookup branch, admitted best-first. A round
    draft-skip leaves the drafter out of is the lookup branch alone (it costs no forward)."""
    anchor_position = int(session.text_positions(session.cache_length, 1)[0])
    drafts = drafter.propose_tree(state.ids, anchor_position, sampling, generator) if drafting else TreeDrafts()
    lookup, survival = policy.lookup_branch(state.ids)
    builder = policy.builder(drafts, sampling, generator, state.ids.numel(), chain=not session.supports_trees)
    return builder.build(int(state.ids[-1]), lookup, survival)


def verify_tree(session: TargetSession, tree: DraftTree) -> StepOutput:
    """Step 3: one target forward over the tree's nodes → (n, V) logits, row i after node i's path (a chain
    needs no tree mask: it is a plain step, which every runtime runs)."""
    tokens, parents = tree.tensors(session.target.device)
    return session.step(tokens) if tree.is_chain else session.step_tree(tokens, parents)


def accept_tree(tree: DraftTree, verified: StepOutput, sampling: SamplingConfig,
                generator: torch.Generator) -> tuple[list[int], int]:
    """Step 4: the accepted nodes (in depth order) and the token the target emits after them."""
    if sampling.greedy:
        return accept_tree_greedy(tree.tokens, tree.parents, verified.logits)
    q = [None if d is None else d.to(verified.logits.device) for d in tree.q]
    return accept_tree_sampling(tree.tokens, tree.parents, q, probabilities(verified.logits, sampling), generator)


def commit_tree(session: TargetSession, drafter: Drafter, state: DecodeState, tree: DraftTree, path: list[int],
                next_token: int, verified: StepOutput) -> list[int]:
    """Step 5: keep the anchor's and the accepted nodes' KV rows (moved into place), hand the drafter their
    features, append [accepted tokens, next] to the sequence."""
    start = session.cache_length - len(tree)  # cache length before this round's verify
    rows = [0] + path
    session.keep_rows(start, rows)
    cached = torch.tensor([tree.tokens[i] for i in rows], dtype=state.ids.dtype)  # (n+1,)
    features = verified.features[rows] if verified.features is not None else None
    drafter.commit(len(path), cached, features, session.text_positions(start, len(rows)))
    emitted = [tree.tokens[i] for i in path] + [next_token]
    state.ids = torch.cat([state.ids, torch.tensor(emitted, dtype=state.ids.dtype)])
    return emitted


def _now(device: torch.device) -> float:
    """perf_counter after the device's queued kernels, so each step is charged for its own work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def settle(session: TargetSession, drafter: Drafter, state: DecodeState, kept: list[int]) -> None:
    """After a stop: drop the committed tokens past the kept output (the rest of an accepted block
    after an EOS or a stop string) from the sequence, the KV cache and the drafter's context."""
    length = state.prompt_length + len(kept)
    if length < state.ids.numel():
        session.crop(length - 1)  # the last kept token is the next anchor: never cached
        drafter.rollback(int(session.text_positions(length - 1, 1)[0]))
        state.ids = state.ids[:length]


def truncate(new_ids: list[int], eos_ids: set[int], max_new_tokens: int,
             stop: Callable[[list[int]], int | None] | None) -> tuple[list[int], str | None]:
    """Cut the generated ids at the first EOS (kept, as HF does), a stop string, or the token limit."""
    for index, token in enumerate(new_ids[:max_new_tokens]):
        if token in eos_ids:
            return new_ids[: index + 1], "eos"
    if stop is not None and (keep := stop(new_ids[:max_new_tokens])) is not None:
        return new_ids[:keep], "stop"
    if len(new_ids) >= max_new_tokens:
        return new_ids[:max_new_tokens], "max_tokens"
    return new_ids, None


@torch.no_grad()
def speculative_generate(
    session: TargetSession,
    prompt: PromptInputs,
    drafter: Drafter,
    sampling: SamplingConfig,
    policy: LengthPolicy | TreePolicy,
    max_new_tokens: int = 256,
    eos_ids: set[int] | frozenset[int] = frozenset(),
    stop: Callable[[list[int]], int | None] | None = None,
    on_tokens: Callable[[list[int]], None] | None = None,
    generator: torch.Generator | None = None,
    reuse: bool = False,
    interrupt: Callable[[], bool] | None = None,
    skip: SkipPolicy | None = None,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens after ``prompt``; lossless w.r.t. the target.

    ``stop(new_ids)`` returns how many generated ids to keep when a stop string appears;
    ``on_tokens`` receives each round's committed ids (already truncated) for streaming.
    ``reuse`` continues a session whose cache holds a prefix of ``prompt`` (see :func:`prefill`);
    ``interrupt()`` is asked before each round and ends the generation when true (Ctrl-C in chat),
    so a stop always falls between rounds and leaves the session consistent.
    ``skip`` (draft-skip, ``draft_skip.py``) is asked before each round whether to run the drafter;
    a skipped round verifies the anchor alone, a plain target step.
    """
    generator = generator or make_generator(None, session.target.device)
    stats = GenerationStats()
    started = time.perf_counter()
    stats.reused_tokens = prefill(session, drafter, prompt, reuse)
    stats.prefill_tokens = prompt.length - 1 - stats.reused_tokens
    stats.prefill_s = time.perf_counter() - started
    state = DecodeState(ids=prompt.input_ids[0].cpu().clone(), prompt_length=prompt.length)
    reason = None
    streamed = 0
    device = session.target.device
    kept: list[int] = []
    while reason is None:
        if interrupt is not None and interrupt():
            reason = "interrupted"
            break
        t_start = _now(device)
        exempt = skip is not None and drafter.skip_exempt(state.ids)  # from committed ids alone
        drafting = skip is None or exempt or skip.should_draft()
        if isinstance(policy, TreePolicy):
            tree = propose_tree(drafter, state, session, sampling, generator, policy, drafting)
            source = "tree" if drafting else "skipped"
        else:
            tree, source = propose_chain(drafter, state, session, sampling, generator, policy, drafting)
        t_proposed = _now(device)
        verified = verify_tree(session, tree)
        t_verified = _now(device)
        path, next_token = accept_tree(tree, verified, sampling, generator)
        commit_tree(session, drafter, state, tree, path, next_token, verified)
        drafted, accepted = tree.drafts, len(path)
        t_committed = _now(device)
        if skip is not None and not exempt:
            skip.observe(drafting, drafted, accepted, t_proposed - t_start, t_committed - t_proposed)
        stats.skipped_rounds += not drafting
        stats.sources.append(source)
        stats.propose_s += t_proposed - t_start
        stats.verify_s += t_verified - t_proposed
        stats.accept_commit_s += t_committed - t_verified
        stats.rounds += 1
        stats.proposed_lengths.append(drafted)
        stats.accepted_lengths.append(accepted)
        kept, reason = truncate(state.new_ids, eos_ids, max_new_tokens, stop)
        if on_tokens is not None and len(kept) > streamed:
            on_tokens(kept[streamed:])
        streamed = len(kept)
    settle(session, drafter, state, kept)
    stats.new_tokens = len(kept)
    stats.wall_s = time.perf_counter() - started
    return GenerationResult(token_ids=kept, stop_reason=reason, stats=stats)
