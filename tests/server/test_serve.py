"""``minispark serve`` end to end on tiny random models, through the real ``openai`` client and raw HTTP:
the round trip (streamed and not) equals target-only greedy decoding, images as data URLs and files
under --image-dir, stop strings, concurrent requests keep per-request parity, every limit answers its
status with an OpenAI-style JSON error, a client that disconnects frees its slot, the server binds
127.0.0.1 only and stops by itself, and the real ``minispark serve`` process drains on Ctrl-C and, on a second
one, answers every request still open with a JSON 503 and exits at once.

    .venv/bin/python -m pytest -q tests/server/test_serve.py
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from minispark.server import limits
from minispark.server.app import SCRATCH_PREFIX, LocalServer, ServeConfig, scratch_dir, served_model_id
from minispark.server.protocol import ServeLimits
from minispark.serving.builder import ServingSetup, build_serving
from minispark.serving.drafters.hybrid import make_hybrid
from minispark.serving.generate import generate
from minispark.serving.schedule import make_length_policy
from minispark.serving.sps import SPSTable
from minispark.target.loading import Target, load_target
from tests.helpers import REPO, random_dspark

HELLO = [{"role": "user", "content": "Hello there, how are you?"}]


@pytest.fixture(scope="module")
def llama(tiny_dir) -> Target:
    return load_target(str(tiny_dir("llama")))


@pytest.fixture(scope="module")
def vlm(tiny_dir) -> Target:
    return load_target(str(tiny_dir("qwen2_5_vl")))


def dspark_setup(target: Target) -> ServingSetup:
    """An untrained DSpark drafter in schedule mode (rejections, crops and Algorithm 1 all exercised)."""
    table = SPSTable.from_inline([1.0 / (1.0 + 0.05 * n) for n in range(16)])
    drafter = random_dspark(target)
    policy = make_length_policy("schedule", 4, has_confidence=True, sps_table=table)
    return ServingSetup(drafter, "random-dspark", "schedule", 4, policy, table)


def server(target: Target, setup: ServingSetup | None = None, **config) -> LocalServer:
    setup = setup or build_serving(target, "lookup")
    return LocalServer(target, setup, ServeConfig(served_model_id(target), **config), lifetime_s=300)


def reference(target: Target, messages: list[dict], max_tokens: int) -> str:
    return generate(target, messages=messages, drafter="none", max_new_tokens=max_tokens).text


@pytest.mark.parametrize("slots", [1, 3])
def test_openai_client_round_trip(llama: Target, slots: int) -> None:
    want = reference(llama, HELLO, 16)
    with server(llama, dspark_setup(llama), slots=slots) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        model = client.models.list().data[0].id
        reply = client.chat.completions.create(model=model, messages=HELLO, temperature=0, max_tokens=16)
        assert reply.choices[0].message.content == want
        assert reply.choices[0].finish_reason in ("length", "stop")
        assert reply.usage.completion_tokens <= 16 and reply.usage.prompt_tokens > 0
        figures = reply.model_extra["minispark"]
        assert figures["rounds"] > 0 and figures["tau"] >= 1.0 and figures["mode"] == "schedule"
        assert 0 <= figures["skipped_rounds"] <= figures["rounds"]
        chunks = list(client.chat.completions.create(model=model, messages=HELLO, temperature=0, max_tokens=16,
                                                     stream=True, stream_options={"include_usage": True}))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
        assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens
        assert chunks[-2].choices[0].finish_reason == reply.choices[0].finish_reason
        assert "minispark" in chunks[-2].model_extra


def test_stop_strings_are_cut_streamed_and_not(llama: Target) -> None:
    full = reference(llama, HELLO, 24)
    stop = full[len(full) // 2: len(full) // 2 + 3]
    want = full[: full.find(stop)]
    with server(llama, slots=1) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        model = served_model_id(llama)
        reply = client.chat.completions.create(model=model, messages=HELLO, temperature=0, max_tokens=24, stop=[stop])
        assert reply.choices[0].message.content == want and reply.choices[0].finish_reason == "stop"
        chunks = client.chat.completions.create(model=model, messages=HELLO, temperature=0, max_tokens=24,
                                                stop=stop, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want


def test_concurrent_requests_keep_greedy_parity(llama: Target) -> None:
    prompts = ["Tell me a story.", "What is 2 + 2?", "List three fruits.", "Hi", "Explain gravity."]
    limits = [20, 7, 14, 5, 11]
    wants = [reference(llama, [{"role": "user", "content": p}], n) for p, n in zip(prompts, limits)]
    got: dict[int, str] = {}
    with server(llama, dspark_setup(llama), slots=3) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")

        def ask(i: int) -> None:
            reply = client.chat.completions.create(model=served_model_id(llama), temperature=0, max_tokens=limits[i],
                                                   messages=[{"role": "user", "content": prompts[i]}])
            got[i] = reply.choices[0].message.content

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert [got.get(i) for i in range(len(prompts))] == wants


@pytest.mark.parametrize("slots", [1, 2])
def test_hybrid_drafter_serves_with_parity(llama: Target, slots: int) -> None:
    """``serve --drafter hybrid:DIR``: the hybrid (lookup or DSpark per round) behind the server, one
    request or two in flight (each slot its own fork), every reply its own target-only greedy text."""
    table = SPSTable.from_inline([1.0 / (1.0 + 0.05 * n) for n in range(16)])
    hybrid = make_hybrid(random_dspark(llama))
    hybrid.price_with(table, 4)
    setup = ServingSetup(hybrid, "hybrid", "schedule", 4, make_length_policy("schedule", 4, has_confidence=True,
                                                                           sps_table=table), table)
    prompts = ["Count: one two three one two three one two", "List three fruits."]
    wants = [reference(llama, [{"role": "user", "content": p}], 16) for p in prompts]
    got: dict[int, object] = {}
    with server(llama, setup, slots=slots) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")

        def ask(i: int) -> None:
            got[i] = client.chat.completions.create(model=served_model_id(llama), temperature=0, max_tokens=16,
                                                    messages=[{"role": "user", "content": prompts[i]}])

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert [got[i].choices[0].message.content for i in range(len(prompts))] == wants
    assert all(got[i].model_extra["minispark"]["rounds"] > 0 for i in range(len(prompts)))


def test_image_parts(vlm: Target, test_image: Path, tmp_path: Path) -> None:
    data = "data:image/png;base64," + base64.b64encode(test_image.read_bytes()).decode()
    (tmp_path / "cat.png").write_bytes(test_image.read_bytes())
    content = lambda url: [{"type": "image_url", "image_url": {"url": url}},  # noqa: E731
                           {"type": "text", "text": "What is in the picture?"}]
    want = generate(vlm, prompt="What is in the picture?", images=[test_image], drafter="none",
                    max_new_tokens=8).text
    with server(vlm, slots=1, image_dir=tmp_path) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        (tmp_path / "my photo.png").write_bytes(test_image.read_bytes())
        for image_url in (data, "cat.png", f"file://{tmp_path / 'cat.png'}", (tmp_path / "my photo.png").as_uri(),
                          f"file://localhost{tmp_path / 'cat.png'}"):
            reply = client.chat.completions.create(model=served_model_id(vlm), temperature=0, max_tokens=8,
                                                   messages=[{"role": "user", "content": content(image_url)}])
            assert reply.choices[0].message.content == want
        for refused in ("http://example.com/cat.png", str(test_image), "../etc/passwd",
                        f"file://otherhost{tmp_path / 'cat.png'}"):
            with pytest.raises(openai.BadRequestError):
                client.chat.completions.create(model=served_model_id(vlm), max_tokens=4,
                                               messages=[{"role": "user", "content": content(refused)}])


def post(url: str, body: object, **kwargs) -> httpx.Response:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(f"{url}/v1/chat/completions", content=data, timeout=kwargs.pop("timeout", 60),
                      headers={"content-type": "application/json", **kwargs.pop("headers", {})}, **kwargs)


def expect(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert "Traceback" not in response.text
    return error


def test_every_limit_answers_its_status(llama: Target, vlm: Target, test_image: Path) -> None:
    model = served_model_id(llama)
    ok = {"model": model, "messages": HELLO, "max_tokens": 2}
    limits = ServeLimits(max_body_bytes=4096, max_messages=3, max_tokens=64)
    with server(llama, slots=1, limits=limits, api_key="sekret") as url:
        key = {"headers": {"authorization": "Bearer sekret"}}
        expect(post(url, ok), 401)
        expect(post(url, ok, headers={"authorization": "Bearer wrong"}), 401)
        assert httpx.get(f"{url}/v1/models").status_code == 401 and httpx.get(f"{url}/health").status_code == 200
        assert post(url, ok, **key).status_code == 200
        expect(post(url, {**ok, "messages": [{"role": "user", "content": "x" * 5000}]}, **key), 413)
        expect(post(url, {**ok, "messages": HELLO * 4}, **key), 400)
        expect(post(url, {**ok, "max_tokens": 65}, **key), 400)
        expect(post(url, {**ok, "max_completion_tokens": 0}, **key), 400)
        expect(post(url, {**ok, "n": 2}, **key), 400)
        expect(post(url, {**ok, "temperature": "hot"}, **key), 400)
        expect(post(url, b"{not json", **key), 400)
        expect(post(url, b"[" * 1500 + b"]" * 1500, **key), 400)  # past Python's recursion limit: a 500 before
        expect(post(url, {**ok, "messages": [{"role": "tool", "content": "x"}]}, **key), 400)
        expect(post(url, {**ok, "model": "gpt-4"}, **key), 404)
        expect(httpx.get(f"{url}/v1/nowhere", **key), 404)
        image = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
        expect(post(url, {**ok, "messages": [{"role": "user", "content": image}]}, **key), 400)  # text-only target
    with server(vlm, slots=1, limits=ServeLimits(max_image_pixels=100)) as url:
        data = "data:image/png;base64," + base64.b64encode(test_image.read_bytes()).decode()
        body = {"model": served_model_id(vlm), "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data}}, {"type": "text", "text": "hi"}]}]}
        assert expect(post(url, body), 413)["code"] == "image_too_large"
    local = server(llama, slots=1)
    with local as url:
        local.server.config.app.state.worker.accepting = False  # what Ctrl-C's drain does first
        assert expect(post(url, ok), 503)["code"] == "shutting_down"
        local.server.config.app.state.worker.accepting = True


@pytest.mark.parametrize("slots", [1, 2])
def test_a_disconnect_frees_the_slot(llama: Target, slots: int) -> None:
    body = {"model": served_model_id(llama), "messages": HELLO, "max_tokens": 2000, "temperature": 1.0,
            "seed": 1, "stream": True}
    local = server(llama, slots=slots)
    with local as url:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
            for line in response.iter_lines():
                if '"content"' in line and '"content": ""' not in line:
                    break  # the first generated text: hang up mid-answer
        deadline = time.monotonic() + 30
        while (health := httpx.get(f"{url}/health").json())["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert health["in_flight"] == 0 and health["cancelled"] == 1
        ok = {"model": served_model_id(llama), "messages": HELLO, "max_tokens": 3}
        assert post(url, ok).status_code == 200  # the slot serves the next request


@pytest.mark.parametrize("slots", [1, 2])
def test_a_failed_forward_answers_500_and_the_next_request_is_served(llama: Target, slots: int,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import minispark.server.worker as worker

    def fail_once(real):
        calls = []

        def wrapped(*args, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("injected failure")
            return real(*args, **kwargs)
        return wrapped

    if slots == 1:  # the single-request engine
        monkeypatch.setattr(worker, "speculative_generate", fail_once(worker.speculative_generate))
    else:  # the batched decoder
        monkeypatch.setattr(worker.BatchDecoder, "step", fail_once(worker.BatchDecoder.step))
    ok = {"model": served_model_id(llama), "messages": HELLO, "max_tokens": 3}
    with server(llama, slots=slots) as url:
        assert "injected failure" in expect(post(url, ok), 500)["message"]  # answered, not left waiting
        assert post(url, ok).status_code == 200


def test_binds_loopback_only_and_stops_by_itself(llama: Target) -> None:
    assert limits.SERVE_HOST == "127.0.0.1"
    local = LocalServer(llama, build_serving(llama, "none"), ServeConfig(served_model_id(llama)), lifetime_s=1.5)
    with local as url:
        assert local.host == "127.0.0.1" and url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{url}/health").json()["status"] == "ok"
        local.thread.join(20)  # the lifetime timer stops it without __exit__
        assert not local.thread.is_alive()


@pytest.mark.parametrize("argv, says", [(["--image-dir", "/nonexistent-dir"], "--image-dir"),
                                        (["--max-concurrent", "0"], "--max-concurrent"),
                                        (["--mode", "fast"], "--mode")])
def test_the_command_refuses_bad_flags_in_one_line(argv: list[str], says: str) -> None:
    from typer.testing import CliRunner

    from minispark.cli import app

    result = CliRunner().invoke(app, ["serve", *argv])
    assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("field, value, says", [
    ("temperature", 1e-320, "a positive temperature must be at least"),  # hung: the decoding thread refused it
    ("seed", 10**23, "'seed' must be an integer in [-2**63, 2**63 - 1]"),  # a 500 to every request in flight
    ("stop", ["caf\udce9"], "'stop' holds half a character"),  # would never match the decoded text
    ("stream_options", "yes", "'stream_options' must be an object"),  # was ignored without a word
    ("stream_options", {"include_usage": "no"}, "'stream_options.include_usage' must be true or false"),  # was true
])
def test_a_value_the_decoder_would_refuse_is_a_400(field: str, value, says: str, tmp_path: Path) -> None:
    """Refused by the request check, not by the decoding thread afterwards."""
    from minispark.server.protocol import APIError, parse_chat_request

    body = {"model": "m", "messages": HELLO, "max_tokens": 2, field: value}
    with pytest.raises(APIError) as caught:
        parse_chat_request(body, ServeLimits(), None, tmp_path, vision=False)
    assert caught.value.status == 400 and says in caught.value.message and caught.value.param == field


def test_a_value_is_named_as_json_and_a_null_stream_is_the_default(tmp_path: Path) -> None:
    """A 400 spelled the value as Python does (None, True, '2'), and 'stream': null was refused where every other
    null field is its default."""
    from minispark.server.protocol import APIError, parse_chat_request

    for field, value, says in (("max_tokens", True, "got true"), ("seed", "1", 'got "1"'),
                               ("stream", "yes", 'got "yes"'), ("messages", [{"content": "hi"}], "role null: expected")):
        with pytest.raises(APIError) as caught:
            parse_chat_request({"model": "m", "messages": HELLO, field: value}, ServeLimits(), None, tmp_path, False)
        assert says in caught.value.message
    body = {"model": "m", "messages": HELLO, "stream": None}
    assert parse_chat_request(body, ServeLimits(), None, tmp_path, False).stream is False


def test_a_text_part_without_text_and_a_body_not_utf8_say_what_is_wrong(tmp_path: Path) -> None:
    """{"type": "text", "text": 5} was 'expected a text part or an image_url part' (it is a text part), and a body
    not in UTF-8 said 'byte 61', its offset read as a byte's value."""
    import asyncio

    from minispark.server.app import read_body
    from minispark.server.protocol import APIError, parse_chat_request

    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}
    with pytest.raises(APIError) as caught:
        parse_chat_request(body, ServeLimits(), None, tmp_path, False)
    assert caught.value.status == 400 and caught.value.message == "messages[0].content[0].text must be a string"

    class Latin1:
        headers = {"content-length": "22"}

        async def stream(self):
            yield b'{"messages": "caf\xe9"}'

    with pytest.raises(APIError) as caught:
        asyncio.run(read_body(Latin1(), 4096))
    assert "not UTF-8 text (byte 0xe9 at offset 17)" in caught.value.message


