"""Training for held-out acceptance: the held-out split never enters a training cache, a training
run scores a held-out cache and ships its best checkpoint, and that drafter (with a draft
vocabulary) is exact in the loop (greedy parity vs target-only).

    .venv/bin/python -m pytest -q tests/training/test_heldout.py
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file

from minispark.data.cache import CacheConfig, build_cache
from minispark.core.errors import MinisparkError
from minispark.serving.generate import generate, make_drafter
from minispark.data.prompts import HELDOUT_FILE, PromptFileError
from minispark.training.heldout import HeldoutProxy
from minispark.training.recipes import load_recipe
from minispark.serving.schedule import FixedLength
from minispark.target.loading import load_target
from minispark.training.train import train
from minispark.training.trainer import BEST_DIR, HELDOUT_FILE as SCORE_FILE, METRICS_FILE
from tests.helpers import assert_parity, hf_greedy

TRAIN_PROMPTS = ["Tell me a story.", "What is 2 + 2?", "List three fruits.", "Explain gravity briefly."]
CACHE = dict(num_samples=8, max_new_tokens=24, layers="1,2", anchors_per_sample=64, window=16, block=4,
             dtype="fp32", batch_size=8)


@pytest.fixture(scope="module")
def run(tiny_dir, tmp_path_factory):
    """A tiny target, a training cache, a held-out cache of the shipped held-out prompts, and a run."""
    target_dir = tiny_dir("llama")
    target = load_target(str(target_dir))
    root = tmp_path_factory.mktemp("heldout")
    prompts = root / "train.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in TRAIN_PROMPTS))
    build_cache(CacheConfig(prompts=prompts, out=root / "cache", **CACHE), target=target, log=lambda _: None)
    build_cache(CacheConfig(prompts=HELDOUT_FILE, out=root / "held", split="heldout", **CACHE), target=target,
                log=lambda _: None)
    recipe = load_recipe("tiny", ["steps=24", "eval_every=8", "eval_anchors=32", "draft_vocab=96",
                                  f"heldout_cache={root / 'held'}"])
    report = train(recipe, root / "cache", root / "train", target=target, log=None)
    return target, root, report


def test_a_training_cache_refuses_held_out_prompts(tiny_dir, tmp_path):
    target = load_target(str(tiny_dir("llama")))
    held = HELDOUT_FILE.read_text().splitlines()
    prompts = tmp_path / "mixed.jsonl"
    prompts.write_text(json.dumps({"prompt": "A fresh question."}) + "\n" + held[3] + "\n")
    with pytest.raises(PromptFileError, match=rf"{prompts}:2: this prompt is in the held-out split"):
        build_cache(CacheConfig(prompts=prompts, out=tmp_path / "cache", **CACHE), target=target)
    assert not (tmp_path / "cache").exists()  # refused before any work
    # The same prompt in another spelling (case, spaces) is the same prompt.
    record = json.loads(held[3])
    text = record.get("prompt") or record["messages"][-1]["content"]
    prompts.write_text(json.dumps({"prompt": "  " + text.upper().replace(" ", "   ")}) + "\n")
    with pytest.raises(PromptFileError, match="held-out split"):
        build_cache(CacheConfig(prompts=prompts, out=tmp_path / "cache", **CACHE), target=target)


def test_an_evaluation_cache_is_never_trained_on(run, tmp_path):
    target, root, _ = run
    with pytest.raises(MinisparkError, match="held-out evaluation cache"):
        train(load_recipe("tiny", ["steps=2"]), root / "held", tmp_path / "out", target=target, log=None)
    with pytest.raises(MinisparkError, match="is a training cache"):
        train(load_recipe("tiny", ["steps=2", f"heldout_cache={root / 'cache'}"]), root / "cache",
              tmp_path / "out2", target=target, log=None)


def test_the_drafter_is_the_best_checkpoint_by_held_out_tau(run):
    _, root, report = run
    rows = [json.loads(line) for line in (root / "train" / METRICS_FILE).read_text().splitlines()]
    evaluations = [row for row in rows if "heldout_tau" in row]
    assert [row["step"] for row in evaluations] == [8, 16, 24] == [row["step"] for row in report.evaluations]
    best = max(evaluations, key=lambda row: row["heldout_tau"])
    assert all(1.0 <= row["heldout_tau"] <= 5.0 and row["heldout_blocks"] > 0 for row in evaluations)
    saved = json.loads((root / "train" / BEST_DIR / SCORE_FILE).read_text())
    assert saved["step"] == best["step"] and saved["heldout_tau"] == best["heldout_tau"]
    shipped = load_file(str(report.drafter / "model.safetensors"))
    kept = load_file(str(root / "train" / BEST_DIR / "model.safetensors"))
    assert shipped.keys() == kept.keys() and all(torch.equal(shipped[k], kept[k]) for k in kept)
    assert shipped["vocab_ids"].numel() == 96


def test_draft_vocabulary_drafter_keeps_greedy_parity(run):
    target, _, report = run
    drafter = make_drafter(str(report.drafter), target)
    for prompt in TRAIN_PROMPTS[:2] + ["Name a colour."]:
        inputs = target.encode(prompt=prompt)
        out = generate(target, prompt, drafter=drafter, policy=FixedLength(drafter.config.block_size),
                       max_new_tokens=32)
        assert_parity(target, inputs, out.result.token_ids, hf_greedy(target, inputs, 32))


def test_greedy_proxy_equals_an_anchor_by_anchor_reference(run):
    """T = 0 proxy: leading positions where the drafter's argmax is the target's, bonus included."""
    from minispark.training.anchor_batches import make_batch
    from minispark.data.cache_format import CacheReader
    from minispark.model.checkpoint import load_draft_model
    from minispark.training.heldout import HeldoutProxy

    target, root, report = run
    head = target.lm_head.weight.detach()
    model = load_draft_model(report.drafter, target.model.get_input_embeddings().weight.detach(), head, "cpu")
    reader = CacheReader(root / "held")
    score = HeldoutProxy.from_reader(reader, 4, max_anchors=12, full_lm_head=head).score(model)
    taus = []
    with torch.no_grad():
        for i in sorted({int(round(x)) for x in torch.linspace(0, len(reader) - 1, 12).tolist()}):
            batch = make_batch([reader[i]], 4)
            fwd = model.forward_train(batch.features, batch.context_positions, batch.block_tokens,
                                      batch.anchor_positions, batch.context_valid)
            draft = model.vocab_ids[model.head_logits(fwd.hidden, fwd.prev_tokens)[0, 0].argmax(-1)]  # (γ,)
            wanted = (batch.target_hidden[0, 0] @ head.T).argmax(-1)  # (γ,)
            valid = batch.valid[0, 0]
            if not valid[0]:
                continue
            run_length = 0
            while run_length < 4 and valid[run_length] and draft[run_length] == wanted[run_length]:
                run_length += 1
            taus.append(1 + run_length)
    assert score.blocks == len(taus)
    assert score.tau_greedy == pytest.approx(sum(taus) / len(taus))
    assert 1.0 <= score.tau_greedy <= 5.0 and all(0 <= a <= 1 for a in score.acceptance_greedy)


def test_patience_stops_when_held_out_tau_stops_improving(run, tmp_path, monkeypatch):
    """Held-out τ that falls after the first evaluation (each real score lowered by how many came before:
    any learning rate moves the sampled τ a little, so a real plateau is not reproducible): the run stops
    ``patience`` steps after the best one and still exports the best checkpoint."""
    target, root, _ = run
    real_score, calls = HeldoutProxy.score, []

    def falling(self, model, *args, **kwargs):
        score = real_score(self, model, *args, **kwargs)
        calls.append(score.tau)
        return dataclasses.replace(score, tau=score.tau - len(calls))

    monkeypatch.setattr(HeldoutProxy, "score", falling)
    recipe = load_recipe("tiny", ["steps=40", "eval_every=2", "eval_anchors=16", "patience=4",
                                  "checkpoint_every=100", f"heldout_cache={root / 'held'}"])
    report = train(recipe, root / "cache", tmp_path / "out", target=target, log=None)
    assert report.last_step == 6 and [row["step"] for row in report.evaluations] == [2, 4, 6]
    assert json.loads((tmp_path / "out" / BEST_DIR / SCORE_FILE).read_text())["step"] == 2
    assert (tmp_path / "out" / "checkpoint-000006").is_dir() and (report.drafter / "model.safetensors").is_file()
    # A more patient rule resumes the stopped run where it stopped, as a run under that rule would have gone on.
    recipe = load_recipe("tiny", ["steps=40", "eval_every=2", "eval_anchors=16", "patience=10",
                                  "checkpoint_every=100", f"heldout_cache={root / 'held'}"])
    again = train(recipe, root / "cache", tmp_path / "out", resume=True, target=target, log=None)
    assert (again.first_step, again.last_step) == (7, 12) and [row["step"] for row in again.evaluations] == [8, 10, 12]
    assert json.loads((tmp_path / "out" / BEST_DIR / SCORE_FILE).read_text())["step"] == 2
