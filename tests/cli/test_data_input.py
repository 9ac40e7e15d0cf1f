"""Bad input to ``cache``, ``answers``, ``cache-mix`` and ``train``: exit status 2 and one ``error:`` line naming the flag or file, no
traceback, nothing half written.

    .venv/bin/python -m pytest -q tests/cli/test_data_input.py
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from minispark.cli import app
from tests.helpers import LONG_PROMPT, full_disk, one_line_error


# (id, argv with {placeholders} from the ``files`` fixture, what the error line must name)
CASES = [
    # cache
    ("cache-out-file", ["cache", "--out", "{afile}"], "--out"),
    ("cache-num-samples-zero", ["cache", "--num-samples", "0"], "--num-samples"),
    ("cache-negative-max-new", ["cache", "--max-new-tokens", "-1"], "--max-new-tokens"),
    ("cache-temperature-nan", ["cache", "--temperature", "nan"], "--temperature"),
    ("cache-top-p-zero", ["cache", "--top-p", "0"], "--top-p"),
    ("cache-feature-dtype", ["cache", "--feature-dtype", "int8"], "--feature-dtype"),
    ("cache-dtype", ["cache", "--dtype", "fp8"], "--dtype"),
    ("cache-window-negative", ["cache", "--window", "-1"], "--window"),
    ("cache-block-zero", ["cache", "--block", "0"], "--block"),
    ("cache-layers-text", ["cache", "--layers", "a,b"], "--layers"),
    ("cache-unknown-split", ["cache", "--split", "test"], "--split"),
    ("cache-unknown-source", ["cache", "--source", "web"], "--source"),
    ("cache-prompts-missing", ["cache", "--prompts", "{missing}"], "--prompts"),
    ("cache-prompts-empty", ["cache", "--prompts", "{empty.jsonl}"], "--prompts"),
    ("cache-prompts-corrupt", ["cache", "--prompts", "{corrupt.jsonl}"], "corrupt.jsonl"),
    ("cache-prompts-not-utf8", ["cache", "--prompts", "{notutf8.jsonl}"], "notutf8.jsonl:2: not UTF-8 text"),
    ("cache-batch-size-negative", ["cache", "--batch-size", "-1"], "--batch-size"),
    # train
    ("train-unknown-recipe", ["train", "--recipe", "no-such-recipe"], "--recipe"),
    ("train-lr-nan", ["train", "--recipe", "tiny", "lr=nan"], "override 'lr=nan'"),  # not the recipe file,
    ("train-device-override", ["train", "--recipe", "tiny", "device=tpu"], "override 'device=tpu'"),
    ("train-lr-inf", ["train", "--recipe", "tiny", "lr=inf"], "lr"),
    ("train-steps-zero", ["train", "--recipe", "tiny", "steps=0"], "steps"),
    ("train-steps-negative", ["train", "--recipe", "tiny", "steps=-1"], "steps"),
    ("train-unknown-key", ["train", "--recipe", "tiny", "bogus=1"], "bogus"),
    ("train-steps-text", ["train", "--recipe", "tiny", "steps=abc"], "steps"),
    ("train-cache-missing", ["train", "--recipe", "tiny", "--cache", "{missing}"], "--cache"),
    ("train-cache-file", ["train", "--recipe", "tiny", "--cache", "{afile}"], "--cache"),
    ("train-cache-empty-dir", ["train", "--recipe", "tiny", "--cache", "{emptydir}"], "emptydir"),
    ("train-out-file", ["train", "--recipe", "tiny", "--cache", "{emptydir}", "--out", "{afile}"], "--out"),
    ("train-heldout-missing", ["train", "--recipe", "tiny", "--heldout-cache", "{missing}"], "--heldout-cache"),
    ("train-resume-missing-out", ["train", "--recipe", "tiny", "--cache", "{emptydir}", "--out", "{missing}",
                                  "--resume"], "--out"),
    ("train-lr-subnormal", ["train", "--recipe", "tiny", "lr=1e-320"], "lr: at least 1e-10"),
    ("train-lr-huge", ["train", "--recipe", "tiny", "lr=1e308", "--dry-run"], "lr: at most 1"),
    ("train-dry-run-init-from-missing", ["train", "--recipe", "tiny", "--dry-run", "init_from={missing}"],
     "missing: no such directory"),
    ("train-feature-layers-open-bracket", ["train", "--recipe", "tiny", "feature_layers=[1,2"], "feature_layers"),
    ("train-feature-layers-empty-item", ["train", "--recipe", "tiny", "feature_layers=1,,2"], "feature_layers"),
    ("cache-mix-count-not-a-number", ["cache-mix", "{emptydir}:abc", "{userdir}", "--out", "{out}"],
     "expected a whole number of samples, got 'abc'"),
    ("train-steps-arabic-digits", ["train", "--recipe", "tiny", "steps=٣"], "steps must be"),
    ("train-feature-layers-arabic-digits", ["train", "--recipe", "tiny", "feature_layers=١,٢"], "feature_layers"),
    ("cache-mix-count-arabic-digits", ["cache-mix", "{emptydir}:٣", "{userdir}", "--out", "{out}"],
     "expected a whole number of samples, got '٣'"),
    ("train-steps-digit-grouping", ["train", "--recipe", "tiny", "steps=1_000"], "steps must be"),
    ("cache-mix-count-digit-grouping", ["cache-mix", "{emptydir}:1_0", "{userdir}", "--out", "{out}"],
     "expected a whole number of samples, got '1_0'"),
    # answers / train --answers
    ("answers-zero-samples", ["answers", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out", "{out}",
                              "--num-samples", "0"], "--num-samples"),
    # a ~ the shell left as typed (no such user, or quoted) would make a directory named "~nosuchuser" here
    ("answers-out-unexpanded-home", ["answers", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out",
                                     "~nosuchuser-minispark/a"], "~nosuchuser-minispark was not expanded"),
    ("answers-corrupt-prompts", ["answers", "--prompts", "{corrupt.jsonl}", "--out", "{out}"], "corrupt.jsonl"),
    ("answers-bad-top-p", ["answers", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out", "{out}",
                           "--top-p", "0"], "--top-p"),
    ("answers-heldout-as-train", ["answers", "--target", "{tiny}", "--prompts", "{heldout}", "--out", "{out}"],
     "held-out split"),
    ("train-answers-missing", ["train", "--recipe", "tiny", "--answers", "{missing}"], "--answers"),
    ("train-answers-and-cache", ["train", "--recipe", "tiny", "--answers", "{dir}", "--cache", "{dir}"], "--cache"),
    ("train-answers-not-a-set", ["train", "--recipe", "tiny", "--answers", "{dir}", "--out", "{out}"],
     "answers.json"),
    # a decompression bomb named inside a prompt file: refused (before the target loads) like --image
    ("cache-prompts-bomb", ["cache", "--prompts", "{bomb.jsonl}"], "bomb.jsonl:1: image 'bomb.png' is "),
    ("answers-prompts-bomb", ["answers", "--prompts", "{bomb.jsonl}", "--out", "{out}"], "bomb.jsonl:1"),
    ("cache-target-config-only", ["cache", "--target", "{configonly}", "--out", "{out}"], "--target"),
    ("cache-window-huge", ["cache", "--window", "99999999999999999999999"], "--window"),
    ("cache-block-huge", ["cache", "--block", "99999999999999999999999"], "--block"),
    ("cache-max-new-huge", ["cache", "--max-new-tokens", "1000000000000"], "--max-new-tokens"),
    ("cache-max-new-beyond-context", ["cache", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out", "{out}",
                                      "--max-new-tokens", "5000"], "--max-new-tokens 5000"),
    ("answers-max-new-huge", ["answers", "--prompts", "{ok.jsonl}", "--out", "{out}", "--max-new-tokens",
                              "1000000000000"], "--max-new-tokens"),
    ("answers-max-new-beyond-context", ["answers", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out", "{out}",
                                        "--max-new-tokens", "5000"], "--max-new-tokens 5000"),
    ("train-seed-huge", ["train", "--recipe", "tiny", "seed=99999999999999999999999"], "seed"),
    ("train-seed-negative", ["train", "--recipe", "tiny", "seed=-1"], "seed"),
    ("train-batch-huge", ["train", "--recipe", "tiny", "batch_anchors=99999999999999999999999"], "batch_anchors"),
    ("cache-layers-duplicate", ["cache", "--layers", "1,1"], "distinct and increasing"),
    ("cache-layers-decreasing", ["cache", "--layers", "2,1"], "distinct and increasing"),
    ("cache-out-dangling-symlink", ["cache", "--out", "{danglinglink}"], "which does not exist (or loops)"),
    ("train-out-under-symlink-loop", ["train", "--recipe", "tiny", "--cache", "{emptydir}", "--out", "{looplink}/run"],
     "looplink is a symlink"),
    ("train-recipe-not-utf8", ["train", "--recipe", "{notutf8.toml}"], "not UTF-8"),
    ("train-recipe-top-level-key", ["train", "--recipe", "{toplevel.toml}"], "put it under [train]"),
    ("train-recipe-dir", ["train", "--recipe", "{emptydir}"], "is a directory"),
    ("cache-mix-same-twice", ["cache-mix", "{emptydir}", "{emptydir}/", "--out", "{out}"], "given twice"),
    ("cache-out-foreign", ["cache", "--out", "{userdir}"], "holds notes.txt, which minispark did not write"),
    ("answers-out-foreign", ["answers", "--out", "{userdir}"], "holds notes.txt, which minispark did not write"),
    ("cache-mix-out-foreign", ["cache-mix", "{emptydir}", "--out", "{userdir}"], "holds notes.txt, which minispark"),
    ("cache-temperature-huge", ["cache", "--temperature", "1e308"], "--temperature"),
    ("answers-temperature-huge", ["answers", "--out", "{out}", "--temperature", "1e308"], "--temperature"),
    ("train-num-heads-zero", ["train", "--recipe", "tiny", "num_heads=0"], "override 'num_heads=0': num_heads: must be"),
    ("train-kv-heads-zero", ["train", "--recipe", "tiny", "num_kv_heads=0"], "override 'num_kv_heads=0'"),
    ("train-head-dim-zero", ["train", "--recipe", "tiny", "head_dim=0"], "override 'head_dim=0'"),
    ("train-heads-not-multiple", ["train", "--recipe", "tiny", "num_heads=3"], "3 query heads are not a multiple of 2"),
    ("train-intermediate-negative", ["train", "--recipe", "tiny", "intermediate_size=-5"], "intermediate_size"),
    ("train-num-layers-huge", ["train", "--recipe", "tiny", "--dry-run", "num_layers=2147483647"],
     "num_layers: at most 128"),  # built layer by layer (meta tensors, still 2**31 modules) before,
    ("train-block-size-huge", ["train", "--recipe", "tiny", "--dry-run", "block_size=2147483647"],
     "block_size: at most 1024"),  # torch's numel overflowed before,
    ("train-out-inside-cache", ["train", "--recipe", "tiny", "--cache", "{emptydir}", "--out", "{emptydir}/run"],
     "is inside the --cache directory"),
    ("cache-mix-out-inside-part", ["cache-mix", "{emptydir}", "{userdir}", "--out", "{emptydir}/mix"],
     "is inside the part 1 directory"),
    ("cache-mix-negative-count", ["cache-mix", "{emptydir}:-1", "{userdir}", "--out", "{out}"],
     "the sample count must be positive"),  # not "no such directory ...:-1",
    ("cache-block-above-max", ["cache", "--block", "2147483647"], "--block must be at most 1024"),
    ("cache-num-samples-above-max", ["cache", "--num-samples", "2147483647"], "--num-samples must be at most"),
    ("answers-num-samples-above-max", ["answers", "--out", "{out}", "--num-samples", "2147483647"],
     "--num-samples must be at most"),  # every sample's plan is held in memory: 2**31 of them hung,
    ("cache-layers-negative", ["cache", "--layers", "-3,2"], "layer ids count from 0"),
    # a table written into a cache or an answer set: its resume then refused the directory, saying minispark had not
    # written the table
    ("answers-out-inside-target", ["answers", "--target", "{tiny}", "--out", "{tiny}/answers"],
     "is inside the --target directory"),
    ("cache-out-inside-target", ["cache", "--target", "{tiny}", "--out", "{tiny}/cache"], "is inside the --target directory"),
    ("train-override-twice", ["train", "--recipe", "tiny", "lr=1e-3", "lr=2e-3"],
     "override 'lr=2e-3': lr is already set by 'lr=1e-3'"),  # the last one won without a word,
    ("cache-mix-answer-set", ["cache-mix", "{answerset}", "{emptydir}", "--out", "{out}"],
     "holds a minispark-answers manifest (answers.json), not a minispark-cache"),  # said 'manifest.json: missing',
    ("cache-out-newline", ["cache", "--out", "a\nb"], "--out 'a\\nb': a path with a line break in it"),
    ("cache-mix-part-newline", ["cache-mix", "{emptydir}\n", "--out", "{out}"], "PARTS"),
    ("train-recipe-newline", ["train", "--recipe", "tiny\n"], "--recipe 'tiny\\n'"),
    ("train-recipe-trailing-slash", ["train", "--recipe", "{toplevel.toml}/"], "toplevel.toml/: names a directory"),
    ("cache-prompts-cut-line", ["cache", "--prompts", "{cutline.jsonl}"],
     "cutline.jsonl:2: malformed JSON: Unterminated string starting at column 12"),  # said "starting at at column",
    ("train-cache-deep-manifest", ["train", "--recipe", "tiny", "--cache", "{deepcache}"],
     "deepcache/manifest.json: unreadable manifest"),
    # an empty path is '.', the current directory: read, written into or blamed
    ("cache-out-empty", ["cache", "--out", ""], "--out '': empty; give a path"),  # wrote a cache into an empty cwd,
    ("train-cache-empty", ["train", "--recipe", "tiny", "--cache", ""], "--cache '': empty"),  # blamed --out,
    ("cache-mix-part-empty", ["cache-mix", "", "{emptydir}", "--out", "{out}"], "PARTS '': empty"),
    ("train-cache-loop", ["train", "--recipe", "tiny", "--cache", "{looplink}"], "looplink: is a symlink to"),
    ("answers-prompts-huge-number", ["answers", "--prompts", "{hugeint.jsonl}", "--out", "{out}"],
     "hugeint.jsonl:1: malformed JSON: a number too long to read"),  # a ValueError traceback,
    ("train-all-loss-weights-zero", ["train", "--recipe", "tiny", "alpha_ce=0", "alpha_tv=0", "alpha_conf=0"],
     "all 0, so the loss is 0 and training would change nothing"),  # trained nothing without a word,
    ("cache-prompts-min-above-max-pixels", ["cache", "--prompts", "{minabovemax.jsonl}"],
     "'min_pixels' 1000000 is above 'max_pixels' 10000"),  # an AssertionError traceback,
    ("train-recipe-deep", ["train", "--recipe", "{deep.toml}"], "deep.toml: unreadable recipe (nested too deeply)"),
    ("train-recipe-huge-number", ["train", "--recipe", "{bigint.toml}"],
     "bigint.toml: unreadable recipe (a number too long to read"),  # a ValueError traceback,
    ("train-cache-manifest-huge-number", ["train", "--recipe", "tiny", "--cache", "{bigcache}"],
     "bigcache/manifest.json: unreadable manifest (a number too long to read"),
    ("train-mask-token-negative", ["train", "--recipe", "tiny", "mask_token_id=-1"],
     "override 'mask_token_id=-1': mask_token_id, vocab_size: a token id in [0, 49152)"),  # blamed the recipe file,
    ("train-draft-vocab-above-vocab", ["train", "--recipe", "tiny", "--dry-run", "draft_vocab=99999999"],
     "override 'draft_vocab=99999999'"),
    ("cache-layers-digit-grouping", ["cache", "--layers", "1_0"], "--layers: expected 'auto' or comma-separated layer "
     "ids, got '1_0'"),  # was layer 10,
    ("cache-layers-other-digits", ["cache", "--layers", "\u0663"], "--layers: expected 'auto'"),  # was layer 3,
    ("train-feature-layers-empty", ["train", "--recipe", "tiny", "--dry-run", "feature_layers="],
     "override 'feature_layers=': feature_layers has an empty value"),  # said "not set in recipe 'tiny'",
    ("train-init-from-a-target", ["train", "--recipe", "tiny", "--dry-run", "init_from={notokenizer}"],
     "a transformers model's config (model_type 'llama'), not a drafter's"),  # passed; the real run a traceback,
    ("train-recipe-a-pipe", ["train", "--recipe", "{fifo}"], "fifo: not a file but a pipe"),  # "no such file",
    ("train-recipe-dangling", ["train", "--recipe", "{danglinglink}"], "danglinglink: is a symlink to"),
]


def test_the_cases_have_unique_ids() -> None:
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("argv, needle", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line(files: dict[str, str], argv: list[str], needle: str) -> None:
    args = [re.sub(r"\{([\w.-]+)\}", lambda m: files[m.group(1)], arg) for arg in argv]
    error = one_line_error(CliRunner().invoke(app, args))
    assert needle in error, error


def _someones_files(where: Path) -> Path:
    """A directory of a user's files (nothing minispark wrote): what no --out may be filled beside."""
    (where / "sub").mkdir(parents=True)
    (where / "notes.txt").write_text("my notes\n")
    (where / "sub" / "data.bin").write_bytes(b"\x00\x01")
    return where