def test_the_printed_url_of_an_ipv6_host_is_a_url() -> None:
    """`serve --host ::1` printed 'on http://::1:8000/v1', which no client parses."""
    from minispark.server.app import server_url

    assert server_url("::1", 8000) == "http://[::1]:8000" and server_url("127.0.0.1", 80) == "http://127.0.0.1:80"
    assert server_url("localhost", 8000) == "http://localhost:8000"


def test_a_client_gone_before_its_body_is_a_400_not_a_logged_traceback() -> None:
    """A Content-Length the client never sent in full: starlette's ClientDisconnect went up to uvicorn, which logged
    'Exception in ASGI application' and its traceback."""
    import asyncio

    from starlette.requests import ClientDisconnect

    from minispark.server.app import read_body
    from minispark.server.protocol import APIError

    class HungUp:
        headers = {"content-length": "500"}

        async def stream(self):
            yield b'{"model"'
            raise ClientDisconnect()

    with pytest.raises(APIError) as caught:
        asyncio.run(read_body(HungUp(), 4096))
    assert caught.value.status == 400 and "disconnected" in caught.value.message


def test_a_body_shorter_than_its_content_length_times_out_as_a_408() -> None:
    """Content-Length 500 and 8 bytes sent, the connection kept open: the handler waited with no end (sixteenth
    probe)."""
    import asyncio

    from minispark.server.app import read_body
    from minispark.server.protocol import APIError

    class Stalled:
        headers = {"content-length": "500"}

        async def stream(self):
            yield b'{"model"'
            await asyncio.sleep(60)

    with pytest.raises(APIError) as caught:
        asyncio.run(read_body(Stalled(), 4096, timeout_s=0.2))
    assert caught.value.status == 408 and "8 bytes of the 500" in caught.value.message


