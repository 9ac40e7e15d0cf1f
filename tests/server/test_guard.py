"""Who may talk to the server (minispark/server/guard.py): the Host a request names, the type of its body, its key
(the rules here; tests/server/test_serve.py sends them to a running server).

    .venv/bin/python -m pytest -q tests/server/test_guard.py
"""

from __future__ import annotations

import pytest

from minispark.server.guard import bearer_matches, host_allowed, host_name, is_json


@pytest.mark.parametrize("header, name", [("127.0.0.1:8000", "127.0.0.1"), ("[::1]:8000", "::1"), ("::1", "::1"),
                                          ("LocalHost:80", "localhost"), ("myhost.lan.", "myhost.lan"),
                                          ("attacker.example:8000", "attacker.example")])
def test_host_name_drops_port_brackets_case_and_root_dot(header: str, name: str) -> None:
    assert host_name(header) == name


def test_only_addresses_local_names_and_allowed_names_are_served() -> None:
    for header in ("127.0.0.1:8000", "[::1]:8000", "localhost:8000", "192.168.1.20", None):
        assert host_allowed(header, ())
    assert not host_allowed("attacker.example:8000", ())  # a rebinding page sends its own name
    assert not host_allowed("localhost.attacker.example", ())
    assert host_allowed("MyHost.lan:8000", ("myhost.lan",))


def test_the_bearer_scheme_is_case_insensitive_and_the_key_is_not() -> None:
    assert bearer_matches("Bearer sekret", "sekret") and bearer_matches("bearer sekret", "sekret")
    assert not bearer_matches("Bearer Sekret", "sekret") and not bearer_matches("Basic sekret", "sekret")
    assert not bearer_matches("", "sekret") and not bearer_matches("sekret", "sekret")


def test_json_is_application_json_with_any_parameters() -> None:
    assert is_json("application/json") and is_json("Application/JSON; charset=utf-8")
    assert not is_json("text/plain") and not is_json(None) and not is_json("application/jsonp")
