"""What is in a drafter directory, read once: its layout, its parsed ``config.json`` and the names of its files.

A drafter directory in minispark's layout holds:

* ``config.json`` — the :class:`~minispark.model.draft_config.DraftConfig` (architecture, the target
  identity it was trained against, block size γ, feature layers, compute dtype);
* ``model.safetensors`` — every weight except the frozen embedding and lm_head, which are always taken
  from the target at load time (``checkpoint.FROZEN``);
* ``calibration.json`` (optional) — Sequential Temperature Scaling from ``minispark calibrate``, with the
  target identity and the sampling settings it was fitted for;
* ``target.json`` (written by ``minispark train``) — the target's source, dtype and quantization, so a
  command given ``--drafter DIR`` loads that target the same way (``minispark.target.remembered``);
* ``training_data.json`` (written by ``minispark train``) — the prompt files its training data came from, by
  content hash, and which of their prompts it was trained on (``minispark.data.provenance``: ``calibrate``
  says when its prompts are among them).

A directory in DeepSpec's layout (``config.json`` names a ``*DSparkModel`` architecture; see
:mod:`minispark.model.deepspec`) is a drafter too. :func:`read_drafter_dir` tells the two apart and
parses ``config.json`` once; the loaders (``checkpoint.load_draft_model``, ``deepspec.load_deepspec_model``),
the checks (``deepspec.check_against_target``), the converters and the shipped-drafter lookup all start
from the :class:`DrafterDir` it returns. Nothing here reads weights.

A command's drafter (``--drafter``, or the Python API's ``drafter=``) is opened once, at the edge, by
:func:`open_drafter`: the spec parsed, the directory checked, ``config.json``, every calibration and the
target record read. The :class:`OpenDrafter` it returns is what the target loader (the recorded target), the
serving builder (the drafter and its calibration) and the displays take.

    .venv/bin/python -c "from minispark.model.drafter_dir import open_drafter as o; print(o('drafters/smollm2-135m-dspark'))"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minispark.core.drafter_spec import HYBRID, TRAINED, DrafterSpec
from minispark.core.errors import MinisparkError, option
from minispark.core.model_files import CONFIG_FILE, checkpoint, drafter_spec, is_deepspec_config, read_config
from minispark.model.calibration import Calibration
from minispark.model.draft_config import DraftConfig
from minispark.target.remembered import TARGET_FILE, TargetRecord, read_record

WEIGHTS_FILE = "model.safetensors"
CALIBRATION_FILE = "calibration.json"
#: A calibration fitted at a temperature T > 0 sits beside the greedy one as calibration-t{T}.json (serving picks
#: the one fitted nearest the request's temperature: ``checkpoint.load_calibration``).
CALIBRATION_AT = re.compile(r"calibration-t(\d+(?:\.\d+)?)\.json")
#: What ``minispark train`` records of the prompts a drafter was trained on (``minispark.data.provenance``).
TRAINING_DATA_FILE = "training_data.json"
#: The files that make a drafter (a training checkpoint holds more: trainer state, held-out score);
#: ``target.json`` records how its target was loaded (``minispark.target.remembered``).
DRAFTER_FILES = (CONFIG_FILE, WEIGHTS_FILE, CALIBRATION_FILE, TARGET_FILE, TRAINING_DATA_FILE)
#: The two layouts: minispark's own, and DeepSpec's (``Qwen3DSparkModel``, what vLLM and SGLang load).
DSPARK, DEEPSPEC = "dspark", "deepspec"


def calibration_name(temperature: float) -> str:
    """The file a calibration fitted at ``temperature`` is kept in: ``calibration.json`` at T 0 (greedy)."""
    return CALIBRATION_FILE if temperature == 0 else f"calibration-t{temperature:g}.json"


def calibration_paths(directory: str | Path) -> list[Path]:
    """Every calibration file of a drafter directory: the greedy one first, then by temperature. A name that is a
    directory or a dangling link is listed too: reading it refuses it, where skipping it would hide it."""
    directory = Path(directory)
    found = sorted((float(m.group(1)), p) for p in directory.glob("calibration-t*.json")
                   if (m := CALIBRATION_AT.fullmatch(p.name)))
    greedy = directory / CALIBRATION_FILE
    return ([greedy] if greedy.exists() or greedy.is_symlink() else []) + [p for _, p in found]


def read_calibrations(directory: str | Path) -> tuple[tuple[Path, Calibration], ...]:
    """Every calibration of a drafter directory (:func:`calibration_paths`), each read whole: a damaged one is a
    one-line error now, not once the target has loaded."""
    return tuple((path, Calibration.load(path)) for path in calibration_paths(directory))


@dataclass(frozen=True)
class DrafterDir:
    """A drafter directory as :func:`read_drafter_dir` found it: ``kind`` is :data:`DSPARK` or
    :data:`DEEPSPEC`; ``raw`` is its ``config.json`` as parsed, None when it has none."""

    path: Path
    kind: str = DSPARK
    raw: dict[str, Any] | None = None

    def draft_config(self) -> DraftConfig:
        """The :class:`DraftConfig` of a directory in minispark's layout (DeepSpec's needs the target's
        sizes: ``deepspec.draft_config_from_deepspec``)."""
        if self.raw is None:
            raise MinisparkError(f"{self.path}: not a drafter directory (no {CONFIG_FILE})")
        return DraftConfig.from_dict(self.raw)


def read_drafter_dir(path: str | Path | DrafterDir) -> DrafterDir:
    """What is in the drafter directory ``path`` (a :class:`DrafterDir` passes through unread): its layout
    and its parsed ``config.json``. A ``config.json`` that is not a JSON object is a one-line error; a
    missing one is not (each caller says what it expected)."""
    if isinstance(path, DrafterDir):
        return path
    path = Path(path)
    raw = read_config(path)
    if raw is None:
        return DrafterDir(path)
    return _layout(path, raw)


def _layout(path: Path, raw: dict[str, Any]) -> DrafterDir:
    """The directory at ``path`` whose ``config.json`` is ``raw``, in the layout that config names."""
    return DrafterDir(path, DEEPSPEC if is_deepspec_config(raw) else DSPARK, raw)


@dataclass(frozen=True)
class OpenDrafter:
    """A drafter as a command names it (``spec``), with what its directory holds read once: ``found`` (layout and
    ``config.json``), ``calibrations`` (path and fit, greedy first) and ``record`` (the target it was trained for,
    None when it records none). ``found`` is None for none, lookup and a plain ``hybrid`` (its trained drafter,
    the shipped one, is opened once the target is known: :meth:`with_directory`)."""

    spec: DrafterSpec
    found: DrafterDir | None = None
    calibrations: tuple[tuple[Path, Calibration], ...] = ()
    record: TargetRecord | None = None

    @property
    def directory(self) -> Path | None:
        """The trained drafter's directory, None without one."""
        return self.found.path if self.found is not None else None

    def with_directory(self, directory: Path) -> OpenDrafter:
        """This spec with the trained drafter in ``directory`` opened (a plain ``hybrid``'s shipped one): the spec
        keeps the name the user gave."""
        return _opened(self.spec, directory, option("drafter"))

    def __str__(self) -> str:
        return str(self.spec)


def _opened(spec: DrafterSpec, directory: Path, flag: str) -> OpenDrafter:
    """``spec`` with the drafter in ``directory`` checked (``model_files.checkpoint``, which reads its config) and
    its calibrations and target record read."""
    raw = checkpoint(directory, flag)
    return OpenDrafter(spec, _layout(directory, raw), read_calibrations(directory), read_record(directory, config=raw))


def open_drafter(spec: str | Path | DrafterSpec | OpenDrafter, drafting: dict[str, Any] | None = None,
                 flag: str = option("drafter")) -> OpenDrafter:
    """``spec`` parsed and, when it names a directory, that directory checked (``model_files.checkpoint``: a
    config, weights whose headers read) and read once (an :class:`OpenDrafter` passes through). ``drafting``: the
    options that only shape drafting, refused with ``none`` (``model_files.drafter_spec``)."""
    if isinstance(spec, OpenDrafter):
        return spec
    parsed = drafter_spec(DrafterSpec(TRAINED, spec) if isinstance(spec, Path) else spec, flag, drafting)
    if parsed.directory is None:
        return OpenDrafter(parsed)
    return _opened(parsed, parsed.directory, f"{flag} hybrid:" if parsed.kind == HYBRID else flag)
