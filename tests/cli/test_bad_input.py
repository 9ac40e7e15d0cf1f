"""Every bad input gets exit status 2 and one ``error:`` line naming the flag or file, no traceback.

Most cases fail before any model loads (the CLI validates flags first), so the suite runs in
seconds; the few that need a model use a tiny random one.

    .venv/bin/python -m pytest -q tests/cli/test_bad_input.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from minispark.cli import app
from tests.tiny_models import make_test_image
from tests.helpers import REPO, bomb_png

LONG_PROMPT = "word " * 5000  # more tokens than the tiny models' 4096 positions


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, tiny_dir) -> dict[str, str]:
    """Bad and odd inputs, by name, as strings for the command lines."""
    d = tmp_path_factory.mktemp("bad")
    (d / "afile").write_text("x\n")
    for name in ("empty.json", "empty.jsonl", "empty.png"):
        (d / name).write_bytes(b"")
    (d / "emptydir").mkdir()
    (d / "noweights").mkdir()
    (d / "noweights" / "config.json").write_text('{"block_size": 4}')
    (d / "badconfig").mkdir()
    (d / "badconfig" / "config.json").write_text("{not json")
    (d / "badconfig" / "model.safetensors").write_bytes(b"x")
    (d / "fakedrafter").mkdir()
    (d / "fakedrafter" / "config.json").write_text("{}")
    save_file({"x": torch.zeros(1)}, str(d / "fakedrafter" / "model.safetensors"))  # opens; not a drafter's
    (d / "cutdrafter").mkdir()  # an interrupted copy: the weights' second half is missing
    shutil.copy(d / "fakedrafter" / "config.json", d / "cutdrafter" / "config.json")
    whole = (tiny_dir("llama") / "model.safetensors").read_bytes()
    (d / "cutdrafter" / "model.safetensors").write_bytes(whole[: len(whole) // 2])
    (d / "cuttarget").mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_dir("llama") / name, d / "cuttarget" / name)
    (d / "cuttarget" / "model.safetensors").write_bytes(whole[: len(whole) // 2])
    (d / "configonly").mkdir()
    shutil.copy(tiny_dir("llama") / "config.json", d / "configonly" / "config.json")
    shutil.copytree(tiny_dir("llama"), d / "holedtarget")  # one weight fewer than its config.json needs
    weights = load_file(str(d / "holedtarget" / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if k != "model.layers.0.mlp.down_proj.weight"},
              str(d / "holedtarget" / "model.safetensors"), metadata={"format": "pt"})
    for name, edit in (("strtarget", {"num_hidden_layers": "4"}), ("negtarget", {"hidden_size": -64}),
                       ("vocab0target", {"vocab_size": 0})):
        shutil.copytree(tiny_dir("llama"), d / name, copy_function=os.link)  # a hand-edited config.json
        config = json.loads((d / name / "config.json").read_text())
        (d / name / "config.json").unlink()
        (d / name / "config.json").write_text(json.dumps({**config, **edit}))
    shutil.copytree(tiny_dir("llama"), d / "badtemplate", copy_function=os.link)
    (d / "badtemplate" / "chat_template.jinja").unlink()  # a hard link: the tiny target's own stays whole
    (d / "badtemplate" / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }")
    (d / "longimage.jsonl").write_text(json.dumps({"prompt": "a", "images": ["y" * 300 + ".png"]}) + "\n")
    (d / "userdir").mkdir()
    (d / "userdir" / "notes.txt").write_text("my notes\n")
    (d / "corrupt.png").write_bytes(b"this is not an image")
    full = make_test_image(d / "full.png").read_bytes()
    (d / "truncated.png").write_bytes(full[: len(full) // 2])
    bomb_png(d / "bomb.png")
    (d / "bomb.jsonl").write_text(json.dumps({"prompt": "Describe it.", "images": ["bomb.png"]}) + "\n")
    (d / "corrupt.json").write_text("{")
    (d / "ok.jsonl").write_text(json.dumps({"prompt": "Hi there"}) + "\n")
    (d / "answers.json").write_text(json.dumps({"complete": True, "format": "answers", "num_samples": 4,
                                                "shards": []}))  # an answer set's manifest
    (d / "array.jsonl").write_text(json.dumps([{"prompt": "Hi"}, {"prompt": "there"}], indent=1) + "\n")
    (d / "corrupt.jsonl").write_text("{bad json\n")
    (d / "notutf8.jsonl").write_bytes(b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n')  # Latin-1, line 2
    from minispark.core.defaults import SHIPPED_DRAFTERS, SHIPPED_TABLES

    (d / "shiplink").symlink_to(next(p for p in sorted(SHIPPED_DRAFTERS.iterdir()) if p.is_dir()))
    (d / "shiptables").symlink_to(SHIPPED_TABLES)
    (d / "binonly").mkdir()
    shutil.copy(tiny_dir("llama") / "config.json", d / "binonly" / "config.json")
    (d / "binonly" / "pytorch_model.bin").write_bytes(b"pickle")
    (d / "list.json").write_text("[1, 2]")
    (d / "notutf8.toml").write_bytes(b"\xff\xfe[train]\n")
    (d / "toplevel.toml").write_text("steps = 3\n")  # a key above every [section]
    (d / "danglinglink").symlink_to(d / "nowhere")
    os.mkfifo(d / "fifo")  # what `--prompts <(grep ...)` names: a pipe
    (d / "looplink").symlink_to(d / "looplink")
    (d / "notokenizer").mkdir()  # config and weights, no tokenizer files: an incomplete copy
    for name in ("config.json", "model.safetensors"):
        os.link(tiny_dir("llama") / name, d / "notokenizer" / name)
    shutil.copytree(d / "notokenizer", d / "badtokenizer", copy_function=os.link)
    (d / "badtokenizer" / "tokenizer.json").write_text("{")
    shutil.copy(tiny_dir("llama") / "tokenizer_config.json", d / "badtokenizer" / "tokenizer_config.json")
    (d / "surrogate.jsonl").write_text('{"prompt": "caf\\udce9"}\n')  # a JSON escape of half a character
    (d / "dirweights").mkdir()  # a broken copy: its weights file is a directory
    shutil.copy(d / "fakedrafter" / "config.json", d / "dirweights" / "config.json")
    (d / "dirweights" / "model.safetensors").mkdir()
    shutil.copytree(d / "fakedrafter", d / "listrecord")
    (d / "listrecord" / "target.json").write_text("[]")  # a JSON list where the target record is an object
    for name, record in (("badrecord", {"source": 5, "identity": None}),  # hand-edited target records
                         ("fp64record", {"source": str(tiny_dir("llama")), "identity": "x@y", "dtype": "fp64"})):
        shutil.copytree(d / "fakedrafter", d / name)
        (d / name / "target.json").write_text(json.dumps(record))
    table = json.loads(next(SHIPPED_TABLES.glob("*.json")).read_text())
    (d / "table.json").write_text(json.dumps(table))  # a whole table (of another setup: a warning, not an error)
    table["tokens"] = [n + 4 for n in table["tokens"]]  # 5..20: no one-token step
    (d / "tokens5.json").write_text(json.dumps(table))
    table["tokens"] = [n - 4 for n in table["tokens"]]
    table["seconds"] = table["seconds_min"] = [[1e-320] * len(table["tokens"])] * len(table["contexts"])
    (d / "subnormal.json").write_text(json.dumps(table))  # 1 / 1e-320 steps per second: Θ was inf
    (d / "hugeint.jsonl").write_text('{"prompt": "a", "category": 1' + "0" * 5000 + "}\n")
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)  # past Python's recursion limit
    (d / "deep.jsonl").write_text('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (d / "dupkey.jsonl").write_text('{"prompt": "a", "prompt": "b"}\n')
    (d / "cutline.jsonl").write_text('{"prompt": "a"}\n{"prompt": "b')  # an interrupted write
    shutil.copytree(d / "fakedrafter", d / "deepconfig")
    shutil.copy(d / "deep.json", d / "deepconfig" / "config.json")
    (d / "deepcache").mkdir()
    shutil.copy(d / "deep.json", d / "deepcache" / "manifest.json")
    shutil.copytree(d / "fakedrafter", d / "movedtarget")
    (d / "movedtarget" / "target.json").write_text(json.dumps({"source": str(d / "moved-away"), "identity": "x@y"}))
    from PIL import Image

    Image.new("RGB", (60_000, 2)).save(d / "strip.png")  # Qwen-VL's resize raised a ValueError traceback
    huge = "1" + "0" * 5000  # past the 4300 digits Python converts: its error advises raising its own limit
    (d / "deep.toml").write_text("[train]\nsteps = " + "[" * 5000 + "]" * 5000 + "\n")
    (d / "bigint.toml").write_text(f"[train]\nsteps = {huge}\n")
    shutil.copytree(d / "fakedrafter", d / "bigconfig")
    (d / "bigconfig" / "config.json").write_text(f'{{"block_size": {huge}}}')
    shutil.copytree(d / "fakedrafter", d / "bigrecord")
    (d / "bigrecord" / "target.json").write_text(f'{{"source": "x", "identity": "x@y", "n": {huge}}}')
    for name, sizes in (("maxpix0", {"max_pixels": 0}), ("minabovemax", {"min_pixels": 10**6, "max_pixels": 10**4}),
                        ("resized0", {"resized_height": 0, "resized_width": 0}), ("resizedalone", {"resized_height": 28}),
                        ("pixtext", {"max_pixels": "big"})):  # tracebacks once a vision target encoded them
        part = {"type": "image", "image": "full.png"} | sizes
        (d / f"{name}.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": [part]}]}) + "\n")
    (d / "bigcache").mkdir()
    (d / "bigcache" / "manifest.json").write_text(f'{{"format": "minispark-cache", "num_samples": {huge}}}')
    table["dtype"] = "float"  # free text: compared as written, it fit no run
    (d / "dtypetable.json").write_text(json.dumps(table))
    shutil.copytree(d / "fakedrafter", d / "caldir")
    (d / "caldir" / "calibration.json").mkdir()  # where calibrate writes its fit
    shutil.copytree(d / "fakedrafter", d / "badcal")
    (d / "badcal" / "calibration.json").write_text("{")  # refused only once the target had loaded
    names = {p.name: str(p) for p in d.iterdir()}
    from minispark.data.prompts import HELDOUT_FILE

    names |= {"dir": str(d), "missing": str(d / "missing"), "tiny": str(tiny_dir("llama")), "heldout": str(HELDOUT_FILE),
              "out": str(d / "new-out"),
              "answerset": str(REPO / "data/answers/smollm2-135m-instruct-heldout")}
    return names


# (id, argv with {placeholders} from ``files``, what the error line must name)
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
     'ok.jsonl is of it (no line has a "category" key)'),  # "no prompt of category 'code' usable with target ..."
    ("bench-prompts-missing", ["bench", "--prompts", "{missing}"], "--prompts"),
    ("bench-prompts-empty", ["bench", "--prompts", "{empty.jsonl}"], "--prompts"),
    ("bench-threshold-2", ["bench", "--threshold", "2"], "--threshold"),
    ("bench-plot-dir", ["bench", "--plot", "{dir}"], "--plot"),
    ("bench-drafter-no-weights", ["bench", "--drafter", "{noweights}"], "--drafter"),
    # demo
    ("demo-num-prompts-zero", ["demo", "--num-prompts", "0"], "--num-prompts"),
    ("demo-negative-max-new", ["demo", "--max-new-tokens", "-1"], "--max-new-tokens"),
    ("demo-out-file", ["demo", "--train", "--out", "{afile}"], "--out"),
    ("demo-train-with-drafter", ["demo", "--train", "--drafter", "lookup"], "--drafter"),
    ("demo-drafter-empty-dir", ["demo", "--drafter", "{emptydir}"], "--drafter"),
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
    ("train-lr-nan", ["train", "--recipe", "tiny", "lr=nan"], "override 'lr=nan'"),  # not the recipe file
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
    # profile
    ("profile-contexts-text", ["profile", "--contexts", "abc"], "--contexts"),
    ("profile-contexts-nan", ["profile", "--contexts", "nan"], "--contexts"),
    ("profile-contexts-negative", ["profile", "--contexts", "-5"], "--contexts"),
    ("profile-contexts-fraction", ["profile", "--contexts", "1.5"], "--contexts"),
    ("profile-contexts-empty", ["profile", "--contexts", ""], "--contexts"),
    ("profile-contexts-empty-item", ["profile", "--contexts", "256,,1024"], "--contexts: empty item 2"),  # not dropped
    ("profile-batch-requests-trailing-comma", ["profile", "--batch-requests", "2,4,"], "--batch-requests: empty item 3"),
    ("bench-modes-empty-item", ["bench", "--modes", "target,,fixed"], "--modes: empty item 2"),
    ("bench-modes-twice", ["bench", "--modes", "target,target"], "--modes: target is given twice"),
    ("profile-contexts-twice", ["profile", "--contexts", "16,16"], "--contexts: 16 is given twice"),
    ("profile-batch-requests-twice", ["profile", "--batch-requests", "4,2,4"], "--batch-requests: 4 is given twice"),
    ("profile-note-control-character", ["profile", "--note", "a\nb"], "--note: holds control character"),
    ("train-lr-subnormal", ["train", "--recipe", "tiny", "lr=1e-320"], "lr: at least 1e-10"),
    ("train-lr-huge", ["train", "--recipe", "tiny", "lr=1e308", "--dry-run"], "lr: at most 1"),
    ("train-dry-run-init-from-missing", ["train", "--recipe", "tiny", "--dry-run", "init_from={missing}"],
     "missing: no such directory"),
    ("train-feature-layers-open-bracket", ["train", "--recipe", "tiny", "feature_layers=[1,2"], "feature_layers"),
    ("train-feature-layers-empty-item", ["train", "--recipe", "tiny", "feature_layers=1,,2"], "feature_layers"),
    ("serve-max-concurrent-huge", ["serve", "--max-concurrent", "100000"], "--max-concurrent must be at most 256"),
    ("cache-mix-count-not-a-number", ["cache-mix", "{emptydir}:abc", "{userdir}", "--out", "{out}"],
     "expected a whole number of samples, got 'abc'"),
    # Other scripts' digits: int() reads '١٦' as 16, typer's integer flags refuse them; every number the same way
    ("profile-contexts-arabic-digits", ["profile", "--contexts", "١٦"], "--contexts: expected comma-separated whole"),
    ("train-steps-arabic-digits", ["train", "--recipe", "tiny", "steps=٣"], "steps must be"),
    ("train-feature-layers-arabic-digits", ["train", "--recipe", "tiny", "feature_layers=١,٢"], "feature_layers"),
    ("cache-mix-count-arabic-digits", ["cache-mix", "{emptydir}:٣", "{userdir}", "--out", "{out}"],
     "expected a whole number of samples, got '٣'"),
    # Python's digit grouping: int() reads '16_32' as 1632, a typo for '16,32'
    ("profile-contexts-digit-grouping", ["profile", "--contexts", "16_32"], "--contexts: expected comma-separated whole"),
    ("sim-conf-digit-grouping", ["simulate", "--conf", "0.9_0", "--sps-inline", "1,0.5"], "--conf: expected comma"),
    ("train-steps-digit-grouping", ["train", "--recipe", "tiny", "steps=1_000"], "steps must be"),
    ("cache-mix-count-digit-grouping", ["cache-mix", "{emptydir}:1_0", "{userdir}", "--out", "{out}"],
     "expected a whole number of samples, got '1_0'"),
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
    ("gen-empty-stop", ["generate", "--stop", ""], "--stop"),
    ("chat-empty-stop", ["chat", "--stop", "x", "--stop", ""], "--stop"),
    # answers / train --answers
    ("answers-zero-samples", ["answers", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out", "{out}",
                              "--num-samples", "0"], "--num-samples"),
    # a ~ the shell left as typed (no such user, or quoted) would make a directory named "~nosuchuser" here
    ("answers-out-unexpanded-home", ["answers", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out",
                                     "~nosuchuser-minispark/a"], "~nosuchuser-minispark was not expanded"),
    ("profile-plot-unexpanded-home", ["profile", "--plot", "~/sps.png"], "~ was not expanded"),
    ("answers-corrupt-prompts", ["answers", "--prompts", "{corrupt.jsonl}", "--out", "{out}"], "corrupt.jsonl"),
    ("answers-bad-top-p", ["answers", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out", "{out}",
                           "--top-p", "0"], "--top-p"),
    ("answers-heldout-as-train", ["answers", "--target", "{tiny}", "--prompts", "{heldout}", "--out", "{out}"],
     "held-out split"),
    ("train-answers-missing", ["train", "--recipe", "tiny", "--answers", "{missing}"], "--answers"),
    ("train-answers-and-cache", ["train", "--recipe", "tiny", "--answers", "{dir}", "--cache", "{dir}"], "--cache"),
    ("train-answers-not-a-set", ["train", "--recipe", "tiny", "--answers", "{dir}", "--out", "{out}"],
     "answers.json"),
    # import / export
    ("import-empty-dir", ["import", "{emptydir}", "--out", "{out}"], "SOURCE"),
    ("import-missing", ["import", "{missing}", "--out", "{out}"], "SOURCE"),
    ("import-window-negative", ["import", "{fakedrafter}", "--out", "{out}", "--window", "-1"], "--window"),
    ("import-out-user-dir", ["import", "{fakedrafter}", "--out", "{userdir}"], "--out"),
    ("export-empty-dir", ["export", "{emptydir}", "--out", "{out}"], "DRAFTER_DIR"),
    ("export-out-user-dir", ["export", "{fakedrafter}", "--out", "{userdir}"], "--out"),
    ("export-out-file", ["export", "{fakedrafter}", "--out", "{afile}"], "--out"),
    ("export-unknown-format", ["export", "{fakedrafter}", "--out", "{out}", "--format", "onnx"], "--format"),
    # a decompression bomb named inside a prompt file: refused (before the target loads) like --image
    ("cache-prompts-bomb", ["cache", "--prompts", "{bomb.jsonl}"], "bomb.jsonl:1: image 'bomb.png' is "),
    ("bench-prompts-bomb", ["bench", "--prompts", "{bomb.jsonl}"], "too many pixels"),
    ("answers-prompts-bomb", ["answers", "--prompts", "{bomb.jsonl}", "--out", "{out}"], "bomb.jsonl:1"),
    # interrupted copies: truncated safetensors, a target directory with only config.json
    ("gen-drafter-truncated", ["generate", "--drafter", "{cutdrafter}"], "cutdrafter/model.safetensors"),
    ("export-truncated", ["export", "{cutdrafter}", "--out", "{out}"], "unreadable safetensors"),
    ("import-truncated", ["import", "{cutdrafter}", "--out", "{out}"], "unreadable safetensors"),
    ("cal-drafter-truncated", ["calibrate", "--drafter", "{cutdrafter}", "--prompts", "{ok.jsonl}"],
     "cutdrafter/model.safetensors"),
    ("gen-target-truncated", ["generate", "--target", "{cuttarget}"], "cuttarget/model.safetensors"),
    ("bench-target-truncated", ["bench", "--target", "{cuttarget}"], "--target"),
    ("gen-target-config-only", ["generate", "--target", "{configonly}"], "no weights"),
    ("cache-target-config-only", ["cache", "--target", "{configonly}", "--out", "{out}"], "--target"),
    ("gen-target-weight-missing", ["generate", "--target", "{holedtarget}", "--drafter", "none"],
     "lack or mis-shape 'model.layers.0.mlp.down_proj.weight'"),
    # a device this machine lacks
    ("gen-device-mps", ["generate", "--device", "mps"], "--device mps"),
    ("profile-device-mps", ["profile", "--device", "mps"], "--device mps"),
    ("gen-device-cuda-7", ["generate", "--device", "cuda:7"], "--device cuda:7"),
    # numbers past what torch and numpy take, or past the target's context
    ("gen-seed-huge", ["generate", "--seed", "99999999999999999999999"], "--seed"),
    ("chat-seed-huge", ["chat", "--seed", "4294967296"], "--seed"),
    ("cache-window-huge", ["cache", "--window", "99999999999999999999999"], "--window"),
    ("cache-block-huge", ["cache", "--block", "99999999999999999999999"], "--block"),
    ("cache-max-new-huge", ["cache", "--max-new-tokens", "1000000000000"], "--max-new-tokens"),
    ("cache-max-new-beyond-context", ["cache", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out", "{out}",
                                      "--max-new-tokens", "5000"], "--max-new-tokens 5000"),
    ("answers-max-new-huge", ["answers", "--prompts", "{ok.jsonl}", "--out", "{out}", "--max-new-tokens",
                              "1000000000000"], "--max-new-tokens"),
    ("answers-max-new-beyond-context", ["answers", "--target", "{tiny}", "--prompts", "{ok.jsonl}", "--out", "{out}",
                                        "--max-new-tokens", "5000"], "--max-new-tokens 5000"),
    ("bench-repeats-huge", ["bench", "--repeats", "1000000000000"], "--repeats"),
    ("profile-rounds-huge", ["profile", "--rounds", "1000000000000"], "--rounds"),
    ("profile-max-tokens-beyond-context", ["profile", "--target", "{tiny}", "--contexts", "16", "--max-tokens",
                                           "5000", "--out", "{out}"], "--max-tokens 5000"),
    ("cal-max-new-huge", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                          "--max-new-tokens", "1000000000000"], "--max-new-tokens"),
    ("cal-seed-huge", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                       "--seed", "99999999999999999999999"], "--seed"),
    ("train-seed-huge", ["train", "--recipe", "tiny", "seed=99999999999999999999999"], "seed"),
    ("train-seed-negative", ["train", "--recipe", "tiny", "seed=-1"], "seed"),
    ("train-batch-huge", ["train", "--recipe", "tiny", "batch_anchors=99999999999999999999999"], "batch_anchors"),
    ("sim-draws-huge", ["simulate", "--appendix-a", "--draws", "99999999999999999999999"], "--draws"),
    # round 3 of the probe: found by a re-run
    ("gen-sps-not-utf8", ["generate", "--sps", "{full.png}"], "--sps"),  # an image given as the table
    ("sim-sps-not-utf8", ["simulate", "--conf", "0.9", "--sps", "{full.png}"], "not UTF-8 text"),
    ("serve-sps-not-utf8", ["serve", "--sps", "{full.png}"], "not UTF-8 text"),
    ("bench-sps-not-a-table", ["bench", "--modes", "target", "--sps", "{list.json}"], "--sps"),  # even unread
    ("cache-layers-duplicate", ["cache", "--layers", "1,1"], "distinct and increasing"),
    ("cache-layers-decreasing", ["cache", "--layers", "2,1"], "distinct and increasing"),
    ("cache-out-dangling-symlink", ["cache", "--out", "{danglinglink}"], "which does not exist (or loops)"),
    ("train-out-under-symlink-loop", ["train", "--recipe", "tiny", "--cache", "{emptydir}", "--out", "{looplink}/run"],
     "looplink is a symlink"),
    ("bench-plot-is-prompts", ["bench", "--prompts", "{ok.jsonl}", "--plot", "{ok.jsonl}"], "is the --prompts file"),
    ("cal-plot-in-drafter", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}", "--plot",
                             "{fakedrafter}/model.safetensors"], "inside the --drafter directory"),
    ("profile-plot-in-target", ["profile", "--target", "{tiny}", "--plot", "{tiny}/config.json"],
     "inside the --target directory"),
    ("train-recipe-not-utf8", ["train", "--recipe", "{notutf8.toml}"], "not UTF-8"),
    ("train-recipe-top-level-key", ["train", "--recipe", "{toplevel.toml}"], "put it under [train]"),
    ("train-recipe-dir", ["train", "--recipe", "{emptydir}"], "is a directory"),
    ("cache-mix-same-twice", ["cache-mix", "{emptydir}", "{emptydir}/", "--out", "{out}"], "given twice"),
    ("gen-target-no-tokenizer", ["generate", "--target", "{notokenizer}", "--drafter", "none"],
     "cannot load its tokenizer"),
    ("gen-target-bad-tokenizer", ["generate", "--target", "{badtokenizer}", "--drafter", "none"],
     "cannot load its tokenizer"),
    ("gen-drafter-config-lacks-keys", ["generate", "--target", "{tiny}", "--drafter", "{fakedrafter}"],
     "lacks the keys"),
    ("serve-port-huge", ["serve", "--port", "99999"], "--port"),
    ("serve-host-not-here", ["serve", "--host", "192.0.2.1"], "cannot listen there"),  # TEST-NET: no such interface
    ("serve-api-key-empty", ["serve", "--api-key", ""], "--api-key"),
    # round 4
    ("cache-out-foreign", ["cache", "--out", "{userdir}"], "holds notes.txt, which minispark did not write"),
    ("answers-out-foreign", ["answers", "--out", "{userdir}"], "holds notes.txt, which minispark did not write"),
    ("demo-train-out-foreign", ["demo", "--train", "--out", "{userdir}"], "holds notes.txt, which minispark did not"),
    ("cache-mix-out-foreign", ["cache-mix", "{emptydir}", "--out", "{userdir}"], "holds notes.txt, which minispark"),
    ("chat-empty-system", ["chat", "--system", ""], "--system: empty"),
    ("chat-blank-system", ["chat", "--system", "  "], "--system: empty"),
    ("gen-temperature-huge", ["generate", "--temperature", "1e308"], "--temperature must be a finite number in [0, 100]"),
    ("chat-temperature-huge", ["chat", "--temperature", "1e308"], "--temperature"),
    ("bench-temperature-huge", ["bench", "--temperature", "101"], "--temperature"),
    ("cache-temperature-huge", ["cache", "--temperature", "1e308"], "--temperature"),
    ("answers-temperature-huge", ["answers", "--out", "{out}", "--temperature", "1e308"], "--temperature"),
    ("cal-temperature-huge", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}",
                              "--temperature", "1e308"], "--temperature"),
    # round 5: a re-run of the probe
    ("gen-drafter-empty-string", ["generate", "--drafter", ""], "--drafter '': empty"),  # not "--drafter ."
    ("gen-drafter-hybrid-empty", ["generate", "--drafter", "hybrid:"], "--drafter 'hybrid:': empty"),
    ("gen-temperature-subnormal", ["generate", "--temperature", "1e-320"], "a positive temperature must be at least"),
    ("bench-temperature-subnormal", ["bench", "--temperature", "1e-40"], "--temperature 1e-40"),
    ("gen-target-unknown-home", ["generate", "--target", "~no-such-user-here/model"], "names no user's home"),
    # bytes that are not UTF-8 on a command line reach Python as lone surrogates
    ("gen-prompt-not-utf8", ["generate", "--prompt", "caf\udce9"], "--prompt: not UTF-8 text (byte 0xe9)"),
    ("gen-stop-not-utf8", ["generate", "--stop", "caf\udce9"], "--stop: not UTF-8 text"),  # would never match
    ("chat-system-not-utf8", ["chat", "--system", "caf\udce9"], "--system: not UTF-8 text"),
    ("bench-prompts-lone-surrogate", ["bench", "--prompts", "{surrogate.jsonl}"], "surrogate.jsonl:1: holds '\\udce9'"),
    ("gen-drafter-weights-dir", ["generate", "--drafter", "{dirweights}"], "a directory, not a weights file"),
    ("gen-drafter-record-list", ["generate", "--drafter", "{listrecord}"], "listrecord/target.json: not a target record"),
    ("train-num-heads-zero", ["train", "--recipe", "tiny", "num_heads=0"], "override 'num_heads=0': num_heads: must be"),
    ("train-kv-heads-zero", ["train", "--recipe", "tiny", "num_kv_heads=0"], "override 'num_kv_heads=0'"),
    ("train-head-dim-zero", ["train", "--recipe", "tiny", "head_dim=0"], "override 'head_dim=0'"),
    ("train-heads-not-multiple", ["train", "--recipe", "tiny", "num_heads=3"], "3 query heads are not a multiple of 2"),
    ("train-intermediate-negative", ["train", "--recipe", "tiny", "intermediate_size=-5"], "intermediate_size"),
    ("train-num-layers-huge", ["train", "--recipe", "tiny", "--dry-run", "num_layers=2147483647"],
     "num_layers: at most 128"),  # built layer by layer (meta tensors, still 2**31 modules) before
    ("train-block-size-huge", ["train", "--recipe", "tiny", "--dry-run", "block_size=2147483647"],
     "block_size: at most 1024"),  # torch's numel overflowed before
    ("train-out-inside-cache", ["train", "--recipe", "tiny", "--cache", "{emptydir}", "--out", "{emptydir}/run"],
     "is inside the --cache directory"),
    ("cache-mix-out-inside-part", ["cache-mix", "{emptydir}", "{userdir}", "--out", "{emptydir}/mix"],
     "is inside the part 1 directory"),
    ("cache-mix-negative-count", ["cache-mix", "{emptydir}:-1", "{userdir}", "--out", "{out}"],
     "the sample count must be positive"),  # not "no such directory ...:-1"
    ("cache-block-above-max", ["cache", "--block", "2147483647"], "--block must be at most 1024"),
    ("cache-num-samples-above-max", ["cache", "--num-samples", "2147483647"], "--num-samples must be at most"),
    ("answers-num-samples-above-max", ["answers", "--out", "{out}", "--num-samples", "2147483647"],
     "--num-samples must be at most"),  # every sample's plan is held in memory: 2**31 of them hung
    ("cache-layers-negative", ["cache", "--layers", "-3,2"], "layer ids count from 0"),
    ("profile-drafter-not-a-drafter", ["profile", "--drafter", "{userdir}"], "not a drafter directory"),
    ("profile-drafter-no-record", ["profile", "--drafter", "{fakedrafter}"], "records no target"),  # not SmolLM2
    ("profile-out-is-target", ["profile", "--target", "{tiny}", "--out", "{tiny}"], "is the --target directory"),
    # a table written into a cache or an answer set: its resume then refused the directory, saying minispark had not
    # written the table
    ("answers-out-inside-target", ["answers", "--target", "{tiny}", "--out", "{tiny}/answers"],
     "is inside the --target directory"),
    ("cache-out-inside-target", ["cache", "--target", "{tiny}", "--out", "{tiny}/cache"], "is inside the --target directory"),
    ("profile-out-is-an-answer-set", ["profile", "--target", "{tiny}", "--out", "{answerset}"],
     "holds a minispark-answers manifest (answers.json)"),
    ("sim-conf-longer-than-table", ["simulate", "--conf", "0.9,0.8,0.7", "--sps-inline", "1,0.5"],
     "--conf: 3 draft positions need steps per second for up to 4 tokens"),  # not "lower --gamma"
    # round 6: a fourth probe
    ("sim-sps-tokens-not-from-one", ["simulate", "--conf", "0.9", "--sps", "{tokens5.json}"],
     "field 'tokens': must start at 1"),  # not "1 tokens is outside the profiled range ...; lower --gamma"
    ("gen-sps-tokens-not-from-one", ["generate", "--sps", "{tokens5.json}"], "field 'tokens': must start at 1"),
    ("sim-sps-inline-subnormal", ["simulate", "--conf", "0.9", "--sps-inline", "1e-320,1e-320"],
     "--sps-inline must be a finite number in [1e-06, 1e+06]"),  # not "<in memory>: field 'seconds'"
    ("sim-sps-inline-huge", ["simulate", "--conf", "0.9", "--sps-inline", "1e308"], "--sps-inline"),  # Θ was inf
    ("sim-appendix-a-with-conf", ["simulate", "--appendix-a", "--conf", "0.9"], "--conf cannot be used with it"),
    ("sim-appendix-a-with-sps", ["simulate", "--appendix-a", "--sps-inline", "1,0.5"], "--sps-inline cannot be used"),
    ("profile-batch-requests-one", ["profile", "--batch-requests", "1"], "--batch-requests must be >= 2, got 1"),
    ("profile-batch-requests-above-max", ["profile", "--batch-requests", "300"], "--batch-requests must be at most 64"),
    ("profile-batch-requests-fraction", ["profile", "--batch-requests", "2.5"], "expected comma-separated whole numbers"),
    ("profile-contexts-huge", ["profile", "--contexts", "99999999999"], "--contexts must be at most 2147483647"),
    ("profile-drift-bound-zero", ["profile", "--drift-bound", "0"], "--drift-bound must be a finite number > 0, got"),
    ("gen-drafter-none-with-gamma", ["generate", "--drafter", "none", "--gamma", "3"],
     "--drafter none drafts nothing, so --gamma would have no effect"),
    ("chat-drafter-none-with-mode", ["chat", "--drafter", "none", "--mode", "fixed", "--sps", "{afile}"],
     "so --mode, --sps would have no effect"),
    ("serve-drafter-none-with-gamma", ["serve", "--drafter", "none", "--gamma", "2"], "--drafter none drafts nothing"),
    ("gen-lookup-schedule-names-mode", ["generate", "--target", "{tiny}", "--drafter", "lookup", "--mode", "schedule"],
     "--mode schedule: this length policy needs per-position confidences"),
    ("gen-drafter-record-wrong-types", ["generate", "--drafter", "{badrecord}"],
     "badrecord/target.json: not a target record ('source' must be a non-empty string, got 5)"),  # a traceback
    ("gen-drafter-record-unknown-dtype", ["generate", "--drafter", "{fp64record}"],
     "'dtype' must be one of bf16, fp16, fp32, got 'fp64'"),  # was loaded without a word
    ("bench-plot-someones-file", ["bench", "--plot", "{afile}"], "exists and is not a figure minispark wrote"),
    ("cal-plot-someones-file", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}", "--plot",
                                "{full.png}"], "full.png: exists and is not a figure minispark wrote"),
    ("profile-plot-someones-file", ["profile", "--plot", "{afile}"], "exists and is not a figure minispark wrote"),
    # fifth probe: the awkward ones
    ("bench-plot-not-png", ["bench", "--plot", "{dir}/figure.txt"], "give a name ending in .png"),  # PNG bytes under .txt
    ("train-override-twice", ["train", "--recipe", "tiny", "lr=1e-3", "lr=2e-3"],
     "override 'lr=2e-3': lr is already set by 'lr=1e-3'"),  # the last one won without a word
    ("cache-mix-answer-set", ["cache-mix", "{answerset}", "{emptydir}", "--out", "{out}"],
     "holds a minispark-answers manifest (answers.json), not a minispark-cache"),  # said 'manifest.json: missing'
    ("gen-drafter-hybrid-missing", ["generate", "--drafter", "hybrid:/nonexistent-drafter"],
     "--drafter hybrid: /nonexistent-drafter: no such directory"),  # named only the directory
    # round 7: paths as typed, before typer's Path drops a trailing '/'
    ("bench-plot-trailing-slash", ["bench", "--plot", "{dir}/figs/"], "figs/: names a directory (it ends with '/')"),
    ("cal-plot-trailing-slash", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}", "--plot",
                                 "{dir}/figs/"], "figs/: names a directory"),  # said 'figs: ... ending in .png'
    ("bench-prompts-trailing-slash", ["bench", "--prompts", "{ok.jsonl}/"], "ok.jsonl/: names a directory"),
    ("cache-out-newline", ["cache", "--out", "a\nb"], "--out 'a\\nb': a path with a line break in it"),
    ("gen-image-tab", ["generate", "--image", "cat\t.png"], "--image 'cat\\t.png': a path with a tab in it"),
    ("gen-target-newline", ["generate", "--target", "{tiny}\n"], "--target"),
    ("gen-drafter-newline", ["generate", "--drafter", "lookup\n"], "--drafter 'lookup\\n': a path with a line"),
    ("cache-mix-part-newline", ["cache-mix", "{emptydir}\n", "--out", "{out}"], "PARTS"),
    ("export-out-newline", ["export", "{fakedrafter}", "--out", "x\ny"], "--out 'x\\ny'"),
    ("train-recipe-newline", ["train", "--recipe", "tiny\n"], "--recipe 'tiny\\n'"),
    ("train-recipe-trailing-slash", ["train", "--recipe", "{toplevel.toml}/"], "toplevel.toml/: names a directory"),
    # round 7: the fifth probe
    ("bench-prompts-deep", ["bench", "--prompts", "{deep.jsonl}"], "deep.jsonl:1: malformed JSON: nested too deeply"),
    ("bench-prompts-duplicate-key", ["bench", "--prompts", "{dupkey.jsonl}"],
     "dupkey.jsonl:1: key 'prompt' given twice"),  # the last one was used without a word
    ("cache-prompts-cut-line", ["cache", "--prompts", "{cutline.jsonl}"],
     "cutline.jsonl:2: malformed JSON: Unterminated string starting at column 12"),  # said "starting at at column"
    ("gen-drafter-deep-config", ["generate", "--drafter", "{deepconfig}"], "deepconfig/config.json: unreadable config"),
    ("sim-sps-deep", ["simulate", "--conf", "0.9", "--sps", "{deep.json}"], "deep.json: not readable as JSON"),
    ("train-cache-deep-manifest", ["train", "--recipe", "tiny", "--cache", "{deepcache}"],
     "deepcache/manifest.json: unreadable manifest"),
    ("gen-drafter-symlink-loop", ["generate", "--drafter", "{looplink}"], "which does not exist (or loops)"),
    ("gen-drafter-target-moved", ["generate", "--drafter", "{movedtarget}"],
     "moved-away, does not exist (moved or deleted?); give the target with --target"),  # blamed --target, not typed
    ("gen-image-strip", ["generate", "--image", "{strip.png}"], "60000x2 pixels: one side is more than 200 times"),
    ("bench-plot-in-shipped-tables", ["bench", "--plot", "{shiptables}/figure.png"],
     "the SPS tables shipped with minispark"),  # through a link to them: the figure was written there
    # an empty path is '.', the current directory: read, written into or blamed
    ("cache-out-empty", ["cache", "--out", ""], "--out '': empty; give a path"),  # wrote a cache into an empty cwd
    ("export-out-empty", ["export", "{fakedrafter}", "--out", ""], "--out '': empty"),
    ("train-cache-empty", ["train", "--recipe", "tiny", "--cache", ""], "--cache '': empty"),  # blamed --out
    ("cache-mix-part-empty", ["cache-mix", "", "{emptydir}", "--out", "{out}"], "PARTS '': empty"),
    ("bench-plot-empty", ["bench", "--plot", ""], "--plot '': empty"),  # said '--plot .: is a directory'
    # a symlink that leads nowhere is named as one, not as "not found"
    ("gen-sps-dangling", ["generate", "--sps", "{danglinglink}"], "danglinglink: is a symlink to"),
    ("bench-prompts-loop", ["bench", "--prompts", "{looplink}"], "looplink: is a symlink to"),
    ("gen-target-loop", ["generate", "--target", "{looplink}"], "looplink: is a symlink to"),
    ("train-cache-loop", ["train", "--recipe", "tiny", "--cache", "{looplink}"], "looplink: is a symlink to"),
    # round 8: the sixth probe
    ("answers-prompts-huge-number", ["answers", "--prompts", "{hugeint.jsonl}", "--out", "{out}"],
     "hugeint.jsonl:1: malformed JSON: a number too long to read"),  # a ValueError traceback
    ("sim-sps-seconds-subnormal", ["simulate", "--conf", "0.9", "--sps", "{subnormal.json}"],
     "field 'seconds': [0][0]: 1e-320 seconds per step is outside [1e-06, 1e+06]"),  # Θ was printed as inf
    ("train-all-loss-weights-zero", ["train", "--recipe", "tiny", "alpha_ce=0", "alpha_tv=0", "alpha_conf=0"],
     "all 0, so the loss is 0 and training would change nothing"),  # trained nothing without a word
    # --threshold shapes only the threshold mode: with another one it was ignored without a word
    ("gen-threshold-with-fixed-mode", ["generate", "--mode", "fixed", "--threshold", "0.9"],
     "--threshold 0.9: only the threshold mode uses it, and this run decodes in fixed mode"),
    ("gen-threshold-mode-chosen", ["generate", "--target", "{tiny}", "--drafter", "lookup", "--threshold", "0.9"],
     "this run decodes in fixed mode"),  # lookup has no confidences: fixed is chosen after loading
    ("chat-drafter-none-with-threshold", ["chat", "--drafter", "none", "--threshold", "0.9"],
     "so --threshold would have no effect"),
    ("bench-threshold-without-its-mode", ["bench", "--modes", "target,lookup", "--threshold", "0.9"],
     "--modes target,lookup leaves it out"),
    ("cal-plot-in-shipped-drafter", ["calibrate", "--drafter", "{fakedrafter}", "--prompts", "{ok.jsonl}", "--plot",
                                     "{shiplink}/figure.png"], "the drafters shipped with minispark"),
    # round 9: the seventh probe
    ("gen-drafter-none-with-draft-skip", ["generate", "--drafter", "none", "--draft-skip"],
     "--drafter none drafts nothing, so --draft-skip would have no effect"),  # ignored without a word
    ("chat-drafter-none-with-no-draft-skip", ["chat", "--drafter", "none", "--no-draft-skip"],
     "so --no-draft-skip would have no effect"),
    ("sim-draws-without-appendix-a", ["simulate", "--conf", "0.9", "--sps-inline", "1,0.5", "--draws", "5"],
     "--draws: only --appendix-a draws at random"),  # ignored without a word
    ("sim-seed-without-appendix-a", ["simulate", "--conf", "0.9", "--sps-inline", "1,0.5", "--seed", "5"],
     "--seed: only --appendix-a draws at random"),
    ("serve-api-key-newline", ["serve", "--api-key", "a\nb"], "holds '\\n', which no HTTP client can send"),
    ("serve-api-key-padded", ["serve", "--api-key", " key"], "no space at either end"),  # no request matched it
    ("serve-api-key-not-ascii", ["serve", "--api-key", "café"], "holds 'é'"),
    ("demo-out-without-train", ["demo", "--out", "{out}"], "only demo --train writes a pipeline directory"),
    ("bench-prompts-max-pixels-zero", ["bench", "--prompts", "{maxpix0.jsonl}"],
     "maxpix0.jsonl:1: messages[0].content[0]: 'max_pixels' must be a whole number in [3136, 2147483647], got 0"),
    ("bench-prompts-max-pixels-text", ["bench", "--prompts", "{pixtext.jsonl}"], "'max_pixels' must be a whole number"),
    ("cache-prompts-min-above-max-pixels", ["cache", "--prompts", "{minabovemax.jsonl}"],
     "'min_pixels' 1000000 is above 'max_pixels' 10000"),  # an AssertionError traceback
    ("bench-prompts-resized-zero", ["bench", "--prompts", "{resized0.jsonl}"],
     "'resized_height' must be a whole number in [28"),  # a ZeroDivisionError traceback
    ("bench-prompts-resized-alone", ["bench", "--prompts", "{resizedalone.jsonl}"],
     "'resized_height' and 'resized_width' go together"),  # one alone was ignored without a word
    ("train-recipe-deep", ["train", "--recipe", "{deep.toml}"], "deep.toml: unreadable recipe (nested too deeply)"),
    ("train-recipe-huge-number", ["train", "--recipe", "{bigint.toml}"],
     "bigint.toml: unreadable recipe (a number too long to read"),  # a ValueError traceback
    ("gen-drafter-config-huge-number", ["generate", "--drafter", "{bigconfig}"],
     "unreadable config (a number too long to read (more than 4300 digits))"),  # advised set_int_max_str_digits
    ("gen-drafter-record-huge-number", ["generate", "--drafter", "{bigrecord}"],
     "bigrecord/target.json: not a target record (a number too long to read"),
    ("train-cache-manifest-huge-number", ["train", "--recipe", "tiny", "--cache", "{bigcache}"],
     "bigcache/manifest.json: unreadable manifest (a number too long to read"),
    # round 10: the eighth probe
    ("sim-sps-dtype-free-text", ["simulate", "--conf", "0.9", "--sps", "{dtypetable.json}"],
     "field 'dtype': expected one of float32, bfloat16, float16"),  # accepted, then matched no run
    ("train-mask-token-negative", ["train", "--recipe", "tiny", "mask_token_id=-1"],
     "override 'mask_token_id=-1': mask_token_id, vocab_size: a token id in [0, 49152)"),  # blamed the recipe file
    ("train-draft-vocab-above-vocab", ["train", "--recipe", "tiny", "--dry-run", "draft_vocab=99999999"],
     "override 'draft_vocab=99999999'"),
    ("cal-calibration-json-dir", ["calibrate", "--drafter", "{caldir}", "--prompts", "{ok.jsonl}"],
     "its calibration.json is a directory, where calibrate writes the fit"),  # a traceback after the rollouts
    # round 14: the twelfth probe's leftover, refused before the target (here: one that does not exist)
    ("gen-drafter-calibration-damaged", ["generate", "--prompt", "hi", "--drafter", "{badcal}", "--target", "{missing}"],
     "badcal/calibration.json: not readable as JSON"),
    ("bench-drafter-calibration-damaged", ["bench", "--drafter", "hybrid:{badcal}", "--target", "{missing}"],
     "badcal/calibration.json: not readable as JSON"),
    # round 11: the ninth probe
    ("sim-conf-past-inline", ["simulate", "--sps-inline", "1,0.5", "--conf", "0.9,0.8,0.7"],
     "up to 4 tokens, but --sps-inline gives them for 1..2"),  # said "the SPS table", where none was given
    ("import-minispark-drafter", ["import", "{fakedrafter}", "--out", "{out}", "--target", "{missing}"],
     "not a DeepSpec drafter"),  # refused after loading the target (here: a --target that does not exist)
    # round 13: the eleventh probe
    ("cache-layers-digit-grouping", ["cache", "--layers", "1_0"], "--layers: expected 'auto' or comma-separated layer "
     "ids, got '1_0'"),  # was layer 10
    ("cache-layers-other-digits", ["cache", "--layers", "\u0663"], "--layers: expected 'auto'"),  # was layer 3
    # round 14: the twelfth probe
    ("serve-host-empty", ["serve", "--host", ""], "--host '': empty; give an address"),  # "--host : not an address"
    ("train-feature-layers-empty", ["train", "--recipe", "tiny", "--dry-run", "feature_layers="],
     "override 'feature_layers=': feature_layers has an empty value"),  # said "not set in recipe 'tiny'"
    ("train-init-from-a-target", ["train", "--recipe", "tiny", "--dry-run", "init_from={notokenizer}"],
     "a transformers model's config (model_type 'llama'), not a drafter's"),  # passed; the real run a traceback
    ("gen-drafter-a-target", ["generate", "--drafter", "{notokenizer}", "--target", "{missing}", "--prompt", "hi"],
     "a transformers model's config (model_type 'llama'), not a drafter's"),  # refused only once the target loaded
    ("target-config-wrong-type", ["generate", "--target", "{strtarget}", "--prompt", "hi", "--drafter", "none"],
     "config.json: Field 'num_hidden_layers' expected int, got str"),  # huggingface_hub's traceback
    ("target-config-negative-size", ["generate", "--target", "{negtarget}", "--prompt", "hi", "--drafter", "none"],
     "cannot build the model (Trying to create tensor with negative dimension"),  # torch's traceback
    # round 16: the fourteenth probe: a flag no --modes mode reads was ignored, yet printed (γ=999)
    ("bench-gamma-without-a-drafting-mode", ["bench", "--modes", "target,hf", "--gamma", "999"],
     "--gamma 999: --modes target,hf drafts nothing"),
    ("bench-sps-without-a-schedule-mode", ["bench", "--modes", "target,lookup", "--sps", "{tokens5.json}"],
     "only the schedule modes use an SPS table, and --modes target,lookup leaves them out"),
    ("bench-strict-without-a-schedule-mode", ["bench", "--modes", "target", "--strict"],
     "--strict: only the schedule modes use an SPS table, and --modes target leaves them out"),
    ("bench-drafter-modes-without-a-drafter", ["bench", "--drafter", "none", "--modes", "target,fixed"],
     "--modes target,fixed: fixed needs a trained drafter, and --drafter none gives none"),  # skipped once loaded
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
     "decodes in fixed mode"),  # lookup has no confidences: fixed is chosen after loading
    ("export-out-name-too-long", ["export", "{fakedrafter}", "--out", "{dir}/" + "x" * 300],
     "a name of 300 bytes in the path; a file system allows at most 255"),  # OSError ENAMETOOLONG traceback
    ("bench-prompts-path-too-long", ["bench", "--prompts", "/a" * 2100], "a path of 4200 bytes"),
    ("bench-prompts-json-array", ["bench", "--prompts", "{array.jsonl}"],  # "malformed JSON: Expecting value"
     "array.jsonl:1: a JSON array, not JSON Lines"),
    ("bench-prompts-a-pipe", ["bench", "--prompts", "{fifo}"], "fifo: not a file but a pipe or a device (as <(...) "
     "gives); minispark reads it more than once: save it to a file first"),  # "not a file"
    ("train-recipe-a-pipe", ["train", "--recipe", "{fifo}"], "fifo: not a file but a pipe"),  # "no such file"
    ("train-recipe-dangling", ["train", "--recipe", "{danglinglink}"], "danglinglink: is a symlink to"),
    ("bench-prompts-image-name-too-long", ["bench", "--prompts", "{longimage.jsonl}"],
     "...: a name of 304 bytes in the path; a file system allows at most 255"),  # OSError ENAMETOOLONG traceback
    ("target-config-vocab-zero", ["generate", "--target", "{vocab0target}", "--prompt", "hi", "--drafter", "none"],
     "cannot build the model (Padding_idx must be within num_embeddings)"),  # torch's AssertionError traceback
    ("target-chat-template-damaged", ["generate", "--target", "{badtemplate}", "--prompt", "hi", "--drafter", "none"],
     "its chat template fails on this conversation (unexpected '}')"),  # jinja2's TemplateSyntaxError traceback
]


def test_enough_cases() -> None:
    assert len(CASES) >= 60
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("argv, needle", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line(files: dict[str, str], argv: list[str], needle: str) -> None:
    args = [re.sub(r"\{([\w.-]+)\}", lambda m: files[m.group(1)], arg) for arg in argv]
    error = one_line_error(CliRunner().invoke(app, args))
    assert needle in error, error


def test_a_long_list_flag_is_not_echoed_whole() -> None:
    """A 300-item --conf with one bad item repeated all 300 in its error line; it names the item instead."""
    conf = ",".join(["0.9"] * 299 + ["x"])
    error = one_line_error(CliRunner().invoke(app, ["simulate", "--conf", conf, "--sps-inline", "1,0.5"]))
    assert error == "error: --conf: expected comma-separated numbers, got item 300 'x'"
    error = one_line_error(CliRunner().invoke(app, ["simulate", "--conf", conf.replace(",x", ",,"),
                                                    "--sps-inline", "1,0.5"]))
    assert "empty item 300" in error and "(1,197 characters)" in error and len(error) < 160, error
    layers = ",".join(["1"] * 299 + ["x"])  # a recipe override: its label and its value, each cut
    error = one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", f"feature_layers={layers}"]))
    assert "feature_layers must be list of ints" in error and "(599 characters)" in error and len(error) < 260, error


def one_line_error(result) -> str:
    """The one ``error:`` line a refused command printed (exit 2, no traceback, nothing on stdout)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    # One error line, last; anything before it is a one-line notice of what was loaded.
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    assert "Traceback" not in result.output and "§" not in result.output and not result.stdout.strip()
    return errors[0]


