"""The proxy end to end over real sockets: endpoints, session identity, branching, passthrough,
headers, errors in each API's shape, auth, and that the caller's key is never kept."""

from __future__ import annotations

import httpx
import pytest

from ctxwin.testing import FakeProvider
from proxy_server import proxy_for

MODEL = "claude-sonnet-4-5"


@pytest.fixture
def fake() -> FakeProvider:
    with FakeProvider(context_window=50_000, max_output=2_000) as server:
        yield server


def anthropic_post(url: str, messages: list, **extra: object) -> httpx.Response:
    headers = {"x-api-key": "sk-ant-secret-key", "anthropic-version": "2023-06-01",
               **extra.pop("headers", {})}  # type: ignore[dict-item]
    return httpx.post(f"{url}/v1/messages", json={"model": MODEL, "max_tokens": 100, "messages": messages, **extra},
                      headers=headers, timeout=30)


def test_a_request_goes_through_managed_and_is_recorded(fake: FakeProvider) -> None:
    with proxy_for(fake) as served:
        first = anthropic_post(served.url, [{"role": "user", "content": "hello"}])
        assert first.status_code == 200, first.text
        reply = first.json()["content"][0]["text"]
        second = anthropic_post(served.url, [{"role": "user", "content": "hello"},
                                             {"role": "assistant", "content": reply},
                                             {"role": "user", "content": "and again"}])
        assert second.status_code == 200
        entries = served.entries()
        assert len(served.engines()) == 1  # one conversation, one session
    assert len(entries) == 2 and all(e["status"] == 200 and e["api"] == "anthropic" for e in entries)
    assert entries[1]["tokens_received"] > entries[0]["tokens_received"] > 0
    assert entries[1]["cache_prefix_reuse"] > 0
    forwarded = fake.requests_to("/v1/messages")[-1].body
    assert [m["role"] for m in forwarded["messages"]] == ["user", "assistant", "user"]
