"""Build a DSpark target cache: regenerate answers, capture target features, store anchor windows.

``build_cache(CacheConfig(...))`` validates the prompt file, loads the target, then for each shard
of ``samples_per_shard`` samples: encodes the prompts, samples answers in batches
(``regenerate``), runs one full-sequence forward per sample capturing the chosen decoder layers and
the final-norm hidden, draws anchors, and writes only the union of the anchors' windows
(``cache_windows``) as one durable shard (``cache_format``). The manifest records everything a
trainer must match. Every random choice of sample i derives from (seed, i), and shard k always holds
the same samples, so a killed build resumes to the same bytes as an uninterrupted one.

    minispark cache --prompts examples/prompts/demo.jsonl --out runs/cache --num-samples 32
    .venv/bin/python -m pytest -q tests/data/test_cache.py
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from minispark.core import checks
from minispark.data.cache_format import (CACHE_DTYPES, MANIFEST, WRITES, CacheError, CacheMismatchError,
                                         PackedSample, ShardFile, build_manifest, config_difference, config_hash,
                                         file_sha256, int8_runtime, pack_shard, read_manifest, shard_name,
                                         shard_stats, write_manifest, write_shard)
from minispark.data.cache_config import CacheConfig
from minispark.data.cache_estimate import CacheEstimate, check_disk, estimate
from minispark.data.cache_windows import answer_mask, format_bytes, select_anchors, window_layout
from minispark.core.errors import MinisparkError, option
from minispark.data.prompts import (PromptFileError, PromptSample, encode_within_context, load_prompts,
                                    prompt_file_hash, refuse_heldout)
from minispark.data.regenerate import Answer, regenerate, sample_seed
from minispark.target.loading import Target, load_target
from minispark.target.session import PromptInputs
from minispark.core.writer_lock import sole_writer


#: ``--batch-size 0`` on a CPU, and the most rows auto takes on a GPU. Measured on the 2-core CPU with
#: the embedded target: HF ``generate`` sampling 114 tok/s at batch 8, 221 at 64; the cache build
#: runs at 0.92x HF at 64 (``benchmarks/cache_throughput.py``).
AUTO_BATCH = 64


@dataclass
class CacheReport:
    """What a cache build produced; ``ratio_to_full`` compares with a full-sequence cache."""

    out: Path
    samples: int
    generated_tokens: int
    anchors: int
    total_bytes: int
    full_bytes: int
    shards: int
    resumed_shards: int = 0
    seconds: float = 0.0

    @property
    def bytes_per_sample(self) -> float:
        return self.total_bytes / max(self.samples, 1)

    @property
    def ratio_to_full(self) -> float:
        return self.total_bytes / max(self.full_bytes, 1)

    def to_json(self) -> dict[str, Any]:
        return {"samples": self.samples, "generated_tokens": self.generated_tokens, "anchors": self.anchors,
                "bytes_per_sample": round(self.bytes_per_sample, 1), "ratio_to_full": round(self.ratio_to_full, 4),
                "total_bytes": self.total_bytes, "full_bytes": self.full_bytes, "shards": self.shards,
                "resumed_shards": self.resumed_shards, "seconds": round(self.seconds, 2), "out": str(self.out)}

    def summary(self) -> str:
        return (f"{self.samples} samples, {self.generated_tokens} tokens generated, {self.anchors} anchors, "
                f"{format_bytes(self.bytes_per_sample)}/sample ({self.ratio_to_full:.3f}× a full-sequence cache; "
                f"{format_bytes(self.total_bytes)} in {self.shards} shards at {self.out})")


# ---------------------------------------------------------------------- preparation
def prepare(config: CacheConfig, target: Target | None) -> tuple[list[PromptSample], Target, list[int]]:
    """Validate the prompt file, then load the target and resolve the layers (refusing the last)."""
    samples = load_prompts(config.prompts)  # the whole file, before anything expensive
    if config.source == "text":
        for sample in samples:
            if sample.answer is None:
                raise PromptFileError(config.prompts, sample.line, f"{option('source')} text needs a trailing assistant "
                                      "message (the text to teacher-force)")
    if config.split == "train":
        refuse_heldout(config.prompts, samples)
    if target is None:
        target = load_target(config.target, dtype=config.target_dtype, device=config.device,
                             load_in_4bit=config.load_in_4bit, load_in_8bit=config.load_in_8bit)
    if not target.is_vlm:
        for sample in samples:
            if sample.images:
                raise MinisparkError(f"{config.prompts}:{sample.line}: has images, but target {target.name} is "
                                     "text-only")
    explicit = config.layer_ids
    layers = target.auto_layers() if explicit is None else target.check_layers(explicit)
    return samples, target, layers


def estimate_cache(config: CacheConfig, *, target: Target | None = None, max_prompts: int = 256) -> CacheEstimate:
    """The ``--dry-run``: bytes per sample and in total, assuming every answer runs to the token cap."""
    samples, target, layers = prepare(config, target)
    return estimate(config, target, samples, layers, max_prompts)


def manifest_config(config: CacheConfig, target: Target, layers: list[int], prompts_hash: str,
                    num_prompts: int) -> dict[str, Any]:
    """The part of the manifest a cache is identified by (resume and training compare it).

    The sample count is not part of it: sample i is a pure function of (config, i), so a cache
    grows by asking for more samples with the same flags (new shards are appended).
    """
    quantization = "4bit" if config.load_in_4bit else "8bit" if config.load_in_8bit else None
    # Regenerated answers are the original format: caches from before --source existed stay resumable
    # and growable, so "source" is recorded only for teacher-forced text.
    source = {} if config.source == "regenerate" else {"source": config.source}
    return {
        "target": target.identity(),
        "target_model": {"model_type": target.model_type, "num_layers": target.num_layers,
                         "hidden_size": target.hidden_size, "vocab_size": target.vocab_size,
                         "uses_mrope": target.uses_mrope, "compute_dtype": str(target.dtype).removeprefix("torch."),
                         "quantization": quantization, **int8_runtime(target)},
        "split": config.split, **source, "layers": list(layers), "window": config.window, "block": config.block, "dtype": config.dtype,
        "seed": config.seed, "anchors_per_sample": config.anchors_per_sample, "anchor_run": config.anchor_run,
        "prompts": {"file": config.prompts.name, "hash": prompts_hash, "count": num_prompts},
        "sampling": {"temperature": config.temperature, "top_p": config.top_p, "top_k": config.top_k,
                     "max_new_tokens": config.max_new_tokens},
        # Batch composition changes logits by float noise, so it is part of what makes bytes reproducible.
        "batching": {"batch_size": config.batch_size, "samples_per_shard": config.samples_per_shard},
    }


# ---------------------------------------------------------------------- the build
def check_out(out: Path, flag: str = option("out")) -> Path:
    """``out`` is a directory a cache build may write into: new, empty, or a cache's own (only what a build
    writes there, ``WRITES``, and a cache manifest if it has one). A directory of someone else's files is
    refused, before any target loads, rather than filled with shards beside them."""
    checks.resumable_dir(out, flag, WRITES)
    if (out / MANIFEST).is_file():
        read_manifest(out)  # a manifest.json of another tool: one line naming it
    return out


def build_cache(config: CacheConfig, *, target: Target | None = None, progress: bool = False,
                on_shard: Callable[[int], None] | None = None, log: Callable[[str], None] | None = None) -> CacheReport:
    """Build (or resume) the cache described by ``config``; return the totals.

    ``progress`` shows a rich bar on stderr; ``log`` receives notices (default: stderr);
    ``on_shard(k)`` is called after shard k is durably written and listed in the manifest.
    """
    with sole_writer(config.out):  # a second `cache` into this --out would interleave its shards with these
        return _build_cache(config, target=target, progress=progress, on_shard=on_shard, log=log)


def _build_cache(config: CacheConfig, *, target: Target | None, progress: bool,
                 on_shard: Callable[[int], None] | None, log: Callable[[str], None] | None) -> CacheReport:
    log = log or (lambda message: print(message, file=sys.stderr))
    started = time.perf_counter()
    check_out(config.out)
    samples, target, layers = prepare(config, target)
    if config.batch_size == 0:
        config = replace(config, batch_size=auto_batch_size(config, target, samples))
    cfg = manifest_config(config, target, layers, prompt_file_hash(config.prompts, samples), len(samples))
    num_samples = config.num_samples or len(samples)
    num_shards = math.ceil(num_samples / config.samples_per_shard)
    config.out.mkdir(parents=True, exist_ok=True)
    cfg = _resume_config(config.out, cfg)
    counts = [len(_shard_range(k, config, num_samples)) for k in range(num_shards)]
    done = _resumable_shards(config.out, cfg, counts, log)
    todo = [k for k in range(num_shards) if k not in done]
    if todo and not config.force:
        check_disk(config, target, samples, layers, sum(len(_shard_range(k, config, num_samples)) for k in todo))

    stamp = config_hash(cfg)
    with _Bar(progress, num_samples, sum(e["samples"] for e in done.values())) as bar:
        for k in todo:
            indices = _shard_range(k, config, num_samples)
            packed = _build_samples(target, samples, indices, layers, config, bar)
            tensors = pack_shard(packed, len(layers), target.hidden_size, config.dtype)
            metadata = {"config_hash": stamp, "shard": k, "first_sample": indices[0], "num_samples": len(indices)}
            entry = write_shard(config.out / shard_name(k), tensors, metadata)
            done[k] = entry | shard_stats(tensors, len(layers), target.hidden_size, config.dtype)
            write_manifest(config.out, build_manifest(cfg, done, num_shards, num_samples))
            if on_shard is not None:
                on_shard(k)
    if not todo:  # a finished cache asked again (unchanged bytes), or its last shard renamed before it was listed
        write_manifest(config.out, build_manifest(cfg, done, num_shards, num_samples))
    entries = [done[k] for k in range(num_shards)]
    total = {key: sum(e[key] for e in entries) for key in ("generated_tokens", "anchors", "bytes", "full_bytes")}
    return CacheReport(out=config.out, samples=num_samples, generated_tokens=total["generated_tokens"],
                       anchors=total["anchors"], total_bytes=total["bytes"], full_bytes=total["full_bytes"],
                       shards=num_shards, resumed_shards=num_shards - len(todo), seconds=time.perf_counter() - started)


def auto_batch_size(config: CacheConfig, target: Target, samples: list[PromptSample]) -> int:
    """``--batch-size 0``: the batch size of the cache already in ``config.out`` (its bytes depend on
    it, so a cache grows with the one it was built with); else ``AUTO_BATCH`` on a CPU, where
    batched sampling is bound by reading the weights and a row more costs little; on a GPU as many
    rows as fit a quarter of the free memory with a KV cache of the longest prompt plus the token
    cap each (capped at ``AUTO_BATCH``)."""
    if (config.out / MANIFEST).exists():
        return int(read_manifest(config.out)["config"].get("batching", {}).get("batch_size") or AUTO_BATCH)
    if target.device.type != "cuda":
        return AUTO_BATCH
    text = target.text_config
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_per_token = 2 * text.num_hidden_layers * (getattr(text, "num_key_value_heads", None) or heads) * head_dim \
        * torch.empty((), dtype=target.dtype).element_size()
    longest = max(target.encode(**sample.encode_kwargs()).length for sample in samples[:256])
    free, _ = torch.cuda.mem_get_info(target.device)
    return max(1, min(AUTO_BATCH, int(0.25 * free) // (kv_per_token * (longest + config.max_new_tokens))))


def _shard_range(k: int, config: CacheConfig, num_samples: int) -> list[int]:
    return list(range(k * config.samples_per_shard, min((k + 1) * config.samples_per_shard, num_samples)))


def _build_samples(target: Target, samples: list[PromptSample], indices: list[int], layers: list[int],
                   config: CacheConfig, bar: "_Bar") -> list[PackedSample]:
    """Regenerate and capture one shard's samples, batched by prompt length (a fixed order per shard)."""
    # A prompt that fills the context is its file and line, not minutes of decoding past the last position.
    prompts = {i: encode_within_context(target, samples[i % len(samples)], config.prompts) for i in indices}
    order = sorted(indices, key=lambda i: (prompts[i].length, i))
    packed: dict[int, PackedSample] = {}
    for start in range(0, len(order), config.batch_size):
        batch = order[start:start + config.batch_size]
        if config.source == "text":
            answers = [given_answer(target, samples[i % len(samples)], prompts[i], layers, config.max_new_tokens,
                                    config.prompts) for i in batch]
        else:
            answers = regenerate(target, [prompts[i] for i in batch], [sample_seed(config.seed, i, 0) for i in batch],
                                 config.sampling, config.max_new_tokens, capture_layers=layers)
        for i, answer in zip(batch, answers):
            packed[i] = pack_sample(target, i, prompts.pop(i), answer, config)
        bar.advance(len(batch), sum(len(a.tokens) for a in answers))
    return [packed[i] for i in indices]


