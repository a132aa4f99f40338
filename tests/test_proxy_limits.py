"""What a hostile or broken client cannot do to the proxy (issue 26): hold connections by sending half
a request, open more connections than the worker can serve, crash it with deeply nested JSON, or get
in with a token that could be guessed. Real sockets on 127.0.0.1, the proxy behind the serving
limits `ctxwin proxy` uses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ctxwin.errors import InputError
from ctxwin.proxy.config import ProxyConfig
from ctxwin.proxy.limits import FDS_RESERVED, fd_budget
from ctxwin.proxy.serve import Listen, check_serving, config_from_json, config_json
from ctxwin.testing import FakeProvider
from proxy_procs import running_proxy
from proxy_server import Served, proxy_for

HEADER_TIMEOUT = 0.5
BODY_TIMEOUT = 1.0
SLACK = 10.0  # beyond the timeout, what a loaded machine may take to get to the close
STALLED = 20  # connections per kind of stall
PATHS = {"anthropic": "/v1/messages", "openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses"}
HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01", "authorization": "Bearer k"}
HEAD = (b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"x-api-key: k\r\nanthropic-version: 2023-06-01\r\n")


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(context_window=50_000, max_output=2_000) as server:
        yield server


@pytest.fixture
def served(fake: FakeProvider) -> Iterator[Served]:
    with proxy_for(fake, limited=True, header_timeout=HEADER_TIMEOUT, body_timeout=BODY_TIMEOUT) as proxy:
        yield proxy


def connect(served: Served) -> socket.socket:
    return socket.create_connection(("127.0.0.1", served.port), timeout=HEADER_TIMEOUT + BODY_TIMEOUT + SLACK)


def closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a socket timeout fails the test:
    the connection was held)."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def request(body: bytes) -> bytes:
    return HEAD + b"content-length: %d\r\n\r\n%s" % (len(body), body)


HELLO = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 10,
                    "messages": [{"role": "user", "content": "hello"}]}).encode()


@pytest.mark.parametrize("stall", ["nothing", "half a header", "headers and a short body"])
def test_stalled_clients_are_closed_within_the_timeout(served: Served, stall: str) -> None:
    sockets = [connect(served) for _ in range(STALLED)]
    started = time.monotonic()
    for sock in sockets:
        if stall == "half a header":
            sock.sendall(HEAD[:40])
        elif stall == "headers and a short body":
            sock.sendall(HEAD + b"content-length: 1000\r\n\r\n" + HELLO[:20])
    answers = [closed(sock) for sock in sockets]  # each returns once the proxy closed it
    waited = time.monotonic() - started
    for sock in sockets:
        sock.close()
    timeout = HEADER_TIMEOUT if stall != "headers and a short body" else BODY_TIMEOUT
    # Not before the client had its time (less a little: the proxy's clock starts at its accept, ours before
    # connect returned, and the two need not agree to the millisecond).
    assert waited >= timeout - 0.05
    assert all(not answer.startswith(b"HTTP/1.1 2") for answer in answers)
    # The worker still serves.
    assert httpx.post(f"{served.url}/v1/messages", content=HELLO, headers=HEADERS, timeout=30).status_code == 200


def read_response(sock: socket.socket) -> bytes:
    """One whole response (the proxy's whole answers carry a content-length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or b"!"
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length"))
    while len(body) < length:
        body += sock.recv(65536)
    return head


def test_the_idle_time_between_requests_is_not_a_stall(served: Served) -> None:
    """The header timeout runs from a request's first byte (or the connection's opening), not over
    the keep-alive wait between two requests on one connection."""
    with connect(served) as sock:
        sock.sendall(request(HELLO))
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        time.sleep(HEADER_TIMEOUT * 3)
        sock.sendall(request(HELLO))  # the same connection, still open
        assert read_response(sock).startswith(b"HTTP/1.1 200")


def test_a_slow_but_steady_request_gets_through(served: Served) -> None:
    """A request sent in pieces, each well inside the timeouts, is served."""
    with connect(served) as sock:
        data = request(HELLO)
        for start in range(0, len(data), 64):
            sock.sendall(data[start:start + 64])
            time.sleep(HEADER_TIMEOUT / 20)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200")


def test_headers_past_their_limit_close_the_connection(fake: FakeProvider) -> None:
    with proxy_for(fake, limited=True, header_timeout=60.0) as served, connect(served) as sock:
        with contextlib.suppress(OSError):  # a broken pipe once the proxy closed it
            sock.sendall(HEAD + b"".join(b"x-padding-%d: %s\r\n" % (n, b"y" * 1000) for n in range(100)))
        try:
            answer = closed(sock)  # within SLACK, long before the header timeout
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/1.1 2")


def test_connections_past_the_cap_are_answered_503_and_closed(fake: FakeProvider) -> None:
    with proxy_for(fake, limited=True, max_connections=4, header_timeout=30.0) as served:
        idle = [connect(served) for _ in range(4)]
        time.sleep(0.2)  # the server has accepted them
        with connect(served) as extra:
            answer = closed(extra)
        assert answer.startswith(b"HTTP/1.1 503")
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["type"] == "overloaded_error"
        for sock in idle:
            sock.close()
        time.sleep(0.2)
        assert httpx.post(f"{served.url}/v1/messages", content=HELLO, headers=HEADERS, timeout=30).status_code == 200


def test_idle_keep_alive_connections_make_room_for_a_new_one_at_the_cap(fake: FakeProvider) -> None:
    """A connection that is only waiting for its next request gives its place to a new connection when
    the worker is full, as nginx reuses idle keep-alive connections: else a client without the token
    could hold every place by sending one request a keep-alive timeout (75 s), and everyone with the
    token would be answered 503 (seen on a real proxy: 80 such connections, 503s for 75 s)."""
    with proxy_for(fake, limited=True, max_connections=4, header_timeout=30.0,
                   auth_token="a-token-of-the-test-0123") as served:
        idle = [connect(served) for _ in range(4)]
        for sock in idle:  # one unauthenticated request each, then they wait on the open connection
            sock.sendall(request(HELLO))
            assert read_response(sock).startswith(b"HTTP/1.1 401")
        answers = [httpx.post(f"{served.url}/v1/messages", content=HELLO, timeout=30,
                              headers={**HEADERS, "x-ctxwin-token": "a-token-of-the-test-0123", "connection": "close"})
                   for _ in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 200]
        for sock in idle:
            sock.close()


def test_a_connection_past_the_cap_reads_its_503_even_after_sending_its_request(fake: FakeProvider) -> None:
    """Past the cap the caller has sent its request by the time it reads: the refusal must still reach
    it, not a reset (closing a socket with unread bytes makes the kernel send RST, which destroys the
    503 in the caller's receive buffer). What it sent is read and dropped until it closes."""
    with proxy_for(fake, limited=True, max_connections=1, header_timeout=30.0) as served, \
            connect(served) as busy:  # the one place, taken by a request still coming (not idle: kept)
        busy.sendall(HEAD[:40])
        time.sleep(0.2)
        for _ in range(3):
            with connect(served) as extra:
                extra.sendall(request(HELLO))
                time.sleep(0.3)  # the caller's request is in before it reads
                answer = closed(extra)
            assert answer.startswith(b"HTTP/1.1 503"), answer[:80]


def test_the_fd_budget_fits_the_limit() -> None:
    for limit in (256, 1024, 4096, 1 << 20):
        budget = fd_budget(limit)
        assert budget.connections >= 2 and budget.sessions >= 1
        # Every connection may hold its session open on top of the cache: still under the limit.
        assert FDS_RESERVED + budget.connections * (2 + 4) + budget.sessions * 4 <= max(limit, FDS_RESERVED + 8 + 24)
    assert fd_budget(1024, session_fds=0).sessions == 0  # sessions in memory hold no descriptors


# ---------------------------------------------------------------------------------------------- bodies


@pytest.mark.parametrize("api", list(PATHS))
@pytest.mark.parametrize("where", ["content", "history", "field"])
@pytest.mark.parametrize("stream", [False, True])
def test_deeply_nested_json_is_a_400_in_the_apis_shape(served: Served, api: str, where: str, stream: bool) -> None:
    deep = "[" * 20_000 + "]" * 20_000
    key = "input" if api == "openai-responses" else "messages"
    model = "claude-sonnet-4-5" if api == "anthropic" else "gpt-4o"
    history = {"content": f'[{{"role":"user","content":{deep}}}]', "history": deep,
               "field": '[{"role":"user","content":"hi"}]'}[where]
    extra = f',"metadata":{deep}' if where == "field" else ""
    body = f'{{"model":"{model}","max_tokens":10,"stream":{str(stream).lower()},"{key}":{history}{extra}}}'
    response = httpx.post(f"{served.url}{PATHS[api]}", content=body.encode(), headers=HEADERS, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()
    message = error["error"]["message"]
    if api == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    else:
        assert set(error["error"]) == {"message", "type", "param", "code"}
    assert "nest" in message or "cannot read" in message


@pytest.mark.parametrize("api", list(PATHS))
def test_a_refusal_of_the_request_is_said_once(served: Served, api: str) -> None:
    """A refusal raised while reading the conversation (here `tools` that is no array) reaches the
    caller as it was written, not wrapped again as 'cannot read the conversation' (a ProxyRefusal is an
    InputError too)."""
    key = "input" if api == "openai-responses" else "messages"
    model = "claude-sonnet-4-5" if api == "anthropic" else "gpt-4o"
    body = {"model": model, "max_tokens": 10, key: [{"role": "user", "content": "hi"}], "tools": {"a": 1}}
    response = httpx.post(f"{served.url}{PATHS[api]}", json=body, headers=HEADERS, timeout=30)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "`tools` is not a list of tool definitions" in message, message
    assert "cannot read the conversation" not in message and message.count("(") <= 1, message


def test_deep_json_to_count_tokens_is_a_400(served: Served) -> None:
    deep = "[" * 20_000 + "]" * 20_000
    body = f'{{"model":"claude-sonnet-4-5","messages":[{{"role":"user","content":{deep}}}]}}'
    response = httpx.post(f"{served.url}/v1/messages/count_tokens", content=body.encode(), headers=HEADERS,
                          timeout=30)
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"


# ---------------------------------------------------------------------------------------------- tokens


@pytest.mark.parametrize("token", [" ", "x", "a" * 15, " " + "a" * 15, "a" * 16 + " ", "\t" * 20])
def test_a_token_that_could_be_guessed_is_refused_before_serving(token: str) -> None:
    with pytest.raises(InputError, match="token"):
        check_serving(ProxyConfig("http://u", auth_token=token), Listen("127.0.0.1", 1), 1)
    with pytest.raises(InputError, match="token"):
        check_serving(ProxyConfig("http://u", auth_token=token), Listen("0.0.0.0", 1), 1)


@pytest.mark.parametrize("token", ["тестовый-токен-длинный-1", "a-long-token-\u00e9\u00e9\u00e9\u00e9\u00e9",
                                   "a-long-token-with\na-newline", "a-long-token-with-a-NUL\x00-inside",
                                   "a-long-token-\x7f-with-DEL"])
def test_a_token_no_client_could_send_is_refused_before_serving(token: str) -> None:
    """HTTP header values carry bytes (clients encode them as ASCII; the server decodes Latin-1), so a
    token outside printable ASCII could never match in `x-ctxwin-token` or `Authorization`: refused
    with what to use instead, not accepted and then answered 401 forever."""
    with pytest.raises(InputError, match="printable ASCII"):
        check_serving(ProxyConfig("http://u", auth_token=token), Listen("0.0.0.0", 1), 1)
    check_serving(ProxyConfig("http://u", auth_token="a long token with ~!@#$%^&*() inside"), Listen("0.0.0.0", 1), 1)


def test_a_worker_refuses_a_short_token_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxwin.proxy.serve import CONFIG_ENV, app_from_env

    monkeypatch.setenv(CONFIG_ENV, config_json(ProxyConfig("http://u", auth_token="%20")))
    assert config_from_json(config_json(ProxyConfig("http://u", auth_token="%20"))).auth_token == "%20"
    with pytest.raises(InputError, match="at least 16"):
        app_from_env()
    check_serving(ProxyConfig("http://u", auth_token="a" * 16), Listen("0.0.0.0", 1), 1)


# ---------------------------------------------------------------------------------------------- descriptors


@pytest.mark.slow
def test_a_thousand_sessions_under_ulimit_1024_get_no_500(tmp_path: Path) -> None:
    """The proxy in a process limited to 1,024 file descriptors, sessions on disk (JSONL, 4 each):
    1,000 sessions, then a second request to some of them (reopened after eviction), 50 at a time.
    None is a 500; every one is answered (the cache and the connections are sized from the limit)."""
    sessions, concurrent = 1000, 50
    problems: list[str] = []

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    with FakeProvider(context_window=50_000, max_output=2_000) as fake, \
            running_proxy(fake.anthropic_base_url, "--store", str(tmp_path / "store"), tmp=tmp_path,
                          preexec_fn=limit) as proxy:
        limits = Path(f"/proc/{proxy.process.pid}/limits").read_text()
        assert re.search(r"Max open files\s+1024\s+1024", limits), limits

        async def run() -> list[int]:
            statuses: list[int] = []
            gate = asyncio.Semaphore(concurrent)
            async with httpx.AsyncClient(base_url=proxy.url, headers=HEADERS, timeout=120,
                                         limits=httpx.Limits(max_connections=concurrent)) as client:
                async def one(n: int) -> None:
                    body = {"model": "claude-sonnet-4-5", "max_tokens": 10,
                            "messages": [{"role": "user", "content": f"session {n}: hello"}]}
                    async with gate:
                        answer = await client.post("/v1/messages", json=body, headers={"x-ctxwin-session": f"s{n}"})
                    statuses.append(answer.status_code)
                    if answer.status_code != 200:
                        problems.append(answer.text[:300])

                await asyncio.gather(*(one(n) for n in range(sessions)))
                await asyncio.gather(*(one(n) for n in range(0, sessions, 10)))  # back to evicted ones
            return statuses

        statuses = asyncio.run(run())
        open_fds = len(list(Path(f"/proc/{proxy.process.pid}/fd").iterdir()))
    assert len(statuses) == sessions + sessions // 10
    assert 500 not in statuses
    assert statuses.count(200) == len(statuses), problems[:3]
    assert open_fds < 1024


@pytest.mark.slow
def test_300_mb_lines_streaming_back_to_back_leave_other_sessions_served() -> None:
    """benchmarks/proxy_hostile.py, run as it is (the proxy and a flooding upstream in their own
    processes): every flood ends in the proxy's error event, and every request of the other
    sessions, sent while floods stream, is answered. How much slower they are is the benchmark's
    `other_added_slowdown_p50` (target under 2): a ratio of latencies that depends on what else the
    machine runs, so it is read from the benchmark on a quiet machine, not asserted here."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "proxy_hostile.py"
    run = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=600,
                         check=True)
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["errors"] == 0, result["error_examples"]
    assert result["other_requests"] >= 60 and result["floods"] >= 3
