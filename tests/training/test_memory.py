"""The memory estimator: predicted peak within 20 % of the peak RSS growth measured in a fresh
process running real training steps (CPU), the held-out evaluation's peak inside the training one
(measured and predicted), the host RAM of reading a shape-scaled Qwen2.5-VL checkpoint and building its
drafter as predicted (and far below the checkpoint's size), parameter counts equal a real model's, the
rtx3050 recipe fits in 5.5 GB on the device and 4 GB on the host, and the knobs move the components they
should.

    .venv/bin/python -m pytest -q tests/training/test_memory.py
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from minispark.training.memory import BatchShape, estimate_memory
from minispark.measuring.memory_measure import measure_cpu, measure_cpu_heldout, measure_cpu_host
from minispark.training.draft_sizes import draft_config, recipe_dims
from minispark.training.recipes import load_recipe
from minispark.training.trainer import build_model

TINY = load_recipe("tiny")
# Big enough that allocator noise is small next to it, small enough to measure in a few seconds.
SMALL = replace(TINY, hidden_size=256, vocab_size=8192, num_heads=4, num_kv_heads=2, head_dim=64,
                intermediate_size=512, markov_rank=64, block_size=5, window=32, anchors_per_sample=16,
                max_new_tokens=64, batch_anchors=32, chunk_anchors=4, feature_layers=[1, 2, 3])


@pytest.mark.parametrize("config", [TINY, pytest.param(SMALL, marks=pytest.mark.slow), pytest.param(replace(SMALL, grad_checkpointing=True,
                                                                     optimizer="adamw8bit"), marks=pytest.mark.slow)],
                         ids=["tiny", "small", "small-ckpt-8bit"])
def test_prediction_matches_measured_peak(config):
    predicted = estimate_memory(config).predicted_peak
    measured = measure_cpu(config, steps=3)
    ratio = measured / predicted
    assert abs(ratio - 1) <= 0.20, f"measured {measured / 1e6:.1f} MB, predicted {predicted / 1e6:.1f} MB"


# measured in make test-all: the training peak's own prediction (above, tiny) runs by default
@pytest.mark.slow
@pytest.mark.parametrize("config", [SMALL, replace(SMALL, draft_vocab=1024)], ids=["full-vocab", "draft-vocab"])
def test_heldout_evaluation_stays_inside_the_training_peak(config):
    config = replace(config, heldout_cache="synthetic")
    train, heldout = measure_cpu_heldout(config)
    predicted = estimate_memory(config).phases
    assert heldout < train, f"held-out {heldout / 1e6:.1f} MB, training {train / 1e6:.1f} MB"
    assert predicted["held-out proxy"] < max(predicted["loss chunks"], predicted["backbone backward"])
    assert abs(heldout / predicted["held-out proxy"] - 1) <= 0.20, (
        f"measured {heldout / 1e6:.1f} MB, predicted {predicted['held-out proxy'] / 1e6:.1f} MB")


@pytest.mark.slow  # builds and measures a scaled VL checkpoint; the host-RAM budget (below) runs by default
def test_host_ram_of_a_scaled_vl_checkpoint_is_its_frozen_tensors_and_the_drafter(tmp_path):
    from tests.helpers import build_scaled_vl

    target = build_scaled_vl(tmp_path / "target")
    # rtx3050's drafter at the scaled width: bf16 compute, tied embedding, built on the CPU before it moves
    config = replace(load_recipe("rtx3050"), hidden_size=256, vocab_size=18_944, num_heads=4, num_kv_heads=2,
                     head_dim=64, intermediate_size=688, markov_rank=64, feature_layers=[1, 9, 17, 25, 33],
                     compile=False, optimizer="adamw")
    measured = measure_cpu_host(config, target)
    breakdown = estimate_memory(replace(config, device="cuda"))
    predicted = breakdown.host["target tensors"] + breakdown.host["drafter build"]
    checkpoint = sum(f.stat().st_size for f in target.glob("*.safetensors"))
    assert abs(measured / predicted - 1) <= 0.25, f"measured {measured / 1e6:.1f} MB, predicted {predicted / 1e6:.1f} MB"
    assert measured < checkpoint / 2  # the decoder layers and the vision tower are never read


def test_rtx3050_host_ram_fits_in_4_gb():
    breakdown = estimate_memory(replace(load_recipe("rtx3050"), heldout_cache="held"))
    assert breakdown.host_peak <= 4e9
    assert set(breakdown.host) == {"target tensors", "drafter build", "data", "held-out slice", "libraries"}
    assert breakdown.phases["held-out proxy"] <= breakdown.predicted_peak <= 5.5e9
    assert "host RAM" in breakdown.describe()


def test_parameter_counts_match_a_real_model():
    draft = draft_config(SMALL, recipe_dims(SMALL), mask_token_id=0)
    g = torch.Generator().manual_seed(0)
    embed = torch.randn(draft.vocab_size, draft.hidden_size, generator=g)
    model = build_model(draft, embed, embed.clone(), SMALL)
    breakdown = estimate_memory(SMALL)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert breakdown.trainable_params == trainable
    assert breakdown.frozen_params == 2 * draft.vocab_size * draft.hidden_size
    assert estimate_memory(replace(SMALL, tie_embeddings=True)).frozen_params == draft.vocab_size * draft.hidden_size


def test_rtx3050_fits_in_5_5_gb():
    breakdown = estimate_memory(load_recipe("rtx3050"))
    report = breakdown.to_json()
    assert report["predicted_peak_gb"] <= 5.5
    assert set(report["components_gb"]) == {"trainable_weights", "frozen_weights", "gradients", "optimizer",
                                             "activations", "logits_chunk", "cache_batch"}
    assert (breakdown.device, breakdown.dtype, breakdown.optimizer_name) == ("cuda", "bf16", "adamw8bit")
    text = breakdown.describe()
    assert "predicted peak" in text and "logits chunk" in text


def test_knobs_move_their_components():
    base = estimate_memory(SMALL)
    assert estimate_memory(replace(SMALL, chunk_anchors=1)).logits_chunk < base.logits_chunk
    assert estimate_memory(replace(SMALL, grad_checkpointing=True)).activations < base.activations
    assert estimate_memory(replace(SMALL, optimizer="adamw8bit")).optimizer < base.optimizer / 3
    bf16 = estimate_memory(replace(SMALL, dtype="bf16"))
    assert bf16.frozen_weights == base.frozen_weights // 2 and bf16.trainable_weights == base.trainable_weights
    bigger = estimate_memory(replace(SMALL, batch_anchors=64))
    assert bigger.activations > base.activations and bigger.cache_batch > base.cache_batch


def test_batch_shape_from_config():
    shape = BatchShape.from_config(replace(SMALL, batch_anchors=64, anchors_per_sample=32, window=128,
                                           max_new_tokens=512))
    assert shape == BatchShape(rows=3, context=640, anchors=32)  # 2 full samples + one straddled
    assert BatchShape.from_config(replace(SMALL, batch_anchors=1)) == BatchShape(1, 32, 1)
    unlimited = BatchShape.from_config(replace(SMALL, window=0, max_prompt_tokens=100))
    assert unlimited.context == 100 + SMALL.max_new_tokens
