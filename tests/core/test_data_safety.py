"""No command modifies what it did not create: user files in --out, foreign checkpoints, planted
symlinks and the shipped tables are hashed before and after, and must be unchanged.

    .venv/bin/python -m pytest -q tests/core/test_data_safety.py
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minispark.core.atomic import WRITTEN_MANIFEST, open_append, write_dir_atomic, write_json_atomic
from minispark.measuring.figures import save_figure
from minispark.cli import app
from minispark.cli.app import json_safe
from minispark.core.errors import MinisparkError
from tests.helpers import REPO, snapshot

SHIPPED = [REPO / "sps_tables", REPO / "drafters"]
CACHE_FLAGS = ["--num-samples", "2", "--max-new-tokens", "12", "--layers", "1,2", "--window", "16", "--block", "4",
               "--anchors-per-sample", "4", "--anchor-run", "4", "--feature-dtype", "fp32", "--batch-size", "2"]


@pytest.fixture(scope="module", autouse=True)
def shipped_untouched():
    """No test in this module may change a shipped SPS table or drafter."""
    before = snapshot(*SHIPPED)
    yield
    assert snapshot(*SHIPPED) == before


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("Tell me a story.", "What is 2 + 2?")))
    return path


def run(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_cache_refuses_an_out_of_user_files(tiny_dir, prompts: Path, tmp_path: Path) -> None:
    """A directory of someone's files is never filled with shards beside them: refused, untouched."""
    out = tmp_path / "u"
    (out / "sub").mkdir(parents=True)
    (out / "t.tmp").write_text("mine\n")
    (out / "notes.txt").write_text("my notes\n")
    (out / "sub" / "data.bin").write_bytes(b"\x00\x01")
    before = snapshot(out)
    result = run("cache", "--target", tiny_dir("llama"), "--prompts", prompts, "--out", out, *CACHE_FLAGS)
    assert result.exit_code == 2 and f"--out {out}: holds notes.txt, which minispark did not write" in result.stderr
    assert snapshot(out) == before


@pytest.mark.parametrize("plant", ["file", "symlink"])
def test_cache_refuses_a_shard_it_did_not_write(tiny_dir, prompts: Path, tmp_path: Path, plant: str) -> None:
    out, victim = tmp_path / "u", tmp_path / "victim.safetensors"
    out.mkdir()
    victim.write_bytes(b"someone else's weights")
    shard = out / "shard-00000.safetensors"
    shard.write_bytes(victim.read_bytes()) if plant == "file" else shard.symlink_to(victim)
    before = snapshot(out, victim)
    result = run("cache", "--target", tiny_dir("llama"), "--prompts", prompts, "--out", out, *CACHE_FLAGS)
    assert result.exit_code == 2 and "not a shard of this cache" in result.stderr
    assert snapshot(out, victim) == before


def test_train_refuses_foreign_checkpoints(tmp_path: Path) -> None:
    out = tmp_path / "o"
    for name in ("checkpoint-500", "checkpoint-1000"):
        (out / name).mkdir(parents=True)
        (out / name / "trainer_state.json").write_text("{}\n")
    before = snapshot(out)
    result = run("train", "--recipe", "tiny", "--cache", tmp_path, "--out", out, "steps=4", "checkpoint_every=2")
    assert result.exit_code == 2 and "--out" in result.stderr
    assert snapshot(out) == before


