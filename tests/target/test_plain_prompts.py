"""A target without a chat template (a base model): plain prompts and transcripts (``target/plain_prompts.py``),
through generate, chat, answers, bench and serve, with greedy parity and never a traceback.

    .venv/bin/python -m pytest -q tests/target/test_plain_prompts.py
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import openai
import pytest
from typer.testing import CliRunner

from minispark.cli import app
from minispark.core.errors import MinisparkError
from minispark.server.app import LocalServer, ServeConfig, served_model_id
from minispark.serving.builder import build_serving
from minispark.serving.conversation import Conversation
from minispark.serving.engine import speculative_generate
from minispark.serving.generate import generate
from minispark.serving.schedule import FixedLength
from minispark.target.loading import Target, load_target
from minispark.target.plain_prompts import TURN_STOP, reply_text, transcript
from minispark.target.sampling import SamplingConfig
from tests.helpers import assert_parity, hf_greedy, random_dspark, without_chat_template

NOTICE = "has no chat template (a base model?): a prompt is given to it as plain text"


@pytest.fixture(scope="module")
def base_dir(tiny_dir, tmp_path_factory) -> Path:
    return without_chat_template(tiny_dir("llama"), tmp_path_factory.mktemp("base") / "llama")


@pytest.fixture(scope="module")
def base(base_dir) -> Target:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        target = load_target(str(base_dir))
    assert any(NOTICE in str(w.message) for w in caught)  # said once, when it loads
    return target


def test_transcript_turns_and_refusals() -> None:
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]}, {"role": "user", "content": "Bye"}]
    assert transcript(messages, "t") == "System: Be terse.\n\nUser: Hi\n\nAssistant: Hello\n\nUser: Bye\n\nAssistant:"
    assert transcript(messages[:2], "t", add_generation_prompt=False) == "System: Be terse.\n\nUser: Hi"
    with pytest.raises(MinisparkError, match="plain text, without images"):
        transcript([{"role": "user", "content": [{"type": "image", "image": "a.png"}]}], "t")
    with pytest.raises(MinisparkError, match="no speaker for role 'tool'"):
        transcript([{"role": "tool", "content": "x"}], "t")
    assert reply_text("Sure.\n" + TURN_STOP) == "Sure." and reply_text("Sure.") == "Sure."


def test_a_prompt_is_plain_text_and_decodes_as_the_target_alone(base: Target) -> None:
    """A lone prompt is the tokenizer's own encoding (its special tokens added); drafting keeps greedy parity."""
    inputs = base.encode(prompt="the cat sat on")
    assert inputs.input_ids[0].tolist() == base.tokenizer("the cat sat on")["input_ids"]
    assert base.encode([{"role": "user", "content": "Hi"}]).input_ids[0].tolist() == \
        base.tokenizer("User: Hi\n\nAssistant:")["input_ids"]
    with pytest.raises(MinisparkError, match="plain text, without images"):
        base.encode(prompt="what is this?", images=["cat.png"])
    drafter = random_dspark(base)
    single = base.encode(prompt="Hi")
    assert single.length == 1  # no BOS in this tokenizer: nothing is cached before the anchor
    for prompt in (inputs, single):
        with base.session(drafter.feature_layers) as session:
            result = speculative_generate(session, prompt, drafter, SamplingConfig(0.0), FixedLength(4),
                                          max_new_tokens=24, eos_ids=base.eos_token_ids)
        assert_parity(base, prompt, result.token_ids, hf_greedy(base, prompt, 24))


def test_chat_is_a_transcript_that_stops_at_the_next_turn(base: Target) -> None:
    drafter = random_dspark(base)
    with Conversation(base, drafter, max_new_tokens=12, stop_strings=["zzz"]) as chat:
        first = chat.say("Hello")
        second = chat.say("And then?")
        assert TURN_STOP not in first.reply and TURN_STOP not in second.reply
        assert second.prompt_tokens == base.encode(chat.messages[:-1]).length  # the transcript so far
        # the second turn's prompt continues the first's transcript: its cached tokens were reused
        assert second.stats.reused_tokens > 0
    # a reply ending at the next turn's marker has it cut
    stop = chat.stop(base.tokenizer("Fine.\nUser:", add_special_tokens=False)["input_ids"])
    assert stop is not None


def test_cli_commands_take_a_base_model_with_a_notice(base_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["generate", "--target", str(base_dir), "--prompt", "the cat", "--drafter", "none",
                                 "--max-new-tokens", "6", "--json"])
    assert result.exit_code == 0, result.output
    assert NOTICE in result.stderr and len(json.loads(result.stdout)["token_ids"]) == 6
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"count to {n}"}) + "\n" for n in range(3)) +
                       json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    result = runner.invoke(app, ["answers", "--target", str(base_dir), "--prompts", str(prompts), "--out",
                                 str(tmp_path / "answers"), "--max-new-tokens", "8"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["chat", "--target", str(base_dir), "--drafter", "lookup", "--max-new-tokens", "4",
                                 "--seed", "0"], input="Hi\nAgain\n/quit\n")
    assert result.exit_code == 0 and NOTICE in result.output, result.output
    result = runner.invoke(app, ["bench", "--target", str(base_dir), "--prompts", str(prompts), "--modes",
                                 "target,lookup", "--max-new-tokens", "8", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["summary"]["lookup"]["parity"] is True


def test_serve_answers_a_base_model(base: Target) -> None:
    messages = [{"role": "user", "content": "Hello there"}]
    want = reply_text(generate(base, messages=messages, drafter="none", max_new_tokens=16,
                               stop_strings=[TURN_STOP]).text)
    with LocalServer(base, build_serving(base, "lookup"), ServeConfig(served_model_id(base), slots=1),
                     lifetime_s=300) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        reply = client.chat.completions.create(model=served_model_id(base), messages=messages, temperature=0,
                                               max_tokens=16)
    assert reply.choices[0].message.content.rstrip("\n") == want.rstrip("\n")