#: Damages to an answer set's manifest (its parsed answers.json, changed in place) by name.
ANSWER_SET_DAMAGES = {
    "shard-outside": lambda m: m["shards"][0].update(file="/etc/passwd"),
    "shard-of-another-set": lambda m: m["shards"][0].update(file="../other/answers-00000.safetensors"),
    "shards-object": lambda m: m.update(shards={}),
    "no-config": lambda m: m.pop("config"),
    "target-null": lambda m: m["config"].update(target=None),
    "shard-bytes-text": lambda m: m["shards"][0].update(bytes="1097"),
    "shard-no-sha256": lambda m: m["shards"][0].pop("sha256"),
    "shard-samples-negative": lambda m: m["shards"][0].update(samples=-3),
    "version-text": lambda m: m.update(format_version="1"),
    "no-shards": lambda m: m.update(shards=[]),
}


@pytest.mark.parametrize("command", ["answers", "cache"])
def test_a_prompt_that_fills_the_context_is_refused_by_answers_and_cache(tiny_dir, tmp_path, command: str) -> None:
    """answers and cache decoded such a prompt past the target's last position (12k tokens into the embedded
    SmolLM2's 8,192: half an hour of prefill here, then garbage); now its line is refused as bench refuses it."""
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "Hi there."}) + "\n" + json.dumps({"prompt": LONG_PROMPT}) + "\n")
    argv = [command, "--target", str(tiny_dir("llama")), "--prompts", str(path), "--num-samples", "2",
            "--max-new-tokens", "2", "--samples-per-shard", "1", "--out", str(tmp_path / "out")]
    argv += ["--layers", "1,2", "--feature-dtype", "fp32"] if command == "cache" else []
    error = one_line_error(CliRunner().invoke(app, argv))
    assert re.search(r"prompts.jsonl:2: \d+ tokens fill .*'s context of 4096 positions; shorten this prompt", error)