def test_every_option_has_help() -> None:
    import typer.main

    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        for param in command.params:
            if param.param_type_name == "option":
                assert param.help, f"minispark {name} {param.opts[0]}: no help text"


def test_help_texts_close_their_parentheses() -> None:
    """`generate --help` had an unbalanced parenthesis (intervals such as (0, 1] are not parentheses)."""
    import typer.main

    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        for who, text in [(name, command.help or "")] + [(f"{name} {p.opts[0]}", getattr(p, "help", None) or "")
                                                         for p in command.params]:
            text = re.sub(r"[(\[][\d.]+, [\d.]+[)\]]", "", text)
            assert text.count("(") == text.count(")") and text.count("[") == text.count("]"), (who, text)


def test_help_texts_survive_rich_markup() -> None:
    """typer renders help as rich markup, where '[default: auto]' is a style tag and vanished from --help (the
    ninth probe: --runtime, --draft-precision, --max-pixels, simulate's --draws and --seed lost their defaults)."""
    import typer.main

    group = typer.main.get_command(app)
    for argv, command in [([], group)] + [([name], command) for name, command in group.commands.items()]:
        shown = " ".join(CliRunner().invoke(app, argv + ["--help"], env={"COLUMNS": "3000"}).output.split())
        for param in command.params:
            for bracketed in re.findall(r"\[[^\]]*\]", getattr(param, "help", None) or ""):
                assert " ".join(bracketed.split()) in shown, (argv, param.name, bracketed)
    shown = " ".join(CliRunner().invoke(app, ["--help"], env={"COLUMNS": "3000"}).output.split())
    assert shown.count("(default: auto)") == 2 and "(default: 1,003,520, ~1 MP" in shown
    shown = " ".join(CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "3000"}).output.split())
    assert "(--appendix-a; default: 100,000; at most 10,000,000)" in shown and "(--appendix-a; default: 0)" in shown


