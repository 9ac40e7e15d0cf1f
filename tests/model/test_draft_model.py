"""DSpark draft model: masking, train/inference equivalence, exact sampling, frozen weights, the
length policy, and the checkpoint format. Tiny random models on CPU, seeded.

    .venv/bin/python -m pytest -q tests/model/test_draft_model.py
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from minispark.model.checkpoint import save_drafter
from minispark.model.draft_model import DraftConfig, DraftModel, block_attention_mask
from minispark.serving.drafters.dspark import BackboneTreeDrafts, DSparkDrafter, OutputSpace, SequentialBlock, load_drafter
from minispark.serving.engine import DecodeState, schedule
from minispark.core.errors import MinisparkError
from minispark.target.sampling import SamplingConfig, make_generator, probabilities
from minispark.serving.schedule import LengthPolicy
from tests.helpers import D, V, GAMMA, M, make_config, target_weights, subset, make_model, pair_chi_square, draw_many, SMALL_V, DRAWS

HEADS = ("none", "vanilla", "gated", "rnn")
GREEDY = SamplingConfig(0.0)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    # Tiny ops: one thread is as fast and keeps the shared machine free.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def sequence(length: int, seed: int = 0, offset: int = 3):
    """Token ids (T,), target features (T, m·d) and text positions (T,) of one sequence."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V - 1, (length,), generator=g)
    features = torch.randn(length, M * D, generator=g)
    return ids, features, torch.arange(length) + offset


# ---- masking ---------------------------------------------------------------------------------


@pytest.mark.parametrize("window", [0, 4])
def test_block_sees_only_allowed_context(window: int) -> None:
    model = make_model("rnn", window)
    ids, features, positions = sequence(20)
    anchors = torch.tensor([5, 9, 13])  # row indices; text positions are these + 3
    blocks = torch.stack([ids[a : a + GAMMA + 1] for a in anchors])[None]  # (1, A, γ+1)

    def logits(features, blocks):
        out = model.forward_train(features[None], positions[None], blocks, positions[anchors][None])
        return model.head_logits(out.hidden, out.prev_tokens)[0]  # (A, γ, V)

    base = logits(features, blocks)
    for b, a in enumerate(anchors.tolist()):
        lowest = a - window if window else 0
        forbidden = [a, a + 1] + ([lowest - 1] if window else [])
        for row in forbidden:
            moved = features.clone()
            moved[row] += 1.0
            torch.testing.assert_close(logits(moved, blocks)[b], base[b], rtol=0, atol=1e-6)
        for row in (a - 1, lowest):
            moved = features.clone()
            moved[row] += 1.0
            assert (logits(moved, blocks)[b] - base[b]).abs().max() > 1e-3, f"row {row} must reach block {b}"
        other = blocks.clone()
        other[0, (b + 1) % len(anchors), 0] = (other[0, (b + 1) % len(anchors), 0] + 1) % (V - 1)
        torch.testing.assert_close(logits(features, other)[b], base[b], rtol=0, atol=1e-6)


