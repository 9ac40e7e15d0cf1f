"""No command modifies what it did not create: user files in --out, foreign checkpoints, planted
symlinks and the shipped tables are hashed before and after, and must be unchanged.

    .venv/bin/python -m pytest -q tests/test_data_safety.py
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minispark.atomic import open_append, save_figure, write_json_atomic
from minispark.cli import app, json_safe
from minispark.errors import MinisparkError

REPO = Path(__file__).resolve().parent.parent
SHIPPED = [REPO / "sps_tables", REPO / "drafters"]
CACHE_FLAGS = ["--num-samples", "2", "--max-new-tokens", "12", "--layers", "1,2", "--window", "16", "--block", "4",
               "--anchors-per-sample", "4", "--anchor-run", "4", "--feature-dtype", "fp32", "--batch-size", "2"]


def snapshot(*roots: Path) -> dict[str, str]:
    """sha256 of every file under ``roots`` (symlinks recorded by their target, never followed)."""
    hashes = {}
    for root in roots:
        paths = [root] if not root.is_dir() or root.is_symlink() else sorted(root.rglob("*"))
        for path in paths:
            if path.is_symlink():
                hashes[str(path)] = "link:" + os.readlink(path)
            elif path.is_file():
                hashes[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


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


def test_cache_keeps_user_files_in_out(tiny_dir, prompts: Path, tmp_path: Path) -> None:
    out = tmp_path / "u"
    (out / "sub").mkdir(parents=True)
    (out / "t.tmp").write_text("mine\n")
    (out / "notes.txt").write_text("my notes\n")
    (out / "sub" / "data.bin").write_bytes(b"\x00\x01")
    before = snapshot(out)
    result = run("cache", "--target", tiny_dir("llama"), "--prompts", prompts, "--out", out, *CACHE_FLAGS)
    assert result.exit_code == 0, result.output
    assert {k: v for k, v in snapshot(out).items() if k in before} == before


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
    from minispark.serving.target import load_target

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


def test_same_target_spelled_differently(tiny_dir, monkeypatch: pytest.MonkeyPatch) -> None:
    from minispark.identity import same_target, target_id
    from minispark.serving.target import load_target

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
