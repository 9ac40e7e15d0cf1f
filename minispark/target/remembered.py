"""One remembered target: a drafter directory records the target it was trained for and how that target
was loaded (``target.json``: source, identity, dtype, quantization, an int8 runtime), as answer sets and caches already
do in their manifests; a command given ``--drafter DIR`` (or a cache / answer set) and no ``--target``
loads that target the same way.

Rules (:func:`resolve_loading`): the recorded source is used when ``--target`` is not given; an explicit
``--target`` that is a local directory or the embedded model is checked against the recorded identity
before anything loads (another target: one line, exit 2); the recorded quantization and half-precision
dtype apply on CUDA only when no loading flag says otherwise (a CPU run loads fp32, bitsandbytes needs
CUDA). :func:`auto_4bit` decides, on CUDA, to load 4-bit when the bf16 weights would not fit the free
memory (an explicit flag wins).

    .venv/bin/python -m pytest -q tests/target/test_remembered_target.py
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from minispark.core.defaults import DTYPE_SPELLINGS
from minispark.core.errors import MinisparkError, json_reason, option
from minispark.core.identity import same_target, target_id, weights_hash
from minispark.core.checks import edited_text
from minispark.core.model_files import UnreadableConfig, read_config

TARGET_FILE = "target.json"
#: The key of a DeepSpec ``config.json`` minispark exported that records its target's identity.
EXPORTED_TARGET_KEY = "minispark_target"
#: What a 4-bit load needs besides the weights on a card: activations, KV cache, vision-tower
#: transients, the drafter and the CUDA context (the bf16 weights must fit *with* this to stay bf16).
AUTO_4BIT_HEADROOM = 1.5e9
#: ``dtype`` names as manifests record them (torch's) → the ``--dtype`` spelling.
DTYPE_FLAGS = {**{name: short for short, name in DTYPE_SPELLINGS.items()}, **{short: short for short in DTYPE_SPELLINGS}}


@dataclass(frozen=True)
class TargetRecord:
    """How a target was loaded for an artifact: ``source`` as given (hub id, resolved path, or the embedded
    name), ``identity`` (``name@weights-hash``), ``dtype`` (fp32 | bf16 | fp16) and ``quantization``
    (``4bit`` | ``8bit`` | None); ``runtime`` ``int8`` for one that ran ``--runtime int8`` (weight-only int8
    linears: another target; every other runtime computes the same numbers, as ``cache_format.int8_runtime``)."""

    source: str
    identity: str
    dtype: str | None = None
    quantization: str | None = None
    runtime: str | None = None

    def to_json(self) -> dict[str, Any]:
        record = asdict(self)
        if record["runtime"] is None:  # records written before the key stay byte-identical
            del record["runtime"]
        return record

    def describe(self) -> str:
        how = ", ".join(f for f in (self.dtype, self.quantization, self.runtime and f"runtime {self.runtime}") if f)
        return f"{self.source} ({how})" if how else self.source


def record_from_manifest(config: dict[str, Any]) -> TargetRecord:
    """The record a cache or answer-set manifest config holds (``target`` identity dict, dtype, quantization)."""
    identity = config["target"]
    model = config.get("target_model", {})
    dtype = config.get("compute_dtype", model.get("compute_dtype"))
    quantization = config.get("quantization", model.get("quantization"))
    return TargetRecord(identity["name"], target_id(identity), DTYPE_FLAGS.get(str(dtype)) if dtype else None,
                        quantization, config.get("runtime", model.get("runtime")))


def _checked_record(data: dict[str, Any]) -> TargetRecord:
    """A record read from ``target.json``, every field of the type and spelling ``write_record`` writes (a
    hand-edited one would fail later as a traceback, or load the target in a way no flag can ask for)."""
    for key in ("source", "identity"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise TypeError(f"'{key}' must be a non-empty string, got {data.get(key)!r}")
    if data.get("dtype") is not None and data["dtype"] not in DTYPE_FLAGS.values():
        raise ValueError(f"'dtype' must be one of {', '.join(sorted(set(DTYPE_FLAGS.values())))}, got {data['dtype']!r}")
    if data.get("quantization") not in (None, "4bit", "8bit"):
        raise ValueError(f"'quantization' must be 4bit, 8bit or null, got {data['quantization']!r}")
    if data.get("runtime") not in (None, "int8"):
        raise ValueError(f"'runtime' must be int8 or absent, got {data['runtime']!r}")
    return TargetRecord(data["source"], data["identity"], data.get("dtype"), data.get("quantization"),
                        data.get("runtime"))


def write_record(directory: Path | str, record: TargetRecord) -> Path:
    """Write ``target.json`` into ``directory`` atomically."""
    from minispark.core.atomic import write_json_atomic

    path = Path(directory) / TARGET_FILE
    write_json_atomic(path, record.to_json())
    return path


def read_record(directory: Path | str, config: dict[str, Any] | None = None) -> TargetRecord | None:
    """The record of a drafter directory (``target.json``), a cache or an answer set (their manifest);
    None when it records none (a drafter trained before records existed, a DeepSpec import). ``config``: the
    directory's ``config.json`` when the caller has read it already."""
    directory = Path(directory)
    path = directory / TARGET_FILE
    if path.is_file():
        try:
            data = json.loads(edited_text(path))
            if not isinstance(data, dict):
                raise TypeError(f"a JSON {type(data).__name__}, not an object")
            return _checked_record(data)
        except (ValueError, TypeError, RecursionError) as exc:  # RecursionError: nested too deeply
            raise MinisparkError(f"{path}: not a target record ({json_reason(exc)}); delete it to load the target from "
                                 f"{option('target')}") from None
    # a drafter trained before target.json, or a DeepSpec export minispark wrote (``minispark_target``): its
    # identity, loaded as given
    if config is None:
        try:
            config = read_config(directory)
        except UnreadableConfig:
            config = None
    if config is not None:
        identity = config.get("target") or config.get(EXPORTED_TARGET_KEY)
        if isinstance(identity, str) and "@" in identity and not identity.startswith("deepspec"):
            return TargetRecord(identity.rpartition("@")[0], identity)
    manifest = directory / "manifest.json"
    if manifest.is_file():
        try:
            data = json.loads(manifest.read_text())
            return record_from_manifest(data.get("config", data))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # AttributeError: a JSON list, not an object
            return None
    return None


