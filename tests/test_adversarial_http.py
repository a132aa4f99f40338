"""Issue 17, items 24 and 26, kept fixed: images that no API would accept, malformed HTTP requests to the
fake provider, malformed answers to the clients, and OS errors in the CLI. Each test is named after the
item it guards; the last ones fuzz the fake server's request parser over real HTTP."""

from __future__ import annotations

import base64
import json
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ctxwin.messages import Image, Message, Text, ToolCall, ToolResult, user
from ctxwin.messages.model import MAX_IMAGE_BYTES, image_placeholder, image_problem
from ctxwin.messages.providers import to_anthropic, to_openai_chat, to_openai_responses
from ctxwin.providers import APIS, ProviderError, RetryPolicy, client_for
from ctxwin.testing import FakeProvider, ForcedResponse
from ctxwin.testing.fake_provider import CHAT, COUNT_TOKENS, MESSAGES, RESPONSES
from ctxwin.tokens import counter_for
from ctxwin.tokens.framing import MESSAGE_TOKENS, image_tokens

PATHS = {"anthropic": MESSAGES, "chat": CHAT, "responses": RESPONSES}
HEADERS = {"anthropic": {"x-api-key": "k", "anthropic-version": "2023-06-01"},
           "chat": {"authorization": "Bearer k"}, "responses": {"authorization": "Bearer k"}}
EXAMPLE = Path(__file__).resolve().parents[1] / "src" / "ctxwin" / "examples" / "claude-code-session.jsonl"
ANSWER_SECONDS = 30.0  # a hang guard: an HTTP answer comes in milliseconds, whatever was sent; none is a bug


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProvider]:
    with FakeProvider(context_window=50_000, max_output=4_000) as fake:
        yield fake


@pytest.fixture
def fake(server: FakeProvider) -> FakeProvider:
    server.reset()
    return server


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=ANSWER_SECONDS) as client:
        yield client


