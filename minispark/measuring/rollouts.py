"""Roll out the real speculative loop and record what calibration needs: per round, the raw
confidences c_1..c_γ the drafter reported and how many draft tokens survived verification.

A :class:`RecordingDrafter` wraps any drafter with a confidence head; the engine runs unchanged, so
the recorded rounds are exactly the rounds served. ``calibrate_drafter`` then fits Sequential
Temperature Scaling (``calibrate.fit_sts``) on them and stores it beside the checkpoint.

    minispark calibrate --drafter runs/draft-smollm2/drafter --prompts examples/prompts/demo.jsonl
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from minispark.core.atomic import record_written
from minispark.core.defaults import CALIBRATION_MIN_ROUNDS
from minispark.measuring.calibrate import fit_sts, position_metrics
from minispark.model.calibration import Calibration
from minispark.model.checkpoint import sampling_record
from minispark.model.drafter_dir import calibration_name
from minispark.serving.draft_block import DraftBlock
from minispark.serving.drafters.base import Drafter
from minispark.serving.engine import speculative_generate
from minispark.core.errors import MinisparkError, option
from minispark.core.identity import target_id
from minispark.target.sampling import SamplingConfig, make_generator
from minispark.serving.schedule import FixedLength
from minispark.target.loading import Target
from minispark.target.session import PromptInputs


class RecordingDrafter(Drafter):
    """Delegates to ``inner`` and records each round's confidences and accepted count."""

    def __init__(self, inner: Drafter) -> None:
        if not inner.has_confidence:
            raise MinisparkError(f"drafter {inner.name} has no confidence head: nothing to calibrate")
        self.inner = inner
        self.name = inner.name
        self.has_confidence = True
        self.feature_layers = inner.feature_layers
        self.confidences: list[list[float]] = []
        self.accepted: list[int] = []
        self._block: DraftBlock | None = None  # this round's block (its confidences grow as it is scheduled)

    def reset(self, cached_ids: torch.Tensor, features: torch.Tensor | None, text_positions: torch.Tensor) -> None:
        self.inner.reset(cached_ids, features, text_positions)

    def propose(self, ids: torch.Tensor, anchor_position: int, sampling: SamplingConfig,
                generator: torch.Generator) -> DraftBlock:
        # The block's confidences list grows as the engine schedules it; read at commit, it holds
        # every position the round drew.
        self._block = self.inner.propose(ids, anchor_position, sampling, generator)
        return self._block

    def commit(self, num_accepted: int, new_cached_ids: torch.Tensor, features: torch.Tensor | None,
               text_positions: torch.Tensor) -> None:
        self.confidences.append([float(c) for c in self._block.confidences[: len(self._block.tokens)]])
        self.accepted.append(num_accepted)
        self.inner.commit(num_accepted, new_cached_ids, features, text_positions)


@dataclass
class Rollouts:
    """confidences: (rounds, γ) raw c_k, NaN where position k was not proposed; accepted: (rounds,)."""

    confidences: np.ndarray
    accepted: np.ndarray


def collect_rollouts(target: Target, drafter: Drafter, prompts: Sequence[PromptInputs], gamma: int,
                     sampling: SamplingConfig, max_new_tokens: int = 128, seed: int = 0,
                     progress: Callable[[int], None] | None = None) -> Rollouts:
    """Run the loop with a fixed γ (every position proposed) and record every round."""
    from minispark.measuring.bench import context_budgets

    recorder = RecordingDrafter(drafter)
    generator = make_generator(seed, target.device)
    budgets = context_budgets(target, [inputs.length for inputs in prompts], max_new_tokens)
    for index, inputs in enumerate(prompts):
        with target.session(recorder.feature_layers) as session:
            speculative_generate(session, inputs, recorder, sampling, FixedLength(gamma),
                                 max_new_tokens=budgets[index], eos_ids=target.eos_token_ids, generator=generator)
        if progress:
            progress(index + 1)
    table = np.full((len(recorder.confidences), gamma), np.nan)  # (rounds, γ)
    for row, values in enumerate(recorder.confidences):
        table[row, : len(values)] = values
    return Rollouts(confidences=table, accepted=np.asarray(recorder.accepted, dtype=np.int64))


def calibrate_drafter(target: Target, drafter: Drafter, drafter_dir: str | Path, prompts: Sequence[PromptInputs],
                      gamma: int, sampling: SamplingConfig, max_new_tokens: int = 128, seed: int = 0,
                      progress: Callable[[int], None] | None = None,
                      min_rounds: int = CALIBRATION_MIN_ROUNDS) -> dict:
    """Roll out ``drafter`` (loaded from ``drafter_dir``, e.g. by ``serving.build_serving``), fit
    STS, save it in the drafter directory (``calibration.json`` at T 0, ``calibration-t{T}.json`` at T > 0, so
    one drafter keeps a fit per temperature), report before/after. Fewer than
    ``min_rounds`` rounds at any position is refused: the directory's calibration stays as it was."""
    rollouts = collect_rollouts(target, drafter, prompts, gamma, sampling, max_new_tokens, seed, progress)
    if len(rollouts.accepted) == 0:
        raise MinisparkError("calibration: no rounds were recorded (empty prompts?)")
    name = calibration_name(sampling.temperature)  # beside the ones fitted at other temperatures
    check_enough_rounds(rollouts, min_rounds, len(prompts), Path(drafter_dir) / name)
    calibration: Calibration = fit_sts(rollouts.confidences, rollouts.accepted, drafter=str(drafter_dir),
                                       target=target.name)
    # What loading checks (checkpoint.load_calibration): the target and the sampling fitted for.
    calibration.target_identity = target_id(target.identity())
    calibration.sampling = sampling_record(sampling)
    path = calibration.save(Path(drafter_dir) / name)
    record_written(drafter_dir, name)  # a directory minispark wrote stays replaceable by it
    before = position_metrics(rollouts.confidences, rollouts.accepted)
    after = position_metrics(rollouts.confidences, rollouts.accepted, calibration)
    return {"path": str(path), "rounds": int(len(rollouts.accepted)), "temperatures": calibration.temperatures,
            "before": before, "after": after, "rollouts": rollouts, "calibration": calibration}


def check_enough_rounds(rollouts: Rollouts, min_rounds: int, num_prompts: int, path: Path) -> None:
    """Refuse to fit on fewer than ``min_rounds`` rounds at some draft position (one line saying how many
    there were and how to get more); ``path``, the calibration that would be replaced, is left as it is."""
    drafted = (~np.isnan(rollouts.confidences)).sum(axis=0)  # (γ,) rounds that drafted each position
    short = int(np.argmin(drafted))
    if drafted[short] < min_rounds:
        kept = f"{path} is left as it was" if path.is_file() else "nothing was written"
        raise MinisparkError(f"calibration: position {short + 1} was drafted in only {int(drafted[short])} rounds "
                             f"({len(rollouts.accepted)} rounds from {num_prompts} prompts), fewer than the "
                             f"{min_rounds} a fit needs; roll out more with {option('num_prompts')} or {option('max_new_tokens')} "
                             f"(or lower {option('min_rounds')}); {kept}")