def test_no_design_note_sections_in_help() -> None:
    for name in ("generate", "chat", "bench", "cache", "train", "profile", "calibrate", "simulate"):
        result = CliRunner().invoke(app, [name, "--help"])
        assert result.exit_code == 0 and "§" not in result.output, name


@pytest.mark.parametrize("argv, names", [
    (["generate", "--gamma", "abc"], "--gamma"),
    (["generate", "--bogus"], "--bogus"),
    (["frobnicate"], "frobnicate"),
    (["bench", "--modes"], "--modes"),
    (["--max-pixels", "99999999999", "generate"], "--max-pixels"),
])
def test_console_entry_point_turns_usage_errors_into_one_line(argv, names, capsys) -> None:
    """What the installed `minispark` script runs: click's usage errors become one line, exit 2."""
    from minispark.cli import run

    with pytest.raises(SystemExit) as exit_info:
        run(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert exit_info.value.code == 2 and captured.out == ""
    assert len(lines) == 1 and lines[0].startswith("error:") and names in lines[0]


def test_a_bare_minispark_shows_the_help_and_says_why(capsys) -> None:
    """No command at all: the help, then one line that says something (it was ``error:  (see ...)``)."""
    from minispark.cli import run

    with pytest.raises(SystemExit) as exit_info:
        run([])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and "Commands" in captured.out
    assert captured.err.strip().splitlines() == ["error: no command given (see `minispark --help`)"]


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


def test_a_prompt_that_fills_the_context_is_refused_everywhere(tiny_dir, tmp_path) -> None:
    """bench and calibrate name the prompt file's line; chat refuses the turn and keeps the session."""
    from minispark.data.prompts import PromptFileError, load_prompt_inputs
    from minispark.core.errors import MinisparkError
    from minispark.measuring.bench import file_prompts
    from minispark.serving.conversation import Conversation
    from minispark.serving.drafters.base import NoDrafter
    from minispark.target.loading import load_target

    target = load_target(str(tiny_dir("llama")))
    long = " ".join(["word"] * (target.text_config.max_position_embeddings + 10))
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "Hi there."}) + "\n" + json.dumps({"prompt": long}) + "\n")
    with pytest.raises(PromptFileError, match=r"prompts.jsonl:2: \d+ tokens fill .* context of 4096"):
        file_prompts(target, path)
    with pytest.raises(PromptFileError, match=r"prompts.jsonl:2:"):
        load_prompt_inputs(target, path, 2)
    conversation = Conversation(target, NoDrafter(), max_new_tokens=4)
    with pytest.raises(MinisparkError, match="your message: .* shorten it"):  # a first message: /reset won't help
        conversation.say(long)
    assert conversation.messages == [] or len(conversation.messages) <= 1  # nothing was added
    assert len(conversation.say("Hi there.").token_ids) > 0
    with pytest.raises(MinisparkError, match="your message: .* shorten it"):  # was blamed on the conversation
        conversation.say(long)


