"""Mix finished training caches into one: the first N samples of each part, re-indexed and restamped.

Regenerated answers and teacher-forced text (``minispark cache --source text``) are built as separate
caches; a mix of them is a cache like any other, so ``train``, its held-out proxy and on-policy
replay read it unchanged. Parts must agree on everything a trainer matches (target, layers, window,
block, stored dtype); held-out caches are refused, so the held-out split can never enter a mix.
Sample indices are renumbered part after part (part 2's first sample follows part 1's last), so
``max_samples=K`` on a mix keeps its first K samples; the manifest's ``parts`` record which source
samples each range came from. Output shards are written atomically, one at a time, with the
manifest after each, so a killed mix resumes.

    minispark cache-mix --out runs/cache-mix runs/cache-train:128 runs/cache-text:256
    .venv/bin/python -m pytest -q tests/data/test_cache_mix.py
"""

from __future__ import annotations

from minispark.core.errors import option

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from minispark.core import checks, check_lists
from minispark.data.cache_format import (MANIFEST, WRITES, CacheError, CacheMismatchError, CacheReader, ShardFile,
                                         build_manifest, config_hash, file_sha256, read_manifest, shard_name,
                                         shard_stats, write_manifest, write_shard)
from minispark.core.writer_lock import sole_writer

#: Manifest config keys every part must share: what a trainer checks or what shapes the rows.
MUST_MATCH = ("target", "target_model", "layers", "window", "block", "dtype")
#: Per-sample shard tensors, and the row arrays addressed through each ``sample_*_offset``.
_PER_SAMPLE = ("sample_index", "prompt_len", "seq_len", "eos")
_ROWS = {"sample_tok_offset": ("tok_pos", "input_ids", "text_pos", "loss_mask"),
         "sample_ctx_offset": ("ctx_pos", "features"), "sample_hid_offset": ("hid_pos", "final_hidden"),
         "sample_anchor_offset": ("anchor_sample", "anchor_pos", "anchor_ctx", "anchor_hid", "anchor_tok")}
#: Anchor row runs and the offset whose rows they address.
_RUNS = {"anchor_ctx": "sample_ctx_offset", "anchor_hid": "sample_hid_offset", "anchor_tok": "sample_tok_offset"}


@dataclass(frozen=True)
class MixPart:
    """The first ``samples`` samples of the cache in ``directory`` (0 = all of them)."""

    directory: Path
    samples: int = 0


def parse_part(spec: str) -> MixPart:
    """``DIR`` or ``DIR:N`` → :class:`MixPart`; a bad count is a one-line error naming the spec."""
    directory, sep, count = spec.rpartition(":")
    if not sep or not check_lists.is_number_text(count, whole=True):
        if sep and not Path(spec).exists() and Path(directory).is_dir():  # "DIR:abc", "DIR:1.5": a count mistyped
            raise CacheError(f"cache-mix part {spec!r}: after {directory}: expected a whole number of samples, "
                             f"got {count!r}")
        return MixPart(Path(spec))
    if int(count) <= 0:  # "DIR:-1" and "DIR:0" are counts, not directories of that name
        raise CacheError(f"cache-mix part {spec!r}: the sample count must be positive")
    return MixPart(Path(directory), int(count))


def slice_samples(shard: ShardFile | dict[str, torch.Tensor], start: int, stop: int) -> dict[str, torch.Tensor]:
    """Samples [start, stop) of a shard as a shard of their own (offsets and row runs rebased to 0)."""
    out = {key: shard[key][start:stop] for key in _PER_SAMPLE}
    for offset_key, row_keys in _ROWS.items():
        offsets = shard[offset_key].long()
        lo, hi = int(offsets[start]), int(offsets[stop])
        out[offset_key] = offsets[start:stop + 1] - lo
        for key in row_keys:
            out[key] = shard[key][lo:hi]
    out["anchor_sample"] = out["anchor_sample"] - start
    for run_key, offset_key in _RUNS.items():
        out[run_key] = out[run_key] - int(shard[offset_key][start])
    return out


