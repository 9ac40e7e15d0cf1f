"""What ``minispark cache`` takes: :class:`CacheConfig`, validated as it is built (one-line errors
naming the flag), and the shipped prompt files a build defaults to. Kept apart from the build so the
size estimate (``cache_estimate``) and the build (``cache``) can both read it.

    .venv/bin/python -c "from minispark.data.cache_config import CacheConfig; print(CacheConfig('p.jsonl', 'out'))"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minispark.core import checks, check_lists
from minispark.core.defaults import DEFAULT_GAMMA, HELDOUT_FILE, MAX_BLOCK_SIZE, MAX_SAMPLES, PROMPTS_DIR
from minispark.core.defaults import REGEN_MAX_NEW_TOKENS, REGEN_TEMPERATURE, REGEN_TOP_K, REGEN_TOP_P
from minispark.core.errors import MinisparkError, option

if TYPE_CHECKING:
    from minispark.target.sampling import SamplingConfig


SPLITS = ("train", "heldout")
#: Stored feature dtypes (``cache_format.CACHE_DTYPES`` maps them to torch's; this module stays free of torch, so
#: the CLI reads its defaults for ``--help``).
FEATURE_DTYPES = ("bf16", "fp16", "fp32")
SOURCES = ("regenerate", "text")


def default_prompts(is_vlm: bool, split: str = "train") -> Path:
    """The shipped corpus: training prompts (plus image prompts for a VLM target), or the held-out split."""
    if split == "heldout":
        return HELDOUT_FILE
    return PROMPTS_DIR / ("corpus_vision.jsonl" if is_vlm else "corpus.jsonl")


@dataclass
class CacheConfig:
    """Everything ``minispark cache`` takes. ``layers`` is "auto", "1,9,17" or a list of ids.

    ``dtype`` is the stored feature dtype; ``target_dtype`` the target's compute dtype (None: the
    device default, fp32 on CPU). ``num_samples`` defaults to the number of prompts; more cycles
    through the prompts again, each repeat with its own seed.
    """

    prompts: Path
    out: Path
    target: str | None = None
    num_samples: int | None = None
    max_new_tokens: int = REGEN_MAX_NEW_TOKENS
    temperature: float = REGEN_TEMPERATURE
    top_p: float = REGEN_TOP_P
    top_k: int = REGEN_TOP_K
    layers: str | Sequence[int] = "auto"
    anchors_per_sample: int = 32
    anchor_run: int = 16
    window: int = 32
    block: int = DEFAULT_GAMMA
    dtype: str = "bf16"
    target_dtype: str | None = None
    device: str | None = None
    load_in_4bit: bool = False
    load_in_8bit: bool = False
    batch_size: int = 0
    samples_per_shard: int = 64
    seed: int = 0
    split: str = "train"
    source: str = "regenerate"
    force: bool = False

    def __post_init__(self) -> None:
        self.prompts, self.out = Path(self.prompts), Path(self.out)
        num_samples = 1 if self.num_samples is None else self.num_samples
        minimums = {option("num_samples"): (num_samples, 1), option("max_new_tokens"): (self.max_new_tokens, 1),
                    option("anchors_per_sample"): (self.anchors_per_sample, 1),
                    option("anchor_run"): (self.anchor_run, 1), option("window"): (self.window, 0),
                    option("block"): (self.block, 1), option("batch_size"): (self.batch_size, 0),
                    option("samples_per_shard"): (self.samples_per_shard, 1)}
        for flag, (value, minimum) in minimums.items():
            checks.integer(value, flag, minimum, {option("num_samples"): MAX_SAMPLES, option("block"): MAX_BLOCK_SIZE}.get(flag))
        if self.source not in SOURCES:
            raise MinisparkError(f"{option('source')}: {self.source!r} is not one of {', '.join(SOURCES)}")
        if self.split not in SPLITS:
            raise MinisparkError(f"{option('split')}: {self.split!r} is not one of {', '.join(SPLITS)}")
        if self.dtype not in FEATURE_DTYPES:
            raise MinisparkError(f"{option('dtype')}: unknown cache dtype {self.dtype!r} (choose from {', '.join(FEATURE_DTYPES)})")
        _ = self.sampling, self.layer_ids  # both raise MinisparkError on bad values

    @property
    def sampling(self) -> "SamplingConfig":
        from minispark.target.sampling import SamplingConfig

        return SamplingConfig(self.temperature, top_k=self.top_k, top_p=self.top_p)

    @property
    def layer_ids(self) -> list[int] | None:
        """Explicit layer ids (distinct and increasing, as a drafter's ``feature_layers``), or None for auto."""
        if isinstance(self.layers, str):
            if self.layers.strip() == "auto":
                return None
            try:
                ids = [int(check_lists.number_text(x)) for x in self.layers.split(",")]  # '1_0' was layer 10
            except ValueError:
                raise MinisparkError(f"{option('layers')}: expected 'auto' or comma-separated layer ids, "
                                     f"got {check_lists.excerpt(self.layers)}") from None
        else:
            ids = [int(x) for x in self.layers]
        if any(i < 0 for i in ids):  # -1 would be Python's last layer, recorded as -1: a cache no drafter matches
            raise MinisparkError(f"{option('layers')}: layer ids count from 0, got {','.join(map(str, ids))}")
        if any(b <= a for a, b in zip(ids, ids[1:])):
            raise MinisparkError(f"{option('layers')}: layer ids must be distinct and increasing, got "
                                 f"{','.join(map(str, ids))}")
        return ids
