"""An upstream that misbehaves (an event that is not JSON, a line or an answer over the size limit):
the caller gets its API's error (an error event in a stream, an error body otherwise), never a cut
connection, and the request's entry records the failure. The upstream is a real Starlette app on
127.0.0.1 sending exactly the bytes under test."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ctxwin.proxy.config import DEFAULT_MAX_BODY_BYTES, ProxyConfig
from proxy_server import Served, proxy_for, serve

LIMIT = 20_000
FLOOD_MB = 300
PATHS = {"anthropic": "/v1/messages", "openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses"}
START = {
    "anthropic": b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","type":"message",'
                 b'"role":"assistant","model":"x","content":[],"stop_reason":null,'
                 b'"usage":{"input_tokens":1,"output_tokens":0}}}\n\n',
    "openai-chat": b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"x",'
                   b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n',
    "openai-responses": b'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
                        b'"response":{"id":"r","object":"response","status":"in_progress","output":[]}}\n\n',
}
BAD = {
    "anthropic": b"event: content_block_start\ndata: {not json\n\n",
    "openai-chat": b"data: {oops\n\n",
    "openai-responses": b"event: response.output_item.added\ndata: {nope\n\n",
}
PARTIAL = {
    "anthropic": b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
                 b'"content_block":{"type":"text","text":""}}\n\nevent: content_block_delta\ndata: {"type":'
                 b'"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Half an ans"}}\n\n',
    "openai-chat": b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"x",'
                   b'"choices":[{"index":0,"delta":{"content":"Half an ans"},"finish_reason":null}]}\n\n',
    "openai-responses": b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                        b'"sequence_number":1,"item_id":"m","output_index":0,"content_index":0,'
                        b'"delta":"Half an ans"}\n\n',
}
END = {
    "anthropic": b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    "openai-chat": b"data: [DONE]\n\n",
    "openai-responses": b'event: response.completed\ndata: {"type":"response.completed","response":{"id":"r"}}\n\n',
}


def upstream(mode: str) -> Starlette:
    async def answer(request: Request) -> Response:
        api = next(name for name, path in PATHS.items() if request.url.path == path)
        if mode == "huge-body":
            return Response(json.dumps({"id": "x", "pad": "x" * (LIMIT * 3)}), media_type="application/json")

        async def events() -> AsyncIterator[bytes]:
            yield START[api]
            if mode == "cut-short":  # a clean end of the HTTP stream, before the answer's own end
                yield PARTIAL[api]
                return
            if mode == "bad-json":
                yield BAD[api]
            elif mode == "flood":  # a 300 MB line, at the proxy's default limit
                yield b"data: "
                chunk = b"x" * 2**20
                for _ in range(FLOOD_MB):
                    yield chunk
            elif mode == "long-stream":  # small events, far over the limit in all
                for _ in range(LIMIT // 100):
                    yield b"event: ping\ndata: {\"type\":\"ping\",\"pad\":\"" + b"x" * 200 + b"\"}\n\n"
            else:  # a data line with no end, far over the limit
                yield b"data: " + b"x" * (LIMIT * 3)
            yield END[api]

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route(path, answer, methods=["POST"]) for path in PATHS.values()])


@pytest.fixture
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    limit = DEFAULT_MAX_BODY_BYTES if request.param == "flood" else LIMIT
    with serve(upstream(request.param)) as port, \
            proxy_for(None, ProxyConfig(upstream=f"http://127.0.0.1:{port}"), max_body_bytes=limit) as proxy:
        proxy.app.state.mode = request.param
        yield proxy


def body_for(api: str, stream: bool) -> dict[str, object]:
    messages = [{"role": "user", "content": "hello"}]
    key = "input" if api == "openai-responses" else "messages"
    return {"model": "claude-sonnet-4-5" if api == "anthropic" else "gpt-4o", "max_tokens": 10, key: messages,
            "stream": stream}


def headers() -> dict[str, str]:
    return {"x-api-key": "k", "anthropic-version": "2023-06-01", "authorization": "Bearer k"}


@pytest.mark.parametrize("served", ["bad-json", "huge-line", "long-stream", "cut-short"], indirect=True)
@pytest.mark.parametrize("api", list(PATHS))
def test_a_broken_upstream_stream_ends_in_the_callers_error_event(served: Served, api: str) -> None:
    """`cut-short`: the upstream ends its stream cleanly but before its answer's end (no
    message_stop, finish chunk or response.completed): the caller must not take half an answer for
    a whole one, and the entry is no success."""
    with httpx.stream("POST", f"{served.url}{PATHS[api]}", json=body_for(api, True), headers=headers(),
                      timeout=30) as response:
        text = "".join(response.iter_text())  # read to its end: no RemoteProtocolError
    served.settle()
    [entry] = served.entries()
    assert response.status_code == 200
    error = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")][-1]
    if api == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "api_error"
        message = error["error"]["message"]
    elif api == "openai-chat":
        message = error["error"]["message"]
    else:
        assert error["type"] == "error"
        message = error["message"]
    mode = served.app.state.mode
    expected = {"bad-json": "not the API's JSON", "cut-short": "ended before its answer did"}
    assert expected.get(mode, "over the proxy's limit") in message
    assert entry["status"] == 502 and entry["streamed"]
    assert len(text) < LIMIT * 2  # never more than the limit was relayed


@pytest.mark.parametrize("served", ["huge-body"], indirect=True)
@pytest.mark.parametrize("api", list(PATHS))
def test_a_whole_answer_over_the_limit_is_a_502_in_the_callers_shape(served: Served, api: str) -> None:
    response = httpx.post(f"{served.url}{PATHS[api]}", json=body_for(api, False), headers=headers(), timeout=30)
    served.settle()
    [entry] = served.entries()
    assert response.status_code == 502
    data = response.json()
    message = data["error"]["message"]
    assert "over the proxy's limit" in message and "--max-body-bytes" in message
    assert (data["type"] == "error") if api == "anthropic" else (data["error"]["type"] == "server_error")
    assert entry["status"] == 502


@pytest.mark.parametrize("served", ["flood"], indirect=True)
@pytest.mark.parametrize("api", list(PATHS))
def test_a_300_mb_stream_line_is_cut_short_with_a_502_error_event(served: Served, api: str) -> None:
    """At the default --max-body-bytes (64 MiB): the line is refused once it passes the longest line
    the proxy reads (16 MiB), not after 64 MiB, let alone 300; the caller gets its error event."""
    with httpx.stream("POST", f"{served.url}{PATHS[api]}", json=body_for(api, True), headers=headers(),
                      timeout=60) as response:
        text = "".join(response.iter_text())
    served.settle()
    [entry] = served.entries()
    last = json.loads([line[6:] for line in text.splitlines() if line.startswith("data: {")][-1])
    message = last["error"]["message"] if api != "openai-responses" else last["message"]
    assert "over the proxy's limit of 16,777,216 bytes" in message
    assert entry["status"] == 502 and len(text) < 10_000  # the line itself never reached the caller