def concat_shards(pieces: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Concatenate shards sample-wise, shifting each piece's offsets, row runs and anchor samples."""
    out: dict[str, list[torch.Tensor]] = {}
    base = {key: 0 for key in _ROWS} | {"samples": 0}
    for piece in pieces:
        for key in _PER_SAMPLE:
            out.setdefault(key, []).append(piece[key])
        for offset_key, row_keys in _ROWS.items():
            offsets = piece[offset_key].long() + base[offset_key]
            runs = out.setdefault(offset_key, [])
            runs.append(offsets[1:] if runs else offsets)  # each piece's leading 0 is the previous one's end
            for key in row_keys:
                value = piece[key]
                if key == "anchor_sample":
                    value = value + base["samples"]
                elif key in _RUNS:
                    value = value + base[_RUNS[key]]
                out.setdefault(key, []).append(value)
        for offset_key in _ROWS:
            base[offset_key] += int(piece[offset_key][-1])
        base["samples"] += len(piece["sample_index"])
    return {key: torch.cat(values).contiguous() for key, values in out.items()}


def mix_config(readers: Sequence[CacheReader], parts: Sequence[MixPart]) -> dict[str, Any]:
    """The mix's manifest config: the shared keys, ``source = "mix"`` and where each range came from."""
    first = readers[0]
    config = {key: first.config[key] for key in MUST_MATCH}
    sources, start = [], 0
    for reader, part in zip(readers, parts):
        sources.append({"directory": str(reader.directory.resolve()), "config_hash": config_hash(reader.config),
                        "source": reader.config.get("source", "regenerate"), "prompts": reader.config.get("prompts"),
                        "samples": part.samples, "mix_samples": [start, start + part.samples]})
        start += part.samples
    return config | {"source": "mix", "split": "train", "parts": sources}


def _difference(value: Any, first: Any) -> str:
    """How ``value`` differs from the first part's ``first``: only the fields that differ when both are objects
    (a target's name, not its unchanged hashes)."""
    if isinstance(value, dict) and isinstance(first, dict):
        names = sorted({*value, *first})
        keys = [k for k in names if value.get(k) != first.get(k)]
        same = [k for k in names if k not in keys]
        text = "; ".join(f"{k} {value.get(k)!r} vs {first.get(k)!r}" for k in keys)
        return text + (f"; same {', '.join(same)}" if same else "")
    return f"{value!r} vs {first!r}"


def open_parts(parts: Sequence[MixPart]) -> tuple[list[CacheReader], list[MixPart]]:
    """Open and check every part; returns the readers and the parts with their counts resolved."""
    if len(parts) < 2:
        raise CacheError("cache-mix: give at least two caches to mix (DIR or DIR:N each)")
    for i, part in enumerate(parts):
        if any(part.directory.resolve() == other.directory.resolve() for other in parts[:i]):
            raise CacheError(f"cache-mix: {part.directory} is given twice; a cache mixed with itself only repeats "
                             "its samples")
    readers, resolved = [], []
    for part in parts:
        reader = CacheReader(part.directory)
        where = part.directory / MANIFEST
        if reader.config.get("split", "train") != "train":
            raise CacheMismatchError(f"{where}: a held-out evaluation cache; only training caches can be mixed")
        if readers:
            for key in MUST_MATCH:
                if reader.config.get(key) != readers[0].config.get(key):
                    raise CacheMismatchError(f"{where}: {key} differs from {parts[0].directory / MANIFEST}'s "
                                             f"({_difference(reader.config.get(key), readers[0].config.get(key))})")
        count = part.samples or reader.num_samples
        if count > reader.num_samples:
            raise CacheError(f"{where}: asked for {count} samples, the cache holds {reader.num_samples}")
        readers.append(reader)
        resolved.append(MixPart(part.directory, count))
    _refuse_shared_shards(readers, resolved)
    return readers, resolved


def _used_shards(reader: CacheReader, samples: int) -> dict[str, str]:
    """sha256 → file name of the shards the first ``samples`` samples of ``reader``'s cache are read from."""
    used, left = {}, samples
    for entry in reader.manifest["shards"]:
        if left <= 0:
            break
        used.setdefault(entry["sha256"], entry["file"])
        left -= entry["samples"]
    return used


def _refuse_shared_shards(readers: Sequence[CacheReader], parts: Sequence[MixPart]) -> None:
    """Refuse two parts that would read a byte-identical shard (their manifests' sha256, checked on opening): the
    same cache at two paths (a copy, a link the path check missed), whose samples the mix would hold twice."""
    seen: dict[str, tuple[Path, str]] = {}
    for reader, part in zip(readers, parts):
        used = _used_shards(reader, part.samples)
        for digest, name in used.items():
            if digest in seen:
                first, first_name = seen[digest]
                raise CacheError(f"cache-mix: {part.directory} and {first} hold the same samples (shard {name} of "
                                 f"one is byte-identical to {first_name} of the other: copies of one cache); a "
                                 "cache mixed with itself only repeats its samples")
        for digest, name in used.items():
            seen.setdefault(digest, (part.directory, name))


def _source_runs(readers: Sequence[CacheReader], parts: Sequence[MixPart]) -> list[tuple[ShardFile, int, int]]:
    """(shard, start, stop) runs of source samples in mix order."""
    runs = []
    for reader, part in zip(readers, parts):
        left = part.samples
        for shard in reader.shards:
            take = min(left, len(shard["sample_index"]))
            if take:
                runs.append((shard, 0, take))
            left -= take
    return runs


def _take(runs: list[tuple[ShardFile, int, int]], count: int) -> list[dict[str, torch.Tensor]]:
    """Pop the next ``count`` samples off ``runs`` as shard slices."""
    pieces = []
    while count:
        shard, start, stop = runs[0]
        take = min(count, stop - start)
        pieces.append(slice_samples(shard, start, start + take))
        count -= take
        runs[0] = (shard, start + take, stop)
        if start + take == stop:
            runs.pop(0)
    return pieces


def mix_caches(out: Path | str, parts: Sequence[MixPart], *, samples_per_shard: int = 128,
               log: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Write the mix of ``parts`` to ``out``; returns its manifest. Rerunning resumes or does nothing."""
    with sole_writer(out):
        return _mix_caches(Path(out), parts, samples_per_shard=samples_per_shard, log=log)


def _mix_caches(out: Path, parts: Sequence[MixPart], *, samples_per_shard: int,
                log: Callable[[str], None]) -> dict[str, Any]:
    out = checks.resumable_dir(out, option("out"), WRITES)  # a directory of someone's files gets no shards
    # a mix inside a part would sit among that cache's shards (and a resumed `cache` refuses it there)
    checks.outside_inputs(out, option("out"), {f"part {i}": part.directory for i, part in enumerate(parts, 1)})
    if samples_per_shard <= 0:
        raise CacheError(f"{option('samples_per_shard')} must be positive, got {samples_per_shard}")
    readers, parts = open_parts(parts)
    config = mix_config(readers, parts) | {"batching": {"samples_per_shard": samples_per_shard}}
    total = sum(part.samples for part in parts)
    num_shards = -(-total // samples_per_shard)
    done: dict[int, dict[str, Any]] = {}
    if (out / MANIFEST).exists():
        manifest = read_manifest(out)
        if manifest["config"] != config:
            raise CacheMismatchError(f"{out / MANIFEST}: {option('out')} holds another cache or mix; use another {option('out')}")
        done = {k: e for k, e in enumerate(manifest["shards"])
                if (out / e["file"]).is_file() and file_sha256(out / e["file"]) == e["sha256"]}
    out.mkdir(parents=True, exist_ok=True)
    stamp, runs = config_hash(config), _source_runs(readers, parts)
    layers, hidden, dtype = len(config["layers"]), config["target_model"]["hidden_size"], config["dtype"]
    for k in range(num_shards):
        count = min(samples_per_shard, total - k * samples_per_shard)
        pieces = _take(runs, count)
        if k in done:
            continue
        tensors = concat_shards(pieces)
        tensors["sample_index"] = torch.arange(k * samples_per_shard, k * samples_per_shard + count)
        metadata = {"config_hash": stamp, "shard": k, "first_sample": k * samples_per_shard, "num_samples": count}
        entry = write_shard(out / shard_name(k), tensors, metadata)
        done[k] = entry | shard_stats(tensors, layers, hidden, dtype)
        write_manifest(out, build_manifest(config, done, num_shards, total))
        log(f"shard {k + 1}/{num_shards}: {count} samples, {done[k]['anchors']} anchors")
    manifest = build_manifest(config, done, num_shards, total)
    write_manifest(out, manifest)
    return manifest
