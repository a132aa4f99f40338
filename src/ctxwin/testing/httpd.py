"""The fake's HTTP layer: a threaded HTTP/1.1 server on 127.0.0.1 that frames each request body
(content-length or chunked, at most MAX_BODY_BYTES), hands it to the fake, and writes the answer whole
or as chunks of a stream, noticing a client that cancelled it."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, TypeAlias, cast

READ_TIMEOUT_SECONDS = 30.0  # a request body that stops arriving for this long is dropped
MAX_BODY_BYTES = 32 * 1024 * 1024  # Anthropic's and OpenAI's request size limit (32 MB): 413 above
MAX_CHUNK_LINE = 1024  # bytes of one chunk-size line of a chunked request body

Answer: TypeAlias = tuple[int, dict[str, str], "bytes | Iterator[bytes]"]  # status, headers, body or SSE chunks


class Handles(Protocol):
    """What the HTTP layer hands requests to (the `FakeProvider`)."""

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Answer: ...

    def refuse(self, path: str, status: int, message: str) -> Answer: ...

    def stream_cut(self) -> None: ...


class Server(ThreadingHTTPServer):
    """Threads serving `fake` on 127.0.0.1:`port` (0: a free one)."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a proxy opening tens of connections at once is not refused

    def __init__(self, port: int, fake: Handles) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.fake = fake

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer (a cancelled stream) is normal; anything else is one line
        on stderr, not a traceback."""
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError | TimeoutError):
            print(f"fake provider: {type(error).__name__}: {error}", file=sys.stderr)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs expect
    disable_nagle_algorithm = True  # headers and body go out in two writes: without this, 40 ms delayed-ACK stalls
    timeout = READ_TIMEOUT_SECONDS  # a client that stops sending mid-body is dropped, not waited for forever

    def _serve(self) -> None:
        fake = cast(Server, self.server).fake
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            raw = _read_body(self.rfile, headers)
        except _BadBody as bad:
            self.close_connection = True  # the rest of the stream cannot be framed: answer, then hang up
            self._write(*fake.refuse(self.path, bad.status, str(bad)))
            return
        self._write(*fake.handle(self.command, self.path, headers, raw))

    def _write(self, status: int, out_headers: Mapping[str, str], data: bytes | Iterator[bytes]) -> None:
        self.send_response(status)
        for key, value in out_headers.items():
            self.send_header(key, value)
        if isinstance(data, bytes):
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for chunk in data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except ConnectionError:  # the client cancelled the stream
            self.close_connection = True
            cast(Server, self.server).fake.stream_cut()

    do_POST = do_GET = do_PUT = do_DELETE = do_PATCH = _serve  # the names http.server dispatches to

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
        return


class _BadBody(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _read_body(stream: Any, headers: Mapping[str, str]) -> bytes:
    """The request body, framed by content-length or chunked transfer encoding, at most MAX_BODY_BYTES.
    A length that is not a non-negative integer, or a body over the cap, is a `_BadBody`."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        total = 0
        while True:
            line = stream.readline(MAX_CHUNK_LINE)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _BadBody(400, "invalid chunked encoding") from None
            if size < 0:
                raise _BadBody(400, "invalid chunked encoding")
            total += size
            if total > MAX_BODY_BYTES:
                raise _BadBody(413, "Request exceeds the maximum allowed number of bytes.")
            if size == 0:
                while stream.readline(MAX_CHUNK_LINE) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(stream.read(size))
            stream.readline(MAX_CHUNK_LINE)
    declared = headers.get("content-length")
    if declared is None:
        return b""
    if not declared.strip().isdigit():
        raise _BadBody(400, f"Invalid content-length header: {declared[:40]!r}")
    length = int(declared)
    if length > MAX_BODY_BYTES:
        raise _BadBody(413, "Request exceeds the maximum allowed number of bytes.")
    raw = stream.read(length) if length else b""
    if len(raw) < length:
        raise _BadBody(400, f"the body ended after {len(raw)} of the {length} bytes content-length announced")
    return raw
