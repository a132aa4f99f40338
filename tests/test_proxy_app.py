"""The proxy end to end over real sockets (uvicorn on 127.0.0.1, the fake provider behind it):
managed requests, passthrough, headers and unmanaged fields, errors in each API's shape, auth,
overflow recovery, count_tokens, and that the caller's key is never kept."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxwin.testing import FakeProvider, ForcedResponse
from proxy_server import Served, proxy_for

MODEL = "claude-sonnet-4-5"
OPENAI_MODEL = "gpt-4o"
ANTHROPIC_KEY = "sk-ant-api03-THE-CALLERS-SECRET-KEY"
OPENAI_KEY = "sk-proj-THE-CALLERS-OPENAI-SECRET"
PATHS = {"anthropic": "/v1/messages", "openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses"}


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(context_window=50_000, max_output=2_000) as server:
        yield server


def headers_for(api: str, **extra: str) -> dict[str, str]:
    if api == "anthropic":
        return {"x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01", **extra}
    return {"authorization": f"Bearer {OPENAI_KEY}", **extra}


def body_for(api: str, texts: list[str], **extra: Any) -> dict[str, Any]:
    """A conversation of alternating user/assistant texts in the API's own shape."""
    messages = [{"role": "user" if n % 2 == 0 else "assistant", "content": t} for n, t in enumerate(texts)]
    if api == "anthropic":
        return {"model": MODEL, "max_tokens": 100, "messages": messages, **extra}
    if api == "openai-chat":
        return {"model": OPENAI_MODEL, "max_tokens": 100, "messages": messages, **extra}
    return {"model": OPENAI_MODEL, "max_output_tokens": 100, "input": messages, **extra}


def post(served: Served, api: str, body: Any, **headers: str) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{served.url}{PATHS[api]}", content=content,
                      headers={"content-type": "application/json", **headers_for(api), **headers}, timeout=30)