def given_answer(target: Target, sample: PromptSample, prompt: PromptInputs, layers: list[int],
                 max_new_tokens: int, prompt_file: Path) -> Answer:
    """Teacher forcing: the sample's own answer text as the target's chat template renders it (up to
    and including the end of turn, at most ``max_new_tokens``), with features from one forward."""
    messages = sample.encode_kwargs()["messages"]  # an answer only comes with the messages form
    full = target.encode(messages + [{"role": "assistant", "content": sample.answer}], add_generation_prompt=False)
    if not torch.equal(full.input_ids[0, :prompt.length].cpu(), prompt.input_ids[0].cpu()):
        raise PromptFileError(prompt_file, sample.line, "the chat template renders the answer turn with a different "
                              "prefix than the generation prompt; this target cannot teacher-force it")
    tokens = full.input_ids[0, prompt.length:].cpu()
    hits = torch.isin(tokens, torch.tensor(sorted(target.eos_token_ids))).nonzero()
    end = min(int(hits[0]) + 1 if len(hits) else len(tokens), max_new_tokens)
    tokens = tokens[:end]
    features, final = target.capture(target.extend(prompt, tokens), layers)  # (L, m, d), (L, d)
    return Answer(tokens=tokens, stopped_at_eos=bool(len(hits)) and end == int(hits[0]) + 1, features=features,
                  final_hidden=final)


