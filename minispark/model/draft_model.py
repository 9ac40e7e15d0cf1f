"""The DSpark draft model: a small parallel backbone fed with target features (KV injection), plus a
sequential head that re-weights each draft position given the token drawn before it.

Design notes §5–§7 and §10–§11 (logic follows DeepSpec's Qwen3 DSpark model):

* backbone: ``num_layers`` pre-norm decoder layers (RMSNorm, GQA attention with q/k RMSNorm and 1D
  rotary, SwiGLU) at the target's width. The context — target decoder-layer outputs of committed
  tokens — is projected once, ``H_ctx = RMSNorm(fc(concat(H[l1..lm])))``, and every layer attends
  over ``concat(K/V(H_ctx), K/V(block))``.
* anchor trick: γ inputs ``[anchor, MASK×(γ−1)]`` at positions ``anchor_pos + [0..γ−1]`` give γ
  draft positions. Block attention is bidirectional; a block sees context rows with
  ``anchor_pos − W ≤ pos < anchor_pos`` (no lower bound when ``W == 0``).
* sequential head (``none`` / ``vanilla`` / ``gated`` / ``rnn``) adds a bias ``B_k(x_{k−1}, …)``
  to the base logits ``U_k = lm_head(h_k)``; each ``p_k`` is an ordinary softmax, so the exact
  draft distribution is available for lossless rejection sampling.
* confidence head: ``c_k = σ(w·[h_k ; W1[x_{k−1}]])``, computed before ``x_k`` is drawn.
* draft vocabulary (``draft_vocab = N > 0``, as EAGLE-3's draft-to-target map / FR-Spec): the
  drafter scores only N frequent target tokens (``vocab_ids``, stored with the weights); its lm_head
  is those rows of the target's, the Markov tables live in that space (W1 has one extra row for
  "any other previous token"), and p_d is exactly zero elsewhere. Verification still uses the full
  target distribution, so losslessness is untouched; only the cost of a round drops (the lm_head and
  the V×r tables dominate the draft's FLOPs and memory traffic on a small target).

Training uses :meth:`DraftModel.forward_train` (anchor-packed rows, §10.2) followed by
:meth:`DraftModel.head_logits` / :meth:`DraftModel.confidence_logits` on chunks of anchors.
Inference uses the draft context (:class:`~minispark.model.draft_context.DraftContext`: per-layer context
K/V, §11.2), :meth:`DraftModel.forward_block` and the sequential head the DSpark drafter runs over its output
(:class:`~minispark.serving.drafters.dspark.SequentialBlock`: decoding lives in serving, not here).
Both paths share the same mask and layer code.

    .venv/bin/python -m pytest -q tests/model/test_draft_model.py
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from minispark.model.draft_config import DraftConfig
from minispark.model.draft_heads import HEADS

if TYPE_CHECKING:
    from minispark.model.draft_context import DraftContext

# --------------------------------------------------------------------------------------------
# Backbone
# --------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 (as the Qwen family does) so bf16 runs match fp32 closely.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate ``x`` (B, H, S, D) by 1D positions (B, S) (rotate-half convention)."""
    dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim)
    freqs = positions.float()[..., None] * inv_freq  # (B, S, D/2)
    emb = torch.cat([freqs, freqs], dim=-1)[:, None]  # (B, 1, S, D)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    half = dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """GQA attention over ``concat(context K/V, block K/V)``; the context K/V come precomputed."""

    def __init__(self, config: DraftConfig) -> None:
        super().__init__()
        d, h, hkv, hd = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = h, hkv, hd
        self.theta = config.rope_theta
        self.q_proj = nn.Linear(d, h * hd, bias=False)
        self.k_proj = nn.Linear(d, hkv * hd, bias=False)
        self.v_proj = nn.Linear(d, hkv * hd, bias=False)
        self.o_proj = nn.Linear(h * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, config.rms_eps) if config.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(hd, config.rms_eps) if config.qk_norm else nn.Identity()

    def key_value(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V (B, Hkv, S, D) of ``x`` (B, S, d) at ``positions`` (B, S), rotary applied to K."""
        b, s, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, s, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return rotary(k, positions, self.theta), v

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        context_kv: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """``x`` (B, Q, d) block inputs, ``context_kv`` (B, Hkv, N, D) each, ``mask`` (B, 1, Q, N+Q)."""
        b, q_len, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, q_len, self.num_heads, self.head_dim)).transpose(1, 2)
        q = rotary(q, positions, self.theta)
        k_block, v_block = self.key_value(x, positions)
        k = torch.cat([context_kv[0], k_block], dim=2)  # (B, Hkv, N+Q, D)
        v = torch.cat([context_kv[1], v_block], dim=2)  # (B, Hkv, N+Q, D)
        # Grouped heads read their K/V as they are (no repeat: a copy of the whole context per layer).
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                             enable_gqa=self.num_heads != self.num_kv_heads)  # (B, H, Q, D)
        return self.o_proj(out.transpose(1, 2).reshape(b, q_len, self.num_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, config: DraftConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: DraftConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_eps)
        self.mlp = MLP(config)

    def forward(self, x, positions, context_kv, mask) -> torch.Tensor:
        # The projected context enters only through context_kv: it is not normed per layer.
        x = x + self.self_attn(self.input_layernorm(x), positions, context_kv, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


def block_attention_mask(
    context_positions: torch.Tensor,
    anchor_positions: torch.Tensor,
    block_size: int,
    window: int,
    context_valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Boolean mask (B, 1, A·γ, N + A·γ), True = may attend (DeepSpec's ``dspark_mask_mod``).

    A draft query in block b sees context rows with ``pos < anchor_pos[b]`` (and
    ``pos >= anchor_pos[b] − W`` when ``W > 0``; only rows where ``context_valid``) and every
    token of its own block (bidirectional); blocks are isolated from each other.
    ``context_positions`` (B, N), ``anchor_positions`` (B, A), ``context_valid`` (B, N).
    """
    batch, num_blocks = anchor_positions.shape
    q_len = num_blocks * block_size
    anchor = anchor_positions.repeat_interleave(block_size, dim=1)[:, :, None]  # (B, Aγ, 1)
    kv_pos = context_positions[:, None, :]  # (B, 1, N)
    sees_context = kv_pos < anchor  # (B, Aγ, N)
    if window > 0:
        sees_context = sees_context & (kv_pos >= anchor - window)
    if context_valid is not None:
        sees_context = sees_context & context_valid[:, None, :]
    block_id = torch.arange(q_len, device=anchor_positions.device) // block_size
    same_block = (block_id[:, None] == block_id[None, :]).expand(batch, q_len, q_len)  # (B, Aγ, Aγ)
    return torch.cat([sees_context, same_block], dim=-1)[:, None]  # (B, 1, Aγ, N+Aγ)


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


@dataclass
class TrainForward:
    """Output of :meth:`DraftModel.forward_train` for B rows × A anchors.

    hidden:      (B, A, γ, d) backbone output h_1..h_γ per anchor (after the final norm)
    prev_tokens: (B, A, γ) teacher-forced sequential-head inputs [anchor, x*_1..x*_{γ−1}]
    labels:      (B, A, γ) ground-truth draft targets x*_1..x*_γ
    """

    hidden: torch.Tensor
    prev_tokens: torch.Tensor
    labels: torch.Tensor


class DraftModel(nn.Module):
    def __init__(self, config: DraftConfig, frozen_device: torch.device | str | None = None) -> None:
        """``frozen_device="meta"``: the embedding and lm_head are placeholders, no memory (``from_target``
        puts the target's tensors in their place)."""
        super().__init__()
        self.config = config
        d = config.hidden_size
        self.embed_tokens = nn.Embedding(config.vocab_size, d, device=frozen_device)
        self.fc = nn.Linear(config.feature_size, d, bias=False)
        self.hidden_norm = RMSNorm(d, config.rms_eps)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(d, config.rms_eps)
        self.lm_head = nn.Linear(d, config.output_size, bias=False, device=frozen_device)
        if config.draft_vocab:
            # vocab_ids (N,) target id of each draft index, saved with the weights; vocab_index (V,)
            # the inverse map, N ("other") for tokens outside the draft vocabulary.
            n = config.draft_vocab
            self.register_buffer("vocab_ids", torch.arange(n))  # a placeholder until set_vocab
            index = torch.cat([torch.arange(n), torch.full((config.vocab_size - n,), n)])
            self.register_buffer("vocab_index", index, persistent=False)
        self.markov = HEADS[config.head](config) if config.head != "none" else None
        self.confidence_proj = None
        if config.confidence_head:
            width = d + (config.markov_rank if config.confidence_uses_markov else 0)
            self.confidence_proj = nn.Linear(width, 1)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    @torch.no_grad()
    def copy_layers(self, sources: list[nn.Module]) -> int:
        """Start draft layer i from target decoder layer ``sources[i]``: every weight both have under the
        same name (attention and MLP projections, layer norms; HF and this module share the Llama names)
        is copied. A tensor only one side has (a q/k/v bias, the q/k norms of a Llama target) keeps its
        own init. Returns the number of tensors copied; refuses quantized or differently shaped weights."""
        if len(sources) != len(self.layers):
            raise ValueError(f"need {len(self.layers)} source layers, got {len(sources)}")
        copied = 0
        for layer, source in zip(self.layers, sources):
            theirs = source.state_dict()
            for name, tensor in layer.state_dict().items():
                if name not in theirs:
                    continue
                other = theirs[name]
                if other.shape != tensor.shape or not other.is_floating_point():
                    raise ValueError(f"target layer weight {name} is {other.dtype} {tuple(other.shape)}, the draft "
                                     f"wants {tuple(tensor.shape)} floats (a quantized or differently sized target)")
                tensor.copy_(other)  # state_dict tensors share storage with the parameters
                copied += 1
        return copied

    @torch.no_grad()
    def set_vocab(self, vocab_ids: torch.Tensor) -> None:
        """Use the draft vocabulary ``vocab_ids`` (N,) (distinct target ids); lm_head rows follow in from_target."""
        ids = vocab_ids.to(self.vocab_index.device, torch.long)
        if ids.shape != (self.config.draft_vocab,) or ids.unique().numel() != ids.numel():
            raise ValueError(f"vocab_ids must be {self.config.draft_vocab} distinct token ids, got {tuple(ids.shape)}")
        self.vocab_ids.copy_(ids)
        self.vocab_index.fill_(self.config.draft_vocab)
        self.vocab_index[ids] = torch.arange(ids.numel(), device=ids.device)

    def draft_index(self, tokens: torch.Tensor) -> torch.Tensor:
        """Target ids → indices into the drafter's output space (N = "other" with a draft vocabulary)."""
        return self.vocab_index[tokens.long()] if self.config.draft_vocab else tokens.long()

    def target_ids(self, index: torch.Tensor) -> torch.Tensor:
        """Indices into the drafter's output space → target token ids."""
        return self.vocab_ids[index] if self.config.draft_vocab else index

    @classmethod
    def from_target(
        cls, config: DraftConfig, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor,
        vocab_ids: torch.Tensor | None = None, frozen_dtype: torch.dtype | None = None,
    ) -> "DraftModel":
        """A fresh draft model with the target's embedding and lm_head (its ``vocab_ids`` rows, with a
        draft vocabulary), frozen.

        No second copy of the frozen tensors is made where none is needed: when a weight already has the
        draft's compute dtype, the draft's parameter *is* the target's tensor (same storage; a target with
        tied embedding and lm_head stays tied), so serving a drafter costs no second V×d embedding or
        lm_head. Otherwise (another dtype) it is converted once, a tied pair still once. A draft vocabulary
        keeps its own (N, d) lm_head rows, a copy of N rows only. The placeholders are built on the meta
        device, so no random V×d tensors are allocated first either. ``frozen_dtype`` (default: the config's)
        gives the frozen tensors a dtype of their own: training keeps fp32 trainable weights beside bf16
        frozen ones, with no fp32 V×d copy made on the way.
        """
        expected = (config.vocab_size, config.hidden_size)
        for name, weight in (("embedding", embed_weight), ("lm_head", lm_head_weight)):
            if tuple(weight.shape) != expected:
                raise ValueError(f"target {name} has shape {tuple(weight.shape)}, draft config wants {expected}")
        if bool(config.draft_vocab) != (vocab_ids is not None):
            raise ValueError(f"draft_vocab {config.draft_vocab} needs vocab_ids exactly when it is > 0")
        dtype, device = config.torch_dtype, embed_weight.device
        frozen_dtype = frozen_dtype or dtype
        model = cls(config, frozen_device="meta")
        converted: dict[tuple, torch.Tensor] = {}  # a target tensor → its frozen form (once if tied)

        def frozen(weight: torch.Tensor) -> nn.Parameter:
            key = (weight.data_ptr(), tuple(weight.shape), weight.stride())
            if key not in converted:
                converted[key] = weight.detach().to(device=device, dtype=frozen_dtype)  # the same tensor if it fits
            return nn.Parameter(converted[key], requires_grad=False)

        model.embed_tokens.weight = frozen(embed_weight)
        if vocab_ids is None:
            model.lm_head.weight = frozen(lm_head_weight)
        else:  # (N, d) rows of the draft vocabulary, gathered straight into the compute dtype
            model.lm_head.weight = nn.Parameter(
                lm_head_weight.detach()[vocab_ids.to(lm_head_weight.device, torch.long)].to(device=device,
                                                                                          dtype=frozen_dtype),
                requires_grad=False)
        for child in model.children():  # the rest (small); the frozen tensors already fit, so stay shared
            if child is not model.embed_tokens and child is not model.lm_head:
                child.to(device=device, dtype=dtype)
        for name, buffer in list(model.named_buffers(recurse=False)):
            setattr(model, name, buffer.to(device))
        if vocab_ids is not None:
            model.set_vocab(vocab_ids)
        return model

    # ---- backbone -------------------------------------------------------------------------

    def context_kv(self, features: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer context K/V (B, Hkv, N, D) of target ``features`` (B, N, m·d) at ``positions`` (B, N)."""
        context = self.hidden_norm(self.fc(features.to(self.norm.weight.dtype)))  # (B, N, d)
        return [layer.self_attn.key_value(context, positions) for layer in self.layers]

    def backbone(
        self,
        block_ids: torch.Tensor,
        block_positions: torch.Tensor,
        context_kv: list[tuple[torch.Tensor, torch.Tensor]],
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """Hidden (B, Q, d) for draft inputs ``block_ids`` (B, Q) given per-layer context K/V."""
        x = self.embed_tokens(block_ids)
        for layer, kv in zip(self.layers, context_kv):
            x = layer(x, block_positions, kv, mask)
        return self.norm(x)

    def block_inputs(self, anchor_tokens: torch.Tensor, anchor_positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[anchor, MASK×(γ−1)]`` ids and positions ``anchor_pos + [0..γ−1]``, both (B, A·γ)."""
        gamma = self.config.block_size
        batch, num_blocks = anchor_tokens.shape
        ids = torch.full((batch, num_blocks, gamma), self.config.mask_token_id, dtype=torch.long, device=anchor_tokens.device)
        ids[:, :, 0] = anchor_tokens
        offsets = torch.arange(gamma, device=anchor_positions.device)
        positions = anchor_positions[:, :, None] + offsets  # (B, A, γ)
        return ids.view(batch, num_blocks * gamma), positions.view(batch, num_blocks * gamma)

    def forward_train(
        self,
        features: torch.Tensor,
        context_positions: torch.Tensor,
        block_tokens: torch.Tensor,
        anchor_positions: torch.Tensor,
        context_valid: torch.Tensor | None = None,
    ) -> TrainForward:
        """Anchor-packed training forward (§10.2) for B rows, each with N context rows and A anchors.

        features:          (B, N, m·d) target features of the context rows
        context_positions: (B, N) their 1D text positions
        block_tokens:      (B, A, γ+1) token ids at anchor_pos + [0..γ]: the anchor, then x*_1..x*_γ
                           (pad past the sequence end with any id and mask those labels in the loss)
        anchor_positions:  (B, A) 1D text position of each anchor
        context_valid:     (B, N) False for padding rows; None = all valid

        A row may be one whole sequence with many anchors (rows at any position; each block masks
        what it may not see) or one anchor with its own context window (A = 1).
        """
        gamma = self.config.block_size
        if block_tokens.shape[-1] != gamma + 1:
            raise ValueError(f"block_tokens must hold γ+1 = {gamma + 1} ids per anchor, got {block_tokens.shape[-1]}")
        batch, num_blocks = anchor_positions.shape
        ids, positions = self.block_inputs(block_tokens[..., 0], anchor_positions)
        mask = block_attention_mask(context_positions, anchor_positions, gamma, self.config.window, context_valid)
        hidden = self.backbone(ids, positions, self.context_kv(features, context_positions), mask)
        return TrainForward(
            hidden=hidden.view(batch, num_blocks, gamma, -1),  # (B, A, γ, d)
            prev_tokens=block_tokens[..., :-1],
            labels=block_tokens[..., 1:],
        )

    # ---- heads ----------------------------------------------------------------------------

    def markov_embedding(self, prev_tokens: torch.Tensor) -> torch.Tensor:
        """W1[x] (..., r) of previous target tokens (...): a table row, or P·E[x] when tied to the embedding."""
        if self.markov.tied:
            return self.markov.markov_w1(self.embed_tokens(prev_tokens.long()))
        return self.markov.markov_w1(self.draft_index(prev_tokens))

    def markov_table(self) -> torch.Tensor:
        """W1 (V, r) for every target token, as a full-vocabulary table (what DeepSpec's layout stores)."""
        with torch.no_grad():
            return self.markov_embedding(torch.arange(self.config.vocab_size, device=self.embed_tokens.weight.device))

    def head_logits(self, hidden: torch.Tensor, prev_tokens: torch.Tensor) -> torch.Tensor:
        """Draft logits (..., γ, N) = ``lm_head(h_k) + B_k`` over the drafter's output space (N = V
        without a draft vocabulary) for hidden (..., γ, d) and the teacher-forced previous target
        tokens (..., γ). The RNN head unrolls its state along γ."""
        logits = self.lm_head(hidden)
        if self.markov is None:
            return logits
        prev_emb = self.markov_embedding(prev_tokens)  # (..., γ, r)
        if not self.markov.stateful:
            return logits + self.markov.step(None, prev_emb, hidden)[1]
        state = self.markov.initial_state(hidden[..., 0, :])
        biases = []
        for k in range(hidden.shape[-2]):
            state, bias = self.markov.step(state, prev_emb[..., k, :], hidden[..., k, :])
            biases.append(bias)
        return logits + torch.stack(biases, dim=-2)

    def confidence_logits(self, hidden: torch.Tensor, prev_tokens: torch.Tensor) -> torch.Tensor:
        """Pre-sigmoid confidence (..., γ) (train with BCE-with-logits against c*_k)."""
        prev_emb = self.markov_embedding(prev_tokens) if self.config.confidence_uses_markov else None
        return self._confidence_logits(hidden, prev_emb)

    def _confidence_logits(self, hidden: torch.Tensor, prev_emb: torch.Tensor | None) -> torch.Tensor:
        if self.confidence_proj is None:
            raise RuntimeError("this draft model has no confidence head")
        inputs = hidden
        if self.config.confidence_uses_markov:
            inputs = torch.cat([hidden, prev_emb.to(hidden.dtype)], dim=-1)  # (..., d + r)
        return self.confidence_proj(inputs).squeeze(-1).float()

    def confidence(self, hidden: torch.Tensor, prev_tokens: torch.Tensor) -> torch.Tensor:
        """c_k = σ(w·[h_k ; W1[x_{k−1}]]) (..., γ) in (0, 1)."""
        return torch.sigmoid(self.confidence_logits(hidden, prev_tokens))

    # ---- inference ------------------------------------------------------------------------

    @torch.no_grad()
    def forward_block(self, context: "DraftContext", anchor_token: torch.Tensor, anchor_position: int) -> torch.Tensor:
        """Hidden (γ, d) of one draft block after ``anchor_token`` against the draft ``context``.

        Rows older than the window are dropped from ``context`` first (they can never be seen again);
        rows at or after the anchor, if any, are masked exactly as in training."""
        if self.config.window > 0:
            context.drop_before(anchor_position - self.config.window)
        device = self.norm.weight.device  # a norm stays float when the linears are int8
        anchor_tokens = anchor_token.reshape(1, 1).to(device)
        anchor_positions = torch.tensor([[anchor_position]], dtype=torch.long, device=device)
        ids, positions = self.block_inputs(anchor_tokens, anchor_positions)  # (1, γ) each
        mask = block_attention_mask(context.positions[None], anchor_positions, self.config.block_size, self.config.window)
        return self.backbone(ids, positions, context.layer_kv(), mask)[0]

    @torch.no_grad()
    def forward_blocks(self, contexts: list["DraftContext"], anchor_tokens: torch.Tensor,
                       anchor_positions: list[int]) -> torch.Tensor:
        """Hidden (R, γ, d) of R requests' draft blocks in one forward: :meth:`forward_block` of each
        (anchor ``anchor_tokens[r]`` (R,) at ``anchor_positions[r]`` against ``contexts[r]``), their
        contexts right-padded to the longest and the padding masked out."""
        if self.config.window > 0:
            for context, position in zip(contexts, anchor_positions):
                context.drop_before(position - self.config.window)
        device = self.norm.weight.device
        num, longest = len(contexts), max(len(c) for c in contexts)
        rows = torch.zeros(num, longest, dtype=torch.long, device=device)  # (R, N) text positions
        valid = torch.zeros(num, longest, dtype=torch.bool, device=device)  # (R, N)
        per_layer = [c.layer_kv() for c in contexts]  # R × L × (1, Hkv, n_r, D)
        layer_kv = []
        for index in range(len(self.layers)):
            first = per_layer[0][index][0]
            keys = first.new_zeros(num, first.shape[1], longest, first.shape[3])  # (R, Hkv, N, D)
            values = torch.zeros_like(keys)
            for r, kv in enumerate(per_layer):
                n = kv[index][0].shape[2]
                keys[r, :, :n], values[r, :, :n] = kv[index][0][0], kv[index][1][0]
            layer_kv.append((keys, values))
        for r, context in enumerate(contexts):
            rows[r, : len(context)], valid[r, : len(context)] = context.positions, True
        anchors = torch.tensor(anchor_positions, dtype=torch.long, device=device).view(num, 1)
        ids, positions = self.block_inputs(anchor_tokens.reshape(num, 1).to(device), anchors)  # (R, γ) each
        mask = block_attention_mask(rows, anchors, self.config.block_size, self.config.window, valid)
        return self.backbone(ids, positions, layer_kv, mask)  # (R, γ, d)
