"""Answer sets: the target's own regenerated answers stored as token ids, the dataset a drafter trains on.

Generation is the expensive part of the pipeline; features are one teacher-forced prefill of prompt +
answer away (``training.online_features``), so an answer set keeps only the tokens: per sample its
prompt ids, answer ids (up to and including EOS, at most ``max_new_tokens``), prompt line and whether
it stopped at EOS, in safetensors shards of ``samples_per_shard`` samples beside ``answers.json``.
The manifest records the target's identity, the sampling settings, the prompt file and its hash, and
each finished shard's size and sha256.

Sample i answers prompt ``i mod N`` with the seed ``sample_seed(seed, i, 0)`` (the one a feature cache
uses for its sample i), so an answer set grows by asking for more samples with the same flags, and a
killed build resumes with its finished shards untouched. Text targets sample with refill
(``answer_sampler``); VLM prompts go through ``regenerate``.

    minispark answers --out runs/answers --num-samples 64
    .venv/bin/python -m pytest -q tests/data/test_answers.py
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import safetensors.torch
import torch

from minispark import __version__
from minispark.core import checks
from minispark.core.identity import same_hash
from minispark.core.atomic import refuse_symlink, write_bytes_atomic
from minispark.data.cache_format import (config_difference, config_hash, file_sha256, int8_runtime,
                                         read_format_manifest)
from minispark.data.prompts import (PromptSample, encode_within_context, load_prompts, prompt_file_hash,
                                    refuse_heldout)
from minispark.data.regenerate import Answer, regenerate, sample_seed
from minispark.core.errors import MinisparkError, option
from minispark.data.answer_config import AnswerConfig
from minispark.target.loading import Target, load_target
from minispark.target.session import PromptInputs
from minispark.core.writer_lock import sole_writer

FORMAT = "minispark-answers"
FORMAT_VERSION = 1
MANIFEST = "answers.json"
#: Rows sampled together on a CPU, measured with ``benchmarks/regen_throughput.py`` (see its docstring).
AUTO_BATCH = 64


class AnswerSetError(MinisparkError):
    """An answer set that cannot be used or grown as asked; the message names the file at fault."""


def shard_name(index: int) -> str:
    return f"answers-{index:05d}.safetensors"


#: What a build writes into an answer set's directory: the manifest, the shards, and the temporary files of
#: their atomic writes (``.NAME.*.tmp``) a kill may leave. Anything else there is not an answer set's.
WRITES = (MANIFEST, "answers-*.safetensors", f".{MANIFEST}.*.tmp", ".answers-*.tmp")


def check_out(out: Path, flag: str = option("out")) -> Path:
    """``out`` is a directory an answer build may write into: not a symlink, and new, empty, or an answer
    set's own (only ``WRITES``, and an answer-set manifest if it has one). A directory of someone else's
    files is refused, before any target loads, rather than filled with shards beside them."""
    out = refuse_symlink(out, flag)
    checks.resumable_dir(out, flag, WRITES)
    if (out / MANIFEST).is_file():
        _read_manifest(out)  # an answers.json of another tool: one line naming it
    return out


@dataclass
class StoredAnswer:
    """One sample of an answer set: ``prompt_ids`` (P,) and ``answer_ids`` (n,) long."""

    sample_index: int
    prompt_line: int
    prompt_ids: torch.Tensor
    answer_ids: torch.Tensor
    stopped_at_eos: bool

    @property
    def ids(self) -> torch.Tensor:
        """(P + n,) prompt then answer: what the target reads to compute this sample's features."""
        return torch.cat([self.prompt_ids, self.answer_ids])


@dataclass
class AnswerReport:
    out: Path
    samples: int
    answer_tokens: int
    shards: int
    resumed_shards: int
    seconds: float
    new_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}

    def summary(self) -> str:
        rate = self.new_tokens / self.seconds if self.seconds else 0.0
        return (f"{self.samples} answers, {self.answer_tokens} answer tokens in {self.shards} shards at {self.out} "
                f"({self.shards - self.resumed_shards} shards written now, {rate:.1f} tok/s)")


