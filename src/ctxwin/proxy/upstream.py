"""The provider behind the proxy: where a request goes, with which headers, and how its answer is
read (whole, or as server-sent events), each bounded by `max_body_bytes` and timed as upstream time.

Everything here is plumbing the request's turn (`proxy.turn`) uses without knowing HTTP: a
connection failure is a 502 `UpstreamError`, a timeout a 504, an answer over the limit a 502, all
in words the caller can act on. The stream is parsed by `httpx-sse`, the parser the provider
clients use (`ctxwin.providers`), over the answer's bytes counted as they arrive: an upstream
cannot make the proxy buffer more than the limit, however it frames its events.
"""

from __future__ import annotations

import contextlib
import hmac
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Protocol

import httpx
from httpx_sse import EventSource, SSEError
from starlette.requests import Request

from ctxwin.errors import UpstreamError
from ctxwin.providers.base import SSE

from .config import ProxyConfig
from .limits import budget_for

TOKEN_HEADER = "x-ctxwin-token"
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length",
    "accept-encoding",  # httpx negotiates its own and decodes; the caller gets identity bytes
    TOKEN_HEADER, "x-ctxwin-session",
})
RESPONSE_DROP = frozenset({*HOP_BY_HOP, "content-encoding", "content-length", "date", "server"})
"""Not relayed from the upstream's answer: what the proxy's own server writes (date, server, framing)."""
MAX_KEEPALIVE = 64  # idle upstream connections kept for reuse
MAX_LINE_BYTES = 16 * 2**20
"""The longest line of a streamed answer the proxy reads (or `max_body_bytes`, when smaller). No API
sends one near it: the largest events are a Responses `response.completed`, which repeats the whole
answer, and a generated image in base64, a few MB. Past it the stream is refused at once, not after
`max_body_bytes` of one line."""
CONNECT_TIMEOUT_S = 10.0


class Timing(Protocol):
    """What an upstream call adds its time to (the request's `Exchange`)."""

    upstream_s: float


def is_bearer(value: str, token: str) -> bool:
    """Whether an `Authorization` header carries `token` as its bearer (compared in constant time)."""
    return value[:7].lower() == "bearer " and hmac.compare_digest(value[7:].strip().encode(), token.encode())


def forward_headers(headers: Mapping[str, str], token: str | None) -> dict[str, str]:
    """The caller's headers as they go upstream: less the hop-by-hop ones and ctxwin's own, and less
    `Authorization` when it carries ctxwin's token (then the provider key travels in another header)."""
    out = {k: v for k, v in headers.items() if k not in HOP_BY_HOP}
    if token is not None and is_bearer(out.get("authorization", ""), token):
        del out["authorization"]
    return out


def response_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k not in RESPONSE_DROP}


def over_limit(limit: int, what: str = "answer") -> UpstreamError:
    return UpstreamError(502, f"the upstream's {what} is over the proxy's limit of {limit:,} bytes",
                         "raise --max-body-bytes if the provider really sends answers that large")


