"""``minispark serve``: an OpenAI-compatible HTTP server (FastAPI + uvicorn, server-sent events via sse-starlette).

Routes: ``POST /v1/chat/completions`` (streamed or not; the response's extra ``minispark`` field carries the
request's speculative figures: τ, drafted/accepted tokens, rounds), ``POST /v1/completions`` (a prompt given as
plain text, without the chat template: a base model's use), ``GET /v1/models`` (and ``/v1/models/ID``),
``GET /health``.
Safe by default: it binds loopback unless given another ``host``; a request must name the server by an IP
address, ``localhost`` or an allowed name and post JSON as JSON, and with an ``api_key`` every ``/v1`` route
wants ``Authorization: Bearer <key>`` (:mod:`minispark.server.guard`); every limit (:class:`~minispark.server.protocol.ServeLimits`) and every
failure is an OpenAI-style JSON error with its status (400/401/404/413/429/500/503), never a traceback. A
client that disconnects frees its slot; Ctrl-C (uvicorn's graceful shutdown) lets in-flight requests
finish, then the worker drains and the process exits; a second Ctrl-C, or the end of the drain, stops at
once: every request still unanswered gets a 503 ``shutting_down`` (:func:`stopping_server`).
:class:`LocalServer` runs one in a thread on 127.0.0.1 with a free port and stops it by itself (tests,
the load benchmark).

    minispark serve --target /tmp/tiny-llama --port 8000   # then: curl localhost:8000/v1/models
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, TypeVar

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sse_starlette.sse import EventSourceResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from minispark.server.limits import SERVE_BODY_TIMEOUT_S, SERVE_DRAIN_S, SERVE_HOST, SERVE_PORT
from minispark.core.atomic import abandoned, hold_lock
from minispark.core.errors import DuplicateKey, MinisparkError, json_reason, unique_keys
from minispark.server.guard import Guard
from minispark.server.protocol import APIError, ChatRequest, ServeLimits, parse_chat_request, parse_completion_request
from minispark.server.worker import Job, Worker
from minispark.serving.batched import fork_drafter
from minispark.serving.builder import ServingSetup
from minispark.target.loading import Target

if TYPE_CHECKING:
    import uvicorn

T = TypeVar("T")


@dataclass
class ServeConfig:
    """How the server answers: the model id it lists, the key it wants, its limits and image directory."""

    model_id: str
    api_key: str | None = None
    limits: ServeLimits = field(default_factory=ServeLimits)
    image_dir: Path | None = None
    allowed_hosts: tuple[str, ...] = ()  # Host names served besides IP addresses and localhost (guard.py)
    slots: int = 1
    drain_s: float = SERVE_DRAIN_S


def server_url(host: str, port: int) -> str:
    """The base URL a client reaches ``host:port`` at: an IPv6 address in brackets (``http://::1:8000`` is no URL)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def served_model_id(target: Target) -> str:
    """The id ``/v1/models`` lists: the target's name, a local directory by its last component."""
    return Path(target.name).name if "/" in target.name and Path(target.name).is_dir() else target.name


async def read_body(request: Request, limit: int, timeout_s: float = SERVE_BODY_TIMEOUT_S) -> object:
    """The JSON body, refusing one larger than ``limit`` bytes (413) before reading it all, and one that has not
    arrived whole within ``timeout_s`` seconds (408)."""
    header = request.headers.get("content-length")
    declared = int(header) if header is not None and header.isdigit() else None
    if declared is not None and declared > limit:
        raise APIError(413, f"request body of {declared:,} bytes; at most {limit:,}", code="body_too_large")
    chunks, size = [], 0
    try:
        # a Content-Length larger than what the client sends kept the handler waiting with no end
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise APIError(413, f"request body over {limit:,} bytes", code="body_too_large")
                chunks.append(chunk)
    except TimeoutError:
        of = f" of the {declared:,} its Content-Length gives" if declared is not None else ""
        raise APIError(408, f"the request body did not arrive within {timeout_s:g} s ({size:,} bytes{of}); send it "
                            "whole", code="body_timeout") from None
    except ClientDisconnect:  # gone before its whole body came: uvicorn logged the traceback of an ordinary hang-up
        raise APIError(400, "the client disconnected before sending the whole request body") from None
    try:
        # JSON over HTTP is UTF-8 (RFC 8259; a leading BOM tolerated): json.loads on bytes would guess UTF-16/32
        # from the first bytes and report a body starting \xff\xfe as some unrelated JSON error.
        text = (b"".join(chunks) or b"null").decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise APIError(400, f"the request body is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                            f"{exc.start}); send JSON as UTF-8") from None
    try:
        return json.loads(text, object_pairs_hook=unique_keys)
    except DuplicateKey as exc:  # {"max_tokens": 2, "max_tokens": 5}: the last one was used without a word
        raise APIError(400, f"the request body gives {exc.args[0]!r} twice; send it once") from None
    except (ValueError, RecursionError) as exc:  # RecursionError, [[[[...]]]]: a 500 before
        raise APIError(400, f"the request body is not valid JSON ({json_reason(exc)})") from None


def json_error_protocol() -> type:
    """uvicorn's h11 protocol, answering a request it cannot parse (a negative or non-numeric Content-Length, a
    malformed header line) with the JSON 400 every other error gets: h11 refuses it before the app sees a request,
    and uvicorn answered plain text. Pinned to h11 (uvicorn's ``auto`` would take httptools where installed, whose
    refusal is plain text too), so every client sees one error format."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class JSONErrorH11Protocol(H11Protocol):
        def send_400_response(self, msg: str) -> None:
            body = json.dumps(APIError(400, "the request is not valid HTTP/1.1 (a malformed header, e.g. a negative "
                                            "or non-numeric Content-Length)", code="bad_http").body()).encode()
            headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                          h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return JSONErrorH11Protocol


#: After a second Ctrl-C, how long the handlers get to send their 503s before the connections still open are
#: dropped (a client that does not read its answer), and as long again before uvicorn cancels what is left.
STOP_GRACE_S = 1.0

SHUTTING_DOWN = "the server is shutting down; the request was cancelled before it finished"


def stop_requests(app: FastAPI) -> bool:
    """Answer every request still open with a 503 ``shutting_down`` now: the worker's queued and in-flight jobs
    (:meth:`~minispark.server.worker.Worker.abort`) and the handlers still reading a body (:func:`until_stopped`).
    False when there was nothing to stop: the lifespan never started, or this ran before. On the loop's thread."""
    worker: Worker | None = getattr(app.state, "worker", None)
    if worker is None or worker.aborted is not None:
        return False
    app.state.stopping.set()
    worker.abort(APIError(503, SHUTTING_DOWN, code="shutting_down"))
    return True


async def until_stopped(work: Awaitable[T], stopping: asyncio.Event) -> T:
    """``work``'s result, or a 503 once :func:`stop_requests` ran: a client still sending its body when the server
    stops at once is answered, not cut off."""
    task, stop = asyncio.ensure_future(work), asyncio.ensure_future(stopping.wait())
    try:
        done, _ = await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:  # cancelled itself (the server's end) or stopped: neither wait outlives the call
        stop.cancel()
        if not task.done():
            task.cancel()
    if task not in done:
        raise APIError(503, SHUTTING_DOWN, code="shutting_down")
    return task.result()


def stopping_server(config: uvicorn.Config, drain_s: float) -> uvicorn.Server:
    """uvicorn's Server, whose shutdown ends in answers, never in tracebacks. The first SIGINT/SIGTERM drains as
    uvicorn does (requests in flight and queued finish); a second one, or ``drain_s`` after the first, aborts the
    worker (:meth:`~minispark.server.worker.Worker.abort`): every handler answers its client a JSON 503 within
    milliseconds, the connections close and the app shuts down as after a drain. uvicorn's own second SIGINT
    (``force_exit``) skipped the app's shutdown and cancelled the handlers: ``CancelledError`` tracebacks,
    text/plain 500s, and the worker decoding on. Later signals change nothing (Ctrl-C pressed over and over):
    what is left after :data:`STOP_GRACE_S` is dropped anyway."""
    import uvicorn

    class StoppingServer(uvicorn.Server):
        stopping = False  # the worker is (being) aborted

        async def serve(self, sockets: list[socket.socket] | None = None) -> None:
            self.loop = asyncio.get_running_loop()  # signal handlers hand their work to it
            await super().serve(sockets)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # a signal handler interrupts the loop's thread anywhere (inside Worker.submit, say): it only schedules
            if not self.should_exit:
                super().handle_exit(sig, frame)
                self.loop.call_soon_threadsafe(self.loop.call_later, drain_s, self.stop_now)
            elif not self.stopping:
                self.stopping = True
                self.loop.call_soon_threadsafe(self.stop_now)

        def stop_now(self) -> None:
            self.stopping = True
            if stop_requests(self.config.app):
                self.loop.call_later(STOP_GRACE_S, self.drop_connections)

        def drop_connections(self) -> None:
            # to the handlers a dropped connection is a client gone (an ordinary end, no traceback), where uvicorn's
            # force_exit cancels them (a traceback each); abort(), not close(): close() waits to flush to the client
            for connection in list(self.server_state.connections):
                if connection.transport is not None:
                    connection.transport.abort()
            self.loop.call_later(STOP_GRACE_S, setattr, self, "force_exit", True)

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await super().shutdown(sockets)
            # uvicorn skips the app's shutdown when forced, and its lifespan task dies with a traceback (a second
            # call, had it run it, returns at once)
            if self.force_exit:
                await self.lifespan.shutdown()

    return StoppingServer(config)


#: The server's temporary directory (decoded ``data:`` URL images) is ``<tmp>/minispark-serve-*``.
SCRATCH_PREFIX = "minispark-serve-"


def scratch_dir() -> tuple[tempfile.TemporaryDirectory, int]:
    """A new temporary directory for this server and a descriptor holding its lock (close it after the cleanup):
    what a killed server left (a SIGKILL runs no cleanup; its images stayed in /tmp for ever) goes first, and
    only that, as :func:`minispark.core.atomic.abandoned` tells: no live server holds its lock."""
    for stale in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        if stale.is_dir() and abandoned(stale):
            shutil.rmtree(stale, ignore_errors=True)
    scratch = tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX)
    held = os.open(scratch.name, os.O_RDONLY)
    hold_lock(held)
    return scratch, held


