"""R requests decoded together: their rounds stepped in lockstep, every round verified in ONE target forward.

Each request keeps its own :class:`~minispark.target.session.TargetSession` (KV cache) and its own drafter
(draft context), so prefill, commit, crop and rollback are the single-request engine's own steps
(``engine.prefill`` / ``commit`` / ``settle``). A round of :class:`BatchDecoder`:

0. draft-skip (schedule mode): the round drafts for every request or for none, decided from earlier
   rounds at this number of requests in flight (``draft_skip.BatchDraftSkip``; hybrid lookup rounds
   included: their whole blocks widen the padded verify); a skipped round is a plain R-row target step;
1. propose:  each request's drafter returns its lazy draft block (DSpark forks of one drafter: one
   backbone forward for all of them, ``propose_all``);
2. schedule: Algorithm 1 across requests (``batch_schedule.admit_across``, SPS of the whole padded verify)
   when the drafter has a confidence head, else min(γ, block) each; target-only decoding admits 0;
3. verify:   :func:`batched_step`, one forward over every request's [anchor, x_1..x_ℓ] (padded layout);
4. accept / commit per request, with its own sampling and generator: lossless per request.

The padded layout: the new tokens right-padded to Q = max(1 + ℓ_r) and a 4D additive mask that lets row r's
queries see its L_r cached keys and its own block causally. The decoder's sessions keep their caches as rows
of shared per-layer buffers (``Target.slot_sessions``, ``kv_cache.SlotRows``): the forward writes row r's new
keys and values at its own length L_r, in place, and attends the rows as they lie (columns [0, L_max + Q),
the mask hiding what lies past each row's own). Sessions with caches of their own (the eager runtime) are
copied into one (R, H, L_max, D) cache per layer and their new columns appended back: O(R·L_max) a round.
Either way every per-request step of the single-request engine is unchanged (``benchmarks/serve_load.py``
measures the whole).

    .venv/bin/python -m pytest -q tests/serving/test_batched.py
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from minispark.serving.batch_schedule import admit_across, batch_sps
from minispark.serving.draft_block import Proposal
from minispark.serving.draft_skip import BatchDraftSkip
from minispark.serving.drafters.base import Drafter, NoDrafter
from minispark.serving.drafters.dspark import DSparkDrafter
from minispark.serving.drafters.hybrid import HybridDrafter
from minispark.serving.drafters.lookup import LookupDrafter
from minispark.core.errors import MinisparkError
from minispark.serving.draft_tree import DraftTree, TreePolicy
from minispark.serving.engine import (DecodeState, GenerationStats, accept, accept_tree, commit, commit_tree,
                                      kept_prefix, prefill, propose, settle, truncate)
from minispark.target.sampling import SamplingConfig, make_generator
from minispark.serving.sps import SPSTable
from minispark.target.kv_cache import GrowingLayer, RowLayer, RowsInPlace, SlotRows, rows_written
from minispark.target.loading import Target
from minispark.target.session import PromptInputs, StepOutput, TargetSession, tree_ancestors


def fork_drafter(drafter: Drafter) -> Drafter:
    """A drafter for another request: the same weights, its own per-sequence context."""
    if type(drafter) is DSparkDrafter:
        return DSparkDrafter(drafter.model, context_lm_head=drafter.context_lm_head)
    if type(drafter) in (NoDrafter, LookupDrafter):
        return copy.copy(drafter)  # no per-sequence state
    if type(drafter) is HybridDrafter:  # its own trained-drafter context and its own acceptance estimates
        twin = HybridDrafter(copy.copy(drafter.lookup), fork_drafter(drafter.model), drafter.gamma,
                             copy.deepcopy(drafter.choice))
        twin.choice.reset()
        twin.calibration, twin.source = drafter.calibration, drafter.source
        return twin
    raise MinisparkError(f"drafter {drafter.name}: requests in flight together need none, lookup, a DSpark "
                         "or a hybrid drafter (one context each); serve this one with one request at a time")


def propose_all(drafters: list[Drafter], requests: list["BatchRequest"], sessions: list[TargetSession]) -> list:
    """Step 1 for every request: one backbone forward for all of them when their drafters are DSpark
    drafters of one model (forks of one drafter), and for those of hybrid forks whose round chose the
    trained drafter (each hybrid's choice is its own, made before and after that forward as alone); else
    each request's own ``propose``."""
    if _one_model(drafters):
        return _dspark_blocks(drafters, requests, sessions)
    if all(type(d) is HybridDrafter for d in drafters) and _one_model([d.model for d in drafters]):
        plans = [d.plan(r.state.ids) for d, r in zip(drafters, requests)]
        need = [i for i, plan in enumerate(plans) if plan.needs_model]
        blocks = dict(zip(need, _dspark_blocks([drafters[i].model for i in need], [requests[i] for i in need],
                                               [sessions[i] for i in need])))
        return [d.complete(plan, blocks.get(i)) for i, (d, plan) in enumerate(zip(drafters, plans))]
    return [propose(d, r.state, s, r.sampling, r.generator) for d, r, s in zip(drafters, requests, sessions)]


def _one_model(drafters: list[Drafter]) -> bool:
    """DSpark drafters sharing one model: forks of one drafter, which one backbone forward can serve."""
    return len(drafters) > 1 and all(type(d) is DSparkDrafter and d.model is drafters[0].model for d in drafters)


def _dspark_blocks(drafters: list[DSparkDrafter], requests: list["BatchRequest"],
                   sessions: list[TargetSession]) -> list:
    if len(drafters) <= 1:
        return [propose(d, r.state, s, r.sampling, r.generator) for d, r, s in zip(drafters, requests, sessions)]
    positions = [int(s.text_positions(s.cache_length, 1)[0]) for s in sessions]
    return DSparkDrafter.propose_together(drafters, [r.state.ids for r in requests], positions,
                                          [r.sampling for r in requests], [r.generator for r in requests])


def _batchable(sessions: list[TargetSession]) -> bool:
    """Whether one padded forward can verify these sessions: plain caches, and no sliding window (the padded
    mask built here does not apply one)."""
    return len(sessions) > 1 and not sessions[0].target.windowed and all(
        type(layer) in (DynamicLayer, GrowingLayer, RowLayer) and layer.is_initialized
        for s in sessions for layer in s.cache.layers)


@torch.no_grad()
def batched_step(sessions: list[TargetSession], blocks: list[torch.Tensor],
                 parents: list[list[int]] | None = None) -> list[StepOutput]:
    """``session.step(block)`` for every request, as one target forward; same outputs, same caches after.

    ``blocks[r]`` (q_r,) long are request r's [anchor, drafts], a chain; with ``parents`` (``parents[r][i]``:
    node i's parent, −1 for the anchor) request r's block is a draft tree and the outputs are
    ``session.step_tree``'s. Sessions must share one target; a cache of another layer type (sliding window)
    falls back to one forward per request."""
    if not _batchable(sessions):  # a chain is a plain step, which every runtime runs
        return [session.step(block) if parents is None or DraftTree.chain_parents(len(parent)) == parent
                else session.step_tree(block, torch.tensor(parent))
                for session, block, parent in zip(sessions, blocks, parents or [None] * len(blocks))]
    trees = parents or [DraftTree.chain_parents(int(b.numel())) for b in blocks]
    target = sessions[0].target
    device, dtype = target.device, target.dtype
    num = len(sessions)
    lengths = [s.cache_length for s in sessions]
    sizes = [int(b.numel()) for b in blocks]
    longest, width = max(lengths), max(sizes)
    shared = _shared_rows(sessions)
    # where each row's block sits in the forward's cache: after its own length in the shared rows, after the
    # longest one in a padded copy
    starts = lengths if shared is not None else [longest] * num
    tokens = torch.zeros(num, width, dtype=torch.long, device=device)  # (R, Q), right-padded
    positions = torch.zeros(num, width, dtype=torch.long, device=device)  # (R, Q)
    # (R, 1, Q, L_max + Q) additive mask: row r sees its L_r cached keys and, in its block, each node its
    # ancestors and itself (a chain: causally); a padding query sees the cache and itself.
    visible = torch.zeros(num, 1, width, longest + width, dtype=torch.bool)
    for r, (session, block, parent) in enumerate(zip(sessions, blocks, trees)):
        ancestors, depth = tree_ancestors(parent, sizes[r])  # (q_r, q_r) bool, (q_r,) long
        tokens[r, : sizes[r]] = block.to(device)
        tokens[r, sizes[r]:] = block[-1]  # padding queries: outputs ignored
        positions[r, : sizes[r]] = depth.to(device) + lengths[r] + session.rope_delta
        positions[r, sizes[r]:] = lengths[r] + session.rope_delta  # padding: any position, its rows are dropped
        start = starts[r]
        visible[r, 0, :, : lengths[r]] = True
        visible[r, 0, :, start: start + width] = torch.eye(width, dtype=torch.bool)
        visible[r, 0, : sizes[r], start: start + sizes[r]] = ancestors
    mask = torch.zeros(visible.shape, dtype=dtype, device=device).masked_fill_(~visible.to(device),
                                                                               torch.finfo(dtype).min)
    if shared is not None:
        cache = DynamicCache()
        slots = [layer.slot for layer in (s.cache.layers[0] for s in sessions)]
        where = rows_written(slots, lengths, width, device)
        cache.layers = [RowsInPlace(rows, where, slots, longest + width) for rows in shared]
    else:
        cache = DynamicCache(ddp_cache_data=_padded_copy(sessions, lengths, longest))
    position_ids = positions.view(1, num, width).expand(3, num, width) if target.uses_mrope else positions
    out = target.model(input_ids=tokens, position_ids=position_ids, attention_mask=mask, cache=cache,
                       use_cache=True)
    results = []
    for r, session in enumerate(sessions):
        if shared is not None:  # the new columns are in the session's own row already
            for layer in session.cache.layers:
                layer.set_length(lengths[r] + sizes[r])
        else:
            span = slice(longest, longest + sizes[r])
            for index, layer in enumerate(session.cache.layers):
                batched = cache.layers[index]
                layer.update(batched.keys[r:r + 1, :, span], batched.values[r:r + 1, :, span])
        session.ids = torch.cat([session.ids, tokens[r, : sizes[r]].to(session.ids.device)])
        features = None
        if session.capture_layers:  # every session's hooks saw the batched (R, Q, d) outputs
            features = torch.cat([session._captured.pop(i)[r, : sizes[r]] for i in session.capture_layers], dim=-1)
        results.append(StepOutput(logits=out.logits[r, : sizes[r]].float(), features=features))
    return results


def _shared_rows(sessions: list[TargetSession]) -> list[SlotRows] | None:
    """Each layer's :class:`SlotRows` when every session's cache is a row of the same shared buffers
    (``Target.slot_sessions``), else None."""
    first = sessions[0].cache.layers
    if not all(type(layer) is RowLayer for layer in first):
        return None
    shared = [layer.rows for layer in first]
    same = all(type(layer) is RowLayer and layer.rows is rows for s in sessions[1:]
               for layer, rows in zip(s.cache.layers, shared))
    return shared if same else None


def _padded_copy(sessions: list[TargetSession], lengths: list[int], longest: int) -> list[tuple]:
    """Every layer's (keys, values) of the sessions copied into one (R, H, L_max, D) cache, zeros past each length."""
    layers = []
    for index in range(len(sessions[0].cache.layers)):
        first = sessions[0].cache.layers[index].keys  # (1, H, L_0, D)
        keys = first.new_zeros(len(sessions), first.shape[1], longest, first.shape[3])  # (R, H, L_max, D)
        values = torch.zeros_like(keys)
        for r, session in enumerate(sessions):
            layer = session.cache.layers[index]
            keys[r, :, : lengths[r]] = layer.keys[0]
            values[r, :, : lengths[r]] = layer.values[0]
        layers.append((keys, values))
    return layers


def _flat(_width: int) -> float:
    """No SPS table: a verify costs the same at any width, so every node up to the budget pays."""
    return 1.0


@dataclass
class BatchRequest:
    """One generation in a :class:`BatchDecoder`: its prompt, limits, sampling and (when done) result."""

    prompt: PromptInputs
    max_new_tokens: int
    sampling: SamplingConfig = SamplingConfig()
    stop: Callable[[list[int]], int | None] | None = None
    on_tokens: Callable[[list[int]], None] | None = None
    seed: int | None = None
    stats: GenerationStats = field(default_factory=GenerationStats)
    token_ids: list[int] = field(default_factory=list)
    stop_reason: str | None = None
    slot: int = -1
    state: DecodeState | None = None
    generator: torch.Generator | None = None
    started: float = 0.0
    streamed: int = 0


class BatchDecoder:
    """Up to ``slots`` requests in flight on one target. Not thread-safe: one thread drives it.

    ``drafter`` is forked once per slot (:func:`fork_drafter`); a slot keeps its KV cache after a request,
    so a later request whose prompt starts with the same tokens (the next turn of a conversation) is
    placed there and only prefills the rest. ``sps_table`` (with a confidence-head drafter) turns on
    Algorithm 1 admission; without one each request verifies min(γ, its block). ``skip`` leaves the drafter
    out of rounds predicted not to pay (:class:`~minispark.serving.draft_skip.BatchDraftSkip`). ``tree`` (a
    tree-drafting drafter) makes every round a draft tree per request, the trees grown together against the
    padded verify's cost on the ``sps_table``'s batched grid (:meth:`TreePolicy.grow_across`)."""

    def __init__(self, target: Target, drafter: Drafter, slots: int, gamma: int,
                 sps_table: SPSTable | None = None, calibration=None, envelope: bool = True,
                 skip: BatchDraftSkip | None = None, tree: TreePolicy | None = None) -> None:
        self.target = target
        self.gamma = 0 if isinstance(drafter, NoDrafter) else gamma
        self.drafters = [drafter] + [fork_drafter(drafter) for _ in range(slots - 1)]
        self.sessions = target.slot_sessions(slots, drafter.feature_layers)
        self.requests: list[BatchRequest | None] = [None] * slots
        self.scheduled = drafter.has_confidence and sps_table is not None and self.gamma > 0
        self.sps_table, self.calibration, self.envelope = sps_table, calibration, envelope
        self.skip = skip if self.gamma > 0 else None
        self.tree = tree if self.gamma > 0 and drafter.drafts_trees else None
        self.rounds = 0
        self.skipped_rounds = 0
        self.verify_tokens = 0  # Σ over rounds of B (anchors + admitted drafts)
        self.request_rounds = 0  # Σ over rounds of the requests in flight

    def close(self) -> None:
        for session in self.sessions:
            session.close()

    @property
    def active(self) -> list[BatchRequest]:
        return [r for r in self.requests if r is not None]

    @property
    def free(self) -> int:
        return sum(r is None for r in self.requests)

    def budget_per_request(self) -> float:
        """Mean verified tokens per request per round (anchor included): the scheduler's verify budget."""
        return self.verify_tokens / self.request_rounds if self.request_rounds else 0.0

    def start(self, request: BatchRequest) -> None:
        """Prefill ``request`` into a free slot (the one whose cache shares the longest prefix)."""
        free = [i for i, r in enumerate(self.requests) if r is None]
        if not free:
            raise RuntimeError("BatchDecoder.start: no free slot")
        slot = max(free, key=lambda i: (self.sessions[i].reusable(request.prompt), -i))
        session, drafter = self.sessions[slot], self.drafters[slot]
        request.started = time.perf_counter()
        self._share_prefix(slot, request.prompt)
        request.stats.reused_tokens = prefill(session, drafter, request.prompt, reuse=True)
        request.stats.prefill_tokens = request.prompt.length - 1 - request.stats.reused_tokens
        request.stats.prefill_s = time.perf_counter() - request.started
        request.state = DecodeState(ids=request.prompt.input_ids[0].cpu().clone(), prompt_length=request.prompt.length)
        request.generator = make_generator(request.seed, self.target.device)
        request.slot = slot
        self.requests[slot] = request

    def _share_prefix(self, slot: int, prompt: PromptInputs) -> None:
        """Give the slot's session the longest prefix of ``prompt`` another slot holds (a system prompt every
        request starts with, a conversation continued in another slot), when it keeps more than its own: the
        prefill then forwards only the rest. A drafter that reads target features takes the rows its first anchor
        reads before that prefix from the other slot's drafter (its context, or its last prompt's rows); where
        that one no longer holds them, the prefix shared stops before those rows and the prefill forwards them."""
        session, drafter = self.sessions[slot], self.drafters[slot]
        best, lender = kept_prefix(session, drafter, prompt), None
        for other in range(len(self.sessions)):
            if other != slot and (offered := self.sessions[other].shareable(prompt)) > best:
                length = kept_prefix(self.sessions[other], self.drafters[other], prompt, offered)
                if length > best:
                    best, lender = length, other
        if lender is None:
            return
        session.adopt_prefix(self.sessions[lender], best)
        if drafter.feature_layers:
            positions = prompt.text_positions  # (P,)
            drafter.adopt_context(self.drafters[lender].context_rows(drafter.oldest_read(int(positions[-1])),
                                                                     int(positions[best])))

    def cancel(self, request: BatchRequest) -> None:
        """Stop ``request`` between rounds (a client went away): its slot is free for the next one."""
        if request.slot >= 0 and self.requests[request.slot] is request:
            self._finish(request, "cancelled")

    def _finish(self, request: BatchRequest, reason: str) -> None:
        settle(self.sessions[request.slot], self.drafters[request.slot], request.state, request.token_ids)
        request.stop_reason = reason
        request.stats.new_tokens = len(request.token_ids)
        request.stats.wall_s = time.perf_counter() - request.started
        self.requests[request.slot] = None

    def _lengths(self, active: list[BatchRequest], blocks: list, sps: Callable[[int], float] | None) -> list[int]:
        """Each block's verified length: Algorithm 1 across the requests on the ``sps`` curve of this round's rows
        (None: not scheduled, min(γ, block) each)."""
        if self.gamma == 0:
            return [0] * len(active)
        available = [min(block.size, self.gamma) for block in blocks]
        if sps is None:
            return available
        # A block whose length its drafter fixed before drawing it is verified whole (engine.schedule).
        free = [i for i, block in enumerate(blocks) if not block.fixed_length]
        fixed = [1 + available[i] for i, block in enumerate(blocks) if block.fixed_length]
        admitted = admit_across([blocks[i].confidence for i in free], [available[i] for i in free], sps,
                                self.calibration, padded=True, min_width=max(fixed, default=1))
        for i, length in zip(free, admitted):
            available[i] = length
        return available

    @torch.no_grad()
    def step(self) -> list[BatchRequest]:
        """One round for every request in flight; returns the requests it finished."""
        active = self.active
        if not active:
            return []
        t_start = time.perf_counter()
        sessions = [self.sessions[r.slot] for r in active]
        drafters = [self.drafters[r.slot] for r in active]
        if self.tree is not None:
            sources, drafted, outcomes, times = self._tree_round(active, sessions, drafters)
        else:
            sources, drafted, outcomes, times = self._chain_round(active, sessions, drafters)
        t_proposed, t_verified, t_committed = times
        self.rounds += 1
        self.request_rounds += len(active)
        self.verify_tokens += sum(drafted) + len(active)
        finished = []
        for request, source, drafts, accepted in zip(active, sources, drafted, outcomes):
            stats = request.stats
            stats.rounds += 1
            stats.skipped_rounds += source == "skipped"
            stats.proposed_lengths.append(drafts)
            stats.sources.append(source)
            stats.accepted_lengths.append(accepted)
            stats.propose_s += t_proposed - t_start
            stats.verify_s += t_verified - t_proposed
            stats.accept_commit_s += t_committed - t_verified
            kept, reason = truncate(request.state.new_ids, self.target.eos_token_ids, request.max_new_tokens,
                                    request.stop)
            request.token_ids = kept
            if request.on_tokens is not None and len(kept) > request.streamed:
                request.on_tokens(kept[request.streamed:])
            request.streamed = len(kept)
            if reason is not None:
                self._finish(request, reason)
                finished.append(request)
        return finished

    def _chain_round(self, active: list[BatchRequest], sessions: list[TargetSession],
                     drafters: list[Drafter]) -> tuple[list[str], list[int], list[int], tuple[float, float, float]]:
        """Propose → schedule → verify → accept → commit of scheduled chains: each request's source, drafts
        verified and drafts accepted, and when proposing, verifying and committing ended."""
        t_start = time.perf_counter()
        # Unlike one request's engine, no round is exempt (a hybrid's lookup rounds cost no drafter forward,
        # but their blocks widen every padded row, which the hybrid's own rule does not price).
        sps = batch_sps(self.sps_table, len(active), self.gamma + 1, self._context(active), self.envelope) \
            if self.scheduled else None
        drafting = self.gamma > 0 and (sps is None or self._widening_pays(len(active), sps)) \
            and (self.skip is None or self.skip.should_draft(len(active)))
        if drafting:
            blocks = propose_all(drafters, active, sessions)
            proposals = [b.proposal(n) for b, n in zip(blocks, self._lengths(active, blocks, sps))]
            sources = [b.source or d.name for b, d in zip(blocks, drafters)]
        else:
            proposals = [Proposal.empty() for _ in active]
            sources = ["skipped" if self.gamma else "plain"] * len(active)
        t_proposed = time.perf_counter()
        verified = batched_step(sessions, [torch.cat([r.state.anchor, p.tokens.cpu()])  # (1+ℓ_r,) each
                                           for r, p in zip(active, proposals)])
        t_verified = time.perf_counter()
        self.skipped_rounds += self.gamma > 0 and not drafting
        outcomes = []
        for request, session, drafter, proposal, out in zip(active, sessions, drafters, proposals, verified):
            accepted, next_token = accept(proposal, out, request.sampling, request.generator)
            commit(session, drafter, request.state, proposal, accepted, next_token, out)
            outcomes.append(accepted)
        t_committed = time.perf_counter()
        if self.skip is not None:
            self.skip.observe(len(active), drafting, sum(len(p) for p in proposals), sum(outcomes),
                              t_proposed - t_start, t_committed - t_proposed)
        return sources, [len(p) for p in proposals], outcomes, (t_proposed, t_verified, t_committed)

    def _tree_round(self, active: list[BatchRequest], sessions: list[TargetSession],
                    drafters: list[Drafter]) -> tuple[list[str], list[int], list[int], tuple[float, float, float]]:
        """A round of draft trees: one backbone forward for every request, the trees grown together against the
        padded verify (widest row priced on the batched grid), one tree-masked forward, each request's tree
        accepted and committed alone (its own sampling and generator: lossless per request)."""
        t_start = time.perf_counter()
        trees, drafting = self._grow(active, sessions, drafters)
        t_proposed = time.perf_counter()
        verified = batched_step(sessions, [tree.tensors()[0] for tree in trees], [tree.parents for tree in trees])
        t_verified = time.perf_counter()
        outcomes = []
        for request, session, drafter, tree, out in zip(active, sessions, drafters, trees, verified):
            path, next_token = accept_tree(tree, out, request.sampling, request.generator)
            commit_tree(session, drafter, request.state, tree, path, next_token, out)
            outcomes.append(len(path))
        t_committed = time.perf_counter()
        self.skipped_rounds += not drafting
        if self.skip is not None:
            self.skip.observe(len(active), drafting, sum(tree.drafts for tree in trees), sum(outcomes),
                              t_proposed - t_start, t_committed - t_proposed)
        sources = ["tree" if drafting else "skipped"] * len(active)
        return sources, [tree.drafts for tree in trees], outcomes, (t_proposed, t_verified, t_committed)

    @staticmethod
    def _context(active: list[BatchRequest]) -> int:
        """The mean sequence length of the requests in flight (what an SPS curve is read at)."""
        return sum(r.state.ids.numel() for r in active) // len(active)

    @staticmethod
    def _widening_pays(num: int, rate: Callable[[int], float]) -> bool:
        """Whether any draft could pay this round: one sure draft widens all ``num`` rows to 2 tokens for one
        token more (Algorithm 1's first candidate, at survival 1). When even that does not raise tokens per
        second on the ``rate`` curve (steps/s of ``num`` rows at width W), nothing would be admitted, and the
        drafter's forward is left out."""
        return (num + 1) * rate(2) > num * rate(1)

    def _grow(self, active: list[BatchRequest], sessions: list[TargetSession],
              drafters: list[Drafter]) -> tuple[list[DraftTree], bool]:
        """Steps 1-2 of a tree round for every request in flight, and whether it drafted. A round that does not
        is the anchors alone (a plain R-row target step): when not even a sure first node would pay for widening
        every row to 2 tokens (nothing could be admitted), or when draft-skip leaves it out (it prices the
        drafter's forward and the lookup branches' width together, from earlier rounds' outcomes)."""
        ids = [r.state.ids for r in active]
        num = len(active)
        widest = self.tree.max_drafts + 1
        rate = _flat
        if (table := self.sps_table) is not None:
            widest = min(widest, table.batched["widths"][-1] if table.batched else table.max_tokens)
            rate = batch_sps(table, num, widest, self._context(active), self.envelope)
        if not self._widening_pays(num, rate) or not (self.skip is None or self.skip.should_draft(num)):
            return [DraftTree(tokens=[int(i[-1])]) for i in ids], False
        positions = [int(s.text_positions(s.cache_length, 1)[0]) for s in sessions]
        samplings = [r.sampling for r in active]
        if _one_model(drafters):
            drafts = DSparkDrafter.propose_trees_together(drafters, ids, positions, samplings)
        else:
            drafts = [d.propose_tree(i, p, r.sampling, r.generator) for d, i, p, r in zip(drafters, ids, positions, active)]
        chain = not all(s.supports_trees for s in sessions)
        return self.tree.grow_across(drafts, ids, samplings, [r.generator for r in active], rate, widest - 1,
                                     chain), True

    def run(self, requests: list[BatchRequest]) -> list[BatchRequest]:
        """Decode ``requests`` to the end, admitting each as a slot frees (what tests and benchmarks call)."""
        pending = list(requests)
        while pending or self.active:
            while pending and self.free:
                self.start(pending.pop(0))
            self.step()
        return requests