def test_a_set_grown_under_the_int8_runtime_is_refused(tiny_dir, files, tmp_path, monkeypatch) -> None:
    """--runtime int8 is another target (int8 weights), but an answer set or a cache built without it grew under it
    without a word, its samples from two targets; sets built without int8 keep their identity."""
    from minispark.core.defaults import TARGET_RUNTIME_ENV
    from minispark.target.int8 import int8_supported

    if not int8_supported("cpu"):
        pytest.skip("this torch build has no int8 weight-only CPU kernel")
    runner = CliRunner()
    common = ["--target", str(tiny_dir("llama")), "--prompts", files["ok.jsonl"], "--max-new-tokens", "4"]
    argv = {"answers": ["answers", *common, "--out", str(tmp_path / "answers"), "--samples-per-shard", "1"],
            "cache": ["cache", *common, "--out", str(tmp_path / "cache"), "--layers", "1", "--samples-per-shard", "1"]}
    for name, args in argv.items():
        assert runner.invoke(app, args + ["--num-samples", "1"]).exit_code == 0
        monkeypatch.setenv(TARGET_RUNTIME_ENV, "int8")
        error = one_line_error(runner.invoke(app, args + ["--num-samples", "2"]))
        assert "runtime (None, now 'int8')" in error, error
        monkeypatch.delenv(TARGET_RUNTIME_ENV)
        assert runner.invoke(app, args + ["--num-samples", "2"]).exit_code == 0  # the same runtime grows it


