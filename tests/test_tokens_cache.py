"""The per-message token cache: a second count of a session does no tokenizer work."""

from __future__ import annotations

import pytest

from conftest import shared_path
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.tokens import CachedCounter, CalibratedCounter, Calibrator, EstimatorCounter, TiktokenCounter, TokenCounter
from ctxwin.transcripts import load_transcript


class Recording:
    """A real counter that records every call it gets (the cache must make it idle)."""

    def __init__(self, inner: TokenCounter) -> None:
        self.inner = inner
        self.name = inner.name
        self.exact = inner.exact
        self.texts: list[str] = []
        self.messages: list[Message] = []

    def count_text(self, text: str) -> int:
        self.texts.append(text)
        return self.inner.count_text(text)

    def count_message(self, message: Message) -> int:
        self.messages.append(message)
        return self.inner.count_message(message)


def _conversation(n: int) -> list[Message]:
    out = []
    for i in range(n):
        out.append(Message("user", (Text(f"step {i}: read the file and run the tests"),), id=f"u{i}"))
        out.append(Message("assistant", (ToolCall(f"c{i}", "Bash", {"command": f"pytest -q tests/test_{i}.py"}),),
                           id=f"a{i}"))
        out.append(Message("tool", (ToolResult(f"c{i}", (Text(f"{i} passed in 0.{i}s\n" * 20),)),), id=f"t{i}"))
    return out


@pytest.mark.parametrize("inner", [EstimatorCounter("claude"), TiktokenCounter("o200k_base")], ids=lambda c: c.name)
def test_second_count_of_a_session_does_no_tokenizer_work(inner: TokenCounter) -> None:
    transcript = load_transcript(shared_path("claude-code", "tool_heavy.jsonl"))
    recording = Recording(inner)
    cache = CachedCounter(recording)
    first = [cache.count_message(m) for m in transcript.messages]
    distinct = len({m.content_key for m in transcript.messages})
    assert cache.misses == distinct and len(recording.messages) == distinct
    calls = len(recording.messages)
    second = [cache.count_message(m) for m in transcript.messages]
    assert second == first
    assert len(recording.messages) == calls and recording.texts == []  # the tokenizer was not called at all
    assert cache.misses == distinct and cache.hits == len(transcript.messages) * 2 - distinct
    assert first == [inner.count_message(m) for m in transcript.messages]  # the cache changes no count


def test_appending_a_message_costs_only_that_message() -> None:
    messages = _conversation(30)
    recording = Recording(EstimatorCounter())
    cache = CachedCounter(recording)
    total = sum(cache.count_message(m) for m in messages)
    new = Message("user", (Text("now fix the failing one"),), id="u-new")
    before = len(recording.messages)
    assert sum(cache.count_message(m) for m in [*messages, new]) == total + cache.inner.inner.count_message(new)
    assert recording.messages[before:] == [new]


def test_content_not_id_is_the_key() -> None:
    cache = CachedCounter(Recording(EstimatorCounter()))
    a = Message("user", (Text("same words"),), id="one", meta={"timestamp": 1})
    b = Message("user", (Text("same words"),), id="two", meta={"timestamp": 2})
    c = Message("assistant", (Text("same words"),), id="three")
    cache.count_message(a)
    cache.count_message(b)
    cache.count_message(c)
    assert (cache.hits, cache.misses) == (1, 2)


def test_texts_are_cached_too() -> None:
    recording = Recording(EstimatorCounter())
    cache = CachedCounter(recording, max_texts=2)
    system = "You are a careful coding agent. " * 500
    assert cache.count_text(system) == cache.count_text(system) == cache.count_text(system[:100] + system[100:])
    assert recording.texts == [system] and (cache.hits, cache.misses) == (2, 1)
    cache.count_text("a")
    cache.count_text("b")  # evicts the least recently used: the system prompt
    cache.count_text(system)
    assert len(recording.texts) == 4


def test_text_cache_is_bounded_in_characters() -> None:
    cache = CachedCounter(EstimatorCounter(), max_text_chars=1_000)
    for i in range(50):
        cache.count_text(f"{i:03d}" + "x" * 97)
    assert len(cache) == 10  # 10 texts of 100 characters


def test_calibration_outside_the_cache_does_not_go_stale() -> None:
    calibrator = Calibrator()
    cache = CachedCounter(EstimatorCounter())
    counter = CalibratedCounter(cache, calibrator)
    message = _conversation(1)[2]
    raw = counter.count_message(message)
    calibrator.set_factor(1.5)
    assert counter.count_message(message) == round(cache.count_message(message) * 1.5)
    assert cache.misses == 1 and raw == cache.count_message(message)
