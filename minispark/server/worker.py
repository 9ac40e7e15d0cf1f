"""The decoding thread behind ``minispark serve``: a bounded queue of jobs, R slots, text events back.

HTTP handlers (asyncio) encode a request and :meth:`Worker.submit` it; one thread owns the target and
decodes. With one slot each job runs through the single-request engine (``engine.speculative_generate``:
the length policy and draft-skip ``generate``/``chat`` use, the KV cache of the previous conversation
reused for a matching prefix). With R > 1 slots the jobs in flight are stepped together by
:class:`~minispark.serving.batched.BatchDecoder` (one verify forward per round, Algorithm 1 across
requests). Each job gets its text as it is committed (``delta`` events, stop strings held back so
they never reach the client) and a ``done`` event with the result. A job whose client went away is
cancelled between rounds and its slot freed; :meth:`Worker.drain` refuses new jobs (503) and lets
the ones in flight and queued finish; :meth:`Worker.abort` (a second Ctrl-C) answers every one of them
503 at once and stops decoding after the current round.

    .venv/bin/python -m pytest -q tests/server/test_serve.py -k disconnect
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from minispark.server.limits import SERVE_RESERVED_CORES
from minispark.server.protocol import APIError, ChatRequest
from minispark.serving.batched import BatchDecoder, BatchRequest
from minispark.serving.builder import ServingSetup
from minispark.serving.engine import GenerationStats, speculative_generate
from minispark.serving.draft_skip import BatchDraftSkip
from minispark.serving.draft_tree import TreePolicy
from minispark.serving.generate import stop_on_strings
from minispark.target.plain_prompts import turn_stops
from minispark.target.sampling import SamplingConfig, make_generator
from minispark.target.loading import Target
from minispark.target.session import PromptInputs


@dataclass
class Job:
    """One chat completion or completion between the HTTP handler (``events``, on its event loop) and the worker."""

    request: ChatRequest
    inputs: PromptInputs
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    created: float = field(default_factory=time.time)
    batch: BatchRequest | None = None
    sent: str = ""  # text already sent as deltas
    ids: list[int] = field(default_factory=list)  # committed ids so far (the single-request path)

    def emit(self, kind: str, value: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the handler's event loop is closed (the server stopped): nobody is listening
            pass


def cut_at_stop(text: str, stops: list[str]) -> tuple[str, bool]:
    """``text`` up to the first stop string (excluded, as OpenAI does), and whether one was found."""
    hits = [text.find(s) for s in stops if s in text]
    return (text[: min(hits)], True) if hits else (text, False)


class Worker:
    """Owns the target; decodes submitted jobs on its own thread (see the module docstring)."""

    def __init__(self, target: Target, setup: ServingSetup, slots: int, queue: int) -> None:
        self.target, self.setup, self.slots, self.queue_limit = target, setup, slots, queue
        self.pending: deque[Job] = deque()
        self.running: dict[int, Job] = {}  # id(batch request) → job
        self.cond = threading.Condition()
        self.accepting = True
        self._stop = False
        self.aborted: APIError | None = None  # set by abort(): what every job still unanswered gets
        self.completed = 0
        self.cancelled = 0  # jobs stopped unfinished: their client went away, or abort()
        self.decoder: BatchDecoder | None = None
        self.session = None
        if target.threads is not None:  # the governor picks torch's threads: one core stays with the event loop
            target.threads.reserve(SERVE_RESERVED_CORES)
        if slots > 1:
            # several requests in flight verify together: Algorithm 1 across them, over chains or trees' nodes
            schedule = setup.sps_table if setup.mode in ("schedule", "tree") else None
            skip = BatchDraftSkip() if setup.batch_skip else None  # draft-skip per round of R requests
            tree = setup.policy if isinstance(setup.policy, TreePolicy) else None
            self.decoder = BatchDecoder(target, setup.drafter, slots, setup.gamma, schedule, setup.calibration,
                                        skip=skip, tree=tree)
        else:
            self.session = target.session(setup.drafter.feature_layers)
        self.thread = threading.Thread(target=self._loop, name="minispark-decode", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ the handler side
    def submit(self, job: Job) -> None:
        with self.cond:
            if not self.accepting:
                raise APIError(503, "the server is shutting down; not taking new requests", code="shutting_down")
            # pending jobs the free slots will take at once are not waiting: --queue 0 still serves a free slot
            waiting = len(self.pending) - max(0, self.slots - len(self.running))
            if waiting >= self.queue_limit:
                raise APIError(429, f"{max(waiting, 0)} requests are already waiting for a slot (queue limit "
                                    f"{self.queue_limit}); retry later", code="queue_full")
            self.pending.append(job)
            self.cond.notify()

    def load(self) -> dict:
        with self.cond:
            return {"in_flight": len(self.running), "queued": len(self.pending), "slots": self.slots,
                    "completed": self.completed, "cancelled": self.cancelled, "accepting": self.accepting}

    def drain(self, timeout: float | None = None) -> bool:
        """Refuse new jobs, finish the queued and running ones, stop the thread; False on timeout."""
        with self.cond:
            self.accepting = False
            self._stop = True
            self.cond.notify()
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def abort(self, error: APIError) -> None:
        """Stop at once: refuse new jobs, answer every queued and in-flight job with ``error`` and stop decoding
        after the current round; :meth:`drain` then only joins the thread. Callable from any thread; a second
        call does nothing."""
        with self.cond:
            if self.aborted is not None:
                return
            self.aborted, self.accepting, self._stop = error, False, True
            jobs = [*self.pending, *self.running.values()]
            self.cancelled += len(self.pending)
            self.pending.clear()
            self.cond.notify()
        for job in jobs:
            job.cancelled.set()
            job.emit("error", error)  # now, not after the round in progress: the client need not wait for it

    # ------------------------------------------------------------------ the decoding thread
    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            with self.cond:
                while not self.pending and not self.running and not self._stop:
                    self.cond.wait(0.5)
                if self._stop and not self.pending and not self.running:
                    break
            try:
                if self.decoder is None:
                    self._run_single()
                else:
                    self._run_round()
            except Exception as exc:  # a failed forward: every job in flight gets a 500, the slots are reset
                self._fail_all(exc)
        if self.decoder is not None:
            self.decoder.close()
        elif self.session is not None:
            self.session.close()

    def _next_job(self) -> Job | None:
        with self.cond:
            while self.pending:
                job = self.pending.popleft()
                if not job.cancelled.is_set():
                    return job
        return None

    def _sampling(self, request: ChatRequest) -> SamplingConfig:
        return SamplingConfig(request.temperature, top_p=request.top_p)

    def _stops(self, request: ChatRequest) -> list[str]:
        """The request's stop strings; a chat request to a target without a chat template also stops where its
        transcript (``plain_prompts.py``) starts the user's next turn."""
        return turn_stops(request.stop, self.target.plain_prompts and request.prompt is None)

    def _run_single(self) -> None:
        job = self._next_job()
        if job is None:
            return
        with self.cond:
            self.running[0] = job  # a failure below leaves it there: _fail_all answers it with a 500
        request = job.request
        result = speculative_generate(
            self.session, job.inputs, self.setup.drafter, sampling=self._sampling(request),
            policy=self.setup.policy, max_new_tokens=self._room(job), eos_ids=self.target.eos_token_ids,
            stop=stop_on_strings(self.target, self._stops(request)), on_tokens=lambda ids: self._stream(job, ids),
            generator=make_generator(request.seed, self.target.device), reuse=True,
            interrupt=lambda: job.cancelled.is_set() or self.aborted is not None, skip=self.setup.skip)
        with self.cond:
            self.running.pop(0, None)
        self._done(job, result.token_ids, result.stop_reason, result.stats)

    def _run_round(self) -> None:
        decoder = self.decoder
        for batch in decoder.active:  # clients that went away: free their slots first
            job = self.running[id(batch)]
            if job.cancelled.is_set() or self.aborted is not None:
                decoder.cancel(batch)
                with self.cond:
                    del self.running[id(batch)]
                self._done(job, batch.token_ids, "cancelled", batch.stats)
        while decoder.free and (job := self._next_job()) is not None:
            request = job.request
            job.batch = BatchRequest(job.inputs, self._room(job), self._sampling(request),
                                     stop_on_strings(self.target, self._stops(request)),
                                     on_tokens=lambda ids, job=job: self._stream(job, ids), seed=request.seed)
            with self.cond:
                self.running[id(job.batch)] = job
            decoder.start(job.batch)
        for batch in decoder.step():
            with self.cond:
                job = self.running.pop(id(batch))
            self._done(job, batch.token_ids, batch.stop_reason, batch.stats)

    def _room(self, job: Job) -> int:
        return self.target.room(job.inputs.length, job.request.max_tokens)

    def _stream(self, job: Job, ids: list[int]) -> None:
        """Committed ids → the new text, holding back what could still become a stop string."""
        if job.batch is not None:
            ids = job.batch.token_ids
        else:
            job.ids.extend(ids)
            ids = job.ids
        text = self.target.tokenizer.decode(ids, skip_special_tokens=True)
        stops = self._stops(job.request)
        text, stopped = cut_at_stop(text, stops)
        hold = 0 if stopped else max((len(s) - 1 for s in stops), default=0)
        ready = text[: len(text) - hold] if hold else text
        if ready.endswith("\ufffd"):  # a character split across tokens: wait for the rest
            return
        if len(ready) > len(job.sent):
            job.emit("delta", ready[len(job.sent):])
            job.sent = ready

    def _done(self, job: Job, token_ids: list[int], reason: str, stats: GenerationStats) -> None:
        text, _ = cut_at_stop(self.target.tokenizer.decode(token_ids, skip_special_tokens=True),
                              self._stops(job.request))
        if len(text) > len(job.sent) and text.startswith(job.sent):
            job.emit("delta", text[len(job.sent):])
            job.sent = text
        gone = reason in ("interrupted", "cancelled")
        with self.cond:
            self.completed += 1
            self.cancelled += gone
        if gone:
            # after abort() a job taken from the queue just as abort() looked is answered only here (the others a
            # second time, which no handler reads: each stops at its first answer); otherwise nobody is listening
            if self.aborted is not None:
                job.emit("error", self.aborted)
            return
        room = self._room(job)
        cut = {"max_tokens_cut_to": room} if room < job.request.max_tokens else {}  # the context left less room
        job.emit("done", {"text": text, "finish_reason": "length" if reason == "max_tokens" else "stop",
                          "prompt_tokens": job.inputs.length, "completion_tokens": len(token_ids),
                          "metrics": metrics(stats, self.setup) | cut})

    def _fail_all(self, exc: Exception) -> None:
        with self.cond:
            jobs = list(self.running.values())
            self.running.clear()
        if self.decoder is not None:
            for i, session in enumerate(self.decoder.sessions):
                self.decoder.requests[i] = None
                session.crop(0)
        elif self.session is not None:
            self.session.crop(0)
        for job in jobs:
            job.emit("error", APIError(500, f"decoding failed: {type(exc).__name__}: {exc}"))


def metrics(stats: GenerationStats, setup: ServingSetup) -> dict:
    """Per-request speculative figures (the response's ``minispark`` field)."""
    return {"drafter": setup.drafter.name, "mode": setup.mode, "rounds": stats.rounds,
            "skipped_rounds": stats.skipped_rounds, "tau": stats.tau, "verify_width": stats.verify_width,
            "accepted_depth": stats.accepted_depth,
            "drafted_tokens": sum(stats.proposed_lengths), "accepted_tokens": sum(stats.accepted_lengths),
            "acceptance_per_position": stats.acceptance_per_position, "prefill_tokens": stats.prefill_tokens,
            "reused_tokens": stats.reused_tokens, "wall_s": stats.wall_s, "tokens_per_s": stats.tokens_per_s}