@pytest.fixture(scope="module")
def spelled_cache(tiny_dir, prompts: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache built with the target spelled as a relative path from its parent directory."""
    target = tiny_dir("llama")
    out = tmp_path_factory.mktemp("spelled") / "cache"
    cwd = os.getcwd()
    os.chdir(target.parent)
    try:
        result = run("cache", "--target", f"./{target.name}/", "--prompts", prompts, "--out", out, *CACHE_FLAGS)
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    return out


def test_train_from_another_directory_and_json_alone_on_stdout(spelled_cache: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the cache recorded its target by resolved path, not as spelled
    result = run("train", "--recipe", "tiny", "--cache", spelled_cache, "--out", tmp_path / "o", "steps=2",
                 "checkpoint_every=2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # one object: the drafter's path, the steps, the logged rows
    assert report["metrics"][-1]["step"] == 2 and report["last_step"] == 2 and Path(report["drafter"]).is_dir()


def test_resume_never_writes_through_planted_symlinks(spelled_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    args = ["train", "--recipe", "tiny", "--cache", spelled_cache, "--out", out, "steps=2", "checkpoint_every=2",
            "--no-progress"]
    assert run(*args).exit_code == 0
    victim, victim_dir = tmp_path / "victim.txt", tmp_path / "victim-dir"
    victim.write_text("precious\n")
    victim_dir.mkdir()
    (victim_dir / "config.json").write_text("{\"mine\": true}\n")
    (out / "metrics.jsonl").unlink()
    (out / "metrics.jsonl").symlink_to(victim)
    for path in (out / "drafter").iterdir():
        path.unlink()
    (out / "drafter").rmdir()
    (out / "drafter").symlink_to(victim_dir, target_is_directory=True)
    before = snapshot(victim, victim_dir)
    result = run(*args, "--resume")
    assert result.exit_code == 2 and "symbolic link" in result.stderr, result.output
    assert snapshot(victim, victim_dir) == before
    assert not (out / "metrics.jsonl").is_symlink()  # replaced, not followed


def test_profile_writes_user_tables_looked_up_first(tiny_dir, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from minispark.serving.builder import matching_sps_table
    from minispark.serving.sps import SPSTable, user_tables_dir
    from minispark.target.loading import load_target

    monkeypatch.setenv("MINISPARK_SPS_TABLES", str(tmp_path / "user-tables"))
    result = run("profile", "--target", tiny_dir("llama"), "--contexts", "8", "--max-tokens", "8", "--rounds", "1",
                 "--warmup", "0", "--cooldown", "0", "--allow-busy", "--json")
    assert result.exit_code == 0, result.output
    written = Path(json.loads(result.stdout)["path"])
    assert written.parent == user_tables_dir() == tmp_path / "user-tables"
    table, warning = matching_sps_table(load_target(str(tiny_dir("llama"))), None)
    assert table == SPSTable.load(written) and warning is None


def test_find_table_prefers_the_first_directory(tmp_path: Path) -> None:
    from minispark.serving.sps import SPSTable, find_table

    tables = {}
    for name, sps in (("user", [1.0, 0.9]), ("shipped", [1.0, 0.5])):
        table = SPSTable.from_inline(sps, device="cpu", target="t")
        table.save(table.path_in(tmp_path / name))
        tables[name] = table
    assert find_table([tmp_path / "user", tmp_path / "shipped"], "cpu", "t") == tables["user"]
    assert find_table([tmp_path / "missing", tmp_path / "shipped"], "cpu", "t") == tables["shipped"]


def test_writes_replace_symlinks_instead_of_following_them(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    links = {name: tmp_path / name for name in ("save.json", "plot.png", "metrics.jsonl")}
    for link in links.values():
        link.symlink_to(victim)
    write_json_atomic(links["save.json"], {"turns": []})  # chat /save, calibration.json, SPS tables, manifests
    fig = plt.figure()
    save_figure(fig, links["plot.png"])  # bench/calibrate/profile --plot
    plt.close(fig)
    with pytest.raises(MinisparkError, match="symbolic link"):
        open_append(links["metrics.jsonl"])  # training metrics
    assert victim.read_text() == "precious\n"
    assert not links["save.json"].is_symlink() and not links["plot.png"].is_symlink()


def test_ctrl_c_between_the_renames_keeps_the_old_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory written whole moves the old one aside, then the new one in: Ctrl-C between the two renames
    left neither (the new one's temporary removed, the old one hidden as .NAME.old)."""
    drafter = tmp_path / "drafter"
    write_dir_atomic(drafter, lambda tmp: (tmp / "w.txt").write_text("old"))
    real, renames = os.replace, []

    def replace(source, destination) -> None:
        real(source, destination)
        renames.append(destination)
        if len(renames) == 1:  # the old directory moved aside; the new one not in yet
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        write_dir_atomic(drafter, lambda tmp: (tmp / "w.txt").write_text("new"))
    assert (drafter / "w.txt").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["drafter"]


def _killed_writing(drafter: Path, kill_at: str) -> None:
    """Rewrite ``drafter`` in a forked child that SIGKILLs itself (no handler runs) inside the fill or between
    the two renames."""
    import signal

    pid = os.fork()
    if pid == 0:  # the child: nothing here may return into pytest
        try:
            real = os.replace

            def replace(source, destination) -> None:
                if kill_at == "record" and Path(source).name.startswith(f".{WRITTEN_MANIFEST}."):
                    os.kill(os.getpid(), signal.SIGKILL)  # inside the temporary's first record: it holds only that
                real(source, destination)
                if Path(source) == drafter:  # the old directory moved aside; the new one not in yet
                    os.kill(os.getpid(), signal.SIGKILL)

            def fill(tmp: Path) -> None:
                (tmp / "w.txt").write_text("new")
                if kill_at == "fill":
                    os.kill(os.getpid(), signal.SIGKILL)

            os.replace = replace
            write_dir_atomic(drafter, fill)
        finally:
            os._exit(1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == -signal.SIGKILL


@pytest.mark.parametrize("kill_at", ["fill", "renames", "record"])
def test_a_sigkill_inside_a_directory_write_is_undone_by_the_next(tmp_path: Path, kill_at: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL leaves a temporary the drafter's size (a checkpoint's), or between the renames only .NAME.old: the
    next write of that directory puts the old one back first (its check then sees it) and removes the temporaries
    minispark's record marks as its own (or, killed inside that record's own first write, the record's temporary
    alone: a run's checkpoint temporary was kept for ever); a look-alike without the record is not touched."""
    import minispark.core.atomic

    monkeypatch.setattr(minispark.core.atomic, "_TEMP_GRACE_S", 0.0)  # the kill was long ago
    drafter = tmp_path / "drafter"
    write_dir_atomic(drafter, lambda tmp: (tmp / "w.txt").write_text("old"))
    (tmp_path / ".drafter.mynotes1").mkdir()  # the user's, named like a temporary
    (tmp_path / ".drafter.mynotes1" / "n.txt").write_text("mine")
    _killed_writing(drafter, kill_at)
    left = {p.name for p in tmp_path.iterdir()}
    assert ("drafter" in left) == (kill_at != "renames") and (".drafter.old" in left) == (kill_at == "renames")
    assert len(left) == 3  # and the new one's temporary
    write_dir_atomic(drafter, lambda tmp: (tmp / "w.txt").write_text("newer"))
    assert (drafter / "w.txt").read_text() == "newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".drafter.mynotes1", "drafter"]
    assert (tmp_path / ".drafter.mynotes1" / "n.txt").read_text() == "mine"


def test_a_sigkill_before_a_file_rename_leaves_nothing_the_next_write_keeps(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A temporary a killed write left beside ``calibration.json`` (which a later replacement of the drafter
    directory refused as a file minispark did not write) goes with the next write of that file; one a live write
    holds, or too new to tell, stays."""
    import fcntl
    import tempfile

    import minispark.core.atomic

    target = tmp_path / "calibration.json"
    dead = Path(tempfile.mkstemp(prefix=".calibration.json.", suffix=".tmp", dir=tmp_path)[1])  # nobody holds it
    live_fd, live = tempfile.mkstemp(prefix=".calibration.json.", suffix=".tmp", dir=tmp_path)
    fcntl.flock(live_fd, fcntl.LOCK_EX)  # a write in progress
    write_json_atomic(target, {"a": 1})
    assert dead.exists()  # too new: its writer may not have locked it yet
    monkeypatch.setattr(minispark.core.atomic, "_TEMP_GRACE_S", 0.0)
    write_json_atomic(target, {"a": 2})
    assert not dead.exists() and Path(live).exists() and json.loads(target.read_text()) == {"a": 2}
    os.close(live_fd)


def test_same_target_spelled_differently(tiny_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    from minispark.core.identity import same_target, target_id
    from minispark.target.loading import load_target

    target = tiny_dir("llama")
    spellings = [str(target), str(target) + "/", f"{target}/../{target.name}"]
    monkeypatch.chdir(target.parent)
    spellings.append(f"./{target.name}")
    identities = {json.dumps(load_target(s).identity(), sort_keys=True) for s in spellings}
    assert len(identities) == 1
    assert same_target("a/b@1234", "/abs/a/b@1234") and not same_target("a/b@1234", "a/b@5678")
    assert same_target("x@unknown", "x@unknown") and not same_target("x@unknown", "y@unknown")
    assert target_id(load_target(spellings[0]).identity()).startswith(str(target.resolve()))


def test_json_output_is_strict() -> None:
    data = json_safe({"ece": float("nan"), "rows": [float("inf"), 1.5], "path": Path("x")})
    assert data == {"ece": None, "rows": [None, 1.5], "path": "x"}
    json.dumps(data, allow_nan=False)


def test_export_and_import_replace_only_what_minispark_wrote(tiny_trained_drafter, tmp_path: Path) -> None:
    """A user's README.md / config.json / calibration.json in --out are never treated as the export's own."""
    target, drafter = tiny_trained_drafter
    user = tmp_path / "user"
    user.mkdir()
    for name, text in (("README.md", "my notes\n"), ("config.json", '{"mine": 1}\n'), ("calibration.json", "{}\n")):
        (user / name).write_text(text)
    before = snapshot(user)
    result = run("export", drafter, "--out", user, "--target", target)
    assert result.exit_code == 2 and "which minispark did not write" in result.stderr, result.output
    exported = tmp_path / "ds"
    assert run("export", drafter, "--out", exported, "--target", target).exit_code == 0
    result = run("import", exported, "--out", user, "--target", target)
    assert result.exit_code == 2 and "which minispark did not write" in result.stderr, result.output
    assert snapshot(user) == before
    assert run("export", drafter, "--out", exported, "--target", target).exit_code == 0  # its own: replaced
    (exported / "README.md").write_text("edited by the user\n")
    edited = snapshot(exported)
    result = run("export", drafter, "--out", exported, "--target", target)
    assert result.exit_code == 2 and "README.md, changed since minispark wrote it" in result.stderr, result.output
    assert snapshot(exported) == edited


def test_export_and_import_never_write_over_their_source(tiny_trained_drafter, tmp_path: Path) -> None:
    target, trained = tiny_trained_drafter
    drafter = Path(shutil.copytree(trained, tmp_path / "run" / "drafter"))  # the session's drafter stays safe
    exported = tmp_path / "ds"
    assert run("export", drafter, "--out", exported, "--target", target).exit_code == 0
    before = snapshot(tmp_path)
    for command, source, out, needle in (("export", drafter, drafter, "is the source"),
                                         ("export", drafter, drafter / "sub", "is inside the source"),
                                         ("export", drafter, drafter.parent, "holds the source"),
                                         ("import", exported, exported, "is the source")):
        result = run(command, source, "--out", out, "--target", target)
        assert result.exit_code == 2 and needle in result.stderr, (command, out, result.output)
    assert snapshot(tmp_path) == before


def test_profile_never_writes_the_shipped_tables(tiny_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    from minispark.core.defaults import SHIPPED_TABLES

    before = snapshot(SHIPPED_TABLES)
    args = ["profile", "--target", tiny_dir("llama"), "--contexts", "8", "--max-tokens", "8", "--rounds", "1",
            "--warmup", "0", "--cooldown", "0", "--allow-busy"]
    for extra in (["--out", SHIPPED_TABLES], ["--out", f"{SHIPPED_TABLES}/"], ["--plot", SHIPPED_TABLES / "x.png"]):
        result = run(*args, *extra)
        assert result.exit_code == 2 and "never rewritten" in result.stderr, result.output
    monkeypatch.setenv("MINISPARK_SPS_TABLES", str(SHIPPED_TABLES))
    result = run(*args)
    assert result.exit_code == 2 and "$MINISPARK_SPS_TABLES" in result.stderr, result.output
    assert snapshot(SHIPPED_TABLES) == before


def test_calibrate_keeps_the_stored_fit_over_too_few_rounds(tiny_trained_drafter, prompts: Path,
                                                             tmp_path: Path) -> None:
    """1 prompt × 1 token must not replace a calibration fitted on many rounds; enough rounds may."""
    from minispark.core.atomic import foreign_entry

    target, trained = tiny_trained_drafter
    drafter = Path(shutil.copytree(trained, tmp_path / "drafter"))  # with minispark's record of what it wrote
    args = ["calibrate", "--drafter", drafter, "--prompts", prompts, "--target", target, "--num-prompts", "1"]
    assert run(*args, "--max-new-tokens", "8", "--min-rounds", "1").exit_code == 0
    assert foreign_entry(drafter) is None  # calibration.json is on minispark's record: still replaceable by it
    before = snapshot(drafter)
    result = run(*args, "--max-new-tokens", "1")
    assert result.exit_code == 2 and "fewer than the 100 a fit needs" in result.stderr, result.output
    assert "calibration.json is left as it was" in result.stderr and snapshot(drafter) == before


def test_a_run_stopped_before_its_first_checkpoint_reruns(spelled_cache: Path, tmp_path: Path) -> None:
    """What Ctrl-C or a full disk leaves before the first checkpoint: rerun as it was, or with --resume."""
    args = ["train", "--recipe", "tiny", "--cache", spelled_cache, "steps=2", "checkpoint_every=2", "--no-progress"]
    for extra in ([], ["--resume"]):
        out = tmp_path / f"o{len(extra)}"
        out.mkdir()
        (out / "train_config.json").write_text("{}\n")
        (out / "metrics.jsonl").write_text("")
        result = run(*args, "--out", out, *extra)
        assert result.exit_code == 0 and "training from step 0" in result.stderr, result.output
        assert (out / "drafter" / "model.safetensors").is_file()
    user = tmp_path / "user"
    user.mkdir()
    (user / "train_config.json").write_text("{}\n")
    (user / "notes.txt").write_text("mine\n")
    before = snapshot(user)
    result = run(*args, "--out", user)
    assert result.exit_code == 2 and "not a minispark training run" in result.stderr
    assert snapshot(user) == before


def test_a_run_killed_before_latest_names_its_checkpoint_resumes(spelled_cache: Path, tmp_path: Path) -> None:
    """SIGKILL after the first checkpoint's rename, before ``latest`` is written: --resume said "holds no
    checkpoint" and a plain rerun "not a minispark training run"; ``latest`` now names that checkpoint again."""
    out = tmp_path / "run"
    args = ["train", "--recipe", "tiny", "--cache", spelled_cache, "steps=2", "checkpoint_every=2", "--no-progress",
            "--out", out]
    assert run(*args).exit_code == 0
    (out / "latest").unlink()  # what the kill leaves: no latest, no drafter/
    shutil.rmtree(out / "drafter")
    result = run(*args)
    assert result.exit_code == 2 and "already holds a training run; pass --resume" in result.stderr, result.output
    assert "latest was missing (stopped between writing checkpoint-000002 and naming it?)" in result.stderr
    result = run(*args, "--resume")
    assert result.exit_code == 0 and "resumed from" in result.stderr and "checkpoint-000002 at step 2" in result.stderr
    assert (out / "latest").read_text() == "checkpoint-000002\n" and (out / "drafter" / "model.safetensors").is_file()


def test_a_directory_sweep_takes_only_abandoned_temporaries(tmp_path: Path) -> None:
    """``sweep_abandoned(dir)``: what killed writes of any file left goes; a young one, one a live write holds,
    and a user's file that only looks alike stay."""
    import fcntl
    import time

    from minispark.core.atomic import sweep_abandoned

    old = time.time() - 60
    killed = [tmp_path / ".a.bin.k1ll3d00.tmp", tmp_path / ".00000001.safetensors.abcd1234.tmp"]
    for path in killed:
        path.write_bytes(b"half")
        os.utime(path, (old, old))
    young, held, mine = (tmp_path / ".b.bin.y0ung123.tmp", tmp_path / ".c.bin.h3ld1234.tmp",
                         tmp_path / ".notes.tmp")
    for path in (young, held, mine):
        path.write_bytes(b"keep")
    os.utime(held, (old, old))
    os.utime(mine, (old, old))
    with open(held, "rb") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # a write in progress in another process
        sweep_abandoned(tmp_path)
    assert not any(path.exists() for path in killed)
    assert young.exists() and held.exists() and mine.read_bytes() == b"keep"


def _out_commands(tiny_dir, prompts: Path, spelled_cache: Path, cache: Path, out: Path) -> dict[str, list]:
    """Every command that fills an --out over time, writing ``out``."""
    target = tiny_dir("llama")
    return {"cache": ["cache", "--target", target, "--prompts", prompts, "--out", out, *CACHE_FLAGS],
            "answers": ["answers", "--target", target, "--prompts", prompts, "--out", out, "--num-samples", "2"],
            "cache-mix": ["cache-mix", spelled_cache, cache, "--out", out],
            "train": ["train", "--recipe", "tiny", "--cache", spelled_cache, "--out", out, "steps=2"],
            "demo": ["demo", "--train", "--target", target, "--out", out]}


@pytest.mark.parametrize("command", ["cache", "answers", "cache-mix", "train", "demo"])
def test_a_second_writer_of_the_same_out_is_refused(tiny_dir, prompts: Path, spelled_cache: Path, cache: Path,
                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    command: str) -> None:
    """Two `train` runs into one --out (another terminal, a resume while the first ran) both ran
    to the end, one metrics.jsonl of both runs' lines and the drafter of the last; two `answers` mixed two seeds'
    shards. The second is refused while the first holds the directory, under any spelling of it."""
    import subprocess
    import sys

    monkeypatch.setenv("MINISPARK_CACHE", str(tmp_path / "user"))
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from minispark.core.writer_lock import "
                               "sole_writer\nwith sole_writer(sys.argv[1]):\n print('held', flush=True); time.sleep(60)",
                               str(out)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.chdir(tmp_path)
        result = run(*_out_commands(tiny_dir, prompts, spelled_cache, cache, Path("./out/"))[command])
        assert result.exit_code == 2, result.output
        assert f"another minispark process (pid {holder.pid}) is writing it" in result.stderr, result.output
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()


def test_the_writer_lock_is_held_once_per_process_and_released(tmp_path: Path, monkeypatch) -> None:
    from minispark.core.writer_lock import check_free, sole_writer

    monkeypatch.setenv("MINISPARK_CACHE", str(tmp_path / "user"))
    with sole_writer(tmp_path / "out"):
        check_free(tmp_path / "out")  # the holder's own checks and nested writes pass
        with sole_writer(tmp_path / "out"):
            pass
    with sole_writer(tmp_path / "out"):  # released on the way out
        pass


@pytest.mark.parametrize("command", ["cache", "answers", "cache-mix", "train", "demo"])
def test_no_command_writes_into_the_shipped_directories(tiny_dir, prompts: Path, spelled_cache: Path, cache: Path,
                                                       command: str) -> None:
    """Cache, answers, cache-mix, train and demo --train wrote into drafters/ and recipes/ (a new
    subdirectory there), where export, import, profile and the figures refuse."""
    from minispark.core.defaults import PROMPTS_DIR, RECIPE_DIR, SHIPPED_DRAFTERS, SHIPPED_TABLES

    roots = [SHIPPED_DRAFTERS, SHIPPED_TABLES, RECIPE_DIR, PROMPTS_DIR]
    before = snapshot(*roots)
    for out in (SHIPPED_DRAFTERS / "mine", RECIPE_DIR / "mine", PROMPTS_DIR):
        result = run(*_out_commands(tiny_dir, prompts, spelled_cache, cache, out)[command])
        assert result.exit_code == 2 and "shipped with minispark" in result.stderr, (out, result.output)
    assert snapshot(*roots) == before
