"""On-disk target cache: safetensors shards, a JSON manifest, and the memory-mapped reader.

A cache directory holds ``manifest.json`` and ``shard-00000.safetensors``, ``shard-00001...``.
Shard k holds a fixed run of samples; within it each sample's rows (see ``cache_windows``) are
concatenated and addressed through offsets and per-anchor ``[start, end)`` row runs:

    per sample (S):  sample_index i64, prompt_len i32, seq_len i32, eos u8,
                     sample_{tok,ctx,hid,anchor}_offset (S+1,) i64
    token rows:      tok_pos, input_ids, text_pos (i32), loss_mask (u8)            (R_tok,)
    context rows:    ctx_pos (i32) (R_ctx,), features (R_ctx, m, d) cache dtype
    hidden rows:     hid_pos (i32) (R_hid,), final_hidden (R_hid, d) cache dtype
    per anchor (A):  anchor_sample (shard-local sample), anchor_pos (i32),
                     anchor_ctx, anchor_hid, anchor_tok (A, 2) i64 shard-wide row runs

Shards are written to a ``.NAME.*.tmp`` temp file, fsynced and renamed, so a file with a shard's name is always
complete; the manifest lists each finished shard with its size and sha256, and the reader refuses a
missing, truncated, corrupt or foreign shard naming the file.

    .venv/bin/python -c "from minispark.data.cache_format import CacheReader; r = CacheReader('runs/cache'); print(len(r), r[0])"
"""

from __future__ import annotations

import hashlib
import json
import mmap
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.torch
import torch

from minispark import __version__
from minispark.data.cache_config import FEATURE_DTYPES
from minispark.data.cache_windows import WindowLayout, full_bytes
# file_sha256: re-exported for the cache modules
from minispark.core.atomic import file_sha256, minispark_artifact, write_bytes_atomic
from minispark.core.errors import MinisparkError, json_reason
from minispark.core.identity import current_hashes

FORMAT = "minispark-cache"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CACHE_DTYPES = dict(zip(FEATURE_DTYPES, (torch.bfloat16, torch.float16, torch.float32)))
_ST_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "I64": torch.int64,
              "I32": torch.int32, "U8": torch.uint8}
_NP_VIEW = {torch.bfloat16: np.uint16, torch.float16: np.float16, torch.float32: np.float32,
            torch.int64: np.int64, torch.int32: np.int32, torch.uint8: np.uint8}
SHARD_KEYS = ("sample_index", "prompt_len", "seq_len", "eos", "sample_tok_offset", "sample_ctx_offset",
              "sample_hid_offset", "sample_anchor_offset", "tok_pos", "input_ids", "text_pos", "loss_mask",
              "ctx_pos", "features", "hid_pos", "final_hidden", "anchor_sample", "anchor_pos",
              "anchor_ctx", "anchor_hid", "anchor_tok")


class CacheError(MinisparkError):
    """A cache that cannot be used as is; the message names the file at fault."""


class CacheMismatchError(CacheError):
    """A cache built for a different configuration than the one asking for it."""


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.safetensors"


#: What a cache build (or a mix) writes into its directory: the manifest, the shards, and the temporary
#: files of their atomic writes (``.NAME.*.tmp``) a kill may leave. Anything else there is not a cache's.
WRITES = (MANIFEST, "shard-*.safetensors", f".{MANIFEST}.*.tmp", ".shard-*.tmp")


def int8_runtime(target: Any) -> dict[str, str]:
    """``{"runtime": "int8"}`` for a target running ``--runtime int8`` (weight-only int8 linears: another target,
    not float noise), for the identity of a cache or an answer set, else nothing (every other runtime computes
    the same numbers, so sets built before this key stay resumable): a set grown under int8 took its answers
    from two targets without a word."""
    return {"runtime": "int8"} if getattr(target, "runtime", None) == "int8" else {}