def create_app(target: Target, setup: ServingSetup, config: ServeConfig) -> FastAPI:
    """The FastAPI app; its lifespan starts the decoding worker and drains it on shutdown."""
    if config.slots > 1:
        fork_drafter(setup.drafter)  # a drafter that cannot be in flight R times: refused before binding
    scratch, held = scratch_dir()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.worker = Worker(target, setup, config.slots, config.limits.queue)
        app.state.stopping = asyncio.Event()  # set by stop_requests
        try:
            yield
        finally:
            await run_in_threadpool(app.state.worker.drain, config.drain_s)
            scratch.cleanup()
            os.close(held)

    app = FastAPI(title="minispark", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.scratch = Path(scratch.name)

    @app.exception_handler(APIError)
    async def api_error(_request: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(APIError(exc.status_code, str(exc.detail)).body(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def any_error(_request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(APIError(500, f"internal error: {type(exc).__name__}").body(), status_code=500)

    app.add_middleware(Guard, api_key=config.api_key, allowed_hosts=config.allowed_hosts)

    @app.get("/health")
    async def health() -> dict:
        worker: Worker = app.state.worker
        load = worker.load()
        return {"status": "ok" if load["accepting"] else "draining", "model": config.model_id, **load}

    served = {"id": config.model_id, "object": "model", "created": 0, "owned_by": "minispark"}

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [served]}

    @app.get("/v1/models/{model:path}")  # a path: a local target's id may hold a slash
    async def model(model: str) -> dict:
        if model != config.model_id:
            raise APIError(404, f"model {model!r} is not served here; GET /v1/models lists {config.model_id!r}",
                           "model", "model_not_found")
        return served

    async def submit(http: Request, parse: Callable[[Any, Path], ChatRequest], shape: ResponseShape) -> Any:
        """Read, parse (``parse(body, scratch)``) and encode one request of the route's ``shape``, queue it, and
        answer it."""
        worker: Worker = app.state.worker
        body = await until_stopped(read_body(http, config.limits.max_body_bytes, config.limits.body_timeout_s),
                                   app.state.stopping)
        # the request's decoded images live only until it is encoded (or refused): the disk never fills with them
        images = Path(tempfile.mkdtemp(dir=scratch.name))
        blamed = "messages" if shape.chat else "prompt"
        try:
            request = parse(body, images)
            if request.model != config.model_id:
                raise APIError(404, f"model {request.model!r} is not served here; GET /v1/models lists "
                                    f"{config.model_id!r}", "model", "model_not_found")
            inputs = await (run_in_threadpool(target.encode, request.messages) if shape.chat
                            else run_in_threadpool(target.encode_text, request.prompt))
        except MinisparkError as exc:
            raise APIError(400, str(exc), blamed) from None
        finally:
            shutil.rmtree(images, ignore_errors=True)
        context = target.context_limit
        if context is not None and inputs.length >= context:
            raise APIError(400, f"the prompt is {inputs.length} tokens; the model's context is {context}",
                           blamed, "context_length_exceeded")
        if inputs.length < 2:
            raise APIError(400, "the prompt renders to fewer than 2 tokens", blamed)
        job = Job(request, inputs, asyncio.get_running_loop())
        worker.submit(job)
        completion_id = f"{shape.id_prefix}-{uuid.uuid4().hex[:24]}"
        if request.stream:
            # On shutdown sse-starlette would cut every stream at once; the grace period lets it finish (Ctrl-C
            # drains) and outlasts the drain, so a stream still open then ends with the worker's 503, not a cut.
            return EventSourceResponse(_stream(job, shape, completion_id, config.model_id), ping=15,
                                       shutdown_event=anyio.Event(),
                                       shutdown_grace_period=config.drain_s + STOP_GRACE_S)
        return await _complete(job, http, shape, completion_id, config.model_id)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await submit(request, lambda body, images: parse_chat_request(
            body, config.limits, config.image_dir, images, target.is_vlm), CHAT)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await submit(request, lambda body, images: parse_completion_request(body, config.limits), COMPLETION)

    return app


@dataclass(frozen=True)
class ResponseShape:
    """How an answer is written back: a chat completion's message and deltas, or a completion's text."""

    id_prefix: str
    object: str
    chunk_object: str
    chat: bool

    def choice(self, text: str, finish: str) -> dict:
        body = {"message": {"role": "assistant", "content": text}} if self.chat else {"text": text}
        return {"index": 0, **body, "finish_reason": finish, "logprobs": None}

    def delta(self, text: str | None, finish: str | None = None, first: bool = False) -> dict:
        """A streamed choice: ``text`` new text (None: none, the closing chunk); a chat stream's first names the role."""
        if not self.chat:
            return {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}
        delta = {"role": "assistant", "content": ""} if first else {} if text is None else {"content": text}
        return {"index": 0, "delta": delta, "finish_reason": finish}


CHAT = ResponseShape("chatcmpl", "chat.completion", "chat.completion.chunk", chat=True)
COMPLETION = ResponseShape("cmpl", "text_completion", "text_completion", chat=False)

#: How often a non-streaming request looks for its client's hang-up, in seconds.
DISCONNECT_CHECK_S = 0.25


async def _complete(job: Job, request: Request, shape: ResponseShape, completion_id: str, model: str) -> JSONResponse:
    """Wait for the whole answer; a client that hangs up meanwhile cancels the job (frees its slot). The hang-up
    is looked for every quarter second by the clock: the job's text events arrive faster than that, and a check
    made only when none came for a quarter second never ran."""
    loop = asyncio.get_running_loop()
    check = loop.time() + DISCONNECT_CHECK_S
    while True:
        try:
            kind, value = await asyncio.wait_for(job.events.get(), timeout=max(0.0, check - loop.time()))
        except asyncio.TimeoutError:
            kind, value = None, None
        if loop.time() >= check:
            if await request.is_disconnected():
                job.cancelled.set()
                return JSONResponse({}, status_code=499)
            check = loop.time() + DISCONNECT_CHECK_S
        if kind == "error":
            raise value
        if kind == "done":
            return JSONResponse({
                "id": completion_id, "object": shape.object, "created": int(job.created), "model": model,
                "choices": [shape.choice(value["text"], value["finish_reason"])],
                "usage": _usage(value), "minispark": value["metrics"]})


def _usage(done: dict) -> dict:
    return {"prompt_tokens": done["prompt_tokens"], "completion_tokens": done["completion_tokens"],
            "total_tokens": done["prompt_tokens"] + done["completion_tokens"]}


async def _stream(job: Job, shape: ResponseShape, completion_id: str, model: str) -> AsyncIterator[dict]:
    """Chunk events (``chat.completion.chunk`` or ``text_completion``), then ``[DONE]``; cancelled (client gone) →
    the job is cancelled."""
    def chunk(choice: dict, **extra) -> dict:
        body = {"id": completion_id, "object": shape.chunk_object, "created": int(job.created), "model": model,
                "choices": [choice], **extra}
        return {"data": json.dumps(body)}

    try:
        if shape.chat:
            yield chunk(shape.delta("", first=True))
        while True:
            kind, value = await job.events.get()
            if kind == "delta":
                yield chunk(shape.delta(value))
            elif kind == "error":
                yield {"data": json.dumps(value.body())}
                break
            elif kind == "done":
                yield chunk(shape.delta(None, value["finish_reason"]), minispark=value["metrics"])
                if job.request.include_usage:
                    yield {"data": json.dumps({"id": completion_id, "object": shape.chunk_object,
                                               "created": int(job.created), "model": model, "choices": [],
                                               "usage": _usage(value)})}
                break
        yield {"data": "[DONE]"}
    finally:
        job.cancelled.set()  # a no-op once done; frees the slot when the client went away mid-stream


def run_server(target: Target, setup: ServingSetup, config: ServeConfig, host: str = SERVE_HOST,
               port: int = SERVE_PORT) -> None:
    """Serve until Ctrl-C (SIGINT/SIGTERM): then in-flight requests finish (up to ``config.drain_s``); a second
    Ctrl-C answers them 503 and exits at once (:func:`stopping_server`)."""
    import uvicorn

    # uvicorn's own timeout cancels the handlers (tracebacks): a backstop behind the drain's end and its answers
    timeout = math.ceil(config.drain_s + STOP_GRACE_S) + 1
    server = stopping_server(uvicorn.Config(create_app(target, setup, config), host=host, port=port,
                                            http=json_error_protocol(), log_level="warning",
                                            timeout_graceful_shutdown=timeout), config.drain_s)
    server.run()


class LocalServer:
    """A server on 127.0.0.1 and a free port, in a thread; stops on ``__exit__`` or after ``lifetime_s``.

        with LocalServer(target, setup, config) as url:   # url = "http://127.0.0.1:PORT"
            ...
    """

    def __init__(self, target: Target, setup: ServingSetup, config: ServeConfig, lifetime_s: float = 600.0) -> None:
        import uvicorn

        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", 0))
        self.host, self.port = self.socket.getsockname()
        self.server = uvicorn.Server(uvicorn.Config(create_app(target, setup, config), http=json_error_protocol(),
                                                    log_level="warning",
                                                    timeout_graceful_shutdown=int(config.drain_s)))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.timer = threading.Timer(lifetime_s, self.stop)
        self.timer.daemon = True

    @property
    def url(self) -> str:
        return server_url(self.host, self.port)

    def __enter__(self) -> str:
        self.thread.start()
        self.timer.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()
        self.stop()
        self.thread.join(30)
        self.socket.close()
