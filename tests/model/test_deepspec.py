"""DeepSpec-layout drafters (``Qwen3DSparkModel``) in minispark's loop, and export/import.

The synthetic checkpoints are written here by hand in DeepSpec's layout (key names and shapes
spelled out below, not taken from minispark's mapping), so the loader is checked against the
documented format. ``reference_block`` recomputes DeepSpec's draft forward from its written
semantics (context ``hidden_norm(fc(features))`` through each layer's k/v projections with k_norm
and RoPE, no input norm on the context, bidirectional block, full context) and must match
minispark's; a variant that norms the context is the negative control.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from minispark.model.checkpoint import save_drafter
from minispark.cli import app
from minispark.model.deepspec import check_against_target
from minispark.model.deepspec_convert import export_deepspec, import_deepspec
from minispark.serving.draft_block import DraftBlock, Proposal
from minispark.model.draft_context import DraftContext
from minispark.model.draft_model import DraftConfig, DraftModel
from minispark.serving.drafters.base import Drafter
from minispark.serving.drafters.dspark import DSparkDrafter
from minispark.serving.engine import speculative_generate
from minispark.core.errors import MinisparkError
from minispark.serving.generate import generate, make_drafter
from minispark.core.identity import target_id
from minispark.target.sampling import SamplingConfig, make_generator
from minispark.serving.schedule import FixedLength, ThresholdLength, make_length_policy
from minispark.serving.sps import SPSTable
from minispark.target.loading import Target, load_target
from tests.helpers import assert_parity, hf_greedy

PROMPTS = ["Tell me a story.", "List three fruits and a vegetable."]
LAYERS = [1, 2]  # of the tiny target's 4 decoder layers (never the last)
RANK = 8


@pytest.fixture(scope="module")
def target(tiny_dir) -> Target:
    return load_target(str(tiny_dir("qwen3")))


@pytest.fixture(scope="module")
def greedy(target) -> dict[str, list[int]]:
    """Target-only greedy continuations (HF generate, 24 tokens) of PROMPTS."""
    return {p: hf_greedy(target, target.encode(prompt=p), 24) for p in PROMPTS}


def deepspec_shapes(target: Target, *, num_layers: int, head: str, rank: int, confidence: bool,
                    with_markov: bool, layer_ids: list[int]) -> dict[str, list[int]]:
    """Every weight of a DeepSpec Qwen3DSparkModel and its shape, as DeepSpec names them."""
    tc = target.text_config
    d, v, hd = target.hidden_size, target.vocab_size, tc.head_dim
    h, kv, inter = tc.num_attention_heads, tc.num_key_value_heads, tc.intermediate_size
    shapes = {"embed_tokens.weight": [v, d], "lm_head.weight": [v, d], "norm.weight": [d],
              "fc.weight": [d, len(layer_ids) * d], "hidden_norm.weight": [d]}
    for i in range(num_layers):
        p = f"layers.{i}."
        shapes |= {p + "self_attn.q_proj.weight": [h * hd, d], p + "self_attn.k_proj.weight": [kv * hd, d],
                   p + "self_attn.v_proj.weight": [kv * hd, d], p + "self_attn.o_proj.weight": [d, h * hd],
                   p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd],
                   p + "mlp.gate_proj.weight": [inter, d], p + "mlp.up_proj.weight": [inter, d],
                   p + "mlp.down_proj.weight": [d, inter],
                   p + "input_layernorm.weight": [d], p + "post_attention_layernorm.weight": [d]}
    if head != "none":
        shapes |= {"markov_head.markov_w1.weight": [v, rank], "markov_head.markov_w2.weight": [v, rank]}
    if head == "gated":
        shapes |= {"markov_head.gate_proj.weight": [rank, d + rank], "markov_head.gate_proj.bias": [rank]}
    if head == "rnn":
        shapes |= {"markov_head.joint_proj.weight": [3 * rank, 2 * rank + d], "markov_head.joint_proj.bias": [3 * rank]}
    if confidence:
        width = d + (rank if with_markov else 0)
        shapes |= {"confidence_head.proj.weight": [1, width], "confidence_head.proj.bias": [1]}
    return shapes


def write_deepspec(out: Path, target: Target, *, head: str = "vanilla", confidence: bool = True, num_layers: int = 2,
                   layer_ids: list[int] = LAYERS, dtype: torch.dtype = torch.bfloat16, seed: int = 0,
                   drop: tuple[str, ...] = (), config_overrides: dict | None = None,
                   delete_fields: tuple[str, ...] = ()) -> Path:
    """A synthetic checkpoint in DeepSpec's save_pretrained layout: target config + draft fields."""
    rank = RANK if head != "none" else 0
    shapes = deepspec_shapes(target, num_layers=num_layers, head=head, rank=rank, confidence=confidence,
                             with_markov=head != "none", layer_ids=layer_ids)
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for key, shape in shapes.items():
        if key in ("embed_tokens.weight", "lm_head.weight"):  # DeepSpec copies the target's, frozen
            module = target.model.get_input_embeddings() if key.startswith("embed") else target.lm_head
            weights[key] = module.weight.detach().clone()
        elif key.endswith("norm.weight") or key.endswith("layernorm.weight"):
            weights[key] = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        else:
            weights[key] = 0.2 * torch.randn(shape, generator=gen)
    weights = {k: w.to(dtype).contiguous() for k, w in weights.items() if k not in drop}
    config = target.text_config.to_dict() | {
        "architectures": ["Qwen3DSparkModel"], "num_hidden_layers": num_layers,
        "num_target_layers": target.num_layers, "block_size": 4, "mask_token_id": target.vocab_size - 1,
        "target_layer_ids": layer_ids, "num_anchors": 512, "tie_word_embeddings": False,
        "layer_types": ["full_attention"] * num_layers, "enable_confidence_head": confidence,
        "markov_rank": rank, "dtype": str(dtype).removeprefix("torch.")}
    if confidence:
        config["confidence_head_with_markov"] = head != "none"
    if head != "none":
        config["markov_head_type"] = head
    config |= config_overrides or {}
    config = {k: v for k, v in config.items() if k not in delete_fields}
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config))
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