def test_a_number_too_long_to_read_is_a_400_in_words(llama: Target) -> None:
    """Its message told the client to call sys.set_int_max_str_digits()."""
    body = b'{"model": "m", "messages": [], "max_tokens": 1' + b"0" * 5000 + b"}"
    with server(llama, slots=1) as url:
        message = expect(post(url, body), 400)["message"]
    assert "a number too long to read" in message and "set_int_max_str_digits" not in message


def test_a_tiny_temperature_is_answered_with_slots(llama: Target) -> None:
    """With several slots a temperature the sampler refuses left the request unanswered, and Ctrl-C waiting."""
    ok = {"model": served_model_id(llama), "messages": HELLO, "max_tokens": 2}
    with server(llama, slots=2) as url:
        expect(post(url, {**ok, "temperature": 1e-40}), 400)
        assert post(url, ok).status_code == 200


def test_bad_image_urls_are_a_4xx_that_names_no_server_file(test_image: Path, tmp_path: Path) -> None:
    """A data URL without its type, or one without ';base64', was read as a file name: a 500 'internal error:
    OSError' (name too long); a decompression bomb was 'not an image PIL can read'; a truncated image named the
    server's scratch file."""
    from minispark.server.protocol import APIError, parse_chat_request
    from tests.helpers import bomb_png

    data = base64.b64encode(test_image.read_bytes()).decode()
    cut = base64.b64encode(test_image.read_bytes()[:200]).decode()
    bomb = base64.b64encode(bomb_png(tmp_path / "bomb.png").read_bytes()).decode()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for url, status, says in ((f"data:;base64,{data}", 400, "a data URL must read data:image/TYPE;base64,DATA"),
                              (f"data:image/png,{data}", 400, "a data URL must read"),
                              ("x" * 5000, 400, "is not a file under the server's --image-dir"),
                              (f"data:image/png;base64,{bomb}", 413, "far more pixels than PIL opens"),
                              (f"data:image/png;base64,{cut}", 400, "messages[0].content[0]: corrupt or truncated")):
        body = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "hi"}]}]}
        with pytest.raises(APIError) as caught:
            parse_chat_request(body, ServeLimits(), tmp_path, scratch, vision=True)
        assert caught.value.status == status and says in caught.value.message, caught.value.message
        assert str(scratch) not in caught.value.message