class Upstream:
    """The upstream of one app: its base URL, the client (opened by the app's lifespan), the limits."""

    def __init__(self, config: ProxyConfig, transport: httpx.AsyncBaseTransport | None = None) -> None:
        base = config.upstream.rstrip("/")
        self.base = base[:-3] if base.endswith("/v1") else base  # callers send /v1/...
        self.timeout = config.upstream_timeout
        self.limit = config.max_body_bytes
        self.token = config.auth_token
        self.transport = transport
        self.max_connections = budget_for(config).connections  # one upstream connection per caller's, at most
        self.client: httpx.AsyncClient | None = None

    def open(self) -> httpx.AsyncClient:
        """The client for the app's life; the caller closes it (`async with`)."""
        timeout = httpx.Timeout(self.timeout, connect=min(CONNECT_TIMEOUT_S, self.timeout))
        self.client = httpx.AsyncClient(timeout=timeout, transport=self.transport, follow_redirects=False,
                                        limits=httpx.Limits(max_connections=self.max_connections,
                                                            max_keepalive_connections=MAX_KEEPALIVE))
        return self.client

    def url(self, request: Request) -> str:
        query = request.url.query
        return f"{self.base}{request.url.path}" + (f"?{query}" if query else "")

    async def send(self, request: Request, content: bytes, timing: Timing, *, stream: bool = False,
                   headers: Mapping[str, str] | None = None) -> httpx.Response:
        """The caller's request with this body, upstream (its own headers unless `headers` are given);
        a connection failure is a 502 and a timeout a 504."""
        assert self.client is not None, "the app's lifespan has not started (run it under an ASGI server)"
        outgoing = self.client.build_request(request.method, self.url(request), content=content,
                                             headers=forward_headers(request.headers, self.token)
                                             if headers is None else headers)
        started = time.perf_counter()
        try:
            return await self.client.send(outgoing, stream=stream)
        except httpx.TimeoutException:
            raise UpstreamError(504, f"the upstream {self.base} did not answer within {self.timeout:g} s",
                                "try again, or raise --upstream-timeout") from None
        except httpx.HTTPError as error:
            raise UpstreamError(502, f"the upstream {self.base} is unreachable: {type(error).__name__}",
                                "check --upstream and that the provider is up") from None
        finally:
            timing.upstream_s += time.perf_counter() - started

    async def read(self, response: httpx.Response, timing: Timing) -> bytes:
        """The whole answer, refused with 502 past the limit (read no further than that)."""
        chunks: list[bytes] = []
        async with contextlib.aclosing(self.chunks(response, timing)) as source:
            async for chunk in source:
                chunks.append(chunk)
        return b"".join(chunks)

    async def chunks(self, response: httpx.Response, timing: Timing) -> AsyncGenerator[bytes, None]:
        """The answer's bytes as they arrive (decoded), their waiting counted as upstream time; a 502
        past the limit (the response closed: nothing more is read), a break or a stall a 502 / 504."""
        size = 0
        # Every generator here is closed where it ends, never left to the collector: an async
        # generator it finalizes runs its cleanup at a moment no request chose.
        source = response.aiter_bytes()
        try:
            while True:
                started = time.perf_counter()
                try:
                    chunk = await anext(source)
                except StopAsyncIteration:
                    return
                finally:
                    timing.upstream_s += time.perf_counter() - started
                size += len(chunk)
                if size > self.limit:
                    raise over_limit(self.limit)
                yield chunk
        except httpx.TimeoutException:
            raise UpstreamError(504, "the upstream stopped answering mid-response", "try again") from None
        except httpx.HTTPError as error:
            raise UpstreamError(502, f"the upstream broke off its answer: {type(error).__name__}",
                                "try again") from None
        finally:
            await source.aclose()  # type: ignore[attr-defined]  # httpx's aiter_bytes is an async generator
            await response.aclose()

    async def lines_bounded(self, response: httpx.Response, timing: Timing) -> AsyncGenerator[bytes, None]:
        """`chunks`, refused with 502 as soon as one line passes `MAX_LINE_BYTES` (or the limit)."""
        cap = min(self.limit, MAX_LINE_BYTES)
        line = 0  # bytes since the last line break
        async with contextlib.aclosing(self.chunks(response, timing)) as chunks:
            async for chunk in chunks:
                end = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
                line = line + len(chunk) if end < 0 else len(chunk) - end - 1
                if line > cap:
                    raise over_limit(cap, "stream line")
                yield chunk

    async def events(self, response: httpx.Response, timing: Timing) -> AsyncGenerator[SSE, None]:
        """The server-sent events of a streamed answer as they arrive (`event` "" when the server named
        none, which Chat's chunks never do), parsed by httpx-sse over `lines_bounded` (so bounded,
        linear however long a line is, and timed)."""
        counted = httpx.Response(response.status_code, headers={"content-type": "text/event-stream; charset=utf-8"},
                                 stream=_Chunks(self.lines_bounded(response, timing)))
        try:
            async with contextlib.aclosing(EventSource(counted).aiter_sse()) as events:
                async for sse in events:
                    # httpx-sse names an unnamed event "message", as the spec's default type: the same
                    # event for a browser, but relayed as it came, without an `event:` line.
                    yield SSE("" if sse.event == "message" else sse.event, sse.data)
        except SSEError as error:
            raise UpstreamError(502, f"the upstream's stream is not server-sent events: {error}", "try again") from None
        finally:
            await counted.aclose()
            await response.aclose()


class _Chunks(httpx.AsyncByteStream):
    def __init__(self, source: AsyncGenerator[bytes, None]) -> None:
        self._source = source

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._source:
            yield chunk

    async def aclose(self) -> None:
        await self._source.aclose()


__all__ = ["HOP_BY_HOP", "RESPONSE_DROP", "TOKEN_HEADER", "Upstream", "forward_headers", "response_headers"]
