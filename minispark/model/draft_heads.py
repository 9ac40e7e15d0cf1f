"""DSpark's sequential heads (design notes §6): a prefix-dependent logit bias added to each draft
position's base logits, so the block distribution factorizes autoregressively while the backbone
stays parallel. Vanilla low-rank Markov (eq. 5), gated Markov (§6.2) and the GRU-style RNN head
(eq. 6); each ``step`` maps (state, W1[x_{k−1}], h_k) to (state, bias over the vocabulary).

    .venv/bin/python -m pytest -q tests/model/test_draft_model.py -k sampler
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from minispark.model.draft_config import DraftConfig


class MarkovHead(nn.Module):
    """Vanilla low-rank Markov bias ``B(x_{k−1}, ·) = W2(W1[x_{k−1}])`` (eq. 5); stateless."""

    stateful = False

    def __init__(self, config: DraftConfig) -> None:
        super().__init__()
        self.rank = config.markov_rank
        # With a draft vocabulary both tables live in its space; W1 has one extra row shared by
        # every previous token outside it (the anchor may be any token).
        # markov_w1 = "embedding" replaces the table by W1[x] = P·E[x] over the frozen target embedding E
        # (DraftModel.markov_embedding feeds it E[x]): r·d parameters instead of rows·r.
        self.tied = config.markov_w1 == "embedding"
        rows = config.draft_vocab + 1 if config.draft_vocab else config.vocab_size
        self.markov_w1 = (nn.Linear(config.hidden_size, config.markov_rank, bias=False) if self.tied
                          else nn.Embedding(rows, config.markov_rank))
        self.markov_w2 = nn.Linear(config.markov_rank, config.output_size, bias=False)

    def initial_state(self, like: torch.Tensor) -> torch.Tensor | None:
        return None

    def step(self, state, prev_emb: torch.Tensor, hidden: torch.Tensor):
        """One position: (state, W1[x_{k−1}] (..., r), h_k (..., d)) → (state, bias (..., N))."""
        return state, self.markov_w2(prev_emb)


class GatedMarkovHead(MarkovHead):
    """``bias = W2(σ(W_g·[h_k ; W1[x_{k−1}]]) ⊙ W1[x_{k−1}])`` (§6.2)."""

    def __init__(self, config: DraftConfig) -> None:
        super().__init__(config)
        self.gate_proj = nn.Linear(config.hidden_size + config.markov_rank, config.markov_rank)

    def step(self, state, prev_emb, hidden):
        gate = torch.sigmoid(self.gate_proj(torch.cat([hidden, prev_emb], dim=-1)))
        return state, self.markov_w2(gate * prev_emb)


class RNNHead(MarkovHead):
    """GRU-style state over the block prefix, one joint linear (eq. 6); state starts at zero."""

    stateful = True

    def __init__(self, config: DraftConfig) -> None:
        super().__init__(config)
        self.joint_proj = nn.Linear(2 * config.markov_rank + config.hidden_size, 3 * config.markov_rank)

    def initial_state(self, like: torch.Tensor) -> torch.Tensor:
        """Zero state (..., r) for hidden ``like`` (..., d)."""
        return like.new_zeros(*like.shape[:-1], self.rank)

    def step(self, state, prev_emb, hidden):
        z = torch.cat([state, prev_emb, hidden], dim=-1)  # (..., 2r + d)
        gate, candidate, output = self.joint_proj(z).chunk(3, dim=-1)
        gate = torch.sigmoid(gate)
        state = gate * state + (1.0 - gate) * torch.tanh(candidate)
        return state, self.markov_w2(torch.tanh(output))


HEADS = {"vanilla": MarkovHead, "gated": GatedMarkovHead, "rnn": RNNHead}
