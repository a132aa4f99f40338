"""The output reserve follows each request: `prepare(max_output=N)` budgets for an answer of N tokens
(a request's `max_tokens` / `max_output_tokens`), larger or smaller than the engine's default, and the
same log, policy, clock and per-request max_output give the same bytes."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwin.engine import ContextEngine
from ctxwin.errors import CtxwinError, InputError
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.store.in_memory import MemorySessionLog

NOW = 1_700_000_000.0


def clock() -> float:
    return NOW


def rounds(engine: ContextEngine, count: int, lines: int, start: int = 0) -> None:
    for n in range(start, start + count):
        engine.append(Message("assistant", (Text(f"step {n}"), ToolCall(f"c{n}", "bash", {"command": f"cat f{n}"}))))
        engine.append(Message("tool", (ToolResult(f"c{n}", (Text(f"{n}: line of output\n" * lines),), name="bash"),)))


def test_a_small_window_with_a_large_registry_output_limit_is_not_refused() -> None:
    # gpt-4.1: 32,768 output tokens in the registry; with window=16,000 the default reserve (20,000 + the
    # margin) used to refuse every request before any was made.
    engine = ContextEngine(model="gpt-4.1", policy="ctxwin", window=16_000)
    assert engine.max_output == 4_000 and engine.reserve < engine.window // 2  # a quarter of the window
    engine.append(Message("user", (Text("hello"),)))
    prepared = engine.prepare(max_output=1_000)
    policy = engine.policy
    assert prepared.budget == 16_000 - (1_000 + policy.safety_margin_tokens)
    assert engine.budget == 16_000 - engine.reserve  # the default is unchanged by one request's limit


def test_an_explicit_output_limit_that_leaves_no_room_is_still_refused() -> None:
    with pytest.raises(CtxwinError, match="not larger than the reserve"):
        ContextEngine(model="gpt-4.1", policy="ctxwin", window=16_000, max_output=32_768)


@pytest.mark.parametrize("bad", [0, -5, 1.5e400, "1000", True])
def test_a_bad_max_output_is_an_input_error(bad) -> None:
    engine = ContextEngine(model="gpt-4o", policy="ctxwin")
    with pytest.raises(InputError, match="max_output"):
        engine.prepare(max_output=bad)


def test_a_larger_answer_rebudgets_the_request_and_a_smaller_one_gives_the_room_back() -> None:
    # Pi's policy compacts only near the window (window - 16,384), so the answer's size decides.
    engine = ContextEngine(model="claude-sonnet-4-5", policy="pi", window=60_000, clock=clock)
    engine.append(Message("user", (Text("Map the repository; ticket PAR-4471."),)))
    rounds(engine, 16, 300)  # about 43K tokens
    small = engine.prepare(max_output=1_000)
    large = engine.prepare(max_output=20_000)
    assert large.budget == small.budget - (engine.policy.reserve(20_000) - engine.policy.reserve(1_000))
    assert small.tokens <= small.budget and large.tokens <= large.budget
    assert small.tokens > large.budget  # the larger answer did not fit the view as it was ...
    assert any(e.breaks_prefix for e in large.events)  # ... so it was compacted (or fitted) to make room
    again = engine.prepare(max_output=1_000)
    assert again.budget == small.budget and again.tokens <= again.budget


def payloads(log: MemorySessionLog, plan: list[tuple[int, int | None]], start: int = 0) -> list[str]:
    engine = ContextEngine(log, model="claude-sonnet-4-5", policy="ctxwin", window=30_000, clock=clock)
    out = []
    for n, (lines, max_output) in enumerate(plan):
        rounds(engine, 1, lines, start + n)
        prepared = engine.prepare(max_output=max_output)
        assert prepared.tokens <= prepared.budget
        out.append(json.dumps([prepared.to_anthropic(), prepared.budget], sort_keys=True))
    return out


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(st.tuples(st.sampled_from([5, 60, 400]), st.sampled_from([None, 500, 4_000, 12_000])),
                     min_size=2, max_size=14), resume_at=st.integers(0, 13))
def test_the_same_log_and_per_request_limits_give_the_same_bytes(plan, resume_at: int) -> None:
    """Two runs of the same calls send the same bytes; so does a run that stops and resumes from the log
    (the per-request limit is not remembered between requests: each budgets from its own)."""
    first = payloads(MemorySessionLog(clock=clock), plan)
    assert payloads(MemorySessionLog(clock=clock), plan) == first
    resume_at = min(resume_at, len(plan) - 1)
    log = MemorySessionLog(clock=clock)
    resumed = payloads(log, plan[:resume_at]) + payloads(log, plan[resume_at:], start=resume_at)
    assert resumed == first