# ---------------------------------------------------------------------- the build
def manifest_config(config: AnswerConfig, target: Target, prompts_hash: str, num_prompts: int) -> dict[str, Any]:
    """What an answer set is identified by: a resume or a grow must match it exactly."""
    quantization = "4bit" if config.load_in_4bit else "8bit" if config.load_in_8bit else None
    return {"target": target.identity(), "compute_dtype": str(target.dtype).removeprefix("torch."),
            "quantization": quantization, **int8_runtime(target), "vocab_size": target.vocab_size,
            "split": config.split,
            "seed": config.seed, "prompts": {"file": config.prompts.name, "hash": prompts_hash, "count": num_prompts},
            "sampling": {"temperature": config.temperature, "top_p": config.top_p, "top_k": config.top_k,
                         "max_new_tokens": config.max_new_tokens},
            # The batch size and the runtime (but int8's, above) change logits only by float noise: each
            # shard's metadata records its own.
            "batching": {"engine": "generate" if target.uses_mrope else "refill",
                         "samples_per_shard": config.samples_per_shard}}


def build_answers(config: AnswerConfig, *, target: Target | None = None, log: Callable[[str], None] | None = None,
                  on_shard: Callable[[int], None] | None = None) -> AnswerReport:
    """Build, resume or grow the answer set of ``config``; log one line per shard with rates and ETA."""
    with sole_writer(config.out):  # a second `answers` into this --out would interleave its shards with these
        return _build_answers(config, target=target, log=log, on_shard=on_shard)


def _build_answers(config: AnswerConfig, *, target: Target | None, log: Callable[[str], None] | None,
                   on_shard: Callable[[int], None] | None) -> AnswerReport:
    log = log or (lambda message: print(message, file=sys.stderr, flush=True))
    started = time.perf_counter()
    samples = load_prompts(config.prompts)
    if config.split == "train":
        refuse_heldout(config.prompts, samples)
    out = check_out(config.out)
    if target is None:
        target = load_target(config.target, dtype=config.target_dtype, device=config.device,
                             load_in_4bit=config.load_in_4bit, load_in_8bit=config.load_in_8bit)
    if not target.is_vlm and any(s.images for s in samples):
        line = next(s.line for s in samples if s.images)
        raise MinisparkError(f"{config.prompts}:{line}: has images, but target {target.name} is text-only")
    existing = _read_manifest(out) if (out / MANIFEST).exists() else None
    batch_size = config.batch_size or AUTO_BATCH
    cfg = manifest_config(config, target, prompt_file_hash(config.prompts, samples), len(samples))
    num_samples = config.num_samples or len(samples)
    num_shards = math.ceil(num_samples / config.samples_per_shard)
    counts = [min(config.samples_per_shard, num_samples - k * config.samples_per_shard) for k in range(num_shards)]
    out.mkdir(parents=True, exist_ok=True)
    done = _finished_shards(out, existing, cfg, counts, log)
    todo = [k for k in range(num_shards) if k not in done]
    stamp = config_hash(cfg)
    progress = _Progress(log, num_shards, num_samples, sum(e["samples"] for e in done.values()))
    for k, tensors in _sample_shards(target, samples, todo, counts, config, batch_size):
        metadata = {"config_hash": stamp, "shard": k, "first_sample": k * config.samples_per_shard,
                    "num_samples": counts[k], "batch_size": batch_size, "runtime": target.runtime}
        data = safetensors.torch.save(tensors, metadata={FORMAT: json.dumps(metadata, sort_keys=True)})
        write_bytes_atomic(out / shard_name(k), data)
        done[k] = {"file": shard_name(k), "bytes": len(data), "sha256": file_sha256(out / shard_name(k)),
                   "samples": counts[k], "answer_tokens": int(tensors["answer_offset"][-1])}
        _write_manifest(out, cfg, done, num_shards, num_samples)
        progress.shard(k, done[k])
        if on_shard is not None:
            on_shard(k)
    if not todo:
        _write_manifest(out, cfg, done, num_shards, num_samples)  # a finished set asked again: unchanged bytes
    return AnswerReport(out=out, samples=num_samples, answer_tokens=sum(e["answer_tokens"] for e in done.values()),
                        shards=num_shards, resumed_shards=num_shards - len(todo),
                        seconds=time.perf_counter() - started, new_tokens=progress.tokens)


