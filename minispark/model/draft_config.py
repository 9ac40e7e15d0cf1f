"""The draft model's configuration: every size and choice needed to rebuild a drafter, saved as JSON.

``DraftConfig`` is written as ``config.json`` beside every drafter checkpoint; loading refuses a
config of another version or with unknown keys. The heads, the draft context and the
model all read it, so it lives apart from the model code.

    .venv/bin/python -m pytest -q tests/model/test_draft_model.py -k config
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

import torch

from minispark.core.defaults import DEFAULT_GAMMA, MAX_BLOCK_SIZE, MAX_DRAFT_LAYERS, MAX_INT
from minispark.core.identity import DTYPES

HeadType = Literal["none", "vanilla", "gated", "rnn"]
HEAD_TYPES: tuple[str, ...] = ("none", "vanilla", "gated", "rnn")
#: How the Markov head embeds the previous token: its own (rows, r) table, or a learned (r, d)
#: projection of the frozen target embedding (far fewer parameters to memorize with).
MARKOV_W1: tuple[str, ...] = ("table", "embedding")
CONFIG_VERSION = 1


@dataclass
class DraftConfig:
    """Everything needed to rebuild a draft model; saved as JSON beside its weights.

    ``target`` identifies the target whose embedding/lm_head/features the drafter was trained on;
    loading refuses a different target. ``window`` (W) bounds the context rows a block sees by
    text position (``0`` = unlimited). ``markov_w1`` picks the Markov head's previous-token embedding
    (see :data:`MARKOV_W1`).
    """

    target: str
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    feature_layers: tuple[int, ...]
    mask_token_id: int
    num_layers: int = 2
    rms_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    block_size: int = DEFAULT_GAMMA
    window: int = 0
    head: HeadType = "vanilla"
    markov_rank: int = 256
    markov_w1: str = "table"
    confidence_head: bool = True
    confidence_with_markov: bool = True
    draft_vocab: int = 0
    qk_norm: bool = True
    initializer_range: float = 0.02
    dtype: str = "bfloat16"
    version: int = CONFIG_VERSION

    def __post_init__(self) -> None:
        self.feature_layers = tuple(int(i) for i in self.feature_layers)
        if not self.feature_layers:
            raise ValueError("feature_layers must name at least one target layer")
        if any(b <= a for a, b in zip(self.feature_layers, self.feature_layers[1:])):
            raise ValueError(f"feature_layers must be strictly increasing, got {self.feature_layers}")
        if self.head not in HEAD_TYPES:
            raise ValueError(f"head must be one of {HEAD_TYPES}, got {self.head!r}")
        if self.head != "none" and self.markov_rank <= 0:
            raise ValueError(f"head {self.head!r} needs markov_rank > 0, got {self.markov_rank}")
        if self.markov_w1 not in MARKOV_W1:
            raise ValueError(f"markov_w1 must be one of {MARKOV_W1}, got {self.markov_w1!r}")
        for key in ("hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "vocab_size",
                    "num_layers"):
            if getattr(self, key) < 1:  # a zero width builds an empty model (or divides by zero below)
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} not a multiple of num_kv_heads {self.num_kv_heads}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.window < 0:
            raise ValueError(f"window must be >= 0, got {self.window}")
        for key, most in (("num_layers", MAX_DRAFT_LAYERS), ("block_size", MAX_BLOCK_SIZE), ("window", MAX_INT)):
            if getattr(self, key) > most:  # a recipe refuses these too; past int64 a window overflowed torch
                raise ValueError(f"{key} must be at most {most}, got {getattr(self, key)}")
        for key in ("rms_eps", "rope_theta"):  # 0 or less made every confidence NaN: a traceback at the first round
            if not 0 < getattr(self, key) < math.inf:
                raise ValueError(f"{key} must be a finite number > 0, got {getattr(self, key)}")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} outside vocab of {self.vocab_size}")
        if not 0 <= self.draft_vocab <= self.vocab_size:
            raise ValueError(f"draft_vocab must be in [0, {self.vocab_size}], got {self.draft_vocab}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.version != CONFIG_VERSION:
            raise ValueError(f"draft config version {self.version} is not supported (want {CONFIG_VERSION})")

    @property
    def feature_size(self) -> int:
        """Width m·d of the concatenated target features."""
        return len(self.feature_layers) * self.hidden_size

    @property
    def output_size(self) -> int:
        """How many tokens the drafter scores: the draft vocabulary, or the whole target vocabulary."""
        return self.draft_vocab or self.vocab_size

    @property
    def confidence_uses_markov(self) -> bool:
        return self.confidence_head and self.confidence_with_markov and self.head != "none"

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> "DraftConfig":
        """A config as read from JSON: no unknown key, every key present, each value of its field's kind (a
        damaged or hand-edited ``config.json`` is a ValueError naming the key). A key that has a default is
        required too: a drafter trained with ``rope_theta`` 1e6 whose config lost the key drafted, worse, with
        the default (every config minispark writes has every key of its version)."""
        known = {f.name: f for f in fields(cls)}
        unknown = set(data) - set(known)
        if "model_type" in unknown:  # a target's directory given as a drafter: its dozens of keys listed, no advice
            raise ValueError(f"a transformers model's config (model_type {data['model_type']!r}), not a drafter's; "
                             "give a drafter directory (train writes one)")
        if unknown:
            raise ValueError(f"unknown draft config keys: {sorted(unknown)}")
        missing = [name for name in known if name not in data]
        if missing:
            raise ValueError(f"draft config lacks the keys {missing}; a drafter's config.json gives every key "
                             "(the values it was trained with): restore them from the training run's config.json")
        for name, value in data.items():
            kind = _JSON_KINDS.get(str(known[name].type), "text")
            if not is_kind(value, kind):
                raise ValueError(f"draft config key {name!r}: expected {kind}, got {value!r}")
        return cls(**data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "DraftConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))


#: What a field's JSON value must be, by its annotation (``HeadType`` and ``str`` fields: text).
_JSON_KINDS = {"int": "a whole number", "float": "a finite number", "bool": "true or false",
               "tuple[int, ...]": "a list of whole numbers"}


def is_kind(value: Any, kind: str) -> bool:
    """Whether a JSON ``value`` is of ``kind`` (a :data:`_JSON_KINDS` value, or \"text\")."""
    def whole(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if kind == "a whole number":
        return whole(value)
    if kind == "a finite number":
        return (whole(value) or isinstance(value, float)) and math.isfinite(value)
    if kind == "true or false":
        return isinstance(value, bool)
    if kind == "a list of whole numbers":
        return isinstance(value, (list, tuple)) and all(whole(v) for v in value)
    return isinstance(value, str)
