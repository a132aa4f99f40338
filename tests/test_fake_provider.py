"""The fake provider over real HTTP (httpx against 127.0.0.1): response shapes, window enforcement with
each provider's real error, the validation the real APIs do, deterministic summaries, scripting, and
prompt-cache usage."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwin.providers.overflow import CATALOG, is_overflow_error
from ctxwin.testing import FakeProvider, ForcedResponse
from ctxwin.testing.fake_provider import (
    CHAT,
    COUNT_TOKENS,
    MESSAGES,
    MIN_CACHEABLE_TOKENS,
    OPENAI_CACHE_STEP,
    RESPONSES,
    count_request_tokens,
)
from ctxwin.tokens import counter_for

WINDOW, MAX_OUTPUT = 4_000, 1_000
OPENAI_HEADERS = {"authorization": "Bearer test-key"}
ANTHROPIC_HEADERS = {"x-api-key": "test-key", "anthropic-version": "2023-06-01"}


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
    with httpx.Client(timeout=10) as client:
        yield client


def chat(fake: FakeProvider, http: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return http.post(fake.base_url + CHAT, json={"model": "gpt-test", **body}, headers=OPENAI_HEADERS)


def responses(fake: FakeProvider, http: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    return http.post(fake.base_url + RESPONSES, json={"model": "gpt-test", **body}, headers=OPENAI_HEADERS)


def messages(fake: FakeProvider, http: httpx.Client, body: dict[str, Any], path: str = MESSAGES) -> httpx.Response:
    payload = {"model": "claude-test", **({"max_tokens": 100} if path == MESSAGES else {}), **body}
    return http.post(fake.base_url + path, json=payload, headers=ANTHROPIC_HEADERS)


def words(n: int) -> str:
    """Varied prose of about n tokens by the counter the server uses (whatever that counter is)."""
    counter = counter_for("claude-test")
    low, high = 0, 4 * n + 8
    while low < high:  # the most words that stay within n tokens
        mid = (low + high + 1) // 2
        if counter.count_text(" ".join(f"word{i % 97}" for i in range(mid))) <= n:
            low = mid
        else:
            high = mid - 1
    return " ".join(f"word{i % 97}" for i in range(low))


# --------------------------------------------------------------------------------------------------
# Lifecycle and shapes


def test_listens_on_a_random_loopback_port_and_stops() -> None:
    with FakeProvider() as one, FakeProvider() as two:
        assert one.port != two.port
        assert one.base_url.startswith("http://127.0.0.1:")
        assert one.openai_base_url.endswith("/v1") and one.anthropic_base_url == one.base_url
        url = one.base_url
    with pytest.raises(httpx.ConnectError):
        httpx.post(url + CHAT, json={}, timeout=2)
    with pytest.raises(RuntimeError, match="not running"):
        _ = FakeProvider().port


def test_chat_completion_shape_and_usage(fake: FakeProvider, http: httpx.Client) -> None:
    body = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}],
            "max_completion_tokens": 50}
    response = chat(fake, http, body)
    assert response.status_code == 200
    data = response.json()
    assert data["object"] == "chat.completion" and data["choices"][0]["finish_reason"] == "stop"
    assert "hello there" in data["choices"][0]["message"]["content"]
    usage = data["usage"]
    expected = count_request_tokens("chat", {"model": "gpt-test", **body}, counter_for("gpt-test"))
    assert usage["prompt_tokens"] == expected == fake.requests[-1].input_tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 0


def test_responses_shape_and_usage(fake: FakeProvider, http: httpx.Client) -> None:
    data = responses(fake, http, {"input": "hello there", "instructions": "be brief", "max_output_tokens": 50}).json()
    assert data["object"] == "response" and data["status"] == "completed"
    assert data["output"][0]["content"][0]["type"] == "output_text"
    assert data["usage"]["input_tokens"] == fake.requests[-1].input_tokens
    assert data["usage"]["input_tokens_details"] == {"cached_tokens": 0}


def test_anthropic_shape_usage_and_count_tokens(fake: FakeProvider, http: httpx.Client) -> None:
    body = {"system": "be brief", "messages": [{"role": "user", "content": "hello there"}]}
    data = messages(fake, http, body).json()
    assert data["type"] == "message" and data["stop_reason"] == "end_turn"
    assert set(data["usage"]) == {"input_tokens", "output_tokens", "cache_creation_input_tokens",
                                  "cache_read_input_tokens"}
    counted = messages(fake, http, body, path=COUNT_TOKENS).json()
    assert counted == {"input_tokens": data["usage"]["input_tokens"]}


def test_long_replies_are_cut_at_max_tokens(fake: FakeProvider, http: httpx.Client) -> None:
    fake.reply(words(400), times=3)
    anthropic = messages(fake, http, {"max_tokens": 20, "messages": [{"role": "user", "content": "go"}]}).json()
    assert anthropic["stop_reason"] == "max_tokens" and anthropic["usage"]["output_tokens"] <= 20
    completion = chat(fake, http, {"max_tokens": 20, "messages": [{"role": "user", "content": "go"}]}).json()
    assert completion["choices"][0]["finish_reason"] == "length"
    response = responses(fake, http, {"max_output_tokens": 20, "input": "go"}).json()
    assert response["status"] == "incomplete" and response["incomplete_details"] == {"reason": "max_output_tokens"}


# --------------------------------------------------------------------------------------------------
# The window, with each provider's real error


def test_anthropic_overflow_errors(fake: FakeProvider, http: httpx.Client) -> None:
    big = {"role": "user", "content": words(WINDOW - MAX_OUTPUT // 2)}
    over_alone = messages(fake, http, {"max_tokens": 10, "messages": [{"role": "user", "content": words(5_000)}]})
    assert over_alone.status_code == 400
    error = over_alone.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith("prompt is too long: ")
    match = is_overflow_error(over_alone)
    assert match.provider == "anthropic" and match.limit_tokens == WINDOW
    assert match.observed_tokens == fake.requests[-1].input_tokens
    with_output = messages(fake, http, {"max_tokens": MAX_OUTPUT, "messages": [big]})
    assert with_output.status_code == 400
    assert "input length and `max_tokens` exceed context limit" in with_output.json()["error"]["message"]
    assert is_overflow_error(with_output).observed_tokens == fake.requests[-1].input_tokens + MAX_OUTPUT


def test_openai_overflow_errors(fake: FakeProvider, http: httpx.Client) -> None:
    big = [{"role": "user", "content": words(5_000)}]
    with_cap = chat(fake, http, {"messages": big, "max_completion_tokens": 100})
    assert with_cap.status_code == 400 and with_cap.json()["error"]["code"] == "context_length_exceeded"
    assert "you requested" in with_cap.json()["error"]["message"]
    without_cap = chat(fake, http, {"messages": big})
    assert "your messages resulted in" in without_cap.json()["error"]["message"]
    assert is_overflow_error(without_cap).observed_tokens == fake.requests[-1].input_tokens
    responses_api = responses(fake, http, {"input": words(5_000)})
    assert responses_api.json()["error"]["param"] == "input"
    assert is_overflow_error(responses_api).provider == "openai"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(min_value=1, max_value=6_000), max_tokens=st.integers(min_value=1, max_value=MAX_OUTPUT))
def test_a_request_is_accepted_exactly_when_input_plus_max_tokens_fits(fake: FakeProvider, http: httpx.Client,
                                                                       size: int, max_tokens: int) -> None:
    body = {"max_tokens": max_tokens, "messages": [{"role": "user", "content": "x" * size}]}
    tokens = count_request_tokens("anthropic", {"model": "claude-test", **body}, counter_for("claude-test"))
    response = messages(fake, http, body)
    assert (response.status_code == 200) == (tokens + max_tokens <= WINDOW)
    assert (is_overflow_error(response) is not None) == (response.status_code != 200)


def test_output_caps_are_rejected_as_the_real_apis_do_and_are_not_overflows(fake: FakeProvider,
                                                                              http: httpx.Client) -> None:
    small = [{"role": "user", "content": "hi"}]
    anthropic = messages(fake, http, {"max_tokens": MAX_OUTPUT + 1, "messages": small})
    assert "which is the maximum allowed number of output tokens" in anthropic.json()["error"]["message"]
    openai = chat(fake, http, {"max_tokens": MAX_OUTPUT + 1, "messages": small})
    assert openai.json()["error"]["code"] == "invalid_value"
    assert is_overflow_error(anthropic) is None and is_overflow_error(openai) is None


# --------------------------------------------------------------------------------------------------
# Validation, with the real wording


def anthropic_error(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    return response.json()["error"]["message"]


def test_anthropic_rejects_a_tool_use_without_its_result(fake: FakeProvider, http: httpx.Client) -> None:
    body = {"messages": [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01A", "name": "read", "input": {}}]},
        {"role": "user", "content": "and?"},
    ]}
    message = anthropic_error(messages(fake, http, body))
    assert "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_01A" in message
    assert is_overflow_error(messages(fake, http, body)) is None


def test_anthropic_rejects_a_result_without_its_call(fake: FakeProvider, http: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9",
                                                       "content": "x"}]}]}
    assert "unexpected `tool_use_id` found in `tool_result` blocks: toolu_9" in anthropic_error(
        messages(fake, http, body))


def test_anthropic_rejects_roles_that_do_not_alternate_and_empty_content(fake: FakeProvider,
                                                                          http: httpx.Client) -> None:
    twice = {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}
    assert "roles must alternate" in anthropic_error(messages(fake, http, twice))
    empty = {"messages": [{"role": "user", "content": []}]}
    assert "non-empty content" in anthropic_error(messages(fake, http, empty))
    blank = {"messages": [{"role": "user", "content": [{"type": "text", "text": " "}]}]}
    assert "text content blocks must be non-empty" in anthropic_error(messages(fake, http, blank))
    with FakeProvider(strict_alternation=False) as lenient:
        assert messages(lenient, http, twice).status_code == 200


def test_anthropic_headers_are_required(fake: FakeProvider, http: httpx.Client) -> None:
    body = {"model": "claude-test", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    no_version = http.post(fake.base_url + MESSAGES, json=body, headers={"x-api-key": "k"})
    assert no_version.status_code == 400 and "anthropic-version" in no_version.json()["error"]["message"]
    no_key = http.post(fake.base_url + MESSAGES, json=body, headers={"anthropic-version": "2023-06-01"})
    assert no_key.status_code == 401 and no_key.json()["error"]["type"] == "authentication_error"
    missing_max = messages(fake, http, {"max_tokens": None, "messages": body["messages"]})
    assert "max_tokens: Field required" in anthropic_error(missing_max)


def test_openai_rejects_broken_tool_pairs(fake: FakeProvider, http: httpx.Client) -> None:
    orphan = chat(fake, http, {"messages": [{"role": "user", "content": "hi"},
                                            {"role": "tool", "tool_call_id": "call_1", "content": "x"}]})
    assert orphan.status_code == 400
    assert "must be a response to a preceeding message with 'tool_calls'" in orphan.json()["error"]["message"]
    assert orphan.json()["error"]["param"] == "messages.[1].role"
    call = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    unanswered = chat(fake, http, {"messages": [{"role": "user", "content": "hi"},
                                                {"role": "assistant", "content": None, "tool_calls": [call]},
                                                {"role": "user", "content": "well?"}]})
    assert "did not have response messages: call_1" in unanswered.json()["error"]["message"]
    answered = chat(fake, http, {"messages": [{"role": "user", "content": "hi"},
                                              {"role": "assistant", "content": None, "tool_calls": [call]},
                                              {"role": "tool", "tool_call_id": "call_1", "content": "data"}]})
    assert answered.status_code == 200
    no_key = http.post(fake.base_url + CHAT, json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert no_key.status_code == 401 and "didn't provide an API key" in no_key.json()["error"]["message"]


def test_responses_rejects_broken_tool_pairs(fake: FakeProvider, http: httpx.Client) -> None:
    orphan = responses(fake, http, {"input": [{"type": "function_call_output", "call_id": "call_7", "output": "x"}]})
    assert orphan.json()["error"]["message"] == "No tool call found for function call output with call_id call_7."
    unanswered = responses(fake, http, {"input": [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "call_8", "name": "read", "arguments": "{}"}]})
    assert unanswered.json()["error"]["message"] == "No tool output found for function call call_8."


def test_unknown_paths_and_streaming(fake: FakeProvider, http: httpx.Client) -> None:
    assert http.post(fake.base_url + "/v1/embeddings", json={}).status_code == 404
    streamed = chat(fake, http, {"stream": True, "messages": [{"role": "user", "content": "hi"}]})
    assert streamed.status_code == 200 and streamed.headers["content-type"] == "text/event-stream"
    assert streamed.text.rstrip().endswith("data: [DONE]")


# --------------------------------------------------------------------------------------------------
# Deterministic answers and summaries


def test_summaries_keep_user_first_lines_and_file_paths_deterministically(fake: FakeProvider,
                                                                          http: httpx.Client) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "read",
                                                              "arguments": json.dumps({"path": "src/app/main.py"})}}
    body = {"messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the login bug\nIt fails on empty passwords."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1",
         "content": "see also /etc/app/config.toml and ./tests/test_login.py"},
        {"role": "user", "content": "Also keep the API stable."},
        {"role": "user", "content": "Now summarize the conversation so far.\nUser: quoted request in docs/NOTES.md"},
    ]}
    first = chat(fake, http, body).json()["choices"][0]["message"]["content"]
    assert first == chat(fake, http, body).json()["choices"][0]["message"]["content"]
    assert "- Fix the login bug" in first and "It fails on empty passwords" not in first
    assert "- Also keep the API stable." in first
    assert "- quoted request in docs/NOTES.md" in first
    for path in ("src/app/main.py", "/etc/app/config.toml", "./tests/test_login.py", "docs/NOTES.md"):
        assert f"- {path}" in first


def test_ordinary_requests_get_a_short_deterministic_reply(fake: FakeProvider, http: httpx.Client) -> None:
    body = {"messages": [{"role": "user", "content": "What is in README.md?\nmore"}]}
    reply = chat(fake, http, body).json()["choices"][0]["message"]["content"]
    assert reply == "OK. 1 messages read; the last user message begins: What is in README.md?"


# --------------------------------------------------------------------------------------------------
# Scripting and recording


def test_fail_n_times_then_succeed(fake: FakeProvider, http: httpx.Client) -> None:
    fake.fail(503, {"error": {"message": "upstream down", "type": "server_error"}}, times=2)
    statuses = [chat(fake, http, {"messages": [{"role": "user", "content": "hi"}]}).status_code for _ in range(3)]
    assert statuses == [503, 503, 200]
    assert [r.forced for r in fake.requests] == [True, True, False]


@pytest.mark.parametrize("entry", CATALOG, ids=lambda e: f"{e.provider}:{e.regex.pattern[:30]}")
def test_serves_every_catalog_body_with_its_status(fake: FakeProvider, http: httpx.Client, entry) -> None:
    fake.fail_with(entry, paths=(CHAT,))
    response = chat(fake, http, {"messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == (entry.status or 400)
    assert response.text == entry.example
    match = is_overflow_error(response)
    assert match is not None
    if entry.provider != "generic":
        assert match.provider == entry.provider


def test_scripted_overrides_apply_only_to_their_paths_and_survive_rejected_requests(fake: FakeProvider,
                                                                                    http: httpx.Client) -> None:
    fake.force(ForcedResponse(text="from the script", paths=(MESSAGES,)))
    assert "from the script" not in chat(fake, http, {"messages": [{"role": "user", "content": "hi"}]}).text
    rejected = messages(fake, http, {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})
    assert rejected.status_code == 400
    answer = messages(fake, http, {"messages": [{"role": "user", "content": "hi"}]}).json()
    assert answer["content"][0]["text"] == "from the script"
    assert "from the script" not in messages(fake, http, {"messages": [{"role": "user", "content": "hi"}]}).text


def test_reported_usage_makes_a_silent_overflow(fake: FakeProvider, http: httpx.Client) -> None:
    fake.report_usage(WINDOW + 500, output_tokens=3)
    response = chat(fake, http, {"messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 200 and response.json()["usage"]["prompt_tokens"] == WINDOW + 500
    match = is_overflow_error(response, context_window=WINDOW)
    assert match is not None and match.silent and match.observed_tokens == WINDOW + 500
    normal = chat(fake, http, {"messages": [{"role": "user", "content": "hi"}]})
    assert is_overflow_error(normal, context_window=WINDOW) is None


def test_every_request_is_recorded(fake: FakeProvider, http: httpx.Client) -> None:
    chat(fake, http, {"messages": [{"role": "user", "content": "one"}]})
    messages(fake, http, {"messages": [{"role": "user", "content": "two"}]})
    recorded = fake.requests
    assert [r.path for r in recorded] == [CHAT, MESSAGES]
    assert recorded[1].body["messages"][0]["content"] == "two"
    assert recorded[1].headers["x-api-key"] == "test-key"
    assert all(r.status == 200 and r.input_tokens for r in recorded)
    assert fake.requests_to(CHAT) == recorded[:1]


def test_concurrent_requests(fake: FakeProvider, http: httpx.Client) -> None:
    results: list[int] = []

    def call(n: int) -> None:
        with httpx.Client(timeout=10) as own:
            results.append(chat(fake, own, {"messages": [{"role": "user", "content": f"n{n}"}]}).status_code)

    threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [200] * 8 and len(fake.requests) == 8


# --------------------------------------------------------------------------------------------------
# Prompt caching


def test_anthropic_cache_breakpoints_write_then_read(fake: FakeProvider, http: httpx.Client) -> None:
    system = [{"type": "text", "text": words(1_500), "cache_control": {"type": "ephemeral"}}]
    first = messages(fake, http, {"system": system, "messages": [{"role": "user", "content": "one"}]}).json()
    second = messages(fake, http, {"system": system, "messages": [{"role": "user", "content": "two"}]}).json()
    write, read = first["usage"], second["usage"]
    assert write["cache_creation_input_tokens"] >= MIN_CACHEABLE_TOKENS and write["cache_read_input_tokens"] == 0
    assert read["cache_read_input_tokens"] == write["cache_creation_input_tokens"]
    assert read["cache_creation_input_tokens"] == 0
    counted = fake.requests[-1].input_tokens
    assert read["input_tokens"] + read["cache_read_input_tokens"] + read["cache_creation_input_tokens"] == counted
    unmarked = messages(fake, http, {"system": words(1_500), "messages": [{"role": "user", "content": "three"}]})
    assert unmarked.json()["usage"]["cache_read_input_tokens"] == 0


def test_openai_caches_repeated_prefixes_in_128_token_steps(fake: FakeProvider, http: httpx.Client) -> None:
    history = [{"role": "system", "content": words(1_500)}, {"role": "user", "content": "first"}]
    cold = chat(fake, http, {"messages": history}).json()["usage"]
    warm = chat(fake, http, {"messages": [*history, {"role": "assistant", "content": "ok"},
                                          {"role": "user", "content": "second"}]}).json()["usage"]
    assert cold["prompt_tokens_details"]["cached_tokens"] == 0
    cached = warm["prompt_tokens_details"]["cached_tokens"]
    assert MIN_CACHEABLE_TOKENS <= cached <= warm["prompt_tokens"]
    assert (cached - MIN_CACHEABLE_TOKENS) % OPENAI_CACHE_STEP == 0
    short = [{"role": "user", "content": "tiny"}]
    chat(fake, http, {"messages": short})
    assert chat(fake, http, {"messages": short}).json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
