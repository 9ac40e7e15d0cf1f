"""Batched decoding (``serving/batched.py``): several requests of different lengths in flight at once,
every round verified in one target forward, and each request's greedy output equal to its own
target-only output — with no drafter, the lookup drafter and a DSpark drafter under Algorithm 1.

    .venv/bin/python -m pytest -q tests/serving/test_batched.py
"""

from __future__ import annotations

import time

import pytest
import torch

from minispark.serving import batched as batched_module
from minispark.serving.batched import BatchDecoder, BatchRequest, batched_step
from minispark.serving.draft_skip import BatchDraftSkip
from minispark.serving.drafters.base import NoDrafter
from minispark.serving.drafters.lookup import LookupDrafter
from minispark.serving.generate import generate
from minispark.serving.sps import SPSTable
from minispark.serving.engine import prefill, speculative_generate
from minispark.serving.schedule import FixedLength
from minispark.target.loading import Target, load_target
from minispark.target.sampling import SamplingConfig
from tests.helpers import random_dspark

PROMPTS = ["Tell me a story about a cat.", "What is 2 + 2?", "List three fruits and say why you like them.",
           "Hi", "Repeat after me: the quick brown fox jumps over the lazy dog, the quick brown fox."]
LIMITS = [24, 9, 17, 5, 30]


@pytest.fixture(scope="module", params=["llama", "qwen2_5_vl"])
def target(request, tiny_dir) -> Target:
    return load_target(str(tiny_dir(request.param)))


@pytest.fixture(scope="module")
def reference(target: Target) -> list[list[int]]:
    """Each prompt's greedy target-only output, decoded alone."""
    return [generate(target, p, drafter="none", max_new_tokens=n).result.token_ids for p, n in zip(PROMPTS, LIMITS)]


def requests(target: Target) -> list[BatchRequest]:
    return [BatchRequest(target.encode(prompt=p), max_new_tokens=n) for p, n in zip(PROMPTS, LIMITS)]


def decode_all(target: Target, drafter, **settings) -> tuple[BatchDecoder, list[BatchRequest]]:
    """Every prompt decoded by a 3-slot, γ 4 :class:`BatchDecoder` (``settings``: its table, skip policy)."""
    decoder = BatchDecoder(target, drafter, slots=3, gamma=4, **settings)
    try:
        return decoder, decoder.run(requests(target))
    finally:
        decoder.close()


