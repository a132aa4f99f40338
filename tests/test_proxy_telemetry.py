"""The proxy's requests as spans: one `chat {model}` span per request, its record on it, and the
engine's prepare span nested under it (the telemetry is off unless configured: see test_telemetry)."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("starlette")
otel_sdk = pytest.importorskip("opentelemetry.sdk.trace")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from starlette.applications import Starlette  # noqa: E402

from ctxwin import telemetry  # noqa: E402
from ctxwin.proxy.app import create_app  # noqa: E402
from ctxwin.proxy.config import ProxyConfig  # noqa: E402
from ctxwin.testing import FakeProvider  # noqa: E402


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(telemetry, "configured_provider", lambda given=None: given or provider)
    return exporter


async def _ask(app: Starlette, text: str) -> httpx.Response:
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy")
    async with app.router.lifespan_context(app), client:
        return await client.post("/v1/messages", headers={"x-api-key": "sk-test", "anthropic-version": "2023-06-01",
                                                          "x-ctxwin-session": "s1"},
                                 json={"model": "claude-sonnet-4-5", "max_tokens": 100,
                                       "messages": [{"role": "user", "content": text}]})


@pytest.mark.anyio
async def test_a_request_is_a_span_with_the_engines_prepare_under_it(spans: InMemorySpanExporter) -> None:
    with FakeProvider() as upstream:
        upstream.reply("hello back")
        app = create_app(ProxyConfig(upstream=upstream.base_url))
        response = await _ask(app, "hello")
    assert response.status_code == 200, response.text
    finished = spans.get_finished_spans()
    request = next(s for s in finished if s.name == "chat claude-sonnet-4-5")  # `{operation} {model}`
    prepare = next(s for s in finished if s.name == "ctxwin.prepare")
    assert prepare.parent is not None and prepare.parent.span_id == request.context.span_id
    attributes = dict(request.attributes or {})
    assert attributes["http.response.status_code"] == 200
    assert attributes["ctxwin.proxy.tokens_received"] > 0
    assert attributes["ctxwin.proxy.tokens_forwarded"] >= attributes["ctxwin.proxy.tokens_received"]
    assert "sk-test" not in repr(finished)  # the caller's key is never put on a span