# --------------------------------------------------------------------------------------------
# An independent reference of DeepSpec's draft forward
# --------------------------------------------------------------------------------------------


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """x (H, S, D) rotated by positions (S,)."""
    dim = x.shape[-1]
    freqs = positions.float()[:, None] / theta ** (torch.arange(0, dim, 2).float() / dim)  # (S, D/2)
    cos, sin = torch.cat([freqs, freqs], -1).cos(), torch.cat([freqs, freqs], -1).sin()
    return x * cos + torch.cat([-x[..., dim // 2:], x[..., :dim // 2]], -1) * sin


def reference_block(
    w: dict, raw: dict, features: torch.Tensor, anchor: int, norm_context: bool = False
) -> torch.Tensor:
    """Hidden (γ, d) of DeepSpec's block after ``anchor`` at position N = len(features)."""
    eps, theta, gamma = raw["rms_norm_eps"], raw["rope_parameters"]["rope_theta"], raw["block_size"]
    heads, kv_heads, hd = raw["num_attention_heads"], raw["num_key_value_heads"], raw["head_dim"]
    n = features.shape[0]
    ctx = rms(features @ w["fc.weight"].T, w["hidden_norm.weight"], eps)  # (N, d)
    x = w["embed_tokens.weight"][[anchor] + [raw["mask_token_id"]] * (gamma - 1)]  # (γ, d)
    positions = torch.arange(n + gamma)
    for i in range(raw["num_hidden_layers"]):
        p = f"layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        c = rms(ctx, w[p + "input_layernorm.weight"], eps) if norm_context else ctx
        q = rms((h @ w[p + "self_attn.q_proj.weight"].T).view(gamma, heads, hd), w[p + "self_attn.q_norm.weight"], eps)
        both = torch.cat([c, h])  # (N+γ, d): context first, then the block
        k = (both @ w[p + "self_attn.k_proj.weight"].T).view(n + gamma, kv_heads, hd)
        k = rms(k, w[p + "self_attn.k_norm.weight"], eps)  # k_norm on context and block K alike
        v = (both @ w[p + "self_attn.v_proj.weight"].T).view(n + gamma, kv_heads, hd)
        q = rope(q.transpose(0, 1), positions[n:], theta)  # (H, γ, D)
        k = rope(k.transpose(0, 1), positions, theta).repeat_interleave(heads // kv_heads, 0)
        v = v.transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        attn = torch.softmax(q @ k.transpose(1, 2) / hd ** 0.5, -1) @ v  # no mask: whole context, whole block
        x = x + attn.transpose(0, 1).reshape(gamma, heads * hd) @ w[p + "self_attn.o_proj.weight"].T
        m = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        gated = F.silu(m @ w[p + "mlp.gate_proj.weight"].T) * (m @ w[p + "mlp.up_proj.weight"].T)
        x = x + gated @ w[p + "mlp.down_proj.weight"].T
    return rms(x, w["norm.weight"], eps)


def reference_heads(w: dict, head: str, hidden: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced logits (γ, V) and confidence logits (γ,) of DeepSpec's heads."""
    logits = hidden @ w["lm_head.weight"].T
    emb = w["markov_head.markov_w1.weight"][prev]  # (γ, r)
    w2 = w["markov_head.markov_w2.weight"]
    if head == "vanilla":
        logits = logits + emb @ w2.T
    elif head == "gated":
        gate_in = torch.cat([hidden, emb], -1)  # [h_k ; W1[x_{k−1}]]
        gate = torch.sigmoid(gate_in @ w["markov_head.gate_proj.weight"].T + w["markov_head.gate_proj.bias"])
        logits = logits + (gate * emb) @ w2.T
    else:
        state, biases = torch.zeros(emb.shape[-1]), []
        for k in range(hidden.shape[0]):
            z = torch.cat([state, emb[k], hidden[k]])  # [s_{k−1} ; W1[x_{k−1}] ; h_k]
            z = z @ w["markov_head.joint_proj.weight"].T + w["markov_head.joint_proj.bias"]
            g, c, o = z.chunk(3)
            state = torch.sigmoid(g) * state + (1 - torch.sigmoid(g)) * torch.tanh(c)
            biases.append(torch.tanh(o) @ w2.T)
        logits = logits + torch.stack(biases)
    conf = torch.cat([hidden, emb], -1) @ w["confidence_head.proj.weight"].T + w["confidence_head.proj.bias"]
    return logits, conf[:, 0]


@pytest.mark.parametrize("head", ["vanilla", "gated", "rnn"])
def test_loaded_model_matches_deepspec_reference(target, tmp_path, head: str) -> None:
    from safetensors.torch import load_file

    ckpt = write_deepspec(tmp_path / head, target, head=head, dtype=torch.float32)
    raw, w = json.loads((ckpt / "config.json").read_text()), load_file(str(ckpt / "model.safetensors"))
    drafter = make_drafter(str(ckpt), target, "float")  # compared with a float reference below
    model = drafter.model
    assert model.config.window == 0 and model.config.feature_layers == tuple(LAYERS)
    gen = torch.Generator().manual_seed(1)
    n = 9
    features = torch.randn(n, len(LAYERS) * target.hidden_size, generator=gen)
    anchor, prev = 5, torch.tensor([5, 11, 12, 13])
    context = DraftContext(model.config, "cpu", torch.float32)
    context.append(model.context_kv(features[None], torch.arange(n)[None]), torch.arange(n))
    with torch.no_grad():
        hidden = model.forward_block(context, torch.tensor(anchor), n)
        logits, conf = model.head_logits(hidden, prev), model.confidence_logits(hidden, prev)
    want = reference_block(w, raw, features, anchor)
    torch.testing.assert_close(hidden, want, atol=1e-4, rtol=1e-4)
    want_logits, want_conf = reference_heads(w, head, want, prev)
    torch.testing.assert_close(logits, want_logits, atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(conf, want_conf, atol=1e-4, rtol=1e-4)
    # Negative control: norming the context with each layer's input norm (which DeepSpec does not) is caught.
    wrong = reference_block(w, raw, features, anchor, norm_context=True)
    assert (wrong - hidden).abs().max() > 1e-2


# --------------------------------------------------------------------------------------------
# Official layouts in the loop
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("head", ["vanilla", "gated", "rnn"])
def test_synthetic_dspark_checkpoint_keeps_greedy_parity(target, greedy, tmp_path, head: str) -> None:
    ckpt = write_deepspec(tmp_path / head, target, head=head)
    drafter = make_drafter(str(ckpt), target)
    assert isinstance(drafter, DSparkDrafter) and drafter.has_confidence and drafter.config.head == head
    for policy in (FixedLength(4), ThresholdLength(0.3, 4)):
        for prompt in PROMPTS:
            inputs = target.encode(prompt=prompt)
            out = generate(target, prompt, drafter=drafter, policy=policy, max_new_tokens=24)
            assert_parity(target, inputs, out.result.token_ids, greedy[prompt])


def test_dflash_layout_runs_fixed_and_refuses_confidence_modes(target, greedy, tmp_path) -> None:
    ckpt = write_deepspec(tmp_path / "dflash", target, head="none", confidence=False)
    raw = json.loads((ckpt / "config.json").read_text())
    assert raw["markov_rank"] == 0 and "markov_head_type" not in raw and "confidence_head_with_markov" not in raw
    drafter = make_drafter(str(ckpt), target, "float")  # import equivalence is a float-weights claim
    assert drafter.config.head == "none" and not drafter.has_confidence
    inputs = target.encode(prompt=PROMPTS[0])
    out = generate(target, PROMPTS[0], drafter=drafter, policy=FixedLength(4), max_new_tokens=24)
    assert_parity(target, inputs, out.result.token_ids, greedy[PROMPTS[0]])
    flat = SPSTable.from_inline([1.0] * 5)
    for mode, extra in (("threshold", {"threshold": 0.5}), ("schedule", {"sps_table": flat})):
        with pytest.raises(MinisparkError, match="no confidence head"):
            make_length_policy(mode, 4, has_confidence=drafter.has_confidence, **extra)
    result = CliRunner().invoke(app, ["generate", "--target", str(target.model_dir), "--drafter", str(ckpt),
                                      "--mode", "threshold", "--threshold", "0.5", "--max-new-tokens", "4"])
    assert result.exit_code == 2 and "no confidence head" in result.output
    result = CliRunner().invoke(app, ["generate", "--target", str(target.model_dir), "--drafter", str(ckpt),
                                      "--max-new-tokens", "6", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["drafter"] == "dspark"
    report = import_deepspec(ckpt, target, tmp_path / "imported")
    assert report.warnings == []  # the bf16 embedding/lm_head copies equal the target's in bf16
    imported = make_drafter(str(report.out), target, "float")
    assert imported.config.head == "none" and not imported.has_confidence
    ids_a, props_a = proposals(target, drafter, PROMPTS[0], 0.0, 16)
    ids_b, props_b = proposals(target, imported, PROMPTS[0], 0.0, 16)
    assert ids_a == ids_b and [p.tokens.tolist() for p in props_a] == [p.tokens.tolist() for p in props_b]


def test_sharded_checkpoint_loads_like_one_file(target, tmp_path) -> None:
    from safetensors.torch import load_file

    one = write_deepspec(tmp_path / "one", target)
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "config.json").write_text((one / "config.json").read_text())
    weights = load_file(str(one / "model.safetensors"))
    keys = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": keys[: len(keys) // 2],
              "model-00002-of-00002.safetensors": keys[len(keys) // 2:]}
    for name, names in shards.items():
        save_file({k: weights[k] for k in names}, str(sharded / name), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: name for name, names in shards.items() for k in names}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    a, b = make_drafter(str(one), target).model.state_dict(), make_drafter(str(sharded), target).model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


MISMATCHES = {
    "hidden size": ({"config_overrides": {"hidden_size": 32}}, "hidden_size"),
    "vocab": ({"config_overrides": {"vocab_size": 99999}}, "vocab_size"),
    "layer id beyond the target": ({"layer_ids": [1, 7]}, "target_layer_ids"),
    "final layer": ({"layer_ids": [1, 3]}, "target_layer_ids"),
    "embedding output": ({"layer_ids": [-1, 1]}, "target_layer_ids"),
    "target depth": ({"config_overrides": {"num_target_layers": 36}}, "num_target_layers"),
    "missing key": ({"drop": ("layers.1.self_attn.k_norm.weight",)}, "'layers.1.self_attn.k_norm.weight'"),
    "missing markov": ({"drop": ("markov_head.markov_w2.weight",)}, "'markov_head.markov_w2.weight'"),
    "unexpected key": ({"config_overrides": {"enable_confidence_head": False}}, "'confidence_head.proj."),
    "wrong rank": ({"config_overrides": {"markov_rank": 16}}, "'markov_head.markov_w1.weight'"),
    "missing field": ({"delete_fields": ("markov_head_type",)}, "markov_head_type"),
}


@pytest.mark.parametrize("case", sorted(MISMATCHES))
def test_every_mismatch_is_a_one_line_error_naming_the_key(target, tmp_path, case: str) -> None:
    kwargs, key = MISMATCHES[case]
    ckpt = write_deepspec(tmp_path / "bad", target, **kwargs)
    with pytest.raises(MinisparkError) as info:
        check_against_target(ckpt, target)
    message = str(info.value)
    assert key in message and "\n" not in message, message
    result = CliRunner().invoke(app, ["generate", "--target", str(target.model_dir), "--drafter", str(ckpt),
                                      "--max-new-tokens", "2"])
    assert result.exit_code == 2 and key in result.output, result.output


# --------------------------------------------------------------------------------------------
# Export → import round trip
# --------------------------------------------------------------------------------------------


class Recorder(Drafter):
    """Delegates to ``inner`` and records every proposal."""

    def __init__(self, inner: Drafter) -> None:
        self.inner, self.name, self.feature_layers = inner, inner.name, inner.feature_layers
        self.has_confidence = inner.has_confidence
        self.blocks: list[DraftBlock] = []

    def reset(self, cached_ids, features, text_positions) -> None:
        self.inner.reset(cached_ids, features, text_positions)

    def propose(self, ids, anchor_position, sampling, generator) -> DraftBlock:
        block = self.inner.propose(ids, anchor_position, sampling, generator)
        self.blocks.append(block)
        return block

    @property
    def proposals(self) -> list[Proposal]:
        """What each round drew (every position, with FixedLength(γ))."""
        return [block.proposal(len(block.tokens)) for block in self.blocks]

    def commit(self, num_accepted, new_cached_ids, features, text_positions) -> None:
        self.inner.commit(num_accepted, new_cached_ids, features, text_positions)


def proposals(target: Target, drafter: Drafter, prompt: str, temperature: float, max_new_tokens: int = 32):
    recorder = Recorder(drafter)
    with target.session(drafter.feature_layers) as session:
        result = speculative_generate(session, target.encode(prompt=prompt), recorder, SamplingConfig(temperature),
                                      FixedLength(4), max_new_tokens=max_new_tokens, eos_ids=target.eos_token_ids,
                                      generator=make_generator(0))
    return result.token_ids, recorder.proposals


def minispark_drafter(target: Target, out: Path, window: int, head: str = "vanilla", draft_vocab: int = 0,
                      markov_w1: str = "table") -> Path:
    tc = target.text_config
    config = DraftConfig(target=target_id(target.identity()), hidden_size=target.hidden_size,
                         num_heads=tc.num_attention_heads, num_kv_heads=tc.num_key_value_heads, head_dim=tc.head_dim,
                         intermediate_size=tc.intermediate_size, vocab_size=target.vocab_size,
                         feature_layers=tuple(LAYERS), mask_token_id=target.vocab_size - 1, block_size=4,
                         window=window, head=head, markov_rank=RANK, initializer_range=0.2, draft_vocab=draft_vocab,
                         markov_w1=markov_w1)
    torch.manual_seed(0)
    ids = torch.randperm(target.vocab_size)[:draft_vocab] if draft_vocab else None
    model = DraftModel.from_target(config, target.model.get_input_embeddings().weight.detach(),
                                   target.lm_head.weight.detach(), ids)
    save_drafter(model, out)
    return out


def assert_same_proposals(target: Target, a: Drafter, b: Drafter) -> None:
    for temperature in (0.0, 1.0):
        for prompt in PROMPTS:
            ids_a, props_a = proposals(target, a, prompt, temperature)
            ids_b, props_b = proposals(target, b, prompt, temperature)
            assert ids_a == ids_b and len(props_a) == len(props_b)
            for pa, pb in zip(props_a, props_b):
                assert pa.tokens.tolist() == pb.tokens.tolist()
                if temperature > 0:
                    torch.testing.assert_close(pa.probs, pb.probs)
                assert (pa.confidences is None) == (pb.confidences is None)
                if pa.confidences is not None:
                    torch.testing.assert_close(pa.confidences, pb.confidences)


def test_export_import_round_trip_on_tiny_target(target, tmp_path) -> None:
    original = minispark_drafter(target, tmp_path / "drafter", window=6)
    report = export_deepspec(original, target, tmp_path / "deepspec")
    assert any("W=6" in w and "sliding window per query" in w for w in report.warnings)
    out = tmp_path / "deepspec"
    raw = json.loads((out / "config.json").read_text())
    assert raw["architectures"] == ["Qwen3DSparkModel"] and raw["minispark_window"] == 6
    gamma = raw["block_size"]  # the engines' per-query window: the block's last slot sees the same 6 tokens
    assert raw["sample_from_anchor"] is True and raw["layer_types"] == ["sliding_attention"] * 2
    assert raw["sliding_window"] == 6 + gamma and raw["use_sliding_window"] is True
    assert raw["dflash_config"] == {"use_swa": True, "swa_window_size": 6 + gamma, "mask_token_id": raw["mask_token_id"],
                                    "target_layer_ids": LAYERS}
    assert raw["target_layer_ids"] == LAYERS and raw["num_target_layers"] == target.num_layers
    assert "vllm serve" in (out / "README.md").read_text()
    from transformers import AutoConfig

    hf = AutoConfig.from_pretrained(out)  # what save_pretrained / the engines parse
    assert hf.architectures == ["Qwen3DSparkModel"] and hf.num_hidden_layers == 2 and hf.markov_rank == RANK
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        stored = {k: list(handle.get_slice(k).get_shape()) for k in handle.keys()}
        assert {str(handle.get_slice(k).get_dtype()) for k in handle.keys()} == {"BF16"}
    assert stored == deepspec_shapes(target, num_layers=2, head="vanilla", rank=RANK, confidence=True,
                                     with_markov=True, layer_ids=LAYERS)
    imported = import_deepspec(out, target, tmp_path / "imported").out
    base = make_drafter(str(original), target)
    assert make_drafter(str(imported), target).config == base.config
    assert_same_proposals(target, base, make_drafter(str(imported), target))
    assert_same_proposals(target, base, make_drafter(str(out), target))  # the exported dir, run directly


def test_an_engine_window_without_minispark_window_is_read_back(target, tmp_path) -> None:
    """A checkpoint with only the engines' window fields (as DeepSpec writes one) imports with W = S − γ; a
    window the block does not fit in, mixed layer types and DFlash's slot layout are refused by name."""
    original = minispark_drafter(target, tmp_path / "drafter", window=6)
    out = tmp_path / "deepspec"
    export_deepspec(original, target, out)
    raw = json.loads((out / "config.json").read_text())
    del raw["minispark_window"]
    (out / "config.json").write_text(json.dumps(raw))
    imported = import_deepspec(out, target, tmp_path / "imported").out
    assert DraftConfig.load(imported / "config.json").window == 6
    assert_same_proposals(target, make_drafter(str(original), target), make_drafter(str(imported), target))
    gamma = raw["block_size"]
    for change, says in (({"dflash_config": {"use_swa": True, "swa_window_size": gamma}}, "must be a whole number above"),
                         ({"layer_types": ["sliding_attention", "full_attention"]}, "layer_types"),
                         ({"sample_from_anchor": False}, "sample_from_anchor False is not supported")):
        (out / "config.json").write_text(json.dumps(raw | change))
        with pytest.raises(MinisparkError, match=says):
            import_deepspec(out, target, tmp_path / "refused")


def test_markov_w1_tied_to_the_embedding_exports_as_a_table(target, tmp_path) -> None:
    original = minispark_drafter(target, tmp_path / "drafter", window=0, markov_w1="embedding")
    report = export_deepspec(original, target, tmp_path / "deepspec")
    assert report.config.markov_w1 == "table"
    assert_same_proposals(target, make_drafter(str(original), target), make_drafter(str(tmp_path / "deepspec"), target))


@pytest.mark.parametrize(("head", "markov_w1"), [("vanilla", "table"), ("gated", "table"), ("vanilla", "embedding")])
def test_draft_vocabulary_expands_exactly_to_the_full_vocabulary(target, tmp_path, head: str, markov_w1: str) -> None:
    """The full-vocabulary drafter DeepSpec's layout needs gives the original p_d (zero outside the
    draft vocabulary) and confidences, in float32 before the bf16 rounding of the export."""
    from minispark.model.deepspec_convert import expand_draft_vocab

    n = target.vocab_size // 3
    path = minispark_drafter(target, tmp_path / "drafter", window=0, head=head, draft_vocab=n, markov_w1=markov_w1)
    embed, lm_head = target.model.get_input_embeddings().weight.detach(), target.lm_head.weight.detach()
    weights = load_file(str(path / "model.safetensors"))
    config = replace(DraftConfig.load(path / "config.json"), dtype="float32")
    small = DraftModel.from_target(config, embed, lm_head, weights["vocab_ids"])
    small.load_state_dict(weights, strict=False)
    full_config, state = expand_draft_vocab(small, lm_head)
    full = DraftModel.from_target(full_config, embed, lm_head)
    full.load_state_dict(state)
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(5, 4, target.hidden_size, generator=g)  # (B, γ, d)
    prev = torch.randint(0, target.vocab_size, (5, 4), generator=g)
    with torch.no_grad():
        p_small = small.head_logits(hidden, prev).softmax(-1)  # (B, γ, N)
        p_full = full.head_logits(hidden, prev).softmax(-1)  # (B, γ, V)
        torch.testing.assert_close(p_full[..., small.vocab_ids], p_small, rtol=1e-4, atol=1e-6)
        assert float(p_full.sum(-1).sub(p_full[..., small.vocab_ids].sum(-1)).abs().max()) < 1e-6
        torch.testing.assert_close(full.confidence(hidden, prev), small.confidence(hidden, prev))
    report = export_deepspec(path, target, tmp_path / "deepspec")
    assert any("draft vocabulary is expanded" in w for w in report.warnings)
    raw = json.loads((tmp_path / "deepspec" / "config.json").read_text())
    assert raw["markov_rank"] == RANK + 1 and raw["vocab_size"] == target.vocab_size
    make_drafter(str(tmp_path / "deepspec"), target)  # the exported directory loads as a drafter


def test_draft_vocabulary_rnn_head_is_refused_on_export(target, tmp_path) -> None:
    original = minispark_drafter(target, tmp_path / "drafter", window=0, head="rnn", draft_vocab=target.vocab_size // 3)
    with pytest.raises(MinisparkError, match="cannot be exported to DeepSpec's full-vocabulary layout exactly"):
        export_deepspec(original, target, tmp_path / "deepspec")


def test_cli_export_and_import(target, tmp_path) -> None:
    original = minispark_drafter(target, tmp_path / "drafter", window=0, head="gated")
    runner = CliRunner()
    result = runner.invoke(app, ["export", str(original), "--format", "deepspec", "--out", str(tmp_path / "ds"),
                                 "--target", str(target.model_dir)])
    assert result.exit_code == 0 and "vanilla low-rank Markov head" in result.output, result.output
    result = runner.invoke(app, ["import", str(tmp_path / "ds"), "--out", str(tmp_path / "back"),
                                 "--target", str(target.model_dir), "--window", "3"])
    assert result.exit_code == 0, result.output
    assert DraftConfig.load(tmp_path / "back" / "config.json").window == 3
    result = runner.invoke(app, ["export", str(original), "--format", "gguf", "--out", str(tmp_path / "x"),
                                 "--target", str(target.model_dir)])
    assert result.exit_code == 2 and "--format" in result.output


@pytest.mark.slow
def test_export_import_round_trip_on_embedded_target(embedded_target, tmp_path) -> None:
    original = minispark_drafter(embedded_target, tmp_path / "drafter", window=0)
    out = export_deepspec(original, embedded_target, tmp_path / "deepspec").out
    imported = import_deepspec(out, embedded_target, tmp_path / "imported").out
    assert_same_proposals(embedded_target, make_drafter(str(original), embedded_target),
                          make_drafter(str(imported), embedded_target))


def test_a_checkpoint_for_another_target_is_refused_unless_forced(target, tmp_path) -> None:
    """A DeepSpec checkpoint trained for another target of the same sizes imported with two warnings: its stored
    embed_tokens and lm_head (frozen copies of its own target's) are not this target's."""
    from minispark.model.deepspec_convert import OtherTargetCheckpoint

    ckpt = write_deepspec(tmp_path / "other", target)
    weights = load_file(str(ckpt / "model.safetensors"))
    gen = torch.Generator().manual_seed(1)
    for key in ("embed_tokens.weight", "lm_head.weight"):  # another target's: same shapes, other values
        weights[key] = torch.randn(weights[key].shape, generator=gen).to(weights[key].dtype)
    save_file(weights, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(OtherTargetCheckpoint, match=r"its embed_tokens.weight and lm_head.weight differ from target "
                                                    r".*add force to import it anyway"):
        import_deepspec(ckpt, target, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    result = CliRunner().invoke(app, ["import", str(ckpt), "--out", str(tmp_path / "cli"), "--target",
                                      str(target.model_dir)])
    assert result.exit_code == 2 and "add --force to import it anyway" in result.stderr, result.output
    assert not (tmp_path / "cli").exists()
    result = CliRunner().invoke(app, ["import", str(ckpt), "--out", str(tmp_path / "forced"), "--target",
                                      str(target.model_dir), "--force"])
    assert result.exit_code == 0, result.output
    assert result.stderr.count("imported with --force") == 2 and (tmp_path / "forced" / "config.json").exists()