def test_calibrate_never_rewrites_a_shipped_drafter() -> None:
    from minispark.data.prompts import HELDOUT_FILE
    from minispark.serving.generate import SHIPPED_DRAFTERS

    shipped = next(p for p in sorted(SHIPPED_DRAFTERS.iterdir()) if p.is_dir())
    before = {p: p.read_bytes() for p in shipped.iterdir()}
    result = CliRunner().invoke(app, ["calibrate", "--drafter", str(shipped), "--prompts", str(HELDOUT_FILE)])
    assert result.exit_code == 2 and "never rewritten" in result.output
    assert {p: p.read_bytes() for p in shipped.iterdir()} == before


def test_import_of_a_minispark_drafter_says_it_needs_none(tiny_trained_drafter, tmp_path) -> None:
    """import loaded the target before finding that its SOURCE was a minispark drafter, and did not say it needs no
    import (the ninth probe)."""
    target, drafter = tiny_trained_drafter
    error = one_line_error(CliRunner().invoke(app, ["import", str(drafter), "--out", str(tmp_path / "imported")]))
    assert "not a DeepSpec drafter" in error and "it is a minispark drafter already: give it to --drafter" in error
    assert not (tmp_path / "imported").exists()


def test_a_set_grown_under_the_int8_runtime_is_refused(tiny_dir, files, tmp_path, monkeypatch) -> None:
    """--runtime int8 is another target (int8 weights), but an answer set or a cache built without it grew under it
    without a word, its samples from two targets (the ninth probe); sets built without int8 keep their identity."""
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


