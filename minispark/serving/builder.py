"""What a decoding command runs with: one builder resolves the drafter, γ, the SPS table, the
calibration and the length policy for ``generate``, ``chat``, ``demo``, ``bench`` and ``calibrate``.

``build_serving(target, drafter, mode, gamma, threshold, sps, sampling)`` applies the defaults every
command shares (the constants are in :mod:`minispark.core.defaults`):

* drafter: the one shipped for the target under ``drafters/`` (else the n-gram ``lookup`` drafter,
  with a hint on how to train one); an explicit ``--drafter`` wins, ``none`` is target-only decoding;
* γ: the drafter's block size (``DEFAULT_GAMMA`` for drafters without one); a larger γ is an error;
* SPS table: the profiled table for this device, target, dtype and quantization; an explicit
  ``--sps`` table profiled for something else gets a one-line warning (an error with ``strict``);
* mode: ``tree`` for a drafter that drafts trees (a trained DSpark or DFlash drafter: best-first trees with the
  n-gram lookup as a branch, admitted on the SPS table, the generic cost model without one); else ``schedule``
  when the drafter has a confidence head and a table exists (else ``threshold``, with a hint to run
  ``minispark profile``); ``fixed`` without a confidence head;
* calibration: the drafter's ``calibration.json``, checked against the target and ``sampling``.
* draft-skip (``draft_skip.py``): on in schedule mode, off in the others (there γ or a threshold
  is what was asked for), never without a drafter. Across requests (``serve`` with several slots) it is on in
  tree mode too: there one round's drafter forward serves every request, and the trees' admission prices
  only the verify.
* the compiled runtime (``--runtime compiled``) compiles the step widths 1..γ+1 here, with a notice
  of what it cost.
* the hybrid drafter (``--drafter hybrid``) prices its two sources on the SPS table in schedule
  mode and on a flat curve in the others, with its trained drafter's calibration in every mode.

    .venv/bin/python -m pytest -q tests/test_chat.py -k defaults
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from minispark.model.calibration import Calibration
from minispark.model.drafter_dir import CALIBRATION_FILE, OpenDrafter, open_drafter
from minispark.core.defaults import DEFAULT_THRESHOLD, DEFAULT_TREE_DRAFTS, FLAT_TREE_DRAFTS, PROFILE_MIN_TOKENS
from minispark.serving.drafters.base import Drafter, NoDrafter, resolve_gamma
from minispark.serving.drafters.hybrid import HybridDrafter
from minispark.serving.draft_skip import DraftSkip
from minispark.core.errors import MinisparkError, option
from minispark.core.defaults import DTYPE_SPELLINGS
from minispark.core.identity import device_name, dtype_name, target_id, target_quantization
from minispark.core.drafter_spec import DrafterSpec
from minispark.target.sampling import SamplingConfig
from minispark.serving.draft_tree import TreePolicy
from minispark.serving.schedule import FixedLength, LengthMode, LengthPolicy, make_length_policy
from minispark.serving.sps import SHIPPED_TABLES, SPSTable, SPSTableError, find_table, table_mismatch, user_tables_dir
from minispark.target.embedded import EMBEDDED_NAME
from minispark.target.loading import Target
from minispark.target.runtime import requested_runtime

TRAIN_HINT = ("no trained drafter for {target}: using the n-gram lookup drafter; train one with "
              "`minispark cache` + `minispark train` and pass --drafter DIR")
PROFILE_HINT = "no SPS table for this device and {target}: {fallback}; run `{command}` to create one"
COMPILED_NOTICE = ("--runtime compiled: decoding steps of 1..{widths} tokens ready in {seconds:.0f} s (compiled "
                   "once per process; inductor's disk cache makes the next start faster)")
# The int8 kernel is row-invariant, but its bf16 activations round: a 1e-6 difference between a one-token step and
# a wide verify can cross a rounding boundary and flip a near-tied argmax. Said where a drafter verifies, not where
# the target only generates (answers, cache) or times itself (profile).
INT8_NOTICE = ("runtime int8: bf16 activations make near-tied greedy tokens depend on how many tokens a forward "
               "verifies, so drafting modes can differ from this target's own greedy output at near-ties (measured "
               "on held-out chat); use packed for token-identical decoding")
SHORT_TABLE_HINT = ("the SPS table for this device and {target} profiles up to {tokens} tokens per step, this γ "
                    "verifies up to {need}: {fallback}; run `{command}` to cover it")

SHORT_CALIBRATION_HINT = ("{path} fits {fitted} draft positions, this γ drafts up to {gamma}: confidences "
                          "served uncalibrated; run `minispark calibrate --drafter {directory} --prompts FILE "
                          "--gamma {gamma}` to fit them all")


@dataclass
class ServingSetup:
    """The drafter, γ, length policy, draft-skip, SPS table and calibration a command runs with, and why (hints)."""

    drafter: Drafter
    drafter_spec: str
    mode: str
    gamma: int
    policy: LengthPolicy | TreePolicy
    sps_table: SPSTable | None
    calibration: Calibration | None = None
    threshold: float = DEFAULT_THRESHOLD
    hints: list[str] = field(default_factory=list)
    skip: DraftSkip | None = None  # None: the drafter runs every round
    batch_skip: bool = False  # draft-skip for rounds of several requests in flight (serve's batched decoder)

    @property
    def schedule_table(self) -> SPSTable:
        """The curve schedule mode prices rounds on: the matched table, else the generic cost model."""
        return self.sps_table or SPSTable.generic()

    def policy_for(self, mode: str, envelope: bool = True, flat: bool = False) -> LengthPolicy | TreePolicy:
        """A fresh policy of another mode with the same drafter, γ, table and calibration (bench
        runs several side by side); schedule and tree modes without a table use the generic curve,
        a ``flat`` tree none (every node up to ``FLAT_TREE_DRAFTS``: the GPU case)."""
        if isinstance(self.drafter, NoDrafter):
            return FixedLength(0)
        return make_length_policy(mode, self.gamma, has_confidence=self.drafter.has_confidence,
                                  threshold=self.threshold, sps_table=None if flat else self.schedule_table,
                                  calibration=self.calibration, envelope=envelope,
                                  tree_drafts=FLAT_TREE_DRAFTS if flat else DEFAULT_TREE_DRAFTS)


def profile_command(target: Target, max_tokens: int | None = None) -> str:
    """The ``minispark profile`` command a hint gives: for this target (``--target`` unless it is the embedded
    one, which a bare ``profile`` measures), in its dtype and runtime (a table is looked up by each) and, for a
    table too short, at tokens per step that profile takes (it refuses fewer than ``PROFILE_MIN_TOKENS``). The
    hint said ``minispark profile --max-tokens 5``: refused, and for the embedded target."""
    # a --runtime asked for; under auto, profile runs what auto runs
    words = ["minispark", *(["--runtime", target.runtime] if requested_runtime() != "auto" else []), "profile"]
    if target.name != EMBEDDED_NAME:
        words += ["--target", target.name]
    dtype = dtype_name(target.dtype)
    if dtype != ("float32" if target.device.type == "cpu" else "bfloat16"):  # not what profile loads by default
        words += ["--dtype", next(alias for alias, name in DTYPE_SPELLINGS.items() if name == dtype)]
    if max_tokens is not None:
        words += ["--max-tokens", str(max(max_tokens, PROFILE_MIN_TOKENS))]
    return shlex.join(words)


def matching_sps_table(target: Target, path: Path | None, strict: bool = False) -> tuple[SPSTable | None, str | None]:
    """``path`` if given (with a one-line warning when it was profiled for another device, target,
    dtype, quantization or runtime; ``strict`` refuses it), else the profiled table for this run (a table file
    that cannot be read is passed over, and named in the notice), else None."""
    device, dtype, quantization = device_name(target.device), dtype_name(target.dtype), target_quantization(target)
    if path is not None:
        table = SPSTable.load(path)
        return table, table_mismatch(table, path, device=device, target=target.name, dtype=dtype,
                                     quantization=quantization, runtime=target.runtime, strict=strict)
    skipped: list[str] = []  # one unreadable file (a note saved as .json, a damaged table) hid every table
    try:
        table = find_table([user_tables_dir(), SHIPPED_TABLES], device, target.name, dtype=dtype,
                           quantization=quantization, runtime=target.runtime, strict=True, skipped=skipped)
    except SPSTableError:
        table = None
    return table, "; ".join(f"SPS table skipped: {reason}" for reason in skipped) or None


def default_mode(drafter: Drafter, has_table: bool) -> str:
    """The mode a command runs ``drafter`` in when none is asked for: the fastest lossless one measured on the
    held-out sets (docs/results.md): tree rounds for a drafter that drafts trees; else the schedule with a
    confidence head and an SPS table, the threshold without a table, fixed γ without confidences."""
    if drafter.drafts_trees:
        return "tree"
    if not drafter.has_confidence:
        return "fixed"
    return "schedule" if has_table else "threshold"


def build_serving(target: Target, drafter: OpenDrafter | DrafterSpec | str | None = None, mode: str | None = None, gamma: int | None = None,
                  threshold: float | None = None, sps: Path | None = None,
                  sampling: SamplingConfig | None = None, strict: bool = False,
                  draft_skip: bool | None = None, side_by_side: Sequence[str] = ()) -> ServingSetup:
    """Resolve the defaults (see the module docstring) into a ready :class:`ServingSetup`; ``threshold``
    None is ``DEFAULT_THRESHOLD``. ``side_by_side``: the modes a bench runs with this setup (its notices describe
    them, not the one mode a plain run would choose)."""
    # + 0.0: '--threshold -0.0' is the threshold 0 (printed as "-0" otherwise)
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold + 0.0
    from minispark.model.checkpoint import load_calibration
    from minispark.serving.generate import make_drafter, shipped_drafter

    if mode is not None and mode not in LengthMode.__members__.values():
        raise MinisparkError(f"{option('mode')} {mode}: choose {', '.join(m.value for m in LengthMode)}")
    hints = []
    draft = None
    if drafter is None:
        draft, drafter, unusable = shipped_drafter(target)
        if unusable:
            hints.append(unusable)
        if draft is None:
            drafter = "lookup"
            hints.append(TRAIN_HINT.format(target=target.name))
    opened = open_drafter(drafter)
    if draft is None:
        draft = make_drafter(opened, target)
    gamma = resolve_gamma(draft, str(opened), gamma)
    if target.runtime == "int8" and not isinstance(draft, NoDrafter):
        hints.append(INT8_NOTICE)
    table, mismatch = matching_sps_table(target, sps, strict)
    if mismatch:
        hints.append(mismatch)
    short = None  # the tokens per step of a found table profiled for a smaller γ: served as if there were none
    if sps is None and table is not None and table.max_tokens < gamma + 1:
        short, table = table.max_tokens, None
    chosen = mode is None
    if mode is None:
        mode = default_mode(draft, table is not None)
    if table is None and not isinstance(draft, NoDrafter):  # without a drafter no table is read
        fallback = "no speedup estimate"
        if side_by_side:  # bench said "threshold mode (0.5)" while running schedule on the generic curve
            if any("schedule" in name for name in side_by_side):
                fallback = "the schedule modes use the generic cost model"
        elif mode in ("schedule", "tree"):
            fallback = f"{mode} mode uses the generic cost model"
        elif mode == "threshold" and chosen:
            fallback = f"threshold mode ({threshold:g})"
        hints.append(PROFILE_HINT.format(target=target.name, fallback=fallback, command=profile_command(target))
                     if short is None else
                     SHORT_TABLE_HINT.format(target=target.name, tokens=short, need=gamma + 1, fallback=fallback,
                                             command=profile_command(target, gamma + 1)))
    calibration = None
    hybrid = isinstance(draft, HybridDrafter)
    # calibrate (fixed mode) refits it instead; the hybrid prices c_1 in every mode
    if mode == "tree" or draft.has_confidence and (mode != "fixed" or hybrid):
        source = draft.source if hybrid and draft.source is not None else opened
        calibration, warning = load_calibration(source, target_id(target.identity()), sampling)
        if warning:
            hints.append(warning)
        if calibration is not None and calibration.gamma < gamma:  # `calibrate --gamma 2`: every schedule run failed
            hints.append(SHORT_CALIBRATION_HINT.format(path=source.directory / CALIBRATION_FILE, gamma=gamma,
                                                       fitted=calibration.gamma,
                                                       directory=shlex.quote(str(source.directory))))
            calibration = None
    drafting = not isinstance(draft, NoDrafter)
    # one request's tree rounds lost with it: rounds that verify the lookup branch alone accept too little
    skip = DraftSkip() if drafting and (mode == "schedule" if draft_skip is None else draft_skip) else None
    batch_skip = drafting and (mode in ("schedule", "tree") if draft_skip is None else draft_skip)
    setup = ServingSetup(draft, str(opened), mode, gamma, FixedLength(0), table, calibration, threshold, hints, skip,
                         batch_skip)
    if mode in ("schedule", "tree"):
        setup.sps_table = setup.schedule_table  # served (and estimated) on the curve it schedules with
    setup.policy = setup.policy_for(mode)
    if hybrid:  # its choice prices both sources on the curve the policy schedules against (flat outside schedule)
        draft.price_with(setup.sps_table if mode == "schedule" else None, gamma, calibration)
    # the compiled runtime compiles every width a round can verify now, not inside the first answer
    widest = 1 if isinstance(draft, NoDrafter) else gamma + 1
    seconds = target.warm_up(range(1, widest + 1))
    if seconds is not None:
        hints.append(COMPILED_NOTICE.format(widths=widest, seconds=seconds))
    return setup
