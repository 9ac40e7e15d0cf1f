"""Sessions that span turns: a later turn reuses the KV cache and still equals the whole conversation
run from scratch, token for token, with every drafter; after any stop the KV cache and the drafter's
context hold exactly the kept output.

Reference: for each turn, the conversation so far rendered by the chat template and decoded greedily
by HF ``generate`` in a fresh cache. Negative control: a conversation whose earlier reply is
rewritten must not reuse the rewritten tokens (``recomputed_tokens`` > 0) and still match.
"""

from __future__ import annotations

import pytest
import torch

from minispark.serving.conversation import Conversation
from minispark.serving.drafters.base import Drafter, NoDrafter
from minispark.serving.drafters.dspark import DSparkDrafter
from minispark.serving.drafters.lookup import LookupDrafter
from minispark.serving.engine import speculative_generate
from minispark.target.sampling import SamplingConfig
from minispark.serving.schedule import FixedLength
from minispark.target.loading import Target, load_target
from tests.helpers import OracleDrafter, assert_parity, hf_greedy, random_dspark

MAX_NEW = 16


@pytest.fixture(scope="module")
def tiny_vlm(tiny_dir) -> Target:
    return load_target(str(tiny_dir("qwen2_5_vl")))


@pytest.fixture(scope="module")
def tiny_llama(tiny_dir) -> Target:
    return load_target(str(tiny_dir("llama")))


def check_session(conversation: Conversation) -> None:
    """The KV cache holds the committed tokens minus the anchor; the DSpark context one row each."""
    committed = conversation.committed_ids
    session = conversation.session
    assert torch.equal(session.ids.cpu(), committed[:-1])
    assert session.cache_length == committed.numel() - 1
    if isinstance(conversation.drafter, DSparkDrafter):  # window 0: no row ever dropped
        positions = conversation.drafter.context.positions.cpu()
        assert positions.numel() == session.cache_length
        assert bool((positions[1:] >= positions[:-1]).all())
        assert int(positions[-1]) < int(session.text_positions(session.cache_length, 1)[0])  # below the anchor


def run_turns(target: Target, drafter: Drafter, turns: list[tuple[str, list]]) -> list[tuple[int, int]]:
    """Each turn must equal HF greedy on the whole conversation; returns (reused, prefilled) per turn."""
    saved = []
    with Conversation(target, drafter, policy=FixedLength(3), max_new_tokens=MAX_NEW) as conversation:
        for text, images in turns:
            content = [{"type": "image", "image": str(p)} for p in images] + [{"type": "text", "text": text}]
            scratch = target.encode(conversation.messages + [{"role": "user", "content": content if images else text}])
            want = hf_greedy(target, scratch, MAX_NEW)
            turn = conversation.say(text, images)
            assert turn.prompt_tokens == scratch.length
            assert_parity(target, scratch, turn.token_ids, want)
            check_session(conversation)
            saved.append((turn.stats.reused_tokens, turn.stats.prefill_tokens))
    return saved


def drafters(target: Target) -> list[Drafter]:
    return [NoDrafter(), LookupDrafter(), random_dspark(target)]


@pytest.mark.parametrize("index", [0, 1, 2], ids=["none", "lookup", "dspark"])
def test_vlm_turns_with_image_equal_from_scratch(tiny_vlm: Target, test_image, index: int) -> None:
    drafter = drafters(tiny_vlm)[index]
    turns = [("Hello! Who are you?", []), ("What is in this picture?", [test_image]), ("And its colour?", [])]
    saved = run_turns(tiny_vlm, drafter, turns)
    print(f"\n{drafter.name}: (reused, prefilled) prompt tokens per turn: {saved}")
    assert saved[0][0] == 0
    assert all(reused > 0 for reused, _ in saved[1:])
    assert saved[2][0] > saved[1][0]  # turn 3 keeps turn 2's image in the cache


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_other_vlm_families_turns_with_image(tiny_dir, test_image, family: str) -> None:
    target = load_target(str(tiny_dir(family)))
    turns = [("Hi!", []), ("Describe it.", [test_image]), ("Thanks. Again?", [])]
    saved = run_turns(target, LookupDrafter(), turns)
    assert saved[2][0] > saved[1][0] > 0


