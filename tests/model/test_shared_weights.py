"""The drafter holds no second copy of the target's frozen embedding and lm_head: a served drafter's
parameters are the target's tensors (same storage), a tied target stays tied, a draft vocabulary copies
only its N lm_head rows, and another compute dtype converts once.

    .venv/bin/python -m pytest -q tests/model/test_shared_weights.py
"""

from __future__ import annotations

from dataclasses import replace

import torch

from minispark.model.draft_config import DraftConfig
from minispark.model.draft_model import DraftModel
from minispark.serving.generate import make_drafter
from minispark.target.loading import load_target

V, D = 96, 32


def config(**overrides) -> DraftConfig:
    base = DraftConfig(target="tiny-test-target@0", hidden_size=D, num_heads=4, num_kv_heads=2, head_dim=8,
                       intermediate_size=64, vocab_size=V, feature_layers=(0, 1), mask_token_id=V - 1, block_size=4,
                       head="vanilla", markov_rank=8, confidence_head=True, dtype="float32")
    return replace(base, **overrides)


def storages(model: torch.nn.Module) -> set[int]:
    return {p.untyped_storage().data_ptr() for p in model.parameters()}


def test_served_drafter_shares_the_targets_tensors(tiny_trained_drafter):
    target_dir, drafter_dir = tiny_trained_drafter
    target = load_target(str(target_dir))
    embed, head = target.model.get_input_embeddings().weight, target.lm_head.weight
    model = make_drafter(str(drafter_dir), target, "float").model
    assert model.config.torch_dtype == target.dtype  # the case sharing applies to
    assert model.embed_tokens.weight.untyped_storage().data_ptr() == embed.untyped_storage().data_ptr()
    assert model.lm_head.weight.untyped_storage().data_ptr() == head.untyped_storage().data_ptr()
    assert not model.embed_tokens.weight.requires_grad and not model.lm_head.weight.requires_grad
    assert embed.requires_grad == target.model.get_input_embeddings().weight.requires_grad  # target untouched
    # Every other parameter is the drafter's own, and small: nothing of V×d besides the shared pair.
    own = [p for p in model.parameters() if p.untyped_storage().data_ptr() not in
           {embed.untyped_storage().data_ptr(), head.untyped_storage().data_ptr()}]
    assert sum(p.numel() for p in own) < sum(p.numel() for p in model.parameters()) - embed.numel()


def test_tied_target_stays_tied_and_converts_once():
    tied = torch.randn(V, D)
    same = DraftModel.from_target(config(), tied, tied)
    assert same.embed_tokens.weight.data_ptr() == same.lm_head.weight.data_ptr() == tied.data_ptr()
    bf16 = DraftModel.from_target(config(dtype="bfloat16"), tied, tied)
    assert bf16.embed_tokens.weight.dtype == torch.bfloat16
    assert bf16.embed_tokens.weight.data_ptr() == bf16.lm_head.weight.data_ptr() != tied.data_ptr()
    assert torch.equal(bf16.embed_tokens.weight, tied.to(torch.bfloat16))


def test_draft_vocabulary_shares_the_embedding_and_copies_its_rows_only():
    embed, head = torch.randn(V, D), torch.randn(V, D)
    ids = torch.arange(V - 1, -1, -3)[:16].flip(0)
    model = DraftModel.from_target(config(draft_vocab=16), embed, head, ids)
    assert model.embed_tokens.weight.data_ptr() == embed.data_ptr()
    assert model.lm_head.weight.shape == (16, D)
    assert torch.equal(model.lm_head.weight, head[ids])
    assert torch.equal(model.target_ids(torch.arange(16)), ids)


def test_shared_drafter_drafts_like_a_copying_one():
    """Sharing changes where the tensors live, never the logits."""
    embed, head = torch.randn(V, D), torch.randn(V, D)
    torch.manual_seed(0)
    shared = DraftModel.from_target(config(), embed, head)
    copied = DraftModel.from_target(config(), embed.clone(), head.clone())
    copied.load_state_dict(shared.state_dict())
    hidden, prev = torch.randn(4, D), torch.randint(0, V, (4,))
    assert torch.equal(shared.head_logits(hidden, prev), copied.head_logits(hidden, prev))
    assert storages(shared) & storages(copied) == set()


def test_stored_weights_arrive_in_the_compute_dtype(tmp_path):
    from minispark.model.checkpoint import load_draft_model, read_weights, save_drafter

    embed, head = torch.randn(V, D), torch.randn(V, D)
    ids = torch.arange(16)
    model = DraftModel.from_target(config(draft_vocab=16), embed, head, ids)
    save_drafter(model, tmp_path / "d", config(draft_vocab=16, dtype="bfloat16"))
    weights = read_weights(tmp_path / "d", "cpu", torch.bfloat16)
    assert {v.dtype for k, v in weights.items() if k != "vocab_ids"} == {torch.bfloat16}
    assert weights["vocab_ids"].dtype == torch.long and torch.equal(weights["vocab_ids"], ids)
    loaded = load_draft_model(tmp_path / "d", embed.to(torch.bfloat16), head.to(torch.bfloat16), "cpu")
    assert loaded.fc.weight.dtype == torch.bfloat16
    assert torch.equal(loaded.fc.weight, model.fc.weight.to(torch.bfloat16))