def _sample_shards(target: Target, samples: list[PromptSample], shards: list[int], counts: list[int],
                   config: AnswerConfig, batch_size: int) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
    """Sample the answers of ``shards``, yielding each shard's tensors as soon as its last answer is in.

    Text targets run one refill stream over all the shards (shard by shard, each shard's prompts
    shortest first), so the batch never drains between shards; a shard is complete when its last
    sample is. M-RoPE targets sample each shard in ``generate`` batches.
    """
    from minispark.data.answer_sampler import iter_answers

    # Text targets hold every shard's prompts at once (below), and samples cycle through the prompt file:
    # each prompt is encoded once and shared. M-RoPE targets encode (images included) one shard at a time.
    by_line: dict[int, PromptInputs] = {}

    def encoded_prompt(i: int) -> PromptInputs:  # a prompt that fills the context: its line, not minutes of garbage
        line = i % len(samples)
        if target.uses_mrope:
            return encode_within_context(target, samples[line], config.prompts)
        if line not in by_line:
            by_line[line] = encode_within_context(target, samples[line], config.prompts)
        return by_line[line]

    def shard_prompts(k: int) -> dict[int, PromptInputs]:
        first = k * config.samples_per_shard
        encoded = {i: encoded_prompt(i) for i in range(first, first + counts[k])}
        return {i: encoded[i] for i in sorted(encoded, key=lambda i: (encoded[i].length, i))}

    seeds = _Seeds(config.seed)
    if target.uses_mrope:
        for k in shards:
            prompts = shard_prompts(k)
            order, answers = list(prompts), {}
            for start in range(0, len(order), batch_size):
                batch = order[start:start + batch_size]
                for i, answer in zip(batch, regenerate(target, [prompts[i] for i in batch], [seeds[i] for i in batch],
                                                       config.sampling, config.max_new_tokens)):
                    answers[i] = answer
            yield k, _pack(target, samples, prompts, answers)
        return
    prompts: dict[int, PromptInputs] = {}
    for k in shards:
        prompts |= shard_prompts(k)  # encoding the whole corpus takes seconds; sampling it, hours
    pending = {k: set(range(k * config.samples_per_shard, k * config.samples_per_shard + counts[k])) for k in shards}
    answers: dict[int, Answer] = {}
    for i, answer in iter_answers(target, prompts, seeds, config.sampling, config.max_new_tokens, batch_size):
        answers[i] = answer
        k = i // config.samples_per_shard
        pending[k].discard(i)
        if not pending[k]:
            mine = {j: prompts.pop(j) for j in range(k * config.samples_per_shard,
                                                      k * config.samples_per_shard + counts[k])}
            yield k, _pack(target, samples, mine, {j: answers.pop(j) for j in mine})


class _Seeds(dict):
    """Sample i's answer seed, derived on first use from (seed, i) alone."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.seed = seed

    def __missing__(self, index: int) -> int:
        return sample_seed(self.seed, index, 0)


def _pack(target: Target, samples: list[PromptSample], prompts: dict[int, PromptInputs],
          answers: dict[int, Answer]) -> dict[str, torch.Tensor]:
    """One shard's tensors, samples in index order (token ids as uint16 when the vocabulary fits)."""
    indices = sorted(prompts)
    token_dtype = torch.uint16 if target.vocab_size <= 1 << 16 else torch.int32

    def packed(parts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = np.array([len(p) for p in parts], dtype=np.int64)
        offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)]))  # (S + 1,)
        return torch.cat([p.cpu().to(torch.int32) for p in parts]).to(token_dtype), offsets

    prompt_ids, prompt_offset = packed([prompts[i].input_ids[0] for i in indices])
    answer_ids, answer_offset = packed([answers[i].tokens for i in indices])
    return {"sample_index": torch.tensor(indices, dtype=torch.int64),
            "prompt_line": torch.tensor([samples[i % len(samples)].line for i in indices], dtype=torch.int32),
            "eos": torch.tensor([answers[i].stopped_at_eos for i in indices], dtype=torch.uint8),
            "prompt_ids": prompt_ids, "prompt_offset": prompt_offset,
            "answer_ids": answer_ids, "answer_offset": answer_offset}