def png(width: int, height: int) -> bytes:
    """A real, decodable PNG of width x height grey pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\0" + b"\x80" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def jpeg_header(width: int, height: int) -> bytes:
    """The start of a baseline JPEG: SOI, an APP0 segment, then SOF0 with the size."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def raw_http(port: int, request: bytes, timeout: float = ANSWER_SECONDS) -> tuple[int, bytes]:
    """Send raw bytes and say that is all (half-close, so a body shorter than its content-length ends
    there), read until the server closes; (status, body). Fails if no HTTP answer comes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                piece = sock.recv(65536)
            except ConnectionResetError:
                break
            if not piece:
                break
            chunks.append(piece)
            data = b"".join(chunks)
            head, sep, body = data.partition(b"\r\n\r\n")
            if sep and b"content-length:" in head.lower():
                length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
                if len(body) >= length:
                    break
    data = b"".join(chunks)
    assert data.startswith(b"HTTP/1."), f"no HTTP answer: {data[:80]!r}"
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def request_bytes(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "host: 127.0.0.1", "connection: close",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body


# --------------------------------------------------------------------------------------------------
# Item 24: images go through unchecked


BAD_IMAGES = {
    "invalid base64": Image("image/png", "this is not base64!!"),
    "text/html": Image("text/html", b64(b"<html><body>hello</body></html>")),
    "29 MB": Image("image/png", b64(png(8, 8)) + "A" * (29 * 1024 * 1024 // 3 * 4)),
    "bytes that are not the declared type": Image("image/png", b64(jpeg_header(10, 10))),
    "not an image at all": Image("image/gif", b64(b"plain text, no magic")),
    "javascript URL": Image(url="javascript:alert(1)"),
}


@pytest.mark.parametrize("name", BAD_IMAGES)
def test_item_24_an_invalid_image_is_named_by_its_problem(name: str) -> None:
    problem = image_problem(BAD_IMAGES[name])
    assert problem is not None
    assert image_problem(Image("image/png", b64(png(8, 8)))) is None
    assert image_problem(Image(url="https://example.com/a.png")) is None


@pytest.mark.parametrize("name", BAD_IMAGES)
def test_item_24_an_invalid_image_is_never_sent_and_the_request_stays_valid(fake: FakeProvider, name: str) -> None:
    """Each client sends a text placeholder instead; the fake, which refuses bad images as the real APIs
    do, accepts the request; the message in the log is untouched."""
    image = BAD_IMAGES[name]
    message = Message("user", (Text("What is in this picture?"), image))
    for api in APIS:
        url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
        with client_for(api, url, "m", api_key="k", retry=RetryPolicy(attempts=1)) as client:
            assert client.complete([message], max_tokens=50).text
        sent = json.dumps(fake.requests[-1].body)
        assert "[image omitted: " in sent and (image.data or "§")[:40] not in sent
    assert message.blocks[1] is image


def test_item_24_an_invalid_image_in_a_tool_result_is_replaced_too() -> None:
    result = Message("tool", (ToolResult("c1", (Text("screenshot"), BAD_IMAGES["text/html"])),))
    call = Message("assistant", (ToolCall("c1", "screenshot", {}),))
    for written in (to_anthropic([user("go"), call, result]), to_openai_chat([user("go"), call, result]),
                    to_openai_responses([user("go"), call, result])):
        text = json.dumps(written)
        assert "[image omitted: media type 'text/html'" in text and "image/html" not in text


def test_item_24_the_fake_refuses_bad_images_like_the_real_apis(fake: FakeProvider, http: httpx.Client) -> None:
    bad = b64(b"<html></html>")
    bodies = {
        "anthropic": {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": bad}}]}]},
        "chat": {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:text/html;base64,{bad}"}}]}]},
        "responses": {"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,@@@@", "detail": "auto"}]}]},
    }
    for api, body in bodies.items():
        answer = http.post(fake.base_url + PATHS[api], json=body, headers=HEADERS[api])
        assert answer.status_code == 400, (api, answer.text)
        assert answer.json()["error"]["type"] == "invalid_request_error"


def test_item_24_images_are_counted_by_their_dimensions() -> None:
    claude, gpt = counter_for("claude-sonnet-4-5"), counter_for("gpt-4o")

    def cost(counter: Any, data: bytes, media_type: str) -> int:
        return counter.count_message(Message("user", (Image(media_type, b64(data)),))) - MESSAGE_TOKENS

    assert cost(claude, png(100, 100), "image/png") == image_tokens(100, 100) == 14  # 100*100/750, rounded up
    assert cost(claude, png(1000, 500), "image/png") == 667
    assert cost(claude, png(3000, 3000), "image/png") == 1600  # scaled to 1568 px, capped
    assert cost(claude, jpeg_header(1200, 900), "image/jpeg") == image_tokens(1200, 900) == 1440
    assert cost(gpt, png(100, 100), "image/png") == 85 + 170  # one 512 px tile
    assert cost(gpt, png(2048, 1024), "image/png") == 85 + 170 * 6  # 1536 x 768: 3 x 2 tiles
    sizes = {cost(claude, png(w, w), "image/png") for w in (50, 200, 600, 1000)}
    assert len(sizes) == 4  # not one flat price
    # what is sent is what is counted: an invalid image costs its placeholder, not an image
    placeholder = image_placeholder(image_problem(Image("text/html", b64(b"<html></html>"))) or "")
    assert cost(claude, b"<html></html>", "text/html") == claude.count_text(placeholder.text) < 100


def test_item_24_the_size_cap_is_5_mb_per_image() -> None:
    at_cap = png(4, 4) + b"\0" * (MAX_IMAGE_BYTES - len(png(4, 4)))
    assert image_problem(Image("image/png", b64(at_cap))) is None
    assert "limit" in (image_problem(Image("image/png", b64(at_cap + b"\0" * 3))) or "")


def test_item_24_the_engine_prepares_a_request_the_provider_accepts(fake: FakeProvider, http: httpx.Client) -> None:
    from ctxwin.engine import ContextEngine

    engine = ContextEngine(model="claude-sonnet-4-5", policy="ctxwin", window=50_000, max_output=1_000)
    engine.append(Message("user", (Text("Describe both."), BAD_IMAGES["29 MB"], Image("image/png", b64(png(40, 30))))))
    payload = engine.prepare().to_anthropic()
    body = {"model": "m", "max_tokens": 100, **payload}
    answer = http.post(fake.base_url + MESSAGES, json=body, headers=HEADERS["anthropic"])
    assert answer.status_code == 200, answer.text
    content = body["messages"][0]["content"]
    assert [part["type"] for part in content] == ["text", "text", "image"]


# --------------------------------------------------------------------------------------------------
# Item 26: HTTP


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", " ", "99999999999999999999"])
def test_item_26_a_bad_content_length_gets_a_400_not_a_dropped_connection(fake: FakeProvider, length: str) -> None:
    status, body = raw_http(fake.port, request_bytes(CHAT, b"{}", {"content-length": length,
                                                                    "authorization": "Bearer k"}))
    assert status in (400, 413)
    assert "error" in json.loads(body)


def test_item_26_a_body_shorter_than_its_content_length_is_answered(fake: FakeProvider) -> None:
    with socket.create_connection(("127.0.0.1", fake.port), timeout=ANSWER_SECONDS) as sock:
        sock.sendall(request_bytes(CHAT, b'{"model"', {"content-length": "500"}))
        sock.shutdown(socket.SHUT_WR)
        data = sock.recv(65536)
    assert data.startswith(b"HTTP/1.") and b" 400 " in data.split(b"\r\n", 1)[0]


def test_item_26_deep_json_gets_a_400(fake: FakeProvider) -> None:
    deep = b'{"model": "m", "messages": ' + b"[" * 5_000 + b"]" * 5_000 + b"}"
    for api in ("anthropic", "chat", "responses"):
        status, body = raw_http(fake.port, request_bytes(PATHS[api], deep, {"content-length": str(len(deep)),
                                                                            **HEADERS[api]}))
        assert status == 400 and "error" in json.loads(body)


@pytest.mark.parametrize(("api", "body", "param"), [
    ("chat", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [5]}]},
     "messages[1].tool_calls[0]"),
    ("chat", {"messages": [{"role": "user", "content": [5]}]}, "messages[0].content[0]"),
    ("chat", {"messages": "hi"}, "messages"),
    ("responses", {"input": 5}, "input"),
    ("responses", {"input": [5]}, "input[0]"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}, "max_tokens"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "tools": "read"}, "tools"),
    ("responses", {"input": "hi", "tools": {"name": "x"}}, "tools"),
    ("responses", {"input": "hi", "max_output_tokens": -1}, "max_output_tokens"),
    ("chat", {"messages": [{"role": "user", "content": "hi"}], "model": 5}, "model"),
])
def test_item_26_openai_malformed_requests_get_the_real_400(fake: FakeProvider, http: httpx.Client, api: str,
                                                            body: dict[str, Any], param: str) -> None:
    answer = http.post(fake.base_url + PATHS[api], json={"model": "m", **body}, headers=HEADERS[api])
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["message"].startswith(("Invalid type for", "Invalid '"))


@pytest.mark.parametrize(("body", "where"), [
    ({"max_tokens": -1}, "max_tokens: Input should be greater than or equal to 1"),
    ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
    ({"max_tokens": "10"}, "max_tokens: Input should be a valid integer"),
    ({"tools": "read"}, "tools: Input should be a valid list"),
    ({"tools": [5]}, "tools.0: Input should be a valid dictionary"),
    ({"messages": [{"role": "user", "content": [5]}]}, "messages.0.content.0: Input should be a valid dictionary"),
    ({"messages": [5]}, "messages.0: Input should be a valid dictionary"),
    ({"system": 5}, "system: Input should be a valid string"),
    ({"stream": "yes"}, "stream: Input should be a valid boolean"),
])
def test_item_26_anthropic_malformed_requests_get_the_real_400(fake: FakeProvider, http: httpx.Client,
                                                               body: dict[str, Any], where: str) -> None:
    payload = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], **body}
    answer = http.post(fake.base_url + MESSAGES, json=payload, headers=HEADERS["anthropic"])
    assert answer.status_code == 400
    data = answer.json()
    assert data["type"] == "error" and data["error"]["message"] == where


MALFORMED_200 = [
    ("anthropic", {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "hi"}],
                   "usage": {"input_tokens": "abc", "output_tokens": 1}}),
    ("anthropic", {"type": "message", "role": "assistant", "content": [5]}),
    ("anthropic", {"type": "message", "role": "assistant", "content": "not a list"}),
    ("anthropic", {"content": [{"type": "tool_use", "id": 5, "name": None, "input": "x"}]}),
    ("openai", {"choices": {"0": {"message": {"content": "hi"}}}}),
    ("openai", {"choices": [5]}),
    ("openai", {"choices": [{"message": {"role": "assistant", "content": [5]}}]}),
    ("openai", {"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": -3}}),
    ("openai", {"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 1.5}}),
    ("openai", {"choices": [{"message": {"tool_calls": [5]}}]}),
    ("openai-responses", {"output": [5]}),
    ("openai-responses", {"output": {"type": "message"}}),
    ("openai-responses", {"output": [{"type": "message", "content": [7]}], "usage": {"input_tokens": "x"}}),
    ("openai", [1, 2, 3]),
    ("anthropic", "just a string"),
]


@pytest.mark.parametrize(("api", "answer"), MALFORMED_200, ids=lambda v: json.dumps(v)[:40] if not
                         isinstance(v, str) or v not in APIS else v)
def test_item_26_a_malformed_200_is_a_provider_error(fake: FakeProvider, api: str, answer: Any) -> None:
    fake.fail(200, answer)
    url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
    with client_for(api, url, "m", api_key="k", retry=RetryPolicy(attempts=1)) as client, \
            pytest.raises(ProviderError) as caught:
        client.complete([user("hi")], max_tokens=20)
    assert caught.value.status_code == 200


MALFORMED_STREAMS = [
    ("anthropic", "event: message_start\ndata: {not json\n\n"),
    ("anthropic", 'event: message_start\ndata: {"type": "message_start", "message": {"usage": {"input_tokens": "x"}}}'
                  "\n\n"),
    ("anthropic", 'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 3, "delta": {}}\n\n'),
    ("anthropic", 'event: message_start\ndata: {"type": "message_start", "message": {"content": []}}\n\n'),
    ("openai", 'data: {"choices": [{"delta": {"tool_calls": [5]}}]}\n\n'),
    ("openai", 'data: [1, 2]\n\n'),
    ("openai", 'data: {"choices": [{"delta": {"content": "cut"}}]}\n\n'),
    ("openai-responses", 'event: response.output_text.delta\ndata: {"type": "response.output_text.delta"}\n\n'),
    ("openai-responses", 'event: response.completed\ndata: {"type": "response.completed", "response": 5}\n\n'),
]


@pytest.mark.parametrize(("api", "stream"), MALFORMED_STREAMS)
def test_item_26_a_malformed_stream_is_a_provider_error(fake: FakeProvider, api: str, stream: str) -> None:
    fake.force(ForcedResponse(body=stream, headers={"content-type": "text/event-stream"}))
    url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
    with client_for(api, url, "m", api_key="k", retry=RetryPolicy(attempts=1)) as client, \
            pytest.raises(ProviderError):
        list(client.stream([user("hi")], max_tokens=20))


def test_item_26_a_non_json_error_body_is_read_whatever_its_bytes(fake: FakeProvider) -> None:
    fake.fail(502, b"\xff\xfe<html>bad gateway</html>", headers={"content-type": "text/html; charset=utf-8"})
    with client_for("openai", fake.openai_base_url, "m", api_key="k", retry=RetryPolicy(attempts=1)) as client, \
            pytest.raises(ProviderError) as caught:
        client.complete([user("hi")])
    assert caught.value.status_code == 502 and "bad gateway" in caught.value.message


runner = CliRunner()


def cli(*args: str) -> Any:
    from ctxwin.cli.main import app

    return runner.invoke(app, list(args))


def assert_one_line(result: Any, needle: str) -> None:
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, OSError | UnicodeDecodeError)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], result.output


def test_item_26_the_cli_reports_a_full_disk_in_one_line() -> None:
    assert_one_line(cli("report", str(EXAMPLE), "-o", "/dev/full", "--no-retention", "-q", "-p", "raw"), "ENOSPC")


def test_item_26_the_cli_reports_an_io_error_in_one_line() -> None:
    if not Path("/proc/self/mem").exists():
        pytest.skip("no /proc/self/mem to read an EIO from")
    assert_one_line(cli("inspect", "/proc/self/mem"), "EIO")  # reading offset 0 of one's own memory is EIO


def test_item_26_the_cli_reports_a_binary_policy_toml_in_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "policy.toml"
    binary.write_bytes(bytes(range(256)) * 4)
    result = cli("replay", str(EXAMPLE), "--policy", str(binary))
    assert result.exit_code != 0 and "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 2 and "error:" in lines[0], result.output


def test_item_26_stdout_on_a_full_disk_is_one_line_and_a_failure() -> None:
    src = Path(__file__).resolve().parents[1] / "src"
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "ctxwin.cli.main", "health", str(EXAMPLE)], stdout=full,
                              stderr=subprocess.PIPE, text=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
                              timeout=60)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "ENOSPC" in done.stderr


# --------------------------------------------------------------------------------------------------
# Fuzz: the fake server's request parser over real HTTP


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
VALID = {
    MESSAGES: {"model": "claude-test", "max_tokens": 50, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"},
                                     {"type": "text", "text": "go on"}]}],
        "tools": [{"name": "read", "input_schema": {"type": "object"}}], "system": "be brief"},
    CHAT: {"model": "gpt-test", "max_completion_tokens": 50, "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]},
    RESPONSES: {"model": "gpt-test", "max_output_tokens": 50, "instructions": "be brief", "input": [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"}]},
    COUNT_TOKENS: {"model": "claude-test", "messages": [{"role": "user", "content": "hi"}]},
}


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += paths_of(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += paths_of(item, (*prefix, index))
    return out


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return copy


@st.composite
def mutated_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    path = draw(st.sampled_from(sorted(VALID)))
    body = VALID[path]
    if path != COUNT_TOKENS and draw(st.booleans()):  # the streamed variant of the same request
        body = {**body, "stream": True, **({"stream_options": {"include_usage": True}} if path == CHAT else {})}
    kind = draw(st.sampled_from(["replace", "replace", "delete", "bytes", "truncate"]))
    if kind == "bytes":
        return path, draw(st.binary(max_size=200))
    if kind == "truncate":
        text = json.dumps(body).encode()
        return path, text[: draw(st.integers(0, len(text)))]
    where = draw(st.sampled_from(paths_of(body)))
    if kind == "delete" and where:
        parent = json.loads(json.dumps(body))  # a copy: the valid bodies stay as they are
        target = parent
        for key in where[:-1]:
            target = target[key]
        del target[where[-1]]
        return path, json.dumps(parent).encode()
    return path, json.dumps(replaced(body, where, draw(JSON_VALUES))).encode()


HEADER_VALUES = st.one_of(st.just(None), st.sampled_from(["abc", "-5", "0", "1", "", " 7", "1e2", "00", "+3"]),
                          st.integers(0, 10_000).map(str))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(case=mutated_bodies(), length=HEADER_VALUES, auth=st.booleans(),
       extra=st.dictionaries(st.sampled_from(["content-type", "anthropic-version", "transfer-encoding", "x-api-key",
                                              "accept-encoding"]), st.text(max_size=12), max_size=2))
def test_fuzz_the_fake_server_always_answers_over_http(server: FakeProvider, case: tuple[str, bytes],
                                                       length: str | None, auth: bool, extra: dict[str, str]) -> None:
    path, body = case
    headers = {"authorization": "Bearer k", "x-api-key": "k", "anthropic-version": "2023-06-01"} if auth else {}
    headers.update({k: v.replace("\r", "").replace("\n", "") for k, v in extra.items()})
    if length is not None:
        headers["content-length"] = length
    else:
        headers["content-length"] = str(len(body))
    status, answer = raw_http(server.port, request_bytes(path, body, headers))  # its socket timeout: a hang guard
    assert status < 500, (status, answer[:300])  # a 5xx here would be the fake's own bug
    if status >= 400 and answer:
        assert "error" in json.loads(answer)


def test_item_26_a_request_that_is_not_json_is_a_typed_error_before_sending(fake: FakeProvider) -> None:
    """A lone surrogate (item 6 reaches the clients this way) or a NaN cannot be encoded as JSON."""
    from ctxwin.errors import InputError

    for api in APIS:
        url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
        with client_for(api, url, "m", api_key="k") as client:
            with pytest.raises(InputError, match="cannot be sent as JSON"):
                client.complete([user("broken \ud83d surrogate")], max_tokens=20)
            with pytest.raises(InputError):
                client.complete([user("hi")], max_tokens=20, tools=[{"name": "t", "parameters": {"x": float("nan")}}])
    assert fake.requests == []


# --------------------------------------------------------------------------------------------------
# Fuzz: the clients' parsers of whole answers and of streams


@pytest.fixture(scope="module")
def real_answers() -> dict[str, Any]:
    """One real answer per API (text and a tool call), from the fake's own builders."""
    from ctxwin.testing import Call, Reply

    with FakeProvider(model=lambda request: Reply("Reading it.", (Call("read", {"path": "a.py"}),))) as fake, \
            httpx.Client(timeout=ANSWER_SECONDS) as client:
        out = {}
        for api, path in PATHS.items():
            body = dict(VALID[path])
            client.post(fake.base_url + path, json=body, headers=HEADERS[api]).raise_for_status()
            out[api] = fake.requests[-1].response
    return out


