"""A drafter directory opened once at the edge (``model.drafter_dir.open_drafter``): each of its files is read
once on the way from the command line to a serving setup, and what was read is what serves.

    .venv/bin/python -m pytest -q tests/model/test_drafter_dir.py
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from minispark.core.drafter_spec import HYBRID, LOOKUP, DrafterSpec
from minispark.core.errors import OptionError
from minispark.model.calibration import Calibration, CalibrationError
from minispark.model.drafter_dir import DSPARK, OpenDrafter, calibration_name, open_drafter


@pytest.fixture()
def drafter(tiny_trained_drafter, tmp_path) -> Path:
    """A copy of the tiny trained drafter with a greedy and a T 0.7 calibration beside it."""
    copy = tmp_path / "drafter"
    shutil.copytree(tiny_trained_drafter[1], copy)
    for temperature in (0.0, 0.7):
        Calibration([1.0 + temperature] * 4, sampling={"temperature": temperature, "top_p": 1.0, "top_k": 0}).save(
            copy / calibration_name(temperature))
    return copy


def counted_reads(monkeypatch: pytest.MonkeyPatch, directory: Path) -> Counter:
    """The text reads of each file in ``directory`` from now on (every JSON file of a drafter is read as text)."""
    reads: Counter = Counter()
    real = Path.read_text

    def read_text(self: Path, *args, **kwargs) -> str:
        if self.parent == directory:
            reads[self.name] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    return reads


def test_opening_reads_the_config_the_calibrations_and_the_record(drafter) -> None:
    opened = open_drafter(str(drafter))
    assert opened.spec == DrafterSpec.parse(str(drafter)) and opened.directory == drafter
    assert opened.found.kind == DSPARK and opened.found.raw["block_size"] == opened.found.draft_config().block_size
    assert [path.name for path, _ in opened.calibrations] == ["calibration.json", "calibration-t0.7.json"]
    assert opened.record is not None and opened.record.identity == opened.found.raw["target"]
    assert open_drafter(opened) is opened  # an opened drafter passes through unread
    assert open_drafter(drafter).spec.kind == "trained"  # a Path is a directory, whatever its name


def test_specs_without_a_directory_read_nothing(monkeypatch, tmp_path) -> None:
    reads = counted_reads(monkeypatch, tmp_path)
    for text in ("none", LOOKUP, HYBRID):
        opened = open_drafter(text)
        assert opened == OpenDrafter(DrafterSpec.parse(text)) and opened.directory is None and str(opened) == text
    assert not reads


def test_each_file_is_read_once_from_the_command_line_to_the_serving_setup(drafter, tiny_trained_drafter,
                                                                           monkeypatch) -> None:
    """open (the CLI), the recorded target's loading flags, the serving builder (drafter, tree mode, the
    calibration nearest T 0.7): one read of each file; the negative control, a spec given as text to the
    builder, reads them all again."""
    from minispark.serving.builder import build_serving
    from minispark.target.loading import load_target
    from minispark.target.remembered import loading_from
    from minispark.target.sampling import SamplingConfig

    target = load_target(str(tiny_trained_drafter[0]))
    reads = counted_reads(monkeypatch, drafter)
    opened = open_drafter(str(drafter))
    loading = loading_from(opened.record, opened.directory, str(tiny_trained_drafter[0]), None, None)
    assert loading.target == str(tiny_trained_drafter[0])
    setup = build_serving(target, opened, sampling=SamplingConfig(0.7))
    assert setup.mode == "tree" and setup.calibration.temperatures == [1.7] * 4
    assert setup.drafter_spec == str(drafter)
    assert reads == {"config.json": 1, "calibration.json": 1, "calibration-t0.7.json": 1, "target.json": 1}
    build_serving(target, str(drafter), sampling=SamplingConfig(0.7))
    assert reads == {"config.json": 2, "calibration.json": 2, "calibration-t0.7.json": 2, "target.json": 2}


def test_a_damaged_calibration_is_refused_when_opened(drafter) -> None:
    (drafter / "calibration-t0.7.json").write_text("{")
    with pytest.raises(CalibrationError, match="calibration-t0.7.json: not readable as JSON"):
        open_drafter(str(drafter))


def test_a_directory_without_weights_is_refused_naming_the_option(drafter) -> None:
    (drafter / "model.safetensors").unlink()
    with pytest.raises(OptionError, match=r"drafter .*: no weights") as refused:
        open_drafter(str(drafter))
    assert refused.value.field == "drafter"
