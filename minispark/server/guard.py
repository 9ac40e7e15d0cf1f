"""Who may talk to ``minispark serve``: the Host a request names, the type of body it posts, the key it shows.

A server on loopback is still reachable from every web page the user opens. A page may POST to
``http://127.0.0.1:PORT`` without a CORS preflight when the body is ``text/plain`` (a "simple" request), and
through DNS rebinding (its own name resolved to 127.0.0.1) it may even read the answers, because the browser
then treats the server as the page's own origin. :class:`Guard` closes both doors before any route runs:

* **Host.** The ``Host`` header must name an IP address (a rebinding page can only send its own DNS name),
  ``localhost``, or a name the operator allowed (``--allow-host``). Anything else gets 403.
* **Body type.** A POST must say ``Content-Type: application/json``: a browser sends that only after a CORS
  preflight, which this server never approves (it sends no CORS headers at all). Anything else gets 415.
* **Key.** With an API key, every ``/v1`` route wants ``Authorization: Bearer <key>`` (the scheme in any
  case, as RFC 9110 says); else 401.

It is plain ASGI: a refusal is answered before any route runs, and an admitted request's receive channel
(where the route sees its client hang up) passes through untouched.

    .venv/bin/python -m pytest -q tests/server/test_serve.py -k guard
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from minispark.server.protocol import APIError

#: Host names every server answers to besides IP addresses (a name resolving to loopback on the user's machine).
LOCAL_NAMES = ("localhost",)


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port and brackets, lower case, no trailing dot."""
    value = header.strip().lower()
    if value.startswith("["):  # [::1]:8000
        value = value[1:value.find("]")] if "]" in value else value[1:]
    elif value.count(":") == 1:  # 127.0.0.1:8000, localhost:8000 (a bare IPv6 address has several colons)
        value = value.split(":")[0]
    return value.rstrip(".")


def host_allowed(header: str | None, allowed: Iterable[str]) -> bool:
    """Whether a request naming ``header`` may be served: no Host (not a browser), an IP address, a local name,
    or one of ``allowed``."""
    if header is None:
        return True
    name = host_name(header)
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name in LOCAL_NAMES or name in {host_name(a) for a in allowed}


def bearer_matches(header: str, key: str) -> bool:
    """``Authorization: Bearer <key>``, the scheme in any case, the key compared in constant time."""
    scheme, _, given = header.strip().partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), key.encode())


def is_json(content_type: str | None) -> bool:
    """``application/json``, with or without parameters (``; charset=utf-8``)."""
    return content_type is not None and content_type.split(";")[0].strip().lower() == "application/json"


class Guard:
    """ASGI middleware applying the module's three rules to every HTTP request."""

    def __init__(self, app: ASGIApp, api_key: str | None = None, allowed_hosts: Iterable[str] = ()) -> None:
        self.app, self.api_key, self.allowed_hosts = app, api_key, tuple(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.refusal(scope)
            if refusal is not None:
                await JSONResponse(refusal.body(), status_code=refusal.status)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> APIError | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not host_allowed(headers.get("host"), self.allowed_hosts):
            return APIError(403, f"Host {headers['host']!r} is not this server's name (DNS rebinding is refused); "
                                 "the operator can allow it with --allow-host", code="host_not_allowed")
        if scope["method"] == "POST" and not is_json(headers.get("content-type")):
            given = headers.get("content-type")
            return APIError(415, f"the request body must be sent as Content-Type: application/json"
                                 f"{f', not {given}' if given else ''}", code="unsupported_media_type")
        if self.api_key and scope["path"].startswith("/v1") and \
                not bearer_matches(headers.get("authorization", ""), self.api_key):
            return APIError(401, "missing or wrong API key (Authorization: Bearer ...)", code="invalid_api_key")
        return None
