"""How big a cache build will be and whether the disk has room: the ``--dry-run`` estimate and the
check a build runs before it starts (``--force`` skips it). The estimate encodes a spread of the
prompts and assumes every answer runs to ``--max-new-tokens``, so it is an upper bound.

    minispark cache --dry-run --num-samples 2000 --max-new-tokens 512
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from minispark.data.cache_config import CacheConfig
from minispark.data.cache_windows import ByteEstimate, estimate_bytes, format_bytes
from minispark.data.prompts import PromptSample
from minispark.core.errors import MinisparkError, option
from minispark.target.loading import Target


@dataclass
class CacheEstimate:
    """``--dry-run`` output: the size estimate and whether the output disk has room."""

    estimate: ByteEstimate
    free_bytes: int
    layers: list[int]
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.estimate.total_bytes <= self.free_bytes

    def to_json(self) -> dict[str, Any]:
        e = self.estimate
        return {"samples": e.num_samples, "bytes_per_sample": round(e.bytes_per_sample, 1),
                "total_bytes": e.total_bytes, "full_bytes": round(e.full_bytes_per_sample * e.num_samples),
                "ratio_to_full": round(e.ratio, 4), "free_bytes": self.free_bytes, "fits": self.fits,
                "layers": self.layers}

    def describe(self) -> str:
        room = "fits" if self.fits else "does NOT fit"
        return (f"layers {self.layers}: {self.estimate.describe()}; {format_bytes(self.free_bytes)} free at the "
                f"output: {room}")


def estimate(config: CacheConfig, target: Target, samples: list[PromptSample], layers: list[int],
             max_prompts: int) -> CacheEstimate:
    """Bytes per sample and in total for ``config``'s build, every answer assumed to reach the token cap."""
    num_samples = config.num_samples or len(samples)
    picks = np.linspace(0, len(samples) - 1, num=min(len(samples), max_prompts)).round().astype(int)
    lengths = [target.encode(**samples[i].encode_kwargs()).length for i in picks]
    scale = len(samples) / len(picks)  # map each sample to the nearest encoded prompt
    per_sample = [lengths[min(int(i / scale), len(lengths) - 1)] for i in range(len(samples))]
    sizes = estimate_bytes(hidden_size=target.hidden_size, num_layers=len(layers), prompt_tokens=per_sample,
                           answer_tokens=config.max_new_tokens, anchors_per_sample=config.anchors_per_sample,
                           anchor_run=config.anchor_run, window=config.window, block=config.block, dtype=config.dtype,
                           num_samples=num_samples, seed=config.seed)
    notes = [f"answers assumed to reach --max-new-tokens {config.max_new_tokens} (an upper bound)"]
    return CacheEstimate(sizes, free_bytes(config.out), layers, notes)


def check_disk(config: CacheConfig, target: Target, samples: list[PromptSample], layers: list[int],
               remaining: int) -> None:
    """Refuse to start a build whose ``remaining`` samples would not fit the output disk."""
    need = estimate(config, target, samples, layers, max_prompts=64).estimate.bytes_per_sample * remaining
    free = free_bytes(config.out)
    if need > free:
        raise MinisparkError(f"{option('out')} {config.out}: needs up to ~{format_bytes(need)} for {remaining} samples but only "
                             f"{format_bytes(free)} is free (see {option('dry_run')}; {option('force')} starts anyway)")


def free_bytes(path: Path) -> int:
    """Free bytes on the disk that holds ``path`` (or its nearest existing parent)."""
    path = Path(path).resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free