class _Progress:
    """One log line per written shard: its rate, the set's count, and the ETA at the rate so far."""

    def __init__(self, log: Callable[[str], None], num_shards: int, num_samples: int, have: int) -> None:
        self.log, self.num_shards, self.num_samples, self.have = log, num_shards, num_samples, have
        self.started = self.last = time.perf_counter()
        self.tokens = self.samples = 0

    def shard(self, k: int, entry: dict[str, Any]) -> None:
        now = time.perf_counter()
        self.tokens += entry["answer_tokens"]
        self.samples += entry["samples"]
        self.have += entry["samples"]
        rate = self.samples / max(now - self.started, 1e-9)
        eta = (self.num_samples - self.have) / max(rate, 1e-9)
        self.log(f"answers: shard {k + 1}/{self.num_shards} ({entry['samples']} answers, {entry['answer_tokens']} "
                 f"tokens, {now - self.last:.0f} s); {self.have}/{self.num_samples} done; "
                 f"{self.tokens / (now - self.started):.1f} tok/s, ETA {eta / 60:.0f} min")
        self.last = now


def _write_manifest(out: Path, cfg: dict[str, Any], done: dict[int, dict], num_shards: int, num_samples: int) -> None:
    entries = [done[k] for k in sorted(done)]
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "minispark_version": __version__,
                "config": cfg, "num_samples": num_samples, "num_shards": num_shards, "shards": entries,
                "complete": len(entries) == num_shards,
                "totals": {"samples": sum(e["samples"] for e in entries),
                           "answer_tokens": sum(e["answer_tokens"] for e in entries)}}
    write_bytes_atomic(out / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())


def _read_manifest(directory: Path) -> dict[str, Any]:
    return read_format_manifest(Path(directory) / MANIFEST, FORMAT, FORMAT_VERSION, AnswerSetError,
                                "not a minispark answer set, or no shard finished yet", "regenerate the answers")


def _finished_shards(out: Path, manifest: dict[str, Any] | None, cfg: dict[str, Any], counts: list[int],
                     log: Callable[[str], None]) -> dict[int, dict]:
    """The shards of ``out`` a build keeps; refuse another set's directory, a shrink, or a file not ours."""
    listed: dict[str, dict] = {}
    if manifest is not None:
        if (differs := config_difference(manifest["config"], cfg)) is not None:
            key, was, now = differs
            raise AnswerSetError(f"{out / MANIFEST}: {option('out')} holds answers built with a different {key} "
                                 f"({was!r}, now {now!r}); use another {option('out')}")
        if manifest["totals"]["samples"] > sum(counts):
            raise AnswerSetError(f"{out / MANIFEST}: {option('out')} already holds {manifest['totals']['samples']} answers; "
                                 f"{option('num_samples')} {sum(counts)} would shrink it (an answer set only grows)")
        listed = {e["file"]: e for e in manifest["shards"]}
    for stale in [*out.glob(".answers-*.tmp"), *out.glob(f".{MANIFEST}.*.tmp")]:
        stale.unlink()  # our own atomic write cut short by a kill
    done, resample = {}, []
    for k, count in enumerate(counts):
        path = out / shard_name(k)
        entry = listed.get(path.name)
        if not path.exists() and not path.is_symlink():
            continue
        if entry is None:  # our writes list a shard right after renaming it: stopped between the two, or not ours
            entry = _unlisted_shard(path, k, count, config_hash(cfg))
        if entry is None:
            raise AnswerSetError(f"{path}: exists but is not listed in {MANIFEST}; use another {option('out')}")
        intact = not path.is_symlink() and path.stat().st_size == entry["bytes"] and file_sha256(path) == entry["sha256"]
        if intact and entry["samples"] == count:
            done[k] = entry
            continue
        resample.append((path, "the set grows past this shard's samples; resampling it" if intact
                         else "corrupt or truncated; resampling it"))
    for path, why in resample:  # only once no later file is refused: a refused run deletes nothing
        log(f"{path}: {why}")
        path.unlink()
    return done


