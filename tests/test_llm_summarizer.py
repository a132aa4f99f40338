"""The model summarizer, against real HTTP: ctxwin's fake provider on 127.0.0.1 (Anthropic and OpenAI
APIs), driven through ctxwin's httpx clients; plus a socket that never answers, for the timeout."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwin.compaction.base import Summary
from ctxwin.compaction.identifiers import extract_identifiers
from ctxwin.compaction.llm import LLMSummarizer, SummaryFailed, call_groups
from ctxwin.compaction.prompts import (
    CLAUDE_CODE_SECTIONS,
    OPENCLAW_SECTIONS,
    PI_INITIAL,
    PI_UPDATE,
    SYSTEM_PROMPT,
    strip_analysis,
)
from ctxwin.messages import Message, ToolCall, assign_ids, assistant, tool_result, user
from ctxwin.providers.anthropic import AnthropicClient
from ctxwin.providers.openai import OpenAIChatClient
from ctxwin.testing.fake_provider import MESSAGES, FakeProvider
from ctxwin.tokens import counter_for
from guards import HANG_GUARD_S, within

COUNTER = counter_for()
PI_REPLY = """## Goal
Add retries to the client.

## Constraints & Preferences
- Keep the public API.

## Progress
### Done
- [x] Read /repo/src/client.py

### In Progress
- [ ] Retries

### Blocked
- (none)

## Key Decisions
- **Exponential backoff**: the API rate-limits.

## Next Steps
1. Finish retries

