"""The httpx model clients and the official SDKs against the fake provider over real HTTP: headers,
real usage, tool-call conversations the server validates, and overflow detection from every error
shape (our ProviderError, the raw httpx response, the openai and anthropic SDK exceptions) for every
catalog entry and for the window the server enforces itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ctxwin.messages import Message, Text, ToolCall, assistant, tool_result, user
from ctxwin.providers import AnthropicClient, OpenAIChatClient, OpenAIResponsesClient, ProviderError, Usage
from ctxwin.providers.overflow import CATALOG, is_overflow_error
from ctxwin.testing import FakeProvider, ForcedResponse
from ctxwin.testing.fake_provider import CHAT, MESSAGES, RESPONSES

WINDOW, MAX_OUTPUT = 3_000, 500
CLIENTS = {"chat": OpenAIChatClient, "responses": OpenAIResponsesClient, "anthropic": AnthropicClient}
PATHS = {"chat": CHAT, "responses": RESPONSES, "anthropic": MESSAGES}


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProvider]:
    with FakeProvider(context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        yield fake


@pytest.fixture
def fake(server: FakeProvider) -> FakeProvider:
    server.reset()
    return server


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    """One connection pool for the module: building an httpx.Client (its SSL context) costs ~0.2 s."""
    with httpx.Client(timeout=10) as client:
        yield client


@pytest.fixture(scope="module")
def sdks(server: FakeProvider) -> tuple[Any, Any, Any, Any]:
    """(openai module, OpenAI client, anthropic module, Anthropic client) against the fake, built once."""
    openai, anthropic = sdk("openai"), sdk("anthropic")
    return (openai, openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test", max_retries=0),
            anthropic, anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="sk-test", max_retries=0))


def client_for(kind: str, fake: FakeProvider, **kwargs: Any) -> Any:
    url = fake.anthropic_base_url if kind == "anthropic" else fake.openai_base_url
    return CLIENTS[kind](url, "sk-test", f"{kind}-model", **kwargs)


def too_big() -> list[Message]:
    return [user("x " * (4 * WINDOW))]


def tool_conversation() -> list[Message]:
    call = ToolCall("call_1", "read_file", {"path": "src/app.py"})
    return [user("Open src/app.py"), assistant("Reading it.", call),
            tool_result("call_1", "def main():\n    return 1"), user("What does main return?")]


# --------------------------------------------------------------------------------------------------
# Requests and answers


@pytest.mark.parametrize("kind", CLIENTS)
def test_clients_send_the_right_headers_and_parse_real_usage(fake: FakeProvider, kind: str) -> None:
    with client_for(kind, fake) as client:
        completion = client.complete([user("hello there")], system="Be brief.", max_tokens=50)
    assert completion.text.startswith("OK. 2 messages read")
    assert completion.message.role == "assistant"
    request = fake.requests[-1]
    assert request.path == PATHS[kind]
    if kind == "anthropic":
        assert request.headers["x-api-key"] == "sk-test" and request.headers["anthropic-version"] == "2023-06-01"
        assert request.body["system"] == "Be brief." and request.body["max_tokens"] == 50
    else:
        assert request.headers["authorization"] == "Bearer sk-test"
    assert completion.usage == Usage(input_tokens=request.input_tokens, output_tokens=completion.usage.output_tokens)
    assert completion.usage.output_tokens > 0
    assert completion.raw == request.response


@pytest.mark.parametrize("kind", CLIENTS)
def test_a_tool_call_conversation_passes_the_servers_validation(fake: FakeProvider, kind: str) -> None:
    with client_for(kind, fake) as client:
        completion = client.complete(tool_conversation(), max_tokens=50)
    assert fake.requests[-1].status == 200
    assert "What does main return?" in completion.text


def test_chat_client_max_tokens_field_and_extra_body(fake: FakeProvider) -> None:
    with client_for("chat", fake, max_tokens_field="max_tokens", extra_body={"temperature": 0}) as client:
        client.complete([user("hi")], max_tokens=33)
    body = fake.requests[-1].body
    assert body["max_tokens"] == 33 and "max_completion_tokens" not in body and body["temperature"] == 0


def test_openai_cached_tokens_are_moved_out_of_input(fake: FakeProvider) -> None:
    fake.report_usage(100, cache_read_tokens=2_000, output_tokens=5)
    with client_for("chat", fake) as client:
        completion = client.complete([user("hi")], max_tokens=20)
    assert completion.usage == Usage(input_tokens=100, output_tokens=5, cache_read_tokens=2_000)
    assert completion.raw["usage"]["prompt_tokens"] == 2_100


def test_anthropic_cache_usage_and_count_tokens(fake: FakeProvider) -> None:
    fake.force(ForcedResponse(usage={"input_tokens": 7, "cache_read_tokens": 1_500, "cache_write_tokens": 30,
                                     "output_tokens": 4}))
    with client_for("anthropic", fake) as client:
        completion = client.complete([user("hi")], max_tokens=20)
        counted = client.count_tokens([user("hi")], system="Be brief.")
    assert completion.usage == Usage(7, 4, 1_500, 30) and completion.usage.context_tokens == 1_537
    assert counted == fake.requests[-1].input_tokens > 0


def test_responses_client_reports_an_incomplete_answer(fake: FakeProvider) -> None:
    fake.reply("word " * 400)
    with client_for("responses", fake) as client:
        completion = client.complete([user("go")], max_tokens=16)  # the Responses API's minimum
    assert completion.stop_reason == "max_output_tokens"
    assert fake.requests[-1].body["store"] is False


def test_per_call_timeout(fake: FakeProvider) -> None:
    fake.force(ForcedResponse(delay=1.0))
    with client_for("chat", fake) as client, pytest.raises(httpx.TimeoutException):
        client.complete([user("hi")], max_tokens=10, timeout=0.2)


def test_a_shared_http_client_is_not_closed_by_the_model_client(fake: FakeProvider) -> None:
    with httpx.Client() as http:
        with client_for("anthropic", fake, http_client=http) as client:
            client.complete([user("hi")], max_tokens=10)
        assert not http.is_closed


# --------------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("kind", CLIENTS)
def test_the_servers_own_overflow_raises_a_provider_error_that_is_detected(fake: FakeProvider, kind: str) -> None:
    with client_for(kind, fake) as client, pytest.raises(ProviderError) as caught:
        client.complete(too_big(), max_tokens=100)
    error = caught.value
    assert error.status_code == 400 and error.provider == client.provider
    assert error.body == fake.requests[-1].response
    match = is_overflow_error(error)
    assert match is not None and match.provider in ("anthropic", "openai")
    if kind != "responses":  # the Responses API does not name the numbers
        assert match.limit_tokens == WINDOW


def test_an_output_cap_error_is_raised_but_is_not_an_overflow(fake: FakeProvider) -> None:
    with client_for("anthropic", fake) as client, pytest.raises(ProviderError) as caught:
        client.complete([user("hi")], max_tokens=MAX_OUTPUT + 1)
    assert "maximum allowed number of output tokens" in caught.value.message
    assert is_overflow_error(caught.value) is None


def test_a_non_json_success_is_an_error(fake: FakeProvider) -> None:
    fake.fail(200, "<html>gateway</html>")
    with client_for("chat", fake) as client, pytest.raises(ProviderError, match="not JSON"):
        client.complete([user("hi")], max_tokens=10)


@pytest.mark.parametrize("kind", CLIENTS)
def test_silent_overflow_from_a_completions_usage(fake: FakeProvider, kind: str) -> None:
    fake.report_usage(WINDOW + 1, output_tokens=2)
    with client_for(kind, fake) as client:
        completion = client.complete([user("hi")], max_tokens=16)
    match = is_overflow_error(completion, context_window=WINDOW)
    assert match is not None and match.silent and match.observed_tokens == WINDOW + 1
    assert is_overflow_error(completion.usage, context_window=WINDOW).silent


@pytest.mark.parametrize("entry", CATALOG, ids=lambda e: f"{e.provider}:{e.regex.pattern[:30]}")
def test_every_catalog_error_served_over_http_is_detected(fake: FakeProvider, http: httpx.Client, entry) -> None:
    """From the raw httpx response and from each of our clients' exceptions (or, for the overflow
    reported as a stop reason, from the completion)."""
    fake.fail_with(entry, times=1 + len(CLIENTS))
    raw = http.post(fake.openai_base_url + "/chat/completions", json={"model": "m", "messages": []})
    assert raw.status_code == (entry.status or 400)
    assert is_overflow_error(raw) is not None
    for kind in CLIENTS:
        with client_for(kind, fake, http_client=http) as client:
            if entry.status == 200:
                outcome: object = client.complete([user("hi")], max_tokens=10)
            else:
                with pytest.raises(ProviderError) as caught:
                    client.complete([user("hi")], max_tokens=10)
                outcome = caught.value
        match = is_overflow_error(outcome)
        assert match is not None, (kind, outcome)
        if entry.provider != "generic":
            assert match.provider == entry.provider


# --------------------------------------------------------------------------------------------------
# The official SDKs (a test-only dependency)


def sdk(name: str) -> Any:
    return pytest.importorskip(name, reason=f"the {name} SDK is a test-only dependency: pip install {name}")


@pytest.mark.parametrize("entry", CATALOG, ids=lambda e: f"{e.provider}:{e.regex.pattern[:30]}")
def test_every_catalog_error_is_detected_from_the_sdk_exceptions(fake: FakeProvider, sdks, entry) -> None:
    openai, openai_client, anthropic, anthropic_client = sdks
    fake.fail_with(entry, times=2)
    calls = [
        (lambda: openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]),
         openai.APIStatusError),
        (lambda: anthropic_client.messages.create(model="m", max_tokens=10,
                                                  messages=[{"role": "user", "content": "hi"}]),
         anthropic.APIStatusError),
    ]
    for call, error_type in calls:
        if entry.status == 200:  # z.ai reports the overflow as a stop reason in a 200 answer
            answer = call()
            if error_type is openai.APIStatusError:
                assert is_overflow_error(answer).provider == "z.ai"
            continue
        with pytest.raises(error_type) as caught:
            call()
        assert caught.value.status_code == (entry.status or 400)
        match = is_overflow_error(caught.value)
        assert match is not None, caught.value
        if entry.provider != "generic":
            assert match.provider == entry.provider


def test_sdk_exceptions_for_the_servers_own_errors(fake: FakeProvider, sdks) -> None:
    openai, openai_client, anthropic, anthropic_client = sdks
    big = [{"role": "user", "content": "x " * (4 * WINDOW)}]
    with pytest.raises(openai.BadRequestError) as chat_overflow:
        openai_client.chat.completions.create(model="m", messages=big, max_completion_tokens=100)
    assert is_overflow_error(chat_overflow.value).limit_tokens == WINDOW
    with pytest.raises(openai.BadRequestError) as responses_overflow:
        openai_client.responses.create(model="m", input="x " * (4 * WINDOW))
    assert is_overflow_error(responses_overflow.value).provider == "openai"
    with pytest.raises(anthropic.BadRequestError) as messages_overflow:
        anthropic_client.messages.create(model="m", max_tokens=100, messages=big)
    match = is_overflow_error(messages_overflow.value)
    assert match.provider == "anthropic" and match.limit_tokens == WINDOW
    with pytest.raises(anthropic.BadRequestError) as cap:
        anthropic_client.messages.create(model="m", max_tokens=MAX_OUTPUT + 1,
                                         messages=[{"role": "user", "content": "hi"}])
    assert is_overflow_error(cap.value) is None
    broken = [{"role": "user", "content": "hi"},
              {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]}]
    with pytest.raises(anthropic.BadRequestError) as unpaired:
        anthropic_client.messages.create(model="m", max_tokens=10, messages=broken)
    assert "toolu_1" in str(unpaired.value) and is_overflow_error(unpaired.value) is None


def test_sdk_answers_carry_real_usage(fake: FakeProvider, sdks) -> None:
    _, openai_client, _, anthropic_client = sdks
    chat = openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                 max_completion_tokens=20)
    assert chat.usage.prompt_tokens == fake.requests[-1].input_tokens
    fake.report_usage(100, cache_read_tokens=WINDOW, output_tokens=1)  # over the window only with cache reads
    message = anthropic_client.messages.create(model="m", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
    assert is_overflow_error(message.usage, context_window=WINDOW).silent
    assert is_overflow_error(message, context_window=WINDOW).silent


def test_the_canonical_request_survives_conversion(fake: FakeProvider) -> None:
    """What the Anthropic client sends reads back to the same conversation."""
    from ctxwin.messages.providers import from_anthropic

    with client_for("anthropic", fake) as client:
        client.complete(tool_conversation(), system="sys", max_tokens=10)
    body = fake.requests[-1].body
    read = from_anthropic(body["messages"], system=body["system"])
    assert [m.role for m in read] == ["system", "user", "assistant", "tool", "user"]
    assert read[0].blocks == (Text("sys"),)
