"""The OpenAI chat-completions and completions requests, checked: JSON body → a :class:`ChatRequest` the worker
decodes, or an :class:`APIError` with the status and OpenAI-style JSON error body the client gets instead.

A completion (``/v1/completions``) takes ``prompt`` (one string, or a list holding one) in place of ``messages``:
the text is given to the model as it is, without the chat template, as a base model is used; the other fields
are the chat request's, and ``echo``, ``suffix`` and ``best_of`` are refused unless they ask for nothing.

What is taken from the request: ``model``, ``messages`` (roles system/developer, user, assistant; content a
string or a list of ``text`` and ``image_url`` parts), ``temperature``, ``top_p``, ``max_tokens`` /
``max_completion_tokens``, ``stop``, ``seed``, ``stream`` (+ ``stream_options.include_usage``) and
``n`` (1 only). Fields that would shape the answer in a way this server does not (``logit_bias``, penalties,
``logprobs``, ``tools`` and ``functions``, audio output …) are refused unless they ask for nothing; OpenAI's
fields that change nothing generated (``user``, ``metadata`` …: ``IGNORED_FIELDS``) are ignored; any other
field is refused, naming it (a misspelling must not pass for a default). Images: ``data:`` URLs are decoded into the
request's own temporary directory (removed once the request is encoded, or refused); a ``file://`` URL or a plain path is read only from under the directory the operator named
(``--image-dir``), after resolving symlinks; ``http(s)`` URLs are refused — this server never fetches from
the network.

    .venv/bin/python -m pytest -q tests/server/test_serve.py -k limits
"""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from minispark.core import checks, model_files
from minispark.core import defaults
from minispark.server import limits
from minispark.core.errors import MinisparkError


