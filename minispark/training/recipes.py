"""Training recipes: the :class:`TrainConfig` dataclass, recipe files in ``recipes/``, and overrides.

A recipe is a TOML file whose header comment gives the launch command. Its sections only group
the keys for the reader; every key is one :class:`TrainConfig` field, so overrides name the bare
field (``lr=3e-4``, ``feature_layers=1,9,17``) and may also spell the section (``train.lr=3e-4``)::

    # minispark train --recipe tiny
    [draft]
    block_size = 4
    [train]
    steps = 60

``load_recipe("tiny", ["steps=10"])`` finds ``recipes/tiny.toml`` (or takes a path), checks every
key and type, applies the overrides and returns the config; any problem raises a one-line
:class:`MinisparkError` naming the file or the override at fault.

    .venv/bin/python -c "from minispark.training.recipes import load_recipe; print(load_recipe('tiny', ['steps=5']))"
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
import types
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

from minispark.model.draft_config import HEAD_TYPES, MARKOV_W1
from minispark.core import checks, check_lists
from minispark.core.defaults import DEFAULT_GAMMA, MAX_BLOCK_SIZE, MAX_DRAFT_LAYERS, MAX_LR, MIN_LR, RECIPE_DIR
from minispark.core.errors import MinisparkError, json_reason, option

CHOICES = {
    "head": HEAD_TYPES,
    "markov_w1": MARKOV_W1,
    "cache_dtype": ("bf16", "fp16", "fp32"),
    "device": ("auto", "cpu", "cuda"),
    "dtype": ("auto", "fp32", "bf16"),
    "optimizer": ("auto", "adamw", "adamw8bit"),
    "init_layers": ("random", "first", "last"),
}


@dataclass
class TrainConfig:
    """Everything ``minispark train`` takes. ``None`` means "take it from the target or the cache".

    target: hidden_size / vocab_size / tie_embeddings describe the target for ``--dry-run`` (no
        model is loaded) and are checked against the real target when training.
    cache: what ``minispark cache`` must have been run with (layers, window, γ = ``block_size``);
        anchors_per_sample / max_new_tokens / max_prompt_tokens size the packed batch for the
        memory estimate.
    draft: DraftConfig overrides; attention sizes and MLP width default to the target's. ``draft_vocab`` N
        drafts the N most frequent answer tokens (0: the whole vocabulary); unset, the target's vocabulary decides
        (``defaults.auto_draft_vocab``: the whole of a small one, 32,768 tokens of a large one).
        ``init_layers`` starts the draft layers from the target's ``first`` or ``last`` decoder
        layers (weights of equal name and shape; the q/k norms start at 1) instead of ``random``.
    train: optimisation, precision, logging. ``chunk_anchors`` anchors' γ×V logits at a time.
        Data ablations without rebuilding the cache: ``max_samples`` trains on the first N samples
        only (``first_sample`` > 0 skips the samples before it: a slice [first_sample, max_samples);
        ``replay_samples`` N keeps the first N of the skipped ones beside the slice, [0, N) ∪ [first_sample,
        max_samples): a warm start trained on a new slice while replaying answers its source learned),
        ``max_anchors_per_sample`` keeps a seeded random subset of each sample's anchors (a
        sparser cache at the same generation cost), ``max_answer_tokens`` (answer sets only) cuts every
        answer to its first N tokens, what a regeneration capped at N would have written (sampling is
        sequential): more, shorter answers against fewer, longer ones at equal tokens; ``feature_noise``
        adds EAGLE-style Gaussian noise of that many RMS units to the target features (0 = off for all four). ``patience``
        stops a run whose held-out τ proxy has not improved for that many steps (0 = run all steps).
        ``init_from`` starts the trainable weights from a drafter directory of the same config (a warm start: a
        fresh optimizer, and the source's draft vocabulary kept);
        ``onpolicy`` (with ``init_from``) trains only on the anchors where that drafter's replayed
        rounds start (``training/onpolicy.py``). ``answers_dir`` trains on an answer set instead of
        ``cache_dir``: the target runs in the training process and computes every answer position's
        features as training goes, in a sliding shuffle buffer of ``online_pool`` answers (``training/online.py``); a VLM's
        image prompts are encoded again from ``online_prompts`` (default: the shipped corpus of that name).
        ``online_store`` keeps each answer's features in that directory after its first prefill, so later epochs
        read them instead of running the target again (``training/feature_store.py``; ~2.2 MB a SmolLM2 answer).
    loss: §10.3 weights (α) and the position decay w_k = exp(−(k−1)/loss_decay_gamma); ``alpha_kl``
        (KL(p_t ‖ p_d)) and ``alpha_tau`` (minus the expected accepted drafts) are the optional
        variants of ``losses.py``.
    """

    # [target]
    target: str | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    tie_embeddings: bool | None = None
    # [cache]
    feature_layers: list[int] | None = None
    window: int = 32
    cache_dtype: str = "bf16"
    anchors_per_sample: int = 32
    max_new_tokens: int = 512
    max_prompt_tokens: int = 512
    # [draft]
    num_layers: int = 2
    num_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int | None = None
    head: str = "vanilla"
    markov_rank: int = 256
    markov_w1: str = "table"
    block_size: int = DEFAULT_GAMMA
    confidence_head: bool = True
    mask_token_id: int | None = None
    draft_vocab: int | None = None
    init_layers: str = "random"
    # [train]
    steps: int = 1000
    batch_anchors: int = 32
    anchor_run: int = 0
    max_samples: int = 0
    first_sample: int = 0
    replay_samples: int = 0
    max_anchors_per_sample: int = 0
    max_answer_tokens: int = 0
    feature_noise: float = 0.0
    lr: float = 6e-4
    warmup_frac: float = 0.04
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0
    chunk_anchors: int = 8
    grad_checkpointing: bool = False
    compile: bool = False
    device: str = "auto"
    dtype: str = "auto"
    optimizer: str = "auto"
    log_every: int = 10
    checkpoint_every: int = 200
    keep_checkpoints: int = 2
    cache_dir: str | None = None
    answers_dir: str | None = None
    online_pool: int = 32
    online_prompts: str | None = None
    online_store: str | None = None
    out_dir: str | None = None
    heldout_cache: str | None = None
    eval_every: int = 0
    eval_anchors: int = 512
    patience: int = 0
    init_from: str | None = None
    onpolicy: bool = False
    # [loss]
    alpha_ce: float = 0.1
    alpha_tv: float = 0.9
    alpha_conf: float = 1.0
    alpha_kl: float = 0.0
    alpha_tau: float = 0.0
    loss_decay_gamma: float = 4.0
    # not file keys: the recipe it came from, and the command-line overrides applied to it (never saved or
    # compared: they say who to blame when the draft model's sizes are refused, see ``blame``)
    name: str = field(default="custom", metadata={"internal": True})
    overrides: tuple[str, ...] = field(default=(), compare=False, repr=False, metadata={"internal": True})

    def __post_init__(self) -> None:
        for key, choices in CHOICES.items():
            if getattr(self, key) not in choices:
                raise MinisparkError(f"{key}: {getattr(self, key)!r} is not one of {', '.join(choices)}")
        positive = ("num_layers", "markov_rank", "block_size", "steps", "batch_anchors", "chunk_anchors",
                    "log_every", "checkpoint_every", "keep_checkpoints", "anchors_per_sample", "max_new_tokens", "online_pool",
                    "loss_decay_gamma", "lr")
        for key in positive:  # written as "not > 0" so that nan fails too
            if not 0 < getattr(self, key) < float("inf"):
                raise MinisparkError(f"{key}: must be a finite number > 0, got {getattr(self, key)}")
        for key in ("window", "max_prompt_tokens", "draft_vocab", "anchor_run", "max_samples",
                    "first_sample", "replay_samples", "max_anchors_per_sample", "max_answer_tokens", "feature_noise", "eval_every", "patience", "eval_anchors", "weight_decay", "grad_clip", "alpha_ce", "alpha_tv", "alpha_conf", "alpha_kl", "alpha_tau"):
            if getattr(self, key) is not None and not 0 <= getattr(self, key) < float("inf"):  # None: unset
                raise MinisparkError(f"{key}: must be a finite number >= 0, got {getattr(self, key)}")
        if self.lr < MIN_LR:
            raise MinisparkError(f"lr: at least {MIN_LR:g} (a smaller step changes no fp32 weight), got {self.lr:g}")
        if self.lr > MAX_LR:
            raise MinisparkError(f"lr: at most {MAX_LR:g} (an Adam step moves every weight by about lr), got {self.lr:g}")
        weights = ("alpha_ce", "alpha_tv", "alpha_conf", "alpha_kl", "alpha_tau")
        if not any(getattr(self, key) for key in weights):  # the loss would be 0: steps that train nothing
            raise MinisparkError(f"{', '.join(weights)}: all 0, so the loss is 0 and training would change nothing; "
                                 "give at least one a positive weight")
        if not 0 <= self.warmup_frac < 1:
            raise MinisparkError(f"warmup_frac: must be in [0, 1), got {self.warmup_frac}")
        for key in ("hidden_size", "vocab_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size"):
            if getattr(self, key) is not None and getattr(self, key) < 1:  # None: the target's; 0 would be no width
                raise MinisparkError(f"{key}: must be >= 1, or none for the target's, got {getattr(self, key)}")
        # Token ids and counts the recipe's own vocabulary bounds: checked here, where an override is blamed as
        # such, not when the draft model is sized ("recipe 'tiny' (the target's sizes ...)": the file was fine)
        if self.mask_token_id is not None and not 0 <= self.mask_token_id < (self.vocab_size or checks.MAX_INT):
            raise MinisparkError(f"mask_token_id, vocab_size: a token id in [0, {self.vocab_size or checks.MAX_INT})"
                                 f", got {self.mask_token_id}")
        if self.vocab_size is not None and (self.draft_vocab or 0) > self.vocab_size:
            raise MinisparkError(f"draft_vocab, vocab_size: at most the vocabulary's {self.vocab_size} tokens (0 = "
                                 f"all), got {self.draft_vocab}")
        for key, most in (("num_layers", MAX_DRAFT_LAYERS), ("block_size", MAX_BLOCK_SIZE)):
            if getattr(self, key) > most:  # past these a model is built, or sizes multiplied, before anything fails
                raise MinisparkError(f"{key}: at most {most}, got {getattr(self, key)}")
        if self.num_heads and self.num_kv_heads and self.num_heads % self.num_kv_heads:
            raise MinisparkError(f"num_heads, num_kv_heads: {self.num_heads} query heads are not a multiple of "
                                 f"{self.num_kv_heads} key/value heads")
        for item in fields(self):  # past these, torch and numpy overflow instead of refusing
            value = getattr(self, item.name)
            if isinstance(value, int) and not isinstance(value, bool):
                if item.name == "seed":
                    checks.seed(value, "seed")
                else:
                    checks.integer(value, item.name, -checks.MAX_INT)
        if self.max_samples and self.first_sample >= self.max_samples:
            raise MinisparkError(f"first_sample, max_samples: the slice [{self.first_sample}, {self.max_samples}) "
                                 "holds no sample")
        if self.replay_samples > self.first_sample:
            raise MinisparkError(f"replay_samples {self.replay_samples}: replays samples before first_sample "
                                 f"({self.first_sample}), so at most {self.first_sample}")
        if self.cache_dir and self.answers_dir:
            raise MinisparkError("cache_dir and answers_dir: train on a feature cache or on an answer set, not both")
        if self.max_answer_tokens and self.cache_dir:
            raise MinisparkError("max_answer_tokens: cuts the answers of an answer set (answers_dir); a cache's anchors "
                                 "are fixed when it is built")
        if self.onpolicy and self.answers_dir:
            raise MinisparkError("onpolicy: replays rounds over a feature cache; train on cache_dir, not answers_dir")
        if self.onpolicy and not self.init_from:
            raise MinisparkError("onpolicy: needs init_from = DRAFTER_DIR, the drafter whose rounds choose the anchors")
        if self.feature_layers is not None:
            self.feature_layers = [int(i) for i in self.feature_layers]
            if not self.feature_layers or self.feature_layers != sorted(set(self.feature_layers)):
                raise MinisparkError(f"feature_layers: need strictly increasing layer ids, got {self.feature_layers}")

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if key != "overrides"}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config") -> "TrainConfig":
        unknown = sorted(set(data) - set(_HINTS))
        if unknown:
            raise MinisparkError(f"{where}: unknown train config keys {unknown}")
        return cls(**{key: check_value(key, value, where) for key, value in data.items()})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    # ------------------------------------------------------------------ derived settings
    @property
    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    @property
    def compute_dtype(self) -> str:
        """"bf16" (autocast) or "fp32"; "auto" is bf16 on CUDA and on a CPU with bf16 kernels (avx512_bf16 or
        AMX: a training step 1.5-2.8× faster there), fp32 on other CPUs (bf16 emulated: many times slower)."""
        if self.dtype != "auto":
            return self.dtype
        if self.resolved_device == "cuda":
            return "bf16"
        from minispark.target.runtime import cpu_bf16_kernels

        return "bf16" if cpu_bf16_kernels() else "fp32"

    @property
    def optimizer_name(self) -> str:
        """"adamw8bit" (bitsandbytes) or "adamw" (torch, fused); "auto" is 8-bit on CUDA."""
        if self.optimizer != "auto":
            return self.optimizer
        return "adamw8bit" if self.resolved_device == "cuda" else "adamw"


SECTIONS: dict[str, tuple[str, ...]] = {
    "target": ("target", "hidden_size", "vocab_size", "tie_embeddings"),
    "cache": ("feature_layers", "window", "cache_dtype", "anchors_per_sample", "max_new_tokens", "max_prompt_tokens"),
    "draft": ("num_layers", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "head", "markov_rank",
              "markov_w1", "block_size", "confidence_head", "mask_token_id", "draft_vocab", "init_layers"),
    "train": ("steps", "batch_anchors", "anchor_run", "max_samples", "first_sample", "replay_samples", "max_anchors_per_sample", "max_answer_tokens",
              "feature_noise", "lr", "warmup_frac", "weight_decay", "grad_clip", "seed", "chunk_anchors",
              "grad_checkpointing", "compile", "device", "dtype", "optimizer", "log_every", "checkpoint_every",
              "keep_checkpoints", "cache_dir", "answers_dir", "online_pool", "online_prompts", "online_store",
              "out_dir", "heldout_cache", "eval_every", "eval_anchors", "patience", "init_from", "onpolicy"),
    "loss": ("alpha_ce", "alpha_tv", "alpha_conf", "alpha_kl", "alpha_tau", "loss_decay_gamma"),
}
FILE_KEYS = {key for keys in SECTIONS.values() for key in keys}
_HINTS = typing.get_type_hints(TrainConfig)
assert FILE_KEYS == {f.name for f in fields(TrainConfig) if not f.metadata.get("internal")}, "SECTIONS out of date"


# ---------------------------------------------------------------------- typing of values
def _base_type(key: str) -> tuple[Any, bool]:
    """(the non-None type of field ``key``, whether None is allowed)."""
    hint = _HINTS[key]
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return hint, False


def _type_name(kind: Any) -> str:
    return "list of ints" if typing.get_origin(kind) is list else kind.__name__


def check_value(key: str, value: Any, where: str) -> Any:
    """``value`` (already parsed, e.g. from TOML) checked against the type of field ``key``."""
    kind, nullable = _base_type(key)
    if value is None and nullable:
        return None
    ok = {bool: isinstance(value, bool), int: isinstance(value, int) and not isinstance(value, bool),
          float: isinstance(value, (int, float)) and not isinstance(value, bool), str: isinstance(value, str)}
    if typing.get_origin(kind) is list:
        if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return list(value)
    elif ok.get(kind):
        return float(value) if kind is float else value
    raise MinisparkError(f"{where}: {key} must be {_type_name(kind)}{' or none' if nullable else ''}, got {value!r}")


def parse_value(key: str, text: str, where: str) -> Any:
    """Parse the string of a ``key=value`` override into the type of field ``key``."""
    kind, nullable = _base_type(key)
    raw = text.strip()
    if not raw:  # "key=" is a value left out, not "none": it said "not set in recipe" far from the override
        none = f" (write {key}=none to leave it unset)" if nullable else ""
        raise MinisparkError(f"{where}: {key} has an empty value{none}")
    if nullable and raw.lower() in ("none", "null"):
        return None
    try:
        if kind is bool:
            flags = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False,
                     "off": False}
            return flags[raw.lower()]
        if kind is int:
            return int(check_lists.number_text(raw))
        if kind is float:
            return float(check_lists.number_text(raw))
        if typing.get_origin(kind) is list:  # [1, 8, 15] or 1,8,15; a lone or inner bracket or an empty item is a typo
            body = raw[1:-1] if raw.startswith("[") and raw.endswith("]") else raw
            if "[" in body or "]" in body:
                raise ValueError(raw)
            return [int(check_lists.number_text(x)) for x in body.split(",")] if body.strip() else []
        return raw
    except (KeyError, ValueError):
        raise MinisparkError(f"{where}: {key} must be {_type_name(kind)}, "
                             f"got {check_lists.excerpt(text)}") from None


def _unknown(key: str, where: str) -> MinisparkError:
    close = difflib.get_close_matches(key, sorted(FILE_KEYS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return MinisparkError(f"{where}: unknown recipe key {key!r}{hint}")


# ---------------------------------------------------------------------- files and overrides
def recipe_path(name_or_path: str | Path) -> Path:
    """A recipe file: an existing path, or ``recipes/NAME.toml``."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = RECIPE_DIR / f"{name_or_path}.toml"
    if shipped.is_file() and path.name == str(name_or_path):  # a bare name: a directory called "tiny" here hides nothing
        return shipped
    if path.is_dir():
        raise MinisparkError(f"{option('recipe')} {name_or_path}: is a directory; give a recipe TOML file or a shipped name")
    if path.exists() or path.is_symlink():  # a pipe, a device, a link to nowhere: "no such file" was wrong
        checks.input_file(path, option("recipe"))
    names = ", ".join(list_recipes()) or "none found"
    raise MinisparkError(f"{option('recipe')} {name_or_path}: no such file or shipped recipe (shipped: {names})")


def list_recipes() -> list[str]:
    """Names of the shipped recipes."""
    return sorted(p.stem for p in RECIPE_DIR.rglob("*.toml"))


def toml_error(path: Path, text: str, exc: tomllib.TOMLDecodeError) -> str:
    """One line for tomllib's refusal, naming the file and line: a key or a section given twice in tomllib's
    words ("Cannot overwrite a value", "Cannot declare ('train',) twice") sent the user looking for a value."""
    reason = str(exc)
    match = re.fullmatch(r"(.*) \(at line (\d+), column \d+\)", reason)
    if match is None:  # "(at end of document)"
        return f"{path}: unreadable recipe ({reason})"
    reason, line = match.group(1), int(match.group(2))
    if reason == "Cannot overwrite a value":
        key = text.splitlines()[line - 1].partition("=")[0].strip()
        return f"{path}:{line}: {key} is given twice; give each key once"
    if twice := re.fullmatch(r"Cannot declare \((.*?),?\) twice", reason):
        section = ".".join(part.strip().strip("'\"") for part in twice.group(1).split(","))
        return f"{path}:{line}: section [{section}] is declared twice; give each section once"
    return f"{path}:{line}: unreadable recipe ({reason})"


def read_recipe_file(path: Path) -> dict[str, Any]:
    """The flat key → value mapping of one recipe file, every key and type checked."""
    try:
        text = checks.edited_text(path)
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MinisparkError(toml_error(path, text, exc)) from None
    except OSError as exc:
        raise MinisparkError(f"{path}: unreadable recipe ({exc})") from None
    except UnicodeDecodeError:
        raise MinisparkError(f"{path}: unreadable recipe (not UTF-8 text; a recipe is TOML)") from None
    except (ValueError, RecursionError) as exc:  # a 4300-digit integer, arrays nested too deeply: tracebacks
        raise MinisparkError(f"{path}: unreadable recipe ({json_reason(exc)})") from None
    flat: dict[str, Any] = {}
    for section, table in data.items():
        if not isinstance(table, dict):  # `steps = 3` above every [section]: a key, not a section
            home = next((name for name, keys in SECTIONS.items() if section in keys), None)
            where = f"; put it under [{home}]" if home else f" (sections: {', '.join(SECTIONS)})"
            raise MinisparkError(f"{path}: {section} = {table!r} is outside every section{where}")
        if section not in SECTIONS:
            raise MinisparkError(f"{path}: unknown section [{section}] (sections: {', '.join(SECTIONS)})")
        for key, value in table.items():
            if key not in SECTIONS[section]:
                if key in FILE_KEYS:
                    home = next(s for s, keys in SECTIONS.items() if key in keys)
                    raise MinisparkError(f"{path}: {key} belongs in [{home}], not [{section}]")
                raise _unknown(f"{section}.{key}", str(path))
            flat[key] = check_value(key, value, f"{path} [{section}]")
    return flat


def apply_overrides(settings: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``settings`` updated with ``key=value`` strings (``section.key=value`` also accepted)."""
    settings = dict(settings)
    given: dict[str, str] = {}  # key → the override that set it: a second one would silently win
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise MinisparkError(f"override {check_lists.excerpt(item)}: expected key=value")
        section, dot, bare = key.rpartition(".")
        if dot:
            if section not in SECTIONS or bare not in SECTIONS[section]:
                raise _unknown(key, "override")
            key = bare
        if key not in FILE_KEYS:
            raise _unknown(key, "override")
        if key in given:
            raise MinisparkError(f"override {check_lists.excerpt(item)}: {key} is already set by "
                                 f"{check_lists.excerpt(given[key])}; give it once")
        given[key] = item
        settings[key] = parse_value(key, text, f"override {check_lists.excerpt(item)}")
    return settings


def override_key(item: str) -> str:
    """The key a ``key=value`` (or ``section.key=value``) override sets."""
    return item.partition("=")[0].strip().rpartition(".")[2]


def load_recipe(name_or_path: str | Path, overrides: list[str] | None = None,
                values: dict[str, Any] | None = None) -> TrainConfig:
    """The :class:`TrainConfig` of a recipe file (or shipped recipe name) with ``KEY=VALUE`` overrides applied,
    then ``values`` (keys set to values already typed, e.g. a path given as a flag: never parsed as text)."""
    path = recipe_path(name_or_path)
    overrides, values = list(overrides or []), dict(values or {})
    for item in overrides:
        if (key := override_key(item)) in values:
            raise MinisparkError(f"{option(key)}: given twice, as a flag and as the override {item!r}; keep one")
    settings = apply_overrides(read_recipe_file(path), overrides) | values
    try:
        return TrainConfig(**settings, name=path.stem, overrides=tuple(overrides))
    except MinisparkError as exc:
        raise MinisparkError(f"{blame(str(exc), str(path), overrides)}: {exc}") from None


def blame(message: str, recipe: str, overrides: Sequence[str]) -> str:
    """Who set what a check refused (its message starts with the key or keys at fault): the command-line
    overrides of those keys, else ``recipe`` (the recipe file, or how to name the recipe)."""
    named = set(re.findall(r"\w+", message.split(":", 1)[0]))
    culprits = [item for item in overrides if override_key(item) in named]
    if not culprits:
        return recipe
    return ("override " if len(culprits) == 1 else "overrides ") + ", ".join(repr(item) for item in culprits)


def launch_command(path: Path) -> str:
    """The launch command in a recipe's header (its first ``# minispark train`` comment line)."""
    for line in path.read_text().splitlines():
        if line.startswith("# minispark train"):
            return line[2:].strip()
    return ""


def config_differences(old: TrainConfig, new: TrainConfig, ignore: tuple[str, ...] = ()) -> list[str]:
    """Names of the fields whose values differ, in field order."""
    return [f.name for f in fields(TrainConfig)
            if f.compare and f.name not in ignore and getattr(old, f.name) != getattr(new, f.name)]