@pytest.mark.parametrize("out_exists", [False, True])
def test_the_ctrl_c_hint_of_train_works(tmp_path, monkeypatch, out_exists: bool) -> None:
    """--resume only when --out exists (a run stopped before its first checkpoint then starts from step 0)."""
    import minispark.training.train

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(minispark.training.train, "train", interrupted)
    out = tmp_path / "out"
    if out_exists:
        out.mkdir()
    argv = ["train", "--recipe", "tiny", "--cache", str(tmp_path), "--out", str(out)]
    monkeypatch.setattr("sys.argv", ["minispark", *argv])
    result = CliRunner().invoke(app, argv)
    line = result.stderr.strip().splitlines()[-1]
    assert result.exit_code == 130 and line.endswith(f"--out {out}" + (" --resume" if out_exists else "")), line


def test_a_run_killed_writing_its_first_file_starts_again(tmp_path) -> None:
    """A SIGKILL in train_config.json's own write (the run's first file) left only its temporary: --resume said
    "holds no checkpoint" and a plain rerun "not a minispark training run"; both now start from step 0."""
    from minispark.core.errors import MinisparkError
    from minispark.training.recipes import load_recipe
    from minispark.training.train import _output_dir

    out = tmp_path / "out"
    out.mkdir()
    (out / ".train_config.json.ab12cd_4.tmp").write_text('{"steps"')  # write_text_atomic's, cut short
    for resume in (False, True):
        assert _output_dir(load_recipe("tiny", []), out, resume, None) == (out, False)
    (out / "notes.txt").write_text("mine\n")  # beside someone's file it is no run of ours
    with pytest.raises(MinisparkError, match="not a minispark training run"):
        _output_dir(load_recipe("tiny", []), out, False, None)


def test_resume_without_a_run_is_refused_for_the_recipes_own_out_too(tmp_path) -> None:
    """``--resume`` with no --out given, the recipe's directory missing: it trained from step 0 saying the run had
    "stopped before its first one?", where an explicit missing --out was refused."""
    from minispark.core.errors import MinisparkError
    from minispark.training.recipes import load_recipe
    from minispark.training.train import _output_dir

    with pytest.raises(MinisparkError, match="no training run to resume; drop resume"):
        _output_dir(load_recipe("tiny", []), tmp_path / "runs" / "draft-tiny", True, None)


def test_a_full_disk_after_a_checkpoint_says_to_resume(tiny_trained_drafter, tmp_path, monkeypatch) -> None:
    """A disk that filled at train's second checkpoint said "run the command again", which was
    then refused ("already holds a training run; pass --resume")."""
    argv = ["train", "--recipe", "tiny", "steps=4", "checkpoint_every=2", "--no-progress", "--cache",
            str(tiny_trained_drafter[1].parents[1] / "cache"), "--out", str(tmp_path / "run")]
    with monkeypatch.context() as patched:
        full_disk(patched, "checkpoint-000004")
        error = one_line_error(CliRunner().invoke(app, argv))
    assert error.endswith("free some space and run the command again with --resume (its checkpoints are kept)")
    result = CliRunner().invoke(app, argv + ["--resume"])
    assert result.exit_code == 0 and "resumed from" in result.stderr, result.output