class APIError(Exception):
    """An error the client gets as ``{"error": {...}}`` with HTTP ``status``."""

    TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
             404: "invalid_request_error", 413: "invalid_request_error", 415: "invalid_request_error",
             429: "rate_limit_error", 500: "server_error", 503: "server_error"}

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask for (its defaults: :mod:`minispark.server.limits`)."""

    max_body_bytes: int = limits.SERVE_MAX_BODY_BYTES
    body_timeout_s: float = limits.SERVE_BODY_TIMEOUT_S
    max_messages: int = limits.SERVE_MAX_MESSAGES
    max_images: int = limits.SERVE_MAX_IMAGES
    max_image_pixels: int = limits.SERVE_MAX_IMAGE_PIXELS
    max_tokens: int = limits.SERVE_MAX_TOKENS
    default_max_tokens: int = limits.SERVE_DEFAULT_MAX_TOKENS
    queue: int = limits.SERVE_QUEUE


@dataclass
class ChatRequest:
    """A checked request: chat-template messages (images as local paths), or a completion's ``prompt`` text (then
    ``messages`` is empty), and how to decode them."""

    model: str
    messages: list[dict]
    max_tokens: int
    temperature: float = 1.0  # the OpenAI API's default when a request gives none (the CLI's is 0: greedy)
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    images: list[str] = field(default_factory=list)
    prompt: str | None = None


#: Fields that shape the answer which this server does not apply, with the values that ask for nothing: any
#: other value is refused (a client asking for a penalty, top-k, log-probabilities or a tool call got an answer
#: without them, and no word). Fields that change nothing generated (``user``, ``metadata`` …) stay ignored.
_NOT_APPLIED = {"frequency_penalty": (0,), "presence_penalty": (0,), "repetition_penalty": (1,), "top_k": (-1, 0),
                "min_p": (0,), "logit_bias": ({},), "logprobs": (False,), "top_logprobs": (0,), "tools": ([],),
                "tool_choice": ("none", "auto"), "functions": ([],), "function_call": ("none", "auto"),
                "response_format": ({"type": "text"},), "modalities": (["text"],), "audio": (None,),
                "web_search_options": (None,)}


#: The fields this server reads, of a chat request and of a completion.
_READ = ("model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "stream",
         "stream_options", "n")
_READ_COMPLETION = ("model", "prompt", "temperature", "top_p", "max_tokens", "stop", "seed", "stream", "stream_options",
                    "n")
#: A completion's fields with the only values this server applies.
_COMPLETION_NO_OPS = {"echo": (False,), "suffix": (None, ""), "best_of": (1,), "logprobs": (None, 0)}
#: OpenAI's fields that change nothing generated: accepted and ignored (docs/serving.md lists them).
IGNORED_FIELDS = ("user", "metadata", "store", "service_tier", "parallel_tool_calls", "prompt_cache_key",
                  "safety_identifier")


def _known_fields(body: dict, read: tuple[str, ...], no_ops: dict[str, tuple]) -> None:
    """Refuse a field this server neither reads, refuses by value nor ignores: a misspelt ``temprature`` sampled at
    T 1 and ``max_new_tokens`` returned 256 tokens, without a word."""
    known = (*read, *no_ops, *IGNORED_FIELDS)
    unknown = next((name for name in body if name not in known), None)
    if unknown is not None:
        close = difflib.get_close_matches(unknown, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise APIError(400, f"unknown field {unknown!r}: {hint}this server reads {', '.join(read)} (and ignores "
                            f"{', '.join(IGNORED_FIELDS)})", unknown)


def _spelled(value: Any) -> str:
    """A request's value as the client wrote it, in JSON (null, true, "2"), not as Python prints it (None, True,
    '2')."""
    return json.dumps(value)


def _number(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise APIError(400, f"'{name}' must be a number in [{low}, {high}], got {_spelled(value)}", name)
    return float(value)


def _integer(body: dict, name: str) -> int | None:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise APIError(400, f"'{name}' must be an integer, got {_spelled(value)}", name)
    return value


def parse_chat_request(body: Any, limits: ServeLimits, image_dir: Path | None, scratch: Path,
                       vision: bool) -> ChatRequest:
    """Check ``body`` (parsed JSON) against ``limits``; images are written/validated under ``scratch``."""
    request = _decoding_fields(body, limits, _READ, _NOT_APPLIED)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise APIError(400, "'messages' must be a non-empty list", "messages")
    if len(messages) > limits.max_messages:
        raise APIError(400, f"{len(messages)} messages: at most {limits.max_messages} per request", "messages")
    for index, message in enumerate(messages):
        request.messages.append(_message(message, index, request, limits, image_dir, scratch, vision))
    if request.messages[-1]["role"] == "assistant":
        raise APIError(400, "the last message must not be the assistant's (nothing to answer)", "messages")
    return request


def parse_completion_request(body: Any, limits: ServeLimits) -> ChatRequest:
    """Check a ``/v1/completions`` body: its ``prompt`` text and the fields it shares with a chat request."""
    request = _decoding_fields(body, limits, _READ_COMPLETION, _NOT_APPLIED | _COMPLETION_NO_OPS)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:  # the API's batch form, with one prompt
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt.strip():
        raise APIError(400, "'prompt' must be a non-blank string (or a list of one; this server returns one "
                            "choice)", "prompt")
    if checks.lone_surrogate(prompt) is not None:
        raise APIError(400, "'prompt' holds half a character (a lone surrogate), which is not text; send UTF-8",
                       "prompt")
    request.prompt = prompt
    return request


def _decoding_fields(body: Any, limits: ServeLimits, read: tuple[str, ...], no_ops: dict[str, tuple]
                     ) -> ChatRequest:
    """The fields a chat request and a completion share, checked: a request with no messages or prompt yet."""
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    _known_fields(body, read, no_ops)
    model = body.get("model")
    if model is None or model == "":
        raise APIError(400, "'model' is required (GET /v1/models lists it)", "model")
    if not isinstance(model, str):  # given, as a number or a list: "is required" sent the client looking for a typo
        raise APIError(400, f"'model' must be a string (GET /v1/models lists it), got {_spelled(model)}", "model")
    for name, no_op in no_ops.items():
        if body.get(name) is not None and body[name] not in no_op:
            raise APIError(400, f"'{name}' {json.dumps(body[name])}: this server does not apply it; leave it out "
                           f"(or send {json.dumps(no_op[0])})", name)
    n = _integer(body, "n")
    if n not in (None, 1):
        raise APIError(400, f"'n' must be 1 (this server returns one choice), got {n}", "n")
    asked = [(k, _integer(body, k)) for k in ("max_completion_tokens", "max_tokens")]
    if asked[0][1] is not None and asked[1][1] is not None and asked[0][1] != asked[1][1]:  # one was ignored unsaid
        raise APIError(400, f"'max_completion_tokens' {asked[0][1]} and 'max_tokens' {asked[1][1]} disagree; send one "
                       "of them", "max_completion_tokens")
    key, max_tokens = next(((k, v) for k, v in asked if v is not None), ("max_tokens", limits.default_max_tokens))
    if not 1 <= max_tokens <= limits.max_tokens:
        raise APIError(400, f"'{key}' must be in [1, {limits.max_tokens}], got {max_tokens}", key)
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
        raise APIError(400, "'stop' must be a non-empty string or a list of at most 4 of them", "stop")
    if any(checks.lone_surrogate(s) is not None for s in stop):  # it would never match the decoded text
        raise APIError(400, "'stop' holds half a character (a lone surrogate), which is not text; send UTF-8", "stop")
    seed = _integer(body, "seed")
    if seed is not None and not -2**63 <= seed < 2**63:  # past int64 the generator raised: a 500 to every request in flight
        raise APIError(400, f"'seed' must be an integer in [-2**63, 2**63 - 1], got {seed}", "seed")
    stream = False if body.get("stream") is None else body["stream"]  # null is the default, as for every field
    if not isinstance(stream, bool):
        raise APIError(400, f"'stream' must be true or false, got {_spelled(stream)}", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):  # was ignored without a word
        raise APIError(400, f"'stream_options' must be an object, got {_spelled(options)}", "stream_options")
    include_usage = (options or {}).get("include_usage", False)
    if not isinstance(include_usage, bool):  # "no" was taken as true
        raise APIError(400, f"'stream_options.include_usage' must be true or false, got {_spelled(include_usage)}",
                       "stream_options")
    temperature = _number(body, "temperature", ChatRequest.temperature, 0.0, 2.0)
    if 0 < temperature < defaults.MIN_TEMPERATURE:  # refused later, by the decoding thread: the request hung
        raise APIError(400, f"'temperature' {temperature:g}: a positive temperature must be at least "
                       f"{defaults.MIN_TEMPERATURE:g} (0 is greedy)", "temperature")
    return ChatRequest(model=model, messages=[], max_tokens=max_tokens, temperature=temperature,
                       top_p=_number(body, "top_p", ChatRequest.top_p, 1e-6, 1.0), stop=stop, seed=seed, stream=stream,
                       include_usage=include_usage)


def _message(message: Any, index: int, request: ChatRequest, limits: ServeLimits, image_dir: Path | None,
             scratch: Path, vision: bool) -> dict:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise APIError(400, f"{where} must be an object", "messages")
    role = "system" if message.get("role") == "developer" else message.get("role")  # a list or object: a 400 too
    if role not in ("system", "user", "assistant"):
        raise APIError(400, f"{where}.role {_spelled(message.get('role'))}: expected system, developer, user or "
                       "assistant", "messages")
    content = message.get("content")
    if isinstance(content, str):
        _not_blank(role, [content], where)
        return {"role": role, "content": content}
    if not isinstance(content, list) or not content:
        raise APIError(400, f"{where}.content must be a string or a non-empty list of parts", "messages")
    parts = []
    for k, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":  # its text not a string: 'expected a text part' blamed the part's type, which was right
            if not isinstance(part.get("text"), str):
                raise APIError(400, f"{where}.content[{k}].text must be a string", "messages")
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image_url" and role == "user":
            if not vision:
                raise APIError(400, f"{where}.content[{k}]: the served model is text-only; it cannot take images",
                               "messages")
            if len(request.images) >= limits.max_images:
                raise APIError(400, f"more than {limits.max_images} images in one request", "messages")
            url = part.get("image_url", {}).get("url") if isinstance(part.get("image_url"), dict) else None
            path = _image(url, f"{where}.content[{k}]", limits, image_dir, scratch)
            request.images.append(path)
            parts.append({"type": "image", "image": path})
        else:
            raise APIError(400, f"{where}.content[{k}]: expected a text part{' or an image_url part' * (role == 'user')}",
                           "messages")
    if not any(p["type"] == "image" for p in parts):
        _not_blank(role, [p["text"] for p in parts], where)
    if role != "user":  # system and assistant turns are text: the template renders a string
        return {"role": role, "content": "".join(p["text"] for p in parts)}
    return {"role": role, "content": parts}


def _not_blank(role: str, texts: list[str], where: str) -> None:
    """Refuse a user turn with no text but whitespace (and no image): the model was asked to answer nothing, and
    answered whatever the template's empty turn suggests (``--prompt ""`` is refused the same way)."""
    if role == "user" and not "".join(texts).strip():
        raise APIError(400, f"{where}: the user message is empty or blank; send the text to answer", "messages")


