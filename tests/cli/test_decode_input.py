"""Bad input to ``generate``, ``chat``, ``serve`` and ``demo``: exit status 2 and one ``error:`` line naming the flag or file, no
traceback, nothing half written.

    .venv/bin/python -m pytest -q tests/cli/test_decode_input.py
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from typer.testing import CliRunner

from minispark.cli import app
from tests.helpers import LONG_PROMPT, one_line_error


# (id, argv with {placeholders} from the ``files`` fixture, what the error line must name)
CASES = [
    # generate: text, numbers, choices, files
    ("gen-empty-prompt", ["generate", "--prompt", ""], "--prompt"),
    ("gen-blank-prompt", ["generate", "--prompt", "   "], "--prompt"),
    ("gen-negative-max-new", ["generate", "--max-new-tokens", "-1"], "--max-new-tokens"),
    ("gen-zero-max-new", ["generate", "--max-new-tokens", "0"], "--max-new-tokens"),
    ("gen-temperature-nan", ["generate", "--temperature", "nan"], "--temperature"),
    ("gen-temperature-inf", ["generate", "--temperature", "inf"], "--temperature"),
    ("gen-temperature-negative", ["generate", "--temperature", "-1"], "--temperature"),
    ("gen-top-p-zero", ["generate", "--top-p", "0"], "--top-p"),
    ("gen-top-p-big", ["generate", "--top-p", "1.5"], "--top-p"),
    ("gen-top-p-nan", ["generate", "--top-p", "nan"], "--top-p"),
    ("gen-top-k-negative", ["generate", "--top-k", "-1"], "--top-k"),
    ("gen-threshold-2", ["generate", "--threshold", "2"], "--threshold"),
    ("gen-threshold-nan", ["generate", "--threshold", "nan"], "--threshold"),
    ("gen-gamma-zero", ["generate", "--gamma", "0"], "--gamma"),
    ("gen-unknown-mode", ["generate", "--mode", "turbo"], "--mode"),
    ("gen-negative-seed", ["generate", "--seed", "-1"], "--seed"),
    ("gen-unknown-dtype", ["generate", "--dtype", "fp8"], "--dtype"),
    ("gen-unknown-device", ["generate", "--device", "tpu"], "--device"),
    ("gen-4bit-and-8bit", ["generate", "--load-in-4bit", "--load-in-8bit"], "--load-in-4bit"),
    ("gen-sps-missing", ["generate", "--sps", "{missing}"], "--sps"),
    ("gen-sps-empty", ["generate", "--sps", "{empty.json}"], "--sps"),
    ("gen-sps-dir", ["generate", "--sps", "{dir}"], "--sps"),
    ("gen-drafter-empty-dir", ["generate", "--drafter", "{emptydir}"], "--drafter"),
    ("gen-drafter-no-weights", ["generate", "--drafter", "{noweights}"], "no weights"),
    ("gen-drafter-missing", ["generate", "--drafter", "{missing}"], "--drafter"),
    ("gen-drafter-bad-config", ["generate", "--drafter", "{badconfig}"], "config.json"),
    ("gen-drafter-file", ["generate", "--drafter", "{afile}"], "--drafter"),
    ("gen-image-missing", ["generate", "--image", "{missing}"], "--image"),
    ("gen-image-corrupt", ["generate", "--image", "{corrupt.png}"], "--image"),
    ("gen-image-truncated", ["generate", "--image", "{truncated.png}"], "truncated.png"),
    ("gen-image-bomb", ["generate", "--image", "{bomb.png}"], "bomb.png"),
    ("gen-image-empty", ["generate", "--image", "{empty.png}"], "--image"),
    ("gen-image-dir", ["generate", "--image", "{dir}"], "--image"),
    ("gen-target-missing-abs", ["generate", "--target", "{missing}"], "no such directory"),
    ("gen-target-missing-rel", ["generate", "--target", "./no-such-model"], "no such directory"),
    ("gen-target-hub-offline", ["generate", "--target", "nobody-here/no-model"], "--target"),
    ("gen-target-file", ["generate", "--target", "{afile}"], "--target"),
    ("gen-target-pickle", ["generate", "--target", "{binonly}"], "pickle"),
    ("gen-target-empty-dir", ["generate", "--target", "{emptydir}"], "--target"),
    # every first message then failed as "your message: 5016 tokens ...; shorten it"
    ("chat-system-too-long", ["chat", "--target", "{tiny}", "--drafter", "none", "--system", LONG_PROMPT],
     "the system message (--system): 5016 tokens"),
    ("gen-prompt-too-long", ["generate", "--target", "{tiny}", "--drafter", "none", "--prompt", LONG_PROMPT],
     "--prompt"),
    # chat
    ("chat-threshold-2", ["chat", "--threshold", "2"], "--threshold"),
    ("chat-unknown-mode", ["chat", "--mode", "turbo"], "--mode"),
    ("chat-image-corrupt", ["chat", "--image", "{corrupt.png}"], "--image"),
    ("chat-negative-max-new", ["chat", "--max-new-tokens", "-5"], "--max-new-tokens"),
    ("chat-temperature-nan", ["chat", "--temperature", "nan"], "--temperature"),
    ("chat-drafter-empty-dir", ["chat", "--drafter", "{emptydir}"], "--drafter"),
    # demo
    ("demo-num-prompts-zero", ["demo", "--num-prompts", "0"], "--num-prompts"),
    ("demo-negative-max-new", ["demo", "--max-new-tokens", "-1"], "--max-new-tokens"),
    ("demo-out-file", ["demo", "--train", "--out", "{afile}"], "--out"),
    ("demo-train-with-drafter", ["demo", "--train", "--drafter", "lookup"], "--drafter"),
    ("demo-drafter-empty-dir", ["demo", "--drafter", "{emptydir}"], "--drafter"),
    ("serve-max-concurrent-huge", ["serve", "--max-concurrent", "100000"], "--max-concurrent must be at most 256"),
    ("gen-empty-stop", ["generate", "--stop", ""], "--stop"),
    ("chat-empty-stop", ["chat", "--stop", "x", "--stop", ""], "--stop"),
    # interrupted copies: truncated safetensors, a target directory with only config.json
    ("gen-drafter-truncated", ["generate", "--drafter", "{cutdrafter}"], "cutdrafter/model.safetensors"),
    ("gen-target-truncated", ["generate", "--target", "{cuttarget}"], "cuttarget/model.safetensors"),
    ("gen-target-config-only", ["generate", "--target", "{configonly}"], "no weights"),
    ("gen-target-weight-missing", ["generate", "--target", "{holedtarget}", "--drafter", "none"],
     "lack or mis-shape 'model.layers.0.mlp.down_proj.weight'"),
    # a device this machine lacks
    ("gen-device-mps", ["generate", "--device", "mps"], "--device mps"),
    ("gen-device-cuda-7", ["generate", "--device", "cuda:7"], "--device cuda:7"),
    # numbers past what torch and numpy take, or past the target's context
    ("gen-seed-huge", ["generate", "--seed", "99999999999999999999999"], "--seed"),
    ("chat-seed-huge", ["chat", "--seed", "4294967296"], "--seed"),
    ("gen-sps-not-utf8", ["generate", "--sps", "{full.png}"], "--sps"),  # an image given as the table,
    ("serve-sps-not-utf8", ["serve", "--sps", "{full.png}"], "not UTF-8 text"),
    ("gen-target-no-tokenizer", ["generate", "--target", "{notokenizer}", "--drafter", "none"],
     "cannot load its tokenizer"),
    ("gen-target-bad-tokenizer", ["generate", "--target", "{badtokenizer}", "--drafter", "none"],
     "cannot load its tokenizer"),
    ("gen-drafter-config-lacks-keys", ["generate", "--target", "{tiny}", "--drafter", "{fakedrafter}"],
     "lacks the keys"),
    ("serve-port-huge", ["serve", "--port", "99999"], "--port"),
    ("serve-host-not-here", ["serve", "--host", "192.0.2.1"], "cannot listen there"),  # TEST-NET: no such interface,
    ("serve-api-key-empty", ["serve", "--api-key", ""], "--api-key"),
    ("demo-train-out-foreign", ["demo", "--train", "--out", "{userdir}"], "holds notes.txt, which minispark did not"),
    ("chat-empty-system", ["chat", "--system", ""], "--system: empty"),
    ("chat-blank-system", ["chat", "--system", "  "], "--system: empty"),
    ("gen-temperature-huge", ["generate", "--temperature", "1e308"], "--temperature must be a finite number in [0, 100]"),
    ("chat-temperature-huge", ["chat", "--temperature", "1e308"], "--temperature"),
    # a re-run of the probe
    ("gen-drafter-empty-string", ["generate", "--drafter", ""], "--drafter '': empty"),  # not "--drafter .",
    ("gen-drafter-hybrid-empty", ["generate", "--drafter", "hybrid:"], "--drafter 'hybrid:': empty"),
    ("gen-temperature-subnormal", ["generate", "--temperature", "1e-320"], "a positive temperature must be at least"),
    ("gen-target-unknown-home", ["generate", "--target", "~no-such-user-here/model"], "names no user's home"),
    # bytes that are not UTF-8 on a command line reach Python as lone surrogates
    ("gen-prompt-not-utf8", ["generate", "--prompt", "caf\udce9"], "--prompt: not UTF-8 text (byte 0xe9)"),
    ("gen-stop-not-utf8", ["generate", "--stop", "caf\udce9"], "--stop: not UTF-8 text"),  # would never match,
    ("chat-system-not-utf8", ["chat", "--system", "caf\udce9"], "--system: not UTF-8 text"),
    ("gen-drafter-weights-dir", ["generate", "--drafter", "{dirweights}"], "a directory, not a weights file"),
    ("gen-drafter-record-list", ["generate", "--drafter", "{listrecord}"], "listrecord/target.json: not a target record"),
    ("gen-sps-tokens-not-from-one", ["generate", "--sps", "{tokens5.json}"], "field 'tokens': must start at 1"),
    ("gen-drafter-none-with-gamma", ["generate", "--drafter", "none", "--gamma", "3"],
     "--drafter none drafts nothing, so --gamma would have no effect"),
    ("chat-drafter-none-with-mode", ["chat", "--drafter", "none", "--mode", "fixed", "--sps", "{afile}"],
     "so --mode, --sps would have no effect"),
    ("serve-drafter-none-with-gamma", ["serve", "--drafter", "none", "--gamma", "2"], "--drafter none drafts nothing"),
    ("gen-lookup-schedule-names-mode", ["generate", "--target", "{tiny}", "--drafter", "lookup", "--mode", "schedule"],
     "--mode schedule: this length policy needs per-position confidences"),
    ("gen-drafter-record-wrong-types", ["generate", "--drafter", "{badrecord}"],
     "badrecord/target.json: not a target record ('source' must be a non-empty string, got 5)"),  # a traceback,
    ("gen-drafter-record-unknown-dtype", ["generate", "--drafter", "{fp64record}"],
     "'dtype' must be one of bf16, fp16, fp32, got 'fp64'"),  # was loaded without a word,
    ("gen-drafter-hybrid-missing", ["generate", "--drafter", "hybrid:/nonexistent-drafter"],
     "--drafter hybrid: /nonexistent-drafter: no such directory"),  # named only the directory,
    ("gen-image-tab", ["generate", "--image", "cat\t.png"], "--image 'cat\\t.png': a path with a tab in it"),
    ("gen-target-newline", ["generate", "--target", "{tiny}\n"], "--target"),
    ("gen-drafter-newline", ["generate", "--drafter", "lookup\n"], "--drafter 'lookup\\n': a path with a line"),
    ("gen-drafter-deep-config", ["generate", "--drafter", "{deepconfig}"], "deepconfig/config.json: unreadable config"),
    ("gen-drafter-symlink-loop", ["generate", "--drafter", "{looplink}"], "which does not exist (or loops)"),
    ("gen-drafter-target-moved", ["generate", "--drafter", "{movedtarget}"],
     "moved-away, does not exist (moved or deleted?); give the target with --target"),  # blamed --target, not typed,
    ("gen-image-strip", ["generate", "--image", "{strip.png}"], "60000x2 pixels: one side is more than 200 times"),
    # a symlink that leads nowhere is named as one, not as "not found"
    ("gen-sps-dangling", ["generate", "--sps", "{danglinglink}"], "danglinglink: is a symlink to"),
    ("gen-target-loop", ["generate", "--target", "{looplink}"], "looplink: is a symlink to"),
    # --threshold shapes only the threshold mode: with another one it was ignored without a word
    ("gen-threshold-with-fixed-mode", ["generate", "--mode", "fixed", "--threshold", "0.9"],
     "--threshold 0.9: only the threshold mode uses it, and this run decodes in fixed mode"),
    ("gen-threshold-mode-chosen", ["generate", "--target", "{tiny}", "--drafter", "lookup", "--threshold", "0.9"],
     "this run decodes in fixed mode"),  # lookup has no confidences: fixed is chosen after loading,
    ("chat-drafter-none-with-threshold", ["chat", "--drafter", "none", "--threshold", "0.9"],
     "so --threshold would have no effect"),
    ("gen-drafter-none-with-draft-skip", ["generate", "--drafter", "none", "--draft-skip"],
     "--drafter none drafts nothing, so --draft-skip would have no effect"),  # ignored without a word,
    ("chat-drafter-none-with-no-draft-skip", ["chat", "--drafter", "none", "--no-draft-skip"],
     "so --no-draft-skip would have no effect"),
    ("serve-api-key-newline", ["serve", "--api-key", "a\nb"], "holds '\\n', which no HTTP client can send"),
    ("serve-api-key-padded", ["serve", "--api-key", " key"], "no space at either end"),  # no request matched it,
    ("serve-api-key-not-ascii", ["serve", "--api-key", "café"], "holds 'é'"),
    ("demo-out-without-train", ["demo", "--out", "{out}"], "only demo --train writes a pipeline directory"),
    ("gen-drafter-config-huge-number", ["generate", "--drafter", "{bigconfig}"],
     "unreadable config (a number too long to read (more than 4300 digits))"),  # advised set_int_max_str_digits,
    ("gen-drafter-record-huge-number", ["generate", "--drafter", "{bigrecord}"],
     "bigrecord/target.json: not a target record (a number too long to read"),
    # refused before the target (here: one that does not exist)
    ("gen-drafter-calibration-damaged", ["generate", "--prompt", "hi", "--drafter", "{badcal}", "--target", "{missing}"],
     "badcal/calibration.json: not readable as JSON"),
    ("serve-host-empty", ["serve", "--host", ""], "--host '': empty; give an address"),  # "--host : not an address",
    ("gen-drafter-a-target", ["generate", "--drafter", "{notokenizer}", "--target", "{missing}", "--prompt", "hi"],
     "a transformers model's config (model_type 'llama'), not a drafter's"),  # refused only once the target loaded,
    ("target-config-wrong-type", ["generate", "--target", "{strtarget}", "--prompt", "hi", "--drafter", "none"],
     "config.json: Field 'num_hidden_layers' expected int, got str"),  # huggingface_hub's traceback,
    ("target-config-negative-size", ["generate", "--target", "{negtarget}", "--prompt", "hi", "--drafter", "none"],
     "cannot build the model (Trying to create tensor with negative dimension"),  # torch's traceback,
    # --sps and --strict shape only the schedule mode: with another one they were ignored (a table warned)
    ("gen-sps-with-fixed-mode", ["generate", "--mode", "fixed", "--sps", "{table.json}"],
     "--sps: only the schedule and tree modes read an SPS table, and this run decodes in fixed mode"),
    ("chat-strict-with-threshold-mode", ["chat", "--mode", "threshold", "--strict"],
     "--strict: only the schedule and tree modes read an SPS table, and this run decodes in threshold mode"),
    ("serve-sps-with-fixed-mode", ["serve", "--mode", "fixed", "--sps", "{table.json}"],
     "this run decodes in fixed mode; drop it or give --mode tree"),
    ("gen-drafter-none-with-strict", ["generate", "--drafter", "none", "--strict"],
     "--drafter none drafts nothing, so --strict would have no effect"),
    ("gen-sps-mode-chosen", ["generate", "--target", "{tiny}", "--drafter", "lookup", "--sps", "{table.json}",
                             "--prompt", "hi"], "--sps: only the schedule and tree modes read an SPS table, and this run "
     "decodes in fixed mode"),  # lookup has no confidences: fixed is chosen after loading,
    ("target-config-vocab-zero", ["generate", "--target", "{vocab0target}", "--prompt", "hi", "--drafter", "none"],
     "cannot build the model (Padding_idx must be within num_embeddings)"),  # torch's AssertionError traceback,
    ("target-chat-template-damaged", ["generate", "--target", "{badtemplate}", "--prompt", "hi", "--drafter", "none"],
     "its chat template fails on this conversation (unexpected '}')"),  # jinja2's TemplateSyntaxError traceback,
]


def test_the_cases_have_unique_ids() -> None:
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("argv, needle", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line(files: dict[str, str], argv: list[str], needle: str) -> None:
    args = [re.sub(r"\{([\w.-]+)\}", lambda m: files[m.group(1)], arg) for arg in argv]
    error = one_line_error(CliRunner().invoke(app, args))
    assert needle in error, error


def test_the_int8_runtime_is_said_where_it_drafts_and_recorded_by_the_drafter(tiny_dir, files, tmp_path,
                                                                              monkeypatch) -> None:
    """Its near-tie notice printed under answers and cache, where nothing drafts, and a drafter trained on an int8
    answer set recorded the plain target."""
    from minispark.core.defaults import TARGET_RUNTIME_ENV
    from minispark.target.int8 import int8_supported
    from minispark.target.remembered import read_record

    if not int8_supported("cpu"):
        pytest.skip("this torch build has no int8 weight-only CPU kernel")
    runner, target = CliRunner(), str(tiny_dir("llama"))
    monkeypatch.setenv(TARGET_RUNTIME_ENV, "int8")
    built = runner.invoke(app, ["answers", "--target", target, "--prompts", files["ok.jsonl"], "--max-new-tokens", "8",
                                "--num-samples", "2", "--out", str(tmp_path / "answers")])
    assert built.exit_code == 0 and "bf16 activations" not in built.output, built.output
    trained = runner.invoke(app, ["train", "--recipe", "tiny", "--answers", str(tmp_path / "answers"), "--out",
                                  str(tmp_path / "run"), "steps=2", "--no-progress"])
    assert trained.exit_code == 0, trained.output
    drafter = tmp_path / "run" / "drafter"
    assert read_record(drafter).runtime == "int8" and "runtime int8" in read_record(drafter).describe()
    drafting = runner.invoke(app, ["generate", "--drafter", str(drafter), "--prompt", "Hi", "--max-new-tokens", "4",
                                   "--mode", "fixed"])
    assert drafting.exit_code == 0 and "bf16 activations" in drafting.output, drafting.output
    plain = runner.invoke(app, ["generate", "--target", target, "--drafter", "none", "--prompt", "Hi",
                                "--max-new-tokens", "4"])
    assert plain.exit_code == 0 and "bf16 activations" not in plain.output, plain.output
    monkeypatch.delenv(TARGET_RUNTIME_ENV)
    packed = runner.invoke(app, ["generate", "--drafter", str(drafter), "--prompt", "Hi", "--max-new-tokens", "4",
                                 "--mode", "fixed"])
    assert packed.exit_code == 0 and "was trained against --runtime int8 of its target" in packed.output, packed.output


def test_a_default_generate_falls_back_from_a_too_short_sps_table(tiny_trained_drafter, monkeypatch) -> None:
    """A found table profiled for a smaller γ is served as no table (a one-line notice), not an error."""
    from minispark.serving import builder
    from minispark.serving.sps import SPSTable

    target, drafter = tiny_trained_drafter  # γ = 4: verifies up to 5 tokens
    monkeypatch.setattr(builder, "find_table", lambda *args, **kwargs: SPSTable.from_inline([1.0, 0.9, 0.8]))
    result = CliRunner().invoke(app, ["generate", "--target", str(target), "--drafter", str(drafter),
                                      "--max-new-tokens", "4", "--json"])
    assert result.exit_code == 0, result.output
    notices = [line for line in result.stderr.splitlines() if "profiles up to 3 tokens" in line]
    # the command it gives is one profile runs: for this target, and at least profile's 8 tokens per step (it
    # said `minispark profile --max-tokens 5`, which profile refused and which measured the embedded target)
    command = f"`minispark profile --target {target} --max-tokens 8`"
    assert len(notices) == 1 and "tree mode uses the generic cost model" in notices[0] and command in notices[0], \
        notices
    assert json.loads(result.stdout)["drafter"] == "dspark"


def test_a_calibration_for_fewer_positions_is_served_uncalibrated(tiny_trained_drafter, tmp_path,
                                                                   monkeypatch) -> None:
    """After `calibrate --gamma 2` on a γ 4 drafter, every default generate in schedule mode failed ("calibration
    has 2 temperatures but γ=4"), naming neither the file nor a flag."""
    from minispark.model.calibration import Calibration
    from minispark.serving import builder
    from minispark.serving.sps import SPSTable

    target, drafter = tiny_trained_drafter  # γ = 4
    copy = shutil.copytree(drafter, tmp_path / "drafter")
    Calibration(temperatures=[1.5, 0.5], shifts=[0.0, 0.0]).save(copy / "calibration.json")
    monkeypatch.setattr(builder, "find_table", lambda *args, **kwargs: SPSTable.from_inline([1.0] * 8))
    result = CliRunner().invoke(app, ["generate", "--target", str(target), "--drafter", str(copy),
                                      "--max-new-tokens", "4", "--json"])
    assert result.exit_code == 0, result.output
    assert "calibration.json fits 2 draft positions, this γ drafts up to 4" in result.stderr
    assert f"minispark calibrate --drafter {copy} --prompts FILE --gamma 4" in result.stderr


def test_demo_train_sizes_its_recipe_to_another_target(tiny_dir) -> None:
    """demo --train --target OTHER: the demo recipe's SmolLM2 layer ids and sizes give way to the target's."""
    from minispark.demo import PipelineSizes, pipeline_recipe, usable_mask_token
    from minispark.target.loading import load_target
    from minispark.training.draft_sizes import check_target_dims, draft_config, target_dims

    name = PipelineSizes().recipe
    assert not pipeline_recipe(name, [], "embedded")[1] and not pipeline_recipe(name, [], None)[1]
    target = load_target(str(tiny_dir("llama")))
    recipe, resized = pipeline_recipe(name, [], str(target.model_dir))
    assert resized and recipe.feature_layers is None and recipe.hidden_size is None
    check_target_dims(recipe, target_dims(target))
    recipe = usable_mask_token(recipe, target)
    config = draft_config(recipe, target_dims(target), feature_layers=target.auto_layers(), mask_token_id=16)
    assert config.hidden_size == target.hidden_size and max(config.feature_layers) < target.num_layers
    recipe, _ = pipeline_recipe(name, ["feature_layers=1,2"], str(target.model_dir))  # a size the user gives wins
    assert recipe.feature_layers == [1, 2]


def test_transformers_notices_stay_quiet(tiny_dir) -> None:
    """Its log lines ("Loading a GGUF checkpoint ...", "Token indices sequence length is longer ...")
    are not the user's concern once a target is loaded; minispark's own notices are warnings."""
    from transformers.utils import logging as hf_logging

    from minispark.target.loading import load_target

    target = load_target(str(tiny_dir("llama")))
    assert hf_logging.get_verbosity() == hf_logging.ERROR
    target.tokenizer("word " * 5000)  # longer than model_max_length: logged at WARNING, so not shown


def test_chat_keeps_its_internal_re_prefill_out_of_the_answer(tiny_dir, monkeypatch) -> None:
    """A turn that re-prefilled cached tokens shows only the usual figures, no notice of its own."""
    import dataclasses

    from minispark.serving.conversation import Conversation

    say = Conversation.say
    monkeypatch.setattr(Conversation, "say", lambda self, *args, **kwargs: dataclasses.replace(
        say(self, *args, **kwargs), recomputed_tokens=3))
    result = CliRunner().invoke(app, ["chat", "--target", str(tiny_dir("llama")), "--drafter", "none",
                                      "--max-new-tokens", "2", "--seed", "0"], input="Hi\nAgain\n/quit\n")
    assert result.exit_code == 0, result.output
    assert "re-prefilled" not in result.output and "re-rendered" not in result.output


def test_ctrl_c_in_a_streamed_answer_ends_its_line(tiny_dir, monkeypatch) -> None:
    """Ctrl-C while generate streamed printed "interrupted" onto the answer's last word."""
    import minispark.serving.generate

    def streams_then_interrupted(*args, on_text, **kwargs):
        on_text("an answer cut")
        raise KeyboardInterrupt

    monkeypatch.setattr(minispark.serving.generate, "generate", streams_then_interrupted)
    result = CliRunner().invoke(app, ["generate", "--target", str(tiny_dir("llama")), "--drafter", "none",
                                      "--prompt", "hi"])
    assert result.exit_code == 130
    assert result.stdout == "an answer cut\n" and result.stderr.strip() == "interrupted", result.output


@pytest.mark.parametrize("train", [True, False])
def test_the_ctrl_c_hint_of_demo(tmp_path, monkeypatch, train: bool) -> None:
    """demo --train resumes its finished stages; the plain demo keeps nothing, so it says only that."""
    import minispark.demo
    from minispark.cli import decode

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(minispark.demo, "run_pipeline" if train else "run_demo", interrupted)
    monkeypatch.setattr(decode, "_load", lambda *args, **kwargs: None)
    argv = ["demo", "--train", "--out", str(tmp_path / "demo")] if train else ["demo"]
    monkeypatch.setattr("sys.argv", ["minispark", *argv])
    result = CliRunner().invoke(app, argv)
    line = result.stderr.strip().splitlines()[-1]
    assert result.exit_code == 130
    assert line == (f"interrupted; finished stages, cache shards and checkpoints are kept; run the same command "
                    f"again to resume: minispark demo --train --out {tmp_path / 'demo'}" if train else "interrupted")


def test_the_calibration_notice_gives_a_command_that_runs(tmp_path) -> None:
    """The shipped drafter is calibrated at T 0, 0.7 and 1; at T 1.5 the notice says to calibrate a copy
    (calibrate refuses the shipped directory itself) on the corpus, and a user's drafter in place."""
    from minispark.core.defaults import CALIBRATION_PROMPTS, SHIPPED_DRAFTERS
    from minispark.model.checkpoint import load_calibration
    from minispark.target.sampling import SamplingConfig
    from minispark.core.checks import not_shipped

    shipped = next(p for p in sorted(SHIPPED_DRAFTERS.iterdir()) if (p / "calibration.json").is_file())
    for temperature in (0.0, 0.7, 1.0):  # the default and the fits shipped beside it print nothing
        assert load_calibration(shipped, sampling=SamplingConfig(temperature))[1] is None
    _, notice = load_calibration(shipped, sampling=SamplingConfig(1.5))
    assert f"cp -rL {shipped} my-drafter && minispark calibrate --drafter my-drafter --prompts " \
           f"{CALIBRATION_PROMPTS} --temperature 1.5" in notice and "never the output" in notice
    not_shipped(tmp_path / "my-drafter", "--drafter", "")  # the copy is calibrated without a refusal
    mine = tmp_path / "mine"
    shutil.copytree(shipped, mine)
    _, notice = load_calibration(mine, sampling=SamplingConfig(0.5, top_k=5))
    assert notice.endswith(f"minispark calibrate --drafter {mine} --prompts {CALIBRATION_PROMPTS} --temperature 0.5 "
                           "--top-k 5")


def test_chat_save_never_replaces_another_file(tiny_dir, tmp_path, monkeypatch) -> None:
    from tests.helpers import snapshot

    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "adir").mkdir()
    saved = tmp_path / "chat.json"
    lines = [f"/save {tmp_path / 'notes.txt'}", f"/save {tmp_path / 'adir'}", f"/save {tmp_path / 'afile' / 'x.json'}",
             f"/save {saved}", f"/save {saved}", "/quit"]
    before = snapshot(tmp_path / "notes.txt", tmp_path / "afile")
    result = CliRunner().invoke(app, ["chat", "--target", str(tiny_dir("llama")), "--drafter", "none"],
                                input="\n".join(lines) + "\n")
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert "notes.txt: exists and is not a saved conversation" in result.output
    assert "adir: is a directory" in result.output and "afile: is a file, not a directory" in result.output
    assert "File exists" not in result.output and result.output.count("saved 0 turns") == 2  # its own: replaced
    assert snapshot(tmp_path / "notes.txt", tmp_path / "afile") == before and json.loads(saved.read_text())["turns"] == []
    # another session: the conversation saved above is not its own to replace; a quoted name is the name
    from minispark.chat import ChatREPL

    attached = []
    monkeypatch.setattr(ChatREPL, "attach", lambda _self, path: attached.append(path))
    result = CliRunner().invoke(app, ["chat", "--target", str(tiny_dir("llama")), "--drafter", "none"],
                                input=f"/save {saved}\n/image \"{tmp_path / 'my photo.png'}\"\n/image 'a' 'b'\n/quit\n")
    assert f"/save {saved}: holds a conversation saved earlier (not by this session)" in result.output
    assert attached == [str(tmp_path / "my photo.png")]
    assert "/image takes one path (got 2" in result.output and "Traceback" not in result.output