@pytest.mark.parametrize("command", ["cache", "answers", "demo --train", "cache-mix"])
def test_an_out_of_someone_elses_files_is_refused_before_loading(tmp_path, monkeypatch, command: str) -> None:
    """cache, answers, demo --train (and cache-mix) write into --out in place: a non-empty directory
    minispark did not write is refused, naming the flag, the directory and a file in it; nothing changes."""
    import minispark.demo
    from minispark.cli import data, decode
    from tests.helpers import snapshot

    def load(*args, **kwargs):
        raise AssertionError("the target loaded before --out was checked")

    for module in (data, decode):
        monkeypatch.setattr(module, "_load", load)
    monkeypatch.setattr(minispark.demo, "load_target", load)
    out = _someones_files(tmp_path / "mine")
    (tmp_path / "part").mkdir()
    before = snapshot(out)
    argv = {"cache": ["cache"], "answers": ["answers"], "demo --train": ["demo", "--train"],
            "cache-mix": ["cache-mix", str(tmp_path / "part")]}[command]
    error = one_line_error(CliRunner().invoke(app, argv + ["--out", str(out)]))
    assert f"--out {out}: holds notes.txt, which minispark did not write" in error, error
    assert snapshot(out) == before


@pytest.mark.parametrize("command, manifest", [("cache", "manifest.json"), ("answers", "answers.json")])
def test_a_manifest_another_tool_wrote_is_refused_before_loading(tmp_path, monkeypatch, command: str,
                                                                manifest: str) -> None:
    from minispark.cli import data
    from tests.helpers import snapshot

    monkeypatch.setattr(data, "_load", lambda *args, **kwargs: pytest.fail("loaded before --out was checked"))
    out = tmp_path / "app"
    out.mkdir()
    (out / manifest).write_text(json.dumps({"name": "my web app", "icons": []}))  # named like ours, not ours
    before = snapshot(out)
    error = one_line_error(CliRunner().invoke(app, [command, "--out", str(out)]))
    assert f"{out / manifest}: not a minispark-{command} manifest" in error, error
    assert snapshot(out) == before


def test_the_library_refuses_someone_elses_out_too(tiny_dir, tmp_path) -> None:
    """The rule lives in the library (build_cache, build_answers, mix_caches, run_pipeline), not in the CLI."""
    from minispark.data.answers import AnswerConfig, build_answers
    from minispark.data.cache import CacheConfig, build_cache
    from minispark.data.cache_mix import MixPart, mix_caches
    from minispark.demo import run_pipeline
    from minispark.core.errors import MinisparkError
    from tests.helpers import snapshot

    out = _someones_files(tmp_path / "mine")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Hi there"}) + "\n")
    before = snapshot(out)
    for build in (lambda: build_cache(CacheConfig(prompts=prompts, out=out, target=str(tiny_dir("llama")))),
                  lambda: build_answers(AnswerConfig(prompts=prompts, out=out, target=str(tiny_dir("llama")))),
                  lambda: mix_caches(out, [MixPart(tmp_path)]),
                  lambda: run_pipeline(out)):
        with pytest.raises(MinisparkError, match=re.escape(f"out {out}: holds notes.txt")):
            build()
    assert snapshot(out) == before


def test_what_minispark_wrote_is_still_resumed(tiny_dir, tmp_path) -> None:
    """A cache or answer set the command wrote (with a write a kill cut short) resumes; once a user's
    file is put beside its shards, it is refused and nothing there changes."""
    from tests.helpers import snapshot

    target = str(tiny_dir("llama"))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Hi there"}) + "\n" + json.dumps({"prompt": "Tell me a story."}) + "\n")
    flags = {"cache": ["--layers", "1,2", "--window", "4", "--block", "2", "--force"], "answers": []}
    runner = CliRunner()
    for command, tmp in (("cache", ".shard-00001.safetensors.k1ll3d.tmp"),
                         ("answers", ".answers-00001.safetensors.k1ll3d.tmp")):
        out = tmp_path / command
        argv = [command, "--target", target, "--prompts", str(prompts), "--out", str(out), "--num-samples", "1",
                "--max-new-tokens", "2", "--samples-per-shard", "1", "--json", *flags[command]]
        first = runner.invoke(app, argv)
        assert first.exit_code == 0, first.output
        (out / tmp).write_bytes(b"half a shard")  # the next run's write, cut short by a kill
        argv[argv.index("--num-samples") + 1] = "2"  # grow it: shard 0 is kept, shard 1 written
        grown = runner.invoke(app, argv)
        assert grown.exit_code == 0, grown.output
        report = json.loads(grown.stdout)
        assert report["resumed_shards"] == 1 and report["shards"] == 2 and not (out / tmp).exists()
        (out / "notes.txt").write_text("my notes\n")
        before = snapshot(out)
        error = one_line_error(runner.invoke(app, argv))
        assert f"--out {out}: holds notes.txt, which minispark did not write" in error
        assert snapshot(out) == before


def test_train_sizes_the_target_contradicts_are_one_line(tiny_trained_drafter, tmp_path) -> None:
    """A draft vocabulary larger than the target's was a ValueError from DraftConfig; past the recipe's own
    vocab_size it is refused when the recipe loads, naming the override."""
    target, drafter = tiny_trained_drafter
    cache = drafter.parents[1] / "cache"
    error = one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(cache), "--out",
                                                    str(tmp_path / "run"), "draft_vocab=99999999", "--no-progress"]))
    assert "override 'draft_vocab=99999999': draft_vocab, vocab_size: at most the vocabulary's 49152" in error
    error = one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(cache), "--out",
                                                    str(tmp_path / "run"), "draft_vocab=99999999", "vocab_size=none"]))
    # past the target's vocabulary (the recipe sets no vocab_size): the override is named, not "recipe 'tiny' with
    # its command-line overrides"
    assert "override 'draft_vocab=99999999', against the target's sizes where the recipe sets none" in error
    assert "draft_vocab must be in [0, 49152], got 99999999" in error
    error = one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(cache), "--out",
                                                    str(tmp_path / "run"), "num_kv_heads=3", "num_heads=none"]))
    assert "overrides 'num_kv_heads=3', 'num_heads=none', against the target's sizes" in error
    error = one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(cache), "--out",
                                                    str(tmp_path / "run"), "batch_anchors=2147483647"]))
    assert "batch_anchors 2147483647: more than the 64 anchors" in error  # each step looped over 2**31 anchors