def test_mask_layout() -> None:
    mask = block_attention_mask(torch.arange(6)[None], torch.tensor([[2, 5]]), block_size=2, window=2)
    expected = torch.tensor(
        [
            [1, 1, 0, 0, 0, 0, 1, 1, 0, 0],
            [1, 1, 0, 0, 0, 0, 1, 1, 0, 0],
            [0, 0, 0, 1, 1, 0, 0, 0, 1, 1],
            [0, 0, 0, 1, 1, 0, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(mask[0, 0], expected)


def test_windowed_rows_equal_packed_row() -> None:
    """The trainer may feed one anchor per row with only its window [a−W, a) of context."""
    window = 5
    model = make_model("gated", window)
    ids, features, positions = sequence(20)
    anchors = torch.tensor([2, 8, 15])
    blocks = torch.stack([ids[a : a + GAMMA + 1] for a in anchors])  # (A, γ+1)
    packed = model.forward_train(features[None], positions[None], blocks[None], positions[anchors][None])
    # One row per anchor, context padded on the left to W rows (padding masked by context_valid).
    rows = [torch.arange(a - window, a) for a in anchors.tolist()]
    valid = torch.stack([r >= 0 for r in rows])  # (A, W)
    rows = [r.clamp(min=0) for r in rows]
    windowed = model.forward_train(
        torch.stack([features[r] for r in rows]),
        torch.stack([positions[r] for r in rows]),
        blocks[:, None],
        positions[anchors][:, None],
        context_valid=valid,
    )
    torch.testing.assert_close(windowed.hidden[:, 0], packed.hidden[0])


# ---- train / inference equivalence ------------------------------------------------------------


def run_rounds(model: DraftModel, sampling: SamplingConfig, accepted=(2, 0, 3, 1), prompt: int = 6, seed: int = 0):
    """Drive the drafter like the engine does; returns the full sequence and per-round records."""
    ids, features, positions = sequence(prompt + 5 * (GAMMA + 1), seed)
    drafter = DSparkDrafter(model, capacity=4)  # exercise growth
    drafter.reset(ids[: prompt - 1], features[: prompt - 1], positions[: prompt - 1])
    generator = make_generator(seed)
    anchor, rounds = prompt - 1, []
    for n in accepted:
        proposal = drafter.propose(ids[: anchor + 1], int(positions[anchor]), sampling, generator).proposal(GAMMA)
        assert len(proposal) == GAMMA
        rounds.append((anchor, proposal))
        # Whatever the verifier decided, the sequence continues with the row's own tokens here.
        span = slice(anchor, anchor + n + 1)
        drafter.commit(n, ids[span], features[span], positions[span])
        anchor += n + 1
    return ids, features, positions, rounds


@pytest.mark.parametrize(("head", "window", "markov_w1"),
                         [(h, w, "table") for h in HEADS for w in (0, 5)] + [(h, 5, "embedding") for h in HEADS[1:]])
def test_train_forward_equals_incremental_inference(head: str, window: int, markov_w1: str) -> None:
    model = make_model(head, window, markov_w1=markov_w1)
    for sampling in (GREEDY, SamplingConfig(1.0)):
        ids, features, positions, rounds = run_rounds(model, sampling)
        anchors = torch.tensor([a for a, _ in rounds])
        blocks = torch.stack([torch.cat([ids[a : a + 1], p.tokens]) for a, p in rounds])  # (R, γ+1)
        out = model.forward_train(features[None], positions[None], blocks[None], positions[anchors][None])
        logits = model.head_logits(out.hidden, out.prev_tokens)[0]  # (R, γ, V)
        confidence = model.confidence(out.hidden, out.prev_tokens)[0]  # (R, γ)
        for r, (_, proposal) in enumerate(rounds):
            torch.testing.assert_close(proposal.confidences, confidence[r])
            if sampling.greedy:
                assert torch.equal(proposal.tokens, logits[r].argmax(-1))
                assert proposal.probs is None  # greedy p_d is the one-hot of the proposed tokens
            else:
                torch.testing.assert_close(proposal.probs, probabilities(logits[r], sampling))


def test_context_crop_rolls_back_a_commit() -> None:
    model = make_model("vanilla", window=0)
    ids, features, positions = sequence(12)
    drafter = DSparkDrafter(model)
    drafter.reset(ids[:5], features[:5], positions[:5])
    before = drafter.model.forward_block(drafter.context, ids[5], int(positions[5]))
    drafter.commit(2, ids[5:8], features[5:8], positions[5:8])
    assert len(drafter.context) == 8
    drafter.context.crop(int(positions[5]))
    assert len(drafter.context) == 5
    torch.testing.assert_close(drafter.model.forward_block(drafter.context, ids[5], int(positions[5])), before)


def test_rows_the_window_dropped_come_back_from_the_prompt_and_lend_to_a_fork() -> None:
    """A drafter with a window drops old rows as it drafts; rolled back into its prompt (a later request with the
    same start), it holds again every row a block there reads, as a drafter given only that prefix does, and lends
    them to a fork whose target cache took the same prefix. Rows of neither the context nor the prompt are not held."""
    model = make_model("vanilla", window=4)
    ids, features, positions = sequence(16)
    drafter = DSparkDrafter(model)
    drafter.reset(ids[:8], features[:8], positions[:8])  # the prompt: 8 cached rows, the anchor at 8
    for start in (8, 11):  # two rounds: each drops the rows before its anchor's window
        drafter.model.forward_block(drafter.context, ids[start], int(positions[start]))
        drafter.commit(2, ids[start : start + 3], features[start : start + 3], positions[start : start + 3])
    drafter.model.forward_block(drafter.context, ids[14], int(positions[14]))
    assert drafter.context.positions.tolist() == positions[10:14].tolist()
    fresh = DSparkDrafter(model)
    fresh.reset(ids[:6], features[:6], positions[:6])
    want = fresh.model.forward_block(fresh.context, ids[6], int(positions[6]))

    # the rows a block at position 6 reads: [2, 6) → the prompt's rows, none of them live any more
    assert drafter.oldest_read(int(positions[6])) == int(positions[2])
    assert drafter.holds(int(positions[0]), int(positions[8])) and drafter.holds(int(positions[10]), int(positions[14]))
    assert not drafter.holds(int(positions[2]), int(positions[12]))  # 8 and 9: committed, then dropped
    assert not drafter.holds(int(positions[10]), int(positions[15]))  # 14: the anchor, not committed
    fork = DSparkDrafter(model)
    fork.adopt_context(drafter.context_rows(int(positions[2]), int(positions[6])))
    torch.testing.assert_close(fork.model.forward_block(fork.context, ids[6], int(positions[6])), want)
    drafter.rollback(int(positions[6]))
    assert drafter.context.positions.tolist() == positions[2:6].tolist()
    torch.testing.assert_close(drafter.model.forward_block(drafter.context, ids[6], int(positions[6])), want)


# ---- sampling exactness -----------------------------------------------------------------------


SAMPLINGS = [SamplingConfig(1.0), SamplingConfig(0.8, top_p=0.9), SamplingConfig(1.3, top_k=3)]


@pytest.mark.parametrize("head", [pytest.param(h, marks=pytest.mark.slow) if h != "vanilla" else h
                                  for h in HEADS])  # the heads share the sampler; the shipped one runs by default
def test_sampler_draws_from_the_distributions_it_returns(head: str) -> None:
    model = make_model(head, vocab=SMALL_V, seed=3)
    hidden = 0.5 * torch.randn(GAMMA, D, generator=torch.Generator().manual_seed(4))  # flat-ish p_k
    anchor = 2
    with torch.no_grad():
        for i, sampling in enumerate(SAMPLINGS):
            tokens, probs = draw_many(model, hidden, anchor, sampling, DRAWS, seed=10 + i)
            assert pair_chi_square(tokens, probs, anchor, SMALL_V) > 1e-4, sampling
            # The returned p_d is the training path's distribution for the drawn prefix.
            prev = torch.cat([torch.full((len(tokens), 1), anchor), tokens[:, :-1]], dim=1)
            reference = probabilities(model.head_logits(hidden.expand(len(tokens), -1, -1), prev), sampling)
            torch.testing.assert_close(probs, reference)


@pytest.mark.parametrize("head", ["vanilla", "rnn"])
def test_draft_vocabulary_sampler_is_exact_and_never_leaves_it(head: str) -> None:
    """With a draft vocabulary S the sampler only proposes tokens of S, reports p_d over the whole
    target vocabulary (zero outside S), and draws from exactly what it reports."""
    vocab, n = 9, 4
    model = make_model(head, vocab=vocab, seed=3, draft_vocab=n)
    ids = subset(vocab, n)
    assert torch.equal(model.lm_head.weight, target_weights(vocab, 3)[1][ids])  # the target's rows of S
    hidden = 0.5 * torch.randn(GAMMA, D, generator=torch.Generator().manual_seed(4))
    anchor = 1  # outside S: the Markov head's "other" row
    assert anchor not in ids.tolist()
    with torch.no_grad():
        tokens, probs = draw_many(model, hidden, anchor, SAMPLINGS[0], DRAWS, seed=21)
        assert set(tokens.unique().tolist()) <= set(ids.tolist())
        outside = torch.ones(vocab, dtype=torch.bool)
        outside[ids] = False
        assert probs.shape[-1] == vocab and not probs[..., outside].any()
        assert pair_chi_square(tokens, probs, anchor, vocab) > 1e-4
        greedy = SequentialBlock(model, hidden, torch.tensor(anchor), SamplingConfig(0.0), None).proposal(GAMMA)
        prev = torch.cat([torch.tensor([anchor]), greedy.tokens[:-1]])
        best = ids[model.head_logits(hidden, prev).argmax(-1)]
        assert greedy.probs is None and torch.equal(greedy.tokens, best)


@pytest.mark.parametrize("head", ["vanilla", "rnn"])
def test_context_vocabulary_drafts_the_request_tokens_as_the_full_vocabulary_scores_them(head: str) -> None:
    """With a draft vocabulary S, the request's tokens outside S are scored too: a position's logits over S and
    them equal the full-vocabulary reference (the target's lm_head rows, the Markov bias on S alone), the sampler
    draws exactly what it reports and nothing outside them, greedy takes the reference's argmax, and a tree's
    node distribution is the same one."""
    vocab, n = 9, 4
    model = make_model(head, vocab=vocab, seed=3, draft_vocab=n)
    full = target_weights(vocab, 3)[1]  # (V, d) the target's lm_head
    static = subset(vocab, n).tolist()  # [2, 4, 6, 8]
    space = OutputSpace.of_request(model, torch.tensor([0, 2, 8, 3, 0]), full)
    assert space.extra.tolist() == [0, 3] and space.ids.tolist() == static + [0, 3]
    hidden = 0.5 * torch.randn(GAMMA, D, generator=torch.Generator().manual_seed(4))
    anchor = 3  # a request token outside S: as a previous token it reads the Markov head's "other" row

    def reference(prev: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
        """(…, γ, V) the draft distribution from the full-vocabulary logits at S and the request's tokens."""
        logits = torch.cat([model.head_logits(hidden.expand(*prev.shape, -1), prev),
                            (hidden @ full[space.extra].T).expand(*prev.shape, -1)], dim=-1)
        p = probabilities(logits, sampling)
        return p.new_zeros(*p.shape[:-1], vocab).index_copy_(-1, space.ids, p)

    with torch.no_grad():
        torch.testing.assert_close(space.logits(hidden), (hidden @ full.T)[:, space.ids])
        generator = make_generator(21)
        proposals = [SequentialBlock(model, hidden, torch.tensor(anchor), SAMPLINGS[0], generator, space).proposal(GAMMA)
                     for _ in range(DRAWS)]
        tokens, probs = torch.stack([p.tokens for p in proposals]), torch.stack([p.probs for p in proposals])
        assert set(tokens.unique().tolist()) <= set(static) | {0, 3} and {0, 3} & set(tokens.unique().tolist())
        assert pair_chi_square(tokens, probs, anchor, vocab) > 1e-4
        prev = torch.cat([torch.full((DRAWS, 1), anchor), tokens[:, :-1]], dim=1)
        torch.testing.assert_close(probs, reference(prev, SAMPLINGS[0]))
        greedy = SequentialBlock(model, hidden, torch.tensor(anchor), GREEDY, None, space).proposal(GAMMA)
        prev = torch.cat([torch.tensor([anchor]), greedy.tokens[:-1]])
        assert torch.equal(greedy.tokens, reference(prev, SamplingConfig(1.0)).argmax(-1))
        tree = BackboneTreeDrafts(model, hidden, SAMPLINGS[0], space)
        for depth in (1, 2):  # a node's children: the distribution after its path's tokens
            path = prev[:depth].tolist()
            torch.testing.assert_close(tree.distribution(path), reference(prev, SAMPLINGS[0])[depth - 1])


def test_a_context_token_outside_the_static_set_is_drafted_and_accepted(target) -> None:
    """On a tiny target: the greedy continuation's next token occurs earlier in the request but not in the static
    draft vocabulary; a backbone pointing at its lm_head row drafts it, the target accepts it, and the output is
    the target's own. Negative control: the static set alone cannot draft it, and the round accepts nothing."""
    from minispark.serving.engine import speculative_generate
    from minispark.serving.schedule import FixedLength
    from tests.helpers import hf_greedy, random_dspark

    from minispark.target.session import PromptInputs

    ids = target.encode(prompt="the cat sat on the mat").input_ids[0].tolist()
    token = hf_greedy(target, PromptInputs(torch.tensor([ids]), torch.arange(len(ids))), 1)[0]
    for k in range(1, len(ids)):  # the token put into the prompt, where the next greedy token stays the same
        held = ids[:k] + [token] + ids[k:]
        prompt = PromptInputs(torch.tensor([held]), torch.arange(len(held)))
        greedy = hf_greedy(target, prompt, 4)
        if greedy[0] == token:
            break
    assert greedy[0] == token
    static = torch.tensor([t for t in range(target.vocab_size) if t != token][:64])
    lm_head = target.lm_head.weight.detach()
    for context_vocab, accepted in ((True, 1), (False, 0)):
        drafter = random_dspark(target, vocab_ids=static, context_vocab=context_vocab)
        pointing = torch.zeros(drafter.max_gamma, target.hidden_size)
        pointing[0] = 100 * lm_head[token] / lm_head[token].norm()
        drafter.model.forward_block = lambda context, anchor, position: pointing  # (γ, d) the backbone's output
        with target.session(drafter.feature_layers) as session:
            result = speculative_generate(session, prompt, drafter, GREEDY, FixedLength(drafter.max_gamma),
                                          max_new_tokens=4, eos_ids=target.eos_token_ids)
        assert result.token_ids == greedy
        assert min(result.stats.accepted_lengths[0], 1) == accepted


@pytest.mark.parametrize("tree", [False, True])
def test_context_vocabulary_keeps_greedy_parity(target, tree: bool) -> None:
    """A random drafter with a small static set and the request's tokens beside it (most of what it drafts):
    chains and trees decode to the target's own greedy output."""
    from minispark.serving.draft_tree import TreePolicy
    from minispark.serving.engine import speculative_generate
    from minispark.serving.ngram import NgramMatch
    from minispark.serving.schedule import FixedLength
    from tests.helpers import assert_parity, hf_greedy, random_dspark

    drafter = random_dspark(target, vocab_ids=torch.arange(0, 2048, 64), context_vocab=True)
    for text in ("the cat sat on the mat", "def f(x): return x + 1"):
        inputs = target.encode(prompt=text)
        policy = TreePolicy(drafter.max_gamma, 8, lookup=NgramMatch()) if tree else FixedLength(drafter.max_gamma)
        with target.session(drafter.feature_layers) as session:
            result = speculative_generate(session, inputs, drafter, GREEDY, policy, max_new_tokens=24,
                                          eos_ids=target.eos_token_ids)
        assert_parity(target, inputs, result.token_ids, hf_greedy(target, inputs, 24))


def test_chi_square_catches_a_wrong_sampler() -> None:
    """Negative control: draw from the base logits (no Markov bias) while the test compares
    against the biased distributions — the test must reject."""
    model = make_model("vanilla", vocab=SMALL_V, seed=3)
    hidden = 0.5 * torch.randn(GAMMA, D, generator=torch.Generator().manual_seed(4))  # flat-ish p_k
    sampling, anchor = SamplingConfig(1.0), 2
    wrong = make_model("vanilla", vocab=SMALL_V, seed=3)
    with torch.no_grad():
        wrong.markov.markov_w2.weight.zero_()
        tokens, _ = draw_many(wrong, hidden, anchor, sampling, DRAWS, seed=10)
        prev = torch.cat([torch.full((len(tokens), 1), anchor), tokens[:, :-1]], dim=1)
        claimed = probabilities(model.head_logits(hidden.expand(len(tokens), -1, -1), prev), sampling)
    assert pair_chi_square(tokens, claimed, anchor, SMALL_V) < 1e-6


# ---- frozen weights ---------------------------------------------------------------------------


@pytest.mark.parametrize(("head", "markov_w1"), [(h, "table") for h in HEADS] + [("gated", "embedding")])
def test_only_trainable_params_learn(head: str, markov_w1: str) -> None:
    model = make_model(head, markov_w1=markov_w1).train()
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if n.startswith(("embed_tokens", "lm_head"))}
    trainable = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert set(frozen) == {"embed_tokens.weight", "lm_head.weight"}
    assert not set(frozen) & set(trainable)
    ids, features, positions = sequence(20)
    anchors = torch.tensor([3, 7, 10])
    blocks = torch.stack([ids[a : a + GAMMA + 1] for a in anchors])[None]
    out = model.forward_train(features[None], positions[None], blocks, positions[anchors][None])
    logits = model.head_logits(out.hidden, out.prev_tokens)
    loss = F.cross_entropy(logits.flatten(0, -2), out.labels.flatten())
    loss = loss + F.binary_cross_entropy_with_logits(
        model.confidence_logits(out.hidden, out.prev_tokens), torch.full(out.labels.shape, 0.5)
    )
    # A trainer that forgets to filter parameters must still leave the frozen ones alone.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    loss.backward()
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
        else:
            assert p.grad is None, name
    optimizer.step()
    for name, p in model.named_parameters():
        if name in frozen:
            assert torch.equal(p, frozen[name]), name
        else:
            assert not torch.equal(p, trainable[name]), name


# ---- the length policy ------------------------------------------------------------------------


class StopAt(LengthPolicy):
    """Admits positions < ``stop``; records (k, c_k, generator state) at every question."""

    def __init__(self, stop: int, generator: torch.Generator) -> None:
        self.stop, self.generator, self.calls = stop, generator, []
        self.gamma = GAMMA

    def start_round(self, context_length: int) -> None:
        pass

    def admit(self, position: int, confidence: float | None) -> bool:
        self.calls.append((position, confidence, self.generator.get_state()))
        return position < self.stop


@pytest.mark.parametrize("confidence", [True, False])
@pytest.mark.parametrize("head", ["vanilla", "rnn"])
def test_policy_is_asked_before_each_draw(head: str, confidence: bool) -> None:
    """The engine's schedule step over a DSpark block: the Appendix-A counterexample (x_k's value
    deciding x_k's admission) is impossible, because at admit(k) x_k has not been drawn."""
    model = make_model(head, confidence=confidence)
    hidden = torch.randn(GAMMA, D, generator=torch.Generator().manual_seed(5))
    anchor, sampling = torch.tensor(7), SamplingConfig(1.0)
    state = DecodeState(ids=anchor.reshape(1), prompt_length=1)
    generator = make_generator(0)
    full = StopAt(GAMMA + 1, generator)
    reference = schedule(SequentialBlock(model, hidden, anchor, sampling, generator), full, state)
    assert [k for k, _, _ in full.calls] == list(range(1, GAMMA + 1))
    for stop in range(1, GAMMA + 1):
        generator = make_generator(0)
        policy = StopAt(stop, generator)
        proposal = schedule(SequentialBlock(model, hidden, anchor, sampling, generator), policy, state)
        assert len(proposal) == stop - 1
        assert [k for k, _, _ in policy.calls] == list(range(1, stop + 1))
        assert torch.equal(proposal.tokens, reference.tokens[: stop - 1])
        for (_, c, rng_state), (_, c_ref, rng_ref) in zip(policy.calls, full.calls):
            # At admit(k) exactly k−1 tokens have been drawn, and c_k is already fixed.
            assert torch.equal(rng_state, rng_ref)
            assert c == c_ref
        # Refusing position k means x_k is never drawn.
        assert torch.equal(generator.get_state(), full.calls[stop - 1][2])
        if confidence:
            assert all(c is not None for _, c, _ in policy.calls)
            if stop > 1:
                expected = torch.tensor([c for _, c, _ in policy.calls[: stop - 1]])
                torch.testing.assert_close(proposal.confidences, expected)
        else:
            assert all(c is None for _, c, _ in policy.calls)
            assert proposal.confidences is None


# ---- config and checkpoint --------------------------------------------------------------------


def test_config_json_round_trip(tmp_path) -> None:
    config = make_config("gated", window=64)
    config.save(tmp_path / "config.json")
    assert DraftConfig.load(tmp_path / "config.json") == config
    data = json.loads(config.to_json())
    data["bogus"] = 1
    with pytest.raises(ValueError, match="bogus"):
        DraftConfig.from_dict(data)
    with pytest.raises(ValueError, match="head"):
        make_config("crf")


def test_checkpoint_round_trip(tmp_path) -> None:
    model = make_model("rnn", window=5)
    embed, lm_head = target_weights()
    path = tmp_path / "drafter"
    save_drafter(model, path)
    save_drafter(model, path)  # overwriting an existing checkpoint is fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drafter"]
    stored = load_file(str(path / "model.safetensors"))
    assert not any(k.startswith(("embed_tokens", "lm_head")) for k in stored)

    drafter = load_drafter(path, embed, lm_head, "cpu", target_identity="tiny-test-target@0")
    assert drafter.feature_layers == (0, 2, 3)
    for (name, a), (_, b) in zip(model.state_dict().items(), drafter.model.state_dict().items()):
        assert torch.equal(a, b), name
    assert not drafter.model.lm_head.weight.requires_grad

    with pytest.raises(MinisparkError, match="trained for target") as error:
        load_drafter(path, embed, lm_head, "cpu", target_identity="another-target")
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="shape"):
        load_drafter(path, embed[:, :16], lm_head, "cpu")


def test_checkpoint_round_trip_with_a_draft_vocabulary(tmp_path) -> None:
    model = make_model("vanilla", draft_vocab=12)
    embed, lm_head = target_weights()
    save_drafter(model, tmp_path / "drafter")
    stored = load_file(str(tmp_path / "drafter" / "model.safetensors"))
    assert torch.equal(stored["vocab_ids"], subset(V, 12)) and "vocab_index" not in stored
    assert stored["markov.markov_w1.weight"].shape == (13, 16) and stored["markov.markov_w2.weight"].shape == (12, 16)
    loaded = load_drafter(tmp_path / "drafter", embed, lm_head, "cpu").model
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    assert torch.equal(loaded.vocab_index, model.vocab_index)


def test_markov_w1_tied_to_the_frozen_embedding(tmp_path) -> None:
    """markov_w1 = "embedding": W1[x] = P·E[x] for every target token (outside a draft vocabulary too),
    an (r, d) projection stored instead of a table, and the full table DeepSpec's layout wants."""
    model = make_model("vanilla", draft_vocab=12, markov_w1="embedding")
    embed, lm_head = target_weights()
    projection = model.markov.markov_w1.weight  # (r, d)
    tokens = torch.tensor([[0, 5, V - 2]])  # V - 2 lies outside the draft vocabulary
    assert V - 2 not in model.vocab_ids.tolist()
    torch.testing.assert_close(model.markov_embedding(tokens), embed[tokens] @ projection.T)
    torch.testing.assert_close(model.markov_table(), embed @ projection.T)
    save_drafter(model, tmp_path / "drafter")
    stored = load_file(str(tmp_path / "drafter" / "model.safetensors"))
    assert stored["markov.markov_w1.weight"].shape == (16, D)
    loaded = load_drafter(tmp_path / "drafter", embed, lm_head, "cpu").model
    assert loaded.config.markov_w1 == "embedding"
    torch.testing.assert_close(loaded.markov_table(), model.markov_table())
    with pytest.raises(ValueError, match="markov_w1"):
        make_config(markov_w1="shared")


def test_empty_context_and_bfloat16() -> None:
    """A one-token prompt leaves the cache empty; bf16 weights still give float32 p_d."""
    embed, lm_head = target_weights()
    config = make_config("rnn", window=3)
    config.dtype = "bfloat16"
    drafter = DSparkDrafter(DraftModel.from_target(config, embed, lm_head))
    drafter.reset(torch.empty(0, dtype=torch.long), torch.empty(0, M * D), torch.empty(0, dtype=torch.long))
    ids, features, positions = sequence(8)
    for anchor in (0, 1):
        proposal = drafter.propose(ids[: anchor + 1], int(positions[anchor]), SamplingConfig(1.0), make_generator(0)).proposal(GAMMA)
        assert len(proposal) == GAMMA and proposal.probs.dtype == torch.float32
        torch.testing.assert_close(proposal.probs.sum(-1), torch.ones(GAMMA))
        drafter.commit(0, ids[anchor : anchor + 1], features[anchor : anchor + 1].bfloat16(), positions[anchor : anchor + 1])
    assert len(drafter.context) == 2
