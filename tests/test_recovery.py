"""Overflow recovery end to end: a real HTTP provider (the fake server on 127.0.0.1) rejects requests
with each provider's real overflow error; the engine recognises it, recovers, and the retry goes
through. A session that cannot be saved ends in one typed error after a bounded number of tries."""

from __future__ import annotations

import pytest

from ctxwin.engine import ContextEngine
from ctxwin.engine.engine import MAX_RECOVERY_ATTEMPTS, ContextOverflowError
from ctxwin.errors import CtxwinError
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.providers.anthropic import AnthropicClient
from ctxwin.providers.base import ProviderError
from ctxwin.providers.openai import OpenAIChatClient
from ctxwin.providers.overflow import CATALOG
from ctxwin.testing.fake_provider import FakeProvider


def fill(engine: ContextEngine, rounds: int, size: int = 600) -> None:
    engine.append(Message("user", (Text("Refactor the parser; ticket PAR-4471."),)))
    for n in range(rounds):
        engine.append(Message("assistant", (Text(f"step {n}"), ToolCall(f"c{n}", "bash", {"command": f"cat f{n}"}))))
        engine.append(Message("tool", (ToolResult(f"c{n}", (Text(f"line {n}\n" * size),), name="bash"),)))
    engine.append(Message("user", (Text("Now summarize what you found."),)))


def call(client, engine: ContextEngine):
    prepared = engine.prepare()
    return client.complete(prepared.messages, system=prepared.system or None, max_tokens=1_000)


def run_with_recovery(client, engine: ContextEngine, limit: int = MAX_RECOVERY_ATTEMPTS + 1):
    """The loop a harness writes: call; on an overflow, recover and call again."""
    for _ in range(limit):
        try:
            completion = call(client, engine)
        except ProviderError as error:
            assert engine.is_overflow_error(error), error
            engine.recover(error)
            continue
        engine.record_usage(completion.usage)
        return completion
    raise AssertionError("recovery did not converge")


def test_real_window_smaller_than_believed_is_learned_from_the_error() -> None:
    with FakeProvider(context_window=30_000, max_output=1_000) as server:
        client = AnthropicClient(server.anthropic_base_url, api_key="test", model="claude-sonnet-4-5")
        engine = ContextEngine(model="claude-sonnet-4-5", policy="pi", window=200_000, max_output=1_000)
        fill(engine, rounds=40)
        with pytest.raises(ProviderError) as caught:
            call(client, engine)
        assert engine.is_overflow_error(caught.value)
        prepared = engine.recover(caught.value)
        assert engine.window == 30_000  # parsed from "prompt is too long: N tokens > 30000 maximum"
        assert prepared.tokens <= engine.budget
        assert any(e.stage == "recovery" for e in prepared.events)
        completion = run_with_recovery(client, engine)
        assert completion.text


@pytest.mark.parametrize("pattern", CATALOG, ids=lambda p: f"{p.provider}-{CATALOG.index(p)}")
def test_every_catalog_error_served_over_http_is_detected_and_recovered(pattern) -> None:
    with FakeProvider(context_window=200_000) as server:
        client = OpenAIChatClient(server.openai_base_url, api_key="test", model="gpt-4o")
        engine = ContextEngine(model="gpt-4o", policy="ctxwin", window=128_000, max_output=1_000)
        fill(engine, rounds=5)
        server.fail_with(pattern)
        if pattern.status == 200:  # z.ai: a "successful" answer whose finish reason says it overflowed
            failure: object = call(client, engine)
        else:
            with pytest.raises(ProviderError) as caught:
                call(client, engine)
            failure = caught.value
        assert engine.is_overflow_error(failure), (pattern.provider, pattern.example[:200])
        prepared = engine.recover(failure)
        assert prepared.valid and prepared.tokens <= engine.budget
        completion = call(client, engine)  # the server answers normally now
        engine.record_usage(completion.usage)
        assert completion.text


