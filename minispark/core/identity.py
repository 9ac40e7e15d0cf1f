"""What a run is, in the words every artifact uses: device, dtype, quantization and target names.

An SPS table, a drafter checkpoint, a calibration and a feature cache each record what they were
made with, so a later run can refuse (or warn about) a mismatch; they must spell it the same way.

* dtype: stored as torch's name (``float32``, ``bfloat16``, ``float16``); the short spellings
  ``fp32``/``bf16``/``fp16`` of the CLI and recipes are aliases (:func:`dtype_name`, :func:`torch_dtype`).
* quantization: the precision the target *computes* in: ``none``, ``bnb-4bit-nf4``,
  ``bnb-4bit-fp4``, ``bnb-8bit`` (:func:`target_quantization`). Feature-cache manifests written so
  far spell it ``4bit``/``8bit``/null; :func:`quantization_name` reads those (the manifest keeps
  its spelling because it is part of the cache's config hash, which resuming compares).
* device: the GPU's name, or the CPU model plus torch's thread count (:func:`device_name`).
* target: ``name@weights-hash`` (:func:`target_id`), what a drafter and its calibration record; the hash is
  :func:`weights_hash` of its directory.

    python -c "from minispark.core.identity import device_name; print(device_name('cpu'))"
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
import re
from pathlib import Path
from typing import Any, Sequence

import torch

from minispark.core.atomic import file_sha256, write_json_atomic
from minispark.core.defaults import DTYPE_SPELLINGS, PICKLE_WEIGHTS, user_dir
from minispark.core.errors import MinisparkError

#: Stored dtype names → torch dtypes.
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Legacy feature-cache manifest spellings of the quantization (``--load-in-4bit`` loads nf4).
_LEGACY_QUANTIZATION = {None: "none", "4bit": "bnb-4bit-nf4", "8bit": "bnb-8bit"}


def dtype_name(dtype: torch.dtype | str) -> str:
    """The stored name of a dtype, from a torch dtype, its name or an alias (``bf16`` → ``bfloat16``)."""
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    else:
        name = DTYPE_SPELLINGS.get(dtype, dtype)
    if name not in DTYPES:
        raise MinisparkError(f"unknown dtype {dtype!r} (choose from {', '.join([*DTYPE_SPELLINGS, *DTYPES])})")
    return name


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a stored name or an alias."""
    return DTYPES[dtype_name(name)]


def quantization_name(value: str | None) -> str:
    """The one spelling of a recorded quantization (legacy manifest spellings included)."""
    return _LEGACY_QUANTIZATION.get(value, value)  # type: ignore[arg-type]


def target_quantization(target: Any) -> str:
    """``"none"``, ``"bnb-4bit-nf4"``, ``"bnb-8bit"`` …: the precision the target *computes* in.

    GGUF checkpoints (the embedded target) are dequantized on load, so they run as ``"none"``.
    """
    config = getattr(target.model.config, "quantization_config", None)
    if config is None:
        return "none"
    if not isinstance(config, dict):
        config = config.to_dict()
    method = str(config.get("quant_method", "unknown")).split(".")[-1].lower()
    if method == "gguf":
        return "none"
    if method == "bitsandbytes":
        if config.get("load_in_4bit"):
            return f"bnb-4bit-{config.get('bnb_4bit_quant_type', 'fp4')}"
        return "bnb-8bit"
    return method


def device_name(device: torch.device | str | None = None) -> str:
    """The name tables are filed under: the GPU's name, or the CPU model plus torch's thread count.

    CPU timings depend on the thread count, so ``"AMD EPYC, 2 threads"`` and ``"AMD EPYC, 16
    threads"`` are different devices.
    """
    device = torch.device(device if device is not None else "cpu")
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1]
                break
    model = model or platform.processor() or platform.machine() or "cpu"
    model = re.sub(r"\((R|TM|tm|r)\)", "", model)  # "Intel(R) Core(TM)" → "Intel Core"
    model = " ".join(model.split())
    threads = torch.get_num_threads()
    return f"{model}, {threads} thread{'' if threads == 1 else 's'}"


def target_id(identity: dict[str, str]) -> str:
    """The string a drafter records as its target (``DraftConfig.target``): name@weights-hash."""
    return f"{identity['name']}@{identity['weights_hash']}"