DATA_URL = re.compile(r"data:image/[\w.+-]+;base64,(.*)", re.S)


def _image(url: Any, where: str, limits: ServeLimits, image_dir: Path | None, scratch: Path) -> str:
    """A local, validated image file for ``url``: a decoded data URL, or a file under ``image_dir``."""
    if not isinstance(url, str) or not url:
        raise APIError(400, f"{where}: image_url.url must be a string", "messages")
    if match := DATA_URL.match(url):
        try:
            data = base64.b64decode(match.group(1), validate=True)
        except (binascii.Error, ValueError):
            raise APIError(400, f"{where}: the data URL is not valid base64", "messages") from None
        path = scratch / f"{hashlib.sha256(data).hexdigest()[:24]}.img"
        path.write_bytes(data)
    elif url[:5].lower() == "data:":  # "data:;base64,..." was read as a file name: a 500 (name too long)
        raise APIError(400, f"{where}: a data URL must read data:image/TYPE;base64,DATA", "messages")
    elif re.match(r"[a-z][a-z0-9+.-]*://", url, re.I) and not url.lower().startswith("file://"):
        raise APIError(400, f"{where}: only data: URLs (and files under the server's --image-dir) are "
                            "accepted; this server never fetches from the network", "messages")
    else:
        if image_dir is None:
            raise APIError(400, f"{where}: local image files are off (the server was started without "
                                "--image-dir); send the image as a data: URL", "messages")
        path = _local_path(url, where)
        try:
            path = (image_dir / path if not path.is_absolute() else path).resolve()
            usable = path.is_relative_to(image_dir.resolve()) and path.is_file()
        except (OSError, ValueError):  # a name too long, a NUL byte: no such file, not a 500
            usable = False
        if not usable:
            raise APIError(400, f"{where}: {url} is not a file under the server's --image-dir", "messages")
    _check_pixels(path, where, limits)
    return str(path)