def test_a_drafter_exported_for_another_target_is_refused(tiny_trained_drafter, tmp_path) -> None:
    """import would re-tag it for this target, and --drafter would run it: both refuse it, as for a minispark drafter."""
    target, drafter = tiny_trained_drafter
    exported = tmp_path / "ds"
    runner = CliRunner()
    assert runner.invoke(app, ["export", str(drafter), "--out", str(exported), "--target", str(target)]).exit_code == 0
    config = json.loads((exported / "config.json").read_text())
    config["minispark_target"] = "someone/elses-model@0123456789abcdef"  # same shapes, another target
    (exported / "config.json").write_text(json.dumps(config))
    for argv in (["import", str(exported), "--out", str(tmp_path / "imported"), "--target", str(target)],
                 ["generate", "--drafter", str(exported), "--target", str(target), "--max-new-tokens", "2"]):
        result = runner.invoke(app, argv)
        # refused before loading, as a minispark drafter's recorded target is (round 6: an export's is read too)
        assert result.exit_code == 2 and "someone/elses-model@0123456789abcdef" in result.stderr
    assert not (tmp_path / "imported").exists()


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

    with pytest.raises(MinisparkError, match="no training run to resume; drop --resume"):
        _output_dir(load_recipe("tiny", []), tmp_path / "runs" / "draft-tiny", True, None)


@pytest.mark.parametrize("command", ["export", "generate", "calibrate"])
def test_a_drafter_with_wrongly_shaped_weights_is_one_line(tiny_trained_drafter, tmp_path, command: str) -> None:
    target, drafter = tiny_trained_drafter
    bad = tmp_path / "bad"
    shutil.copytree(drafter, bad)
    weights = load_file(str(bad / "model.safetensors"))
    key = next(k for k, v in sorted(weights.items()) if v.ndim == 2)
    weights[key] = torch.zeros(weights[key].shape[0] + 1, weights[key].shape[1])
    save_file(weights, str(bad / "model.safetensors"))
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Hi there"}) + "\n")
    argv = {"export": ["export", str(bad), "--out", str(tmp_path / "out")],
            "generate": ["generate", "--drafter", str(bad), "--max-new-tokens", "2"],
            "calibrate": ["calibrate", "--drafter", str(bad), "--prompts", str(prompts)]}[command]
    error = one_line_error(CliRunner().invoke(app, argv + ["--target", str(target)]))
    assert f"bad/model.safetensors: weight {key!r} has shape" in error
    assert not (tmp_path / "out").exists()


def full_disk(monkeypatch: pytest.MonkeyPatch, where: str = "") -> None:
    """Make every fsync of a file whose path contains ``where`` fail as a full disk does (a filesystem
    with delayed allocation reports ENOSPC there): what the atomic writers must turn into one line."""
    import errno
    import os

    fsync = os.fsync

    def failing(fd: int) -> None:
        if where in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)


@pytest.mark.parametrize("command", ["cache", "train", "export", "import"])
def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(tiny_trained_drafter, tmp_path, monkeypatch,
                                                                   command: str) -> None:
    from tests.helpers import snapshot

    target, drafter = tiny_trained_drafter
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Hi there"}) + "\n")
    exported = tmp_path / "ds"
    if command == "import":
        assert CliRunner().invoke(app, ["export", str(drafter), "--out", str(exported), "--target",
                                        str(target)]).exit_code == 0
    out = tmp_path / "runs" / "out"
    argv = {"cache": ["cache", "--prompts", str(prompts), "--num-samples", "1", "--max-new-tokens", "4", "--layers",
                      "1,2", "--force"],
            "train": ["train", "--recipe", "tiny", "steps=2", "checkpoint_every=1", "--cache",
                      str(drafter.parents[1] / "cache"), "--no-progress"],  # the fixture's cache
            "export": ["export", str(drafter)],
            "import": ["import", str(exported)]}[command]
    argv += [] if command == "train" else ["--target", str(target)]  # train reads its target from the cache
    before = snapshot(drafter.parent, exported)
    full_disk(monkeypatch, "checkpoint-" if command == "train" else "")  # train: its first checkpoint
    error = one_line_error(CliRunner().invoke(app, argv + ["--out", str(out)]))
    assert "no space left on the device" in error and "nothing half-written" in error
    assert snapshot(drafter.parent, exported) == before
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    if command == "train":  # the run's own files stay (a rerun continues it); no partial checkpoint
        assert not [name for name in left if "checkpoint" in name], left
    else:  # the --out it created, still empty, is removed
        assert not (tmp_path / "runs").exists(), left


def test_a_full_disk_after_a_checkpoint_says_to_resume(tiny_trained_drafter, tmp_path, monkeypatch) -> None:
    """Fifteenth probe: a disk that filled at train's second checkpoint said "run the command again", which was
    then refused ("already holds a training run; pass --resume")."""
    argv = ["train", "--recipe", "tiny", "steps=4", "checkpoint_every=2", "--no-progress", "--cache",
            str(tiny_trained_drafter[1].parents[1] / "cache"), "--out", str(tmp_path / "run")]
    with monkeypatch.context() as patched:
        full_disk(patched, "checkpoint-000004")
        error = one_line_error(CliRunner().invoke(app, argv))
    assert error.endswith("free some space and run the command again with --resume (its checkpoints are kept)")
    result = CliRunner().invoke(app, argv + ["--resume"])
    assert result.exit_code == 0 and "resumed from" in result.stderr, result.output


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


def test_a_user_dir_that_cannot_take_the_hash_memo_fails_nothing(tiny_dir, tmp_path, monkeypatch) -> None:
    """The weights-hash memo (hashes.json in $MINISPARK_CACHE) is only a cache: a full disk there failed profile
    and calibrate after their whole run, naming hashes.json."""
    from minispark.target.loading import load_target

    monkeypatch.setenv("MINISPARK_CACHE", str(tmp_path / "user"))
    full_disk(monkeypatch, "hashes.json")
    assert load_target(str(tiny_dir("llama"))).identity()["weights_hash"] not in ("", "unknown")
    assert not (tmp_path / "user" / "hashes.json").exists()


def test_a_full_disk_torch_reports_as_a_runtime_error_is_recognised(tmp_path, monkeypatch) -> None:
    """torch.save on a full disk raises a bare RuntimeError; with no free space left it is a full disk."""
    from types import SimpleNamespace

    from minispark.core.atomic import NoSpaceError, write_dir_atomic

    def fill(tmp: Path) -> None:
        (tmp / "trainer_state.pt").write_bytes(b"half")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    with pytest.raises(RuntimeError, match="unexpected pos"):  # a real failure with space left: kept as it is
        write_dir_atomic(tmp_path / "ckpt", fill)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=100, used=100, free=0))
    with pytest.raises(NoSpaceError, match="ckpt: no space left"):
        write_dir_atomic(tmp_path / "ckpt", fill)
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_safetensors_reports_in_its_own_error_is_recognised(tmp_path) -> None:
    """safetensors deletes its half-written file before raising, so the disk has room again by then (a
    checkpoint, an export or an import on a nearly full disk was a traceback); its message names the errno."""
    from safetensors import SafetensorError

    from minispark.core.atomic import NoSpaceError, write_dir_atomic

    def fill(tmp: Path) -> None:
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    with pytest.raises(NoSpaceError, match="ckpt: no space left"):
        write_dir_atomic(tmp_path / "ckpt", fill)
    assert list(tmp_path.iterdir()) == []

    def fail(tmp: Path) -> None:  # another I/O error stays what it is
        raise SafetensorError("Error while serializing: I/O error: Permission denied (os error 13)")

    with pytest.raises(SafetensorError, match="os error 13"):
        write_dir_atomic(tmp_path / "ckpt", fail)


@pytest.mark.parametrize("writer", ["bytes", "safetensors", "torch"])
def test_a_file_past_ulimit_f_is_one_line(tmp_path, writer: str) -> None:
    """``ulimit -f``: Python ignores SIGXFSZ, so the write fails with EFBIG (safetensors names it in its message,
    torch.save raises a bare RuntimeError); each was a traceback. Nothing half-written is kept."""
    import resource

    from safetensors.torch import save_file

    from minispark.core.atomic import FileTooLargeError, write_bytes_atomic, write_dir_atomic

    tensor = torch.zeros(50_000)  # 200 kB, past the limit below
    write = {"bytes": lambda: write_bytes_atomic(tmp_path / "out" / "x.bin", bytes(200_000)),
             "safetensors": lambda: write_dir_atomic(tmp_path / "out", lambda d: save_file({"x": tensor},
                                                                                           str(d / "w.safetensors"))),
             "torch": lambda: write_dir_atomic(tmp_path / "out", lambda d: torch.save({"x": tensor}, d / "t.pt"))}
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, hard))
    try:
        with pytest.raises(FileTooLargeError, match="larger than this process may write"):
            write[writer]()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


class _RunsCode:
    """Unpickling this would create ``marker``: a stand-in for a weight file that runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return os.mkdir, (str(self.marker),)


def test_a_blocked_malicious_pickle_is_one_line(tiny_dir, tmp_path, monkeypatch) -> None:
    from minispark.validate_models import ALLOW_PICKLE_ENV

    monkeypatch.setenv(ALLOW_PICKLE_ENV, "0")  # --allow-pickle-weights sets it; restored after the test
    evil = tmp_path / "evil"
    evil.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):  # whole but for its weights
        shutil.copy(tiny_dir("llama") / name, evil / name)
    marker = tmp_path / "it-ran"
    torch.save({"model.embed_tokens.weight": _RunsCode(marker)}, evil / "pytorch_model.bin")
    result = CliRunner().invoke(app, ["--allow-pickle-weights", "generate", "--target", str(evil), "--drafter",
                                      "none", "--max-new-tokens", "2"])
    error = one_line_error(result)
    assert f"refused {evil / 'pytorch_model.bin'}" in error and "nothing ran" in error
    assert "weights_only" not in error and not marker.exists()


def test_an_unreadable_directory_behind_a_symlink_is_one_line(tiny_trained_drafter, tmp_path, monkeypatch) -> None:
    """Root reads through chmod 000, so the denial another user would meet is simulated at stat()."""
    import errno
    import os

    target, drafter = tiny_trained_drafter
    locked = tmp_path / "locked"
    shutil.copytree(drafter, locked / "drafter")
    (locked / "p.jsonl").write_text(json.dumps({"prompt": "Hi there"}) + "\n")
    link = tmp_path / "link"
    link.symlink_to(locked)
    inside, stat = os.path.realpath(locked) + os.sep, Path.stat

    def denied(self, *args, **kwargs):
        if os.path.realpath(self).startswith(inside):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", denied)
    for argv in (["generate", "--drafter", str(link / "drafter"), "--target", str(target)],
                 ["calibrate", "--drafter", str(link / "drafter"), "--prompts", str(link / "p.jsonl")],
                 ["bench", "--prompts", str(link / "p.jsonl")],
                 ["train", "--recipe", "tiny", "--cache", str(link / "drafter"), "--out", str(tmp_path / "o")],
                 ["export", str(link / "drafter"), "--out", str(tmp_path / "o")]):
        error = one_line_error(CliRunner().invoke(app, argv))
        assert f"{link}/" in error and f"(it leads to {os.path.realpath(locked)}/" in error, error
        assert "permission denied" in error


@pytest.mark.parametrize("command", ["bench", "calibrate", "cache", "answers"])
def test_a_bad_prompt_line_is_reported_before_the_target_loads(files, monkeypatch, command: str) -> None:
    from minispark.cli import data, measure

    def load(*args, **kwargs):
        raise AssertionError("the target loaded before --prompts was checked")

    monkeypatch.setattr(measure if command in ("bench", "calibrate") else data, "_load", load)  # where it is used
    argv = {"bench": ["bench"], "calibrate": ["calibrate", "--drafter", files["fakedrafter"]],
            "cache": ["cache", "--out", files["out"]], "answers": ["answers", "--out", files["out"]]}[command]
    error = one_line_error(CliRunner().invoke(app, argv + ["--prompts", files["corrupt.jsonl"]]))
    assert "corrupt.jsonl:1: malformed JSON" in error


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


def test_help_shows_what_to_type() -> None:
    """No ``<bool>`` after a flag, and a repeatable option as its element, not ``<list[Path]>``."""
    import typer.main

    for name in ["", *typer.main.get_command(app).commands]:
        result = CliRunner().invoke(app, [name, "--help"] if name else ["--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0 and "<bool>" not in result.output, name
        assert "<list[" not in result.output, name  # options and variadic arguments (cache-mix PARTS...)
    assert re.search(r"--image\s+<path>\s+Image file", CliRunner().invoke(app, ["generate", "--help"],
                                                                         env={"COLUMNS": "200"}).output)


def test_ctrl_c_in_a_streamed_answer_ends_its_line(tiny_dir, monkeypatch) -> None:
    """Fifteenth probe: Ctrl-C while generate streamed printed "interrupted" onto the answer's last word."""
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


