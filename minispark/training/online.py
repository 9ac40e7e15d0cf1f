"""Features on the fly: the target in the training process turns stored answers into anchor windows.

A feature cache stores, per anchor, the target's hidden states around it (~27 GB for 16k answers with
dense anchors). Those features are one teacher-forced prefill of prompt + answer away, so an answer
set (``data/answers``, megabytes) is enough: :class:`OnlineSource` runs that prefill for a pool of
answers, packs every answer position as an anchor with exactly the cache's code (``cache.pack_sample``,
``cache_format.pack_shard``), and reads anchors back through the cache's own ``Anchor`` accessor — the
same numbers a cache of those answers holds (tested with ``assert_close``). :class:`OnlinePlan` is the
trainer's anchor stream over it: a sliding shuffle buffer of ``pool`` answers, each staying a few
phases and giving part of its anchors to each, so a step's anchors come from many answers, every
anchor is used once per epoch, and step s is a pure function of (seed, s) — a resumed run sees the
batches it would have seen. With a :class:`~minispark.training.feature_store.FeatureStore` (``online_store``)
an answer's prefill runs once, not once an epoch. :class:`MemoryReader` holds a small set's anchors
in memory with the ``CacheReader`` interface (held-out answer sets for the held-out proxy).

    minispark train --recipe tiny --answers runs/answers --out runs/draft-online
    .venv/bin/python -m pytest -q tests/training/test_online.py
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from minispark.data.answers import MANIFEST, AnswerSet, StoredAnswer
from minispark.data.cache import pack_sample
from minispark.data.cache_config import CacheConfig
from minispark.data.cache_format import Anchor, CacheFacts, CacheReader, config_hash, pack_shard
from minispark.data.regenerate import Answer
from minispark.core.errors import MinisparkError
from minispark.core.identity import content_identity, dtype_name
from minispark.target.loading import Target
from minispark.target.session import PromptInputs
from minispark.training.feature_store import FeatureStore

#: More anchors per answer than any answer has tokens: every answer position is an anchor.
DENSE = 1 << 30
#: Phases an answer stays in the online shuffle buffer (it gives 1/POOL_STAY of its anchors to each).
POOL_STAY = 8


class OnlineSource(CacheFacts):
    """An answer set seen as a feature cache: the manifest facts the trainer checks, anchors on demand."""

    def __init__(self, answers: AnswerSet, target: Target, layers: list[int], window: int, block: int,
                 dtype: str = "fp32", prompts: Path | None = None, max_answer_tokens: int = 0,
                 store: str | Path | None = None) -> None:
        answers.require_target(target)
        self.answers, self.target = answers, target
        # Answers cut to their first N tokens (0: whole): what a regeneration capped at N would have written.
        self.cut = max_answer_tokens
        # A VLM prompt's features need its pixels: those prompts are encoded again from the prompt file.
        self.samples = _prompt_samples(answers, target, prompts) if target.uses_mrope else None
        self.directory, self.manifest_path = answers.directory, answers.directory / MANIFEST
        self.config: dict[str, Any] = {
            "target": answers.config["target"], "split": answers.config["split"], "source": "online",
            # A growing set keeps its config: the sample count tells a resumed run it changed.
            "answers": config_hash(answers.config), "samples": len(answers), "layers": list(layers),
            "window": window, "block": block, "dtype": dtype} | ({"max_answer_tokens": self.cut} if self.cut else {})
        # The anchor rule of a cache build with every answer position an anchor (no sampling of anchors).
        self._pack = CacheConfig(prompts=Path("-"), out=Path("-"), anchors_per_sample=DENSE, anchor_run=1,
                                 window=window, block=block, dtype=dtype)
        self.store = None if store is None else FeatureStore(store, self._store_facts(), target.dtype)

    def _store_facts(self) -> dict[str, Any]:
        """What a feature store's features are of: the same numbers only from the same target, answers, layers and
        cut, computed in the same dtype on the same kind of device."""
        return {"target": content_identity(self.target.identity()),
                "answers": self.config["answers"], "layers": list(self.layers), "max_answer_tokens": self.cut,
                "dtype": dtype_name(self.target.dtype), "device": self.target.device.type}

    def anchors_per_sample(self) -> np.ndarray:
        """(N,) dense anchors of each answer (every answer token with a label after it), from lengths alone."""
        lengths = self.answers.answer_lengths()
        return np.maximum((np.minimum(lengths, self.cut) if self.cut else lengths) - 1, 0)

    @torch.no_grad()
    def pack(self, indices: Iterable[int]) -> dict[str, torch.Tensor]:
        """The in-memory shard of samples ``indices``: one prefill each, every answer position an anchor."""
        packed = []
        for i in indices:
            stored = self.answers[i]
            prompt = self._prompt(stored)
            packed.append(pack_sample(self.target, stored.sample_index, prompt, self._answer(prompt, stored),
                                      self._pack))
        return pack_shard(packed, len(self.layers), self.target.hidden_size, self._pack.dtype)

    def _prompt(self, stored: StoredAnswer) -> PromptInputs:
        if self.samples is None:
            return PromptInputs(input_ids=stored.prompt_ids.view(1, -1).to(self.target.device),
                                text_positions=torch.arange(len(stored.prompt_ids)))
        prompt = self.target.encode(**self.samples[stored.prompt_line - 1].encode_kwargs())
        if not torch.equal(prompt.input_ids[0].cpu(), stored.prompt_ids):
            raise MinisparkError(f"{self.directory / MANIFEST}: sample {stored.sample_index}'s prompt encodes to "
                                 "other tokens than the answer set stored (another processor or chat template?)")
        return prompt

    def _answer(self, prompt: PromptInputs, stored: StoredAnswer) -> Answer:
        tokens = stored.answer_ids[:self.cut] if self.cut else stored.answer_ids
        eos = stored.stopped_at_eos and len(tokens) == len(stored.answer_ids)
        full = self.target.extend(prompt, tokens.to(self.target.device))
        ids = full.input_ids[0]
        kept = self.store.get(stored.sample_index, ids) if self.store is not None else None
        if kept is not None:
            features, final = kept
        else:
            features, final = self.target.capture(full, self.layers)  # (L, m, d), (L, d)
            # The last token predicts nothing and is no anchor's context: zero, as generation leaves it.
            features[-1], final[-1] = 0, 0
            if self.store is not None:
                self.store.put(stored.sample_index, ids, features, final)
        return Answer(tokens=tokens, stopped_at_eos=eos, features=features,
                      final_hidden=final)


class MemoryReader(CacheFacts):
    """Every anchor of some samples of an :class:`OnlineSource`, held in memory, read like a cache."""

    def __init__(self, source: OnlineSource, indices: Iterable[int] | None = None) -> None:
        self.directory, self.manifest_path, self.config = source.directory, source.manifest_path, source.config
        self.shard = source.pack(range(len(source.answers)) if indices is None else indices)

    def __len__(self) -> int:
        return int(len(self.shard["anchor_pos"]))

    def __getitem__(self, index: int) -> Anchor:
        if not 0 <= index < len(self):
            raise IndexError(f"anchor {index} out of range ({len(self)} anchors)")
        return CacheReader._anchor(self.shard, index)

    def anchor_samples(self) -> tuple[np.ndarray, np.ndarray]:
        samples = self.shard["sample_index"].numpy()[self.shard["anchor_sample"].numpy()]
        return samples.astype(np.int64), self.shard["anchor_pos"].numpy().astype(np.int64)


class OnlinePlan:
    """The trainer's anchor stream over an :class:`OnlineSource`: a sliding shuffle buffer of answers.

    Epoch e visits the answers in a permutation seeded by (seed, e). The buffer holds ``pool``
    answers' features; every phase, ``pool / stay`` answers enter (one prefill each) and as many
    leave, so an answer stays ``stay`` phases and gives a different ``1/stay`` of its anchors (in
    runs of ``run``, a seeded split) to each. A phase's anchors are shuffled together and cut into
    steps. So every anchor is used once per epoch, each answer is prefilled once per epoch, memory
    holds ``pool`` answers, and consecutive steps mix answers that entered at different times
    (pools trained one after another, each for thousands of steps, memorise each pool: measured,
    held-out τ 1.32 against 2.8 on the training stream). Step s is a pure function of (seed, s): a
    resumed run sees the batches it would have seen.
    """

    def __init__(self, source: OnlineSource, batch_anchors: int, seed: int, run: int = 0, *, pool: int = 32,
                 max_samples: int = 0, first_sample: int = 0, replay_samples: int = 0,
                 anchors_per_sample: int = 0, stay: int = POOL_STAY) -> None:
        counts = source.anchors_per_sample()
        if max_samples > 0:
            counts = counts[:max_samples]
        if first_sample > 0:  # the skipped answers keep their indices and give no anchor (never prefilled)
            counts = counts.copy()
            counts[replay_samples:first_sample] = 0
        if not len(counts):  # a manifest listing no shard: "no anchors (answers too short?)" blamed the answers
            raise MinisparkError(f"{source.directory}: the answer set holds no answers (its manifest lists no shard)")
        if not counts.sum():
            raise MinisparkError(f"{source.directory}: the answer set holds no anchors (answers too short?)")
        self.source, self.dense = source, counts  # (N,) every anchor of each answer
        self.counts = np.minimum(counts, anchors_per_sample) if anchors_per_sample > 0 else counts
        self.batch_anchors, self.seed, self.run, self.pool = batch_anchors, seed, run, pool
        self.stay = max(1, min(stay, pool))
        self.enter = -(-pool // self.stay)  # answers entering per phase
        self.sparse = anchors_per_sample
        self.samples, self.total = int((self.counts > 0).sum()), int(self.counts.sum())
        self._epochs: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # epoch -> (order, steps at each phase's end)
        self._lengths: dict[int, int] = {}  # epoch -> its steps (kept: locating a step walks the epochs)
        self._shards: dict[int, dict[str, torch.Tensor]] = {}  # the buffer: answer -> its packed features
        self._loaded: tuple[tuple[int, int], list[tuple[int, int]]] | None = None

    # ---- the schedule, from the counts alone ---------------------------------------------

    def _order(self, epoch: int) -> np.ndarray:
        return self._epoch(epoch)[0]

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        if epoch not in self._epochs:
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.counts))
            order = order[self.counts[order] > 0]
            phases = (len(order) - 1) // self.enter + self.stay
            sizes = np.zeros(phases, dtype=np.int64)  # anchors per phase, from the counts alone
            for k, answer in enumerate(order.tolist()):
                entry = k // self.enter
                sizes[entry:entry + self.stay] += self._part_sizes(epoch, answer)
            steps = np.cumsum([-(-n // self.batch_anchors) for n in sizes])  # ceil: a phase's last step is short
            self._epochs = {e: v for e, v in self._epochs.items() if e >= epoch - 1}
            self._epochs[epoch], self._lengths[epoch] = (order, steps), int(steps[-1])
        return self._epochs[epoch]

    def _length(self, epoch: int) -> int:
        return self._lengths[epoch] if epoch in self._lengths else int(self._epoch(epoch)[1][-1])

    def _members(self, order: np.ndarray, phase: int) -> range:
        """Positions in ``order`` of the answers in the buffer at ``phase``."""
        return range(max(0, (phase - self.stay + 1) * self.enter), min(len(order), (phase + 1) * self.enter))

    def _runs(self, epoch: int, answer: int) -> list[list[int]]:
        """``answer``'s anchors this epoch (answer-local indices, a seeded subset when sparse) in runs."""
        rng = np.random.default_rng([self.seed, epoch, int(answer)])
        local = list(range(int(self.dense[answer])))
        if self.sparse and len(local) > self.sparse:  # a seeded subset, in position order
            local = sorted(rng.choice(local, self.sparse, replace=False).tolist())
        run = self.run or len(local)
        return [local[k:k + run] for k in range(0, len(local), run)]

    def _phase_groups(self, epoch: int, order: np.ndarray, phase: int) -> list[tuple[int, list[int]]]:
        """(answer, run of its anchors) for every run the buffer gives at ``phase``."""
        groups = []
        for k in self._members(order, phase):
            answer = int(order[k])
            part = phase - k // self.enter  # how many phases this answer has been in the buffer
            offset = self._offset(epoch, answer)
            groups += [(answer, r) for g, r in enumerate(self._runs(epoch, answer)) if (g + offset) % self.stay == part]
        return groups

    def _offset(self, epoch: int, answer: int) -> int:
        """Which of its phases gets ``answer``'s first run this epoch (run g goes to (g + offset) % stay)."""
        return int(np.random.default_rng([self.seed, epoch, answer, 1]).integers(self.stay))

    def _part_sizes(self, epoch: int, answer: int) -> np.ndarray:
        """(stay,) anchors ``answer`` gives to each phase it stays: :meth:`_runs`' sizes without building them."""
        count = int(self.counts[answer])
        run = self.run or count
        groups = -(-count // run)
        sizes = np.full(groups, run, dtype=np.int64)
        sizes[-1] = count - (groups - 1) * run
        parts = (np.arange(groups) + self._offset(epoch, answer)) % self.stay
        return np.bincount(parts, weights=sizes, minlength=self.stay).astype(np.int64)

    def _locate(self, step: int) -> tuple[int, int, int]:
        """(epoch, phase, step within the phase) of global step ``step``; epochs are walked from the first."""
        epoch = 0
        while step >= self._length(epoch):
            step -= self._length(epoch)
            epoch += 1
        ends = self._epoch(epoch)[1]
        phase = int(np.searchsorted(ends, step, side="right"))
        return epoch, phase, step - (int(ends[phase - 1]) if phase else 0)

    # ---- features ----------------------------------------------------------------------------

    def _load(self, epoch: int, phase: int) -> list[tuple[int, int]]:
        """The phase's (answer, anchor) list in step order; the buffer packed to the phase's members."""
        if self._loaded is None or self._loaded[0] != (epoch, phase):
            order = self._order(epoch)
            members = {int(order[k]) for k in self._members(order, phase)}
            self._shards = {i: shard for i, shard in self._shards.items() if i in members}
            for i in sorted(members - set(self._shards)):  # entering answers: one prefill each
                shard = self.source.pack([i])
                if int(shard["sample_anchor_offset"][-1]) != int(self.dense[i]):
                    raise MinisparkError(f"{self.source.directory}: answer {i} packed "
                                         f"{int(shard['sample_anchor_offset'][-1])} anchors, its length says "
                                         f"{int(self.dense[i])}")
                self._shards[i] = shard
            groups = self._phase_groups(epoch, order, phase)
            rng = np.random.default_rng([self.seed, epoch, phase])
            picked = [(answer, a) for g in rng.permutation(len(groups)) for answer, run in [groups[g]] for a in run]
            self._loaded = ((epoch, phase), picked)
        return self._loaded[1]

    def anchors(self, step: int) -> list[Anchor]:
        """The anchors of (0-based) step ``step``."""
        epoch, phase, within = self._locate(step)
        picked = self._load(epoch, phase)[within * self.batch_anchors:(within + 1) * self.batch_anchors]
        return [CacheReader._anchor(self._shards[answer], a) for answer, a in picked]

    def steps_per_epoch(self, epoch: int = 0) -> int:
        return self._length(epoch)

    def answer_use(self, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """(answers whose every anchor the first ``steps`` steps used, answers no step has touched yet).

        An answer at position k of the epoch's order is in the buffer for phases k // enter .. + stay − 1,
        so the answers before the buffer at the current phase are used up and those after it untouched. Past
        the first epoch every answer has been used whole and none is untouched."""
        order = self._order(0).astype(np.int64)
        if steps <= 0:
            return order[:0], order
        epoch, phase, _ = self._locate(steps - 1)
        if epoch > 0:
            return order, order[:0]
        members = self._members(order, phase)
        return order[:members.start], order[members.stop:]


def _prompt_samples(answers: AnswerSet, target: Target, prompts: Path | None) -> list:
    """The prompt file an answer set was sampled from (``prompts``, else the shipped corpus of that name),
    checked by its hash; refused in one line when it cannot be found or was edited since."""
    from minispark.data.cache_config import default_prompts
    from minispark.data.prompts import load_prompts, prompt_file_hash

    recorded = answers.config["prompts"]
    shipped = {p.name: p for p in (default_prompts(target.is_vlm), default_prompts(target.is_vlm, "heldout"))}
    path = Path(prompts) if prompts is not None else shipped.get(recorded["file"])
    if path is None:
        raise MinisparkError(f"{answers.directory / MANIFEST}: answers to {recorded['file']}, which is not the shipped "
                             "corpus: pass its path as online_prompts=FILE (image prompts are encoded again)")
    samples = load_prompts(path)
    if prompt_file_hash(path, samples) != recorded["hash"]:
        raise MinisparkError(f"{path}: differs from the prompt file {answers.directory / MANIFEST} was sampled from "
                             "(its hash changed)")
    return samples


def open_reader(directory: Path, target: Target, layers: list[int] | None, window: int, block: int,
                dtype: str = "fp32", prompts: Path | None = None) -> CacheReader | MemoryReader:
    """A feature cache as it is, or an answer set as an in-memory one (for a small held-out set)."""
    if (Path(directory) / MANIFEST).exists():
        chosen = target.auto_layers() if layers is None else target.check_layers(layers)
        return MemoryReader(OnlineSource(AnswerSet(directory), target, chosen, window, block, dtype, prompts))
    return CacheReader(directory)
