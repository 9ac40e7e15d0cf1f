"""The ``files`` fixture: bad and odd inputs by name, built once for every bad-input test of the CLI."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.tiny_models import make_test_image
from tests.helpers import REPO, bomb_png


@pytest.fixture(scope="session")
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
