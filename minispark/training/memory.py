"""Predict the peak memory of a training step (``minispark train --dry-run``), and measure it.

The prediction adds up what is alive at the two high points of a step (``train.train_step``):

* static: fp32 trainable weights, frozen embedding/lm_head (compute dtype, once when tied),
  optimizer state (AdamW: 8 B/param; 8-bit AdamW: 2 B/param + block absmax), the packed batch;
* loss phase: backbone activations + head gradients + one logits chunk
  (``LIVE_VOCAB_TENSORS`` × chunk·γ·V fp32, see ``losses``);
* backbone backward: activations + all gradients.

Parameter counts come from building the draft model on the meta device; activations are the bytes
autograd saves in ``forward_train``, traced on the meta device at the batch's padded shape (no
memory is allocated; bf16 autocast is emulated by casting matmul inputs). With gradient
checkpointing, each layer keeps only its inputs and one layer is recomputed at a time.

``memory_measure.measure_cpu`` checks the prediction: a fresh subprocess (so nothing else lives in its heap,
with ``MALLOC_MMAP_THRESHOLD_`` set so freed tensors go back to the OS at once) builds the model,
resets the kernel's peak-RSS counter (``/proc/self/clear_refs``), runs real training steps on a
synthetic batch and reports ``VmHWM`` minus the RSS before the model was built.
``scripts/check_memory_cuda.py`` does the same with ``torch.cuda.max_memory_allocated``.

    .venv/bin/python -m minispark.training.memory rtx3050          # print the breakdown of a recipe
"""

from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from minispark.model.draft_model import DraftConfig, DraftModel
from minispark.training.heldout import heldout_batch_anchors
from minispark.training.losses import LIVE_VOCAB_TENSORS
from minispark.training.draft_sizes import draft_config, recipe_dims
from minispark.training.recipes import TrainConfig, load_recipe

GB = 1e9
CACHE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
BNB_BLOCK, BNB_MIN_8BIT = 256, 4096  # bitsandbytes blockwise 8-bit state: block size, smallest 8-bit tensor
CHECKPOINT_BYTES = 2  # hub checkpoints store their weights in bf16
# Host RSS of torch with the CUDA runtime, cuBLAS and the caching allocator loaded: an allowance until the GPU
# check (``scripts/gpu_check.py``, which measures training's host peak) has run on a card.
HOST_LIBRARIES = int(1.5e9)


