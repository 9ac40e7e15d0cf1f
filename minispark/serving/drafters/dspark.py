"""The DSpark drafter: a trained :class:`~minispark.model.draft_model.DraftModel` plus its draft context
(the K/V of the target features of committed tokens) and the sequential stage (§6.4) that draws a
block's tokens from the backbone's output (:class:`SequentialBlock`), behind the shared
:class:`~minispark.serving.drafters.base.Drafter` interface. The directory it loads from is
:mod:`minispark.model.checkpoint`'s.

A drafter with a draft vocabulary (N static frequent tokens) can also draft the request's own tokens
(:class:`OutputSpace`, ``load_drafter(context_vocab=True)``): every token of the prompt and the output so far
that the static set lacks is scored with its row of the target's lm_head, the row the drafter's own lm_head
would hold for it (code's identifiers and chat's names come from the prompt). Their Markov bias is zero (the
head's tables cover the static set; as a previous token such a token reads the head's shared "other" row).
p_d stays an exact distribution over the N + E tokens, so verification stays lossless. It is off by default:
a drafter trained on the static set alone ranks those rows far below its top (``benchmarks/context_vocab.py``),
so it drafts them almost never and only pays for scoring them.

    .venv/bin/python -m pytest -q tests/model/test_draft_model.py -k checkpoint
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from minispark.model.checkpoint import load_draft_model
from minispark.model.drafter_dir import DrafterDir
from minispark.model.draft_context import DraftContext, HeldRows, pieces, reach
from minispark.model.draft_model import DraftModel
from minispark.model.draft_quant import Int8Linear
from minispark.serving.draft_block import DraftBlock
from minispark.serving.draft_tree import TreeDrafts
from minispark.serving.drafters.base import Drafter
from minispark.target.sampling import SamplingConfig, probabilities, sample

class OutputSpace:
    """What a draft position scores: the N static draft-vocabulary tokens (the whole vocabulary without one) plus E
    request tokens outside them, in that order. ``extra`` (E,) target ids, ``rows`` (E, d) their target lm_head
    rows in the drafter's compute dtype."""

    def __init__(self, model: DraftModel, extra: torch.Tensor, rows: torch.Tensor) -> None:
        self.model, self.extra, self.rows = model, extra, rows
        static = model.vocab_ids if model.config.draft_vocab else None
        self.ids = torch.cat([static, extra]) if static is not None and extra.numel() else static  # (N+E,) or None

    @classmethod
    def static(cls, model: DraftModel) -> "OutputSpace":
        """The drafter's own output space alone (its draft vocabulary, or the whole vocabulary)."""
        device = model.norm.weight.device
        return cls(model, torch.zeros(0, dtype=torch.long, device=device), torch.zeros(0, 0, device=device))

    @classmethod
    def of_request(cls, model: DraftModel, ids: torch.Tensor, lm_head: torch.Tensor | None) -> "OutputSpace":
        """The space for a request whose committed tokens are ``ids`` (L,); ``lm_head`` (V, d) the target's
        (None: the static set alone)."""
        if lm_head is None or not model.config.draft_vocab:
            return cls.static(model)
        device, dtype = model.norm.weight.device, model.norm.weight.dtype
        seen = ids.to(device).long().unique()  # ascending
        extra = seen[model.vocab_index[seen] == model.config.draft_vocab]  # (E,) outside the static set
        return cls(model, extra, lm_head[extra.to(lm_head.device)].to(device, dtype))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Base logits (..., N+E) of hidden states (..., d): the static lm_head, then the request's rows."""
        base = self.model.lm_head(hidden)
        return torch.cat([base, hidden @ self.rows.T], dim=-1) if self.extra.numel() else base

    def with_bias(self, logits: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``logits`` (..., N+E) plus the Markov head's ``bias`` (..., N) on the static part."""
        if not self.extra.numel():
            return logits + bias
        return logits + torch.nn.functional.pad(bias, (0, self.extra.numel()))

    def target_ids(self, index: torch.Tensor) -> torch.Tensor:
        """Indices into the space → target token ids."""
        return self.ids[index] if self.extra.numel() else self.model.target_ids(index)

    def over_target_vocab(self, p: torch.Tensor) -> torch.Tensor:
        """(V,) a draft distribution ``p`` (N+E,) over the whole target vocabulary: exactly zero outside the
        space, which verification needs (the residual covers the mass the drafter cannot propose)."""
        if self.ids is None:
            return p
        return p.new_zeros(self.model.config.vocab_size).index_copy_(0, self.ids, p)


class DSparkDrafter(Drafter):
    """Drafts one block per round: one backbone forward over γ tokens, then the sequential head.

    The draft context holds per-layer K/V of the projected features of every token in the target
    KV cache (bounded by the window W). A prefill's rows are projected at once; ``commit`` only
    queues the newly cached span, and the queue is projected in one batch when the context is next
    read (the next proposal). So rounds that draft-skip leaves the drafter out of cost it nothing,
    and the next proposal equals the one a drafter that was never skipped would make.

    ``context_lm_head`` (V, d), the target's lm_head, lets a drafter with a draft vocabulary also draft the
    request's tokens outside it (:class:`OutputSpace`); None drafts the static set alone.
    """

    name = "dspark"
    drafts_trees = True

    def __init__(self, model: DraftModel, capacity: int = 256, context_lm_head: torch.Tensor | None = None) -> None:
        self.model = model.eval()
        self.context_lm_head = context_lm_head
        self.config = model.config
        self.feature_layers = tuple(model.config.feature_layers)
        self.context_window = model.config.window
        self.has_confidence = model.config.confidence_head
        self.max_gamma = model.config.block_size
        weight = model.norm.weight  # the compute dtype and device (a norm is never quantized)
        self._context = DraftContext(model.config, weight.device, weight.dtype, capacity)
        # Committed rows not yet projected into the context: [(features (n, m·d), positions (n,))].
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        # The context as the last prefill left it (a copy): the rows a later prompt starting with the same tokens
        # reads before its first anchor, in this slot or lent to another, after the window dropped them here.
        self._prompt_rows: HeldRows | None = None

    @property
    def precision(self) -> str:
        """``int8`` once :func:`~minispark.model.draft_quant.quantize_int8` ran on the model, else its float dtype."""
        if any(isinstance(m, Int8Linear) for m in self.model.modules()):
            return "int8"
        return str(self.model.norm.weight.dtype).removeprefix("torch.")

    @property
    def context(self) -> DraftContext:
        """The draft context with every committed row in it (the queued rows projected first)."""
        self._flush()
        return self._context

    @torch.no_grad()
    def reset(self, cached_ids: torch.Tensor, features: torch.Tensor | None, text_positions: torch.Tensor) -> None:
        self._context.clear()
        self._pending.clear()
        self._append(features, text_positions)
        self._flush()  # with the prefill, not charged to the first round's proposal
        self._prompt_rows = HeldRows.joined([self._context.held()])

    @torch.no_grad()
    def propose(
        self,
        ids: torch.Tensor,
        anchor_position: int,
        sampling: SamplingConfig,
        generator: torch.Generator,
    ) -> DraftBlock:
        anchor = ids[-1]
        hidden = self.model.forward_block(self.context, anchor, int(anchor_position))  # (γ, d)
        return SequentialBlock(self.model, hidden, anchor, sampling, generator, self.space(ids))

    @torch.no_grad()
    def propose_tree(self, ids: torch.Tensor, anchor_position: int, sampling: SamplingConfig,
                     generator: torch.Generator) -> TreeDrafts:
        """The same backbone forward as :meth:`propose`; the tree expands it node by node (``draft_tree.py``)."""
        hidden = self.model.forward_block(self.context, ids[-1], int(anchor_position))  # (γ, d)
        return BackboneTreeDrafts(self.model, hidden, sampling, self.space(ids))

    def space(self, ids: torch.Tensor) -> OutputSpace:
        """The tokens this round scores for a request whose committed tokens are ``ids`` (L,)."""
        return OutputSpace.of_request(self.model, ids, self.context_lm_head)

    @staticmethod
    @torch.no_grad()
    def propose_together(drafters: list["DSparkDrafter"], ids: list[torch.Tensor], anchor_positions: list[int],
                         samplings: list[SamplingConfig], generators: list[torch.Generator]) -> list[DraftBlock]:
        """:meth:`propose` of several requests' drafters that share one model, with one backbone forward
        for all of them (``DraftModel.forward_blocks``); each block then draws with its own sampling."""
        anchors, hidden = _forward_together(drafters, ids, anchor_positions)
        return [SequentialBlock(drafters[0].model, hidden[r], anchors[r], samplings[r], generators[r],
                                drafters[r].space(ids[r])) for r in range(len(drafters))]

    @staticmethod
    @torch.no_grad()
    def propose_trees_together(drafters: list["DSparkDrafter"], ids: list[torch.Tensor], anchor_positions: list[int],
                               samplings: list[SamplingConfig]) -> list[TreeDrafts]:
        """:meth:`propose_tree` of several requests' drafters that share one model, with one backbone forward."""
        _, hidden = _forward_together(drafters, ids, anchor_positions)
        return [BackboneTreeDrafts(drafters[0].model, hidden[r], samplings[r], drafters[r].space(ids[r]))
                for r in range(len(drafters))]

    @torch.no_grad()
    def commit(
        self,
        num_accepted: int,
        new_cached_ids: torch.Tensor,
        features: torch.Tensor | None,
        text_positions: torch.Tensor,
    ) -> None:
        self._append(features, text_positions)

    @torch.no_grad()
    def extend(self, new_cached_ids: torch.Tensor, features: torch.Tensor | None,
               text_positions: torch.Tensor) -> None:
        self._append(features, text_positions)
        self._flush()
        self._prompt_rows = HeldRows.joined([self._context.held()])

    def rollback(self, text_position: int) -> None:
        """Forget the rows at ``text_position`` and after; rows the window dropped that a block at
        ``text_position`` reads come back from the last prompt's (:meth:`holds` says whether they can)."""
        self.context.crop(text_position)  # the queued rows projected first
        first = int(self._context.positions[0]) if len(self._context) else text_position
        oldest = max(self.oldest_read(text_position), reach(self._sources(), first))
        if oldest < first:
            rows, live = self.context_rows(oldest, first), HeldRows.joined([self._context.held()])
            self._context.clear()
            self._context.put(rows)
            self._context.put(live)

    def oldest_read(self, anchor_position: int) -> int:
        return max(0, anchor_position - self.context_window) if self.context_window else 0

    def holds(self, start: int, end: int) -> bool:
        return reach(self._sources(), end) <= start or start >= end

    def context_rows(self, start: int, end: int) -> HeldRows | None:
        found = pieces(self._sources(), start, end)
        return None if found is None else HeldRows.joined(found) if found else self._context.held().between(0, 0)

    def adopt_context(self, rows: HeldRows) -> None:
        self._context.clear()
        self._pending.clear()
        self._context.put(rows)

    def _sources(self) -> list[HeldRows]:
        """The runs of rows held: the live context (every committed row projected) and the last prompt's."""
        return [self.context.held()] + ([self._prompt_rows] if self._prompt_rows is not None else [])

    def _append(self, features: torch.Tensor | None, text_positions: torch.Tensor) -> None:
        """Queue committed rows (checked now, projected by :meth:`_flush`)."""
        if features is None:
            raise ValueError("the DSpark drafter needs target features for every cached token")
        if features.shape[0] != text_positions.numel() or features.shape[-1] != self.config.feature_size:
            raise ValueError(
                f"features {tuple(features.shape)} do not match {text_positions.numel()} positions "
                f"× feature size {self.config.feature_size}"
            )
        if text_positions.numel():
            self._pending.append((features, text_positions.to(dtype=torch.long)))

    @torch.no_grad()
    def _flush(self) -> None:
        """Project the queued rows into the context, all in one batch."""
        if not self._pending:
            return
        device = self.model.norm.weight.device
        features = torch.cat([f.to(device) for f, _ in self._pending])  # (n, m·d)
        positions = torch.cat([p.to(device) for _, p in self._pending])  # (n,)
        self._pending.clear()
        layer_kv = self.model.context_kv(features[None], positions[None])  # (1, Hkv, n, D) each
        self._context.append(layer_kv, positions)


def _forward_together(drafters: list[DSparkDrafter], ids: list[torch.Tensor],
                      anchor_positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The anchors (R,) and one backbone forward's hidden states (R, γ, d) of drafters sharing one model."""
    anchors = torch.stack([request_ids[-1] for request_ids in ids])  # (R,)
    hidden = drafters[0].model.forward_blocks([d.context for d in drafters], anchors, anchor_positions)
    return anchors, hidden


def load_drafter(
    path: str | Path | DrafterDir,
    target_embed: torch.Tensor,
    target_lm_head: torch.Tensor,
    device: torch.device | str,
    target_identity: str | None = None,
    context_vocab: bool = False,
) -> DSparkDrafter:
    """A ready :class:`DSparkDrafter` from a drafter directory (see :func:`~minispark.model.checkpoint.load_draft_model`);
    ``context_vocab`` drafts the request's tokens outside a draft vocabulary too (:class:`OutputSpace`)."""
    model = load_draft_model(path, target_embed, target_lm_head, device, target_identity)
    return DSparkDrafter(model, context_lm_head=target_lm_head if context_vocab else None)


class SequentialBlock(DraftBlock):
    """x_k ~ p_k = probabilities(U_k + B_k(x_{k−1}, …)) left to right; c_k from h_k and x_{k−1}.

    The base logits U_k of all positions come from one GEMM up front: the lm_head weights are read
    once per block, not once per position (they dominate the sequential loop's memory traffic)."""

    def __init__(self, model: DraftModel, hidden: torch.Tensor, anchor_token: torch.Tensor,
                 sampling: SamplingConfig, generator: torch.Generator | None, space: OutputSpace | None = None) -> None:
        super().__init__(hidden.shape[0], hidden.device)
        self.model, self.hidden, self.sampling, self.generator = model, hidden, sampling, generator
        self.space = space or OutputSpace.static(model)
        self.prev = anchor_token.reshape(()).to(hidden.device)  # x_{k−1}, as a target id
        self.state = model.markov.initial_state(hidden[0]) if model.markov is not None else None
        self.base = self.space.logits(hidden)  # (γ, N+E)
        self._prev_emb: torch.Tensor | None = None  # (r,) Markov embedding of x_{k−1}, for c_k and B_k
        self._prev_emb_for = 0  # the k it was computed for

    def _previous_embedding(self, k: int) -> torch.Tensor | None:
        if self.model.markov is None:
            return None
        if self._prev_emb_for != k:
            self._prev_emb = self.model.markov_embedding(self.prev)
            self._prev_emb_for = k
        return self._prev_emb

    def _confidence(self, k: int) -> torch.Tensor | None:
        if self.model.confidence_proj is None:
            return None
        # c_k uses h_k and x_{k−1} only: it is known before x_k is drawn (non-anticipation).
        return torch.sigmoid(self.model._confidence_logits(self.hidden[k - 1], self._previous_embedding(k)))

    def _draw(self, k: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        model = self.model
        logits = self.base[k - 1]  # (N+E,)
        if model.markov is not None:
            self.state, bias = model.markov.step(self.state, self._previous_embedding(k), self.hidden[k - 1])
            logits = self.space.with_bias(logits, bias)
        if self.sampling.greedy:
            self.prev = self.space.target_ids(logits.argmax())  # p_d is the one-hot of the argmax: None says so
            return self.prev, None
        p = probabilities(logits.float(), self.sampling)  # (N+E,)
        self.prev = self.space.target_ids(sample(p, self.generator))
        return self.prev, self.space.over_target_vocab(p)


class BackboneTreeDrafts(TreeDrafts):
    """A tree's children from one backbone forward: at depth d, the base logits U_d plus the Markov head's bias
    of the parent's token (the RNN head's state unrolled along the parent's path); without a head, U_d alone
    (per-position top-k). The confidence c_d reads h_d and the parent's token, as in a chain."""

    def __init__(self, model: DraftModel, hidden: torch.Tensor, sampling: SamplingConfig,
                 space: OutputSpace | None = None) -> None:
        self.model, self.hidden, self.sampling = model, hidden, sampling
        self.space = space or OutputSpace.static(model)
        self.depth_limit = hidden.shape[0]
        self.base = self.space.logits(hidden)  # (γ, N+E): the lm_head read once per round, as a chain does

    def _embedding(self, token: int) -> torch.Tensor:
        return self.model.markov_embedding(torch.tensor(token, device=self.hidden.device))  # (r,)

    @torch.no_grad()
    def distribution(self, path: Sequence[int]) -> torch.Tensor:
        model, depth = self.model, len(path)
        logits = self.base[depth - 1]  # (N+E,)
        if model.markov is not None:
            state = model.markov.initial_state(self.hidden[0])
            # a stateless head needs only the parent's step; the RNN head's state runs along the whole path
            for k in (range(1, depth + 1) if model.markov.stateful else (depth,)):
                state, bias = model.markov.step(state, self._embedding(path[k - 1]), self.hidden[k - 1])
            logits = self.space.with_bias(logits, bias)
        logits = logits.float()
        # at T 0 the children are the top-k, ranked by the temperature-1 distribution
        p = torch.softmax(logits, dim=-1) if self.sampling.greedy else probabilities(logits, self.sampling)  # (N+E,)
        return self.space.over_target_vocab(p)

    @torch.no_grad()
    def confidence(self, path: Sequence[int]) -> float | None:
        if self.model.confidence_proj is None:
            return None
        depth = len(path)
        previous = self._embedding(path[-1]) if self.model.markov is not None else None
        return float(torch.sigmoid(self.model._confidence_logits(self.hidden[depth - 1], previous)))