## Critical Context
- (none)"""

OPENCLAW_REPLY = PI_REPLY + "\n\n" + "\n\n".join(f"## {s}\n- see above" for s in OPENCLAW_SECTIONS)


def span() -> list[Message]:
    return assign_ids([
        user("Add retries to the client in /repo/src/client.py"),
        assistant("Reading it.", ToolCall("c1", "Read", {"file_path": "/repo/src/client.py"})),
        tool_result("c1", "x" * 2_500),
        assistant("", ToolCall("c2", "Edit", {"file_path": "/repo/src/client.py", "old_string": "a",
                                               "new_string": "b"})),
        tool_result("c2", "ok"),
    ])


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(context_window=200_000) as server:
        yield server


def anthropic(fake: FakeProvider) -> AnthropicClient:
    return AnthropicClient(fake.anthropic_base_url, "test-key", "claude-test")


def prompt_text(request: Any) -> str:
    """The user prompt of a recorded Anthropic or OpenAI chat request."""
    content = request.body["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(part.get("text", "") for part in content)


def conversation(request: Any) -> str:
    match = re.search(r"<conversation>\n(.*?)\n</conversation>", prompt_text(request), re.S)
    assert match, "every request carries the serialized conversation"
    return match.group(1)


# --------------------------------------------------------------------------------------------------
# Prompts and serialization


def test_pi_summary_over_the_anthropic_api(fake: FakeProvider) -> None:
    fake.reply(PI_REPLY)
    summarizer = LLMSummarizer(anthropic(fake), style="pi", window_tokens=100_000)
    messages = span()
    summary = summarizer.summarize(messages, focus="the retry policy", budget_tokens=1_000, counter=COUNTER)

    (request,) = fake.requests_to(MESSAGES)
    assert request.body["system"] in (SYSTEM_PROMPT, [{"type": "text", "text": SYSTEM_PROMPT}])
    tags = "\n\n<modified-files>\n/repo/src/client.py\n</modified-files>"
    # The budget left after the file lists, with slack (the text is trimmed to the budget after, if needed).
    assert request.body["max_tokens"] == int((1_000 - COUNTER.count_text(tags)) * 1.5)
    text = prompt_text(request)
    assert PI_INITIAL in text and text.endswith("Additional focus: the retry policy")
    assert "<previous-summary>" not in text
    chat = conversation(request)
    assert chat.startswith("[User]: Add retries to the client in /repo/src/client.py\n\n[Assistant]: Reading it.")
    assert '[Assistant tool calls]: Read(file_path="/repo/src/client.py")' in chat
    assert "[Tool result]: " + "x" * 2_000 + "\n\n[... 500 more characters truncated]" in chat

    assert summary.text == PI_REPLY + tags
    assert summary.modified_files == ("/repo/src/client.py",) and summary.read_files == ()
    assert summary.summarizer == "llm:pi" and summary.covered_ids == tuple(m.id for m in messages)
    assert summary.sections["Goal"] == ["Add retries to the client."]
    assert summary.details["calls"] == 1 and summary.details["chunks"] == 1
    assert summary.details["input_tokens"] > 0 and "fallback" not in summary.details
    assert summary.tokens == COUNTER.count_text(summary.text)


def test_an_update_merges_into_the_previous_summary(fake: FakeProvider) -> None:
    fake.reply(PI_REPLY)
    previous = Summary(text="## Goal\n- the old goal", read_files=("/repo/README.md",))
    summary = LLMSummarizer(anthropic(fake), window_tokens=100_000).summarize(
        span(), previous=previous, budget_tokens=1_000, counter=COUNTER)
    text = prompt_text(fake.requests_to(MESSAGES)[0])
    assert "<previous-summary>\n## Goal\n- the old goal\n</previous-summary>" in text and PI_UPDATE in text
    assert summary.read_files == ("/repo/README.md",)  # carried forward


def test_claude_code_style_strips_the_analysis(fake: FakeProvider) -> None:
    body = "\n\n".join(f"{i}. {s}:\n   - item {i}" for i, s in enumerate(CLAUDE_CODE_SECTIONS, start=1))
    fake.reply(f"<analysis>\nprivate notes\n</analysis>\n\n<summary>\n{body}\n</summary>")
    client = OpenAIChatClient(fake.openai_base_url, "test-key", "gpt-test")
    summary = LLMSummarizer(client, style="claude-code", window_tokens=100_000).summarize(
        span(), budget_tokens=1_000, counter=COUNTER)
    assert "private notes" not in summary.text and "<analysis>" not in summary.text
    assert summary.text == "Summary:\n" + body
    assert summary.sections["Current Work"] == ["item 8"]
    request = fake.requests[0]
    asked = request.body.get("max_completion_tokens", request.body.get("max_tokens"))
    assert "<analysis>" in prompt_text(request) and asked == 3_000  # room for the scratchpad too


def test_strip_analysis_tolerates_a_missing_closing_tag() -> None:
    assert strip_analysis("<analysis>notes\n<summary>the summary</summary>") == "Summary:\nthe summary"
    assert strip_analysis("<analysis>notes never closed") == ""
    assert strip_analysis("no tags\n\n\n\nat all") == "no tags\n\nat all"


def test_letta_style_states_its_word_limit(fake: FakeProvider) -> None:
    fake.reply("## High level goals\n- a\n## What happened\n- b\n## Important details\n- c\n## Errors and fixes\n"
               "- d\n## Lookup hints\n- e")
    summary = LLMSummarizer(anthropic(fake), style="letta", window_tokens=100_000).summarize(
        span(), budget_tokens=2_000, counter=COUNTER)
    assert "Stay under 300 words." in prompt_text(fake.requests[0])
    assert summary.text.startswith("## High level goals") and summary.modified_files == ("/repo/src/client.py",)


# --------------------------------------------------------------------------------------------------
# Spans larger than the summarizer's window


def long_span(groups: int = 40) -> list[Message]:
    messages = [user("Refactor every module, one at a time.")]
    for i in range(groups):
        messages.append(assistant(f"Working on module marker-call-{i:03d}.",
                                  ToolCall(f"c{i}", "Bash", {"command": f"cat src/mod{i:03d}.py"})))
        messages.append(tool_result(f"c{i}", f"marker-result-{i:03d}\n" + "line of code\n" * 120))
    return assign_ids(messages)


def test_a_span_larger_than_the_window_is_chunked_and_every_message_read() -> None:
    window = 6_000
    with FakeProvider(context_window=window, max_output=2_000) as fake:
        fake.reply(PI_REPLY, times=50)
        summarizer = LLMSummarizer(anthropic(fake), window_tokens=window)
        messages = long_span()
        summary = summarizer.summarize(messages, budget_tokens=500, counter=COUNTER)
        requests = fake.requests_to(MESSAGES)
    assert "fallback" not in summary.details, summary.details
    assert len(requests) >= 3 and summary.details["chunks"] == len(requests) == summary.details["calls"]
    chunks = [conversation(r) for r in requests]
    for i in range(40):
        holding_call = [c for c in chunks if f"marker-call-{i:03d}" in c]
        holding_result = [c for c in chunks if f"marker-result-{i:03d}" in c]
        assert len(holding_call) == 1 and holding_call == holding_result  # read once, never split from its call
    # Each chunk after the first is merged into the running summary.
    assert "<previous-summary>" not in prompt_text(requests[0])
    assert all(f"<previous-summary>\n{PI_REPLY}\n</previous-summary>" in prompt_text(r) for r in requests[1:])
    # Chunks share the span by tokens: none is tiny next to the others.
    sizes = [COUNTER.count_text(c) for c in chunks]
    assert min(sizes) > max(sizes) / 4


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(min_value=0, max_value=3), st.booleans()), max_size=12))
def test_call_groups_never_separate_a_call_from_its_result(shape: list[tuple[int, bool]]) -> None:
    messages: list[Message] = []
    for turn, (calls, with_text) in enumerate(shape):
        ids = [f"t{turn}c{k}" for k in range(calls)]
        messages.append(assistant("text" if with_text or not ids else "", *(ToolCall(i, "Bash", {}) for i in ids)))
        messages.extend(tool_result(i, "ok") for i in ids)
        if turn % 3 == 0:
            messages.append(user("next"))
    groups = call_groups(messages)
    assert [m for g in groups for m in g] == messages
    for group in groups:
        called = {c.id for m in group for c in m.tool_calls}
        answered = {r.call_id for m in group for r in m.tool_results}
        assert called == answered


def test_openclaw_summarizes_in_stages_and_retries_the_quality_check_once() -> None:
    window = 6_000
    with FakeProvider(context_window=window, max_output=2_000) as fake:
        messages = long_span()
        summarizer = LLMSummarizer(anthropic(fake), style="openclaw", window_tokens=window)
        chunk_count = len(summarizer.chunk(messages, None, None, 500, summarizer._max_output(500), COUNTER))
        assert chunk_count >= 2
        fake.reply("partial summary", times=chunk_count)
        fake.reply("## Decisions\n- none")  # the merge: sections missing
        recent = "\n".join(f"- {i}" for i in extract_identifiers(messages[-10:]))
        fake.reply(OPENCLAW_REPLY + "\n- Refactor every module\n" + recent)  # the retry passes
        summary = summarizer.summarize(messages, budget_tokens=500, counter=COUNTER)
        requests = fake.requests_to(MESSAGES)
    assert "fallback" not in summary.details, summary.details
    assert len(requests) == chunk_count + 2 and summary.details["quality_retries"] == 1
    merge = prompt_text(requests[chunk_count])
    assert f"[Chunk 1 of {chunk_count}: oldest messages]\npartial summary" in merge
    assert "Merge them into one summary" in merge
    assert "failed quality checks (missing sections: Open TODOs" in prompt_text(requests[-1])


def test_openclaw_fails_closed_after_one_retry(fake: FakeProvider) -> None:
    fake.reply(PI_REPLY, times=2)  # no openclaw sections, twice
    summary = LLMSummarizer(anthropic(fake), style="openclaw", window_tokens=100_000).summarize(
        span(), budget_tokens=1_000, counter=COUNTER)
    assert len(fake.requests) == 2  # one retry, no loop
    assert summary.summarizer == "extractive"
    assert "missing sections" in summary.details["fallback"]["reason"]


def test_output_over_the_budget_is_trimmed_to_it(fake: FakeProvider) -> None:
    fake.reply(PI_REPLY.replace("- Keep the public API.", "\n".join(f"- constraint {i}" for i in range(60))))
    summary = LLMSummarizer(anthropic(fake), window_tokens=100_000).summarize(
        span(), budget_tokens=300, counter=COUNTER)
    assert summary.tokens <= 300 and summary.details["trimmed_to_budget"]
    assert summary.text.startswith("## Goal\n- Add retries to the client.")


# --------------------------------------------------------------------------------------------------
# Failures


def test_a_server_error_falls_back_to_the_extractive_summary(fake: FakeProvider) -> None:
    fake.fail(500, {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}})
    messages = span()
    summary = LLMSummarizer(anthropic(fake), window_tokens=100_000).summarize(
        messages, budget_tokens=800, counter=COUNTER)
    assert summary.summarizer == "extractive" and "## Goal\n- Add retries" in summary.text
    assert summary.covered_ids == tuple(m.id for m in messages)  # nothing evicted goes unread
    record = summary.details["fallback"]
    assert record["from"] == "llm:pi" and "500" in record["reason"] and record["calls"] == 1


@pytest.mark.parametrize(("script", "reason"), [
    ("empty", "empty output"),
    ("malformed", "malformed output"),  # the fake's own summary has none of Pi's sections
])
def test_unusable_output_falls_back(fake: FakeProvider, script: str, reason: str) -> None:
    if script == "empty":
        fake.reply("")
    summary = LLMSummarizer(anthropic(fake), window_tokens=100_000).summarize(
        span(), budget_tokens=800, counter=COUNTER)
    assert summary.summarizer == "extractive" and reason in summary.details["fallback"]["reason"]


def test_a_real_overflow_error_falls_back() -> None:
    with FakeProvider(context_window=1_500) as fake:  # smaller than the summarizer believes
        summary = LLMSummarizer(anthropic(fake), window_tokens=100_000).summarize(
            long_span(10), budget_tokens=400, counter=COUNTER)
        (request,) = fake.requests
    assert request.status == 400
    assert "ProviderError" in summary.details["fallback"]["reason"]
    assert "prompt is too long" in summary.details["fallback"]["reason"]


def test_a_window_too_small_for_any_chunk_falls_back_without_calling(fake: FakeProvider) -> None:
    summary = LLMSummarizer(anthropic(fake), window_tokens=2_000).summarize(
        span(), budget_tokens=800, counter=COUNTER)
    assert fake.requests == [] and "leaves" in summary.details["fallback"]["reason"]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A server that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join(timeout=2)
    for conn in held:
        conn.close()
    listener.close()


def test_the_timeout_bounds_the_whole_summary(silent_server: str) -> None:
    # The client alone would wait 600 s for the silent server; the summarizer's own 0.5 s must end it.
    client = AnthropicClient(silent_server, "test-key", "claude-test", timeout=600)
    summarizer = LLMSummarizer(client, window_tokens=100_000, timeout=0.5)
    summary = within(HANG_GUARD_S, summarizer.summarize, span(), budget_tokens=800, counter=COUNTER)
    assert summary.summarizer == "extractive"
    assert re.search(r"Timeout|timed out", summary.details["fallback"]["reason"])


def test_the_circuit_breaker_stops_calling_after_three_failures(fake: FakeProvider) -> None:
    summarizer = LLMSummarizer(anthropic(fake), window_tokens=100_000)
    fake.fail(503, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, times=3)
    for attempt in range(1, 4):
        summary = summarizer.summarize(span(), budget_tokens=800, counter=COUNTER)
        assert summary.details["fallback"]["consecutive_failures"] == attempt
    assert summarizer.breaker_open and len(fake.requests) == 3
    blocked = summarizer.summarize(span(), budget_tokens=800, counter=COUNTER)
    assert len(fake.requests) == 3  # the model was not called
    assert "circuit breaker open" in blocked.details["fallback"]["reason"]
    assert blocked.details["fallback"]["calls"] == 0 and blocked.summarizer == "extractive"
    summarizer.reset()
    fake.reply(PI_REPLY)
    assert summarizer.summarize(span(), budget_tokens=800, counter=COUNTER).summarizer == "llm:pi"
    assert summarizer.consecutive_failures == 0 and len(fake.requests) == 4


def test_a_success_resets_the_failure_count(fake: FakeProvider) -> None:
    summarizer = LLMSummarizer(anthropic(fake), window_tokens=100_000)
    fake.fail(500, {"type": "error", "error": {"type": "api_error", "message": "boom"}}, times=2)
    fake.reply(PI_REPLY)
    for _ in range(3):
        summarizer.summarize(span(), budget_tokens=800, counter=COUNTER)
    assert summarizer.consecutive_failures == 0


def test_without_a_fallback_a_failure_raises(fake: FakeProvider) -> None:
    fake.fail(500, {"type": "error", "error": {"type": "api_error", "message": "boom"}})
    summarizer = LLMSummarizer(anthropic(fake), window_tokens=100_000, fallback=None)
    with pytest.raises(SummaryFailed, match="llm:pi summary failed") as raised:
        summarizer.summarize(span(), budget_tokens=800, counter=COUNTER)
    assert "history is unchanged" in str(raised.value)
    assert summarizer.consecutive_failures == 1


def test_an_unknown_style_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown summary style"):
        LLMSummarizer(object(), style="gpt", window_tokens=1_000)