@dataclass(frozen=True)
class BatchShape:
    """Padded shape of a packed batch: R rows × N context rows, A anchors per row."""

    rows: int
    context: int
    anchors: int

    @classmethod
    def from_config(cls, config: TrainConfig) -> "BatchShape":
        """The largest batch a cache built as the recipe says produces: every sample holding
        ``anchors_per_sample`` anchors, a batch straddling one sample more than it fills, and a
        row's context the union of its windows (at most answer + W rows; whole sequence if W = 0)."""
        b, per = config.batch_anchors, config.anchors_per_sample
        anchors = min(b, per)
        rows = min(b, (b - 1) // per + 2)
        if config.window > 0:
            context = min(anchors * config.window, config.max_new_tokens + config.window)
        else:
            context = config.max_prompt_tokens + config.max_new_tokens
        return cls(rows, context, anchors)


@dataclass
class MemoryBreakdown:
    """Predicted bytes per component and the peak (see the module docstring for the phases)."""

    trainable_weights: int
    frozen_weights: int
    gradients: int
    optimizer: int
    activations: int
    logits_chunk: int
    cache_batch: int
    head_gradients: int
    shape: BatchShape
    device: str
    dtype: str
    optimizer_name: str
    trainable_params: int
    frozen_params: int
    # With a held-out cache: its slice when it lives on the training device (a CPU) all along, and what an
    # evaluation adds to the static bytes (gradients are freed by then).
    heldout_slice: int = 0
    heldout: int | None = None
    host: dict[str, int] | None = None  # training on a GPU: host RAM by component (see ``host_bytes``)

    @property
    def host_peak(self) -> int | None:
        return None if self.host is None else sum(self.host.values())

    @property
    def static(self) -> int:
        return self.trainable_weights + self.frozen_weights + self.optimizer + self.cache_batch + self.heldout_slice

    @property
    def phases(self) -> dict[str, int]:
        phases = {"loss chunks": self.static + self.activations + self.head_gradients + self.logits_chunk,
                  "backbone backward": self.static + self.activations + self.gradients}
        return phases if self.heldout is None else phases | {"held-out proxy": self.static + self.heldout}

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phases.get)

    @property
    def predicted_peak(self) -> int:
        return max(self.phases.values())

    def components(self) -> dict[str, int]:
        keys = ("trainable_weights", "frozen_weights", "gradients", "optimizer", "activations", "logits_chunk",
                "cache_batch")
        return {key: getattr(self, key) for key in keys}

    def to_json(self) -> dict[str, Any]:
        return {"predicted_peak_gb": round(self.predicted_peak / GB, 4), "peak_phase": self.peak_phase,
                "phases_gb": {k: round(v / GB, 4) for k, v in self.phases.items()},
                "components_gb": {k: round(v / GB, 4) for k, v in self.components().items()},
                "trainable_params": self.trainable_params, "frozen_params": self.frozen_params,
                "batch": asdict(self.shape), "device": self.device, "dtype": self.dtype,
                "optimizer": self.optimizer_name,
                "host_gb": None if self.host is None else {k: round(v / GB, 4) for k, v in self.host.items()},
                "host_peak_gb": None if self.host is None else round(self.host_peak / GB, 4)}

    def describe(self) -> str:
        s = self.shape
        lines = [f"memory estimate ({self.device}, {self.dtype}, {self.optimizer_name}; batch {s.rows} rows × "
                 f"{s.context} context rows, {s.anchors} anchors/row)"]
        notes = {"trainable_weights": f"{self.trainable_params / 1e6:.1f}M params fp32",
                 "frozen_weights": f"{self.frozen_params / 1e6:.1f}M params (embedding, lm_head)",
                 "gradients": f"of which heads {self.head_gradients / GB:.3f} GB",
                 "logits_chunk": "chunk·γ·V logits working set"}
        for key, value in self.components().items():
            lines.append(f"  {key.replace('_', ' '):<18} {value / GB:8.3f} GB  {notes.get(key, '')}".rstrip())
        phases = ", ".join(f"{name} {value / GB:.3f}" for name, value in self.phases.items())
        lines.append(f"  {'phases':<18} {phases} GB")
        runtime = "the CUDA context" if self.device == "cuda" else "the ~0.5 GB of loaded torch libraries"
        lines.append(f"  {'predicted peak':<18} {self.predicted_peak / GB:8.3f} GB  (during {self.peak_phase}; "
                     f"excludes {runtime})")
        if self.host is not None:
            parts = ", ".join(f"{name} {value / GB:.3f}" for name, value in self.host.items())
            lines.append(f"  {'host RAM':<18} {self.host_peak / GB:8.3f} GB  ({parts}; the libraries' share is an "
                         "allowance, not measured here)")
        return "\n".join(lines)


def estimate_memory(config: TrainConfig, shape: BatchShape | None = None,
                    draft: DraftConfig | None = None) -> MemoryBreakdown:
    """Predicted peak of one training step of ``config`` (target sizes from the recipe unless
    ``draft`` is given; batch shape from :meth:`BatchShape.from_config` unless ``shape`` is)."""
    shape = shape or BatchShape.from_config(config)
    if draft is None:
        draft = draft_config(config, recipe_dims(config), mask_token_id=0)
    bf16 = config.compute_dtype == "bf16"
    with torch.device("meta"):
        model = DraftModel(replace(draft, dtype="float32"))
    if config.tie_embeddings and not draft.draft_vocab:  # a draft vocabulary keeps its own lm_head rows
        model.lm_head.weight = model.embed_tokens.weight
    frozen = {id(p): p for m in (model.embed_tokens, model.lm_head) for p in m.parameters()}
    model.embed_tokens.requires_grad_(False)
    model.lm_head.requires_grad_(False)
    if bf16:
        model.embed_tokens.to(torch.bfloat16)
        model.lm_head.to(torch.bfloat16)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    n_train = sum(p.numel() for _, p in trainable)
    n_frozen = sum(p.numel() for p in frozen.values())
    heads = [p for n, p in trainable if n.startswith(("markov.", "confidence_proj."))]
    n_heads = sum(p.numel() for p in heads)
    head_modules = [m for m in (model.markov, model.confidence_proj) if m is not None]
    head_linear = sum(m.weight.numel() for h in head_modules for m in h.modules() if isinstance(m, torch.nn.Linear))
    gamma, vocab, d = draft.block_size, draft.output_size, draft.hidden_size
    chunk_rows = min(config.chunk_anchors, config.batch_anchors) * gamma
    # Beyond the live (chunk, γ, V) tensors: a second copy of the largest head gradient while a
    # chunk's gradient is accumulated, and (bf16) autocast's per-chunk casts of the head's Linears.
    largest_head = max((p.numel() for p in heads), default=0)
    logits = LIVE_VOCAB_TENSORS * chunk_rows * vocab * 4 + largest_head * 4 + (2 * head_linear if bf16 else 0)
    logits += shape.rows * shape.anchors * gamma * d * 4 * 2  # hidden and its gradient, flattened
    slice_bytes, heldout = heldout_bytes(config, model, draft, bf16) if config.heldout_cache else (0, None)
    host = host_bytes(config, draft, n_train, bf16) if config.resolved_device != "cpu" else None
    return MemoryBreakdown(
        heldout_slice=slice_bytes, heldout=heldout, host=host,
        trainable_weights=4 * n_train, frozen_weights=(2 if bf16 else 4) * n_frozen, gradients=4 * n_train,
        optimizer=_optimizer_bytes([p for _, p in trainable], config.optimizer_name),
        activations=activation_bytes(model, draft, shape, config.cache_dtype, bf16, config.grad_checkpointing),
        logits_chunk=logits, cache_batch=batch_bytes(draft, shape, config.cache_dtype), head_gradients=4 * n_heads,
        shape=shape, device=config.resolved_device, dtype=config.compute_dtype, optimizer_name=config.optimizer_name,
        trainable_params=n_train, frozen_params=n_frozen)


