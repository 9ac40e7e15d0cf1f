"""Measure the real peak memory of training steps, to check ``memory.estimate_memory`` against it.

``measure_cpu`` runs ``python -m minispark.measuring.memory_measure --measure REQUEST`` in a fresh subprocess
(nothing else in its heap; ``MALLOC_MMAP_THRESHOLD_`` set so freed tensors go back to the OS at
once): it builds the model with random target weights, resets the kernel's peak-RSS counter
(``/proc/self/clear_refs``), runs real training steps on a synthetic batch and reports ``VmHWM``
minus the RSS before the model was built. ``scripts/check_memory_cuda.py`` does the same on CUDA.

    .venv/bin/python -m pytest -q tests/training/test_memory.py
"""

from __future__ import annotations

from minispark.core.errors import option

import json
import os
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

from minispark.model.draft_model import DraftConfig
from minispark.training.memory import BatchShape
from minispark.training.draft_sizes import draft_config, recipe_dims
from minispark.training.recipes import TrainConfig


def synthetic_batch(draft: DraftConfig, shape: BatchShape, cache_dtype: str, seed: int = 0):
    """A random :class:`~minispark.training.anchor_batches.Batch` of exactly ``shape`` (every row and anchor in use)."""
    from minispark.training.anchor_batches import Batch

    g = torch.Generator().manual_seed(seed)
    r, n, a, gamma = shape.rows, shape.context, shape.anchors, draft.block_size
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[cache_dtype]
    positions = torch.arange(n).expand(r, n) + draft.window  # context rows, then the anchors after them
    anchors = torch.linspace(n // 2, n + draft.window, a).long().expand(r, a) if n else torch.zeros(r, a).long()
    return Batch(features=torch.randn(r, n, draft.feature_size, generator=g).to(dtype),
                 context_positions=positions.clone(), context_valid=torch.ones(r, n, dtype=torch.bool),
                 block_tokens=torch.randint(0, draft.vocab_size, (r, a, gamma + 1), generator=g),
                 anchor_positions=anchors.clone(),
                 target_hidden=torch.randn(r, a, gamma, draft.hidden_size, generator=g).to(dtype),
                 valid=torch.ones(r, a, gamma, dtype=torch.bool))


def build_synthetic(config: TrainConfig, shape: BatchShape, draft: DraftConfig | None = None):
    """Model, optimizer, scheduler and batch of ``config`` on its device, with random target weights."""
    from minispark.training.trainer import build_model, make_optimizer

    draft = draft or draft_config(config, recipe_dims(config), mask_token_id=0)
    g = torch.Generator().manual_seed(config.seed)
    embed = torch.randn(draft.vocab_size, draft.hidden_size, generator=g)
    lm_head = embed if config.tie_embeddings else torch.randn(draft.vocab_size, draft.hidden_size, generator=g)
    vocab_ids = torch.arange(draft.draft_vocab) if draft.draft_vocab else None
    model = build_model(draft, embed, lm_head, config, vocab_ids)
    del embed, lm_head
    optimizer, scheduler = make_optimizer(model, config)
    return model, optimizer, scheduler, synthetic_batch(draft, shape, config.cache_dtype).to(config.resolved_device)


def _proc_status(key: str) -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def synthetic_heldout(config: TrainConfig, model, heldout_shape: BatchShape, batches: int | None = None):
    """A :class:`~minispark.training.heldout.HeldoutProxy` of random batches of ``heldout_shape`` (as many as
    ``config``'s slice packs into unless ``batches`` is given), scored against a random whole-vocabulary
    lm_head, as the trainer builds it for ``config``."""
    from minispark.training.heldout import HeldoutProxy
    from minispark.training.memory import heldout_batches

    batches = heldout_batches(config) if batches is None else batches
    draft = model.config
    head = torch.randn(draft.vocab_size, draft.hidden_size, generator=torch.Generator().manual_seed(1))
    return HeldoutProxy([synthetic_batch(draft, heldout_shape, config.cache_dtype, seed=2 + i) for i in range(batches)],
                        draft.block_size, device=config.resolved_device, full_lm_head=head,
                        vocab_chunk=config.chunk_anchors)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # reset VmHWM to the current RSS


def _measure_here(config: TrainConfig, shape: BatchShape, steps: int,
                  heldout_shape: BatchShape | None = None) -> dict[str, int]:
    """Run in the measuring subprocess: peak RSS growth over ``steps`` real training steps, then (with
    ``heldout_shape``) over one held-out evaluation of that batch shape."""
    from minispark.training.trainer import autocast, train_step

    torch.set_num_threads(1)
    warm = replace(config, hidden_size=32, vocab_size=64, draft_vocab=min(config.draft_vocab or 0, 32), num_heads=2, num_kv_heads=1, head_dim=16,
                   intermediate_size=32, markov_rank=min(config.markov_rank, 8), batch_anchors=2, chunk_anchors=1)
    parts = build_synthetic(warm, BatchShape(1, 4, 2))
    for _ in range(2):  # load every kernel and lazy buffer once, before the baseline
        train_step(*parts, warm)
    if heldout_shape is not None:
        synthetic_heldout(warm, parts[0], BatchShape(1, 4, 2), batches=1).score(parts[0], autocast(warm))
    del parts
    baseline = _proc_status("VmRSS")
    model, optimizer, scheduler, batch = build_synthetic(config, shape)
    heldout = synthetic_heldout(config, model, heldout_shape) if heldout_shape is not None else None
    _reset_peak()
    for _ in range(steps):
        train_step(model, optimizer, scheduler, batch, config)
    result = {"peak_bytes": _proc_status("VmHWM") - baseline, "baseline_bytes": baseline}
    if heldout is not None:
        _reset_peak()
        heldout.score(model, autocast(config))
        result["heldout_peak_bytes"] = _proc_status("VmHWM") - baseline
    return result


def measure_cpu(config: TrainConfig, shape: BatchShape | None = None, steps: int = 3, timeout: float = 300) -> int:
    """Measured peak bytes of ``steps`` CPU training steps of ``config`` (fresh subprocess, RSS)."""
    return int(_run_measurement(config, shape, steps, None, timeout)["peak_bytes"])


def measure_cpu_heldout(config: TrainConfig, steps: int = 2, timeout: float = 300) -> tuple[int, int]:
    """(training peak, held-out evaluation peak) bytes of ``config`` on the CPU, one fresh subprocess;
    the evaluation runs after the training steps, on batches shaped as the trainer packs them."""
    from minispark.training.memory import heldout_shape

    result = _run_measurement(config, None, steps, heldout_shape(config), timeout)
    return int(result["peak_bytes"]), int(result["heldout_peak_bytes"])


def measure_cpu_host(config: TrainConfig, target_dir: Path, timeout: float = 300) -> int:
    """Peak host RSS growth (bytes) of what training from a cache does on the host before its first step:
    read the target's frozen tensors (``target_tensors.load_frozen_parts``) and build the drafter
    (``trainer.build_model``), in a fresh subprocess; ``config`` is built on the CPU as it would be before
    moving to a GPU. Compare with ``memory.host_bytes``'s "target tensors" + "drafter build"."""
    request = json.dumps({"config": config.to_dict(), "host_target": str(target_dir)})
    return int(_subprocess(request, timeout)["peak_bytes"])


def _measure_host(config: TrainConfig, target_dir: str) -> dict[str, int]:
    import gc

    from minispark.training.draft_sizes import check_target_dims, target_dims
    from minispark.training.target_tensors import load_frozen_parts
    from minispark.training.trainer import build_model

    torch.set_num_threads(1)
    load_frozen_parts(target_dir)  # imports, tokenizer and processor files: once, before the baseline
    gc.collect()
    baseline = _proc_status("VmRSS")
    _reset_peak()
    target = load_frozen_parts(target_dir)
    dims = target_dims(target)
    check_target_dims(config, dims)
    draft = draft_config(config, dims, mask_token_id=0, dtype="bfloat16" if config.compute_dtype == "bf16" else "float32")
    model = build_model(draft, target.model.get_input_embeddings().weight.detach(), target.lm_head.weight.detach(),
                        config)
    del model
    return {"peak_bytes": _proc_status("VmHWM") - baseline, "baseline_bytes": baseline}


def _run_measurement(config: TrainConfig, shape: BatchShape | None, steps: int, heldout: BatchShape | None,
                     timeout: float) -> dict[str, int]:
    shape = shape or BatchShape.from_config(config)
    request = json.dumps({"config": config.to_dict(), "shape": asdict(shape), "steps": steps,
                          "heldout_shape": asdict(heldout) if heldout else None})
    return _subprocess(request, timeout)


def _subprocess(request: str, timeout: float) -> dict[str, int]:
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-m", "minispark.measuring.memory_measure", "--measure", request], env=env,
                            capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"memory measurement failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["--measure"]:
        raise SystemExit(f"usage: python -m minispark.measuring.memory_measure {option('measure')} REQUEST_JSON")
    request = json.loads(argv[1])
    config = TrainConfig.from_dict(request["config"])
    if "host_target" in request:
        print(json.dumps(_measure_host(replace(config, device="cpu"), request["host_target"])))
        return
    held = request.get("heldout_shape")
    print(json.dumps(_measure_here(replace(config, device="cpu"), BatchShape(**request["shape"]), request["steps"],
                                   BatchShape(**held) if held else None)))


if __name__ == "__main__":
    main()