def content_identity(identity: dict[str, str]) -> dict[str, str]:
    """A target's ``identity()`` as artifacts compare it: by content hashes (a hub id and a local copy of it are the
    same target), with the name kept only when the target's files could not be hashed."""
    known = identity["weights_hash"] != "unknown"
    return {k: v for k, v in identity.items() if k != "name" or not known}


#: Weights hashes an unchanged target was recorded under before a change of its directory, and the hash it has
#: now: the embedded target's, before its converted config dropped the GGUF loader's quantization_config (the same
#: dequantized weights). Artifacts that recorded the old one (the shipped drafter, answer sets, a user's runs)
#: still name the target.
RETIRED_HASHES = {"2f612fa79d95205a": "74de9d807e6fc828"}


def current_hash(value: Any) -> Any:
    """A recorded hash as the target's hash now (a retired one read as its successor; anything else as is)."""
    return RETIRED_HASHES.get(value, value) if isinstance(value, str) else value


def same_hash(recorded: str | None, current: str | None) -> bool:
    """Whether a recorded weights (or tokenizer) hash names the target that has ``current`` now."""
    return current_hash(recorded) == current_hash(current)


def current_hashes(record: dict[str, Any]) -> dict[str, Any]:
    """A recorded target identity (a manifest's ``target``) with each retired hash read as the current one."""
    return {key: current_hash(value) if key.endswith("_hash") else value for key, value in record.items()}


def same_target(recorded: str, current: str) -> bool:
    """Whether two ``target_id`` strings name one target: by content (the weights hash) when both
    hashes are known, so a path spelled differently or a hub id and its local copy agree; by the
    whole id otherwise."""
    recorded_hash, current_hash = recorded.rpartition("@")[2], current.rpartition("@")[2]
    if "@" in recorded and "@" in current and "unknown" not in (recorded_hash, current_hash):
        return same_hash(recorded_hash, current_hash)
    return recorded == current


def _config_sha256(path: Path) -> str:
    """sha256 of a ``config.json``'s settings: without the ``transformers_version`` that ``save_pretrained``
    stamps in, so the same weights converted under another transformers release are the same target."""
    raw = path.read_bytes()
    try:
        config = json.loads(raw)
    except ValueError:  # not JSON: its bytes (the validators name the file when it is read)
        return hashlib.sha256(raw).hexdigest()
    if isinstance(config, dict):
        config.pop("transformers_version", None)
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def files_hash(model_dir: Path | None, patterns: Sequence[str]) -> str:
    """A target's weights (or tokenizer) hash: sha256 over the files of ``model_dir`` matching ``patterns`` (a
    ``config.json`` by its settings, see ``_config_sha256``), 16 hex digits, memoized by (path, size, mtime) in
    ``defaults.user_dir()``; ``unknown`` without a directory (a hub model not downloaded)."""
    if model_dir is None:
        return "unknown"
    files = sorted({p for pattern in patterns for p in model_dir.glob(pattern) if p.is_file()})
    memo_path = user_dir() / "hashes.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    digest = hashlib.sha256()
    changed = False
    for path in files:
        if path.name == "config.json":  # small: its content is hashed, not its bytes (never memoized)
            digest.update(path.name.encode() + _config_sha256(path).encode())
            continue
        stat = path.stat()
        key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
        if key not in memo:
            memo[key] = file_sha256(path)
            changed = True
        digest.update(path.name.encode() + memo[key].encode())
    if changed:
        try:
            write_json_atomic(memo_path, memo)
        except (MinisparkError, OSError):  # a full or read-only user dir: the next run hashes again, nothing fails
            pass
    return digest.hexdigest()[:16]


def weights_hash(model_dir: Path | None) -> str:
    """The hash a target is known by: :func:`files_hash` of its ``config.json`` and safetensors, or of its pickle
    weights for a directory that has no safetensors (one loaded with --allow-pickle-weights). Every check that
    compares a target with a record computes it here, so a pickle target is not refused against its own record."""
    if model_dir is None or any(model_dir.glob("*.safetensors")):
        return files_hash(model_dir, ("config.json", "*.safetensors"))
    return files_hash(model_dir, ("config.json", *PICKLE_WEIGHTS))
