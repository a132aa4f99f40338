"""One span per request the proxy handles, current while the request is served, so the engine's spans
for it (`instrument`) nest under it. It stands for the model call the caller made, so it is named as
the GenAI conventions name one: `chat {model}`.

Traces join: a W3C `traceparent` (and `tracestate`) in the caller's headers makes the span a child of
the caller's span, in the caller's trace; `inject(headers)` writes this span's context into the
headers going upstream, so the provider's (or the next proxy's) spans continue the same trace.
`record(entry)` puts the proxy's request record on the span (status, tokens received and forwarded,
usage, cache reads and writes); `response(data)` the upstream answer's id, model and finish reasons.
(OpenTelemetry is imported only when a span is really made: `ProxySpan()` is also the "off" span.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ctxwin.store.entries import ProxyRequestEntry

if TYPE_CHECKING:  # OpenTelemetry is imported only when a span is made
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, TracerProvider

from . import attributes as a

TRACE_HEADERS = ("traceparent", "tracestate")
"""The W3C Trace Context headers: read from the caller, written upstream."""


class ProxySpan:
    """The open span of one proxy request (`span` None: telemetry is off, every call does nothing)."""

    def __init__(self, span: Span | None = None) -> None:
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

    def response(self, data: Mapping[str, Any]) -> None:
        """The upstream's answer object (an Anthropic message, a Chat completion or its last chunk, a
        Responses response): `gen_ai.response.id`, `.model` and `.finish_reasons`."""
        if self.span is not None and isinstance(data, Mapping):
            self.span.set_attributes(a.response_attributes(data))

    def inject(self, headers: MutableMapping[str, str]) -> None:
        """Write this span's W3C trace context into the headers of the upstream request (replacing
        the caller's, whose span is this one's parent). Off: the headers are left as they are."""
        if self.span is None:
            return
        from opentelemetry.trace import set_span_in_context
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        for name in [k for k in headers if k.lower() in TRACE_HEADERS]:
            del headers[name]
        TraceContextTextMapPropagator().inject(headers, context=set_span_in_context(self.span))


def caller_context(headers: Mapping[str, str] | None) -> Context | None:
    """The caller's trace context from its W3C headers (names in any case); None when it sent none
    (the span then starts under whatever span is current, or a new trace)."""
    if not headers:
        return None
    carrier = {k.lower(): v for k, v in headers.items() if k.lower() in TRACE_HEADERS}
    if "traceparent" not in carrier:
        return None
    from opentelemetry.trace import get_current_span
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = TraceContextTextMapPropagator().extract(carrier)
    return context if get_current_span(context).get_span_context().is_valid else None  # malformed: ignored


@contextmanager
def request_span(tracer_provider: TracerProvider, api: str, model: str | None, session_id: str | None,
                 headers: Mapping[str, str] | None = None) -> Iterator[ProxySpan]:
    """The span of one proxy request, continuing the caller's trace when `headers` carry one."""
    from opentelemetry.trace import SpanKind

    tracer = tracer_provider.get_tracer(a.TRACER_NAME)
    with tracer.start_as_current_span(a.model_call_name(a.CHAT, model), context=caller_context(headers),
                                      kind=SpanKind.SERVER,
                                      attributes=a.proxy_start_attributes(api, model, session_id)) as span:
        yield ProxySpan(span)