def _local_path(url: str, where: str) -> Path:
    """A plain path, or a ``file://`` URI as ``Path.as_uri()`` writes it (percent-encoded; no host or
    ``localhost``): ``file:///srv/my%20photo.png`` names ``/srv/my photo.png``."""
    if not url.lower().startswith("file://"):
        return Path(url)
    parsed = urlsplit(url)
    if parsed.netloc.lower() not in ("", "localhost"):
        raise APIError(400, f"{where}: {url} names another machine ({parsed.netloc}); a file URI here is "
                            "file:///path or file://localhost/path", "messages")
    return Path(unquote(parsed.path))


def _check_pixels(path: Path, where: str, limits: ServeLimits) -> None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            width, height = image.size
    except Image.DecompressionBombError:  # PIL refuses to open one claiming billions of pixels: too large, not unreadable
        raise APIError(413, f"{where}: far more pixels than PIL opens; at most {limits.max_image_pixels:,} per image",
                       "messages", "image_too_large") from None
    except (UnidentifiedImageError, OSError):
        raise APIError(400, f"{where}: not an image PIL can read", "messages") from None
    if width * height > limits.max_image_pixels:
        raise APIError(413, f"{where}: {width}x{height} pixels; at most {limits.max_image_pixels:,} per image",
                       "messages", "image_too_large")
    try:
        model_files.image(path, flag=where)  # decodes it: a truncated file fails here, not in the processor
    except MinisparkError as exc:  # without the server's scratch file name, which means nothing to the client
        raise APIError(400, str(exc).replace(f"{where} {path}:", f"{where}:"), "messages") from None