def test_a_request_h11_cannot_parse_is_a_json_400(llama: Target) -> None:
    """A negative Content-Length is refused by h11 before the app sees a request: uvicorn answered it in plain
    text, unlike every other error."""
    import socket

    with server(llama, slots=1) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as conn:
            conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
            reply = b""
            while chunk := conn.recv(65536):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head, reply
        error = json.loads(body)["error"]
        assert "not valid HTTP/1.1" in error["message"] and error["type"] == "invalid_request_error"
        assert post(url, {"model": served_model_id(llama), "messages": HELLO, "max_tokens": 2}).status_code == 200


@pytest.mark.parametrize("content", ["", "  \n\t", [{"type": "text", "text": " "}, {"type": "text", "text": ""}]])
def test_a_blank_user_message_is_a_400_naming_it(content, tmp_path: Path) -> None:
    """A blank user turn was answered as if the template's empty turn were a question;
    an empty assistant turn, or an image without text, still asks something."""
    from minispark.server.protocol import APIError, parse_chat_request

    messages = [*HELLO, {"role": "assistant", "content": ""}, {"role": "user", "content": content}]
    with pytest.raises(APIError) as caught:
        parse_chat_request({"model": "m", "messages": messages}, ServeLimits(), None, tmp_path, vision=False)
    assert caught.value.status == 400 and caught.value.param == "messages"
    assert "messages[2]: the user message is empty or blank" in caught.value.message
    parse_chat_request({"model": "m", "messages": messages[:2] + HELLO}, ServeLimits(), None, tmp_path, vision=False)


