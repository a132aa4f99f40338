"""One span per request the proxy handles (`ctxwin.proxy.request`), current while the request is
served, so the engine's spans for it (`instrument`) nest under it. `record(entry)` puts the proxy's
request record on it: status, tokens received and forwarded, usage, cache reads and writes.
(OpenTelemetry is imported only when a span is really made: `ProxySpan()` is also the "off" span.)"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ctxwin.store.entries import ProxyRequestEntry

from . import attributes as a


class ProxySpan:
    """The open span of one proxy request (`span` None: telemetry is off, every call does nothing)."""

    def __init__(self, span: Any = None) -> None:
        self.span = span

    def session(self, session_id: str | None) -> None:
        """The session, once the proxy has identified it from the traffic."""
        if self.span is not None and session_id:
            self.span.set_attributes(a.session_attributes(session_id))

    def record(self, entry: ProxyRequestEntry, session_id: str | None = None) -> None:
        """The proxy's record of this request, as written to the session log."""
        if self.span is None:
            return
        self.session(session_id)
        self.span.set_attributes(a.proxy_attributes(entry))
        if entry.status >= 500:
            from opentelemetry.trace import Status, StatusCode

            self.span.set_status(Status(StatusCode.ERROR, f"HTTP {entry.status}"))
            self.span.set_attribute(a.ERROR_TYPE, str(entry.status))


@contextmanager
def request_span(tracer_provider: Any, api: str, model: str | None, session_id: str | None) -> Iterator[ProxySpan]:
    from opentelemetry.trace import SpanKind

    tracer = tracer_provider.get_tracer(a.TRACER_NAME)
    with tracer.start_as_current_span(a.PROXY_REQUEST, kind=SpanKind.SERVER,
                                      attributes=a.proxy_start_attributes(api, model, session_id)) as span:
        yield ProxySpan(span)