def test_silent_overflow_from_reported_usage() -> None:
    with FakeProvider(context_window=200_000) as server:
        client = AnthropicClient(server.anthropic_base_url, api_key="test", model="claude-sonnet-4-5")
        engine = ContextEngine(model="claude-sonnet-4-5", policy="ctxwin", window=100_000, max_output=1_000)
        fill(engine, rounds=3)
        server.report_usage(150_000)  # the provider says it read more than the window holds
        completion = call(client, engine)
        assert engine.is_overflow_error(completion.usage)
        assert engine.recover(completion.usage).tokens <= engine.budget


def test_unsavable_session_ends_in_one_typed_error_after_bounded_attempts() -> None:
    system = "You follow the house rules. " * 4_000  # ~24K tokens of system prompt
    with FakeProvider(context_window=16_000, max_output=1_000) as server:
        client = AnthropicClient(server.anthropic_base_url, api_key="test", model="claude-sonnet-4-5")
        engine = ContextEngine(model="claude-sonnet-4-5", policy="ctxwin", window=200_000, max_output=1_000,
                               system=system)
        fill(engine, rounds=2)
        attempts = 0
        with pytest.raises(CtxwinError) as caught:
            for _ in range(10):
                try:
                    call(client, engine)
                except ProviderError as error:
                    attempts += 1
                    engine.recover(error)
        assert attempts <= MAX_RECOVERY_ATTEMPTS + 1
        assert isinstance(caught.value, ContextOverflowError) or "system prompt" in str(caught.value)


def test_recover_refuses_other_errors() -> None:
    engine = ContextEngine(model="gpt-4o", policy="ctxwin")
    fill(engine, rounds=1)
    engine.prepare()
    with pytest.raises(CtxwinError, match="not a context overflow"):
        engine.recover(ProviderError(429, {"error": {"type": "rate_limit_error", "message": "Rate limited"}},
                                     "Rate limited", "anthropic"))


def test_engine_through_the_official_sdks() -> None:
    """The engine's payloads go through the real SDKs unchanged, the SDKs' overflow exceptions are
    recognised and recovered from, and their usage objects calibrate the engine."""
    anthropic = pytest.importorskip("anthropic", reason="the anthropic SDK is a test-only dependency")
    openai = pytest.importorskip("openai", reason="the openai SDK is a test-only dependency")
    with FakeProvider(context_window=30_000, max_output=1_000) as server:
        engine = ContextEngine(model="claude-sonnet-4-6", policy="pi", window=200_000, max_output=1_000)
        fill(engine, rounds=40)
        client = anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="test", max_retries=0)
        for _ in range(MAX_RECOVERY_ATTEMPTS + 1):
            try:
                response = client.messages.create(model="claude-sonnet-4-6", max_tokens=1_000,
                                                  **engine.prepare().to_anthropic())
                break
            except anthropic.APIStatusError as error:
                assert engine.is_overflow_error(error)
                engine.recover(error)
        else:
            raise AssertionError("did not recover")
        assert response.content[0].text
        engine.record_usage(response.usage)

        engine = ContextEngine(model="gpt-4o", policy="pi", window=200_000, max_output=1_000)
        fill(engine, rounds=40)
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="test", max_retries=0)
        for _ in range(MAX_RECOVERY_ATTEMPTS + 1):
            try:
                completion = client.chat.completions.create(model="gpt-4o", max_completion_tokens=1_000,
                                                            **engine.prepare().to_openai_chat())
                break
            except openai.APIStatusError as error:
                assert engine.is_overflow_error(error)
                engine.recover(error)
        else:
            raise AssertionError("did not recover")
        assert completion.choices[0].message.content
        engine.record_usage(completion.usage)


# --------------------------------------------------------------------------------------------------
# A window the registry does not know, and errors that say no number


UNKNOWN_MODEL = "acme-local-coder-7b"  # not in the registry: 128K window and 8K output assumed