def test_a_refused_command_leaves_no_empty_out_it_created(tmp_path) -> None:
    out = tmp_path / "new" / "run"
    one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", "device=cuda", "--cache", str(tmp_path),
                                            "--out", str(out)]))
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()  # a directory the user made stays, empty or not
    one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", "device=cuda", "--cache", str(tmp_path),
                                            "--out", str(tmp_path / "mine")]))
    assert (tmp_path / "mine").is_dir()


def test_the_calibration_notice_gives_a_command_that_runs(tmp_path) -> None:
    """The shipped drafter is calibrated at T 0, 0.7 and 1; at T 1.5 the notice says to calibrate a copy
    (calibrate refuses the shipped directory itself) on the corpus, and a user's drafter in place."""
    from minispark.core.defaults import CALIBRATION_PROMPTS, SHIPPED_DRAFTERS
    from minispark.model.checkpoint import load_calibration
    from minispark.target.sampling import SamplingConfig
    from minispark.validate import not_shipped

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


def test_a_damaged_draft_config_names_its_key() -> None:
    """A hand-edited or damaged config.json: a ValueError naming the key (the commands print it as one
    line), never a TypeError from deep inside the dataclass."""
    from tests.helpers import make_config

    from minispark.model.draft_config import DraftConfig

    good = json.loads(make_config().to_json())
    for key, value, says in [("block_size", "four", "'block_size': expected a whole number"),
                             ("rms_eps", float("nan"), "'rms_eps': expected a finite number"),
                             ("hidden_size", None, "'hidden_size': expected a whole number"),
                             ("feature_layers", [0, "2"], "'feature_layers': expected a list of whole numbers"),
                             ("qk_norm", 1, "'qk_norm': expected true or false"),
                             ("head", 3, "'head': expected text"),
                             ("num_kv_heads", 0, "num_kv_heads must be >= 1"),  # was a ZeroDivisionError
                             ("head_dim", 0, "head_dim must be >= 1"),
                             # one message for two keys: 'need block_size >= 1 and window >= 0, got -1, 16'
                             ("block_size", -1, "block_size must be >= 1, got -1"),
                             ("window", -2, "window must be >= 0, got -2")]:
        with pytest.raises(ValueError, match=re.escape(says)):
            DraftConfig.from_dict({**good, key: value})
    with pytest.raises(ValueError, match=r"lacks the keys \['target'\]"):
        DraftConfig.from_dict({k: v for k, v in good.items() if k != "target"})
    # keys with defaults too: a config that lost rope_theta and window loaded with the defaults and drafted worse
    with pytest.raises(ValueError, match=r"lacks the keys \['rope_theta', 'window'\]"):
        DraftConfig.from_dict({k: v for k, v in good.items() if k not in ("rope_theta", "window")})
    # a target's config.json (export TARGET_DIR): its dozens of keys were listed
    with pytest.raises(ValueError, match=r"^a transformers model's config \(model_type 'llama'\), not a drafter's"):
        DraftConfig.from_dict({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64})
    assert DraftConfig.from_dict(good) == make_config()


def test_a_drafter_for_other_layers_blames_its_config_not_layers(tiny_trained_drafter, tmp_path) -> None:
    target, drafter = tiny_trained_drafter
    bad = tmp_path / "bad"
    shutil.copytree(drafter, bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "feature_layers": [1, 99]}))
    error = one_line_error(CliRunner().invoke(app, ["generate", "--target", str(target), "--drafter", str(bad),
                                                    "--max-new-tokens", "2"]))
    assert f"--drafter {bad}: feature_layers: layer 99 out of range" in error and "--layers" not in error


def test_binary_tables_and_calibrations_are_one_line(tmp_path) -> None:
    """An image (not UTF-8) given where JSON is read: the loader's own error, not a UnicodeDecodeError."""
    from minispark.model.calibration import Calibration, CalibrationError
    from minispark.serving.sps import SPSTable, SPSTableError

    binary = make_test_image(tmp_path / "x.png")
    with pytest.raises(SPSTableError, match="not UTF-8 text"):
        SPSTable.load(binary)
    with pytest.raises(CalibrationError, match="not UTF-8 text"):
        Calibration.load(binary)


def _bracketed_copy(source: Path, where: Path) -> Path:
    """``source`` copied (hard links) to a path whose names rich would read as markup: ``[v2]`` (a style,
    silently dropped) and ``[/]`` (a closing tag, which raises)."""
    (where / "a[").mkdir(parents=True)
    copy = where / "a[" / "]b[v2]"
    shutil.copytree(source, copy, copy_function=os.link)
    return copy


@pytest.mark.parametrize("command", ["generate", "chat", "bench", "cache", "profile", "export"])
def test_paths_with_brackets_print_verbatim(tiny_dir, tiny_trained_drafter, tmp_path, command: str) -> None:
    """A file name is shown as it is: never parsed as rich markup (no traceback, nothing dropped)."""
    target = _bracketed_copy(tiny_dir("llama"), tmp_path)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Hi there"}) + "\n")
    out = tmp_path / "x[/]y[v2]"
    argv, stdin = {
        # a drafter that reads SPS tables: the no-table hint names the target (without one nothing does)
        "generate": (["generate", "--target", str(target), "--drafter", "lookup", "--max-new-tokens", "2"], None),
        "chat": (["chat", "--target", str(target), "--drafter", "none"], f"/save {out}.json\n/image {out}.png\n"),
        "bench": (["bench", "--target", str(target), "--drafter", "none", "--modes", "target", "--num-prompts", "1",
                   "--max-new-tokens", "2", "--plot", f"{out}.png"], None),
        "cache": (["cache", "--target", str(target), "--prompts", str(prompts), "--out", str(out), "--num-samples", "1",
                   "--max-new-tokens", "2", "--layers", "1,2", "--window", "4", "--block", "2"], None),
        "profile": (["profile", "--target", str(target), "--contexts", "16", "--max-tokens", "8", "--rounds", "1",
                     "--warmup", "0", "--allow-busy", "--out", str(out)], None),
        "export": (["export", str(tiny_trained_drafter[1]), "--out", str(out)], None),
    }[command]
    result = CliRunner().invoke(app, argv, input=stdin)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    shown = result.output.replace("\n", "")  # a long line may wrap
    if command in ("generate", "chat", "bench"):
        assert str(target) in shown  # the hint, the chat header, the bench table's title
    if command != "generate":
        assert str(out) in shown  # wrote / saved / the cache's summary
    if command == "profile":
        assert "median [min] spread" in shown
    if command == "chat":
        assert f"error: target {target} is text-only" in shown


def test_import_and_export_replace_only_their_own_output(tiny_trained_drafter, tmp_path) -> None:
    """A directory minispark wrote with another command (a trained drafter, a checkpoint, an export) is
    never replaced by import or export; their own earlier output is, so a rerun works."""
    from tests.helpers import snapshot

    target, drafter = tiny_trained_drafter
    mine = tmp_path / "my-drafter"  # a copy of a trained drafter, its record included
    shutil.copytree(drafter, mine)
    runner = CliRunner()
    for _ in range(2):  # the second run replaces the first's output
        assert runner.invoke(app, ["export", str(drafter), "--out", str(tmp_path / "ds")]).exit_code == 0
        assert runner.invoke(app, ["import", str(tmp_path / "ds"), "--out", str(tmp_path / "back"), "--target",
                                   str(target)]).exit_code == 0
    before = snapshot(mine, tmp_path / "ds", drafter.parent)
    for argv, by in [(["export", str(drafter), "--out", str(mine)], "export"),
                     (["export", str(drafter), "--out", str(tmp_path / "back")], "export"),
                     (["import", str(tmp_path / "ds"), "--out", str(mine), "--target", str(target)], "import"),
                     (["import", str(tmp_path / "back"), "--out", str(tmp_path / "ds")], "import")]:
        error = one_line_error(runner.invoke(app, argv))
        assert f"not an earlier `minispark {by}` output" in error, error
    assert snapshot(mine, tmp_path / "ds", drafter.parent) == before


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


# ---- round 4: output directories, skipped prompts, $MINISPARK_MAX_PIXELS, --system, temperature ----------------

def _someones_files(where: Path) -> Path:
    """A directory of a user's files (nothing minispark wrote): what no --out may be filled beside."""
    (where / "sub").mkdir(parents=True)
    (where / "notes.txt").write_text("my notes\n")
    (where / "sub" / "data.bin").write_bytes(b"\x00\x01")
    return where


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
        with pytest.raises(MinisparkError, match=re.escape(f"--out {out}: holds notes.txt")):
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
        with pytest.raises(MinisparkError, match=r"--temperature must be a finite number in \[0, 100\]"):
            SamplingConfig(bad)


def test_chat_help_says_an_empty_system_message_is_refused() -> None:
    help_text = " ".join(CliRunner().invoke(app, ["chat", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "an empty one is refused" in help_text


# ---- round 5: variables, vanishing sampling settings, chat input, sizes, outputs inside inputs, memory -----------

@pytest.mark.parametrize("variable, value, says", [
    ("MINISPARK_CACHE", "{afile}", "$MINISPARK_CACHE {afile}: {afile} is a file, not a directory"),
    ("MINISPARK_CACHE", "{danglinglink}", "is a symlink to"),
    ("MINISPARK_SPS_TABLES", "{afile}", "$MINISPARK_SPS_TABLES {afile}: {afile} is a file"),  # hid every table
    ("MINISPARK_DRAFT_PRECISION", "int4", "--draft-precision / $MINISPARK_DRAFT_PRECISION: 'int4' is not one of"),
])
def test_a_bad_environment_variable_is_one_line_before_loading(files, monkeypatch, variable, value, says) -> None:
    """Each was read only once a model had loaded (a traceback from mkdir after the embedded target's conversion;
    a table directory that is a file, silently no tables; the drafter blamed for the precision)."""
    import minispark.measuring.profiler  # noqa: F401  imported before the patch: it binds load_target by name
    import minispark.target.loading

    def load(*args, **kwargs):
        raise AssertionError(f"the target loaded before ${variable} was checked")

    monkeypatch.setattr(minispark.target.loading, "load_target", load)
    monkeypatch.setenv(variable, re.sub(r"\{([\w.-]+)\}", lambda m: files[m.group(1)], value))
    says = re.sub(r"\{([\w.-]+)\}", lambda m: files[m.group(1)], says)
    for argv in (["generate", "--target", files["tiny"]], ["profile", "--target", files["tiny"]],
                 ["bench", "--target", files["tiny"]]):
        error = one_line_error(CliRunner().invoke(app, argv))
        assert says in error, error


def test_the_user_directory_variable_is_checked_by_the_library(files, monkeypatch) -> None:
    from minispark.core.defaults import user_dir
    from minispark.core.errors import MinisparkError

    monkeypatch.setenv("MINISPARK_CACHE", files["afile"])
    with pytest.raises(MinisparkError, match=r"\$MINISPARK_CACHE .* is a file, not a directory"):
        user_dir()


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


def test_train_sizes_the_target_contradicts_are_one_line(tiny_trained_drafter, tmp_path) -> None:
    """A draft vocabulary larger than the target's was a ValueError from DraftConfig; past the recipe's own
    vocab_size it is refused when the recipe loads, naming the override (the eighth probe)."""
    target, drafter = tiny_trained_drafter
    cache = drafter.parents[1] / "cache"
    error = one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(cache), "--out",
                                                    str(tmp_path / "run"), "draft_vocab=99999999", "--no-progress"]))
    assert "override 'draft_vocab=99999999': draft_vocab, vocab_size: at most the vocabulary's 49152" in error
    error = one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(cache), "--out",
                                                    str(tmp_path / "run"), "draft_vocab=99999999", "vocab_size=none"]))
    # past the target's vocabulary (the recipe sets no vocab_size): the override is named, not "recipe 'tiny' with
    # its command-line overrides" (the ninth probe)
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


def test_outputs_inside_what_a_command_reads_are_refused(tiny_trained_drafter, tmp_path) -> None:
    """train --out and cache-mix --out inside a cache wrote a run (or a mix) among its shards, which a
    resumed `cache` then refuses as someone else's files; nothing in the cache changes."""
    from tests.helpers import snapshot

    target, drafter = tiny_trained_drafter
    cache = tmp_path / "cache"
    shutil.copytree(drafter.parents[1] / "cache", cache)
    before = snapshot(cache)
    for argv, says in ((["train", "--recipe", "tiny", "--cache", str(cache), "--out", str(cache / "run")],
                        "is inside the --cache directory"),
                       (["train", "--recipe", "tiny", "--answers", str(cache), "--out", str(cache)],
                        "holds a minispark-cache manifest (manifest.json), not a minispark-answers"),
                       (["cache-mix", str(cache), str(drafter.parents[1] / "cache"), "--out", str(cache / "mix")],
                        "is inside the part 1 directory")):
        assert says in one_line_error(CliRunner().invoke(app, argv))
    assert snapshot(cache) == before


def test_written_files_take_the_umask(tmp_path) -> None:
    """mkstemp's 0600 and mkdtemp's 0700 kept an exported drafter from every other user (a vLLM server's)."""
    import os

    from minispark.core.atomic import write_dir_atomic, write_json_atomic

    old = os.umask(0o027)
    try:
        write_json_atomic(tmp_path / "a.json", {})
        write_dir_atomic(tmp_path / "d", lambda tmp: save_file({"x": torch.zeros(1)}, str(tmp / "w.safetensors")))
    finally:
        os.umask(old)
    names = ("a.json", "d", "d/.minispark-written.json", "d/w.safetensors")  # save_file makes 0600 files
    modes = {name: os.stat(tmp_path / name).st_mode & 0o777 for name in names}
    assert modes == {"a.json": 0o640, "d": 0o750, "d/.minispark-written.json": 0o640, "d/w.safetensors": 0o640}


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


