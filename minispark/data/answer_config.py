"""What ``minispark answers`` takes: :class:`AnswerConfig`, checked as it is built, free of torch so the CLI reads its
defaults for ``--help``.

    .venv/bin/python -c "from minispark.data.answer_config import AnswerConfig; print(AnswerConfig('p.jsonl', 'out'))"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minispark.core import checks
from minispark.core.defaults import MAX_SAMPLES, REGEN_MAX_NEW_TOKENS, REGEN_TEMPERATURE, REGEN_TOP_K, REGEN_TOP_P
from minispark.core.errors import MinisparkError, option
from minispark.data.cache_config import SPLITS

if TYPE_CHECKING:
    from minispark.target.sampling import SamplingConfig


@dataclass
class AnswerConfig:
    """Everything ``minispark answers`` takes (sampling defaults as ``minispark cache``)."""

    prompts: Path
    out: Path
    target: str | None = None
    num_samples: int | None = None
    max_new_tokens: int = REGEN_MAX_NEW_TOKENS
    temperature: float = REGEN_TEMPERATURE
    top_p: float = REGEN_TOP_P
    top_k: int = REGEN_TOP_K
    batch_size: int = 0
    samples_per_shard: int = 256
    seed: int = 0
    split: str = "train"
    target_dtype: str | None = None
    device: str | None = None
    load_in_4bit: bool = False
    load_in_8bit: bool = False

    def __post_init__(self) -> None:
        self.prompts, self.out = Path(self.prompts), Path(self.out)
        for flag, value, minimum in ((option("num_samples"), 1 if self.num_samples is None else self.num_samples, 1),
                                     (option("max_new_tokens"), self.max_new_tokens, 1),
                                     (option("batch_size"), self.batch_size, 0),
                                     (option("samples_per_shard"), self.samples_per_shard, 1)):
            if value < minimum:
                raise MinisparkError(f"{flag} must be >= {minimum}, got {value}")
        checks.integer(self.num_samples, option("num_samples"), 1, MAX_SAMPLES)
        if self.split not in SPLITS:
            raise MinisparkError(f"{option('split')}: {self.split!r} is not one of {', '.join(SPLITS)}")
        _ = self.sampling  # raises on a bad temperature / top-p / top-k

    @property
    def sampling(self) -> "SamplingConfig":
        from minispark.target.sampling import SamplingConfig

        return SamplingConfig(self.temperature, top_k=self.top_k, top_p=self.top_p)
