"""Bad requests to ``minispark serve``: what a body may not hold (a key twice, bytes that are not UTF-8, a role
that is no string, settings it would not apply) is a 400 naming the field, never a 500.

    .venv/bin/python -m pytest -q tests/server/test_request_input.py
"""

from __future__ import annotations

import pytest


def read_served_body(body: bytes) -> object:
    """What serve's body reader makes of ``body``."""
    import asyncio

    from starlette.requests import Request

    from minispark.server.app import read_body

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    return asyncio.run(read_body(Request({"type": "http", "method": "POST", "headers": []}, receive), 1 << 20))


@pytest.mark.parametrize("field, value, says", [
    ("model", 5, "'model' must be a string"),  # said "'model' is required"
    ("frequency_penalty", 1.5, "'frequency_penalty' 1.5: this server does not apply it"),  # ignored without a word
    ("logprobs", True, "'logprobs' true: this server does not apply it; leave it out (or send false)"),
    ("top_k", 20, "'top_k' 20"),
    ("tools", [{"type": "function"}], "'tools'"),
    # asked for a tool call, a legacy function call or audio, and got text without a word
    ("tool_choice", "required", "'tool_choice' \"required\": this server does not apply it"),
    ("functions", [{"name": "f"}], "'functions'"),
    ("function_call", {"name": "f"}, "'function_call'"),
    ("modalities", ["text", "audio"], "'modalities'"),
    ("audio", {"voice": "alloy", "format": "wav"}, "'audio'"),
    ("web_search_options", {}, "'web_search_options' {}: this server does not apply it; leave it out (or send null)"),
])
def test_serve_refuses_what_it_would_not_apply(tmp_path, field, value, says) -> None:
    from minispark.server.protocol import APIError, ServeLimits, parse_chat_request

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], field: value}
    with pytest.raises(APIError) as caught:
        parse_chat_request(body, ServeLimits(), None, tmp_path, vision=False)
    assert caught.value.status == 400 and says in caught.value.message and caught.value.param == field
    for no_op in ({"frequency_penalty": 0}, {"logprobs": False}, {"top_k": -1}, {"user": "bob"}, {"tool_choice": "auto"},
                  {"modalities": ["text"]}):  # ask for nothing
        parse_chat_request({**body, field: None, **no_op} if field != "model" else {**body, "model": "m", **no_op},
                           ServeLimits(), None, tmp_path, vision=False)


def test_serve_refuses_two_token_limits_that_disagree(tmp_path) -> None:
    """max_tokens 2 with max_completion_tokens 3 was answered with 3 tokens, the other ignored without a word; the
    same number twice asks for one thing."""
    from minispark.server.protocol import APIError, ServeLimits, parse_chat_request

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "max_completion_tokens": 3}
    with pytest.raises(APIError, match="'max_completion_tokens' 3 and 'max_tokens' 2 disagree; send one of them"):
        parse_chat_request(body, ServeLimits(), None, tmp_path, vision=False)
    assert parse_chat_request({**body, "max_tokens": 3}, ServeLimits(), None, tmp_path, vision=False).max_tokens == 3


def test_serve_refuses_a_key_given_twice() -> None:
    """{"max_tokens": 2, "max_tokens": 5} was answered with 5 tokens, without a word (prompt files refuse it)."""
    from minispark.server.protocol import APIError

    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi", "role": "system"}], "max_tokens": 2}'
    with pytest.raises(APIError, match="the request body gives 'role' twice; send it once"):
        read_served_body(body)


def test_serve_reads_bodies_as_utf8() -> None:
    """A body starting \\xff\\xfe was guessed to be UTF-16 and refused with an unrelated JSON error; a UTF-8 BOM
    is tolerated (RFC 8259)."""
    from minispark.server.protocol import APIError

    with pytest.raises(APIError, match=r"the request body is not UTF-8 text \(byte 0xff at offset 0\)"):
        read_served_body('{"model": "m"}'.encode("utf-16"))
    assert read_served_body('\ufeff{"model": "m"}'.encode("utf-8")) == {"model": "m"}


@pytest.mark.parametrize("role", [["user"], {"name": "user"}])
def test_a_role_that_is_no_string_is_a_400(tmp_path, role) -> None:
    """A list or object as a message's role was a 500 (unhashable, looked up in a dict of role aliases)."""
    from minispark.server.protocol import APIError, ServeLimits, parse_chat_request

    body = {"model": "m", "messages": [{"role": role, "content": "hi"}]}
    with pytest.raises(APIError, match=r"messages\[0\].role .*: expected system, developer, user or assistant"):
        parse_chat_request(body, ServeLimits(), None, tmp_path, vision=False)
    developer = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert parse_chat_request({"model": "m", "messages": developer}, ServeLimits(), None, tmp_path,
                              vision=False).messages[0]["role"] == "system"