@dataclass(frozen=True)
class Loading:
    """The loading flags a command ends up with, and the notice that says where they came from."""

    target: str | None
    dtype: str | None
    load_in_4bit: bool
    load_in_8bit: bool
    notice: str | None = None


def resolve_loading(artifact: str | Path | None, target: str | None, dtype: str | None, device: str | None,
                    load_in_4bit: bool = False, load_in_8bit: bool = False, flag: str = option("drafter")) -> Loading:
    """The target and loading flags for a command given ``artifact`` (a drafter directory, cache or answer
    set) and the user's flags (see the module docstring). An explicit ``target`` the record contradicts is
    refused with one line."""
    record = read_record(artifact) if artifact is not None and Path(artifact).is_dir() else None
    return loading_from(record, artifact, target, dtype, device, load_in_4bit, load_in_8bit, flag)


def loading_from(record: TargetRecord | None, artifact: str | Path | None, target: str | None, dtype: str | None,
                 device: str | None, load_in_4bit: bool = False, load_in_8bit: bool = False,
                 flag: str = option("drafter")) -> Loading:
    """:func:`resolve_loading` with the ``record`` of ``artifact`` already read (an opened drafter's)."""
    if record is None:
        return Loading(target, dtype, load_in_4bit, load_in_8bit)
    runtime = _runtime_notice(record, f"{flag} {artifact}")
    if target is not None:
        check_target(record, target, f"{flag} {artifact}")
        return Loading(target, dtype, load_in_4bit, load_in_8bit, runtime)
    if Path(record.source).is_absolute() and not Path(record.source).exists():  # not "--target X", never typed
        raise MinisparkError(f"{flag} {artifact}: the target it records, {record.source}, does not exist (moved "
                             f"or deleted?); give the target with {option('target')}")
    cuda = _device_type(device) == "cuda"
    explicit_quant = load_in_4bit or load_in_8bit
    q4 = load_in_4bit or (cuda and not explicit_quant and record.quantization == "4bit")
    q8 = load_in_8bit or (cuda and not explicit_quant and record.quantization == "8bit")
    if dtype is None and cuda and record.dtype in ("bf16", "fp16"):
        dtype = record.dtype
    how = ", ".join(f for f in (dtype, "4-bit" if q4 else "8-bit" if q8 else None) if f)
    notice = f"target: {record.source}{f' ({how})' if how else ''}, recorded in {artifact}"
    return Loading(record.source, dtype, q4, q8, notice if runtime is None else f"{notice}; {runtime}")