def host_bytes(config: TrainConfig, draft: DraftConfig, trainable_params: int, bf16: bool) -> dict[str, int]:
    """Host RAM of training from a cache on a GPU, by component, all counted as alive at once (an upper
    bound: the drafter's CPU build is freed when it moves to the device):

    * target tensors: the embedding (and an untied lm_head) read in the checkpoint's dtype
      (``target_tensors.load_frozen_parts``: no other target weight is read), held all run;
    * drafter build: fp32 trainable weights initialised on the CPU, plus the frozen tensors' conversion when
      the compute dtype is not the checkpoint's, plus a draft vocabulary's lm_head rows;
    * data: the batch being packed and the one on its way to the device;
    * held-out slice: with a held-out cache, every held-out batch (they go to the device one at a time);
    * libraries: torch and the CUDA runtime's host side (``HOST_LIBRARIES``, an allowance).
    """
    vocab, d = draft.vocab_size, draft.hidden_size
    copies = 1 if config.tie_embeddings else 2
    frozen_item = 2 if bf16 else 4
    converted = 0 if frozen_item == CHECKPOINT_BYTES else copies * vocab * d * frozen_item
    parts = {"target tensors": copies * vocab * d * CHECKPOINT_BYTES,
             "drafter build": 4 * trainable_params + converted + draft.draft_vocab * d * frozen_item,
             "data": 2 * batch_bytes(draft, BatchShape.from_config(config), config.cache_dtype)}
    if config.heldout_cache:
        parts["held-out slice"] = heldout_batches(config) * batch_bytes(draft, heldout_shape(config),
                                                                        config.cache_dtype)
    return parts | {"libraries": HOST_LIBRARIES}


def heldout_shape(config: TrainConfig) -> BatchShape:
    """Padded shape of a held-out batch (``heldout.heldout_batch_anchors`` anchors, packed as training's)."""
    return BatchShape.from_config(replace(config, batch_anchors=heldout_batch_anchors(config)))


def heldout_bytes(config: TrainConfig, model: DraftModel, draft: DraftConfig, bf16: bool) -> tuple[int, int]:
    """(the held-out slice's bytes resident on the training device, what an evaluation adds to the static
    ones) for ``heldout.HeldoutProxy``: the slice lives on the CPU (so is resident there when training on a
    CPU) and goes to the device a batch at a time; an evaluation adds that batch (on a GPU), the backbone's
    no-grad forward (bounded by the checkpointed activations: layer inputs and one layer), the target's
    whole lm_head on the device for a draft vocabulary, and one vocabulary chunk."""
    shape = heldout_shape(config)
    forward = activation_bytes(model, draft, shape, config.cache_dtype, bf16, checkpointing=True)
    gamma, vocab, out = draft.block_size, draft.vocab_size, draft.output_size
    frozen_item = 2 if bf16 else 4
    full_head = vocab * draft.hidden_size * frozen_item if draft.draft_vocab and config.resolved_device != "cpu" else 0
    rows = config.chunk_anchors * gamma
    # logits (compute dtype) and p_d over the drafter's outputs; target logits and p_t over the vocabulary;
    # p_d − p_t and its abs (or, with a draft vocabulary, p_t's rows inside it and their difference)
    chunk = rows * (out * (frozen_item + 4 + 8) + vocab * (frozen_item + 4))
    batch = batch_bytes(draft, shape, config.cache_dtype)
    if config.resolved_device == "cpu":
        return heldout_batches(config) * batch, forward + full_head + chunk
    return 0, batch + forward + full_head + chunk


