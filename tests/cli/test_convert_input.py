"""Bad input to ``export`` and ``import``: exit status 2 and one ``error:`` line naming the flag or file, no
traceback, nothing half written.

    .venv/bin/python -m pytest -q tests/cli/test_convert_input.py
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minispark.cli import app
from tests.helpers import one_line_error


# (id, argv with {placeholders} from the ``files`` fixture, what the error line must name)
CASES = [
    # import / export
    ("import-empty-dir", ["import", "{emptydir}", "--out", "{out}"], "SOURCE"),
    ("import-missing", ["import", "{missing}", "--out", "{out}"], "SOURCE"),
    ("import-window-negative", ["import", "{fakedrafter}", "--out", "{out}", "--window", "-1"], "--window"),
    ("import-out-user-dir", ["import", "{fakedrafter}", "--out", "{userdir}"], "--out"),
    ("export-empty-dir", ["export", "{emptydir}", "--out", "{out}"], "DRAFTER_DIR"),
    ("export-out-user-dir", ["export", "{fakedrafter}", "--out", "{userdir}"], "--out"),
    ("export-out-file", ["export", "{fakedrafter}", "--out", "{afile}"], "--out"),
    ("export-unknown-format", ["export", "{fakedrafter}", "--out", "{out}", "--format", "onnx"], "--format"),
    ("export-truncated", ["export", "{cutdrafter}", "--out", "{out}"], "unreadable safetensors"),
    ("import-truncated", ["import", "{cutdrafter}", "--out", "{out}"], "unreadable safetensors"),
    ("export-out-newline", ["export", "{fakedrafter}", "--out", "x\ny"], "--out 'x\\ny'"),
    ("export-out-empty", ["export", "{fakedrafter}", "--out", ""], "--out '': empty"),
    ("import-minispark-drafter", ["import", "{fakedrafter}", "--out", "{out}", "--target", "{missing}"],
     "not a DeepSpec drafter"),  # refused after loading the target (here: a --target that does not exist),
    ("export-out-name-too-long", ["export", "{fakedrafter}", "--out", "{dir}/" + "x" * 300],
     "a name of 300 bytes in the path; a file system allows at most 255"),  # OSError ENAMETOOLONG traceback,
]


def test_the_cases_have_unique_ids() -> None:
    assert len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("argv, needle", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line(files: dict[str, str], argv: list[str], needle: str) -> None:
    args = [re.sub(r"\{([\w.-]+)\}", lambda m: files[m.group(1)], arg) for arg in argv]
    error = one_line_error(CliRunner().invoke(app, args))
    assert needle in error, error


def test_import_of_a_minispark_drafter_says_it_needs_none(tiny_trained_drafter, tmp_path) -> None:
    """import loaded the target before finding that its SOURCE was a minispark drafter, and did not say it needs no
    import."""
    target, drafter = tiny_trained_drafter
    error = one_line_error(CliRunner().invoke(app, ["import", str(drafter), "--out", str(tmp_path / "imported")]))
    assert "not a DeepSpec drafter" in error and "it is a minispark drafter already: give it to --drafter" in error
    assert not (tmp_path / "imported").exists()


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
