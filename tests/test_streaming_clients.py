"""The httpx clients an agent lives on, against the fake provider's scripted model over real HTTP: tool
calls both ways, streaming with typed events and usage from the stream (the same completion as the
non-streamed call), retries with backoff that honour retry-after and stop when bounded, timeouts and
cancellation of a blocked stream and of a backoff wait, keys from the environment, and `client_for`."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ctxwin.errors import InputError, ModelCallCancelled
from ctxwin.messages import Message, assistant, tool_result, user
from ctxwin.providers import (
    APIS,
    Done,
    ProviderError,
    Retrying,
    RetryPolicy,
    TextDelta,
    ToolCallDelta,
    ToolCallStarted,
    ToolDef,
    UsageReported,
    client_for,
)
from ctxwin.testing import Call, FakeProvider, Reply, Script, overloaded, rate_limited, server_error
from ctxwin.tools.registry import schemas
from guards import HANG_GUARD_S, within

WINDOW, MAX_OUTPUT = 20_000, 2_000
FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)
READ = Call("read", {"path": "src/app.py", "limit": 20})
TOOLS = [ToolDef("read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}),
         ToolDef("grep", "Search.", {"type": "object", "properties": {"pattern": {"type": "string"}}})]


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProvider]:
    with FakeProvider(context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        yield fake


@pytest.fixture
def fake(server: FakeProvider) -> Iterator[FakeProvider]:
    server.reset()
    yield server
    server.model = None
    server.stream_delay = 0.0


def make(api: str, fake: FakeProvider, **options: Any) -> Any:
    url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
    options.setdefault("retry", FAST)
    return client_for(api, url, f"{api}-model", api_key="sk-test", rng=random.Random(7), **options)


# --------------------------------------------------------------------------------------------------
# Tool calls both ways, streamed and not


@pytest.mark.parametrize("api", APIS)
def test_tool_calls_both_ways(fake: FakeProvider, api: str) -> None:
    fake.model = Script([Reply("Reading.", (READ,)), Reply("It returns 1.")])
    with make(api, fake) as client:
        first = client.complete([user("What does main return?")], tools=TOOLS, max_tokens=200)
        assert first.text == "Reading." and len(first.tool_calls) == 1
        call = first.tool_calls[0]
        assert call.name == "read" and call.arguments == READ.arguments
        history = [user("What does main return?"), first.message, tool_result(call.id, "def main():\n    return 1")]
        second = client.complete(history, tools=TOOLS, tool_choice="auto", max_tokens=200)
    assert second.text == "It returns 1." and second.tool_calls == ()
    sent = fake.requests[-1].body
    assert len(sent["tools"]) == 2  # the definitions went out in the API's own shape, which the server read
    assert fake.requests[-1].status == 200


@pytest.mark.parametrize("api", APIS)
def test_a_stream_gives_typed_events_and_the_same_completion(fake: FakeProvider, api: str) -> None:
    reply = Reply("Let me look at the module first, then the tests. " * 2,
                  (Call("read", READ.arguments, id="call_a"), Call("grep", {"pattern": "def main", "path": "src"},
                                                                   id="call_b")))
    fake.model = lambda request: reply
    conversation = [user("system prompt " * 400), assistant("ok"), user("go")]
    with make(api, fake) as client:
        plain = client.complete(conversation, tools=TOOLS, max_tokens=300)
        with client.stream(conversation, tools=TOOLS, max_tokens=300) as stream:
            events = list(stream)
    assert isinstance(events[-1], Done) and stream.completion is events[-1].completion
    streamed = stream.completion
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == reply.text
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    assert [(e.index, e.name) for e in started] == [(0, "read"), (1, "grep")]
    arguments = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta) and e.index == 1)
    assert json.loads(arguments) == {"pattern": "def main", "path": "src"}
    assert streamed.message.blocks == plain.message.blocks
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [(c.name, c.arguments) for c in plain.tool_calls]
    assert streamed.stop_reason == plain.stop_reason
    assert streamed.usage is not None and streamed.usage.context_tokens == plain.usage.context_tokens
    assert streamed.usage.output_tokens == plain.usage.output_tokens
    assert any(isinstance(e, UsageReported) for e in events)
    assert fake.requests[-1].body["stream"] is True


def test_streamed_usage_carries_the_prefix_cache_hit(fake: FakeProvider) -> None:
    long = [user("background " * 1500), assistant("noted"), user("first")]
    with make("openai", fake) as client:
        client.complete(long, max_tokens=50)
        completion = client.stream([*long, assistant("one"), user("second")], max_tokens=50).until_done()
    assert completion.usage.cache_read_tokens >= 1_024
    assert fake.requests[-1].body["stream_options"] == {"include_usage": True}


def test_registry_schemas_are_accepted_in_every_shape(fake: FakeProvider) -> None:
    fake.model = lambda request: Reply(", ".join(request.tools))
    for api, shape in (("anthropic", "anthropic"), ("openai", "openai"), ("openai-responses", "openai-responses"),
                       ("anthropic", "openai")):
        with make(api, fake) as client:
            answer = client.complete([user("list tools")], tools=schemas(shape), max_tokens=100)
        assert answer.text.startswith("read, grep")


def test_bad_tool_definitions_are_typed_errors(fake: FakeProvider) -> None:
    with make("openai", fake) as client:
        for bad in (["x"], [{"foo": 1}], "read", [{"name": "t", "parameters": 5}]):
            with pytest.raises(InputError):
                client.complete([user("hi")], tools=bad)
        with pytest.raises(InputError, match="names no tool"):
            client.complete([user("hi")], tools=TOOLS, tool_choice="write")
    assert fake.requests == []


@pytest.mark.parametrize(("api", "choice", "sent"), [
    ("anthropic", "required", {"type": "any"}), ("anthropic", "read", {"type": "tool", "name": "read"}),
    ("openai", "read", {"type": "function", "function": {"name": "read"}}), ("openai", "none", "none"),
    ("openai-responses", "read", {"type": "function", "name": "read"}),
])
def test_tool_choice_in_each_apis_spelling(fake: FakeProvider, api: str, choice: str, sent: Any) -> None:
    with make(api, fake) as client:
        client.complete([user("hi")], tools=TOOLS, tool_choice=choice, max_tokens=50)
    assert fake.requests[-1].body["tool_choice"] == sent


# --------------------------------------------------------------------------------------------------
# Retries


@pytest.mark.parametrize("api", APIS)
def test_429_500_and_overloaded_are_retried_with_the_servers_wait(fake: FakeProvider, api: str) -> None:
    fake.model = Script([rate_limited(0.2), server_error(), overloaded(), "finally"])
    notices: list[Retrying] = []
    with make(api, fake, on_retry=notices.append) as client:
        started = time.monotonic()
        answer = client.complete([user("hi")], max_tokens=50)
        elapsed = time.monotonic() - started
    assert answer.text == "finally" and answer.retries == 3
    assert [n.attempt for n in notices] == [1, 2, 3] and notices[0].delay == 0.2
    assert all(0.005 <= n.delay <= 0.05 for n in notices[1:])  # backoff with jitter, capped
    assert elapsed >= 0.2
    assert [r.status for r in fake.requests] == [429, 500, 529 if api == "anthropic" else 503, 200]


def test_retry_after_ms_wins_and_retries_are_bounded(fake: FakeProvider) -> None:
    fake.model = Script([rate_limited(5, retry_after_ms=30), "ok"])
    notices: list[Retrying] = []
    with make("openai", fake, on_retry=notices.append) as client:
        assert client.complete([user("hi")], max_tokens=50).text == "ok"
    assert notices[0].delay == pytest.approx(0.03)
    fake.model = Script([server_error()] * 10)
    with make("openai", fake, retry=RetryPolicy(attempts=3, base_delay=0.01)) as client, \
            pytest.raises(ProviderError) as caught:
        client.complete([user("hi")], max_tokens=50)
    assert caught.value.status_code == 500 and fake.model.served == 3


def test_errors_that_retrying_cannot_fix_are_raised_at_once(fake: FakeProvider) -> None:
    with make("anthropic", fake) as client, pytest.raises(ProviderError) as caught:
        client.complete([user("x " * (4 * WINDOW))], max_tokens=50)
    assert caught.value.status_code == 400 and len(fake.requests) == 1
    fake.model = Script([rate_limited(3600), "never"])
    with make("anthropic", fake) as client, pytest.raises(ProviderError) as limited:
        client.complete([user("hi")], max_tokens=50)
    assert limited.value.status_code == 429 and limited.value.retry_after == 3600  # longer than max_retry_after


@pytest.mark.parametrize("api", APIS)
def test_a_stream_is_retried_until_content_flows(fake: FakeProvider, api: str) -> None:
    fake.model = Script([overloaded(), overloaded(mid_stream=True), "streamed after two faults"])
    with make(api, fake) as client:
        events = list(client.stream([user("hi")], max_tokens=50))
    assert [type(e).__name__ for e in events].count("Retrying") == 2
    assert events[-1].completion.text == "streamed after two faults" and events[-1].completion.retries == 2


def test_a_fault_after_content_is_raised_not_retried(fake: FakeProvider) -> None:
    from ctxwin.testing import Fault

    fake.model = Script([Fault("overloaded", mid_stream=True), "unused"])
    with make("anthropic", fake, retry=RetryPolicy(attempts=1)) as client, pytest.raises(ProviderError) as caught:
        list(client.stream([user("hi")], max_tokens=50))
    assert caught.value.status_code == 529 and caught.value.retryable


# --------------------------------------------------------------------------------------------------
# Timeouts and cancellation


def test_per_call_timeout(fake: FakeProvider) -> None:
    from ctxwin.testing import ForcedResponse

    fake.force(ForcedResponse(delay=1.0))
    with make("openai", fake, retry=RetryPolicy(attempts=1)) as client, pytest.raises(httpx.TimeoutException):
        client.complete([user("hi")], max_tokens=10, timeout=0.2)


@pytest.mark.parametrize("api", APIS)
def test_cancel_aborts_a_stream_blocked_on_the_server(fake: FakeProvider, api: str) -> None:
    fake.model = lambda request: Reply("slow words " * 40)
    fake.stream_delay = 0.3  # every event 0.3 s apart: the client is blocked in a read when cancelled
    cancel = threading.Event()
    seen: list[Any] = []
    with make(api, fake) as client:
        stream = client.stream([user("hi")], max_tokens=500, cancel=cancel)
        with pytest.raises(ModelCallCancelled):
            for event in stream:
                seen.append(event)
                if isinstance(event, TextDelta):
                    threading.Timer(0.05, cancel.set).start()
    # Cancelled in a blocked read: a few of the answer's ~80 events came, never its end.
    assert any(isinstance(e, TextDelta) for e in seen) and not any(isinstance(e, Done) for e in seen)
    assert sum(isinstance(e, TextDelta) for e in seen) < 10


def test_cancel_interrupts_the_wait_before_a_retry(fake: FakeProvider) -> None:
    fake.model = Script([rate_limited(55), "late"])  # the longest wait the retry policy accepts
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    with make("anthropic", fake) as client, pytest.raises(ModelCallCancelled):
        within(30, client.complete, [user("hi")], max_tokens=50, cancel=cancel)  # a hang guard: 55 s if not


def test_a_cancelled_call_never_reaches_the_server(fake: FakeProvider) -> None:
    cancel = threading.Event()
    cancel.set()
    with make("openai", fake) as client, pytest.raises(ModelCallCancelled):
        client.complete([user("hi")], cancel=cancel)
    assert fake.requests == []


# --------------------------------------------------------------------------------------------------
# Keys, base URLs, the factory


def test_keys_come_from_the_environment_and_are_never_shown(fake: FakeProvider,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-openai-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-env-anthropic-secret")
    with client_for("openai", fake.openai_base_url, "m") as openai_client:
        openai_client.complete([user("hi")], max_tokens=10)
        assert "secret" not in repr(openai_client)
    assert fake.requests[-1].headers["authorization"] == "Bearer sk-env-openai-secret"
    with client_for("anthropic", fake.anthropic_base_url, "m") as anthropic_client:
        anthropic_client.complete([user("hi")], max_tokens=10)
    assert fake.requests[-1].headers["x-api-key"] == "sk-env-anthropic-secret"
    fake.require_auth = True
    with client_for("openai", fake.openai_base_url, "m", api_key="") as keyless, \
            pytest.raises(ProviderError) as caught:
        keyless.complete([user("hi")], max_tokens=10)
    assert caught.value.status_code == 401 and "secret" not in str(caught.value)


def test_the_factory_refuses_what_it_cannot_build() -> None:
    with pytest.raises(InputError, match="unknown API"):
        client_for("gemini", "http://127.0.0.1:1", "m")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="not an http"):
        client_for("openai", "127.0.0.1:8000/v1", "m")


def test_any_openai_compatible_server_by_base_url(fake: FakeProvider) -> None:
    """A compatible server under its own prefix and with the older `max_tokens` field."""
    with client_for("openai", fake.openai_base_url + "/", "local-model", api_key="x",
                    max_tokens_field="max_tokens") as client:
        answer = client.complete([Message("user", user("hello").blocks)], max_tokens=30)
    assert answer.text.startswith("OK.") and fake.requests[-1].body["max_tokens"] == 30


def test_a_server_that_ignores_stream_true_still_gives_a_completion(fake: FakeProvider) -> None:
    from ctxwin.testing import ForcedResponse

    whole = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
             "content": [{"type": "text", "text": "not streamed"}], "usage": {"input_tokens": 7, "output_tokens": 2}}
    fake.force(ForcedResponse(body=whole))
    with make("anthropic", fake) as client:
        events = list(client.stream([user("hi")], max_tokens=20))
    assert isinstance(events[-1], Done) and events[-1].completion.text == "not streamed"
    assert isinstance(events[0], UsageReported) and events[0].usage.input_tokens == 7


def test_importing_ctxwin_does_not_load_the_http_stack() -> None:
    """The package root needs only the overflow catalog; the clients (and httpx) load on first use."""
    import subprocess
    import sys
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src"
    code = ("import sys, ctxwin, ctxwin.providers as p; assert 'httpx' not in sys.modules; "
            "assert set(p.__all__) == set(p._EXPORTS); p.client_for; assert 'httpx' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env={"PYTHONPATH": str(src)}, timeout=60)


@pytest.mark.parametrize("api", APIS)
def test_cancel_returns_while_the_server_has_sent_nothing_yet(fake: FakeProvider, api: str) -> None:
    """A plain call whose server answers only when the whole answer is ready (no byte before then)."""
    from ctxwin.testing import ForcedResponse

    fake.force(ForcedResponse(delay=300.0))
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    with make(api, fake) as client, pytest.raises(ModelCallCancelled):
        within(HANG_GUARD_S, client.complete, [user("hi")], max_tokens=20, cancel=cancel)  # 300 s if not


def test_anthropic_prompt_cache_breakpoints_read_the_previous_calls_prefix(fake: FakeProvider) -> None:
    """With `prompt_cache`, each call marks its last message; the next call, two messages longer, reads
    the cache written at the previous breakpoint (the fake, like the API, keys the cache by content and
    looks back from each breakpoint)."""
    conversation = [user("background " * 1500)]
    with make("anthropic", fake, prompt_cache=True) as client:
        first = client.complete(conversation, system="You are terse.", tools=TOOLS, max_tokens=50)
        assert first.usage.cache_read_tokens == 0 and first.usage.cache_write_tokens > 1_024
        conversation += [first.message, user("and now?")]
        second = client.complete(conversation, system="You are terse.", tools=TOOLS, max_tokens=50)
    assert second.usage.cache_read_tokens == first.usage.cache_write_tokens
    body = fake.requests[-1].body
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(body["messages"][:-1])


@pytest.mark.parametrize("api", APIS)
def test_a_scripted_call_with_invalid_json_arguments_reaches_the_client_raw(fake: FakeProvider, api: str) -> None:
    fake.model = lambda request: Reply(calls=(Call("read", '{"path": "a.py"'),))
    with make(api, fake) as client:
        plain = client.complete([user("hi")], max_tokens=50)
        streamed = client.stream([user("hi")], max_tokens=50).until_done()
    for completion in (plain, streamed):
        arguments = completion.tool_calls[0].arguments
        assert arguments == ({"raw_arguments": '{"path": "a.py"'} if api == "anthropic" else '{"path": "a.py"')
