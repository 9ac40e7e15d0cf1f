"""Answer sets: refill sampling equals one-by-one decoding, the row sampler draws the target law, and a set
grows and resumes after a kill with earlier shards unchanged; the held-out split never enters one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from scipy.stats import chisquare

from minispark.data import answer_sampler
from minispark.data.answer_sampler import sample_answers
from minispark.data.answers import AnswerConfig, AnswerSet, AnswerSetError, build_answers, shard_name
from minispark.data.prompts import HELDOUT_FILE, PromptFileError
from minispark.target.sampling import SamplingConfig, draw_rows, make_generator, probabilities
from minispark.target.loading import load_target
from tests.helpers import REPO

PROMPTS = ["Tell me a story.", "What is 2 + 2?", "List three fruits.", "Explain gravity briefly.",
           "Write a haiku about the sea and the wind over it.", "Hi", "Name a prime number greater than ten."]


@pytest.fixture(scope="module")
def llama(tiny_dir):
    return load_target(str(tiny_dir("llama")))


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    return path


def one_by_one(target, prompts, max_new_tokens: int) -> list[list[int]]:
    """Greedy answers from plain ``generate``, one prompt at a time (no padding, no batch)."""
    out = []
    for prompt in prompts:
        ids = target.model.generate(prompt.input_ids, attention_mask=torch.ones_like(prompt.input_ids),
                                    do_sample=False, max_new_tokens=max_new_tokens,
                                    eos_token_id=sorted(target.eos_token_ids))[0, prompt.length:].tolist()
        end = next((j + 1 for j, t in enumerate(ids) if t in target.eos_token_ids), len(ids))
        out.append(ids[:end])
    return out


@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_refill_greedy_equals_one_by_one(llama, monkeypatch, batch_size):
    prompts = {i: llama.encode(prompt=p) for i, p in enumerate(PROMPTS)}
    reference = one_by_one(llama, prompts.values(), 24)
    # Rows must finish at different steps: make a token that the references emit mid-answer an EOS.
    stop = reference[1][5]
    monkeypatch.setattr(llama, "eos_token_ids", llama.eos_token_ids | {stop})
    reference = one_by_one(llama, prompts.values(), 24)
    assert len({len(r) for r in reference}) > 1
    compactions = []
    monkeypatch.setattr(answer_sampler, "COMPACT_EVERY", 4)
    original = answer_sampler._SlotKV._compact
    monkeypatch.setattr(answer_sampler._SlotKV, "_compact", lambda self: (compactions.append(1), original(self)))
    answers = sample_answers(llama, prompts, {i: i for i in prompts}, SamplingConfig(0.0), 24, batch_size,
                             refill_at=1)
    assert [answers[i].tokens.tolist() for i in prompts] == reference
    assert [answers[i].stopped_at_eos for i in prompts] == [r[-1] in llama.eos_token_ids for r in reference]
    if batch_size == 1:
        assert compactions  # one row at a time runs long enough to fill the buffer and compact it


def test_refill_sampling_depends_only_on_the_seed(llama):
    prompts = {i: llama.encode(prompt=p) for i, p in enumerate(PROMPTS)}
    config = SamplingConfig(1.0, top_k=8, top_p=0.9)
    seeds = {i: 100 + i for i in prompts}
    wide = sample_answers(llama, prompts, seeds, config, 16, 8)
    narrow = sample_answers(llama, dict(reversed(list(prompts.items()))), seeds, config, 16, 2)
    assert all(torch.equal(wide[i].tokens, narrow[i].tokens) for i in prompts)


def _counts(draw, logits, config, n: int) -> torch.Tensor:
    counts = torch.zeros(logits.shape[-1])
    gens = [make_generator(7 + r) for r in range(n // 50)]
    for _ in range(50):
        tokens = draw(logits.expand(len(gens), -1), config, gens)
        counts += torch.bincount(tokens, minlength=logits.shape[-1])
    return counts


def test_row_sampler_draws_the_filtered_law_and_a_wrong_law_fails():
    torch.manual_seed(0)
    logits = torch.randn(1, 40) * 2
    config = SamplingConfig(0.8, top_k=12, top_p=0.95)
    p = probabilities(logits, config)[0]
    support = p > 0
    n = 20_000
    counts = _counts(draw_rows, logits, config, n)
    assert counts[~support].sum() == 0
    assert chisquare(counts[support], p[support] * n).pvalue > 1e-3

    def unfiltered(logits, config, gens):  # negative control: forgets top-k/top-p
        return draw_rows(logits, SamplingConfig(config.temperature), gens)

    wrong = _counts(unfiltered, logits, config, n)
    inside = wrong[support]
    assert wrong[~support].sum() > 0 or chisquare(inside, p[support] * inside.sum()).pvalue < 1e-6


def make_config(prompt_file: Path, out: Path, **overrides) -> AnswerConfig:
    settings = dict(prompts=prompt_file, out=out, num_samples=9, max_new_tokens=10, batch_size=3,
                    samples_per_shard=4, seed=5)
    return AnswerConfig(**(settings | overrides))


def shard_bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_answer_set_reads_back_prompt_and_answer_ids(llama, prompt_file, tmp_path):
    report = build_answers(make_config(prompt_file, tmp_path / "a"), target=llama, log=lambda _: None)
    answers = AnswerSet(tmp_path / "a")
    assert len(answers) == report.samples == 9
    for i in range(9):
        stored = answers[i]
        assert stored.sample_index == i and stored.prompt_line == i % len(PROMPTS) + 1
        assert torch.equal(stored.prompt_ids, llama.encode(prompt=PROMPTS[i % len(PROMPTS)]).input_ids[0])
        assert 1 <= len(stored.answer_ids) <= 10
    assert answers.answer_lengths().sum() == report.answer_tokens
    answers.require_target(llama)


def test_kill_resume_and_grow_keep_earlier_shards(llama, prompt_file, tmp_path):
    clean = tmp_path / "clean"
    build_answers(make_config(prompt_file, clean), target=llama, log=lambda _: None)

    killed = tmp_path / "killed"

    def die(k: int) -> None:
        if k == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_answers(make_config(prompt_file, killed), target=llama, log=lambda _: None, on_shard=die)
    (killed / f".{shard_name(2)}.x.tmp").write_bytes(b"half a shard")  # a write cut short by the kill
    first = shard_bytes(killed)
    resumed = build_answers(make_config(prompt_file, killed), target=llama, log=lambda _: None)
    assert resumed.resumed_shards == 2 and resumed.samples == 9
    after = shard_bytes(killed)
    assert not any(name.startswith(".") for name in after)
    assert all(after[name] == first[name] for name in (shard_name(0), shard_name(1)))  # finished shards untouched
    # Same seeds, same law: only float noise of another batch composition could change a token.
    assert [AnswerSet(killed)[i].answer_ids.tolist() for i in range(9)] == \
        [AnswerSet(clean)[i].answer_ids.tolist() for i in range(9)]

    # The finished set asked again, as a user reruns the command: nothing sampled, every byte unchanged (this
    # was a ValueError traceback from the sampler, handed no prompts).
    before = shard_bytes(clean)  # the shards and answers.json
    again = build_answers(make_config(prompt_file, clean), target=llama, log=lambda _: None)
    assert again.resumed_shards == again.shards and shard_bytes(clean) == before

    before = shard_bytes(clean)
    grown = build_answers(make_config(prompt_file, clean, num_samples=14), target=llama, log=lambda _: None)
    after = shard_bytes(clean)
    assert grown.samples == 14 and len(AnswerSet(clean)) == 14
    assert after[shard_name(0)] == before[shard_name(0)] and after[shard_name(1)] == before[shard_name(1)]
    with pytest.raises(AnswerSetError, match="would shrink it"):
        build_answers(make_config(prompt_file, clean, num_samples=5), target=llama, log=lambda _: None)
    with pytest.raises(AnswerSetError, match=r"different sampling\.temperature \(0\.7, now 1\.0\)"):  # the one setting
        build_answers(make_config(prompt_file, clean, num_samples=14, temperature=1.0), target=llama,
                      log=lambda _: None)


def test_a_shard_renamed_before_its_manifest_entry_is_kept(llama, prompt_file, tmp_path, monkeypatch):
    """Ctrl-C between a shard's rename and the manifest's write: the rerun the hint prints ("run the same command
    again to resume") refused the shard as not listed in answers.json."""
    import minispark.data.answers as answers

    real, writes = answers._write_manifest, []

    def stopped(*args) -> None:
        writes.append(1)
        if len(writes) == 2:  # shard 1 renamed into place, its entry never written
            raise KeyboardInterrupt
        real(*args)

    monkeypatch.setattr(answers, "_write_manifest", stopped)
    out = tmp_path / "a"
    with pytest.raises(KeyboardInterrupt):
        build_answers(make_config(prompt_file, out), target=llama, log=lambda _: None)
    monkeypatch.undo()
    kept = (out / shard_name(1)).read_bytes()
    resumed = build_answers(make_config(prompt_file, out), target=llama, log=lambda _: None)
    assert resumed.resumed_shards == 2 and (out / shard_name(1)).read_bytes() == kept and len(AnswerSet(out)) == 9


def test_a_file_not_listed_is_never_deleted(llama, prompt_file, tmp_path):
    out = tmp_path / "a"
    build_answers(make_config(prompt_file, out, num_samples=4), target=llama, log=lambda _: None)
    stranger = out / shard_name(1)
    stranger.write_bytes(b"a user's file")
    with pytest.raises(AnswerSetError, match="not listed"):
        build_answers(make_config(prompt_file, out), target=llama, log=lambda _: None)
    assert stranger.read_bytes() == b"a user's file"


def test_corrupt_shard_is_refused_by_the_reader_and_resampled_by_the_build(llama, prompt_file, tmp_path):
    out = tmp_path / "a"
    build_answers(make_config(prompt_file, out), target=llama, log=lambda _: None)
    good = (out / shard_name(1)).read_bytes()
    (out / shard_name(1)).write_bytes(good[:-3] + b"xyz")
    with pytest.raises(AnswerSetError, match=rf"{shard_name(1)}: sha256 differs"):
        AnswerSet(out)
    build_answers(make_config(prompt_file, out), target=llama, log=lambda _: None)
    assert (out / shard_name(1)).read_bytes() == good


def test_heldout_prompts_never_enter_a_training_answer_set(llama, tmp_path):
    with pytest.raises(PromptFileError, match="held-out split"):
        build_answers(make_config(HELDOUT_FILE, tmp_path / "a"), target=llama, log=lambda _: None)
    assert not (tmp_path / "a").exists()
    build_answers(make_config(HELDOUT_FILE, tmp_path / "h", num_samples=2, split="heldout"), target=llama,
                  log=lambda _: None)
    assert AnswerSet(tmp_path / "h").config["split"] == "heldout"


SHIPPED = REPO / "data" / "answers" / "smollm2-135m-instruct"


def test_the_committed_answer_set_is_intact_and_from_the_training_corpus():
    from minispark.data.cache_config import default_prompts
    from minispark.data.prompts import load_prompts, prompt_file_hash

    answers = AnswerSet(SHIPPED)  # every listed shard's sha256 checked
    config = answers.config
    corpus = default_prompts(False)
    assert config["split"] == "train" and config["target"]["name"] == "SmolLM2-135M-Instruct"
    assert config["prompts"] == {"file": corpus.name, "hash": prompt_file_hash(corpus), "count": len(load_prompts(corpus))}
    assert config["sampling"] == {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "max_new_tokens": 512}
    assert len(answers) >= 256 and [answers[i].sample_index for i in (0, len(answers) - 1)] == [0, len(answers) - 1]
    lengths = answers.answer_lengths()
    assert 1 <= lengths.min() and lengths.max() <= 512