def _runtime_notice(record: TargetRecord, what: str) -> str | None:
    """What to say when ``record`` is the int8 runtime's and this run loads another: the runtime is a global flag
    that a record never switches (the drafter serves either target losslessly; its τ was measured on int8's)."""
    from minispark.target.runtime import requested_runtime

    loads = requested_runtime()
    if record.runtime != "int8" or loads == "int8":
        return None
    return (f"{what} was trained against --runtime int8 of its target, this run loads {loads} "
            "(`minispark --runtime int8 COMMAND` runs the one it was trained against)")


def check_target(record: TargetRecord, target: str, what: str) -> None:
    """Refuse an explicit ``--target`` that is not the recorded one, before it loads: a local directory
    (or the embedded model) by its weights hash, a hub id by name (a hub id's weights are checked when
    the drafter loads)."""
    from minispark.target.embedded import EMBEDDED_SPELLINGS
    from minispark.target.target_ref import TargetRef

    if target not in EMBEDDED_SPELLINGS:
        hub_source = not Path(record.source).is_absolute() and not Path(record.source).exists()
        if not Path(target).exists() and hub_source and target != record.source:  # two hub ids: by name
            raise MinisparkError(f"{option('target')} {target}: {what} was trained for {record.source}; omit {option('target')} "
                                 "to load that one")
    ref = TargetRef.parse(target)
    location = ref.local_directory()
    if location is None:  # a hub id: its weights are checked when the drafter loads
        return
    current = target_id({"name": ref.name, "weights_hash": weights_hash(location)})
    if not same_target(record.identity, current):
        raise MinisparkError(f"{option('target')} {target}: {what} was trained for {record.source} ({record.identity}), "
                             f"another target; omit {option('target')} to load that one")


def _device_type(device: str | None) -> str:
    if device is not None:
        return device.split(":")[0]
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def auto_4bit(bf16_weight_bytes: int, free_bytes: int, headroom: float = AUTO_4BIT_HEADROOM) -> bool:
    """Whether to load 4-bit: the bf16 weights plus ``headroom`` would not fit ``free_bytes`` of the card."""
    return bf16_weight_bytes + headroom > free_bytes


def bf16_weight_bytes(location: Path) -> int | None:
    """Bytes of a local checkpoint's weights in bf16 (2 per parameter, from the safetensors headers: nothing
    is read beyond them), or None when it has no safetensors."""
    from safetensors import safe_open

    files = sorted(Path(location).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                shape = handle.get_slice(key).get_shape()
                n = 1
                for size in shape:
                    n *= size
                total += 2 * n
    return total


def context_limit_before_loading(target: str | None) -> int | None:
    """:func:`~minispark.target.loading.context_limit` of a local or embedded target, from its config alone (no
    weights load); None for a hub id, which only its load may fetch."""
    from minispark.target.loading import context_limit, model_config
    from minispark.target.target_ref import TargetRef

    location = TargetRef.parse(target).local_directory()
    return None if location is None else context_limit(model_config(str(location), target))


def auto_4bit_notice(target: str | None, device: str | None, dtype: str | None, load_in_4bit: bool,
                     load_in_8bit: bool) -> str | None:
    """On CUDA with no quantization or fp32 flag: a one-line notice when 4-bit should be chosen, else None."""
    if load_in_4bit or load_in_8bit or dtype is not None or _device_type(device) != "cuda" or target is None:
        return None
    from minispark.target.target_ref import TargetRef

    location = TargetRef.parse(target).directory
    weights = bf16_weight_bytes(location) if location is not None else None
    if weights is None:
        return None
    import torch

    free, _total = torch.cuda.mem_get_info(torch.device(device or "cuda"))
    if not auto_4bit(weights, free):
        return None
    return (f"the bf16 weights of {target} ({weights / 1e9:.1f} GB) would not fit this card's {free / 1e9:.1f} GB "
            "free: loading it 4-bit (--dtype bf16 loads it unquantized, --load-in-8bit 8-bit)")