def _unlisted_shard(path: Path, k: int, count: int, stamp: str) -> dict[str, Any] | None:
    """The manifest entry of shard ``k`` of this set renamed into place but not yet listed (Ctrl-C or a kill
    between the two writes: the rerun the hint prints refused it), read from its own metadata; None for any
    other file, which is never ours to keep or delete."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        with safetensors.safe_open(str(path), framework="pt") as handle:
            metadata = json.loads((handle.metadata() or {}).get(FORMAT, "null"))
            offsets = handle.get_tensor("answer_offset")
    except (safetensors.SafetensorError, OSError, ValueError, RecursionError):
        return None
    if not isinstance(metadata, dict) or [metadata.get(key) for key in ("config_hash", "shard", "num_samples")] \
            != [stamp, k, count]:
        return None
    return {"file": path.name, "bytes": path.stat().st_size, "sha256": file_sha256(path), "samples": count,
            "answer_tokens": int(offsets[-1])}


# ---------------------------------------------------------------------- reading
def listed_shards(directory: Path | str) -> tuple[dict[str, Any], list[Path]]:
    """An answer set's manifest and its shard files, each present at its listed size (nothing loaded): what
    a command checks before it starts, and what :class:`AnswerSet` loads."""
    directory = Path(directory)
    manifest = _read_manifest(directory)
    paths = []
    for entry in manifest["shards"]:
        path = directory / entry["file"]
        if not path.is_file() or path.stat().st_size != entry["bytes"]:
            raise AnswerSetError(f"{path}: missing or truncated (listed in {directory / MANIFEST})")
        paths.append(path)
    return manifest, paths


class AnswerSet:
    """A finished (or partly built) answer set; ``len`` and ``[i]`` over its samples in order."""

    def __init__(self, directory: Path | str, *, verify: bool = True) -> None:
        self.directory = Path(directory)
        self.manifest, paths = listed_shards(self.directory)
        self.config: dict[str, Any] = self.manifest["config"]
        self._shards: list[dict[str, torch.Tensor]] = []
        for entry, path in zip(self.manifest["shards"], paths):
            if verify and file_sha256(path) != entry["sha256"]:
                raise AnswerSetError(f"{path}: sha256 differs from {self.directory / MANIFEST} (corrupt)")
            self._shards.append(safetensors.torch.load_file(str(path)))
        sizes = [len(s["sample_index"]) for s in self._shards]
        self._starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def __getitem__(self, index: int) -> StoredAnswer:
        if not 0 <= index < len(self):
            raise IndexError(index)
        k = int(np.searchsorted(self._starts, index, side="right")) - 1
        shard, j = self._shards[k], index - int(self._starts[k])
        p0, p1 = int(shard["prompt_offset"][j]), int(shard["prompt_offset"][j + 1])
        a0, a1 = int(shard["answer_offset"][j]), int(shard["answer_offset"][j + 1])
        return StoredAnswer(sample_index=int(shard["sample_index"][j]), prompt_line=int(shard["prompt_line"][j]),
                            prompt_ids=shard["prompt_ids"][p0:p1].long(), answer_ids=shard["answer_ids"][a0:a1].long(),
                            stopped_at_eos=bool(shard["eos"][j]))

    def answer_lengths(self) -> np.ndarray:
        """(N,) answer tokens per sample, without reading any sample."""
        return np.concatenate([np.diff(s["answer_offset"].numpy()) for s in self._shards]) if self._shards \
            else np.zeros(0, dtype=np.int64)

    def require_target(self, target: Target) -> None:
        """Refuse a target other than the one that wrote the answers (same content hashes, any spelling)."""
        have, want = self.config["target"], target.identity()
        for key in ("weights_hash", "tokenizer_hash"):
            if "unknown" not in (have.get(key), want.get(key)) and not same_hash(have.get(key), want.get(key)):
                raise AnswerSetError(f"{self.directory / MANIFEST}: written by target {have.get('name')} "
                                     f"({key} {have.get(key)}), not {target.name} ({want.get(key)})")