def test_a_killed_servers_temporary_directory_goes_when_the_next_starts(tmp_path: Path, monkeypatch) -> None:
    """A SIGKILLed server left its /tmp/minispark-serve-* (with the images of the requests in
    flight) for ever. The next server removes it, and never one a live server holds or one just made."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    live = subprocess.Popen([sys.executable, "-c", "import sys, time; from minispark.server.app import scratch_dir\n"
                             "scratch, held = scratch_dir(); print(scratch.name, flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path),
                                                       "PYTHONPATH": str(REPO)})
    try:
        running = Path(live.stdout.readline().strip())
        killed, young = tmp_path / f"{SCRATCH_PREFIX}killed", tmp_path / f"{SCRATCH_PREFIX}young"
        for directory in (killed, young):
            directory.mkdir()
            (directory / "image.png").write_bytes(b"x")
        for directory in (killed, running):
            os.utime(directory, (time.time() - 60, time.time() - 60))
        scratch, held = scratch_dir()
        assert not killed.exists() and young.is_dir() and running.is_dir()
        scratch.cleanup()
        os.close(held)
    finally:
        live.kill()
        live.wait()


def test_a_rebinding_host_and_a_text_plain_body_are_refused(llama: Target) -> None:
    """What a web page can send to a server on loopback: its own name as Host (DNS rebinding), a body as
    text/plain (no CORS preflight). Both were answered 200."""
    ok = {"model": served_model_id(llama), "messages": HELLO, "max_tokens": 2}
    with server(llama, slots=1, allowed_hosts=("myhost.lan",)) as url:
        port = url.rsplit(":", 1)[1]
        assert expect(post(url, ok, headers={"host": f"attacker.example:{port}"}), 403)["code"] == "host_not_allowed"
        assert httpx.get(f"{url}/health", headers={"host": "attacker.example"}).status_code == 403
        assert expect(post(url, ok, headers={"content-type": "text/plain"}), 415)["code"] == "unsupported_media_type"
        assert expect(post(url, ok, headers={"content-type": "application/x-www-form-urlencoded"}), 415)
        assert post(url, ok, headers={"host": f"myhost.lan:{port}"}).status_code == 200
        assert post(url, ok, headers={"host": f"localhost:{port}"}).status_code == 200
        assert "access-control-allow-origin" not in httpx.options(f"{url}/v1/chat/completions").headers


def test_a_lower_case_bearer_is_a_key(llama: Target) -> None:
    with server(llama, slots=1, api_key="sekret") as url:
        ok = {"model": served_model_id(llama), "messages": HELLO, "max_tokens": 2}
        assert post(url, ok, headers={"authorization": "bearer sekret"}).status_code == 200
        assert expect(post(url, ok, headers={"authorization": "bearer wrong"}), 401)["code"] == "invalid_api_key"


def test_request_images_leave_no_file_accepted_or_refused(vlm: Target, test_image: Path) -> None:
    """Every data: URL image stayed in the server's temporary directory for its lifetime, refused ones too (40
    refused 2 MB requests left 77 MB)."""
    data = "data:image/png;base64," + base64.b64encode(test_image.read_bytes()).decode()
    body = {"model": served_model_id(vlm), "max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data}}, {"type": "text", "text": "hi"}]}]}
    local = server(vlm, slots=1)
    with local as url:
        scratch = local.server.config.app.state.scratch
        assert post(url, body).status_code == 200
        expect(post(url, {**body, "model": "gpt-4"}), 404)  # refused after its image was decoded
        expect(post(url, {**body, "temperature": "hot"}), 400)
        assert [p for p in scratch.rglob("*") if p.is_file()] == []


def test_a_non_streaming_client_that_times_out_frees_its_slot(llama: Target) -> None:
    """A non-streaming client that hung up was never cancelled: the hang-up was looked for only after a quarter
    second without text events, which a decoding job never leaves, and the job decoded to max_tokens holding its
    slot."""
    body = {"model": served_model_id(llama), "messages": HELLO, "max_tokens": 2000, "temperature": 1.0, "seed": 1}
    local = server(llama, slots=1, api_key="sekret")
    with local as url:
        with pytest.raises(httpx.TimeoutException):
            post(url, body, headers={"authorization": "Bearer sekret"}, timeout=1.0)
        gone = time.monotonic()
        while (health := httpx.get(f"{url}/health").json())["in_flight"] and time.monotonic() < gone + 1.0:
            time.sleep(0.05)
        assert health["in_flight"] == 0 and health["cancelled"] == 1


def test_queue_0_serves_a_free_slot_and_refuses_waiting(llama: Target) -> None:
    """--queue 0 answered every request 429, on an idle server too: 0 is no waiting room, not no service."""
    ok = {"model": served_model_id(llama), "messages": HELLO, "max_tokens": 3}
    local = server(llama, slots=1, limits=ServeLimits(queue=0))
    with local as url:
        assert post(url, ok).status_code == 200
        worker = local.server.config.app.state.worker
        with worker.cond:  # the slot is taken: the next request would wait, and there is no room to
            worker.running[0] = object()
        try:
            assert expect(post(url, ok), 429)["code"] == "queue_full"
        finally:
            with worker.cond:
                del worker.running[0]


@pytest.mark.parametrize("field, says", [("temprature", "did you mean 'temperature'?"),
                                         ("max_new_tokens", "did you mean 'max_tokens'?"),
                                         ("bogus", "this server reads model, messages")])
def test_an_unknown_field_is_a_400_naming_it(field: str, says: str, tmp_path: Path) -> None:
    """A misspelt field was ignored: 'temprature': 0 sampled at T 1, 'max_new_tokens': 3 returned 256 tokens."""
    from minispark.server.protocol import IGNORED_FIELDS, APIError, parse_chat_request

    body = {"model": "m", "messages": HELLO, field: 0}
    with pytest.raises(APIError) as caught:
        parse_chat_request(body, ServeLimits(), None, tmp_path, vision=False)
    assert caught.value.status == 400 and caught.value.param == field and says in caught.value.message
    ignored = {name: "x" for name in IGNORED_FIELDS}  # OpenAI's fields that change nothing generated here
    assert parse_chat_request({"model": "m", "messages": HELLO, **ignored}, ServeLimits(), None, tmp_path, False)


def test_a_model_is_retrieved_and_a_cut_max_tokens_is_said(llama: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    """GET /v1/models/ID was a 404 (the openai client's models.retrieve failed), and a max_tokens cut to the room
    the context left was cut silently."""
    model = served_model_id(llama)
    with server(llama, slots=1) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        assert client.models.retrieve(model).id == model
        with pytest.raises(openai.NotFoundError):
            client.models.retrieve("gpt-4")
        prompt = llama.encode(HELLO).length
        monkeypatch.setattr(type(llama), "context_limit", property(lambda _self: prompt + 3))
        reply = post(url, {"model": model, "messages": HELLO, "max_tokens": 50, "temperature": 1.0, "seed": 3}).json()
        assert reply["minispark"]["max_tokens_cut_to"] == 3 and reply["usage"]["completion_tokens"] <= 3




def serve_process(target_dir: Path, tmp_path: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    """The real ``minispark serve`` in a child process on a free port, its temporary directory under ``tmp_path``:
    (process, url) once ``/health`` answers. Its stderr is a pipe the caller reads after it exits."""
    import re

    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-m", "minispark.cli", "serve", "--target", str(target_dir),
                              "--drafter", "none", "--port", "0", *flags],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    said = ""
    while (found := re.search(r"http://127\.0\.0\.1:\d+", said)) is None:
        line = child.stderr.readline()
        if not line:
            child.wait(30)
            pytest.fail(f"the server did not start: {said}")
        said += line
    url, deadline = found.group(0), time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return child, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or child.poll() is not None:
            child.kill()
            pytest.fail(f"the server did not answer /health: {said}{child.stderr.read()}")
        time.sleep(0.1)


def clients_in_flight(url: str, model: str, streams: list[bool],
                      max_tokens: int) -> tuple[list[threading.Thread], dict[int, tuple]]:
    """One thread per request, started: results[i] is ("stream", status, content type, [data payloads]) or
    ("plain", status, content type, body text), or ("failed", repr) when the connection broke."""
    results: dict[int, tuple] = {}

    def ask(i: int, stream: bool) -> None:
        body = {"model": model, "messages": HELLO, "max_tokens": max_tokens, "temperature": 1.0, "seed": i,
                "stream": stream}
        try:
            if stream:
                with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
                    data = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
                results[i] = ("stream", response.status_code, response.headers["content-type"], data)
            else:
                response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
                results[i] = ("plain", response.status_code, response.headers["content-type"], response.text)
        except httpx.HTTPError as exc:
            results[i] = ("failed", repr(exc))

    threads = [threading.Thread(target=ask, args=(i, stream), daemon=True) for i, stream in enumerate(streams)]
    for thread in threads:
        thread.start()
    return threads, results


def wait_for_load(url: str, in_flight: int, queued: int = 0) -> None:
    deadline = time.monotonic() + 60
    while (load := httpx.get(f"{url}/health").json())["in_flight"] < in_flight or load["queued"] < queued:
        assert time.monotonic() < deadline, load
        time.sleep(0.05)


def answer_kind(result: tuple) -> str:
    """"error" (an OpenAI-style 503 shutting_down, as JSON or as the stream's last event) or "done" (complete);
    anything else fails the test."""
    kind, status, content_type, body = result
    if kind == "plain":
        assert content_type == "application/json", result
        if status == 200:
            return "done"
        assert status == 503 and json.loads(body)["error"]["code"] == "shutting_down", result
        return "error"
    assert kind == "stream" and status == 200 and content_type.startswith("text/event-stream"), result
    assert body[-1] == "[DONE]", result
    last = json.loads(body[-2])
    if "error" in last:
        assert set(last["error"]) == {"message", "type", "param", "code"}, last
        assert last["error"]["code"] == "shutting_down", last
        return "error"
    assert last["choices"][0]["finish_reason"] in ("length", "stop"), last
    return "done"


@pytest.mark.parametrize("second", ["SIGINT", pytest.param("SIGTERM", marks=pytest.mark.slow)])
def test_a_second_ctrl_c_answers_every_request_503_and_exits_at_once(tiny_dir, tmp_path: Path, second: str) -> None:
    """A second Ctrl-C with requests in flight printed a CancelledError traceback per request, answered text/plain
    "Internal Server Error" (or cut the stream), and the worker decoded on for seconds before the process exited.
    Now every request, in flight or queued, streaming or not, gets a JSON 503 and the server exits at once."""
    import signal

    child, url = serve_process(tiny_dir("llama"), tmp_path, "--max-concurrent", "2")
    try:
        model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
        threads, results = clients_in_flight(url, model, [True, False, True, False], max_tokens=2000)
        wait_for_load(url, in_flight=2, queued=2)  # two decoding, two waiting for a slot
        child.send_signal(signal.SIGINT)
        time.sleep(0.3)
        child.send_signal(getattr(signal, second))
        stopped = time.monotonic()
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail("the server was still running 30 s after the second signal")
        took = time.monotonic() - stopped
        for thread in threads:
            thread.join(10)
    finally:
        child.kill()
    stderr = child.stderr.read()
    assert took < 8, f"{took:.1f} s to exit after the second signal"
    for noise in ("Traceback", "CancelledError", "Exception in ASGI", "ERROR"):
        assert noise not in stderr, stderr
    kinds = [answer_kind(results[i]) for i in range(4)]  # a KeyError: a client got nothing at all
    assert "error" in kinds, kinds
    assert not list(tmp_path.glob(f"{SCRATCH_PREFIX}*"))  # the app's shutdown ran


def test_one_ctrl_c_lets_the_requests_in_flight_finish(tiny_dir, tmp_path: Path) -> None:
    import signal

    child, url = serve_process(tiny_dir("llama"), tmp_path, "--max-concurrent", "2")
    try:
        model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
        threads, results = clients_in_flight(url, model, [True, False], max_tokens=300)
        wait_for_load(url, in_flight=2)
        child.send_signal(signal.SIGINT)
        for thread in threads:
            thread.join(60)
        child.wait(60)
    finally:
        child.kill()
    stderr = child.stderr.read()
    assert "Traceback" not in stderr and "ERROR" not in stderr, stderr
    assert [answer_kind(results[i]) for i in range(2)] == ["done", "done"], results
    assert json.loads(results[1][3])["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("slots", [1, 2])  # the single-request engine and the batched decoder
def test_an_aborted_worker_answers_every_job_at_once_and_stops_decoding(llama: Target, slots: int) -> None:
    from minispark.server.protocol import APIError

    local = server(llama, slots=slots)
    with local as url:
        worker = local.server.config.app.state.worker
        threads, results = clients_in_flight(url, served_model_id(llama), [True, False] * slots, max_tokens=2000)
        wait_for_load(url, in_flight=slots, queued=slots)
        worker.abort(APIError(503, "stopping now", code="shutting_down"))
        worker.thread.join(10)
        assert not worker.thread.is_alive()  # it stopped between rounds, with 2000 tokens asked
        for thread in threads:
            thread.join(10)
        assert [answer_kind(results[i]) for i in range(2 * slots)] == ["error"] * (2 * slots)
        ok = {"model": served_model_id(llama), "messages": HELLO, "max_tokens": 3}
        assert expect(post(url, ok), 503)["code"] == "shutting_down"


def test_completions_take_the_prompt_as_plain_text(llama: Target) -> None:
    """``/v1/completions``: the prompt without the chat template (a base model's use), streamed or not, equal to
    the target's own greedy continuation of that text; its fields are checked as a chat request's are."""
    from tests.helpers import hf_greedy

    prompt = "The three primary colours are"
    inputs = llama.encode_text(prompt)
    assert inputs.input_ids[0].tolist() == llama.tokenizer(prompt)["input_ids"]  # no template around it
    want = llama.tokenizer.decode(hf_greedy(llama, inputs, 16), skip_special_tokens=True)
    with server(llama, dspark_setup(llama), slots=2) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        model = served_model_id(llama)
        reply = client.completions.create(model=model, prompt=prompt, temperature=0, max_tokens=16)
        assert reply.object == "text_completion" and reply.choices[0].text == want
        assert reply.usage.prompt_tokens == inputs.length and reply.model_extra["minispark"]["rounds"] > 0
        chunks = list(client.completions.create(model=model, prompt=[prompt], temperature=0, max_tokens=16,
                                                stream=True, stream_options={"include_usage": True}))
        assert "".join(c.choices[0].text for c in chunks if c.choices) == want
        assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens
        for body, field in (({"prompt": prompt, "echo": True}, "echo"), ({"prompt": ["a", "b"]}, "prompt"),
                            ({"prompt": "  "}, "prompt"), ({"messages": HELLO}, "messages"),
                            ({"prompt": prompt, "best_of": 2}, "best_of")):
            response = httpx.post(f"{url}/v1/completions", json={"model": model, **body})
            assert response.status_code == 400 and response.json()["error"]["param"] == field, response.text