def test_llama_text_turns_equal_from_scratch(tiny_llama: Target) -> None:
    turns = [("Tell me a story.", []), ("Shorter, please.", [])]
    for drafter in (NoDrafter(), LookupDrafter()):
        saved = run_turns(tiny_llama, drafter, turns)
        assert saved[1][0] > saved[0][1] // 2


def test_rewritten_reply_is_recomputed_not_reused(tiny_vlm: Target) -> None:
    """Negative control: the template renders an earlier reply other than the cached tokens."""
    with Conversation(tiny_vlm, LookupDrafter(), policy=FixedLength(3), max_new_tokens=MAX_NEW) as conversation:
        conversation.say("Hello!")
        conversation.turns[0].reply = "A reply the model never generated."
        scratch = tiny_vlm.encode(conversation.messages + [{"role": "user", "content": "Go on."}])
        turn = conversation.say("Go on.")
        assert turn.recomputed_tokens > 0
        assert_parity(tiny_vlm, scratch, turn.token_ids, hf_greedy(tiny_vlm, scratch, MAX_NEW))
        check_session(conversation)


@pytest.mark.parametrize("stop", ["eos", "max_tokens", "interrupted"])
def test_stop_leaves_exactly_the_kept_output(tiny_llama: Target, stop: str) -> None:
    """An always-right drafter commits 8 tokens a round; a stop inside that block must crop it."""
    inputs = tiny_llama.encode(prompt="Count to ten.")
    reference = hf_greedy(tiny_llama, inputs, 24)
    oracle = OracleDrafter(reference, inputs.length, True, tiny_llama.vocab_size)
    eos, max_new, interrupt = set(), 24, None
    if stop == "eos":
        eos = {reference[5]}
    elif stop == "max_tokens":
        max_new = 3
    else:
        calls = iter([False, False, True])
        interrupt = lambda: next(calls)  # noqa: E731 - stop before the third round
    with tiny_llama.session() as session:
        result = speculative_generate(session, inputs, oracle, SamplingConfig(), FixedLength(7),
                                      max_new_tokens=max_new, eos_ids=eos, interrupt=interrupt)
        committed = inputs.input_ids[0].tolist() + result.token_ids
        assert result.stop_reason == stop
        assert session.ids.tolist() == committed[:-1]
        assert session.cache_length == len(committed) - 1
    assert result.token_ids == reference[: len(result.token_ids)]
    assert len(result.token_ids) == {"eos": reference.index(reference[5]) + 1, "max_tokens": 3,
                                     "interrupted": 16}[stop]


def test_embedded_second_turn_reuses_the_whole_first_turn(embedded_target: Target) -> None:
    """A trained target's replies re-tokenize to themselves: turn 2 forwards only the new message."""
    with Conversation(embedded_target, LookupDrafter(), policy=FixedLength(3), max_new_tokens=12) as conversation:
        first = conversation.say("Name a colour.")
        scratch = embedded_target.encode(conversation.messages + [{"role": "user", "content": "Another one?"}])
        second = conversation.say("Another one?")
        assert_parity(embedded_target, scratch, second.token_ids, hf_greedy(embedded_target, scratch, 12))
        check_session(conversation)
    assert second.recomputed_tokens == 0
    assert second.stats.reused_tokens == first.prompt_tokens + len(first.token_ids) - 1
    print(f"\nembedded turn 2: reused {second.stats.reused_tokens}, prefilled {second.stats.prefill_tokens} "
          f"of {second.prompt_tokens - 1} prompt tokens")


def test_a_first_message_too_long_is_blamed_not_the_conversation(tiny_llama: Target) -> None:
    """Alone past the context, a message is the fault, first or not: "/reset" would not help; only a message that
    fits alone but not after the turns before it is the conversation's fault."""
    from minispark.core.errors import MinisparkError

    with Conversation(tiny_llama, LookupDrafter(), policy=FixedLength(3), max_new_tokens=2) as conversation:
        with pytest.raises(MinisparkError, match="^your message: .*; shorten it$"):
            conversation.say("word " * 5000)
        conversation.say("Hello!")
        with pytest.raises(MinisparkError, match="^your message: .*; shorten it$"):  # was "the conversation"
            conversation.say("word " * 5000)
        conversation.say("word " * 2500)
        with pytest.raises(MinisparkError, match="^the conversation: .*; /reset to start a new one$"):
            conversation.say("word " * 2500)