def heldout_batches(config: TrainConfig) -> int:
    """How many batches the held-out slice (``eval_anchors``) packs into."""
    return math.ceil(config.eval_anchors / heldout_batch_anchors(config))


def _optimizer_bytes(params: list[torch.Tensor], name: str) -> int:
    if name == "adamw":
        return sum(8 * p.numel() for p in params)
    total = 2 * 256 * 4  # two quantisation maps per tensor, counted once (shared buffers are small)
    for p in params:
        n = p.numel()
        total += 2 * n + 2 * 4 * math.ceil(n / BNB_BLOCK) if n >= BNB_MIN_8BIT else 8 * n
    return total


def batch_bytes(draft: DraftConfig, shape: BatchShape, cache_dtype: str) -> int:
    """Bytes of a packed :class:`~minispark.training.anchor_batches.Batch` of ``shape``."""
    r, n, a, g = shape.rows, shape.context, shape.anchors, draft.block_size
    item = CACHE_BYTES[cache_dtype]
    return (r * n * draft.feature_size * item + r * a * g * draft.hidden_size * item  # features, target hidden
            + r * n * (8 + 1) + r * a * ((g + 1) * 8 + 8 + g))  # positions, masks, token ids


class _EmulateAutocast(TorchFunctionMode):
    """On the meta device, cast matmul inputs to bf16 as CUDA autocast would (autocast skips meta)."""

    LOWER = {F.linear, torch.matmul, torch.bmm, F.scaled_dot_product_attention}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.LOWER:
            args = tuple(a.to(torch.bfloat16) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                         for a in args)
        return func(*args, **(kwargs or {}))


def activation_bytes(model: DraftModel, draft: DraftConfig, shape: BatchShape, cache_dtype: str, bf16: bool,
                     checkpointing: bool) -> int:
    """Bytes autograd keeps from ``forward_train`` at ``shape`` (traced on the meta device)."""
    r, n, a, g = shape.rows, shape.context, shape.anchors, draft.block_size
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[cache_dtype]
    with torch.device("meta"):
        inputs = (torch.empty(r, n, draft.feature_size, dtype=dtype), torch.zeros(r, n, dtype=torch.long),
                  torch.zeros(r, a, g + 1, dtype=torch.long), torch.zeros(r, a, dtype=torch.long),
                  torch.ones(r, n, dtype=torch.bool))
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, tuple[int, int | None]] = {}  # storage → (bytes, layer that saved it)
    layer_inputs: dict[int, dict[int, int]] = {}
    current: list[int | None] = [None]

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in params and storage._cdata not in saved:
            saved[storage._cdata] = (storage.nbytes(), current[0])
        return t

    def enter(index: int):
        def hook(_module, args):
            current[0] = index
            tensors = [x for x in torch.utils._pytree.tree_leaves(args) if isinstance(x, torch.Tensor)]
            layer_inputs[index] = {x.untyped_storage()._cdata: x.untyped_storage().nbytes() for x in tensors}
        return hook

    handles = [layer.register_forward_pre_hook(enter(i)) for i, layer in enumerate(model.layers)]
    handles += [layer.register_forward_hook(lambda *_: current.__setitem__(0, None)) for layer in model.layers]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
                (_EmulateAutocast() if bf16 else contextlib.nullcontext()):
            out = model.forward_train(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    hidden = out.hidden.untyped_storage()
    total = sum(b for b, _ in saved.values()) + (0 if hidden._cdata in saved else hidden.nbytes())
    if not checkpointing:
        return total
    per_layer = [sum(b for b, layer in saved.values() if layer == i) for i in range(len(model.layers))]
    held = {k: v for inputs_i in layer_inputs.values() for k, v in inputs_i.items()
            if k not in saved or saved[k][1] is not None}
    return total - sum(per_layer) + sum(held.values()) + max(per_layer, default=0)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    config = load_recipe(argv[0] if argv else "tiny", argv[1:])
    print(estimate_memory(config).describe())


if __name__ == "__main__":
    main()