# ---- round 6: a fourth probe ----------------------------------------------------------------------

def test_a_shipped_recipe_name_is_not_hidden_by_a_directory(tmp_path, monkeypatch) -> None:
    """`--recipe tiny` run where a directory `tiny` lies (a tiny model built there) read as that directory."""
    from minispark.training.recipes import RECIPE_DIR, recipe_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    assert recipe_path("tiny") == RECIPE_DIR / "tiny.toml"
    assert CliRunner().invoke(app, ["train", "--recipe", "tiny", "--dry-run"]).exit_code == 0
    assert "is a directory" in one_line_error(CliRunner().invoke(app, ["train", "--recipe", "./tiny"]))


def test_a_plot_replaces_only_a_figure_minispark_wrote(tmp_path) -> None:
    """bench/calibrate/profile --plot replaced whatever file had the name (a user's text or photo): data loss."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from minispark import validate
    from minispark.measuring.figures import save_figure
    from minispark.core.errors import MinisparkError
    from tests.helpers import snapshot

    ours = save_figure(plt.figure(), tmp_path / "ours.png")
    assert validate.figure_file(ours) == ours  # a rerun replaces its own figure
    assert validate.figure_file(tmp_path / "new.png") == tmp_path / "new.png"
    photo = make_test_image(tmp_path / "photo.png")
    (tmp_path / "notes.png").write_text("my notes\n")
    before = snapshot(tmp_path)
    for path in (photo, tmp_path / "notes.png"):
        with pytest.raises(MinisparkError, match="exists and is not a figure minispark wrote"):
            validate.figure_file(path)
        error = one_line_error(CliRunner().invoke(app, ["bench", "--plot", str(path)]))
        assert f"--plot {path}: exists and is not a figure minispark wrote" in error
    assert snapshot(tmp_path) == before


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


def test_an_export_is_imported_and_served_with_the_target_it_records(tiny_trained_drafter, tmp_path) -> None:
    """import (and --drafter) of a minispark export for a target other than the embedded one, without --target,
    was refused as "exported for another target ... train or export one for this target": advice that cannot
    be followed, while the export records its target as a trained drafter does."""
    target_dir, drafter_dir = tiny_trained_drafter
    exported = tmp_path / "deepspec"
    assert CliRunner().invoke(app, ["export", str(drafter_dir), "--out", str(exported)]).exit_code == 0
    result = CliRunner().invoke(app, ["import", str(exported), "--out", str(tmp_path / "back")])
    assert result.exit_code == 0, result.output
    assert f"target: {Path(target_dir).resolve()}, recorded in {exported}" in result.stderr
    result = CliRunner().invoke(app, ["generate", "--drafter", str(exported), "--max-new-tokens", "2", "--json"])
    assert result.exit_code == 0, result.output
    # an explicit other target is still refused, naming the target the export records
    error = one_line_error(CliRunner().invoke(app, ["import", str(exported), "--out", str(tmp_path / "x"), "--target",
                                                    "smollm2"]))
    assert "--target" in error


def test_a_training_cache_as_heldout_names_the_flag(tiny_trained_drafter, tmp_path) -> None:
    """The refusal named `heldout_cache:`, a recipe key, though the user typed --heldout-cache."""
    cache = Path(tiny_trained_drafter[1]).parents[1] / "cache"
    result = CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(cache), "--heldout-cache", str(cache),
                                      "--out", str(tmp_path / "run"), "steps=1"])
    assert f"--heldout-cache (recipe key heldout_cache) {cache}: is a training cache" in one_line_error(result)


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


@pytest.mark.parametrize("fault", ["nan", "int"])
def test_a_drafter_with_damaged_weights_is_one_line(tiny_trained_drafter, tmp_path, fault: str) -> None:
    """NaN weights ended in a ValueError traceback from the length policy; integer ones were cast silently."""
    target, drafter = tiny_trained_drafter
    damaged = shutil.copytree(drafter, tmp_path / "damaged")
    weights = load_file(str(damaged / "model.safetensors"))
    key = sorted(k for k, v in weights.items() if v.is_floating_point())[0]
    weights[key] = torch.full_like(weights[key], float("nan")) if fault == "nan" else weights[key].to(torch.int32)
    save_file(weights, str(damaged / "model.safetensors"))
    error = one_line_error(CliRunner().invoke(app, ["generate", "--target", str(target), "--drafter", str(damaged),
                                                    "--prompt", "hi", "--max-new-tokens", "2"]))
    assert f"weight {key!r}" in error and ("NaN or infinite" if fault == "nan" else "torch.int32") in error


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
    """A metrics.jsonl line that is not UTF-8 (damaged bytes) made --resume a UnicodeDecodeError traceback (the
    ninth probe); it is dropped, as a line cut by a kill is, and the run resumes."""
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
    said 'line 1: ...' without the prompt file (the ninth probe)."""
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


@pytest.mark.parametrize("argv, says", [
    (["bench", "--plot", "{ro}/figure.png"], "--plot {ro}/figure.png: {ro} is not writable by this user"),
    (["cache", "--out", "{ro}/cache/new"], "--out {ro}/cache/new: {ro} is not writable by this user"),
    (["train", "--recipe", "tiny", "--cache", "{ro}", "--out", "{ro}"], "--out {ro}: is not writable by this user"),
])
def test_an_output_this_user_may_not_write_is_refused_before_loading(tmp_path, monkeypatch, argv, says) -> None:
    """bench --plot into a read-only directory failed after the whole bench, naming its temporary file; now
    it is the only line, before anything loads."""
    ro = tmp_path / "ro"
    ro.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (Path(path) != ro or not mode & os.W_OK)
                        and real(path, mode, **kw))  # a read-only directory, even for root
    result = CliRunner().invoke(app, [arg.replace("{ro}", str(ro)) for arg in argv])
    assert says.replace("{ro}", str(ro)) in one_line_error(result) and len(result.stderr.strip().splitlines()) == 1


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


# round 9: the seventh probe

@pytest.mark.parametrize("key, value, says", [
    ("rms_eps", -1.0, "rms_eps must be a finite number > 0, got -1.0"),  # NaN confidences: a ValueError traceback
    ("rope_theta", 0, "rope_theta must be a finite number > 0, got 0"),
    ("window", 10**20, "window must be at most 2147483647"),  # an OverflowError traceback at the first round
    ("block_size", 2**31 - 1, "block_size must be at most 1024"),
])
def test_a_drafter_config_past_what_it_can_run_is_one_line(tiny_trained_drafter, tmp_path, key, value, says) -> None:
    target, drafter = tiny_trained_drafter
    damaged = shutil.copytree(drafter, tmp_path / "damaged")
    config = json.loads((damaged / "config.json").read_text())
    (damaged / "config.json").write_text(json.dumps(config | {key: value}))
    error = one_line_error(CliRunner().invoke(app, ["generate", "--target", str(target), "--drafter", str(damaged),
                                                    "--prompt", "hi", "--max-new-tokens", "2"]))
    assert says in error


def test_a_calibration_with_a_huge_number_is_one_line(tmp_path) -> None:
    """An integer of more than 4300 digits was a ValueError traceback."""
    from minispark.model.calibration import Calibration, CalibrationError

    path = tmp_path / "calibration.json"
    path.write_text('{"rounds": 1' + "0" * 5000 + "}")
    with pytest.raises(CalibrationError, match="a number too long to read"):
        Calibration.load(path)


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


@pytest.mark.parametrize("damage, says", [
    ("shard-outside", "a shard named '/etc/passwd', not a file of its directory"),  # '/etc/passwd: missing or truncated'
    ("shard-of-another-set", "a shard named '../other/answers-00000.safetensors'"),  # trained on without a word
    ("shards-object", "'shards' is not a list"),
    # the eighth probe: KeyError and TypeError tracebacks, a count taken as it came, a version that read "1 (... 1)"
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
    # the fourteenth probe: the kernels package bitsandbytes loads through logged its offline trust check
    assert "publisher trust check" not in result.output


# ---------------------------------------------------------------------- the eighth probe
def test_hand_edited_files_may_start_with_a_byte_order_mark(files, tmp_path) -> None:
    """A Windows editor's BOM was 'Unexpected UTF-8 BOM (decode using utf-8-sig)' (JSON) or 'Invalid statement
    (at line 1, column 1)' (TOML); prompt files already took it."""
    from minispark.core.defaults import RECIPE_DIR, SHIPPED_TABLES
    from minispark.model.calibration import Calibration
    from minispark.model.drafter_dir import read_drafter_dir
    from minispark.serving.sps import SPSTable
    from minispark.target.remembered import read_record
    from minispark.training.recipes import load_recipe

    def with_bom(source: Path, name: str) -> Path:
        copy = tmp_path / name
        copy.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
        return copy

    shipped = next(SHIPPED_TABLES.glob("*.json"))
    assert SPSTable.load(with_bom(shipped, "table.json")) == SPSTable.load(shipped)
    assert load_recipe(with_bom(RECIPE_DIR / "tiny.toml", "tiny.toml")).steps == load_recipe("tiny").steps
    drafter = shutil.copytree(files["fakedrafter"], tmp_path / "drafter")
    (drafter / "config.json").write_bytes(b"\xef\xbb\xbf" + b'{"block_size": 4}')
    (drafter / "target.json").write_bytes(b"\xef\xbb\xbf" + b'{"source": "x", "identity": "x@y"}')
    assert read_drafter_dir(drafter).raw == {"block_size": 4} and read_record(drafter) is not None
    (drafter / "calibration.json").write_bytes(b"\xef\xbb\xbf" + b'{"temperatures": [1.0], "version": 1}')
    assert Calibration.load(drafter / "calibration.json").temperatures == [1.0]


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


def test_an_imported_config_is_read_by_type(tiny_trained_drafter, tmp_path) -> None:
    """int() and bool() took "1,2" and "x" (tracebacks), "4" and "yes" (without a word); .get on text or a number
    where an object belongs was an AttributeError."""
    target, drafter = tiny_trained_drafter
    exported = tmp_path / "ds"
    runner = CliRunner()
    assert runner.invoke(app, ["export", str(drafter), "--out", str(exported), "--target", str(target)]).exit_code == 0
    config = json.loads((exported / "config.json").read_text())
    for key, value, says in (("target_layer_ids", "1,2", "target_layer_ids must be a list of whole numbers, got '1,2'"),
                             ("minispark_window", "x", "minispark_window must be a whole number, got 'x'"),
                             ("block_size", "4", "block_size must be a whole number, got '4'"),
                             ("enable_confidence_head", "yes", "enable_confidence_head must be true or false"),
                             ("rope_scaling", "x", "rope_scaling must be an object, got 'x'")):
        (exported / "config.json").write_text(json.dumps({**config, key: value}))
        result = runner.invoke(app, ["import", str(exported), "--out", str(tmp_path / "imported"), "--target",
                                     str(target)])
        assert says in one_line_error(result)
    assert not (tmp_path / "imported").exists()


@pytest.mark.parametrize("field, value, says", [
    ("model", 5, "'model' must be a string"),  # said "'model' is required"
    ("frequency_penalty", 1.5, "'frequency_penalty' 1.5: this server does not apply it"),  # ignored without a word
    ("logprobs", True, "'logprobs' true: this server does not apply it; leave it out (or send false)"),
    ("top_k", 20, "'top_k' 20"),
    ("tools", [{"type": "function"}], "'tools'"),
    # the ninth probe: asked for a tool call, a legacy function call or audio, and got text without a word
    ("tool_choice", "required", "'tool_choice' \"required\": this server does not apply it"),
    ("functions", [{"name": "f"}], "'functions'"),
    ("function_call", {"name": "f"}, "'function_call'"),
    ("modalities", ["text", "audio"], "'modalities'"),
    ("audio", {"voice": "alloy", "format": "wav"}, "'audio'"),
    ("web_search_options", {}, "'web_search_options' {}: this server does not apply it; leave it out (or send null)"),
])
def test_serve_refuses_what_it_would_not_apply(tmp_path, field, value, says) -> None:
    from minispark.server.protocol import APIError, ServeLimits, parse_chat_request

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], field: value}
    with pytest.raises(APIError) as caught:
        parse_chat_request(body, ServeLimits(), None, tmp_path, vision=False)
    assert caught.value.status == 400 and says in caught.value.message and caught.value.param == field
    for no_op in ({"frequency_penalty": 0}, {"logprobs": False}, {"top_k": -1}, {"user": "bob"}, {"tool_choice": "auto"},
                  {"modalities": ["text"]}):  # ask for nothing
        parse_chat_request({**body, field: None, **no_op} if field != "model" else {**body, "model": "m", **no_op},
                           ServeLimits(), None, tmp_path, vision=False)


def test_serve_refuses_two_token_limits_that_disagree(tmp_path) -> None:
    """max_tokens 2 with max_completion_tokens 3 was answered with 3 tokens, the other ignored without a word (the
    ninth probe); the same number twice asks for one thing."""
    from minispark.server.protocol import APIError, ServeLimits, parse_chat_request

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "max_completion_tokens": 3}
    with pytest.raises(APIError, match="'max_completion_tokens' 3 and 'max_tokens' 2 disagree; send one of them"):
        parse_chat_request(body, ServeLimits(), None, tmp_path, vision=False)
    assert parse_chat_request({**body, "max_tokens": 3}, ServeLimits(), None, tmp_path, vision=False).max_tokens == 3


def read_served_body(body: bytes) -> object:
    """What serve's body reader makes of ``body``."""
    import asyncio

    from starlette.requests import Request

    from minispark.server.app import read_body

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    return asyncio.run(read_body(Request({"type": "http", "method": "POST", "headers": []}, receive), 1 << 20))


