"""Bad input to every command: help texts, numbers, variables, outputs, disks and streams: exit status 2 and one ``error:`` line naming the flag or file, no
traceback, nothing half written.

    .venv/bin/python -m pytest -q tests/cli/test_cli_input.py
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
from tests.helpers import full_disk, one_line_error


class _RunsCode:
    """Unpickling this would create ``marker``: a stand-in for a weight file that runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return os.mkdir, (str(self.marker),)


def _bracketed_copy(source: Path, where: Path) -> Path:
    """``source`` copied (hard links) to a path whose names rich would read as markup: ``[v2]`` (a style,
    silently dropped) and ``[/]`` (a closing tag, which raises)."""
    (where / "a[").mkdir(parents=True)
    copy = where / "a[" / "]b[v2]"
    shutil.copytree(source, copy, copy_function=os.link)
    return copy


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
    """typer renders help as rich markup, where '[default: auto]' is a style tag and vanished from --help
    (--runtime, --draft-precision, --max-pixels, simulate's --draws and --seed lost their defaults)."""
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


def test_a_user_dir_that_cannot_take_the_hash_memo_fails_nothing(tiny_dir, tmp_path, monkeypatch) -> None:
    """The weights-hash memo (hashes.json in $MINISPARK_CACHE) is only a cache: a full disk there failed profile
    and calibrate after their whole run, naming hashes.json."""
    from minispark.target.loading import load_target

    monkeypatch.setenv("MINISPARK_CACHE", str(tmp_path / "user"))
    full_disk(monkeypatch, "hashes.json")
    assert load_target(str(tiny_dir("llama"))).identity()["weights_hash"] not in ("", "unknown")
    assert not (tmp_path / "user" / "hashes.json").exists()


def test_a_blocked_malicious_pickle_is_one_line(tiny_dir, tmp_path, monkeypatch) -> None:
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


def test_help_shows_what_to_type() -> None:
    """No ``<bool>`` after a flag, and a repeatable option as its element, not ``<list[Path]>``."""
    import typer.main

    for name in ["", *typer.main.get_command(app).commands]:
        result = CliRunner().invoke(app, [name, "--help"] if name else ["--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0 and "<bool>" not in result.output, name
        assert "<list[" not in result.output, name  # options and variadic arguments (cache-mix PARTS...)
    assert re.search(r"--image\s+<path>\s+Image file", CliRunner().invoke(app, ["generate", "--help"],
                                                                         env={"COLUMNS": "200"}).output)


def test_a_refused_command_leaves_no_empty_out_it_created(tmp_path) -> None:
    out = tmp_path / "new" / "run"
    one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", "device=cuda", "--cache", str(tmp_path),
                                            "--out", str(out)]))
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()  # a directory the user made stays, empty or not
    one_line_error(CliRunner().invoke(app, ["train", "--recipe", "tiny", "device=cuda", "--cache", str(tmp_path),
                                            "--out", str(tmp_path / "mine")]))
    assert (tmp_path / "mine").is_dir()


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
                     "--warmup", "0", "--cooldown", "0", "--allow-busy", "--out", str(out)], None),
        "export": (["export", str(tiny_trained_drafter[1]), "--out", str(out)], None),
    }[command]
    result = CliRunner().invoke(app, argv, input=stdin)
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    shown = "".join(result.output.split())  # a long line may wrap, a centred title's fold padded with spaces
    if command in ("generate", "chat", "bench"):
        assert str(target) in shown  # the hint, the chat header, the bench table's title (the paths hold no spaces)
    if command != "generate":
        assert str(out) in shown  # wrote / saved / the cache's summary
    if command == "profile":
        assert "median[min]spread" in shown
    if command == "chat":
        assert f"error:target{target}istext-only" in shown


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
    ``check_lists.is_number_text`` refuses, as one line naming the flag, before anything runs (typer's own
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


def test_a_closed_stdout_still_runs_the_command(files: dict[str, str], tmp_path: Path) -> None:
    """`minispark generate ... >&-`: every command failed at import ('NoneType' object has no attribute 'isatty')."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "minispark.cli", "answers", "--target", files["tiny"], "--prompts",
                          files["ok.jsonl"], "--out", str(tmp_path / "out"), "--max-new-tokens", "2"],
                         stdout=None, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.close(1), timeout=300)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert (tmp_path / "out").is_dir()


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

    from minispark.core import checks
    from minispark.core.errors import MinisparkError
    from minispark.measuring import simulate

    real_statvfs = os.statvfs
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=os.ST_RDONLY))
    with pytest.raises(MinisparkError, match=r"^--out .*/new: .* is on a read-only file system; write elsewhere$"):
        checks.writable(tmp_path / "new", "--out")
    monkeypatch.setattr(os, "statvfs", real_statvfs)  # a read-write one: the permissions, as before
    with pytest.raises(MinisparkError, match=r"is not writable by this user \(permission denied\)$"):
        checks.writable(tmp_path / "new", "--out")
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