def test_batched_step_equals_one_step_per_request(target: Target) -> None:
    """Two sessions of different cache lengths: the batched forward gives each the logits, features
    and cache a lone step gives."""
    layers = (1,)
    prompts = [target.encode(prompt=p) for p in PROMPTS[:3]]
    blocks = [torch.tensor([5, 6, 7]), torch.tensor([9]), torch.tensor([3, 4])]
    alone = []
    for prompt, block in zip(prompts, blocks):
        with target.session(layers) as session:
            session.prefill(prompt)
            out = session.step(block.to(target.device))
            alone.append((out, [layer.keys.clone() for layer in session.cache.layers]))
    sessions = [target.session(layers) for _ in prompts]
    for session, prompt in zip(sessions, prompts):
        session.prefill(prompt)
    outs = batched_step(sessions, blocks)
    for (ref, ref_keys), out, session in zip(alone, outs, sessions):
        torch.testing.assert_close(out.logits, ref.logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(out.features, ref.features, atol=1e-4, rtol=1e-4)
        for keys, layer in zip(ref_keys, session.cache.layers):
            torch.testing.assert_close(layer.keys, keys, atol=1e-4, rtol=1e-4)
        session.close()


TREES = [[-1, 0, 0, 1, 2, 1], [-1], [-1, 0, 1, 0]]  # branching, the anchor alone, two branches of the anchor


@pytest.mark.parametrize("chosen", [[0, 1, 2], [0, 2], [2, 1]])  # consecutive slots, a gap, out of order
def test_slot_rows_step_equals_one_step_per_request(target: Target, chosen: list[int]) -> None:
    """Sessions whose caches are rows of shared buffers (as the decoder keeps them) verify chains and trees in one
    forward that writes in place: each gets a lone step's logits, features and cache, its next step too."""
    layers = (1,)
    prompts = [target.encode(prompt=PROMPTS[i]) for i in chosen]
    blocks = [torch.tensor([5, 6, 7, 8, 9, 10]), torch.tensor([9]), torch.tensor([3, 4, 11, 12])]
    blocks, trees = [blocks[i] for i in chosen], [TREES[i] for i in chosen]
    alone = []
    for prompt, block, parents in zip(prompts, blocks, trees):
        with target.session(layers) as session:
            session.prefill(prompt)
            tree = session.step_tree(block.to(target.device), torch.tensor(parents))
            chain = session.step(torch.tensor([1, 2]))
            alone.append((tree, chain, [layer.keys.clone() for layer in session.cache.layers]))
    slots = target.slot_sessions(3, layers)
    sessions = [slots[i] for i in chosen]
    assert batched_module._shared_rows(sessions) is not None
    for session, prompt in zip(sessions, prompts):
        session.prefill(prompt)
    trees_out = batched_step(sessions, blocks, trees)
    chains_out = batched_step(sessions, [torch.tensor([1, 2])] * len(sessions))
    for (tree, chain, ref_keys), got_tree, got_chain, session in zip(alone, trees_out, chains_out, sessions):
        for got, ref in ((got_tree, tree), (got_chain, chain)):
            torch.testing.assert_close(got.logits, ref.logits, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(got.features, ref.features, atol=1e-4, rtol=1e-4)
        for keys, layer in zip(ref_keys, session.cache.layers):
            torch.testing.assert_close(layer.keys, keys, atol=1e-4, rtol=1e-4)
    for session in slots:
        session.close()


def test_batched_tree_step_equals_step_tree_per_request(target: Target) -> None:
    """Three sessions of different cache lengths verify a draft tree each in one padded forward: every node's
    logits and features are its session's own ``step_tree``'s, and keeping an accepted path leaves the cache
    a lone tree step and the same ``keep_rows`` leave."""
    layers = (1,)
    prompts = [target.encode(prompt=p) for p in PROMPTS[:3]]
    blocks = [torch.tensor([5, 6, 7, 8, 9, 10]), torch.tensor([9]), torch.tensor([3, 4, 11, 12])]
    paths = [[0, 2, 4], [0], [0, 3]]
    alone = []
    for prompt, block, parents, path in zip(prompts, blocks, TREES, paths):
        with target.session(layers) as session:
            session.prefill(prompt)
            start = session.cache_length
            out = session.step_tree(block.to(target.device), torch.tensor(parents))
            session.keep_rows(start, path)
            alone.append((out, [layer.keys.clone() for layer in session.cache.layers]))
    sessions = [target.session(layers) for _ in prompts]
    for session, prompt in zip(sessions, prompts):
        session.prefill(prompt)
    starts = [session.cache_length for session in sessions]
    outs = batched_step(sessions, blocks, TREES)
    for (ref, ref_keys), out, session, start, path in zip(alone, outs, sessions, starts, paths):
        torch.testing.assert_close(out.logits, ref.logits, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(out.features, ref.features, atol=1e-4, rtol=1e-4)
        session.keep_rows(start, path)
        for keys, layer in zip(ref_keys, session.cache.layers):
            torch.testing.assert_close(layer.keys, keys, atol=1e-4, rtol=1e-4)
        session.close()


def test_batched_tree_proposal_equals_one_tree_proposal_per_request(target: Target) -> None:
    """Forks of one DSpark drafter draft their trees from one backbone forward: every node's distribution is
    the one its request's own ``propose_tree`` gives."""
    from minispark.serving.batched import fork_drafter
    from minispark.serving.drafters.dspark import DSparkDrafter
    from minispark.target.sampling import SamplingConfig

    first = random_dspark(target)
    drafters = [first] + [fork_drafter(first) for _ in PROMPTS[:2]]
    prompts = [target.encode(prompt=p) for p in PROMPTS[:3]]
    sessions, states, _ = _prefilled(target, drafters, prompts, SamplingConfig())
    positions = [int(s.text_positions(s.cache_length, 1)[0]) for s in sessions]
    together = DSparkDrafter.propose_trees_together(drafters, [s.ids for s in states], positions,
                                                    [SamplingConfig()] * 3)
    for drafter, state, session, position, drafts in zip(drafters, states, sessions, positions, together):
        alone = drafter.propose_tree(state.ids, position, SamplingConfig(), None)
        for path in ([int(state.ids[-1])], [int(state.ids[-1]), 5], [int(state.ids[-1]), 5, 7]):
            torch.testing.assert_close(drafts.distribution(path), alone.distribution(path), atol=1e-5, rtol=1e-5)
            assert drafts.confidence(path) == pytest.approx(alone.confidence(path), abs=1e-5)
        session.close()


@pytest.mark.parametrize("table", ["flat", "grid"])
def test_concurrent_tree_requests_keep_greedy_parity(target: Target, reference: list[list[int]], table: str) -> None:
    """Every request's round is a draft tree grown against one padded verify: outputs equal target-only
    decoding; with a flat cost every tree takes its budget's nodes (more than its depth: it branches), and a
    grid where each extra token per row costs 10 steps verifies the anchors alone without drafting."""
    from minispark.serving.draft_tree import TreePolicy
    from minispark.serving.ngram import NgramMatch

    sps = None
    if table == "grid":
        sps = SPSTable.from_inline([1.0] + [1 / 11.0] * 15)
        sps.batched = {"context": 0, "requests": [2, 3], "widths": list(range(1, 17)),
                       "seconds": [[1.0 + 10.0 * (w - 1) for w in range(1, 17)]] * 2}
    policy = TreePolicy(4, max_drafts=6, sps_table=sps, lookup=NgramMatch())
    decoder, done = decode_all(target, random_dspark(target), sps_table=sps, tree=policy)
    assert [r.token_ids for r in done] == reference
    if table == "flat":
        assert all(set(r.stats.sources) == {"tree"} for r in done)
        assert decoder.budget_per_request() == pytest.approx(7.0, abs=0.5)  # 6 nodes a tree, short ones at the end
    else:  # not even a sure node pays for a second token per row: the drafter is not run
        assert all(set(r.stats.sources) == {"skipped"} for r in done)
        assert decoder.budget_per_request() == 1.0


def _prefilled(target: Target, drafters: list, prompts: list, sampling) -> tuple[list, list, list]:
    """(sessions, decode states, batch requests) of ``prompts`` prefilled with their ``drafters``, seed 7."""
    from minispark.serving.engine import DecodeState, prefill
    from minispark.target.sampling import make_generator

    sessions = [target.session(drafters[0].feature_layers) for _ in prompts]
    states, reqs = [], []
    for session, drafter, prompt in zip(sessions, drafters, prompts):
        prefill(session, drafter, prompt, reuse=False)
        state = DecodeState(ids=prompt.input_ids[0].cpu().clone(), prompt_length=prompt.length)
        states.append(state)
        reqs.append(BatchRequest(prompt, 8, sampling, state=state, generator=make_generator(7)))
    return sessions, states, reqs


def test_batched_proposal_equals_one_proposal_per_request(target: Target) -> None:
    """DSpark forks of one drafter propose in one backbone forward: each request's block has the hidden
    states, confidences and draws its own proposal has, whatever the others' context lengths."""
    from minispark.serving.batched import fork_drafter, propose_all
    from minispark.serving.engine import propose
    from minispark.target.sampling import SamplingConfig, make_generator

    first = random_dspark(target)
    drafters = [first] + [fork_drafter(first) for _ in PROMPTS[:2]]
    prompts = [target.encode(prompt=p) for p in PROMPTS[:3]]
    sessions, states, reqs = _prefilled(target, drafters, prompts, SamplingConfig(temperature=1.0))
    together = propose_all(drafters, reqs, sessions)
    for r, (drafter, state, session) in enumerate(zip(drafters, states, sessions)):
        alone = propose(drafter, state, session, SamplingConfig(temperature=1.0), make_generator(7))
        torch.testing.assert_close(together[r].hidden, alone.hidden, atol=1e-5, rtol=1e-5)
        got, want = together[r].proposal(4), alone.proposal(4)
        assert torch.equal(got.tokens, want.tokens)
        torch.testing.assert_close(got.probs, want.probs, atol=1e-5, rtol=1e-5)
        session.close()


def test_batched_hybrid_proposal_equals_one_proposal_per_request(target: Target) -> None:
    """Hybrid forks: each request's choice is its own (a lookup match for the repeating prompt, the trained
    drafter for the others), and the trained drafter's blocks come from one backbone forward, equal to
    each request's own proposal."""
    from minispark.serving.batched import fork_drafter, propose_all
    from minispark.serving.drafters.hybrid import make_hybrid
    from minispark.serving.engine import propose
    from minispark.target.sampling import SamplingConfig, make_generator
    from minispark.target.session import PromptInputs

    first = make_hybrid(random_dspark(target))
    chosen = [PROMPTS[0], PROMPTS[1], PROMPTS[2]]
    drafters = [first] + [fork_drafter(first) for _ in chosen[1:]]
    prompts = [target.encode(prompt=p) for p in chosen]
    echo = torch.arange(10, 22).repeat(2)[:-4][None]  # the second request's answer so far repeats itself
    ids = torch.cat([prompts[1].input_ids, echo], 1)
    prompts[1] = PromptInputs(ids, torch.arange(ids.shape[1]))
    sessions, states, reqs = _prefilled(target, drafters, prompts, SamplingConfig())
    together = propose_all(drafters, reqs, sessions)
    for r, (drafter, state, session) in enumerate(zip(drafters, states, sessions)):
        alone = propose(drafter, state, session, SamplingConfig(), make_generator(7))
        assert together[r].source == alone.source
        got, want = together[r].proposal(4), alone.proposal(4)
        assert torch.equal(got.tokens, want.tokens)
        session.close()
    assert [block.source for block in together] == ["dspark", "lookup", "dspark"]


@pytest.mark.parametrize("drafter", ["none", "lookup", "dspark", "hybrid"])
def test_concurrent_requests_keep_greedy_parity(target: Target, reference: list[list[int]], drafter: str) -> None:
    from minispark.serving.drafters.hybrid import make_hybrid

    draft = ({"none": NoDrafter(), "lookup": LookupDrafter()}.get(drafter)
             or (make_hybrid(random_dspark(target)) if drafter == "hybrid" else random_dspark(target)))
    table = SPSTable.from_inline([1.0 / (1.0 + 0.05 * n) for n in range(16)])  # cheap tokens: long admissions
    decoder, done = decode_all(target, draft, sps_table=table)
    for request, want in zip(done, reference):
        assert request.token_ids == want
        assert request.stop_reason in ("eos", "max_tokens")
    if drafter == "dspark":
        assert decoder.scheduled and decoder.budget_per_request() > 1.0  # drafts were verified
    if drafter == "none":
        assert decoder.budget_per_request() == 1.0


@pytest.mark.parametrize("widening", [0.0, 10.0])
def test_admission_reads_the_batched_grid(target: Target, reference: list[list[int]], widening: float) -> None:
    """Rounds of R ≥ 2 requests are priced by the table's batched grid (R rows × W tokens), not by R·W tokens
    of one sequence: one sequence past 1 token costs 11 steps here, so only a grid where a wider row is free
    admits drafts, and a grid where each extra token per row costs 10 steps admits none, without running the
    drafter (not even a sure draft would pay for a second token per row). Parity either way."""
    table = SPSTable.from_inline([1.0] + [1 / 11.0] * 15)
    table.batched = {"context": 0, "requests": [2, 3], "widths": list(range(1, 17)),
                     "seconds": [[1.0 + widening * (w - 1) for w in range(1, 17)]] * 2}
    decoder, done = decode_all(target, random_dspark(target), sps_table=table)
    assert [r.token_ids for r in done] == reference
    if widening:
        assert decoder.budget_per_request() == 1.0
        assert all(set(r.stats.sources) == {"skipped"} for r in done)
    else:
        assert decoder.budget_per_request() > 1.5


@pytest.mark.parametrize("rounds", ["chain", "tree"])
def test_batch_draft_skip_leaves_losing_rounds_out_and_keeps_parity(target: Target, reference: list[list[int]],
                                                                    monkeypatch, rounds: str) -> None:
    """A drafter forward made dearer than the tiny target's step never pays: once the policy has timed a
    drafted and a plain round it skips, probing now and then; every request keeps its greedy output. So for
    tree rounds, whose admission prices the verify only."""
    from minispark.serving.draft_tree import TreePolicy
    from minispark.serving.drafters.dspark import DSparkDrafter
    from minispark.serving.ngram import NgramMatch

    name = "propose_together" if rounds == "chain" else "propose_trees_together"
    together = getattr(DSparkDrafter, name)

    def dear(*args, **kwargs):
        time.sleep(0.05)
        return together(*args, **kwargs)

    monkeypatch.setattr(DSparkDrafter, name, staticmethod(dear))
    tree = TreePolicy(4, max_drafts=6, lookup=NgramMatch()) if rounds == "tree" else None
    decoder, done = decode_all(target, random_dspark(target), skip=BatchDraftSkip(), tree=tree)
    for request, want in zip(done, reference):
        assert request.token_ids == want
    assert decoder.skipped_rounds > decoder.rounds / 2
    assert {s for r in done for s in r.stats.sources} == {"dspark" if rounds == "chain" else "tree", "skipped"}
    assert sum(r.stats.skipped_rounds for r in done) == sum(r.stats.sources.count("skipped") for r in done)


def test_batch_draft_skip_with_a_hybrid_drafter_keeps_parity(target: Target, reference: list[list[int]],
                                                              monkeypatch) -> None:
    """A hybrid drafter under batch draft-skip (no round exempt, lookup ones included) with a dear wide
    verify: the policy skips most rounds, every request keeps its greedy output, and each round is
    counted under its block's source."""
    from minispark.serving.drafters.hybrid import make_hybrid

    step = batched_module.batched_step

    def dear(sessions, blocks):
        if max(block.numel() for block in blocks) > 1:
            time.sleep(0.05)
        return step(sessions, blocks)

    monkeypatch.setattr(batched_module, "batched_step", dear)
    decoder, done = decode_all(target, make_hybrid(random_dspark(target)), skip=BatchDraftSkip())
    assert [r.token_ids for r in done] == reference
    assert decoder.skipped_rounds > decoder.rounds / 2
    assert {source for r in done for source in r.stats.sources} <= {"dspark", "lookup", "skipped"}

def test_a_slot_keeps_its_cache_for_the_next_turn(target: Target) -> None:
    """A request whose prompt extends a finished one lands in that slot and prefills only the rest."""
    decoder = BatchDecoder(target, NoDrafter(), slots=2, gamma=0)
    try:
        first = decoder.run([BatchRequest(target.encode(prompt="Hello there"), max_new_tokens=6)])[0]
        messages = [{"role": "user", "content": "Hello there"},
                    {"role": "assistant", "content": target.tokenizer.decode(first.token_ids, skip_special_tokens=True)},
                    {"role": "user", "content": "And then?"}]
        second = decoder.run([BatchRequest(target.encode(messages), max_new_tokens=6)])[0]
    finally:
        decoder.close()
    assert second.slot == first.slot and second.stats.reused_tokens > 0
    want = generate(target, messages=messages, drafter="none", max_new_tokens=6).result.token_ids
    assert second.token_ids == want


@pytest.mark.parametrize("window", [0, 4])
def test_a_shared_or_kept_prefix_leaves_the_drafter_the_context_its_own_prefill_gives(target: Target,
                                                                                      window: int) -> None:
    """After a request starts on a prefix another slot lent or its own slot kept from an earlier request (whose
    drafting dropped the old rows past its window), its drafter holds the rows a fresh prefill of its prompt
    gives: the first block drafts the same."""
    if target.is_vlm:
        pytest.skip("a VL target's prompts are not shared")
    system = target.encode(prompt="You are a careful assistant who answers briefly and kindly, always.")
    first, second, third = (target.extend(system, torch.tensor(tail)) for tail in ([11, 12, 13], [21, 22], [31]))
    drafter = random_dspark(target, window=window)
    decoder = BatchDecoder(target, drafter, slots=2, gamma=4)
    try:
        decoder.run([BatchRequest(first, max_new_tokens=12)])  # slot 0 drafts past its prompt's rows
        for prompt in (second, third):  # lent by slot 0, then kept by slot 0 itself
            request = BatchRequest(prompt, max_new_tokens=4)
            decoder.start(request)
            assert request.stats.reused_tokens >= system.length - 1
            fresh = random_dspark(target, window=window)
            with target.session(fresh.feature_layers) as session:
                prefill(session, fresh, prompt, reuse=False)
            got = decoder.drafters[request.slot]
            anchor = int(prompt.text_positions[-1])
            torch.testing.assert_close(got.model.forward_block(got.context, prompt.input_ids[0, -1], anchor),
                                       fresh.model.forward_block(fresh.context, prompt.input_ids[0, -1], anchor))
            decoder.cancel(request)
    finally:
        decoder.close()


@pytest.mark.parametrize("drafter", ["none", "lookup", "dspark", "dspark-window"])
def test_requests_share_a_prefix_another_slot_holds(target: Target, drafter: str) -> None:
    """Requests that start with the same tokens (a system prompt) take that prefix's KV from the slot holding it
    (a DSpark drafter the rows it reads there from that slot's drafter) and prefill only the rest, with each its
    own target-only output. A prompt with images is never shared (same placeholders, other images)."""
    system = target.encode(prompt="You are a careful assistant who answers briefly and kindly, always.")
    tails = [[11, 12, 13], [21, 22], [31, 32, 33, 34], [41]]
    prompts = [target.extend(system, torch.tensor(tail)) for tail in tails]
    want = []
    for prompt in prompts:
        with target.session() as session:
            out = speculative_generate(session, prompt, NoDrafter(), SamplingConfig(), FixedLength(0),
                                       max_new_tokens=8, eos_ids=target.eos_token_ids)
            want.append(out.token_ids)
    draft = {"none": NoDrafter(), "lookup": LookupDrafter()}.get(drafter) \
        or random_dspark(target, window=4 if drafter == "dspark-window" else 0)
    decoder = BatchDecoder(target, draft, slots=2, gamma=0 if drafter == "none" else 4)
    try:
        done = decoder.run([BatchRequest(prompt, max_new_tokens=8) for prompt in prompts])
    finally:
        decoder.close()
    assert [r.token_ids for r in done] == want
    reused = [r.stats.reused_tokens for r in done]
    if target.is_vlm:  # a VL target's prompts carry M-RoPE positions: not shared either
        assert reused[:2] == [0, 0]  # (later requests reuse their own slot's cache, as a next turn does)
    else:
        assert reused[0] == 0 and all(n >= system.length - 1 for n in reused[1:])