@settings(max_examples=150, deadline=None)
@given(api=st.sampled_from(sorted(PATHS)), data=st.data())
def test_fuzz_a_mutated_answer_parses_or_is_a_provider_error(real_answers: dict[str, Any], api: str,
                                                             data: st.DataObject) -> None:
    from ctxwin.providers.anthropic import parse_anthropic_message
    from ctxwin.providers.openai import parse_chat_completion, parse_responses_response

    answer = real_answers[api]
    where = data.draw(st.sampled_from(paths_of(answer)))
    mutated = replaced(answer, where, data.draw(JSON_VALUES))
    parse = {"anthropic": parse_anthropic_message, "chat": parse_chat_completion,
             "responses": parse_responses_response}[api]
    try:
        completion = parse(mutated)
    except ProviderError:
        return
    assert completion.message.role == "assistant"


@settings(max_examples=150, deadline=None)
@given(api=st.sampled_from(sorted(PATHS)), data=st.data())
def test_fuzz_a_mutated_stream_ends_in_done_or_a_provider_error(real_answers: dict[str, Any], api: str,
                                                                data: st.DataObject) -> None:
    from ctxwin.providers.anthropic import anthropic_stream_events
    from ctxwin.providers.base import SSE, Done
    from ctxwin.providers.openai import chat_stream_events, responses_stream_events
    from ctxwin.testing.fake_provider import stream_events

    events = [[name or "", data_] for name, data_ in stream_events(api, real_answers[api], include_usage=True)]
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(events) - 1))
        action = data.draw(st.sampled_from(["mutate", "drop", "duplicate", "garbage"]))
        if action == "drop":
            events.pop(index)
        elif action == "duplicate":
            events.insert(index, list(events[index]))
        elif action == "garbage":
            events[index][1] = data.draw(st.text(max_size=30))
        elif isinstance(events[index][1], Mapping):
            target = events[index][1]
            events[index][1] = replaced(target, data.draw(st.sampled_from(paths_of(target))), data.draw(JSON_VALUES))
        if not events:
            break
    parse = {"anthropic": anthropic_stream_events, "chat": chat_stream_events,
             "responses": responses_stream_events}[api]
    source = iter([SSE(name, value if isinstance(value, str) else json.dumps(value)) for name, value in events])
    try:
        out = list(parse(source))
    except ProviderError:
        return
    assert isinstance(out[-1], Done) and out[-1].completion.message.role == "assistant"


def test_item_24_the_replaced_images_of_a_request_can_be_listed_for_an_event() -> None:
    from ctxwin.messages.model import image_problems

    good = Image("image/png", b64(png(4, 4)))
    view = [Message("user", (Text("a"), good, BAD_IMAGES["text/html"]), id="m1"),
            Message("tool", (ToolResult("c1", (BAD_IMAGES["invalid base64"], good)),), id="m2")]
    assert [(mid, index, problem.split(" ")[0]) for mid, index, problem in image_problems(view)] == \
        [("m1", 2, "media"), ("m2", 0, "the")]