def test_out_of_memory_is_one_line(tmp_path, monkeypatch) -> None:
    """A size past this machine's memory: torch's allocator error is one line; any other RuntimeError is a bug."""
    import minispark.training.train

    def allocate(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 549755813632 bytes. Error code 12 (Cannot allocate memory)")

    monkeypatch.setattr(minispark.training.train, "train", allocate)
    argv = ["train", "--recipe", "tiny", "--cache", str(tmp_path), "--out", str(tmp_path / "run")]
    error = one_line_error(CliRunner().invoke(app, argv))
    assert error.startswith("error: out of memory (") and "549755813632 bytes" in error and "--dry-run" in error

    def bug(*args, **kwargs):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(minispark.training.train, "train", bug)
    result = CliRunner().invoke(app, argv)
    assert isinstance(result.exception, RuntimeError)  # not dressed up as a user error


def test_training_on_a_cache_can_evaluate_on_a_heldout_answer_set(tiny_trained_drafter, tmp_path) -> None:
    """The held-out set is encoded by the target's decoder, which training from a cache did not load
    (a meta-tensor NotImplementedError)."""
    target, drafter = tiny_trained_drafter
    held = tmp_path / "held"
    runner = CliRunner()
    built = runner.invoke(app, ["answers", "--target", str(target), "--split", "heldout", "--out", str(held),
                                "--num-samples", "2", "--max-new-tokens", "8"])
    assert built.exit_code == 0, built.output
    result = runner.invoke(app, ["train", "--recipe", "tiny", "--cache", str(drafter.parents[1] / "cache"),
                                 "--heldout-cache", str(held), "--out", str(tmp_path / "run"), "steps=2",
                                 "eval_anchors=8", "--no-progress", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["evaluations"]


def test_answers_encode_each_prompt_once(tiny_dir, tmp_path, monkeypatch) -> None:
    """Samples cycle through the prompt file; every sample was encoded before the first answer (hours, and
    memory, for millions of samples of a short file)."""
    from minispark.data.answers import AnswerConfig, build_answers
    from minispark.target.loading import Target, load_target

    target = load_target(str(tiny_dir("llama")))
    calls = []
    encode = Target.encode
    monkeypatch.setattr(Target, "encode", lambda self, **kwargs: calls.append(kwargs) or encode(self, **kwargs))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Hi there"}) + "\n" + json.dumps({"prompt": "Tell me a story."}) + "\n")
    report = build_answers(AnswerConfig(prompts=prompts, out=tmp_path / "a", num_samples=6, max_new_tokens=2,
                                        samples_per_shard=2), target=target, log=lambda _: None)
    assert report.samples == 6 and len(calls) == 2


def test_answers_ctrl_c_says_how_to_resume(tmp_path, monkeypatch) -> None:
    """answers resumes its finished shards as cache does, but Ctrl-C printed only "interrupted"."""
    from minispark.cli import data

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(data, "_load", interrupted)
    for command in ("answers", "cache"):
        argv = [command, "--out", str(tmp_path / command)]
        monkeypatch.setattr("sys.argv", ["minispark", *argv])
        result = CliRunner().invoke(app, argv)
        line = result.stderr.strip().splitlines()[-1]
        assert result.exit_code == 130 and line == ("interrupted; finished shards are kept; run the same command "
                                                    f"again to resume: minispark {command} --out {tmp_path / command}")


def test_a_shipped_recipe_name_is_not_hidden_by_a_directory(tmp_path, monkeypatch) -> None:
    """`--recipe tiny` run where a directory `tiny` lies (a tiny model built there) read as that directory."""
    from minispark.training.recipes import RECIPE_DIR, recipe_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    assert recipe_path("tiny") == RECIPE_DIR / "tiny.toml"
    assert CliRunner().invoke(app, ["train", "--recipe", "tiny", "--dry-run"]).exit_code == 0
    assert "is a directory" in one_line_error(CliRunner().invoke(app, ["train", "--recipe", "./tiny"]))


def test_a_training_cache_as_heldout_names_the_flag(tiny_trained_drafter, tmp_path) -> None:
    """The refusal named `heldout_cache:`, a recipe key, though the user typed --heldout-cache."""
    cache = Path(tiny_trained_drafter[1]).parents[1] / "cache"
    result = CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(cache), "--heldout-cache", str(cache),
                                      "--out", str(tmp_path / "run"), "steps=1"])
    assert f"--heldout-cache (recipe key heldout_cache) {cache}: is a training cache" in one_line_error(result)


@pytest.mark.parametrize("command", ["cache", "answers"])
def test_a_refused_resume_deletes_no_shard(tiny_dir, tmp_path, command: str) -> None:
    """Growing a set whose next shard name holds someone's file (a planted symlink) is refused; the shard that was
    to be rebuilt was deleted first, leaving a manifest that lists a missing shard."""
    from tests.helpers import snapshot

    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("One.", "Two.", "Three.")))
    out = tmp_path / "out"
    args = [command, "--target", str(tiny_dir("llama")), "--prompts", str(prompts), "--out", str(out),
            "--max-new-tokens", "4", "--samples-per-shard", "2"] + (["--layers", "1,2"] if command == "cache" else [])
    assert CliRunner().invoke(app, args + ["--num-samples", "3"]).exit_code == 0
    mine = tmp_path / "mine.txt"
    mine.write_text("mine\n")
    name = "shard-00002.safetensors" if command == "cache" else "answers-00002.safetensors"
    (out / name).symlink_to(mine)
    before = snapshot(out)
    error = one_line_error(CliRunner().invoke(app, args + ["--num-samples", "5"]))
    assert name in error and snapshot(out) == before and mine.read_text() == "mine\n"