def pack_sample(target: Target, index: int, prompt: PromptInputs, answer: Answer, config: CacheConfig) -> PackedSample:
    """Keep only the rows of the sample's anchor windows from the features captured while generating."""
    full = target.extend(prompt, answer.tokens)  # (1, P + n); generated tokens continue the text positions
    prompt_len, seq_len = prompt.length, full.length
    mask = answer_mask(prompt_len, seq_len)
    rng = np.random.default_rng(sample_seed(config.seed, index, 1))
    anchors = select_anchors(mask, config.anchors_per_sample, rng, config.anchor_run)
    text_pos = full.text_positions.cpu().numpy()
    layout = window_layout(anchors, seq_len, config.window, config.block, text_pos)
    dtype = CACHE_DTYPES[config.dtype]
    ids = full.input_ids[0].cpu().numpy()
    ctx, hid = torch.from_numpy(layout.ctx_pos), torch.from_numpy(layout.hid_pos)
    return PackedSample(sample_index=index, prompt_len=prompt_len, seq_len=seq_len,
                        stopped_at_eos=answer.stopped_at_eos, layout=layout, input_ids=ids[layout.tok_pos],
                        text_pos=text_pos[layout.tok_pos], loss_mask=mask[layout.tok_pos],
                        features=answer.features[ctx].to(dtype), final_hidden=answer.final_hidden[hid].to(dtype))


