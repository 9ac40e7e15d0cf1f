"""Multi-turn conversations on one target session: each turn prefills only what the KV cache lacks.

A turn renders the whole conversation (earlier turns plus the new user message and its images)
with the chat template. The tokens the KV cache already holds — earlier prompts and kept replies —
stay, and only the rest is forwarded (``engine.prefill`` with ``reuse``): for a typical turn that is
the end of the previous reply's template (e.g. ``<|im_end|>\\n``) plus the new user message. Where
the template renders an earlier reply differently from the tokens the model generated (a reply
whose tokens are not the tokenizer's own split of its text, or a template that rewrites assistant
turns), the cache is cropped to the common prefix and the rest re-prefilled: every turn is token
for token the whole conversation run from scratch, and ``Turn.recomputed_tokens`` says what the
mismatch cost.

    .venv/bin/python -m pytest -q tests/serving/test_conversation.py
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from minispark.core.errors import MinisparkError
from minispark.serving.draft_skip import SkipPolicy
from minispark.serving.drafters.base import Drafter, default_policy
from minispark.serving.engine import GenerationStats, speculative_generate
from minispark.serving.generate import fit_context, stop_on_strings, text_streamer
from minispark.target.plain_prompts import reply_text, turn_stops
from minispark.target.sampling import SamplingConfig, make_generator
from minispark.serving.schedule import LengthPolicy
from minispark.target.loading import Target


@dataclass
class Turn:
    """One user message and the kept reply. ``prompt_tokens``: the whole conversation's prompt
    length for this turn; ``recomputed_tokens``: cached tokens dropped because the template rendered
    them differently (0 when the earlier turns were reused as they are)."""

    user: str
    images: list[str]
    reply: str
    token_ids: list[int]
    stop_reason: str
    stats: GenerationStats
    prompt_tokens: int
    recomputed_tokens: int

    def as_dict(self) -> dict:
        return {"user": self.user, "images": self.images, "reply": self.reply, "token_ids": self.token_ids,
                "stop_reason": self.stop_reason, "prompt_tokens": self.prompt_tokens,
                "recomputed_tokens": self.recomputed_tokens, **self.stats.as_dict()}


class Conversation:
    """A chat with one target: messages, the KV-cached session under them, and the drafter.

    Use as a context manager (the session's feature hooks are removed on exit).
    """

    def __init__(self, target: Target, drafter: Drafter, *, policy: LengthPolicy | None = None,
                 sampling: SamplingConfig = SamplingConfig(), max_new_tokens: int = 256,
                 system: str | None = None, stop_strings: Sequence[str] = (), seed: int | None = None,
                 skip: SkipPolicy | None = None) -> None:
        self.target = target
        self.drafter = drafter
        self.policy = policy or default_policy(drafter)
        self.skip = skip  # draft-skip: its estimates carry over from turn to turn
        self.sampling = sampling
        self.max_new_tokens = max_new_tokens
        self.system = system
        if system:  # one that fills the context failed every first message as "your message: N tokens; shorten it"
            alone = target.encode([{"role": "system", "content": system}, {"role": "user", "content": "."}]).length
            fit_context(target, alone, 1, what="the system message (--system)", fix="shorten it")
        # a plain transcript (a target without a chat template) also ends a reply where the next turn starts
        self.stop = stop_on_strings(target, turn_stops(stop_strings, target.plain_prompts))
        self.generator = make_generator(seed, target.device)
        self.seed = self.generator.initial_seed()
        self.session = target.session(drafter.feature_layers)
        self.turns: list[Turn] = []
        self._anchor: int | None = None  # the last committed token: the next turn's first to prefill

    def __enter__(self) -> "Conversation":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.session.close()

    @property
    def messages(self) -> list[dict]:
        """The conversation as chat-template messages (images as ``{"type": "image"}`` items)."""
        messages = [{"role": "system", "content": self.system}] if self.system else []
        for turn in self.turns:
            content = [{"type": "image", "image": path} for path in turn.images]
            user = content + [{"type": "text", "text": turn.user}] if turn.images else turn.user
            messages += [{"role": "user", "content": user}, {"role": "assistant", "content": turn.reply}]
        return messages

    @property
    def committed_ids(self) -> torch.Tensor:
        """(L,) every committed token of the conversation: the KV cache plus the anchor."""
        ids = self.session.ids.cpu()
        return ids if self._anchor is None else torch.cat([ids, torch.tensor([self._anchor])])

    def say(self, text: str, images: Sequence[str | Path] = (), *, on_text: Callable[[str], None] | None = None,
            interrupt: Callable[[], bool] | None = None) -> Turn:
        """Add a user message (with images) and generate the reply, reusing the cached turns.

        ``interrupt()`` is polled between rounds (Ctrl-C in the REPL): the reply so far is kept and
        the session stays consistent with it. Nothing changes when the message cannot be encoded
        (missing image, text-only target)."""
        paths = [str(p) for p in images]
        content = [{"type": "image", "image": p} for p in paths] + [{"type": "text", "text": text}]
        message = {"role": "user", "content": content if paths else text}
        inputs = self.target.encode(self.messages + [message])
        try:
            max_new_tokens = fit_context(self.target, inputs.length, self.max_new_tokens, what="your message",
                                         fix="shorten it")
        except MinisparkError:
            if not self.turns:
                raise
            # blame the conversation only when the message alone fits: /reset would not help a message too long
            system = [m for m in self.messages[:1] if m["role"] == "system"]
            fit_context(self.target, self.target.encode(system + [message]).length, self.max_new_tokens,
                        what="your message", fix="shorten it")
            max_new_tokens = fit_context(self.target, inputs.length, self.max_new_tokens, what="the conversation",
                                         fix="/reset to start a new one")
        cached = self.session.cache_length
        result = speculative_generate(
            self.session, inputs, self.drafter, sampling=self.sampling, policy=self.policy,
            max_new_tokens=max_new_tokens, eos_ids=self.target.eos_token_ids, stop=self.stop,
            on_tokens=text_streamer(self.target, on_text) if on_text is not None else None,
            generator=self.generator, reuse=True, interrupt=interrupt, skip=self.skip)
        committed = inputs.input_ids[0].tolist() + result.token_ids
        self._anchor = committed[-1]
        reply = self.target.tokenizer.decode(result.token_ids, skip_special_tokens=True)
        if self.target.plain_prompts:
            reply = reply_text(reply)
        turn = Turn(user=text, images=paths, reply=reply, token_ids=result.token_ids,
                    stop_reason=result.stop_reason, stats=result.stats, prompt_tokens=inputs.length,
                    recomputed_tokens=cached - result.stats.reused_tokens)
        self.turns.append(turn)
        return turn

    def reset(self) -> None:
        """Forget every turn (the system message stays) and empty the KV cache."""
        self.turns.clear()
        self.session.crop(0)
        self._anchor = None

    def totals(self) -> dict:
        """Session-wide figures over all turns (what ``/stats`` shows)."""
        stats = [turn.stats for turn in self.turns]
        rounds = sum(s.rounds for s in stats)
        accepted = sum(sum(s.accepted_lengths) for s in stats)
        proposed = sum(sum(s.proposed_lengths) for s in stats)
        tokens, wall = sum(s.new_tokens for s in stats), sum(s.wall_s for s in stats)
        return {"turns": len(self.turns), "new_tokens": tokens, "wall_s": wall,
                "tokens_per_s": tokens / wall if wall > 0 else 0.0, "rounds": rounds,
                "tau": (accepted + rounds) / rounds if rounds else 0.0,
                "drafts_per_round": proposed / rounds if rounds else 0.0,
                "skipped_rounds": sum(s.skipped_rounds for s in stats),
                "prefill_tokens": sum(s.prefill_tokens for s in stats),
                "reused_tokens": sum(s.reused_tokens for s in stats),
                "recomputed_tokens": sum(t.recomputed_tokens for t in self.turns),
                "kv_cache_tokens": self.session.cache_length}

    def to_json(self) -> dict:
        """The conversation (messages and per-turn figures) as a JSON-ready dict."""
        return {"target": self.target.name, "drafter": self.drafter.name, "system": self.system,
                "seed": self.seed, "sampling": {"temperature": self.sampling.temperature,
                                                "top_p": self.sampling.top_p, "top_k": self.sampling.top_k},
                "messages": self.messages, "turns": [turn.as_dict() for turn in self.turns],
                "totals": self.totals()}