@pytest.mark.parametrize("damage, says", [
    ("latest-symlink", "latest is a symlink; write checkpoint-000030 into"),
    ("latest-names-nothing", "latest names 'checkpoint-999999', which is not a checkpoint there"),
    ("trainer-truncated", "trainer.pt: unreadable (PytorchStreamReader failed reading zip archive"),
])
def test_a_damaged_run_is_refused_on_resume_in_one_line(tiny_trained_drafter, tmp_path, damage: str, says: str) -> None:
    """Each was a traceback (FileNotFoundError through `latest`, torch's RuntimeError); the planted link's target
    is never read or written."""
    drafter = Path(tiny_trained_drafter[1])
    run = shutil.copytree(drafter.parent, tmp_path / "run", symlinks=True)
    mine = tmp_path / "mine.txt"
    mine.write_text("mine\n")
    if damage == "latest-symlink":
        (run / "latest").unlink()
        (run / "latest").symlink_to(mine)
    elif damage == "latest-names-nothing":
        (run / "latest").write_text("checkpoint-999999\n")
    else:
        trainer = run / "checkpoint-000030" / "trainer.pt"
        trainer.write_bytes(trainer.read_bytes()[:1000])
    result = CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(drafter.parents[1] / "cache"),
                                      "--out", str(run), "--resume", "steps=30", "--no-progress"])
    assert says in one_line_error(result) and mine.read_text() == "mine\n"


def test_a_metrics_line_cut_by_a_kill_is_dropped_on_resume(tiny_trained_drafter, tmp_path) -> None:
    """metrics.jsonl is appended to, not written atomically: a kill mid-line made --resume a JSONDecodeError
    traceback. A resume of a finished run says there is nothing to train ('steps 31..30 ... loss nan' before)."""
    drafter = Path(tiny_trained_drafter[1])
    run = shutil.copytree(drafter.parent, tmp_path / "run", symlinks=True)
    whole = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(whole + '{"loss": 4.2, "st')
    result = CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(drafter.parents[1] / "cache"),
                                      "--out", str(run), "--resume", "steps=30", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert (run / "metrics.jsonl").read_text() == whole
    assert "nothing to train: the run was already at step 30" in result.stdout


def test_a_damaged_metrics_line_is_dropped_on_resume(tiny_trained_drafter, tmp_path) -> None:
    """A metrics.jsonl line that is not UTF-8 (damaged bytes) made --resume a UnicodeDecodeError traceback; it is
    dropped, as a line cut by a kill is, and the run resumes."""
    drafter = Path(tiny_trained_drafter[1])
    run = shutil.copytree(drafter.parent, tmp_path / "run", symlinks=True)
    whole = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_bytes(whole.encode() + b'{"step": 31, "loss": \xff\xfe}\n')
    result = CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(drafter.parents[1] / "cache"),
                                      "--out", str(run), "--resume", "steps=30", "--no-progress"])
    assert result.exit_code == 0 and result.exception is None, result.output
    assert (run / "metrics.jsonl").read_text() == whole


def test_teacher_forcing_a_template_that_renders_the_answer_apart_names_the_file(tiny_dir, tmp_path) -> None:
    """A chat template that renders an assistant turn with another header than its generation prompt: the error
    said 'line 1: ...' without the prompt file."""
    target = shutil.copytree(tiny_dir("llama"), tmp_path / "target")
    template = target / "chat_template.jinja"
    header = "<|im_start|>{{ message['role'] }}"
    assert header in template.read_text()
    template.write_text(template.read_text().replace(
        header, "<|im_start|>{% if message['role'] == 'assistant' %}Assistant{% else %}{{ message['role'] }}{% endif %}"))
    prompts = tmp_path / "texts.jsonl"
    prompts.write_text(json.dumps({"messages": [{"role": "user", "content": "Hi"},
                                                {"role": "assistant", "content": "Hello."}]}) + "\n")
    error = one_line_error(CliRunner().invoke(app, ["cache", "--source", "text", "--target", str(target), "--prompts",
                                                    str(prompts), "--out", str(tmp_path / "cache"), "--layers", "1"]))
    assert f"{prompts}:1: the chat template renders the answer turn with a different prefix" in error


@pytest.mark.parametrize("damage, command, says", [
    ("no-shards", "cache-mix", "its shards hold 0 samples, its totals say 8"),  # an IndexError traceback
    ("shards-object", "train", "'shards' is not a list"),  # said the cache holds no anchors
    ("shard-outside", "train", "a shard named '/etc/passwd', not a file of its directory"),  # blamed as cut
    ("shard-up", "cache-mix", "a shard named '../cache/shard-00000.safetensors'"),
    ("no-config", "train", "'config' is not an object; the manifest is damaged: rebuild the cache"),  # a KeyError
    ("totals-text", "train", "'totals.samples' is not a count"),  # a TypeError traceback
    ("shard-no-bytes", "cache-mix", "shard shard-00000.safetensors: 'bytes' is None, not a count"),  # a KeyError
])
def test_a_damaged_cache_manifest_is_one_line(tiny_trained_drafter, tmp_path, damage, command, says) -> None:
    cache = Path(tiny_trained_drafter[1]).parents[1] / "cache"
    damaged = shutil.copytree(cache, tmp_path / "damaged")
    manifest = json.loads((damaged / "manifest.json").read_text())
    if damage in ("no-shards", "shards-object"):
        manifest["shards"] = [] if damage == "no-shards" else {}
    elif damage == "no-config":
        del manifest["config"]
    elif damage == "totals-text":
        manifest["totals"] = "x"
    elif damage == "shard-no-bytes":
        del manifest["shards"][0]["bytes"]
    else:
        manifest["shards"][0]["file"] = "/etc/passwd" if damage == "shard-outside" else "../cache/shard-00000.safetensors"
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    argv = (["cache-mix", str(cache), str(damaged), "--out", str(tmp_path / "mix")] if command == "cache-mix" else
            ["train", "--recipe", "tiny", "--cache", str(damaged), "--out", str(tmp_path / "run"), "steps=1"])
    assert says in one_line_error(CliRunner().invoke(app, argv))


