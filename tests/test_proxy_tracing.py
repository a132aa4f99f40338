"""Traces that join through the proxy (issue 26 item 5): a request carrying a W3C `traceparent` gets a
proxy span in the caller's trace, child of the caller's span, named as the GenAI conventions name a
model call; the upstream receives a `traceparent` of that trace whose parent is the proxy's span;
the span carries the upstream answer's `gen_ai.response.*`. Streamed and whole, on every API."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ctxwin import telemetry
from ctxwin.testing import FakeProvider
from proxy_server import proxy_for

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
PATHS = {"anthropic": "/v1/messages", "openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses"}
MODELS = {"anthropic": "claude-sonnet-4-5", "openai-chat": "gpt-4o", "openai-responses": "gpt-4o"}


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "configured_provider", lambda given=None: given or provider)
    return exporter


@pytest.mark.parametrize("api", list(PATHS))
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_proxy_span_continues_the_callers_trace_and_passes_it_upstream(
        spans: InMemorySpanExporter, api: str, stream: bool) -> None:
    key = "input" if api == "openai-responses" else "messages"
    limit = "max_output_tokens" if api == "openai-responses" else "max_tokens"
    body = {"model": MODELS[api], limit: 100, "stream": stream, key: [{"role": "user", "content": "hello"}]}
    headers = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01", "authorization": "Bearer sk-test",
               "traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01", "tracestate": "vendor=caller"}
    with FakeProvider() as fake, proxy_for(fake) as served:
        with httpx.stream("POST", f"{served.url}{PATHS[api]}", json=body, headers=headers, timeout=30) as response:
            response.read()
        served.settle()
    assert response.status_code == 200, response.text
    [proxy_span] = [s for s in spans.get_finished_spans() if s.name == f"chat {MODELS[api]}"]
    context = proxy_span.context
    assert f"{context.trace_id:032x}" == TRACE_ID  # the caller's trace ...
    assert proxy_span.parent is not None and f"{proxy_span.parent.span_id:016x}" == CALLER_SPAN  # ... under its span
    [upstream] = fake.requests_to(PATHS[api])
    version, trace_id, parent, _flags = upstream.headers["traceparent"].split("-")
    assert (version, trace_id, parent) == ("00", TRACE_ID, f"{context.span_id:016x}")  # the proxy's span is the parent
    attributes = dict(proxy_span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.response.id"] and attributes["gen_ai.response.model"]
    assert attributes["gen_ai.response.finish_reasons"]


def test_without_a_traceparent_the_proxy_starts_a_trace_and_still_passes_it_on(spans: InMemorySpanExporter) -> None:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    with FakeProvider() as fake, proxy_for(fake) as served:
        answer = httpx.post(f"{served.url}/v1/messages", json=body, timeout=30,
                            headers={"x-api-key": "sk-test", "anthropic-version": "2023-06-01"})
        served.settle()
    assert answer.status_code == 200
    [proxy_span] = [s for s in spans.get_finished_spans() if s.name == "chat claude-sonnet-4-5"]
    assert proxy_span.parent is None
    [upstream] = fake.requests_to("/v1/messages")
    assert upstream.headers["traceparent"].split("-")[1] == f"{proxy_span.context.trace_id:032x}"