def test_serve_refuses_a_key_given_twice() -> None:
    """{"max_tokens": 2, "max_tokens": 5} was answered with 5 tokens, without a word (prompt files refuse it)."""
    from minispark.server.protocol import APIError

    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi", "role": "system"}], "max_tokens": 2}'
    with pytest.raises(APIError, match="the request body gives 'role' twice; send it once"):
        read_served_body(body)


def test_serve_reads_bodies_as_utf8() -> None:
    """A body starting \\xff\\xfe was guessed to be UTF-16 and refused with an unrelated JSON error; a UTF-8 BOM
    is tolerated (RFC 8259)."""
    from minispark.server.protocol import APIError

    with pytest.raises(APIError, match=r"the request body is not UTF-8 text \(byte 0xff at offset 0\)"):
        read_served_body('{"model": "m"}'.encode("utf-16"))
    assert read_served_body('\ufeff{"model": "m"}'.encode("utf-8")) == {"model": "m"}


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


# round 13: the eleventh probe
@pytest.mark.parametrize("kind, text, says", [
    (int, "1_000", "expected a whole number (no '_': digit grouping is refused)"),  # typer read it as 1000
    (int, "5.0", "expected a whole number"),  # typer read it as 5
    (int, "\u0663", "expected a whole number (in ASCII digits)"),
    (int, "abc", "expected a whole number"),
    (float, "0.5_0", "expected a number (no '_': digit grouping is refused)"),  # typer read it as 0.5
    (float, "\uff10.5", "expected a number (in ASCII digits)"),
])
def test_every_number_option_reads_numbers_by_the_one_rule(kind: type, text: str, says: str) -> None:
    """Every int (float) option of every command, and the global --max-pixels, refuses what
    ``validate_lists.is_number_text`` refuses, as one line naming the flag, before anything runs (typer's own
    conversion read '--max-new-tokens 1_000' as 1000)."""
    import typer.main

    group = typer.main.get_command(app)
    commands = [([], group, ["generate"])] + [([name], command, []) for name, command in group.commands.items()]
    flags = [(before, param.opts[0], after) for before, command, after in commands for param in command.params
             if param.type_descriptor.annotation is kind and param.param_type_name == "option"]
    assert len(flags) > (50 if kind is int else 15)
    for before, flag, after in flags:
        error = one_line_error(CliRunner().invoke(app, before + [flag, text] + after))
        assert f"{flag} {text!r}: {says}" in error, error


def test_numbers_by_the_one_rule_still_pass() -> None:
    for argv in (["generate", "--temperature", "1e-1"], ["generate", "--gamma", "+3"], ["--max-pixels", "4000"]):
        assert CliRunner().invoke(app, argv + ["--help"]).exit_code == 0, argv


def test_an_output_directory_that_refuses_writes_is_one_line(tiny_dir, tmp_path, monkeypatch) -> None:
    """os.access can pass a directory where the write is then refused (an ACL, NFS root squash; and root, which
    these tests run as, passes chmod): the one line names the directory, not the temporary file that was never
    made, exit 2, and nothing of the user's is touched."""
    import errno
    import tempfile

    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "notes.txt").write_text("mine\n")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Hi there"}) + "\n")

    def refused(make):
        def refusing(*args, dir=None, **kwargs):
            if dir is not None and Path(dir).is_relative_to(ro):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.path.join(dir, ".x.abc.tmp"))
            return make(*args, dir=dir, **kwargs)
        return refusing

    monkeypatch.setattr(tempfile, "mkstemp", refused(tempfile.mkstemp))
    monkeypatch.setattr(tempfile, "mkdtemp", refused(tempfile.mkdtemp))
    out = ro / "answers"
    error = one_line_error(CliRunner().invoke(app, ["answers", "--target", str(tiny_dir("llama")), "--prompts",
                                                    str(prompts), "--out", str(out), "--num-samples", "1",
                                                    "--max-new-tokens", "2"]))
    assert f"{out}: permission denied" in error and ".tmp" not in error, error
    assert [p.name for p in ro.iterdir()] == ["notes.txt"] and (ro / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize("role", [["user"], {"name": "user"}])
def test_a_role_that_is_no_string_is_a_400(tmp_path, role) -> None:
    """A list or object as a message's role was a 500 (unhashable, looked up in a dict of role aliases)."""
    from minispark.server.protocol import APIError, ServeLimits, parse_chat_request

    body = {"model": "m", "messages": [{"role": role, "content": "hi"}]}
    with pytest.raises(APIError, match=r"messages\[0\].role .*: expected system, developer, user or assistant"):
        parse_chat_request(body, ServeLimits(), None, tmp_path, vision=False)
    developer = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert parse_chat_request({"model": "m", "messages": developer}, ServeLimits(), None, tmp_path,
                              vision=False).messages[0]["role"] == "system"


def test_serve_says_an_image_dir_is_missing(tmp_path) -> None:
    """A missing --image-dir was "not a directory", as a file is."""
    (tmp_path / "afile").write_text("x\n")
    for name, says in (("missing", "no such directory"), ("afile", "not a directory")):
        error = one_line_error(CliRunner().invoke(app, ["serve", "--image-dir", str(tmp_path / name)]))
        assert f"--image-dir {tmp_path / name}: {says}" in error, error


def test_a_run_a_cache_or_a_drafter_in_the_wrong_place_says_what_it_is(tiny_trained_drafter) -> None:
    """A training run, a cache or an answer set where a drafter goes said only 'no config.json', a drafter given as
    the target transformers' 'Unrecognized model', and as a cache 'a minispark-written-files manifest' (twelfth
    probe)."""
    run = tiny_trained_drafter[1].parent
    error = one_line_error(CliRunner().invoke(app, ["generate", "--drafter", str(run), "--prompt", "hi"]))
    assert f"it holds a minispark training run (train_config.json): its drafter is {run / 'drafter'}" in error
    error = one_line_error(CliRunner().invoke(app, ["generate", "--target", str(run / "drafter"), "--prompt", "hi",
                                                      "--drafter", "none"]))
    assert error.endswith("a minispark drafter, not a target model; give it to --drafter, and --target the model it "
                          "drafts for")  # said "Unrecognized model ... Should have a `model_type` key"
    error = one_line_error(CliRunner().invoke(app, ["export", str(run.parent / "cache"), "--out", str(run / "x")]))
    assert error.endswith("not a drafter directory (no config.json); it holds a minispark-cache manifest "
                          "(manifest.json)")
    error = one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", "--cache", str(run / "drafter"),
                                                    "--out", str(run.parent / "elsewhere")]))
    assert error.endswith("holds a drafter or checkpoint minispark wrote, not a minispark-cache")


def test_an_out_name_that_is_not_utf8_is_written(files: dict[str, str], tmp_path: Path) -> None:
    """`--out $'u/tr-\\xe9'`: the writer lock hashed the name as UTF-8 text and failed with UnicodeEncodeError."""
    import subprocess
    import sys

    out = tmp_path / os.fsdecode(b"tr-\xe9")  # the byte 0xe9 alone: a latin-1 name, not UTF-8
    run = subprocess.run([sys.executable, "-m", "minispark.cli", "answers", "--target", files["tiny"], "--prompts",
                          files["ok.jsonl"], "--out", out, "--max-new-tokens", "2"], capture_output=True, timeout=300)
    assert run.returncode == 0 and b"Traceback" not in run.stderr, run.stderr.decode(errors="replace")
    assert os.path.isdir(out) and os.fsencode(out) in run.stdout + run.stderr  # printed as its own bytes


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


def test_a_closed_stdout_still_runs_the_command(files: dict[str, str], tmp_path: Path) -> None:
    """`minispark generate ... >&-`: every command failed at import ('NoneType' object has no attribute 'isatty')."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "minispark.cli", "answers", "--target", files["tiny"], "--prompts",
                          files["ok.jsonl"], "--out", str(tmp_path / "out"), "--max-new-tokens", "2"],
                         stdout=None, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1), timeout=300)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert (tmp_path / "out").is_dir()


def test_a_fresh_seed_is_one_seed_takes() -> None:
    """The seed `generate --json` and chat's /save report (torch's fresh 64-bit seed) was refused by --seed."""
    from minispark import validate
    from minispark.target.sampling import make_generator

    for _ in range(20):
        assert validate.seed(make_generator(None).initial_seed()) is not None


def test_a_bad_flag_is_refused_before_torch_is_imported() -> None:
    """`generate --mode turbo` waited ~4 s for torch and transformers before its one-line error."""
    import subprocess
    import sys

    script = ("import sys\nfrom minispark.cli import run\ntry:\n    run(sys.argv[1:])\nexcept SystemExit as exc:\n"
              "    print(exc.code, sorted({'torch', 'transformers'} & set(sys.modules)))\n")
    for args, error in ((["generate", "--mode", "turbo"], "--mode turbo: choose from"),
                        (["generate", "--max-new-tokens", "-5"], "--max-new-tokens must be >= 1"),
                        (["chat", "--temperature", "-1"], "--temperature"),
                        (["serve", "--port", "-1"], "--port must be >= 0"),
                        (["bench", "--repeats", "0"], "--repeats must be >= 1"),
                        (["calibrate", "--drafter", "d", "--prompts", "p", "--min-rounds", "0"], "--min-rounds")):
        run = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120)
        assert run.stdout.split("\n")[0] == "2 []", (args, run.stdout, run.stderr)
        assert run.stderr.startswith("error: ") and error in run.stderr, (args, run.stderr)


def test_a_read_only_file_system_is_named_as_such(monkeypatch, tmp_path: Path) -> None:
    """A read-only mount was "not writable by this user (permission denied)", and a write failing there with
    EROFS was a traceback; root may write anywhere else, so the file system is what to name."""
    import errno
    from types import SimpleNamespace

    from minispark import validate
    from minispark.core.errors import MinisparkError
    from minispark.measuring import simulate

    real_statvfs = os.statvfs
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=os.ST_RDONLY))
    with pytest.raises(MinisparkError, match=r"^--out .*/new: .* is on a read-only file system; write elsewhere$"):
        validate.writable(tmp_path / "new", "--out")
    monkeypatch.setattr(os, "statvfs", real_statvfs)  # a read-write one: the permissions, as before
    with pytest.raises(MinisparkError, match=r"is not writable by this user \(permission denied\)$"):
        validate.writable(tmp_path / "new", "--out")
    monkeypatch.undo()

    def fails(error: OSError):
        def theta_table(*_args, **_kwargs):
            raise error
        return theta_table

    command = ["simulate", "--conf", "0.9", "--sps-inline", "1.0,0.5"]
    monkeypatch.setattr(simulate, "theta_table", fails(OSError(errno.EROFS, "Read-only file system",
                                                               str(tmp_path / "t.json"))))
    assert one_line_error(CliRunner().invoke(app, command)) == (f"error: {tmp_path / 't.json'}: read-only file "
                                                                "system; write it elsewhere")
    monkeypatch.setattr(simulate, "theta_table", fails(PermissionError(errno.EACCES, "Permission denied",
                                                                       str(tmp_path / "t.json"))))
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=os.ST_RDONLY))
    assert one_line_error(CliRunner().invoke(app, command)).endswith("t.json: read-only file system; write it "
                                                                     "elsewhere")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
def test_a_full_standard_output_is_named() -> None:
    """`minispark simulate ... > /dev/full` blamed "a file being written", which the user never named."""
    import subprocess
    import sys

    for json_flag in ([], ["--json"]):  # rich's console, and the JSON written to sys.stdout
        with open("/dev/full", "w") as full:
            run = subprocess.run([sys.executable, "-m", "minispark.cli", "simulate", "--conf", "0.9,0.8",
                                  "--sps-inline", "1.0,0.5,0.45", *json_flag], stdout=full, stderr=subprocess.PIPE,
                                 text=True, timeout=120)
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert run.stderr.startswith("error: standard output: no space left on the device it is redirected to"), \
            run.stderr


def test_sigterm_of_a_resumable_command_says_how_to_resume(tiny_dir, monkeypatch, tmp_path: Path) -> None:
    """`kill` of `minispark cache` ended it without a word, where Ctrl-C says the shards are kept and how to resume."""
    import signal
    import time

    from minispark.data import cache

    def killed(*_args, **_kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs before this returns
        pytest.fail("SIGTERM did not stop the command")

    caught: list[int] = []
    monkeypatch.setattr(cache, "build_cache", killed)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: caught.append(signum))  # if not handled: not us
    try:
        prompts = tmp_path / "p.jsonl"
        prompts.write_text('{"prompt": "hi"}\n')
        result = CliRunner().invoke(app, ["cache", "--target", str(tiny_dir("llama")), "--prompts", str(prompts),
                                          "--out", str(tmp_path / "c")])
        restored = signal.getsignal(signal.SIGTERM)
    finally:
        ours = signal.signal(signal.SIGTERM, previous)
    assert result.exit_code == 143 and caught == [], (result.exit_code, result.output, result.exception)
    assert re.search(r"^terminated; finished shards are kept; run the same command again to resume: minispark ",
                     result.stderr, re.M), result.stderr
    assert restored is ours  # the command's handler is gone once it ended


def test_a_full_disk_at_profile_plot_says_the_table_was_written(tiny_dir, monkeypatch, tmp_path: Path) -> None:
    """`profile --plot` on a full disk: the error named the PNG only, as if the minutes of measuring were lost."""
    from minispark.core.atomic import NoSpaceError
    from minispark.measuring import profiler

    def full(table, path):
        raise NoSpaceError(path)

    monkeypatch.setattr(profiler, "plot_sps", full)
    result = CliRunner().invoke(app, ["profile", "--target", str(tiny_dir("llama")), "--contexts", "8", "--rounds",
                                      "1", "--warmup", "0", "--allow-busy", "--out", str(tmp_path / "tables"),
                                      "--plot", str(tmp_path / "sps.png")])
    table = next((tmp_path / "tables").glob("*.json"))
    error = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 2 and len(error) == 1, (result.output, result.exception)
    assert error[0].startswith(f"error: the SPS table was written to {table}; only the plot failed: "
                               f"{tmp_path / 'sps.png'}: no space left on the device")
    assert f"wrote {table}" in result.stdout  # the figures are on the screen too