def assert_error_shape(api: str, response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    data = response.json()
    if api == "anthropic":
        assert data["type"] == "error" and set(data["error"]) == {"type", "message"}
        return data["error"]["message"]
    assert set(data["error"]) == {"message", "type", "param", "code"}
    return data["error"]["message"]


APIS = list(PATHS)


# ---------------------------------------------------------------------------------------------- managed


@pytest.mark.parametrize("api", APIS)
def test_requests_are_managed_recorded_and_share_a_prefix(fake: FakeProvider, api: str) -> None:
    with proxy_for(fake) as served:
        first = post(served, api, body_for(api, ["hello"]))
        assert first.status_code == 200, first.text
        second = post(served, api, body_for(api, ["hello", "hi there", "and again"]))
        assert second.status_code == 200
        entries = served.entries()
        assert len(served.engines()) == 1  # one conversation, one session
    assert [e["api"] for e in entries] == [api, api] and all(e["status"] == 200 for e in entries)
    assert entries[1]["tokens_received"] > entries[0]["tokens_received"] > 0
    assert 0 < entries[1]["cache_prefix_reuse"] < 1
    assert all(e["input_tokens"] and e["output_tokens"] for e in entries)  # usage read from the answer
    assert all(e["added_ms"] >= 0 and e["upstream_ms"] > 0 for e in entries)


def test_unmanaged_fields_and_headers_go_through_untouched(fake: FakeProvider) -> None:
    extra = {"temperature": 0.3, "top_k": 5, "stop_sequences": ["END"], "metadata": {"user_id": "u-1"},
             "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
             "tools": [{"name": "read", "description": "Read.", "input_schema": {"type": "object"},
                        "cache_control": {"type": "ephemeral"}}]}
    with proxy_for(fake) as served:
        response = post(served, "anthropic", body_for("anthropic", ["hi"], **extra),
                        **{"anthropic-beta": "prompt-caching-2024-07-31", "x-custom": "kept",
                           "x-ctxwin-session": "s1", "te": "trailers"})
        assert response.status_code == 200
    seen = fake.requests_to("/v1/messages")[-1]
    for name in ("temperature", "top_k", "stop_sequences", "metadata", "system", "model", "max_tokens"):
        assert seen.body[name] == {**body_for("anthropic", ["hi"]), **extra}[name]
    assert seen.body["tools"][0] == extra["tools"][0]  # the agent's tools first and as sent
    assert seen.body["tools"][-1]["name"] == "ctxwin_recall"
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    assert seen.headers["x-api-key"] == ANTHROPIC_KEY and seen.headers["x-custom"] == "kept"
    assert "x-ctxwin-session" not in seen.headers and "te" not in seen.headers
    assert response.headers.get("request-id", "").startswith("req_fake")  # the provider's headers come back


def test_the_agents_cache_markers_do_not_split_the_session(fake: FakeProvider) -> None:
    """Claude Code moves `cache_control` to the newest message on every request: the proxy keeps one
    session on one branch, and puts its own markers on the newest forwarded messages."""
    def marked(texts: list[str]) -> dict[str, Any]:
        body = body_for("anthropic", texts)
        last = body["messages"][-1]
        last["content"] = [{"type": "text", "text": last["content"], "cache_control": {"type": "ephemeral"}}]
        return body

    with proxy_for(fake) as served:
        for texts in (["hello"], ["hello", "yes", "more"], ["hello", "yes", "more", "ok", "again"]):
            assert post(served, "anthropic", marked(texts)).status_code == 200
        [engine] = served.engines().values()
        assert one_branch(engine) and len(engine.messages) == 5
    forwarded = fake.requests_to("/v1/messages")[-1].body["messages"]
    assert "cache_control" in json.dumps(forwarded[-1])
    assert sum("cache_control" in json.dumps(m) for m in forwarded) <= 2


def test_the_agents_cache_marker_values_are_kept(fake: FakeProvider) -> None:
    """A 1-hour cache bought by the agent stays a 1-hour cache through the proxy: the markers ctxwin
    puts back carry the agent's own values, in the agent's order."""
    body = body_for("anthropic", ["hello", "yes", "more", "ok", "again"])
    for index, marker in ((2, {"type": "ephemeral", "ttl": "1h"}), (4, {"type": "ephemeral", "ttl": "5m"})):
        message = body["messages"][index]
        message["content"] = [{"type": "text", "text": message["content"], "cache_control": marker}]
    with proxy_for(fake) as served:
        assert post(served, "anthropic", body, **{"anthropic-beta": "extended-cache-ttl-2025-04-11"}).status_code == 200
    forwarded = fake.requests_to("/v1/messages")[-1].body["messages"]
    markers = [b["cache_control"] for m in forwarded if isinstance(m["content"], list) for b in m["content"]
               if "cache_control" in b]
    assert markers == [{"type": "ephemeral", "ttl": "1h"}, {"type": "ephemeral", "ttl": "5m"}]


def test_passthrough_forwards_untouched_and_still_records(fake: FakeProvider) -> None:
    body = body_for("anthropic", ["hello", "hi", "again"], tools=[{"name": "read", "input_schema": {"type": "object"}}])
    with proxy_for(fake, passthrough=True) as served:
        assert post(served, "anthropic", body).status_code == 200
        assert post(served, "anthropic", {**body, "messages": [*body["messages"], {"role": "assistant", "content": "x"},
                                                               {"role": "user", "content": "y"}]}).status_code == 200
        entries = served.entries()
        [engine] = served.engines().values()
        assert engine.messages == []  # nothing synced: the log has only the request records
    assert fake.requests_to("/v1/messages")[0].body == body  # not even the recall tool
    assert [e["tokens_received"] == e["tokens_forwarded"] for e in entries] == [True, True]
    assert entries[1]["cache_prefix_reuse"] > 0.5


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_passthrough_relays_an_overflow_as_it_came_and_never_recovers(api: str, stream: bool) -> None:
    """Issue 26: a streamed over-window request under --passthrough got a "recovery" from an empty
    engine and went upstream again with an empty history. Now, streamed or not, the caller gets the
    provider's own overflow error and the provider saw the request once, as it came."""
    big = ["word " * 3_000, "ok", "more " * 3_000]
    with FakeProvider(context_window=4_000, max_output=200) as small, proxy_for(small, passthrough=True) as served:
        response = post(served, api, body_for(api, big, stream=stream))
        [entry] = served.entries()
    message = assert_error_shape(api, response, 400)
    assert "context" in message.lower() or "too long" in message.lower()
    [seen] = small.requests
    assert seen.body == body_for(api, big, stream=stream)  # once, untouched: no empty-history retry
    assert entry["status"] == 400 and entry["recoveries"] == 0 and entry["streamed"] is stream


def test_a_responses_request_on_a_stored_response_goes_through_untouched(fake: FakeProvider) -> None:
    """With `previous_response_id` the history lives at the provider: ctxwin cannot manage a piece."""
    body = body_for("openai-responses", ["and then?"], previous_response_id="resp_123",
                    tools=[{"type": "function", "name": "read", "parameters": {"type": "object"}}])
    fake.reply("ok")
    with proxy_for(fake) as served:
        assert post(served, "openai-responses", body).status_code == 200
        [engine] = served.engines().values()
        assert engine.messages == [] and len(served.entries()) == 1
    assert fake.requests[-1].body == body


def test_models_passthrough(fake: FakeProvider) -> None:
    listing = {"object": "list", "data": [{"id": OPENAI_MODEL, "object": "model"}]}
    fake.force(ForcedResponse(body=listing, paths=("/v1/models",)))
    with proxy_for(fake) as served:
        response = httpx.get(f"{served.url}/v1/models", headers=headers_for("openai-chat"))
    assert response.status_code == 200 and response.json() == listing
    assert fake.requests[-1].headers["authorization"] == f"Bearer {OPENAI_KEY}"


# ---------------------------------------------------------------------------------------------- overflow


@pytest.mark.parametrize("api", APIS)
def test_an_upstream_overflow_is_recovered_and_never_reaches_the_client(api: str) -> None:
    """The proxy believes the window is 40K; the provider's real one is 6K. The first request that is
    too big comes back as the provider's overflow error; the proxy compacts and retries."""
    texts = [f"message {n}: " + "lorem ipsum dolor sit amet " * 120 for n in range(12)]
    with FakeProvider(context_window=6_000, max_output=1_000) as small, proxy_for(small, window=40_000) as served:
        response = post(served, api, body_for(api, [*texts, "what now?"]))
        entries = served.entries()
    assert response.status_code == 200, response.text
    assert entries[0]["recoveries"] >= 1 and entries[0]["status"] == 200
    statuses = [r.status for r in small.requests]
    assert statuses[0] == 400 and statuses[-1] == 200


def one_branch(engine: Any) -> bool:
    """Whether the session's log is a single chain (each entry the child of the one before): a
    history that forked, or a draft written into the log, breaks it."""
    entries = list(engine.session)
    return all(entry.parent_id == (entries[n - 1].id if n else None) for n, entry in enumerate(entries))


def count(served: Served, body: dict[str, Any]) -> httpx.Response:
    content = {k: v for k, v in body.items() if k != "max_tokens"}
    return httpx.post(f"{served.url}/v1/messages/count_tokens", json=content, headers=headers_for("anthropic"),
                      timeout=30)


def test_count_tokens_counts_the_managed_request(fake: FakeProvider) -> None:
    texts = [f"message {n}: " + "lorem ipsum dolor sit amet " * 150 for n in range(20)] + ["now?"]
    body = body_for("anthropic", texts)
    with FakeProvider(context_window=12_000, max_output=1_000) as small, proxy_for(small, window=12_000) as served:
        assert post(served, "anthropic", body).status_code == 200
        counted = count(served, body)
        raw = httpx.post(f"{small.base_url}/v1/messages/count_tokens",
                         json={k: v for k, v in body.items() if k != "max_tokens"}, headers=headers_for("anthropic"))
        [engine] = served.engines().values()
        assert one_branch(engine)
    assert counted.status_code == 200 and raw.status_code == 200
    assert counted.json()["input_tokens"] < 12_000 < raw.json()["input_tokens"]


def test_counting_a_draft_writes_nothing_to_the_session(fake: FakeProvider) -> None:
    """Claude Code counts drafts and pieces: they never reach the log, and the real request that
    follows continues the session on its one branch."""
    with proxy_for(fake) as served:
        first = post(served, "anthropic", body_for("anthropic", ["hello"]))
        reply = first.json()["content"][0]["text"]
        [engine] = served.engines().values()
        logged = len(engine.session)
        for draft in (["hello", reply, "DRAFT one"], ["hello", reply, "DRAFT two", "x", "y"], ["another start"]):
            assert count(served, body_for("anthropic", draft)).status_code == 200
        served.settle()
        assert len(engine.session) == logged and len(served.engines()) == 1 + 1  # "another start": its own key
        real = body_for("anthropic", ["hello", reply, "the real question"])
        assert post(served, "anthropic", real).status_code == 200
        served.settle()
        assert one_branch(engine) and len(engine.messages) == 3
        assert "DRAFT" not in json.dumps([e.payload for e in engine.session])


def test_count_tokens_counts_the_system_prompt_and_tools_against_the_window() -> None:
    """A fresh session (count_tokens first, as Claude Code does) whose history fits the budget alone
    but not with its system prompt: the managed count is inside the budget (the history was made to
    fit with the system). The window of 30K less the 21K reserve leaves a budget of 9K."""
    texts = [f"message {n}: " + "lorem ipsum dolor sit amet " * 60 for n in range(12)] + ["now?"]
    system = "You are careful. " + "Rules of the house: be brief and exact. " * 500
    body = {"model": MODEL, "system": system, "messages": body_for("anthropic", texts)["messages"]}
    with FakeProvider(context_window=50_000) as fake, proxy_for(fake, window=30_000) as served:
        counted = count(served, body)
        raw = httpx.post(f"{fake.base_url}/v1/messages/count_tokens", json=body, headers=headers_for("anthropic"))
        history = httpx.post(f"{fake.base_url}/v1/messages/count_tokens", json={**body, "system": "x"},
                             headers=headers_for("anthropic"))
    assert counted.status_code == 200, counted.text
    assert history.json()["input_tokens"] < 9_000 < raw.json()["input_tokens"]
    assert counted.json()["input_tokens"] < 9_000


@pytest.mark.parametrize("messages", [[{"role": "wizard", "content": "hi"}],
                                      [{"role": "user", "content": [{"type": "tool_result"}]}]])
def test_count_tokens_answers_bad_input_in_the_apis_shape(fake: FakeProvider, messages: list[Any]) -> None:
    with proxy_for(fake) as served:
        response = count(served, {"model": MODEL, "messages": messages})
    assert_error_shape("anthropic", response, 400)


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("api", APIS)
def test_malformed_json_and_bad_shapes_are_400_in_the_callers_shape(fake: FakeProvider, api: str) -> None:
    with proxy_for(fake) as served:
        assert "not valid JSON" in assert_error_shape(api, post(served, api, b'{"model": "x", "messages": ['), 400)
        assert "not an object" in assert_error_shape(api, post(served, api, b"[1, 2]"), 400)
        key = "input" if api == "openai-responses" else "messages"
        assert key in assert_error_shape(api, post(served, api, {"model": MODEL, key: 7}), 400)
        broken = {"model": MODEL, "max_tokens": 5, key: [{"role": "wizard", "content": "hi"}]}
        assert_error_shape(api, post(served, api, broken), 400)
    assert fake.requests == []  # nothing malformed went upstream


@pytest.mark.parametrize("api", APIS)
def test_a_body_over_the_limit_is_413_while_it_arrives(fake: FakeProvider, api: str) -> None:
    with proxy_for(fake, max_body_bytes=10_000) as served:
        big = body_for(api, ["x" * 20_000])
        assert "limit" in assert_error_shape(api, post(served, api, big), 413)

        def chunks() -> Iterator[bytes]:  # no content-length: the limit is enforced as chunks arrive
            yield b'{"model": "m", "messages": [{"role": "user", "content": "'
            for _ in range(100):
                yield b"y" * 1_000
            yield b'"}]}'

        response = httpx.post(f"{served.url}{PATHS[api]}", content=chunks(), headers=headers_for(api))
        assert_error_shape(api, response, 413)
    assert fake.requests == []


@pytest.mark.parametrize(("path", "api", "headers"), [
    ("/v1/nothing", "anthropic", {"anthropic-version": "2023-06-01"}),
    ("/v1/embeddings", "openai-chat", {"authorization": "Bearer k"}),
    ("/", "openai-chat", {}),
])
def test_an_unknown_endpoint_is_404_in_the_callers_shape(fake: FakeProvider, path: str, api: str,
                                                          headers: dict[str, str]) -> None:
    with proxy_for(fake) as served:
        response = httpx.post(f"{served.url}{path}", json={}, headers=headers)
    assert "no endpoint" in assert_error_shape(api, response, 404)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("api", APIS)
def test_an_upstream_that_is_down_is_502_and_one_that_hangs_is_504(api: str) -> None:
    from ctxwin.proxy.config import ProxyConfig

    with proxy_for(None, ProxyConfig(upstream=f"http://127.0.0.1:{_closed_port()}")) as served:
        response = post(served, api, body_for(api, ["hello"]))
        assert "unreachable" in assert_error_shape(api, response, 502)
        assert served.entries()[0]["status"] == 502  # recorded all the same
    with FakeProvider() as slow, proxy_for(slow, upstream_timeout=0.3) as served:
        slow.force(ForcedResponse(delay=1.5))
        assert "did not answer" in assert_error_shape(api, post(served, api, body_for(api, ["hello"])), 504)
        streamed = post(served, api, body_for(api, ["hello"], stream=True))
        assert streamed.status_code in (200, 504)  # the forced delay was used up: streams normally


@pytest.mark.parametrize("api", APIS)
def test_a_client_that_leaves_mid_stream_cancels_the_upstream(api: str) -> None:
    with FakeProvider(stream_delay=0.15) as fake, proxy_for(fake) as served:
        text = "word " * 200  # dozens of events, seconds of stream at this pace
        fake.reply(text)
        with httpx.stream("POST", f"{served.url}{PATHS[api]}", json=body_for(api, ["hello"], stream=True),
                          headers=headers_for(api), timeout=30) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            next(lines)
            next(lines)
        left = time.monotonic()  # a hang guard below: uncancelled, the upstream's stream would run 30 s
        while not (served.entries() and fake.streams_cut) and time.monotonic() - left < 20:
            time.sleep(0.02)
        entries = served.entries()
        cut = fake.streams_cut
        [engine] = served.engines().values()
        assert len(engine.messages) == 1  # what was synced stays logged
        assert post(served, api, body_for(api, ["hello again"])).status_code == 200  # still serving
    assert entries and entries[0]["status"] == 499 and entries[0]["streamed"]
    assert cut == 1  # the proxy left the upstream's stream before its end: the upstream saw it cancelled


@pytest.mark.parametrize("api", APIS)
def test_an_upstream_error_passes_through_with_its_status(fake: FakeProvider, api: str) -> None:
    fake.fail(429, {"error": {"type": "rate_limit_error", "message": "slow down"}}, headers={"retry-after": "3"})
    with proxy_for(fake) as served:
        response = post(served, api, body_for(api, ["hello"]))
        entries = served.entries()
    assert response.status_code == 429 and response.headers["retry-after"] == "3"
    assert response.json()["error"]["message"] == "slow down"
    assert entries[0]["status"] == 429 and entries[0]["recoveries"] == 0


# ---------------------------------------------------------------------------------------------- auth


@pytest.mark.parametrize("api", APIS)
def test_the_ctxwin_token_is_required_and_never_forwarded(fake: FakeProvider, api: str) -> None:
    with proxy_for(fake, auth_token="ctxwin-token-123") as served:
        missing = post(served, api, body_for(api, ["hi"]))
        wrong = post(served, api, body_for(api, ["hi"]), **{"x-ctxwin-token": "nope"})
        right = post(served, api, body_for(api, ["hi"]), **{"x-ctxwin-token": "ctxwin-token-123"})
        models = httpx.get(f"{served.url}/v1/models", headers=headers_for(api))
        page = httpx.get(f"{served.url}/ctxwin-nothing?token=wrong")
        page_ok = httpx.get(f"{served.url}/ctxwin-nothing?token=ctxwin-token-123")
    assert "token" in assert_error_shape(api, missing, 401)
    assert_error_shape(api, wrong, 401)
    assert right.status_code == 200
    assert models.status_code == 401 and page.status_code == 401 and page_ok.status_code == 404
    [forwarded] = fake.requests
    assert "x-ctxwin-token" not in forwarded.headers
    assert "ctxwin-token-123" not in json.dumps(forwarded.headers)


def test_a_bearer_token_is_ctxwins_only_when_it_is_the_token(fake: FakeProvider) -> None:
    with proxy_for(fake, auth_token="ctxwin-token-123") as served:
        ours = post(served, "anthropic", body_for("anthropic", ["hi"]), authorization="Bearer ctxwin-token-123")
        theirs = post(served, "openai-chat", body_for("openai-chat", ["hi"]))  # a provider key, no ctxwin token
        both = post(served, "openai-chat", body_for("openai-chat", ["hi"]), **{"x-ctxwin-token": "ctxwin-token-123"})
    assert ours.status_code == 200 and both.status_code == 200
    assert_error_shape("openai-chat", theirs, 401)
    first, second = fake.requests
    assert "authorization" not in first.headers and first.headers["x-api-key"] == ANTHROPIC_KEY
    assert second.headers["authorization"] == f"Bearer {OPENAI_KEY}"


def test_the_callers_key_is_never_stored_or_logged(fake: FakeProvider, tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    store = tmp_path / "sessions"
    with proxy_for(fake, store_dir=store) as served:
        for api in APIS:
            assert post(served, api, body_for(api, ["hello"])).status_code == 200
            assert post(served, api, body_for(api, ["hello"], stream=True)).status_code == 200
        fake.fail(401, {"error": {"type": "authentication_error", "message": "invalid x-api-key"}})
        assert post(served, "anthropic", body_for("anthropic", ["hello"])).status_code == 401
        entries = served.entries()
    assert len(entries) == 7
    stored = b"".join(p.read_bytes() for p in store.rglob("*") if p.is_file())
    assert b"hello" in stored  # the store is where it should be, and holds the conversation
    out, err = capfd.readouterr()
    for key in (ANTHROPIC_KEY, OPENAI_KEY):
        assert key.encode() not in stored
        assert key not in caplog.text and key not in out and key not in err


def test_sessions_resume_from_the_store(fake: FakeProvider, tmp_path: Path) -> None:
    store = tmp_path / "sessions"
    with proxy_for(fake, store_dir=store) as served:
        assert post(served, "anthropic", body_for("anthropic", ["hello", "hi", "more"])).status_code == 200
    with proxy_for(fake, store_dir=store) as served:  # a new process over the same store
        longer = body_for("anthropic", ["hello", "hi", "more", "ok", "last"])
        assert post(served, "anthropic", longer).status_code == 200
        [engine] = served.engines().values()
        assert len(engine.messages) == 5 and one_branch(engine)
        assert len(served.entries()) == 2


def test_concurrent_sessions_do_not_mix(fake: FakeProvider) -> None:
    with proxy_for(fake) as served:
        results: list[int] = []

        def conversation(n: int) -> None:
            texts = [f"conversation {n}"]
            for turn in range(3):
                response = post(served, "anthropic", body_for("anthropic", texts))
                results.append(response.status_code)
                texts += [response.json()["content"][0]["text"], f"turn {turn}"]

        threads = [threading.Thread(target=conversation, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        engines = served.engines()
        assert len(engines) == 6 and all(len(e.messages) == 5 for e in engines.values())
    assert results == [200] * 18


def test_the_dashboard_is_mounted_behind_the_token(fake: FakeProvider) -> None:
    """The live page (ctxwin.proxy.dashboard, built alongside) plugs into create_app's mount point and
    sees this proxy's in-memory sessions; without the token it is refused like everything else."""
    pytest.importorskip("ctxwin.proxy.dashboard")
    with proxy_for(fake, auth_token="tok") as served:
        assert post(served, "anthropic", body_for("anthropic", ["hi"]), **{"x-ctxwin-token": "tok"}).status_code == 200
        refused = httpx.get(f"{served.url}/ctxwin/sessions.json")
        rows = httpx.get(f"{served.url}/ctxwin/sessions.json?token=tok")
        page = httpx.get(f"{served.url}/ctxwin", headers={"x-ctxwin-token": "tok"})
    assert refused.status_code == 401 and page.status_code == 200
    [row] = rows.json()
    assert row["requests"] == 1 and row["session"].startswith("c-")


@pytest.mark.parametrize("api", APIS)
def test_an_error_in_the_middle_of_a_stream_reaches_the_caller_as_its_apis_error_event(api: str) -> None:
    from ctxwin.testing import Script, overloaded

    with FakeProvider(model=Script([overloaded(mid_stream=True)])) as fake, proxy_for(fake) as served:
        with httpx.stream("POST", f"{served.url}{PATHS[api]}", json=body_for(api, ["hello"], stream=True),
                          headers=headers_for(api), timeout=30) as response:
            text = "".join(response.iter_text())
        entries = served.entries()
    assert response.status_code == 200
    assert ("event: error" in text) if api != "openai-chat" else ('"error"' in text)
    assert "overloaded" in text.lower()
    assert entries[0]["streamed"] and entries[0]["status"] == 502  # not counted as a success


def test_chat_stream_usage_is_read_without_showing_it(fake: FakeProvider) -> None:
    """ctxwin calibrates from usage: it asks for it in a Chat stream the caller did not ask it for,
    and leaves it out of what the caller sees; a caller that asked gets it."""
    with proxy_for(fake) as served:
        plain_body = body_for("openai-chat", ["hi"], stream=True)
        with httpx.stream("POST", f"{served.url}/v1/chat/completions", json=plain_body,
                          headers=headers_for("openai-chat")) as response:
            plain = "".join(response.iter_text())
        asked = body_for("openai-chat", ["hi"], stream=True, stream_options={"include_usage": True})
        with httpx.stream("POST", f"{served.url}/v1/chat/completions", json=asked,
                          headers=headers_for("openai-chat")) as response:
            with_usage = "".join(response.iter_text())
        entries = served.entries()
    assert fake.requests[0].body["stream_options"] == {"include_usage": True}
    assert '"usage"' not in plain and plain.rstrip().endswith("data: [DONE]")
    assert '"prompt_tokens"' in with_usage
    assert all(e["input_tokens"] for e in entries)


def test_apps_leave_the_collector_alone(fake: FakeProvider) -> None:
    """The collector's tuning is the serving process's (serve.tune_gc): two apps started and stopped
    out of order in one process change neither its thresholds nor what is frozen."""
    import gc

    before = (gc.get_threshold(), gc.get_freeze_count())
    with proxy_for(fake) as one:
        with proxy_for(fake) as two:
            assert post(two, "anthropic", body_for("anthropic", ["hi"])).status_code == 200
            assert (gc.get_threshold(), gc.get_freeze_count()) == before
        assert post(one, "anthropic", body_for("anthropic", ["hi"])).status_code == 200
        assert (gc.get_threshold(), gc.get_freeze_count()) == before
    assert (gc.get_threshold(), gc.get_freeze_count()) == before


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/messages/count_tokens"), ("GET", "/v1/models"), ("GET", "/v1/models/gpt-4o"),
    ("GET", "/ctxwin"), ("GET", "/ctxwin/sessions.json"), ("GET", "/ctxwin/session.json?session=x"),
    ("GET", "/ctxwin/sessions/x"), ("GET", "/v1/anything")])
def test_every_route_refuses_a_caller_without_the_token(fake: FakeProvider, method: str, path: str) -> None:
    with proxy_for(fake, auth_token="ctxwin-token-123") as served:
        refused = httpx.request(method, f"{served.url}{path}", json={"model": MODEL, "messages": []},
                                headers=headers_for("anthropic"), timeout=30)
    assert refused.status_code == 401 and "token" in refused.text
    assert fake.requests == []  # nothing refused reached the provider