def config_hash(config: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of a cache's config; stamped into every shard's header."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------- writing
@dataclass
class PackedSample:
    """One sample's stored rows in memory, ready to be packed into a shard.

    input_ids / text_pos / loss_mask: (R_tok,) at ``layout.tok_pos``
    features: (R_ctx, m, d) at ``layout.ctx_pos``; final_hidden: (R_hid, d) at ``layout.hid_pos``
    """

    sample_index: int
    prompt_len: int
    seq_len: int
    stopped_at_eos: bool
    layout: WindowLayout
    input_ids: np.ndarray
    text_pos: np.ndarray
    loss_mask: np.ndarray
    features: torch.Tensor
    final_hidden: torch.Tensor


def config_difference(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> tuple[str, Any, Any] | None:
    """The first setting (dotted key, its old and its new value) where two manifest configs differ, looking
    inside nested settings (``sampling.top_p``, not the whole ``sampling`` dict); None when they are equal."""
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            if (found := config_difference(a, b, f"{prefix}{key}.")) is not None:
                return found
        elif a != b:
            return f"{prefix}{key}", a, b
    return None


def pack_shard(samples: Sequence[PackedSample], num_layers: int, hidden_size: int,
               dtype: str) -> dict[str, torch.Tensor]:
    """Concatenate samples into the shard tensors, turning sample-local row runs into shard-wide ones."""
    def cat(arrays: list[np.ndarray], np_dtype: type, shape: tuple[int, ...] = (0,)) -> torch.Tensor:
        joined = np.concatenate(arrays) if arrays else np.zeros(shape)
        return torch.from_numpy(np.ascontiguousarray(joined, dtype=np_dtype))

    def offsets(counts: list[int]) -> torch.Tensor:
        return torch.from_numpy(np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64))

    lay = [s.layout for s in samples]
    tok_off, ctx_off, hid_off = (offsets([len(getattr(l, k)) for l in lay]) for k in ("tok_pos", "ctx_pos", "hid_pos"))
    feature_dtype = CACHE_DTYPES[dtype]
    return {
        "sample_index": torch.tensor([s.sample_index for s in samples], dtype=torch.int64),
        "prompt_len": torch.tensor([s.prompt_len for s in samples], dtype=torch.int32),
        "seq_len": torch.tensor([s.seq_len for s in samples], dtype=torch.int32),
        "eos": torch.tensor([s.stopped_at_eos for s in samples], dtype=torch.uint8),
        "sample_tok_offset": tok_off, "sample_ctx_offset": ctx_off, "sample_hid_offset": hid_off,
        "sample_anchor_offset": offsets([len(l.anchors) for l in lay]),
        "tok_pos": cat([l.tok_pos for l in lay], np.int32),
        "input_ids": cat([s.input_ids for s in samples], np.int32),
        "text_pos": cat([s.text_pos for s in samples], np.int32),
        "loss_mask": cat([s.loss_mask for s in samples], np.uint8),
        "ctx_pos": cat([l.ctx_pos for l in lay], np.int32),
        "features": torch.cat([s.features.to(feature_dtype) for s in samples]) if samples
        else torch.zeros((0, num_layers, hidden_size), dtype=feature_dtype),  # (R_ctx, m, d)
        "hid_pos": cat([l.hid_pos for l in lay], np.int32),
        "final_hidden": torch.cat([s.final_hidden.to(feature_dtype) for s in samples]) if samples
        else torch.zeros((0, hidden_size), dtype=feature_dtype),  # (R_hid, d)
        "anchor_sample": cat([np.full(len(l.anchors), i) for i, l in enumerate(lay)], np.int32),
        "anchor_pos": cat([l.anchors for l in lay], np.int32),
        "anchor_ctx": cat([l.anchor_ctx + ctx_off[i].item() for i, l in enumerate(lay)], np.int64, (0, 2)),
        "anchor_hid": cat([l.anchor_hid + hid_off[i].item() for i, l in enumerate(lay)], np.int64, (0, 2)),
        "anchor_tok": cat([l.anchor_tok + tok_off[i].item() for i, l in enumerate(lay)], np.int64, (0, 2)),
    }


def write_shard(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, Any]) -> dict[str, Any]:
    """Write a shard durably (temp file, fsync, rename); return its manifest entry."""
    # One metadata key holding canonical JSON: safetensors writes several keys in hash order,
    # which would make otherwise identical shards differ byte-wise.
    data = safetensors.torch.save(tensors, metadata={FORMAT: json.dumps(metadata, sort_keys=True)})
    write_bytes_atomic(path, data)
    return {"file": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    write_bytes_atomic(directory / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())


def read_manifest(directory: Path) -> dict[str, Any]:
    return read_format_manifest(Path(directory) / MANIFEST, FORMAT, FORMAT_VERSION, CacheError,
                                "not a minispark cache, or no shard finished yet", "rebuild the cache")


def read_format_manifest(path: Path, fmt: str, version: int, error: type[MinisparkError], missing: str,
                         stale: str) -> dict[str, Any]:
    """A JSON manifest of format ``fmt`` at ``version``, its layout checked (``_check_layout``); ``error`` names
    the file when it is not one."""
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        if (other := minispark_artifact(path.parent)) is not None:  # an answer set where a cache goes, a drafter, a run
            raise error(f"{path.parent}: holds {other[0]}, not a {fmt}") from None
        raise error(f"{path}: missing ({missing})") from None
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: [[[[...]]]] nested too deeply
        raise error(f"{path}: unreadable manifest ({json_reason(exc)})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != fmt:
        raise error(f"{path}: not a {fmt} manifest")
    if manifest.get("format_version") != version or isinstance(manifest["format_version"], bool):
        raise error(f"{path}: format version {manifest.get('format_version')!r} (this minispark reads {version}); "
                    f"{stale}")
    _check_layout(manifest, path, error, stale)
    return manifest


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_layout(manifest: dict[str, Any], path: Path, error: type[MinisparkError], fix: str) -> None:
    """The keys every reader of a cache's or an answer set's manifest takes on trust, with their types (a
    hand-edited or damaged one was a KeyError or TypeError traceback); each shard entry names a file of the
    manifest's own directory: '/etc/passwd' or '../other/shard' was read from outside it (another set's shard
    trained on without a word, or the file blamed as a truncated shard)."""
    def fail(why: str) -> None:
        raise error(f"{path}: {why}; the manifest is damaged: {fix}")

    config, totals, entries = manifest.get("config"), manifest.get("totals"), manifest.get("shards")
    if not isinstance(config, dict):
        fail("'config' is not an object")
    target = config.get("target")
    if not isinstance(target, dict) or not isinstance(target.get("name"), str) or not target["name"]:
        fail("'config.target' is not an object naming the target")
    if not isinstance(totals, dict) or not _count(totals.get("samples")):
        fail("'totals.samples' is not a count")
    if not _count(manifest.get("num_shards")):
        fail("'num_shards' is not a count")
    if not isinstance(entries, list):
        fail("'shards' is not a list")
    for entry in entries:
        name = entry.get("file") if isinstance(entry, dict) else None
        if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name:
            fail(f"a shard named {name!r}, not a file of its directory")
        for key in ("bytes", "samples", "sha256"):
            if not (isinstance(entry.get(key), str) if key == "sha256" else _count(entry.get(key))):
                fail(f"shard {name}: '{key}' is {entry.get(key)!r}, not a {'hash' if key == 'sha256' else 'count'}")


def shard_stats(tensors: dict[str, torch.Tensor], num_layers: int, hidden_size: int, dtype: str) -> dict[str, int]:
    """A shard's manifest counts: samples, first sample, generated tokens, anchors, full-sequence bytes."""
    seq_len = tensors["seq_len"].long()
    return {"samples": int(len(seq_len)), "first_sample": int(tensors["sample_index"][0]) if len(seq_len) else 0,
            "generated_tokens": int((seq_len - tensors["prompt_len"].long()).sum()),
            "anchors": int(len(tensors["anchor_pos"])),
            "full_bytes": sum(full_bytes(int(n), num_layers, hidden_size, dtype) for n in seq_len)}


def build_manifest(cfg: dict[str, Any], done: dict[int, dict[str, Any]], num_shards: int,
                   num_samples: int) -> dict[str, Any]:
    """The manifest for the shards finished so far; deterministic (no times) so resumes match byte for byte."""
    entries = [done[k] for k in sorted(done)]
    complete = len(entries) == num_shards
    keys = ("samples", "generated_tokens", "anchors", "bytes", "full_bytes")
    totals = {key: sum(e[key] for e in entries) for key in keys}
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "minispark_version": __version__, "config": cfg,
            "num_samples": num_samples, "num_shards": num_shards, "shards": entries, "complete": complete,
            "totals": totals}



def require_config(config: dict[str, Any], where: Path, **expected: Any) -> None:
    """Refuse data built differently than ``expected``; keys are manifest config keys (target, layers,
    window, block, dtype, seed, ...); for dict values only the given sub-keys are compared."""
    for key, want in expected.items():
        have = config.get(key)
        if isinstance(want, dict) and isinstance(have, dict):
            have, want = current_hashes({k: have.get(k) for k in want}), current_hashes(want)
        if isinstance(want, tuple):
            want = list(want)
        if have != want:
            raise CacheMismatchError(f"{where}: {key} mismatch: it has {have!r}, expected {want!r}")


# ---------------------------------------------------------------------- reading
class ShardFile:
    """A memory-mapped shard whose safetensors header has been checked against the file size."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        size = self.path.stat().st_size
        with self.path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise CacheError(f"{self.path}: truncated shard ({size} bytes)")
            (header_len,) = struct.unpack("<Q", head)
            if 8 + header_len > size:
                raise CacheError(f"{self.path}: truncated shard (header runs past the end of the file)")
            try:
                header = json.loads(handle.read(header_len))
            except ValueError:
                raise CacheError(f"{self.path}: corrupt shard header") from None
        try:
            self.metadata: dict[str, Any] = json.loads((header.pop("__metadata__", None) or {})[FORMAT])
        except (KeyError, TypeError, ValueError):
            raise CacheError(f"{self.path}: not a cache shard (no {FORMAT} metadata)") from None
        start, end = 8 + header_len, 8 + header_len
        for name, info in header.items():
            dtype = _ST_DTYPES.get(info.get("dtype")) if isinstance(info, dict) else None
            if dtype is None:
                raise CacheError(f"{self.path}: corrupt shard header (tensor {name!r})")
            begin, stop = info["data_offsets"]
            if stop - begin != int(np.prod(info["shape"])) * dtype.itemsize:
                raise CacheError(f"{self.path}: corrupt shard header (size of {name!r})")
            end = max(end, start + stop)
        if end != size:
            raise CacheError(f"{self.path}: truncated shard ({size} bytes, header describes {end})")
        missing = [key for key in SHARD_KEYS if key not in header]
        if missing:
            raise CacheError(f"{self.path}: not a cache shard (no {missing[0]!r} tensor)")
        self._header, self._start = header, start
        self._buffer: np.ndarray | None = None
        self._tensors: dict[str, torch.Tensor] = {}

    def __getitem__(self, name: str) -> torch.Tensor:
        """Tensor ``name`` as a zero-copy view of the mapped file (copy-on-write, never written back)."""
        if name not in self._tensors:
            if self._buffer is None:
                with self.path.open("rb") as handle:
                    self._buffer = np.frombuffer(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY), np.uint8)
            info = self._header[name]
            dtype = _ST_DTYPES[info["dtype"]]
            begin, stop = (self._start + o for o in info["data_offsets"])
            raw = self._buffer[begin:stop].view(_NP_VIEW[dtype]).reshape(info["shape"])
            self._tensors[name] = torch.from_numpy(raw).view(dtype)
        return self._tensors[name]

    @property
    def num_anchors(self) -> int:
        return int(self._header["anchor_pos"]["shape"][0])


@dataclass
class Anchor:
    """One training anchor ``a`` with its window (§10.2); c = context rows, k = labels present.

    context_features: (c, m, d) raw outputs of the stored layers at sequence indices [a−c, a)
    final_hidden:     (g, d) final-norm hidden at [a, a+g), g = min(γ, L−a): p_t for labels a+1..a+g
    input_ids:        (c+1+k,) tokens at [a−c, a+k], k = min(γ, L−1−a): context, anchor, labels
    text_positions:   (c+1+k,) their 1D text positions (M-RoPE temporal component for VLMs)
    loss_mask:        (c+1+k,) bool, True on answer tokens
    """

    sample_index: int
    position: int
    context_features: torch.Tensor
    final_hidden: torch.Tensor
    input_ids: torch.Tensor
    text_positions: torch.Tensor
    loss_mask: torch.Tensor

    @property
    def context_len(self) -> int:
        return int(self.context_features.shape[0])

    @property
    def token(self) -> int:
        return int(self.input_ids[self.context_len])

    @property
    def labels(self) -> torch.Tensor:
        """(k,) the ground-truth block x*_1..x*_k after the anchor."""
        return self.input_ids[self.context_len + 1:]


class CacheFacts:
    """What a trainer checks of its data, read from ``config`` (a manifest's): layers, window, γ, ``require``."""

    config: dict[str, Any]
    manifest_path: Path

    @property
    def layers(self) -> list[int]:
        return list(self.config["layers"])

    @property
    def window(self) -> int:
        return int(self.config["window"])

    @property
    def block(self) -> int:
        return int(self.config["block"])

    def require(self, **expected: Any) -> None:
        """Refuse data built differently: ``require(target=t.identity(), layers=[1, 9], block=7)``."""
        require_config(self.config, self.manifest_path, **expected)


class CacheReader(CacheFacts):
    """Validated, memory-mapped access to a finished cache, anchor by anchor.

    Opening checks the manifest, that the build completed, and each shard's size, header and
    (``verify=True``, one read pass) sha256; any problem raises :class:`CacheError` naming the file.
    """

    def __init__(self, directory: Path | str, *, verify: bool = True) -> None:
        self.directory = Path(directory)
        self.manifest = read_manifest(self.directory)
        self.config: dict[str, Any] = self.manifest["config"]
        self.manifest_path = manifest_path = self.directory / MANIFEST
        if not self.manifest.get("complete"):
            raise CacheError(f"{manifest_path}: incomplete cache ({len(self.manifest['shards'])} of "
                             f"{self.manifest['num_shards']} shards); rerun `minispark cache` with the same "
                             "flags to resume")
        expected_hash = config_hash(self.config)
        self.shards: list[ShardFile] = []
        for entry in self.manifest["shards"]:
            path = self.directory / entry["file"]
            if not path.is_file():
                raise CacheError(f"{path}: missing shard")
            if path.stat().st_size != entry["bytes"]:
                raise CacheError(f"{path}: truncated or corrupt shard ({path.stat().st_size} bytes, "
                                 f"manifest says {entry['bytes']})")
            if verify and file_sha256(path) != entry["sha256"]:
                raise CacheError(f"{path}: corrupt shard (sha256 differs from the manifest)")
            self.shards.append(ShardFile(path))
        stamps = [shard.metadata.get("config_hash") for shard in self.shards]
        if stamps and set(stamps) == {stamps[0]} != {expected_hash}:
            # Every shard agrees with the others and none with the manifest: the manifest's config was edited.
            raise CacheError(f"{manifest_path}: its config differs from the one every shard was built under "
                             "(edited?); restore it or rebuild the cache")
        for shard, stamp in zip(self.shards, stamps):
            if stamp != expected_hash:
                raise CacheError(f"{shard.path}: shard belongs to a different cache (config hash differs)")
        held = sum(len(shard["sample_index"]) for shard in self.shards)
        if held != self.num_samples:  # cache-mix took samples from shards that were not there: an IndexError
            raise CacheError(f"{manifest_path}: its shards hold {held} samples, its totals say {self.num_samples}; "
                             "the manifest is damaged: rebuild the cache")
        self._ends = np.cumsum([s.num_anchors for s in self.shards])

    # ------------------------------------------------------------------ config
    @property
    def num_samples(self) -> int:
        return int(self.manifest["totals"]["samples"])

    # ------------------------------------------------------------------ anchors
    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def __getitem__(self, index: int) -> Anchor:
        if not 0 <= index < len(self):
            raise IndexError(f"anchor {index} out of range ({len(self)} anchors)")
        shard_index = int(np.searchsorted(self._ends, index, side="right"))
        local = index - (int(self._ends[shard_index - 1]) if shard_index else 0)
        return self._anchor(self.shards[shard_index], local)

    def anchor_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """(A,) sample index and (A,) position of every anchor in reader order, read from the shards'
        index tensors without building each :class:`Anchor` (planning a run over 200k anchors)."""
        samples = [shard["sample_index"].numpy()[shard["anchor_sample"].numpy()] for shard in self.shards]
        positions = [shard["anchor_pos"].numpy() for shard in self.shards]
        if not samples:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(samples).astype(np.int64), np.concatenate(positions).astype(np.int64)

    def __iter__(self) -> Iterator[Anchor]:
        for shard in self.shards:
            for local in range(shard.num_anchors):
                yield self._anchor(shard, local)

    @staticmethod
    def _anchor(shard: ShardFile, i: int) -> Anchor:
        (c0, c1), (h0, h1), (t0, t1) = (shard[k][i].tolist() for k in ("anchor_ctx", "anchor_hid", "anchor_tok"))
        sample = int(shard["anchor_sample"][i])
        return Anchor(
            sample_index=int(shard["sample_index"][sample]),
            position=int(shard["anchor_pos"][i]),
            context_features=shard["features"][c0:c1],
            final_hidden=shard["final_hidden"][h0:h1],
            input_ids=shard["input_ids"][t0:t1],
            text_positions=shard["text_pos"][t0:t1],
            loss_mask=shard["loss_mask"][t0:t1].bool(),
        )