@pytest.mark.parametrize("damage, says", [
    ("shard-outside", "a shard named '/etc/passwd', not a file of its directory"),  # '/etc/passwd: missing or truncated'
    ("shard-of-another-set", "a shard named '../other/answers-00000.safetensors'"),  # trained on without a word
    ("shards-object", "'shards' is not a list"),
    # KeyError and TypeError tracebacks, a count taken as it came, a version that read "1 (... 1)"
    ("no-config", "'config' is not an object; the manifest is damaged: regenerate the answers"),
    ("target-null", "'config.target' is not an object naming the target"),
    ("shard-bytes-text", "shard answers-00000.safetensors: 'bytes' is '1097', not a count"),
    ("shard-no-sha256", "'sha256' is None, not a hash"),
    ("shard-samples-negative", "'samples' is -3, not a count"),  # trained on without a word
    ("version-text", "format version '1' (this minispark reads 1)"),
    ("no-shards", "the answer set holds no answers (its manifest lists no shard)"),  # "no anchors (answers too short?)"
])
def test_a_damaged_answer_set_manifest_is_one_line(tiny_dir, files, tmp_path, damage, says) -> None:
    other = tmp_path / "other"
    args = ["answers", "--target", str(tiny_dir("llama")), "--prompts", files["ok.jsonl"], "--num-samples", "1",
            "--max-new-tokens", "4"]
    assert CliRunner().invoke(app, args + ["--out", str(other)]).exit_code == 0
    damaged = shutil.copytree(other, tmp_path / "damaged")
    manifest = json.loads((damaged / "answers.json").read_text())
    ANSWER_SET_DAMAGES[damage](manifest)
    (damaged / "answers.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(app, ["train", "--recipe", "tiny", "--answers", str(damaged), "--out",
                                      str(tmp_path / "run"), "steps=1"])
    assert says in one_line_error(result)


@pytest.mark.parametrize("source, argv, says", [
    ("cache", ["answers", "--out"], "holds a minispark-cache manifest (manifest.json), not this command's output"),
    ("drafter", ["cache", "--out"], "holds a drafter or checkpoint minispark wrote, not this command's output"),
    ("run", ["answers", "--out"], "holds a minispark training run (train_config.json), not this command's output"),
    ("run", ["export", "{drafter}", "--out"], "holds a minispark training run (train_config.json), not an earlier"),
    ("cache+notes", ["cache", "--out"], "holds notes.txt, which minispark did not write"),  # the user's file is named
])
def test_an_out_holding_another_minispark_output_says_which(tiny_trained_drafter, tmp_path, source, argv,
                                                             says) -> None:
    """It said 'holds .minispark-written.json (or manifest.json, checkpoint-000030/), which minispark did not
    write' of minispark's own files."""
    from tests.helpers import snapshot

    drafter = Path(tiny_trained_drafter[1])
    cache, run = drafter.parents[1] / "cache", drafter.parent
    out = shutil.copytree({"cache": cache, "cache+notes": cache, "drafter": drafter, "run": run}[source],
                          tmp_path / "out", symlinks=True)
    if source == "cache+notes":
        (out / "notes.txt").write_text("mine\n")
    before = snapshot(out)
    args = [arg.replace("{cache}", str(cache)).replace("{drafter}", str(drafter)) for arg in argv] + [str(out)]
    assert says in one_line_error(CliRunner().invoke(app, args)) and snapshot(out) == before


def test_a_diverging_run_stops_with_one_line(tiny_trained_drafter, tmp_path, monkeypatch) -> None:
    """lr=1e308 trained to a NaN loss, exited 0 and saved a drafter of NaN weights.

    lr is now capped (``defaults.MAX_LR``), so the divergence is planted: from step 3 one weight is inf, as a
    blown-up Adam step leaves it, and the real loss computed from it is NaN."""
    import minispark.training.trainer as trainer_module
    real_step = trainer_module.train_step

    def step_that_blows_up(model, optimizer, scheduler, batch, config, generator):
        if scheduler.last_epoch >= 2:
            with torch.no_grad():
                next(model.parameters()).fill_(float("inf"))
        return real_step(model, optimizer, scheduler, batch, config, generator)

    monkeypatch.setattr(trainer_module, "train_step", step_that_blows_up)
    cache = Path(tiny_trained_drafter[1]).parents[1] / "cache"
    result = CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(cache), "--out", str(tmp_path / "run"),
                                      "lr=0.5", "steps=4", "--no-progress"])
    assert "training diverged: the loss at step 3 is nan" in one_line_error(result)
    assert "lower lr (now 0.5)" in result.stderr
    assert not (tmp_path / "run" / "drafter").exists()


def test_a_read_only_cache_is_refused_before_the_conversion(tmp_path: Path, monkeypatch) -> None:
    """$MINISPARK_CACHE on a read-only filesystem: the GGUF was converted for 20 s, then OSError's traceback."""
    import errno
    import tempfile

    from minispark.core.errors import MinisparkError
    from minispark.target import embedded

    def read_only(*_args, **_kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", read_only)
    with pytest.raises(MinisparkError, match=r"cannot write its one-time conversion under .*\(Read-only file "
                                             r"system\); point \$MINISPARK_CACHE at a writable directory"):
        embedded._convert(tmp_path / "never-read.gguf", tmp_path / "models" / "SmolLM2")


def test_a_flag_path_is_set_as_given_and_not_twice(tmp_path) -> None:
    """``--answers`` (and ``--init-from``, ``--heldout-cache``) set the recipe key to the path as typed: an answer
    set in a directory named ``none`` is that directory, not "no answer set"; the same key as an override too is
    refused, naming the flag."""
    from minispark.core.errors import MinisparkError
    from minispark.training.recipes import load_recipe

    config = load_recipe("tiny", [], {"cache_dir": None, "answers_dir": "none"})
    assert config.answers_dir == "none" and config.cache_dir is None
    padded = load_recipe("tiny", [], {"init_from": " runs/d "})
    assert padded.init_from == " runs/d "
    with pytest.raises(MinisparkError, match="answers_dir: given twice, as a flag and as the override 'answers_dir=x'"):
        load_recipe("tiny", ["answers_dir=x"], {"answers_dir": "none"})
    assert load_recipe("tiny", ["answers_dir=none"]).answers_dir is None  # text overrides are still parsed