def tool_task(engine: ContextEngine, client, calls: int, *, stream: bool, output_lines: int = 120) -> int:
    """An agent-like loop of `calls` model calls, each answered by a tool call whose result is appended
    (about 1K tokens each), recovering from overflows as a harness does. Returns the recoveries it took;
    an error that reaches this caller fails the test."""
    engine.append(Message("user", (Text("Refactor the parser; ticket PAR-4471. Read every module first."),)))
    recoveries = 0
    tools = [{"name": "bash", "description": "run a command", "input_schema": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]
    for n in range(calls):
        prepared = engine.prepare(max_output=1_000)
        for _ in range(MAX_RECOVERY_ATTEMPTS + 1):
            try:
                if stream:
                    with client.stream(prepared.messages, system=prepared.system or None, max_tokens=1_000,
                                       tools=tools) as streamed:
                        completion = streamed.until_done()
                else:
                    completion = client.complete(prepared.messages, system=prepared.system or None,
                                                 max_tokens=1_000, tools=tools)
                break
            except ProviderError as error:
                assert engine.is_overflow_error(error), error
                recoveries += 1
                prepared = engine.recover(error)
        else:
            raise AssertionError(f"call {n}: still overflowing after {MAX_RECOVERY_ATTEMPTS} recoveries")
        engine.record_usage(completion.usage)
        engine.append(completion.message)
        for call in completion.message.tool_calls:
            body = "".join(f"{n}:{k}: def handler_{n}_{k}(request): return parse(request, strict=True)\n"
                           for k in range(output_lines))
            engine.append(Message("tool", (ToolResult(call.id, (Text(body),), name=call.name),)))
    return recoveries


def bash_model(request):  # the scripted model: always one more command
    from ctxwin.testing.scripted import Call, Reply

    return Reply(f"Reading module {request.call}.", (Call("bash", {"command": f"cat src/m{request.call}.py"}),))


@pytest.mark.filterwarnings("ignore::ctxwin.tokens.registry.UnknownModelWarning")
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("api", ["responses", "chat", "anthropic"])
def test_a_window_unknown_to_the_registry_is_learned_from_the_failed_request(api: str, stream: bool) -> None:
    """60 tool calls past a 16K window on a model the registry does not know (it assumes 128K): no
    error reaches the caller, and the engine learns a window no larger than the real one within a few
    recoveries, also where the overflow error carries no token numbers (Responses)."""
    from ctxwin.providers.openai import OpenAIResponsesClient

    with FakeProvider(context_window=16_000, max_output=4_000, model=bash_model) as server:
        client = {"responses": lambda: OpenAIResponsesClient(server.openai_base_url, api_key="t", model=UNKNOWN_MODEL),
                  "chat": lambda: OpenAIChatClient(server.openai_base_url, api_key="t", model=UNKNOWN_MODEL),
                  "anthropic": lambda: AnthropicClient(server.anthropic_base_url, api_key="t", model=UNKNOWN_MODEL),
                  }[api]()
        engine = ContextEngine(model=UNKNOWN_MODEL, policy="ctxwin")
        assert engine.window == 128_000
        recoveries = tool_task(engine, client, 60, stream=stream)
        assert 1 <= recoveries <= MAX_RECOVERY_ATTEMPTS  # it learned once (or a few times), then stayed under
        assert engine.window <= 16_000
        assert sum(1 for e in engine.session.path() if e.kind == "compaction") >= 2  # it went on past the window


def test_an_error_without_numbers_bounds_the_window_by_the_failed_request() -> None:
    engine = ContextEngine(model="gpt-4.1", policy="ctxwin")
    assert engine.window == 1_047_576
    fill(engine, rounds=12)
    failed = engine.prepare()
    responses_overflow = {"error": {"message": "Your input exceeds the context window of this model. Please adjust "
                                               "your input and try again.", "type": "invalid_request_error",
                                    "param": "input", "code": "context_length_exceeded"}}
    retry = engine.recover(responses_overflow)
    assert engine.window == failed.tokens  # not 0.85 x the registry's million
    assert retry.tokens <= retry.budget < failed.tokens
    # Logged: a reopened engine keeps what was learned.
    assert ContextEngine(engine.session, model="gpt-4.1", policy="ctxwin").window == failed.tokens
