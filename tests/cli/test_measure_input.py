"""Bad input to ``bench``, ``profile``, ``calibrate`` and ``simulate``: exit status 2 and one ``error:`` line naming the flag or file, no
traceback, nothing half written.

    .venv/bin/python -m pytest -q tests/cli/test_measure_input.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minispark.cli import app
from tests.tiny_models import make_test_image
from tests.helpers import full_disk, one_line_error


# (id, argv with {placeholders} from the ``files`` fixture, what the error line must name)
CASES = [
    # bench
    ("bench-num-prompts-zero", ["bench", "--num-prompts", "0"], "--num-prompts"),
    ("bench-num-prompts-negative", ["bench", "--num-prompts", "-1"], "--num-prompts"),
    ("bench-unknown-mode", ["bench", "--modes", "target,turbo"], "--modes"),
    ("bench-no-modes", ["bench", "--modes", ","], "--modes"),
    ("bench-repeats-zero", ["bench", "--repeats", "0"], "--repeats"),
    ("bench-gamma-zero", ["bench", "--gamma", "0"], "--gamma"),
    ("bench-category-without-prompts", ["bench", "--category", "chat"], "--category"),
    ("bench-category-empty", ["bench", "--prompts", "{ok.jsonl}", "--category", ""], "--category '': empty"),
    ("bench-category-not-in-file", ["bench", "--prompts", "{ok.jsonl}", "--category", "code"],  # said after the load:
     'ok.jsonl is of it (no line has a "category" key)'),  # "no prompt of category 'code' usable with target ...",
    ("bench-prompts-missing", ["bench", "--prompts", "{missing}"], "--prompts"),
    ("bench-prompts-empty", ["bench", "--prompts", "{empty.jsonl}"], "--prompts"),
    ("bench-threshold-2", ["bench", "--threshold", "2"], "--threshold"),
    ("bench-plot-dir", ["bench", "--plot", "{dir}"], "--plot"),
    ("bench-drafter-no-weights", ["bench", "--drafter", "{noweights}"], "--drafter"),
    # profile
    ("profile-contexts-text", ["profile", "--contexts", "abc"], "--contexts"),
    ("profile-contexts-nan", ["profile", "--contexts", "nan"], "--contexts"),
    ("profile-contexts-negative", ["profile", "--contexts", "-5"], "--contexts"),
    ("profile-contexts-fraction", ["profile", "--contexts", "1.5"], "--contexts"),
    ("profile-contexts-empty", ["profile", "--contexts", ""], "--contexts"),
    ("profile-contexts-empty-item", ["profile", "--contexts", "256,,1024"], "--contexts: empty item 2"),  # not dropped,
    ("profile-batch-requests-trailing-comma", ["profile", "--batch-requests", "2,4,"], "--batch-requests: empty item 3"),
    ("bench-modes-empty-item", ["bench", "--modes", "target,,fixed"], "--modes: empty item 2"),
    ("bench-modes-twice", ["bench", "--modes", "target,target"], "--modes: target is given twice"),
    ("profile-contexts-twice", ["profile", "--contexts", "16,16"], "--contexts: 16 is given twice"),
    ("profile-batch-requests-twice", ["profile", "--batch-requests", "4,2,4"], "--batch-requests: 4 is given twice"),
    ("profile-note-control-character", ["profile", "--note", "a\nb"], "--note: holds control character"),
    # Other scripts' digits: int() reads '١٦' as 16, typer's integer flags refuse them; every number the same way
    ("profile-contexts-arabic-digits", ["profile", "--contexts", "١٦"], "--contexts: expected comma-separated whole"),
    # Python's digit grouping: int() reads '16_32' as 1632, a typo for '16,32'
    ("profile-contexts-digit-grouping", ["profile", "--contexts", "16_32"], "--contexts: expected comma-separated whole"),
    ("sim-conf-digit-grouping", ["simulate", "--conf", "0.9_0", "--sps-inline", "1,0.5"], "--conf: expected comma"),
    ("profile-max-tokens-zero", ["profile", "--max-tokens", "0"], "--max-tokens"),
    ("profile-max-tokens-below-gamma", ["profile", "--max-tokens", "1"], "--max-tokens"),
    ("profile-threads-above-cpus", ["profile", "--threads", "999"], "--threads"),
    ("profile-rounds-zero", ["profile", "--rounds", "0"], "--rounds"),
    ("profile-drift-nan", ["profile", "--drift-bound", "nan"], "--drift-bound"),
    ("profile-cooldown-inf", ["profile", "--cooldown", "inf"], "--cooldown"),
    ("profile-threads-zero", ["profile", "--threads", "0"], "--threads"),
    ("profile-out-file", ["profile", "--out", "{afile}"], "--out"),
    ("profile-plot-dir", ["profile", "--plot", "{dir}"], "--plot"),
    # calibrate
    ("cal-drafter-empty-dir", ["calibrate", "--drafter", "{emptydir}", "--prompts", "{ok.jsonl}"], "--drafter"),
    ("cal-drafter-no-weights", ["calibrate", "--drafter", "{noweights}", "--prompts", "{ok.jsonl}"], "no weights"),
    ("cal-drafter-missing", ["calibrate", "--drafter", "{missing}", "--prompts", "{ok.jsonl}"], "--drafter"),
    # a link to a shipped drafter: the copy hint copies the contents (cp -r would copy the link)
    ("cal-shipped-symlink", ["calibrate", "--drafter", "{shiplink}", "--prompts", "{ok.jsonl}"], "cp -rL"),
    ("cal-prompts-missing", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{missing}"], "--prompts"),
    ("cal-num-prompts-zero", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                              "--num-prompts", "0"], "--num-prompts"),
    ("cal-gamma-zero", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}", "--gamma", "0"],
     "--gamma"),
    ("cal-temperature-nan", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                             "--temperature", "nan"], "--temperature"),
    ("cal-max-new-zero", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                          "--max-new-tokens", "0"], "--max-new-tokens"),
    # simulate
    ("sim-conf-above-one", ["simulate", "--conf", "1.5", "--sps-inline", "1,0.5"], "--conf"),
    ("sim-conf-negative", ["simulate", "--conf", "-0.1", "--sps-inline", "1,0.5"], "--conf"),
    ("sim-conf-nan", ["simulate", "--conf", "nan", "--sps-inline", "1,0.5"], "--conf"),
    ("sim-conf-empty", ["simulate", "--conf", "", "--sps-inline", "1,0.5"], "--conf"),
    ("sim-conf-missing", ["simulate", "--sps-inline", "1,0.5"], "--conf"),
    ("sim-sps-inline-empty", ["simulate", "--conf", "0.9", "--sps-inline", ""], "--sps-inline"),
    ("sim-sps-inline-negative", ["simulate", "--conf", "0.9", "--sps-inline", "-1,0.5"], "--sps-inline"),
    ("sim-sps-inline-rising", ["simulate", "--conf", "0.9", "--sps-inline", "1,0.5,0.6"], "--sps-inline"),
    ("sim-sps-inline-zero", ["simulate", "--conf", "0.9", "--sps-inline", "0,0"], "--sps-inline"),
    ("sim-sps-inline-text", ["simulate", "--conf", "0.9", "--sps-inline", "fast"], "--sps-inline"),
    ("sim-sps-missing", ["simulate", "--conf", "0.9", "--sps", "{missing}"], "--sps"),
    ("sim-sps-a-manifest", ["simulate", "--conf", "0.9", "--sps", "{answers.json}"],  # "field 'complete': unknown"
     "answers.json: not an SPS table (a JSON object with complete, format, num_samples, shards)"),
    ("sim-sps-corrupt", ["simulate", "--conf", "0.9", "--sps", "{corrupt.json}"], "corrupt.json"),
    ("sim-no-sps", ["simulate", "--conf", "0.9"], "--sps"),
    ("sim-draws-zero", ["simulate", "--appendix-a", "--draws", "0"], "--draws"),
    ("bench-repeats-past-the-bound", ["bench", "--repeats", "1000000"], "--repeats must be at most 100"),
    ("sim-draws-past-the-bound", ["simulate", "--appendix-a", "--draws", "2147483647"], "--draws must be at most 10000000"),
    ("profile-plot-unexpanded-home", ["profile", "--plot", "~/sps.png"], "~ was not expanded"),
    ("bench-prompts-bomb", ["bench", "--prompts", "{bomb.jsonl}"], "too many pixels"),
    ("cal-drafter-truncated", ["calibrate", "--drafter", "{cutdrafter}", "--prompts", "{ok.jsonl}"],
     "cutdrafter/model.safetensors"),
    ("bench-target-truncated", ["bench", "--target", "{cuttarget}"], "--target"),
    ("profile-device-mps", ["profile", "--device", "mps"], "--device mps"),
    ("bench-repeats-huge", ["bench", "--repeats", "1000000000000"], "--repeats"),
    ("profile-rounds-huge", ["profile", "--rounds", "1000000000000"], "--rounds"),
    ("profile-max-tokens-beyond-context", ["profile", "--target", "{tiny}", "--contexts", "16", "--max-tokens",
                                           "5000", "--out", "{out}"], "--max-tokens 5000"),
    ("cal-max-new-huge", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                          "--max-new-tokens", "1000000000000"], "--max-new-tokens"),
    ("cal-seed-huge", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                       "--seed", "99999999999999999999999"], "--seed"),
    ("sim-draws-huge", ["simulate", "--appendix-a", "--draws", "99999999999999999999999"], "--draws"),
    ("sim-sps-not-utf8", ["simulate", "--conf", "0.9", "--sps", "{full.png}"], "not UTF-8 text"),
    ("bench-sps-not-a-table", ["bench", "--modes", "target", "--sps", "{list.json}"], "--sps"),  # even unread,
    ("bench-plot-is-prompts", ["bench", "--prompts", "{ok.jsonl}", "--plot", "{ok.jsonl}"], "is the --prompts file"),
    ("cal-plot-in-drafter", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}", "--plot",
                             "{fakedrafter}/model.safetensors"], "inside the --drafter directory"),
    ("profile-plot-in-target", ["profile", "--target", "{tiny}", "--plot", "{tiny}/config.json"],
     "inside the --target directory"),
    ("bench-temperature-huge", ["bench", "--temperature", "101"], "--temperature"),
    ("cal-temperature-huge", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                              "--temperature", "1e308"], "--temperature"),
    ("bench-temperature-subnormal", ["bench", "--temperature", "1e-40"], "--temperature 1e-40"),
    ("bench-prompts-lone-surrogate", ["bench", "--prompts", "{surrogate.jsonl}"], "surrogate.jsonl:1: holds '\\udce9'"),
    ("profile-drafter-not-a-drafter", ["profile", "--drafter", "{userdir}"], "not a drafter directory"),
    ("profile-drafter-no-record", ["profile", "--drafter", "{fakedrafter}"], "records no target"),  # not SmolLM2,
    ("profile-out-is-target", ["profile", "--target", "{tiny}", "--out", "{tiny}"], "is the --target directory"),
    ("profile-out-is-an-answer-set", ["profile", "--target", "{tiny}", "--out", "{answerset}"],
     "holds a minispark-answers manifest (answers.json)"),
    ("sim-conf-longer-than-table", ["simulate", "--conf", "0.9,0.8,0.7", "--sps-inline", "1,0.5"],
     "--conf: 3 draft positions need steps per second for up to 4 tokens"),  # not "lower --gamma",
    ("sim-sps-tokens-not-from-one", ["simulate", "--conf", "0.9", "--sps", "{tokens5.json}"],
     "field 'tokens': must start at 1"),  # not "1 tokens is outside the profiled range ...; lower --gamma",
    ("sim-sps-inline-subnormal", ["simulate", "--conf", "0.9", "--sps-inline", "1e-320,1e-320"],
     "--sps-inline must be a finite number in [1e-06, 1e+06]"),  # not "<in memory>: field 'seconds'",
    ("sim-sps-inline-huge", ["simulate", "--conf", "0.9", "--sps-inline", "1e308"], "--sps-inline"),  # Θ was inf,
    ("sim-appendix-a-with-conf", ["simulate", "--appendix-a", "--conf", "0.9"], "--conf cannot be used with it"),
    ("sim-appendix-a-with-sps", ["simulate", "--appendix-a", "--sps-inline", "1,0.5"], "--sps-inline cannot be used"),
    ("profile-batch-requests-one", ["profile", "--batch-requests", "1"], "--batch-requests must be >= 2, got 1"),
    ("profile-batch-requests-above-max", ["profile", "--batch-requests", "300"], "--batch-requests must be at most 64"),
    ("profile-batch-requests-fraction", ["profile", "--batch-requests", "2.5"], "expected comma-separated whole numbers"),
    ("profile-contexts-huge", ["profile", "--contexts", "99999999999"], "--contexts must be at most 2147483647"),
    ("profile-drift-bound-zero", ["profile", "--drift-bound", "0"], "--drift-bound must be a finite number > 0, got"),
    ("bench-plot-someones-file", ["bench", "--plot", "{afile}"], "exists and is not a figure minispark wrote"),
    ("cal-plot-someones-file", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}", "--plot",
                                "{full.png}"], "full.png: exists and is not a figure minispark wrote"),
    ("profile-plot-someones-file", ["profile", "--plot", "{afile}"], "exists and is not a figure minispark wrote"),
    ("bench-plot-not-png", ["bench", "--plot", "{dir}/figure.txt"], "give a name ending in .png"),  # PNG bytes under .txt,
    # paths as typed, before typer's Path drops a trailing '/'
    ("bench-plot-trailing-slash", ["bench", "--plot", "{dir}/figs/"], "figs/: names a directory (it ends with '/')"),
    ("cal-plot-trailing-slash", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}", "--plot",
                                 "{dir}/figs/"], "figs/: names a directory"),  # said 'figs: ... ending in .png',
    ("bench-prompts-trailing-slash", ["bench", "--prompts", "{ok.jsonl}/"], "ok.jsonl/: names a directory"),
    ("bench-prompts-deep", ["bench", "--prompts", "{deep.jsonl}"], "deep.jsonl:1: malformed JSON: nested too deeply"),
    ("bench-prompts-duplicate-key", ["bench", "--prompts", "{dupkey.jsonl}"],
     "dupkey.jsonl:1: key 'prompt' given twice"),  # the last one was used without a word,
    ("sim-sps-deep", ["simulate", "--conf", "0.9", "--sps", "{deep.json}"], "deep.json: not readable as JSON"),
    ("bench-plot-in-shipped-tables", ["bench", "--plot", "{shiptables}/figure.png"],
     "the SPS tables shipped with minispark"),  # through a link to them: the figure was written there,
    ("bench-plot-empty", ["bench", "--plot", ""], "--plot '': empty"),  # said '--plot .: is a directory',
    ("bench-prompts-loop", ["bench", "--prompts", "{looplink}"], "looplink: is a symlink to"),
    ("sim-sps-seconds-subnormal", ["simulate", "--conf", "0.9", "--sps", "{subnormal.json}"],
     "field 'seconds': [0][0]: 1e-320 seconds per step is outside [1e-06, 1e+06]"),  # Θ was printed as inf,
    ("bench-threshold-without-its-mode", ["bench", "--modes", "target,lookup", "--threshold", "0.9"],
     "--modes target,lookup leaves it out"),
    ("cal-plot-in-shipped-drafter", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}", "--plot",
                                     "{shiplink}/figure.png"], "the drafters shipped with minispark"),
    ("sim-draws-without-appendix-a", ["simulate", "--conf", "0.9", "--sps-inline", "1,0.5", "--draws", "5"],
     "--draws: only --appendix-a draws at random"),  # ignored without a word,
    ("sim-seed-without-appendix-a", ["simulate", "--conf", "0.9", "--sps-inline", "1,0.5", "--seed", "5"],
     "--seed: only --appendix-a draws at random"),
    ("bench-prompts-max-pixels-zero", ["bench", "--prompts", "{maxpix0.jsonl}"],
     "maxpix0.jsonl:1: messages[0].content[0]: 'max_pixels' must be a whole number in [3136, 2147483647], got 0"),
    ("bench-prompts-max-pixels-text", ["bench", "--prompts", "{pixtext.jsonl}"], "'max_pixels' must be a whole number"),
    ("bench-prompts-resized-zero", ["bench", "--prompts", "{resized0.jsonl}"],
     "'resized_height' must be a whole number in [28"),  # a ZeroDivisionError traceback,
    ("bench-prompts-resized-alone", ["bench", "--prompts", "{resizedalone.jsonl}"],
     "'resized_height' and 'resized_width' go together"),  # one alone was ignored without a word,
    ("sim-sps-dtype-free-text", ["simulate", "--conf", "0.9", "--sps", "{dtypetable.json}"],
     "field 'dtype': expected one of float32, bfloat16, float16"),  # accepted, then matched no run,
    ("cal-calibration-json-dir", ["calibrate", "--drafter", "{caldir}", "--prompts", "{ok.jsonl}"],
     "its calibration.json is a directory, where calibrate writes the fit"),  # a traceback after the rollouts,
    ("bench-drafter-calibration-damaged", ["bench", "--drafter", "hybrid:{badcal}", "--target", "{missing}"],
     "badcal/calibration.json: not readable as JSON"),
    ("sim-conf-past-inline", ["simulate", "--sps-inline", "1,0.5", "--conf", "0.9,0.8,0.7"],
     "up to 4 tokens, but --sps-inline gives them for 1..2"),  # said "the SPS table", where none was given,
    # a flag no --modes mode reads was ignored, yet printed (γ=999)
    ("bench-gamma-without-a-drafting-mode", ["bench", "--modes", "target,hf", "--gamma", "999"],
     "--gamma 999: --modes target,hf drafts nothing"),
    ("bench-sps-without-a-schedule-mode", ["bench", "--modes", "target,lookup", "--sps", "{tokens5.json}"],
     "only the schedule modes use an SPS table, and --modes target,lookup leaves them out"),
    ("bench-strict-without-a-schedule-mode", ["bench", "--modes", "target", "--strict"],
     "--strict: only the schedule modes use an SPS table, and --modes target leaves them out"),
    ("bench-drafter-modes-without-a-drafter", ["bench", "--drafter", "none", "--modes", "target,fixed"],
     "--modes target,fixed: fixed needs a trained drafter, and --drafter none gives none"),  # skipped once loaded,
    ("bench-prompts-path-too-long", ["bench", "--prompts", "/a" * 2100], "a path of 4200 bytes"),
    ("bench-prompts-json-array", ["bench", "--prompts", "{array.jsonl}"],  # "malformed JSON: Expecting value"
     "array.jsonl:1: a JSON array, not JSON Lines"),
    ("bench-prompts-a-pipe", ["bench", "--prompts", "{fifo}"], "fifo: not a file but a pipe or a device (as <(...) "
     "gives); minispark reads it more than once: save it to a file first"),  # "not a file",
    ("bench-prompts-image-name-too-long", ["bench", "--prompts", "{longimage.jsonl}"],
     "...: a name of 304 bytes in the path; a file system allows at most 255"),  # OSError ENAMETOOLONG traceback,
]


def test_the_cases_have_unique_ids() -> None:
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("argv, needle", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line(files: dict[str, str], argv: list[str], needle: str) -> None:
    args = [re.sub(r"\{([\w.-]+)\}", lambda m: files[m.group(1)], arg) for arg in argv]
    error = one_line_error(CliRunner().invoke(app, args))
    assert needle in error, error


def test_calibrate_never_rewrites_a_shipped_drafter() -> None:
    from minispark.data.prompts import HELDOUT_FILE
    from minispark.serving.generate import SHIPPED_DRAFTERS

    shipped = next(p for p in sorted(SHIPPED_DRAFTERS.iterdir()) if p.is_dir())
    before = {p: p.read_bytes() for p in shipped.iterdir()}
    result = CliRunner().invoke(app, ["calibrate", "--drafter", str(shipped), "--prompts", str(HELDOUT_FILE)])
    assert result.exit_code == 2 and "never rewritten" in result.output
    assert {p: p.read_bytes() for p in shipped.iterdir()} == before


@pytest.mark.parametrize("command", ["bench", "calibrate"])
def test_a_plot_on_a_full_disk_keeps_the_results_on_the_screen(tiny_trained_drafter, tmp_path, monkeypatch,
                                                               command: str) -> None:
    """The --plot PNG was written before the table: on a full disk the run's figures were never printed (and
    calibrate's error hid that calibration.json was already stored). Now the figures come first, then the error."""
    target, trained = tiny_trained_drafter
    drafter = shutil.copytree(trained, tmp_path / "drafter")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Hi there"}) + "\n")
    argv = {"bench": ["bench", "--prompts", str(prompts), "--num-prompts", "1", "--max-new-tokens", "3", "--modes",
                      "target"],
            "calibrate": ["calibrate", "--drafter", str(drafter), "--prompts", str(prompts), "--num-prompts", "1",
                          "--max-new-tokens", "4", "--min-rounds", "1"]}[command]
    full_disk(monkeypatch, "fig.png")
    result = CliRunner().invoke(app, argv + ["--target", str(target), "--plot", str(tmp_path / "fig.png")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {tmp_path / 'fig.png'}: no space left")
    assert ("STS temperatures" if command == "calibrate" else "target") in result.stdout
    assert not (tmp_path / "fig.png").exists()


def test_binary_tables_and_calibrations_are_one_line(tmp_path) -> None:
    """An image (not UTF-8) given where JSON is read: the loader's own error, not a UnicodeDecodeError."""
    from minispark.model.calibration import Calibration, CalibrationError
    from minispark.serving.sps import SPSTable, SPSTableError

    binary = make_test_image(tmp_path / "x.png")
    with pytest.raises(SPSTableError, match="not UTF-8 text"):
        SPSTable.load(binary)
    with pytest.raises(CalibrationError, match="not UTF-8 text"):
        Calibration.load(binary)


def test_bench_and_calibrate_say_which_prompts_they_leave_out(tiny_dir, tmp_path) -> None:
    """Image prompts on a text-only target, and a --num-prompts past what there is, each get one notice."""
    import warnings

    from minispark.data.prompts import load_prompt_inputs
    from minispark.measuring.bench import BENCH_PROMPTS, builtin_prompts, file_prompts
    from minispark.target.loading import load_target

    make_test_image(tmp_path / "cat.png")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps(line) + "\n" for line in (
        {"prompt": "Hi there"}, {"prompt": "What is this?", "images": ["cat.png"]}, {"prompt": "Tell me a story."})))
    result = CliRunner().invoke(app, ["bench", "--target", str(tiny_dir("llama")), "--drafter", "none", "--modes",
                                      "target", "--prompts", str(prompts), "--num-prompts", "5", "--max-new-tokens",
                                      "2"])
    assert result.exit_code == 0, result.output
    notices = [line for line in result.stderr.splitlines() if line.startswith("notice: ")]
    assert f"notice: --prompts {prompts}: skipping 1 image prompt: target " in result.stderr, notices
    assert "is text-only" in result.stderr
    assert f"notice: --num-prompts 5: {prompts} has only 2 usable prompts; using the 2 it has" in result.stderr

    target = load_target(str(tiny_dir("llama")))
    with pytest.warns(UserWarning, match=r"skipping 1 image prompt: target .* is text-only"):
        assert len(load_prompt_inputs(target, prompts, 16)) == 2  # calibrate's prompts
    with pytest.warns(UserWarning, match=rf"--num-prompts 9: the built-in set has only {len(BENCH_PROMPTS)} usable"):
        assert len(builtin_prompts(target, 9)) == len(BENCH_PROMPTS)
    text_only = tmp_path / "text.jsonl"
    text_only.write_text(json.dumps({"prompt": "Hi there"}) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing left out, nothing asked past: silent
        file_prompts(target, text_only)
        builtin_prompts(target, 2)


def test_bench_caps_each_answer_to_the_context(tiny_dir, monkeypatch) -> None:
    """A model that never emits EOS (a random one) decoded past its context: a 2**31 --max-new-tokens ran for
    hours, each step slower than the last. Capped as generate caps it, with one notice."""
    from minispark.measuring.bench import BenchConfig, build_modes, builtin_prompts, context_budgets, run_bench
    from minispark.target.loading import load_target

    target = load_target(str(tiny_dir("llama")))
    prompts = builtin_prompts(target, 1)
    room = 6
    monkeypatch.setattr(target.text_config, "max_position_embeddings", prompts[0].inputs.length + room)
    config = BenchConfig(modes=["target"], max_new_tokens=2**31 - 1, warmup=False)
    modes, _ = build_modes(target, config)
    with pytest.warns(UserWarning, match=rf"--max-new-tokens 2147483647: .* leaves room for {room} tokens"):
        report = run_bench(target, modes, prompts, config, None)
    assert report["prompts"][0]["modes"]["target"]["tokens"] == [room]
    assert context_budgets(target, [8, 9], 4) == [4, 4]  # nothing to cap


def test_a_plot_replaces_only_a_figure_minispark_wrote(tmp_path) -> None:
    """bench/calibrate/profile --plot replaced whatever file had the name (a user's text or photo): data loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from minispark.cli.measure import figure_file
    from minispark.measuring.figures import save_figure
    from minispark.core.errors import MinisparkError
    from tests.helpers import snapshot

    ours = save_figure(plt.figure(), tmp_path / "ours.png")
    assert figure_file(ours) == ours  # a rerun replaces its own figure
    assert figure_file(tmp_path / "new.png") == tmp_path / "new.png"
    photo = make_test_image(tmp_path / "photo.png")
    (tmp_path / "notes.png").write_text("my notes\n")
    before = snapshot(tmp_path)
    for path in (photo, tmp_path / "notes.png"):
        with pytest.raises(MinisparkError, match="exists and is not a figure minispark wrote"):
            figure_file(path)
        error = one_line_error(CliRunner().invoke(app, ["bench", "--plot", str(path)]))
        assert f"--plot {path}: exists and is not a figure minispark wrote" in error
    assert snapshot(tmp_path) == before


def test_profile_refuses_a_step_past_the_context_before_loading(tiny_dir, tmp_path, monkeypatch) -> None:
    """A --max-tokens past the target's context was refused only once the target had loaded (seconds here,
    minutes for a 3B target), its error line under an empty `profile 0/?` progress bar."""
    import minispark.measuring.profiler as profiler

    monkeypatch.setattr(profiler, "run_profile", lambda *a, **k: pytest.fail("the target was loaded"))
    target = tiny_dir("llama")
    limit = json.loads((target / "config.json").read_text())["max_position_embeddings"]
    result = CliRunner().invoke(app, ["profile", "--target", str(target), "--contexts", "16",
                                      "--max-tokens", str(limit + 1), "--out", str(tmp_path / "t")])
    error = one_line_error(result)
    assert f"--max-tokens {limit + 1}: more than" in error and f"{limit} positions" in error
    assert [line for line in result.stderr.splitlines() if line.strip()] == [error]


def test_calibrate_refuses_a_drafter_it_may_not_write_before_loading(tiny_trained_drafter, files, tmp_path,
                                                                      monkeypatch) -> None:
    """calibration.json goes into the drafter directory: a read-only one failed after the rollouts, naming
    the temporary file."""
    ro = tmp_path / "ro"
    shutil.copytree(tiny_trained_drafter[1], ro)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (Path(path) != ro or not mode & os.W_OK)
                        and real(path, mode, **kw))  # a read-only directory, even for root
    monkeypatch.setattr("minispark.cli.measure._load", lambda *a, **k: pytest.fail("loaded the target"))
    result = CliRunner().invoke(app, ["calibrate", "--drafter", str(ro), "--prompts", files["ok.jsonl"]])
    assert f"--drafter {ro}: is not writable by this user" in one_line_error(result)
    assert sorted(p.name for p in ro.iterdir()) == sorted(p.name for p in tiny_trained_drafter[1].iterdir())


def test_a_calibration_with_a_huge_number_is_one_line(tmp_path) -> None:
    """An integer of more than 4300 digits was a ValueError traceback."""
    from minispark.model.calibration import Calibration, CalibrationError

    path = tmp_path / "calibration.json"
    path.write_text('{"rounds": 1' + "0" * 5000 + "}")
    with pytest.raises(CalibrationError, match="a number too long to read"):
        Calibration.load(path)


@pytest.mark.parametrize("data, says", [
    ({"temperatures": []}, "field 'temperatures': expected a list of positive numbers, got []"),  # taken as none
    ({"temperatures": [1.0], "target_identity": 5}, "field 'target_identity': expected a string, got 5"),  # traceback
    ({"temperatures": [1.0], "sampling": {"temperature": "hot"}}, "field 'sampling': expected an object of numbers"),
    ({"temperatures": [1.0], "sampling": []}, "field 'sampling'"),  # taken as "fitted at any settings"
])
def test_what_loading_reads_of_a_calibration_is_checked(tmp_path, data, says) -> None:
    """generate formatted a text temperature with :g and took a number as the target identity: tracebacks."""
    from minispark.model.calibration import Calibration, CalibrationError

    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"version": 1, **data}))
    with pytest.raises(CalibrationError, match=re.escape(says)):
        Calibration.load(path)


def test_a_calibration_json_directory_is_not_ignored(files, tmp_path) -> None:
    """generate ignored it without a word; an atomic write over it named its temporary file in a traceback."""
    from minispark.core.atomic import write_json_atomic
    from minispark.core.errors import MinisparkError
    from minispark.model.calibration import CalibrationError
    from minispark.model.checkpoint import load_calibration

    with pytest.raises(CalibrationError, match="calibration.json: not readable"):
        load_calibration(files["caldir"])
    with pytest.raises(MinisparkError, match="calibration.json: is a directory, where minispark writes this file"):
        write_json_atomic(Path(files["caldir"]) / "calibration.json", {})


def test_bench_notices_describe_the_modes_it_runs(tiny_trained_drafter, monkeypatch) -> None:
    """Without an SPS table bench said "threshold mode (0.5)", what a plain generate would choose, while its
    schedule rows ran on the generic cost model."""
    from minispark.serving import builder
    from minispark.serving.sps import SPSTableError
    from minispark.target.loading import load_target

    def no_table(*args, **kwargs):
        raise SPSTableError("none")

    monkeypatch.setattr(builder, "find_table", no_table)
    target_dir, drafter = tiny_trained_drafter
    target = load_target(str(target_dir))
    hints = builder.build_serving(target, str(drafter), side_by_side=("target", "schedule")).hints
    assert any("the schedule modes use the generic cost model" in hint for hint in hints), hints
    assert not any("threshold mode" in hint for hint in hints)
    assert any("no speedup estimate" in hint for hint in builder.build_serving(
        target, str(drafter), side_by_side=("fixed", "threshold")).hints)

    # '--threshold -0.0' is the threshold 0: the notice said "threshold mode (-0)"
    # (a drafter with confidences that drafts no trees: its default without a table is the threshold mode)
    hints = builder.build_serving(target, f"hybrid:{drafter}", threshold=-0.0).hints
    assert any("threshold mode (0)" in hint for hint in hints) and not any("(-0)" in hint for hint in hints), hints


def test_a_full_disk_at_profile_plot_says_the_table_was_written(tiny_dir, monkeypatch, tmp_path: Path) -> None:
    """`profile --plot` on a full disk: the error named the PNG only, as if the minutes of measuring were lost."""
    from minispark.core.atomic import NoSpaceError
    from minispark.measuring import profiler

    def full(table, path):
        raise NoSpaceError(path)

    monkeypatch.setattr(profiler, "plot_sps", full)
    result = CliRunner().invoke(app, ["profile", "--target", str(tiny_dir("llama")), "--contexts", "8", "--rounds",
                                      "1", "--warmup", "0", "--cooldown", "0", "--allow-busy", "--out",
                                      str(tmp_path / "tables"),
                                      "--plot", str(tmp_path / "sps.png")])
    table = next((tmp_path / "tables").glob("*.json"))
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 2 and len(error) == 1, (result.output, result.exception)
    assert error[0].startswith(f"error: the SPS table was written to {table}; only the plot failed: "
                               f"{tmp_path / 'sps.png'}: no space left on the device")
    # the figures are on the screen too (the console wraps a long path where it likes)
    assert f"wrote {table}" in result.stdout.replace("\n", "")
