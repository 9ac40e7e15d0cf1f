"""What a drafter records of the prompts it was trained on (``training_data.json``), and calibrate's notice when
its --prompts are among them.

    .venv/bin/python -m pytest -q tests/data/test_provenance.py
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minispark.cli import app
from minispark.data.prompts import load_prompts, prompt_file_hash
from minispark.data.provenance import (PromptSource, read_training_data, sources_of_data, sources_of_run,
                                       trained_ranges, warn_if_trained_on, write_training_data)


def prompt_file(path: Path, count: int, tag: str = "") -> Path:
    path.write_text("".join(json.dumps({"prompt": f"{tag}Question number {i}?"}) + "\n" for i in range(count)))
    return path


def notices(directory: Path, prompts: Path, num_prompts: int) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_if_trained_on(directory, prompts, load_prompts(prompts), num_prompts)
    return [str(w.message) for w in caught]


def test_trained_ranges_follow_the_sample_cycle() -> None:
    assert trained_ranges(5, 0, 3) == ((0, 3),)
    assert trained_ranges(5, 0, 12) == ((0, 5),)  # more samples than prompts: every prompt, with new seeds
    assert trained_ranges(5, 4, 7) == ((4, 5), (0, 2))  # samples 4, 5, 6: prompts 4, 0, 1
    assert trained_ranges(5, 3, 3) == ()


def test_a_mix_records_each_part_for_the_samples_trained_on() -> None:
    part = {"prompts": {"file": "a.jsonl", "hash": "sha256:a", "count": 10}, "mix_samples": [0, 4]}
    text = {"prompts": {"file": "b.jsonl", "hash": "sha256:b", "count": 3}, "mix_samples": [4, 7]}
    mix = {"source": "mix", "parts": [part, text]}
    assert sources_of_data(mix, 2, 5) == [PromptSource("a.jsonl", "sha256:a", 10, ((2, 4),)),
                                          PromptSource("b.jsonl", "sha256:b", 3, ((0, 1),))]
    assert sources_of_data({"prompts": {"file": "a.jsonl", "hash": "sha256:a", "count": 10}}, 0, 10)[0].trained \
        == ((0, 10),)
    # a slice [6, 9) replaying the first 2 samples records both ranges
    plain = {"prompts": {"file": "a.jsonl", "hash": "sha256:a", "count": 10}}
    assert [s.trained for s in sources_of_run(plain, 10, 6, 9, replay_samples=2)] == [((0, 2),), ((6, 9),)]


def test_calibrate_prompts_among_the_trained_ones_are_a_notice(tmp_path: Path) -> None:
    prompts = prompt_file(tmp_path / "corpus.jsonl", 5)
    moved = tmp_path / "elsewhere.jsonl"
    shutil.copy(prompts, moved)  # the same content at another name and place: the same file by its hash
    other = prompt_file(tmp_path / "heldout.jsonl", 5, tag="Held out: ")
    digest = prompt_file_hash(prompts, load_prompts(prompts))
    drafter = tmp_path / "drafter"
    drafter.mkdir()
    assert notices(drafter, prompts, 2) == []  # a drafter that records nothing: nothing to compare
    write_training_data(drafter, [PromptSource("corpus.jsonl", digest, 5, ((0, 3),))])  # its first 3 prompts
    assert read_training_data(drafter) == [PromptSource("corpus.jsonl", digest, 5, ((0, 3),))]
    assert notices(drafter, prompts, 2) == []  # the untrained tail: held out, as the help asks
    assert notices(drafter, other, 5) == []
    [notice] = notices(drafter, moved, 4)
    assert notice == (f"--prompts {moved}: 2 of the 4 prompts calibrate rolls out (the file's last) are prompts the "
                      "drafter was trained on (corpus.jsonl by content, in its training_data.json): a fit on them "
                      "overstates acceptance on new prompts; give held-out prompts, or --num-prompts 2 to roll out "
                      "only its 2 untrained last prompts")
    (drafter / "training_data.json").write_text("{")
    [damaged] = notices(drafter, prompts, 4)
    assert "training_data.json: unreadable" in damaged and "were not checked" in damaged


def test_train_records_its_prompts_and_calibrate_says_so(tiny_trained_drafter, monkeypatch, tmp_path: Path) -> None:
    """`minispark calibrate --prompts` on the training corpus fitted on trained prompts without a word."""
    target_dir, drafter_dir = tiny_trained_drafter
    corpus = drafter_dir.parent.parent / "prompts.jsonl"  # what the fixture's cache was built from: 4 prompts
    [source] = read_training_data(drafter_dir)
    assert (source.file, source.count, source.trained) == ("prompts.jsonl", 4, ((0, 4),))
    assert source.hash == prompt_file_hash(corpus, load_prompts(corpus))
    copy = tmp_path / "drafter"
    shutil.copytree(drafter_dir, copy)

    def no_target(*_args, **_kwargs):
        raise KeyboardInterrupt  # the notice must come before the target loads

    monkeypatch.setattr(sys.modules["minispark.cli.measure"], "_load", no_target)
    result = CliRunner().invoke(app, ["calibrate", "--drafter", str(copy), "--prompts", str(corpus),
                                      "--num-prompts", "2", "--target", str(target_dir)])
    assert result.exit_code == 130, (result.output, result.exception)
    assert result.stderr.startswith(f"notice: --prompts {corpus}: 2 of the 2 prompts calibrate rolls out"), \
        result.stderr