def test_serve_refuses_a_port_in_use_before_loading(monkeypatch) -> None:
    import socket

    from minispark.cli import decode

    monkeypatch.setattr(decode, "_decoding_target", lambda *args: pytest.fail("loaded before --port was checked"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        error = one_line_error(CliRunner().invoke(app, ["serve", "--port", str(port)]))
    assert f"--port {port}: cannot listen there" in error


def test_demo_train_goes_on_in_a_directory_it_wrote(tmp_path, monkeypatch) -> None:
    import minispark.demo

    out = tmp_path / "demo"
    for name in minispark.demo.PIPELINE_WRITES:
        (out / name).mkdir(parents=True)
    (out / "stages" / "cache.json").write_text("{}\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(minispark.demo, "run_pipeline", interrupted)
    assert CliRunner().invoke(app, ["demo", "--train", "--out", str(out)]).exit_code == 130  # past the check
    assert minispark.demo.check_out(out) == out


@pytest.mark.parametrize("value", ["abc", "100", "99999999999", "１２３４５"])
def test_a_bad_max_pixels_variable_is_one_line_on_a_text_target(tiny_dir, tmp_path, monkeypatch, value: str) -> None:
    """$MINISPARK_MAX_PIXELS is checked wherever a target loads, not only once a vision target encodes an image."""
    from minispark.core.defaults import IMAGE_MAX_PIXELS_ENV
    from minispark.core.errors import MinisparkError
    from minispark.target.loading import load_target

    monkeypatch.setenv(IMAGE_MAX_PIXELS_ENV, value)
    target = str(tiny_dir("llama"))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Hi there"}) + "\n")
    for argv in (["generate", "--drafter", "none"], ["chat", "--drafter", "none"], ["bench", "--drafter", "none"],
                 ["cache", "--prompts", str(prompts), "--out", str(tmp_path / "c")],
                 ["answers", "--prompts", str(prompts), "--out", str(tmp_path / "a")],
                 ["profile", "--out", str(tmp_path / "t")], ["serve", "--port", "0"], ["demo"]):
        error = one_line_error(CliRunner().invoke(app, argv + ["--target", target]))
        assert f"--max-pixels / ${IMAGE_MAX_PIXELS_ENV}: {value!r} is not a whole number of pixels" in error, error
    with pytest.raises(MinisparkError, match=re.escape(f"${IMAGE_MAX_PIXELS_ENV}: {value!r}")):
        load_target(target)


def test_temperature_is_bounded_in_one_place() -> None:
    from minispark.core.defaults import MAX_TEMPERATURE
    from minispark.core.errors import MinisparkError
    from minispark.target.sampling import SamplingConfig

    assert SamplingConfig(MAX_TEMPERATURE).temperature == MAX_TEMPERATURE
    for bad in (1e308, MAX_TEMPERATURE * 1.01, -0.0001):
        with pytest.raises(MinisparkError, match=r"temperature must be a finite number in \[0, 100\]"):
            SamplingConfig(bad)


def test_chat_help_says_an_empty_system_message_is_refused() -> None:
    help_text = " ".join(CliRunner().invoke(app, ["chat", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "an empty one is refused" in help_text


@pytest.mark.parametrize("value", ["", None])
def test_serve_refuses_an_empty_api_key_variable(monkeypatch, value) -> None:
    """`export MINISPARK_API_KEY=$KEY` with KEY unset served with no key at all, without a word."""
    from minispark.cli import decode

    monkeypatch.setattr(decode, "_decoding_target", lambda *args: pytest.fail("loaded before the key was checked"))
    monkeypatch.setenv("MINISPARK_API_KEY", "")
    argv = ["serve", "--port", "0"] + ([] if value is None else ["--api-key", value])
    assert "--api-key (or $MINISPARK_API_KEY): empty" in one_line_error(CliRunner().invoke(app, argv))


def test_a_vanishing_top_p_keeps_the_most_likely_token() -> None:
    """A top_p below float32's least value compared as 0 and dropped every token: NaN probabilities."""
    from minispark.target.sampling import SamplingConfig, probabilities, sample

    logits = torch.tensor([[0.5, 3.0, -1.0, 2.0]])
    probs = probabilities(logits, SamplingConfig(1.0, top_p=1e-300))
    assert torch.equal(probs, torch.tensor([[0.0, 1.0, 0.0, 0.0]]))
    assert sample(probs).item() == 1
    assert torch.allclose(probabilities(logits, SamplingConfig(1.0, top_p=0.5)), probs)  # unchanged otherwise


def test_a_lone_surrogate_in_a_message_is_refused_by_the_target(tiny_dir) -> None:
    """What `serve` gets from a request's JSON "\\udce9" (it answered 500 "internal error: TypeError")."""
    from minispark.core.errors import MinisparkError
    from minispark.target.loading import load_target

    target = load_target(str(tiny_dir("llama")))
    with pytest.raises(MinisparkError, match=r"a message holds '\\udce9', half a character \(a lone surrogate\)"):
        target.encode(messages=[{"role": "user", "content": "caf\udce9"}])
    assert target.encode(messages=[{"role": "user", "content": "café"}]).length > 2


def test_chat_keeps_the_session_after_a_non_utf8_line_and_an_unknown_home(tiny_dir) -> None:
    """Both ended the session with a traceback (UnicodeDecodeError from input(), RuntimeError from expanduser).
    (The test runner decodes its whole input at once, so the lines after the bad one are lost with it here.)"""
    argv = ["chat", "--target", str(tiny_dir("llama")), "--drafter", "none", "--max-new-tokens", "2", "--seed", "0"]
    for stdin, says in ((b"caf\xe9\n", ["that line is not UTF-8 text (byte 0xe9); type it again"]),
                        (b"/save ~no-such-user-here/x.json\n/image ~no-such-user-here/y.png\nHi\n/quit\n",
                         ["/save ~no-such-user-here/x.json: ~no-such-user-here names no user's home directory",
                          "/image ~no-such-user-here/y.png: ~no-such-user-here names no user's home directory",
                          "assistant"])):
        result = CliRunner().invoke(app, argv, input=stdin)
        assert result.exit_code == 0 and result.exception is None, result.output
        for line in says:
            assert line in result.output, result.output


def test_chat_save_refuses_a_directory_name(tiny_dir, tmp_path) -> None:
    """`/save out/` wrote a file called `out`: the slash that says "a directory" was dropped by Path."""
    lines = [f"/save {tmp_path / 'newdir'}/", "/quit"]
    result = CliRunner().invoke(app, ["chat", "--target", str(tiny_dir("llama")), "--drafter", "none"],
                                input="\n".join(lines) + "\n")
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert f"/save {tmp_path / 'newdir'}/: names a directory" in result.output
    assert not (tmp_path / "newdir").exists()


def test_serve_on_port_zero_prints_the_port_it_serves_on(tiny_dir, monkeypatch) -> None:
    """`serve --port 0` bound a free port but printed http://127.0.0.1:0/v1, an address no client can use."""
    import minispark.server.app as serve_app

    served = {}
    monkeypatch.setattr(serve_app, "run_server", lambda target, setup, config, host, port: served.update(port=port))
    result = CliRunner().invoke(app, ["serve", "--target", str(tiny_dir("llama")), "--drafter", "none", "--port", "0"])
    assert result.exit_code == 0, result.output
    assert served["port"] > 0 and f"http://127.0.0.1:{served['port']}/v1" in result.stderr


def test_chat_save_refuses_control_characters_and_inputs(tiny_dir, tmp_path) -> None:
    """/save wrote a name holding a tab, and into the target's own directory."""
    target = shutil.copytree(tiny_dir("llama"), tmp_path / "target")
    lines = [f"/save {tmp_path}/a\tb.json", f"/save {target}/chat.json", f"/save {tmp_path}/ok.json"]
    result = CliRunner().invoke(app, ["chat", "--target", str(target), "--drafter", "none"], input="\n".join(lines) + "\n")
    assert "a path with a tab in it" in result.output and "is inside the --target directory" in result.output
    assert not (target / "chat.json").exists() and (tmp_path / "ok.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.json", "target"]


@pytest.mark.parametrize("flag", ["--load-in-8bit", "--load-in-4bit"])
def test_bitsandbytes_notices_stay_out_of_the_answer(tiny_dir, caplog, flag: str) -> None:
    """8-bit on a CPU logged 'MatMul8bitLt: inputs will be cast ...' at every forward, inside the streamed answer;
    4-bit advised `pip install kernels`."""
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:  # not imported here: its import logs the kernels advice
        pytest.skip("bitsandbytes is not installed")
    result = CliRunner().invoke(app, ["generate", "--target", str(tiny_dir("llama")), "--drafter", "none",
                                      "--prompt", "hi", "--max-new-tokens", "3", flag])
    assert result.exit_code == 0, result.output
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("bitsandbytes")]
    # the kernels package bitsandbytes loads through logged its offline trust check
    assert "publisher trust check" not in result.output


def test_serve_says_an_image_dir_is_missing(tmp_path) -> None:
    """A missing --image-dir was "not a directory", as a file is."""
    (tmp_path / "afile").write_text("x\n")
    for name, says in (("missing", "no such directory"), ("afile", "not a directory")):
        error = one_line_error(CliRunner().invoke(app, ["serve", "--image-dir", str(tmp_path / name)]))
        assert f"--image-dir {tmp_path / name}: {says}" in error, error


def test_a_fresh_seed_is_one_seed_takes() -> None:
    """The seed `generate --json` and chat's /save report (torch's fresh 64-bit seed) was refused by --seed."""
    from minispark.core import checks
    from minispark.target.sampling import make_generator

    for _ in range(20):
        assert checks.seed(make_generator(None).initial_seed()) is not None
