"""What a serving command runs with: one place that resolves the drafter, the length policy and the SPS table.

``build_serving(target, drafter, mode, gamma, threshold, sps)`` applies the defaults every command
shares (``generate``, ``chat``, ``demo``): the drafter shipped for the target under ``drafters/``
(else the n-gram ``lookup`` drafter, with a hint on how to train one); ``schedule`` mode when the
drafter has a confidence head and an SPS table matches this device and target (else ``threshold``
mode, with a hint to run ``minispark profile``); γ from the drafter's checkpoint; draft-skip
(``draft_skip.py``) in schedule mode. An explicit ``--drafter`` wins, and ``none`` means
target-only decoding.

    .venv/bin/python -m pytest -q tests/test_chat.py -k defaults
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from minispark.draft_skip import DraftSkip
from minispark.drafters.base import Drafter, FixedLength, LengthPolicy, NoDrafter
from minispark.errors import MinisparkError
from minispark.sps import SPSTable, SPSTableError
from minispark.target import Target

DEFAULT_THRESHOLD = 0.5
TRAIN_HINT = ("no trained drafter for {target}: using the n-gram lookup drafter; train one with "
              "`minispark cache` + `minispark train` and pass --drafter DIR")
PROFILE_HINT = "no SPS table for this device and {target}: {fallback}; run `minispark profile` to create one"

@dataclass
class ServingSetup:
    """The drafter, its length policy, draft-skip and the SPS table a command runs with, and why (hints)."""

    drafter: Drafter
    drafter_spec: str
    mode: str
    policy: LengthPolicy
    sps_table: SPSTable | None
    hints: list[str] = field(default_factory=list)
    skip: DraftSkip | None = None  # None: the drafter runs every round


def matching_sps_table(target: Target, path: Path | None) -> SPSTable | None:
    """``path`` if given, else the profiled table for this device, target and precision, else None."""
    from minispark.profile import SHIPPED_TABLES, device_name, dtype_name, target_quantization
    from minispark.sps import find_table

    if path is not None:
        return SPSTable.load(path)
    try:
        return find_table(SHIPPED_TABLES, device_name(target.device), target.name, dtype=dtype_name(target.dtype),
                          quantization=target_quantization(target), strict=True)
    except SPSTableError:
        return None


def build_serving(target: Target, drafter: str | None = None, mode: str | None = None, gamma: int | None = None,
                  threshold: float = DEFAULT_THRESHOLD, sps: Path | None = None,
                  draft_skip: bool | None = None) -> ServingSetup:
    """Resolve the defaults: the shipped drafter for the target (else ``lookup`` and a hint);
    schedule mode with the device's SPS table (else threshold mode and a hint); fixed γ for
    drafters without a confidence head; ``draft_skip`` on in schedule mode, off in the others
    (there γ or a threshold is what was asked for), never without a drafter."""
    from minispark.calibrate import drafter_calibration
    from minispark.generate import default_drafter, make_drafter
    from minispark.schedule import make_length_policy

    if mode not in (None, "fixed", "threshold", "schedule"):
        raise MinisparkError(f"--mode {mode}: choose fixed, threshold or schedule")
    hints = []
    draft = None
    if drafter is None:
        shipped = default_drafter(target)
        if shipped is not None:
            try:
                draft, drafter = make_drafter(str(shipped), target), str(shipped)
            except MinisparkError as exc:  # e.g. trained on another conversion of the target
                hints.append(f"shipped drafter not usable ({exc})")
        if draft is None:
            drafter = "lookup"
            hints.append(TRAIN_HINT.format(target=target.name))
    if draft is None:
        draft = make_drafter(drafter, target)
    if gamma is None:
        gamma = draft.config.block_size if hasattr(draft, "config") else 7
    table = matching_sps_table(target, sps)
    chosen = mode is None
    if mode is None:
        mode = "fixed" if not draft.has_confidence else "schedule" if table is not None else "threshold"
    if table is None:
        fallback = "no speedup estimate"
        if mode == "schedule":
            table, fallback = SPSTable.generic(), "schedule mode uses the generic cost model"
        elif mode == "threshold" and chosen:
            fallback = f"threshold mode ({threshold:g})"
        hints.append(PROFILE_HINT.format(target=target.name, fallback=fallback))
    if isinstance(draft, NoDrafter):
        policy: LengthPolicy = FixedLength(0)
        draft_skip = False
    else:
        calibration = drafter_calibration(drafter) if Path(drafter).is_dir() else None
        policy = make_length_policy(mode, gamma, has_confidence=draft.has_confidence, threshold=threshold,
                                    sps_table=table, calibration=calibration)
    if draft_skip is None:
        draft_skip = mode == "schedule"
    return ServingSetup(draft, drafter, mode, policy, table, hints, DraftSkip() if draft_skip else None)