def _resume_config(out: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """The manifest's own config when ``out`` holds a cache of the same target spelled differently
    (another path to the same files: equal content hashes), so resuming keeps its bytes; else ``cfg``."""
    if not (out / MANIFEST).exists():
        return cfg
    old = read_manifest(out)["config"]
    have, want = old.get("target", {}), cfg["target"]
    known = "unknown" not in (have.get("weights_hash"), want.get("weights_hash"))
    if known and {k: v for k, v in have.items() if k != "name"} == {k: v for k, v in want.items() if k != "name"} \
            and {k: v for k, v in old.items() if k != "target"} == {k: v for k, v in cfg.items() if k != "target"}:
        return old
    return cfg


def _resumable_shards(out: Path, cfg: dict[str, Any], counts: list[int],
                      log: Callable[[str], None]) -> dict[int, dict]:
    """Finished shards already in ``out`` for this exact config; refuse a different cache's directory.

    ``counts[k]`` is how many samples shard k holds at the requested size; a shorter last shard of
    a smaller build is rebuilt when the cache grows, and shrinking a cache is refused.
    """
    listed: dict[str, dict] = {}
    if (out / MANIFEST).exists():
        manifest = read_manifest(out)
        if manifest["config"].get("source") == "mix":
            raise CacheMismatchError(f"{out / MANIFEST}: {option('out')} holds a mix of caches (`minispark cache-mix`), which "
                                     "cannot grow; grow its parts and mix them again")
        if (differs := config_difference(manifest["config"], cfg)) is not None:
            key, was, now = differs
            raise CacheMismatchError(f"{out / MANIFEST}: {option('out')} holds a cache built with a different {key} "
                                     f"({was!r}, now {now!r}); use another {option('out')} or delete it")
        # the samples its finished shards hold; an interrupted build's plan ("num_samples") said "already holds 400
        # samples" of a cache holding 56, and refused to finish it at any size below the plan
        have = int(manifest["totals"]["samples"])
        if have > sum(counts):
            raise CacheMismatchError(f"{out / MANIFEST}: {option('out')} already holds {have} samples; {option('num_samples')} "
                                     f"{sum(counts)} would shrink it (a cache only grows)")
        listed = {e["file"]: e for e in manifest["shards"]}
    for stale in [*out.glob(".shard-*.tmp"), *out.glob(f".{MANIFEST}.*.tmp")]:
        stale.unlink()  # our own write cut short by a kill (atomic writes use ".NAME.*.tmp")
    stamp = config_hash(cfg)
    done, rebuild = {}, []
    for k, count in enumerate(counts):
        path = out / shard_name(k)
        if not path.exists():
            continue
        entry = listed.get(path.name)
        if entry is not None and path.stat().st_size == entry["bytes"] and file_sha256(path) == entry["sha256"]:
            if entry["samples"] == count:
                done[k] = entry
            else:
                rebuild.append((path, f"the cache grows past this shard's {entry['samples']} samples; rebuilding it"))
            continue
        try:  # renamed but not yet listed (killed between the two), or corrupt
            shard = ShardFile(path)
            ok = (entry is None and shard.metadata.get("config_hash") == stamp and shard.metadata.get("shard") == k
                  and shard.metadata.get("num_samples") == count)
        except CacheError:
            ok = False
        if not ok and entry is None:  # not listed by our manifest: someone else's file, never ours to delete
            raise CacheMismatchError(f"{path}: exists but is not a shard of this cache; use another {option('out')}")
        if ok:
            tensors = {key: shard[key] for key in ("seq_len", "prompt_len", "sample_index", "anchor_pos")}
            done[k] = {"file": path.name, "bytes": path.stat().st_size, "sha256": file_sha256(path)} | \
                shard_stats(tensors, len(cfg["layers"]), cfg["target_model"]["hidden_size"], cfg["dtype"])
        else:
            rebuild.append((path, "corrupt, truncated or outdated shard; regenerating it"))
    # Deleted only once every shard name is known to be ours: a refusal further on (someone's file at a
    # later shard's name) left the cache without a shard its manifest lists.
    for path, why in rebuild:
        log(f"{path}: {why}")
        path.unlink()
    return done


# ---------------------------------------------------------------------- progress
class _Bar:
    """A rich progress bar with samples/s, generated tokens/s and ETA (a no-op when disabled)."""

    def __init__(self, enabled: bool, total: int, completed: int) -> None:
        self.progress = None
        self.tokens = 0
        self.started = time.perf_counter()
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            from minispark.core.console import make_console

            self.progress = Progress(TextColumn("cache"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[rates]}"), TextColumn("ETA"), TimeRemainingColumn(),
                                     console=make_console(stderr=True))  # stdout stays clean for --json
            self.task = self.progress.add_task("cache", total=total, completed=completed, rates="")
        self.new_samples = 0

    def __enter__(self) -> "_Bar":
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def advance(self, samples: int, tokens: int) -> None:
        self.tokens += tokens
        self.new_samples += samples
        if self.progress is not None:
            elapsed = max(time.perf_counter() - self.started, 1e-9)
            rates = f"{self.new_samples / elapsed:.2f} samples/s  {self.tokens / elapsed:.1f} tok/s"
            self.progress.update(self.task, advance=samples, rates=rates)
