"""The walked greedy loop (``measuring/loop_walk.py``) equals the real loop's rounds, one by one, on a tiny target.

    .venv/bin/python -m pytest -q tests/measuring/test_loop_walk.py
"""

from __future__ import annotations

import json

import pytest

from minispark.data.answers import AnswerConfig, AnswerSet, build_answers
from minispark.core.errors import MinisparkError
from minispark.model.checkpoint import load_draft_model
from minispark.serving.generate import generate, make_drafter
from minispark.serving.schedule import FixedLength
from minispark.target.loading import load_target
from minispark.measuring.loop_walk import run_lengths, walk, walk_drafter, walk_score
from minispark.training.online import MemoryReader, OnlineSource
from minispark.training.recipes import load_recipe
from minispark.training.train import train

PROMPTS = ["Tell me a story.", "What is 2 + 2?", "List three fruits.", "Explain gravity briefly."]
MAX_NEW = 32


def test_walk_jumps_one_plus_accepted_from_the_prompts_last_token():
    # prompt of 5 tokens: anchors are answer positions 5.. ; the first round (anchor 4) accepts nothing
    accepted = {5: 2, 6: 7, 7: 7, 8: 1, 9: 0, 10: 3}
    assert walk(accepted, 5, 9, 100) == [0, 2, 1, 3]  # anchors 4, 5, 8, 10: commits 1, 3, 2, 4 → 10 ≥ 9
    assert walk(accepted, 5, 9, 3) == [0, 2]  # cut at 3 new tokens as the loop cuts
    score = walk_score({0: accepted}, [(0, 5, 9)], 100)
    assert (score.rounds, score.tokens) == (4, 10) and score.tau == pytest.approx(10 / 4)
    assert score.anchors == 6 and score.uniform_tau == pytest.approx(26 / 6)
    assert score.harmonic_tau < score.uniform_tau


def test_walk_equals_the_real_greedy_loop_round_by_round(tiny_dir, tmp_path):
    target = load_target(str(tiny_dir("llama")))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    build_answers(AnswerConfig(prompts=prompts, out=tmp_path / "answers", num_samples=len(PROMPTS),
                               max_new_tokens=MAX_NEW, temperature=0.0, batch_size=2), target=target,
                  log=lambda _: None)
    answers = AnswerSet(tmp_path / "answers")
    # A drafter fitted to these very answers: it accepts often, so the walk's jumps are exercised.
    config = load_recipe("tiny", ["steps=120", "window=6", "block_size=4", "feature_layers=[1,2]",
                                  f"answers_dir={answers.directory}", "online_pool=4"])
    drafter_dir = train(config, out_dir=tmp_path / "run", target=target, log=None).drafter
    head = target.lm_head.weight.detach()
    model = load_draft_model(drafter_dir, target.model.get_input_embeddings().weight.detach(), head, "cpu")
    c = model.config
    source = OnlineSource(answers, target, list(c.feature_layers), c.window, c.block_size, "fp32")
    accepted = run_lengths(model.eval(), MemoryReader(source), head)
    drafter = make_drafter(str(drafter_dir), target, "float")
    total = 0
    for i in range(len(answers)):
        stored = answers[i]
        out = generate(target, PROMPTS[stored.prompt_line - 1], drafter=drafter, policy=FixedLength(c.block_size),
                       max_new_tokens=MAX_NEW)
        assert out.result.token_ids == stored.answer_ids.tolist()[:MAX_NEW]
        walked = walk(accepted[stored.sample_index], len(stored.prompt_ids), len(stored.answer_ids), MAX_NEW)
        assert walked == out.result.stats.accepted_lengths
        total += sum(walked)
    assert total > 0  # the drafter accepts something, so the walk's jumps are exercised


def test_a_sampled_answer_set_is_refused(tiny_dir, tmp_path):
    """At T > 0 an anchor's outcome depends on the draw, so there is no walk: one line naming the set."""
    target = load_target(str(tiny_dir("llama")))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": PROMPTS[0]}) + "\n")
    build_answers(AnswerConfig(prompts=prompts, out=tmp_path / "sampled", num_samples=1, max_new_tokens=4,
                               temperature=0.7), target=target, log=lambda _: None)
    with pytest.raises(MinisparkError, match="sampled: regenerated at T 0.7"):
        walk_drafter(tmp_path / "no-drafter", tmp_path / "sampled", target)
