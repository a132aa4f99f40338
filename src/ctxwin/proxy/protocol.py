"""uvicorn's HTTP protocol with the limits of `proxy.limits`.

uvicorn has a keep-alive timeout (the idle time between two requests on one connection) but no
timeout while a request is being sent, so a client that sends half a header, or headers and a short
body, would hold its connection (and a file descriptor) forever, and no limit on how many connections
it accepts. `LimitedProtocol` is uvicorn's own protocol (httptools when installed, else h11, as
uvicorn's "auto" picks) with those limits added where they can be seen whatever the parser: a
connection opening, bytes arriving, and the parser starting or finishing a request.

At the cap, a connection that is only waiting for its next request (uvicorn's keep-alive timer is
running) gives its place to the new one, the one idle longest first, as nginx reuses idle keep-alive
connections; else one request per keep-alive timeout and connection, no token needed, would keep
every caller out. Only when none is idle is the new connection refused: a 503, and then, as nginx's
lingering close, what the caller sends is read and dropped for `REFUSED_LINGER_S` before the socket
is closed (closing a socket with unread bytes sends a reset, which destroys the 503 in the caller's
receive buffer before it reads it).
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from .limits import Limits

REFUSED_LINGER_S = 1.0
"""How long a refused connection is kept (reading and dropping) so that its 503 is not destroyed by a reset."""
OVERLOADED = (b'{"type":"error","error":{"type":"overloaded_error","message":"ctxwin proxy: too many connections '
              b'open (try again shortly, or run more --workers)"}}')


def _uvicorn_protocol() -> Any:
    try:
        import httptools  # noqa: F401  (what uvicorn's "auto" picks when it is installed)
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        return HttpToolsProtocol
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol


class LimitedProtocol(_uvicorn_protocol()):  # type: ignore[misc]  # the base is chosen at import: the installed one
    """uvicorn's HTTP protocol with `limits`: a connection past `max_connections` is answered 503 and
    closed at once; a request whose headers take longer than `header_timeout`, or grow past
    `max_header_bytes`, and one whose body takes longer than `body_timeout` are closed. The idle time
    between requests stays uvicorn's keep-alive timeout."""

    limits: ClassVar[Limits | None] = None
    """Set once per process by whatever serves (`serve.app_from_env`, or `protocol_for`)."""

    _deadline: asyncio.TimerHandle | None = None
    _header_bytes = 0
    _refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        limits = self.limits
        if limits is not None and len(self.connections) > limits.max_connections and not self._make_room():
            self._refuse(transport)
            return
        self._arm_headers()

    def _make_room(self) -> bool:
        """Closes the connection idle longest between two requests (False: none is)."""
        idle = [c for c in self.connections if c is not self and c.timeout_keep_alive_task is not None]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.timeout_keep_alive_task.when())
        oldest.timeout_keep_alive_task.cancel()
        oldest.timeout_keep_alive_task = None  # not chosen again before it is gone
        self.connections.discard(oldest)
        oldest.timeout_keep_alive_handler()  # what uvicorn does when the keep-alive timeout runs out
        return True

    def _refuse(self, transport: asyncio.Transport) -> None:
        self._refused = True
        transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                        b"connection: close\r\nretry-after: 1\r\ncontent-length: %d\r\n\r\n%s"
                        % (len(OVERLOADED), OVERLOADED))
        if transport.can_write_eof():
            transport.write_eof()  # the caller reads the 503, then the end; its close ends this one
        self._arm(REFUSED_LINGER_S)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return  # a refused caller's request: read and dropped (see the module docstring)
        limits = self.limits
        cycle = self.cycle
        heading = limits is not None and (cycle is None or cycle.response_complete)  # a request's head is coming
        if heading and self._deadline is None:
            self._arm_headers()
        super().data_received(data)
        if limits is None or self.transport.is_closing():
            return
        if heading and self.cycle is cycle:  # still no whole head: these bytes all belong to it
            self._header_bytes += len(data)
            if self._header_bytes > limits.max_header_bytes:
                self._close()
        elif self.cycle is not cycle:  # the head is in: the body's time starts
            self._header_bytes = 0
            self._arm(limits.body_timeout if self.cycle.more_body else None)
        elif not self.cycle.more_body:
            self._arm(None)  # the whole request is in

    def connection_lost(self, exc: Exception | None) -> None:
        self._arm(None)
        super().connection_lost(exc)

    def _arm_headers(self) -> None:
        if self.limits is not None:
            self._header_bytes = 0
            self._arm(self.limits.header_timeout)

    def _arm(self, seconds: float | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None if seconds is None else asyncio.get_running_loop().call_later(seconds, self._close)

    def _close(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()  # the app, if it was reading the body, sees the caller gone


def protocol_for(limits: Limits) -> type[LimitedProtocol]:
    """A protocol class with these limits, for a server in this process (tests, benchmarks)."""
    return type("LimitedProtocol", (LimitedProtocol,), {"limits": limits})


__all__ = ["LimitedProtocol", "protocol_for"]
