"""OpenTelemetry spans, read back from the SDK's in-memory exporter: names, parent/child structure and
attributes checked against what the engine, the agent loop and the proxy record themselves; the
engine's observer hook; telemetry off unless configured; `CTXWIN_OTEL=1` exporting over real OTLP/HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("opentelemetry.sdk", reason="the telemetry extra is not installed")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_fake import ScriptedFake, Turn, make_workspace
from ctxwin import policies, telemetry
from ctxwin.agent import AgentConfig, HttpModel, LoopEvent, create_agent
from ctxwin.agent.events import loop_event
from ctxwin.agent.subagents import FORK_TAG, SubagentLimits, SubAgents
from ctxwin.engine import ContextEngine
from ctxwin.engine.observe import Observation
from ctxwin.errors import CtxwinError, TelemetryError
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.providers import client_for
from ctxwin.providers.anthropic import AnthropicClient
from ctxwin.providers.base import ProviderError
from ctxwin.store.entries import ProxyRequestEntry
from ctxwin.telemetry import attributes as a
from ctxwin.telemetry.config import build_provider, configured_provider
from ctxwin.testing.fake_provider import FakeProvider
from ctxwin.tools import Workspace

MODEL = "claude-sonnet-4-5"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracer_provider
    tracer_provider.shutdown()


@pytest.fixture(autouse=True)
def _no_env_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(telemetry.ENABLE, raising=False)


def fill(engine: ContextEngine, rounds: int, size: int = 600) -> None:
    engine.append(Message("user", (Text("Refactor the parser; ticket PAR-4471."),)))
    for n in range(rounds):
        engine.append(Message("assistant", (Text(f"step {n}"), ToolCall(f"c{n}", "bash", {"command": f"cat f{n}"}))))
        engine.append(Message("tool", (ToolResult(f"c{n}", (Text(f"line {n}\n" * size),), name="bash"),)))
    engine.append(Message("user", (Text("Now summarize what you found."),)))


def busy_engine() -> ContextEngine:
    """A session whose next request needs spill (one huge output), mask, compaction and repair (a call
    left unanswered)."""
    engine = ContextEngine(model=MODEL, policy="ctxwin", window=30_000, max_output=1_000)
    fill(engine, 40)
    engine.append(Message("assistant", (Text("big"), ToolCall("big", "bash", {"command": "cat big"}))))
    huge = "".join(f"row {i} value {i * 7}\n" for i in range(20_000))
    engine.append(Message("tool", (ToolResult("big", (Text(huge),), name="bash"),)))
    engine.append(Message("assistant", (Text("dangling"), ToolCall("dang", "bash", {"command": "ls"}))))
    engine.append(Message("user", (Text("go on"),)))
    return engine


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def children(spans: tuple[ReadableSpan, ...], parent: ReadableSpan) -> list[ReadableSpan]:
    return sorted((s for s in spans if parent_id(s) == parent.context.span_id), key=lambda s: s.start_time or 0)


# ------------------------------------------------------------------------------------------------
# The engine's own record (the hook is general: these hold without telemetry)


def test_prepared_stages_are_timed_and_carry_their_events_and_tokens() -> None:
    engine = busy_engine()
    prepared = engine.prepare()
    assert [run.stage for run in prepared.stages] == ["spill", "mask", "compaction", "repair"]
    # Every event of the request that a stage emitted is in exactly one stage run, in order.
    assert [e for run in prepared.stages for e in run.events] == prepared.events
    for run, after in zip(prepared.stages, prepared.stages[1:], strict=False):
        assert run.started_ns <= run.ended_ns <= after.started_ns
    # View stages count the whole request; each starts where the one before it ended.
    mask, compaction, repair = prepared.stages[1:]
    assert mask.tokens_after == compaction.tokens_before and compaction.tokens_after == repair.tokens_before
    assert repair.tokens_after == prepared.raw_tokens
    assert compaction.tokens_after == compaction.events[0].tokens_after
    assert mask.tokens_after < mask.tokens_before
    # A request with nothing to do has no stage runs, and runs are not carried into the next request.
    assert engine.prepare().stages == []


STAGES = {"result_budget", "spill", "dedup", "mask", "prune", "turns", "compaction", "fit", "repair"}


@settings(max_examples=12, deadline=None)
@given(preset=st.sampled_from(["ctxwin", "pi", "openclaw", "claude-code", "letta"]),
       rounds=st.integers(0, 30), size=st.integers(1, 900), turns=st.integers(1, 3),
       dangling=st.booleans())
def test_every_stage_event_is_in_exactly_one_run_of_that_stage(preset: str, rounds: int, size: int, turns: int,
                                                                dangling: bool) -> None:
    engine = ContextEngine(model=MODEL, policy=preset, window=30_000, max_output=1_000)
    for turn in range(turns):
        fill(engine, rounds, size)
        if dangling:
            engine.append(Message("assistant", (Text("x"), ToolCall(f"d{turn}", "bash", {"command": "ls"}))))
            engine.append(Message("user", (Text("next"),)))
        prepared = engine.prepare()
        held = [id(e) for run in prepared.stages for e in run.events]
        assert len(held) == len(set(held))
        for run in prepared.stages:
            assert run.events and all(e.stage == run.stage for e in run.events)
            assert run.started_ns <= run.ended_ns
        for event in prepared.events:
            in_stage = event.stage in STAGES and event.action != "checkpoint_request"
            assert (id(event) in held) == in_stage, event
        engine.append(Message("assistant", (Text(f"answer {turn}"),)))

def test_a_repair_that_fits_again_is_listed_before_the_fit_it_ran(provider: TracerProvider,
                                                                     exporter: InMemorySpanExporter) -> None:
    """Unanswered calls get synthetic results, which push the request over: repair runs fit inside
    its own run. The runs are in the order they started, so the repair span encloses that fit's."""
    policy = policies.get("pi")
    policy = policy.model_copy(update={"compaction": policy.compaction.model_copy(update={"enabled": False})})
    engine = ContextEngine(model="gpt-4o", policy=policy, window=3_000, max_output=500)
    engine.append(Message("user", (Text("go"),)))
    for n in range(20):
        engine.append(Message("assistant", tuple(ToolCall(f"c{n}_{k}", "bash", {"command": "x" * 200})
                                                 for k in range(3))))
        engine.append(Message("tool", (ToolResult(f"c{n}_0", (Text("out " * 100),)),)))
    engine.append(Message("user", (Text("next"),)))
    telemetry.instrument(engine, provider)
    prepared = engine.prepare()
    assert [run.stage for run in prepared.stages] == ["fit", "repair", "fit"]
    assert [run.started_ns for run in prepared.stages] == sorted(run.started_ns for run in prepared.stages)
    _, repair, inner = prepared.stages
    assert repair.started_ns <= inner.started_ns <= inner.ended_ns <= repair.ended_ns
    [root] = by_name(exporter.get_finished_spans(), a.PREPARE)
    assert [s.name for s in children(exporter.get_finished_spans(), root)] == [
        "ctxwin.fit", "ctxwin.repair", "ctxwin.fit"]


def test_observers_see_every_call_and_one_that_raises_never_breaks_prepare() -> None:
    seen: list[Observation] = []

    def broken(observation: Observation) -> None:
        raise RuntimeError("exporter down")

    reference, engine = busy_engine(), busy_engine()
    engine.observers.extend([broken, seen.append])
    expected = reference.prepare()
    prepared = engine.prepare()
    assert json.dumps(prepared.to_anthropic()) == json.dumps(expected.to_anthropic())
    assert [o.operation for o in seen] == ["prepare"] and seen[0].prepared is prepared
    assert seen[0].started_ns <= prepared.stages[0].started_ns <= prepared.stages[-1].ended_ns <= seen[0].ended_ns
    # The failure is reported once, on the next request, not on every one after it.
    engine.append(Message("assistant", (Text("ok"),)))
    engine.append(Message("user", (Text("more"),)))
    failed = [e for e in engine.prepare().events if e.action == "observer_failed"]
    assert len(failed) == 1 and "RuntimeError: exporter down" in failed[0].reason
    assert not [e for e in engine.prepare().events if e.action == "observer_failed"]
    assert len(seen) == 3  # the observer after the broken one was still told every time


def test_an_observer_failing_with_a_new_message_each_time_is_reported_once() -> None:
    """The message names the request, so it differs every time: still one report, and the engine
    remembers one failure, not one per request."""
    engine = ContextEngine(window=50_000, max_output=1_000)
    calls = [0]

    def failing(observation: Observation) -> None:
        calls[0] += 1
        raise ValueError(f"request {calls[0]} failed")

    engine.observers.append(failing)
    reported = []
    for n in range(6):
        engine.append(Message("user", (Text(f"hi {n}"),)))
        reported.append(sum(e.action == "observer_failed" for e in engine.prepare().events))
        engine.append(Message("assistant", (Text("ok"),)))
    assert reported == [0, 1, 0, 0, 0, 0] and calls[0] == 6
    assert len(engine._observer_failures) == 1

    def other(observation: Observation) -> None:
        raise KeyError("x")  # another kind of error is news

    engine.observers.append(other)
    engine.prepare()
    assert [e.details["error"] for e in engine.prepare().events if e.action == "observer_failed"] == ["KeyError"]


def test_observers_see_a_call_that_raised() -> None:
    engine = ContextEngine(model="gpt-4o", policy="ctxwin")
    fill(engine, rounds=1)
    seen: list[Observation] = []
    engine.observers.append(seen.append)
    with pytest.raises(CtxwinError, match="not a context overflow"):
        engine.recover(ProviderError(429, {"error": {"type": "rate_limit_error", "message": "Rate limited"}},
                                     "Rate limited", "anthropic"))
    assert [(o.operation, o.prepared, type(o.error)) for o in seen] == [("recover", None, CtxwinError)]


# ------------------------------------------------------------------------------------------------
# Engine spans


def test_prepare_span_has_one_child_per_stage_that_acted(provider: TracerProvider,
                                                         exporter: InMemorySpanExporter) -> None:
    engine = busy_engine()
    assert telemetry.instrument(engine, provider).active
    prepared = engine.prepare()
    spans = exporter.get_finished_spans()
    [root] = by_name(spans, a.PREPARE)
    assert root.parent is None
    kids = children(spans, root)
    assert [s.name for s in kids] == ["ctxwin.spill", "ctxwin.mask", "ctxwin.compaction", "ctxwin.repair"]
    assert len(spans) == 1 + len(kids)
    session = engine.session.session_id
    attributes = root.attributes or {}
    assert attributes["gen_ai.conversation.id"] == attributes["session.id"] == session
    assert attributes["gen_ai.request.model"] == MODEL and attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["openinference.span.kind"] == "CHAIN"
    assert (attributes["ctxwin.request.tokens"], attributes["ctxwin.request.raw_tokens"],
            attributes["ctxwin.request.budget"], attributes["ctxwin.request.window"],
            attributes["ctxwin.request.messages"], attributes["ctxwin.request.stable_prefix_tokens"]) == (
        prepared.tokens, prepared.raw_tokens, prepared.budget, prepared.window, len(prepared.items),
        prepared.stable_prefix_tokens)
    assert list(attributes["ctxwin.stages"]) == ["spill", "mask", "compaction", "repair"]
    for span, run in zip(kids, prepared.stages, strict=True):
        got = span.attributes or {}
        assert (span.start_time, span.end_time) == (run.started_ns, run.ended_ns)
        assert (got["ctxwin.stage"], got["ctxwin.tokens.before"], got["ctxwin.tokens.after"],
                got["ctxwin.tokens.saved"]) == (run.stage, run.tokens_before, run.tokens_after,
                                                run.tokens_before - run.tokens_after)
        assert list(got["ctxwin.stage.actions"]) == sorted({e.action for e in run.events})
        assert got["ctxwin.stage.entries"] == len({i for e in run.events for i in e.entry_ids})
        assert got["session.id"] == session
        assert [e.name for e in span.events] == [f"{e.stage}.{e.action}" for e in run.events]
        assert [dict(e.attributes or {})["ctxwin.reason"] for e in span.events] == [e.reason for e in run.events]
        assert root.start_time <= span.start_time <= span.end_time <= root.end_time  # type: ignore[operator]
    compaction = prepared.stages[2].events[0]
    got = kids[2].attributes or {}
    assert (got["ctxwin.compaction.strategy"], got["ctxwin.compaction.trigger"],
            got["ctxwin.compaction.entries_summarized"], got["ctxwin.compaction.tokens_before"],
            got["ctxwin.compaction.tokens_after"]) == (
        "ctxwin", compaction.details["trigger"], len(compaction.entry_ids), compaction.tokens_before,
        compaction.tokens_after)
    assert len(compaction.entry_ids) > 40


def test_stage_spans_of_a_policy_that_caps_prunes_and_fits(provider: TracerProvider,
                                                           exporter: InMemorySpanExporter) -> None:
    policy = policies.get("openclaw")
    policy = policy.model_copy(update={"compaction": policy.compaction.model_copy(update={"enabled": False})})
    engine = ContextEngine(model=MODEL, policy=policy, window=30_000, max_output=1_000)
    fill(engine, 40, size=3_000)
    telemetry.instrument(engine, provider)
    prepared = engine.prepare()
    spans = exporter.get_finished_spans()
    [root] = by_name(spans, a.PREPARE)
    kids = children(spans, root)
    assert [s.name for s in kids] == ["ctxwin.result_budget", "ctxwin.prune", "ctxwin.fit"]
    budget, prune, fit = (dict(s.attributes or {}) for s in kids)
    # result_budget counts the new messages it capped, one event per capped result.
    capped = prepared.stages[0].events
    assert budget["ctxwin.stage.events"] == len(capped) == budget["ctxwin.stage.entries"] > 1
    assert budget["ctxwin.tokens.before"] - budget["ctxwin.tokens.after"] == sum(e.saved for e in capped)
    assert list(prune["ctxwin.stage.actions"]) == ["hard_clear", "soft_trim"] and prune["ctxwin.stage.breaks_prefix"]
    assert list(fit["ctxwin.stage.actions"]) == ["drop_rounds"]
    assert fit["ctxwin.tokens.before"] == prune["ctxwin.tokens.after"] > fit["ctxwin.tokens.after"]
    assert fit["ctxwin.tokens.after"] == prepared.raw_tokens
    assert prepared.tokens <= prepared.budget

def test_manual_compaction_span(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    engine = ContextEngine(model=MODEL, policy="pi", window=200_000, max_output=1_000)
    fill(engine, rounds=12)
    telemetry.instrument(engine, provider)
    prepared = engine.compact(focus="the parser")
    spans = exporter.get_finished_spans()
    [root] = by_name(spans, a.COMPACT)
    [stage] = children(spans, root)
    [event] = [e for e in prepared.events if e.stage == "compaction"]
    got = stage.attributes or {}
    assert stage.name == "ctxwin.compaction" and got["ctxwin.compaction.strategy"] == "pi"
    assert got["ctxwin.compaction.trigger"] == "manual"
    assert got["ctxwin.compaction.entries_summarized"] == len(event.entry_ids) > 0
    assert (got["ctxwin.tokens.before"], got["ctxwin.tokens.after"]) == (
        prepared.stages[0].tokens_before, prepared.stages[0].tokens_after)
    assert got["ctxwin.tokens.after"] == prepared.raw_tokens < got["ctxwin.tokens.before"]
    assert not by_name(spans, a.PREPARE)  # the request compact() builds is part of its own span


def test_recovery_span_from_a_real_overflow_error(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    with FakeProvider(context_window=30_000, max_output=1_000) as server:
        client = AnthropicClient(server.anthropic_base_url, api_key="test", model=MODEL)
        engine = ContextEngine(model=MODEL, policy="pi", window=200_000, max_output=1_000)
        fill(engine, rounds=40)
        telemetry.instrument(engine, provider)
        request = engine.prepare()
        with pytest.raises(ProviderError) as caught:
            client.complete(request.messages, system=request.system or None, max_tokens=1_000)
        prepared = engine.recover(caught.value)
    spans = exporter.get_finished_spans()
    [root] = by_name(spans, a.RECOVER)
    got = root.attributes or {}
    assert got["ctxwin.recovery.provider"] == "anthropic"
    assert got["ctxwin.recovery.limit_tokens"] == 30_000 == engine.window == got["ctxwin.recovery.window"]
    assert got["ctxwin.recovery.observed_tokens"] > 30_000
    assert got["ctxwin.recovery.budget"] == prepared.budget == engine.budget
    assert got["ctxwin.request.tokens"] == prepared.tokens <= prepared.budget
    assert [e.name for e in root.events] == ["recovery.overflow"]
    [stage] = children(spans, root)
    assert stage.name == "ctxwin.compaction" and (stage.attributes or {})["ctxwin.compaction.trigger"] == "overflow"
    assert len(by_name(spans, a.PREPARE)) == 1  # the request that overflowed


def test_a_call_that_raises_is_an_error_span(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    engine = ContextEngine(model="gpt-4o", policy="ctxwin")
    fill(engine, rounds=1)
    telemetry.instrument(engine, provider)
    with pytest.raises(CtxwinError):
        engine.recover(ProviderError(429, {"error": {"type": "rate_limit_error", "message": "Rate limited"}},
                                     "Rate limited", "anthropic"))
    [span] = exporter.get_finished_spans()
    assert span.name == a.RECOVER and span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "CtxwinError"
    assert [e.name for e in span.events] == ["exception"]


def test_nothing_is_recorded_unless_configured(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        pytest.skip("a test before this one installed a global tracer provider (the subprocess test covers off)")
    engine = busy_engine()
    engine.prepare()
    assert exporter.get_finished_spans() == ()
    assert configured_provider() is None  # no provider given, no CTXWIN_OTEL, no global provider
    off = telemetry.instrument(engine)
    assert not off.active and engine.observers == []
    on = telemetry.instrument(engine, provider)
    on.uninstrument()
    engine.compact()
    assert engine.observers == [] and exporter.get_finished_spans() == ()
    events: list[LoopEvent] = []
    assert telemetry.agent_event_sink(then=events.append) == events.append
    with telemetry.proxy_request_span(api="anthropic") as span:
        span.record(ProxyRequestEntry("anthropic", MODEL, 200, 10, 5, 0.0))
    assert exporter.get_finished_spans() == ()


def test_off_means_opentelemetry_is_not_even_imported() -> None:
    code = """
import sys
from ctxwin import policies, telemetry
from ctxwin.engine import ContextEngine
from ctxwin.messages import Message, Text
from ctxwin.store.entries import ProxyRequestEntry
engine = ContextEngine(model="gpt-4o")
assert not telemetry.instrument(engine).active
engine.append(Message("user", (Text("hi"),)))
engine.prepare()
with telemetry.proxy_request_span(api="openai-chat", model="gpt-4o") as span:
    span.record(ProxyRequestEntry("openai-chat", "gpt-4o", 200, 10, 5, 0.0))
telemetry.agent_event_sink()(None)
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXWIN_OTEL", "OTEL_"))}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stderr


# ------------------------------------------------------------------------------------------------
# Proxy requests


def test_proxy_request_span_carries_the_request_record(provider: TracerProvider,
                                                       exporter: InMemorySpanExporter) -> None:
    engine = ContextEngine(model=MODEL, policy="ctxwin")
    telemetry.instrument(engine, provider)
    entry = ProxyRequestEntry("anthropic", MODEL, 200, tokens_received=52_000, tokens_forwarded=21_000,
                              cache_prefix_reuse=0.87, compactions=1, streamed=True, input_tokens=1_200,
                              output_tokens=340, cache_read_tokens=18_000, cache_write_tokens=2_100,
                              added_ms=4.5, upstream_ms=812.0)
    with telemetry.proxy_request_span(api="anthropic", model=MODEL, tracer_provider=provider) as span:
        engine.append(Message("user", (Text("hello"),)))
        engine.prepare()
        span.record(entry, session_id="sess-1")
    spans = exporter.get_finished_spans()
    [request] = by_name(spans, f"chat {MODEL}")  # the GenAI conventions' name of a model call
    [prepare] = by_name(spans, a.PREPARE)
    assert parent_id(prepare) == request.context.span_id and request.parent is None
    got = dict(request.attributes or {})
    assert got == {
        "openinference.span.kind": "LLM", "gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": MODEL, "llm.model_name": MODEL, "llm.provider": "anthropic",
        "ctxwin.proxy.api": "anthropic", "gen_ai.conversation.id": "sess-1", "session.id": "sess-1",
        "http.response.status_code": 200, "ctxwin.proxy.tokens_received": 52_000,
        "ctxwin.proxy.tokens_forwarded": 21_000, "ctxwin.proxy.tokens_saved": 31_000,
        "ctxwin.proxy.cache_prefix_reuse": 0.87, "ctxwin.proxy.compactions": 1, "ctxwin.proxy.recoveries": 0,
        "ctxwin.proxy.recall_calls": 0, "ctxwin.proxy.invalid_forwarded": False, "ctxwin.proxy.streamed": True,
        "ctxwin.proxy.added_ms": 4.5, "ctxwin.proxy.upstream_ms": 812.0,
        # Both conventions count cached tokens as input: 1,200 fresh + 18,000 read + 2,100 written.
        "gen_ai.usage.input_tokens": 21_300, "gen_ai.usage.output_tokens": 340,
        "gen_ai.usage.cache_read.input_tokens": 18_000, "gen_ai.usage.cache_creation.input_tokens": 2_100,
        "llm.token_count.prompt": 21_300, "llm.token_count.completion": 340, "llm.token_count.total": 21_640,
        "llm.token_count.prompt_details.cache_read": 18_000, "llm.token_count.prompt_details.cache_write": 2_100,
    }
    assert request.status.status_code is StatusCode.UNSET


def test_proxy_request_span_failures(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    with telemetry.proxy_request_span(api="openai-chat", tracer_provider=provider) as span:
        span.record(ProxyRequestEntry("openai-chat", "gpt-4o", 502, 100, 100, 0.0))
    with pytest.raises(ValueError), telemetry.proxy_request_span(api="openai-responses", tracer_provider=provider):
        raise ValueError("upstream body unreadable")
    upstream, crashed = exporter.get_finished_spans()
    assert upstream.status.status_code is StatusCode.ERROR and (upstream.attributes or {})["error.type"] == "502"
    assert (upstream.attributes or {})["gen_ai.provider.name"] == "openai"
    assert "gen_ai.usage.input_tokens" not in (upstream.attributes or {})  # no usage reported: none claimed
    assert crashed.status.status_code is StatusCode.ERROR and [e.name for e in crashed.events] == ["exception"]


# ------------------------------------------------------------------------------------------------
# Agent runs and sub-agents


def test_agent_run_with_subagents_isolated_parallel_and_fork(tmp_path: Path, provider: TracerProvider,
                                                             exporter: InMemorySpanExporter) -> None:
    root = make_workspace(tmp_path / "ws", files=4, lines=20)
    plan = [
        Turn(text="One task.", calls=[("t1", "task", {"task": "count the lines of docs/f001.txt"})]),
        Turn(text="Two at once.", calls=[("t2", "task", {"tasks": ["alpha job", "beta job"], "mode": "parallel"})]),
        Turn(text="Fork and read.", calls=[("t3", "task", {"task": "side check", "context": "fork"}),
                                           ("t4", "read", {"path": "docs/f001.txt"})]),
        Turn(text="All done."),
    ]

    def script(api: str, messages: list[Message]) -> Turn:
        if any(m.role == "user" and f"<{FORK_TAG}>" in m.text for m in messages):
            return Turn(text="fork done")
        first = next(m for m in messages if m.role == "user").text
        if first.startswith("Task: "):
            return Turn(text=f"answer to <{first[6:]}>")
        return plan[sum(1 for m in messages if m.role == "assistant")]

    events: list[LoopEvent] = []
    with ScriptedFake(script, context_window=32_000, max_output=1_000) as fake:
        model = HttpModel(client_for("anthropic", fake.anthropic_base_url, MODEL, api_key="k"))
        subagents = SubAgents()
        agent = create_agent(model, workspace=Workspace([root], model=MODEL), window=32_000, max_output=1_000,
                             config=AgentConfig(max_steps=10, max_tokens=1_000), extra_tools=[subagents.tool()],
                             on_event=events.append)
        subagents.attach(agent)
        telemetry.instrument_agent(agent, provider, agent_name="main", capture_content=True)
        result = agent.run("Turn 1: delegate.")
    assert result.stop == "done"
    spans = exporter.get_finished_spans()
    [run] = by_name(spans, a.AGENT_RUN)
    assert run.parent is None
    got = run.attributes or {}
    session = agent.engine.session.session_id
    assert (got["openinference.span.kind"], got["gen_ai.operation.name"], got["gen_ai.agent.name"],
            got["session.id"], got["gen_ai.conversation.id"], got["gen_ai.request.model"]) == (
        "AGENT", "invoke_agent", "main", session, session, MODEL)
    assert (got["ctxwin.run.stop"], got["ctxwin.run.steps"], got["ctxwin.run.model_calls"]) == ("done", 4, 4)
    assert got["gen_ai.usage.input_tokens"] == agent.stats.input_tokens > 0
    assert got["gen_ai.usage.output_tokens"] == agent.stats.output_tokens > 0
    # Every sub-agent is a child of the run, whichever thread it ran in.
    starts = [e.data for e in events if e.kind == "subagent" and e.data["action"] == "start"]
    subs = by_name(spans, a.SUBAGENT)
    assert len(subs) == len(starts) == 4
    assert {parent_id(s) for s in subs} == {run.context.span_id}
    described = sorted((str(s.attributes["ctxwin.subagent.context"]), str(s.attributes["ctxwin.subagent.task"]),  # type: ignore[index]
                        str(s.attributes["session.id"])) for s in subs)  # type: ignore[index]
    assert described == sorted((d["context"], d["task"], d["session"]) for d in starts)
    assert [c for c, _, _ in described].count("fork") == 1
    for sub in subs:
        attrs = sub.attributes or {}
        assert attrs["gen_ai.conversation.id"] == attrs["session.id"]
        assert attrs["ctxwin.subagent.parent_session"] == session
        assert (attrs["ctxwin.subagent.stop"], attrs["ctxwin.subagent.steps"], attrs["ctxwin.run.model_calls"]) == (
            "done", 1, 1)
        assert run.start_time < sub.start_time < sub.end_time < run.end_time  # type: ignore[operator]
    # The root engine's requests nest under the run; the model calls and tool calls are its events.
    prepares = by_name(spans, a.PREPARE)
    assert len(prepares) == 4 and {parent_id(p) for p in prepares} == {run.context.span_id}
    names = [e.name for e in run.events]
    assert names.count("ctxwin.model_call") == 4 and names.count("ctxwin.tool_call") == 4
    assert events[-1].kind == "done"  # the caller's own sink still got everything


def test_nested_subagents_are_children_of_the_agent_that_spawned_them(tmp_path: Path, provider: TracerProvider,
                                                                      exporter: InMemorySpanExporter) -> None:
    """Depth 2: the root delegates one task (run in the root's thread), whose child delegates two in
    parallel (pool threads with no span of their own): each grandchild is under the child."""
    root = make_workspace(tmp_path / "ws", files=2, lines=10)

    def script(api: str, messages: list[Message]) -> Turn:
        first = next(m for m in messages if m.role == "user").text
        answered = sum(1 for m in messages if m.role == "assistant")
        if first == "Task: outer job" and not answered:
            return Turn(text="Splitting.", calls=[("o1", "task", {"tasks": ["inner one", "inner two"],
                                                                  "mode": "parallel"})])
        if first.startswith("Task: "):
            return Turn(text=f"answer to <{first[6:]}>")
        return Turn(text="Delegating.", calls=[("r1", "task", {"task": "outer job"})]) if not answered else \
            Turn(text="All done.")

    with ScriptedFake(script, context_window=32_000, max_output=1_000) as fake:
        model = HttpModel(client_for("anthropic", fake.anthropic_base_url, MODEL, api_key="k"))
        subagents = SubAgents(limits=SubagentLimits(max_depth=2))
        agent = create_agent(model, workspace=Workspace([root], model=MODEL), window=32_000, max_output=1_000,
                             config=AgentConfig(max_steps=10, max_tokens=1_000), extra_tools=[subagents.tool()])
        subagents.attach(agent)
        telemetry.instrument_agent(agent, provider, capture_content=True)  # the tasks name the spans here
        assert agent.run("Turn 1: go").stop == "done"
    spans = exporter.get_finished_spans()
    [run] = by_name(spans, a.AGENT_RUN)
    by_task = {str((s.attributes or {})["ctxwin.subagent.task"]): s for s in by_name(spans, a.SUBAGENT)}
    assert sorted(by_task) == ["inner one", "inner two", "outer job"]
    outer = by_task["outer job"]
    assert parent_id(outer) == run.context.span_id
    for inner in (by_task["inner one"], by_task["inner two"]):
        assert parent_id(inner) == outer.context.span_id
        assert (inner.attributes or {})["ctxwin.subagent.parent_session"] == (outer.attributes or {})["session.id"]
        assert outer.start_time < inner.start_time < inner.end_time < outer.end_time  # type: ignore[operator]
    assert (outer.attributes or {})["ctxwin.run.model_calls"] == 2  # the child's own calls, not its children's

def test_a_run_that_never_ended_is_closed_as_failed_when_the_next_one_starts(
        provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    sink = telemetry.agent_event_sink(provider, session_id="s")
    sink(loop_event("user", 1, 0, **{"text": "first"}))
    sink(loop_event("model_call", 1, 1, **{"tokens": 120, "budget": 1000, "messages": 1}))
    sink(loop_event("subagent", 1, 1, **{"action": "start", "context": "isolated", "agent": "default",
                                      "session": "memory:child-1", "task": "t"}))
    # The run raised inside its sub-agent: no `end`, no `done`. The next run starts in the same thread.
    sink(loop_event("user", 2, 0, **{"text": "second"}))
    sink(loop_event("done", 2, 1, **{"text": "ok"}))
    finished = exporter.get_finished_spans()
    first, child, second = sorted((s for s in finished if s.name in (a.AGENT_RUN, a.SUBAGENT)),
                                  key=lambda s: s.start_time or 0)
    assert [first.name, child.name, second.name] == [a.AGENT_RUN, a.SUBAGENT, a.AGENT_RUN]
    [call] = by_name(finished, "chat")  # the model call in flight when the run raised (no model given)
    assert call.status.status_code is StatusCode.ERROR and parent_id(call) == first.context.span_id
    assert first.status.status_code is child.status.status_code is StatusCode.ERROR
    assert parent_id(child) == first.context.span_id and second.parent is None
    assert second.status.status_code is StatusCode.UNSET and (second.attributes or {})["ctxwin.run.stop"] == "done"

def test_a_sink_that_fails_warns_once_and_the_run_goes_on(provider: TracerProvider) -> None:
    class Broken:
        def start_span(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("tracer broke")

    from ctxwin.telemetry.agent_spans import AgentSpans

    got: list[LoopEvent] = []
    sink = AgentSpans(Broken(), then=got.append)
    with pytest.warns(RuntimeWarning, match="tracer broke"):
        sink(loop_event("user", 1, 0, **{"text": "hi"}))
    sink(loop_event("done", 1, 1, **{"text": "ok"}))
    assert [e.kind for e in got] == ["user", "done"]


SECRETS = ("hunter2", "AKIA123SECRET", "sk-live-XYZ", "the-final-answer-42", "db-password-9")


def content_run(sink: Any) -> None:
    """A run whose user message, tool arguments, answer, error and sub-agent task hold secrets."""
    sink(loop_event("user", 1, 0, **{"text": "my password is hunter2, deploy with AKIA123SECRET"}))
    sink(loop_event("model_call", 1, 1, **{"tokens": 120, "budget": 1000, "messages": 1}))
    sink(loop_event("tool_call", 1, 1, **{"name": "shell", "call_id": "c1",
                                       "arguments": {"command": "curl -H 'Authorization: Bearer sk-live-XYZ' x"}}))
    sink(loop_event("tool_result", 1, 1, **{"name": "shell", "call_id": "c1", "is_error": False, "chars": 12}))
    sink(loop_event("subagent", 1, 1, **{"action": "start", "context": "isolated", "agent": "default",
                                      "session": "memory:child", "task": "rotate db-password-9"}))
    sink(loop_event("subagent", 1, 1, **{"action": "end", "context": "isolated", "session": "memory:child",
                                      "stop": "done", "steps": 1}))
    sink(loop_event("assistant", 1, 2, **{"text": "the-final-answer-42", "tool_calls": [], "stop_reason": "end"}))
    sink(loop_event("error", 1, 2, **{"error": "upstream said hunter2 is wrong", "status": 500}))


def exported_text(spans: tuple[ReadableSpan, ...]) -> str:
    """Every attribute, event attribute and status of the spans, as text."""
    parts: list[str] = []
    for span in spans:
        parts += [span.name, span.status.description or "", json.dumps(dict(span.attributes or {}), default=str)]
        parts += [json.dumps([e.name, dict(e.attributes or {})], default=str) for e in span.events]
    return "\n".join(parts)


def test_content_is_not_exported_by_default(provider: TracerProvider, exporter: InMemorySpanExporter,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(telemetry.CAPTURE_CONTENT, raising=False)
    content_run(telemetry.agent_event_sink(provider, session_id="s"))
    spans = exporter.get_finished_spans()
    text = exported_text(spans)
    assert [s for s in SECRETS if s in text] == []
    # what is kept: names, ids, counts and sizes
    [run] = by_name(spans, a.AGENT_RUN)
    events = {e.name: dict(e.attributes or {}) for e in run.events}
    assert events["ctxwin.user"]["ctxwin.text_chars"] == len("my password is hunter2, deploy with AKIA123SECRET")
    assert events["ctxwin.tool_call"]["ctxwin.name"] == "shell" and events["ctxwin.tool_call"]["ctxwin.call_id"] == "c1"
    assert list(events["ctxwin.tool_call"]["ctxwin.argument_names"]) == ["command"]
    assert events["ctxwin.tool_result"]["ctxwin.chars"] == 12
    assert (run.attributes or {})["ctxwin.run.stop"] == "error" and run.status.status_code is StatusCode.ERROR
    [sub] = by_name(spans, a.SUBAGENT)
    assert (sub.attributes or {})["ctxwin.subagent.task_chars"] == len("rotate db-password-9")


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_content_is_exported_when_asked_for(provider: TracerProvider, exporter: InMemorySpanExporter,
                                            monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    if how == "environment":
        monkeypatch.setenv(telemetry.CAPTURE_CONTENT, "true")
        sink = telemetry.agent_event_sink(provider, session_id="s")
    else:
        monkeypatch.delenv(telemetry.CAPTURE_CONTENT, raising=False)
        sink = telemetry.agent_event_sink(provider, session_id="s", capture_content=True)
    content_run(sink)
    text = exported_text(exporter.get_finished_spans())
    assert [s for s in SECRETS if s not in text] == []
    assert telemetry.capture_content(None, {telemetry.CAPTURE_CONTENT: "SPAN_ONLY"})
    assert not telemetry.capture_content(None, {telemetry.CAPTURE_CONTENT: "false"})
    assert not telemetry.capture_content(False, {telemetry.CAPTURE_CONTENT: "true"})  # the argument wins


def test_instrumenting_twice_does_not_double_the_spans(provider: TracerProvider,
                                                       exporter: InMemorySpanExporter) -> None:
    engine = busy_engine()
    first = telemetry.instrument(engine, provider)
    second = telemetry.instrument(engine, provider)
    assert len(engine.observers) == 1 and second.observer is first.observer
    engine.prepare()
    assert len(by_name(exporter.get_finished_spans(), a.PREPARE)) == 1


def test_an_instrumented_agent_reports_pipeline_events_once(tmp_path: Path, provider: TracerProvider,
                                                            exporter: InMemorySpanExporter) -> None:
    """Its engine's spans carry the pipeline events; the run span does not repeat them."""
    root = make_workspace(tmp_path / "ws", files=1, lines=5)
    with ScriptedFake(lambda api, messages: Turn(text="ok"), context_window=32_000, max_output=1_000) as fake:
        model = HttpModel(client_for("anthropic", fake.anthropic_base_url, MODEL, api_key="k"))
        agent = create_agent(model, workspace=Workspace([root], model=MODEL), window=32_000, max_output=1_000,
                             config=AgentConfig(max_steps=3, max_tokens=1_000))
        fill(agent.engine, 40)  # enough history for the first request to mask and compact
        telemetry.instrument_agent(agent, provider)
        assert agent.run("Summarize.").stop == "done"
    spans = exporter.get_finished_spans()
    [run] = by_name(spans, a.AGENT_RUN)
    stage_events = [e.name for s in spans if s.name not in (a.AGENT_RUN, a.PREPARE) for e in s.events]
    assert stage_events  # the pipeline acted
    assert not [e.name for e in run.events if e.name in stage_events]
    assert (run.attributes or {})["ctxwin.run.compactions"] >= 1  # still counted


def test_ctxwin_otel_0_keeps_an_applications_global_provider_out(tmp_path: Path) -> None:
    """The application's global provider is used (OpenTelemetry's contract with libraries) unless
    CTXWIN_OTEL says no."""
    code = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from ctxwin import telemetry
from ctxwin.engine import ContextEngine
import os
trace.set_tracer_provider(TracerProvider())
print(telemetry.instrument(ContextEngine(model="gpt-4o")).active)
os.environ["CTXWIN_OTEL"] = "0"
print(telemetry.instrument(ContextEngine(model="gpt-4o")).active)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXWIN_OTEL", "OTEL_"))}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["True", "False"], out.stderr


# ------------------------------------------------------------------------------------------------
# From the environment


class _Collector(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        type(self).bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_ctxwin_otel_exports_over_otlp_http(tmp_path: Path) -> None:
    """`CTXWIN_OTEL=1` and the standard OTEL variables: spans reach an OTLP/HTTP collector (a real
    server on 127.0.0.1), decoded with the OTLP protobuf schema."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the OTLP exporter is not installed")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    _Collector.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    code = """
from opentelemetry import trace
from ctxwin import policies, telemetry
from ctxwin.engine import ContextEngine
from ctxwin.messages import Message, Text
engine = ContextEngine(model="gpt-4o")
assert telemetry.instrument(engine).active
engine.append(Message("user", (Text("hi"),)))
engine.prepare()
trace.get_tracer_provider().shutdown()
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXWIN_OTEL", "OTEL_"))}
    env.update({"CTXWIN_OTEL": "1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":
                f"http://127.0.0.1:{server.server_address[1]}/v1/traces"})
    try:
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    finally:
        server.shutdown()
        server.server_close()
    request = ExportTraceServiceRequest()
    request.ParseFromString(b"".join(_Collector.bodies))
    [resource_spans] = request.resource_spans
    resource = {kv.key: kv.value.string_value for kv in resource_spans.resource.attributes}
    assert resource["service.name"] == "ctxwin"
    spans = [span for scope in resource_spans.scope_spans for span in scope.spans]
    assert [s.name for s in spans] == [a.PREPARE]
    attributes = {kv.key: kv.value for kv in spans[0].attributes}
    assert attributes["gen_ai.request.model"].string_value == "gpt-4o"
    assert attributes["ctxwin.request.messages"].int_value == 1


def test_environment_configuration_errors_say_what_to_do() -> None:
    with pytest.raises(TelemetryError, match="OTEL_TRACES_EXPORTER='zipkin'") as caught:
        build_provider({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert "otlp, console or none" in str(caught.value)
    with pytest.raises(TelemetryError, match="OTLP protocol 'thrift'"):
        build_provider({"OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"})
    assert build_provider({"OTEL_TRACES_EXPORTER": "none"}) is None
    assert telemetry.from_env({}) is None  # CTXWIN_OTEL not set: off
    assert telemetry.enabled({"CTXWIN_OTEL": "true"}) and not telemetry.enabled({"CTXWIN_OTEL": "0"})


def test_console_exporter_writes_spans_to_stderr(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-agent")
    provider = build_provider({"OTEL_TRACES_EXPORTER": "console"})
    engine = ContextEngine(model="gpt-4o")
    telemetry.instrument(engine, provider)
    engine.append(Message("user", (Text("hi"),)))
    engine.prepare()
    provider.force_flush()
    provider.shutdown()
    out = capsys.readouterr()
    assert out.out == ""  # stdout stays free for a command's own output
    span = json.loads(out.err[out.err.index("{"):])
    assert span["name"] == a.PREPARE and span["resource"]["attributes"]["service.name"] == "my-agent"


# ------------------------------------------------------------------------------------------------
# The conventions: names checked against the semantic-conventions packages, traces that join


def convention_names() -> set[str]:
    """Every attribute name the OpenTelemetry semantic conventions (stable and incubating) and
    OpenInference define."""
    import importlib
    import pkgutil

    from openinference.semconv import trace as openinference
    from opentelemetry.semconv import attributes as stable
    from opentelemetry.semconv._incubating import attributes as incubating

    names: set[str] = set()
    for package in (stable, incubating):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            names |= {v for k, v in vars(module).items() if k.isupper() and isinstance(v, str)}
    for holder in (openinference.SpanAttributes,):
        names |= {v for k, v in vars(holder).items() if k.isupper() and isinstance(v, str)}
    return names


def every_span_kind_of_run(tmp_path: Path, provider: TracerProvider) -> None:
    """An instrumented agent with sub-agents and a model-written compaction, and a proxy request: every
    kind of span ctxwin makes."""
    from ctxwin.compaction.llm import LLMSummarizer

    root = make_workspace(tmp_path / "ws", files=2, lines=20)
    plan = [Turn(text="Delegate.", calls=[("t1", "task", {"task": "count the lines of docs/f001.txt"})]),
            Turn(text="All done.")]

    def script(api: str, messages: list[Message]) -> Turn:
        first = next(m for m in messages if m.role == "user").text
        if first.startswith("Task: "):
            return Turn(text="12 lines")
        return plan[min(sum(1 for m in messages if m.role == "assistant"), 1)]

    with ScriptedFake(script, context_window=32_000, max_output=1_000) as fake:
        model = HttpModel(client_for("anthropic", fake.anthropic_base_url, MODEL, api_key="k"))
        subagents = SubAgents()
        agent = create_agent(model, workspace=Workspace([root], model=MODEL), window=32_000, max_output=1_000,
                             config=AgentConfig(max_steps=5, max_tokens=1_000), extra_tools=[subagents.tool()])
        subagents.attach(agent)
        telemetry.instrument_agent(agent, provider, agent_name="main")
        assert agent.run("Turn 1: delegate.").stop == "done"
    with FakeProvider(context_window=200_000) as fake_summarizer:
        fake_summarizer.reply("## Goal\nRefactor the parser (PAR-4471).\n\n## Constraints & Preferences\n- (none)\n\n"
                              "## Progress\n### Done\n- [x] Read f0..f39\n\n## Key Decisions\n- (none)\n\n"
                              "## Next Steps\n1. Summarize\n\n## Critical Context\n- (none)")
        summarizer = LLMSummarizer(AnthropicClient(fake_summarizer.anthropic_base_url, "k", "claude-haiku-4-5"),
                                   window_tokens=100_000)
        engine = ContextEngine(model=MODEL, policy="pi", window=30_000, max_output=1_000, summarizer=summarizer)
        fill(engine, 40)
        telemetry.instrument(engine, provider)
        engine.compact()
    with telemetry.proxy_request_span(api="anthropic", model=MODEL, tracer_provider=provider) as span:
        span.record(ProxyRequestEntry("anthropic", MODEL, 200, 100, 90, 0.5, input_tokens=80, output_tokens=9))
        span.response({"id": "msg_01", "model": MODEL, "stop_reason": "end_turn"})


def test_every_attribute_name_is_one_the_conventions_define(tmp_path: Path, provider: TracerProvider,
                                                             exporter: InMemorySpanExporter) -> None:
    """Names outside `ctxwin.*` are the conventions' own (GenAI, general ones like error.type and
    http.response.status_code, OpenInference): each is checked against the installed packages."""
    every_span_kind_of_run(tmp_path, provider)
    spans = exporter.get_finished_spans()
    emitted = {k for s in spans for k in (s.attributes or {})}
    emitted |= {k for s in spans for e in s.events if e.name != "exception" for k in (e.attributes or {})}
    ours = {k for k in emitted if k.startswith("ctxwin.")}
    foreign = emitted - ours
    known = convention_names()
    assert foreign - known == set()
    assert {"gen_ai.operation.name", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
            "gen_ai.response.id", "gen_ai.response.model", "gen_ai.response.finish_reasons",
            "gen_ai.request.model", "gen_ai.provider.name"} <= foreign
    # The module's own constants too, whether or not this run emitted them.
    constants = {v for k, v in vars(a).items() if k.isupper() and isinstance(v, str) and "." in v
                 and not v.startswith("ctxwin.")}
    assert constants - known == set()


def test_operation_names_and_model_call_span_names_follow_the_conventions(tmp_path: Path, provider: TracerProvider,
                                                                         exporter: InMemorySpanExporter) -> None:
    from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
        GenAiOperationNameValues,
        GenAiProviderNameValues,
    )

    every_span_kind_of_run(tmp_path, provider)
    spans = exporter.get_finished_spans()
    operations = {str((s.attributes or {}).get("gen_ai.operation.name")) for s in spans
                  if "gen_ai.operation.name" in (s.attributes or {})}
    well_known = {v.value for v in GenAiOperationNameValues}
    assert operations - well_known <= set(a.ENGINE_OPERATIONS.values())  # ctxwin's own, documented ones
    assert {"chat", "invoke_agent", "prepare_context", "compact_context"} <= operations
    providers = {str((s.attributes or {})["gen_ai.provider.name"]) for s in spans
                 if "gen_ai.provider.name" in (s.attributes or {})}
    assert providers and providers <= {v.value for v in GenAiProviderNameValues}
    for span in spans:
        attrs = span.attributes or {}
        if attrs.get("gen_ai.operation.name") == "chat":  # a model call: `{operation} {model}`
            assert span.name == f"chat {attrs['gen_ai.request.model']}"
            assert attrs["openinference.span.kind"] == "LLM"
    # The engine's spans: an operation name; a model-written summary's usage on compact and on its stage.
    [compact] = by_name(spans, a.COMPACT)
    [stage] = children(spans, compact)
    assert (compact.attributes or {})["gen_ai.operation.name"] == "compact_context"
    for span in (compact, stage):
        got = span.attributes or {}
        assert got["gen_ai.usage.input_tokens"] > 0 and got["gen_ai.usage.output_tokens"] > 0
    assert (stage.attributes or {})["ctxwin.compaction.summarizer_model"] == "claude-haiku-4-5"
    assert all((s.attributes or {})["gen_ai.operation.name"] == "prepare_context" for s in by_name(spans, a.PREPARE))
    # OpenInference kinds as before: AGENT for runs and sub-agents, CHAIN for the engine, LLM for calls.
    kinds = {s.name: (s.attributes or {}).get("openinference.span.kind") for s in spans}
    assert (kinds[a.AGENT_RUN], kinds[a.SUBAGENT], kinds[a.PREPARE], kinds[a.COMPACT]) == (
        "AGENT", "AGENT", "CHAIN", "CHAIN")


def test_each_model_call_of_an_agent_is_a_span_with_its_usage_and_response(
        tmp_path: Path, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    root = make_workspace(tmp_path / "ws", files=2, lines=20)
    plan = [Turn(text="Reading.", calls=[("r1", "read", {"path": "docs/f001.txt"})]), Turn(text="Done.")]
    with ScriptedFake(lambda api, messages: plan[min(sum(1 for m in messages if m.role == "assistant"), 1)],
                      context_window=32_000, max_output=1_000) as fake:
        model = HttpModel(client_for("anthropic", fake.anthropic_base_url, MODEL, api_key="k"))
        agent = create_agent(model, workspace=Workspace([root], model=MODEL), window=32_000, max_output=1_000,
                             config=AgentConfig(max_steps=5, max_tokens=1_000))
        completions = []
        original = agent.send
        agent.send = lambda prepared: completions.append(original(prepared)) or completions[-1]  # type: ignore[method-assign]
        telemetry.instrument_agent(agent, provider, agent_name="main")
        assert agent.run("Read f001.").stop == "done"
    spans = exporter.get_finished_spans()
    [run] = by_name(spans, a.AGENT_RUN)
    calls = by_name(spans, f"chat {MODEL}")
    assert len(calls) == len(completions) == agent.stats.model_calls == 2
    for call, completion in zip(calls, completions, strict=True):
        got = call.attributes or {}
        assert parent_id(call) == run.context.span_id and call.kind.name == "CLIENT"
        assert (got["gen_ai.response.id"], got["gen_ai.response.model"]) == (completion.raw["id"],
                                                                           completion.raw["model"])
        assert list(got["gen_ai.response.finish_reasons"]) == [completion.stop_reason]
        usage = completion.usage
        assert got["gen_ai.usage.input_tokens"] == usage.context_tokens > 0
        assert got["gen_ai.usage.output_tokens"] == usage.output_tokens > 0
        assert got["gen_ai.provider.name"] == "anthropic" and call.status.status_code is StatusCode.UNSET
    assert sum(int((c.attributes or {})["gen_ai.usage.input_tokens"]) for c in calls) == agent.stats.input_tokens


def test_an_overflowed_call_is_an_error_span_and_the_retry_a_new_one(tmp_path: Path, provider: TracerProvider,
                                                                      exporter: InMemorySpanExporter) -> None:
    sink = telemetry.agent_event_sink(provider, session_id="s", model=MODEL)
    sink(loop_event("user", 1, 0, text="hi"))
    sink(loop_event("model_call", 1, 1, tokens=9_000, budget=8_000, messages=3))
    sink(loop_event("overflow", 1, 1, error="prompt is too long", tokens=6_000))
    sink(loop_event("model_call", 1, 1, tokens=6_000, budget=6_500, messages=2))
    sink(loop_event("assistant", 1, 1, text="ok", tool_calls=[], stop_reason="end_turn"))
    sink(loop_event("done", 1, 1, text="ok"))
    failed, answered = sorted(by_name(exporter.get_finished_spans(), f"chat {MODEL}"), key=lambda s: s.start_time or 0)
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "context_overflow"
    assert answered.status.status_code is StatusCode.UNSET
    assert list((answered.attributes or {})["gen_ai.response.finish_reasons"]) == ["end_turn"]
    assert (failed.attributes or {})["ctxwin.request.tokens"] == 9_000


def test_a_proxy_span_continues_the_callers_trace_and_passes_it_upstream(provider: TracerProvider,
                                                                         exporter: InMemorySpanExporter) -> None:
    caller = provider.get_tracer("the-agent").start_span("agent step")
    incoming: dict[str, str] = {}
    from opentelemetry.trace import set_span_in_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    TraceContextTextMapPropagator().inject(incoming, context=set_span_in_context(caller))
    headers = {"Traceparent": incoming["traceparent"], "x-api-key": "sk-secret"}  # any case, as HTTP allows
    upstream = {"traceparent": incoming["traceparent"], "content-type": "application/json"}
    with telemetry.proxy_request_span(api="openai-chat", model="gpt-4o", headers=headers,
                                      tracer_provider=provider) as span:
        span.inject(upstream)
        span.response({"id": "chatcmpl-9", "model": "gpt-4o-2024-08-06",
                       "choices": [{"index": 0, "finish_reason": "tool_calls"}]})
    caller.end()
    [proxy] = by_name(exporter.get_finished_spans(), "chat gpt-4o")
    assert proxy.context.trace_id == caller.get_span_context().trace_id
    assert parent_id(proxy) == caller.get_span_context().span_id and proxy.parent is not None and proxy.parent.is_remote
    _, trace_id, span_id, _ = upstream["traceparent"].split("-")
    assert (int(trace_id, 16), int(span_id, 16)) == (proxy.context.trace_id, proxy.context.span_id)
    assert upstream["content-type"] == "application/json"
    got = proxy.attributes or {}
    assert (got["gen_ai.response.id"], got["gen_ai.response.model"], list(got["gen_ai.response.finish_reasons"])) == (
        "chatcmpl-9", "gpt-4o-2024-08-06", ["tool_calls"])


def test_without_a_traceparent_or_with_a_broken_one_the_proxy_span_starts_where_it_is(
        provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    with provider.get_tracer("app").start_as_current_span("server") as server:
        with telemetry.proxy_request_span(api="anthropic", model=MODEL, headers={"traceparent": "00-zz-yy-01"},
                                          tracer_provider=provider):
            pass
        with telemetry.proxy_request_span(api="anthropic", model=MODEL, headers={}, tracer_provider=provider):
            pass
    for span in by_name(exporter.get_finished_spans(), f"chat {MODEL}"):
        assert parent_id(span) == server.get_span_context().span_id


def test_off_the_proxy_span_leaves_the_callers_trace_headers_alone() -> None:
    upstream = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with telemetry.proxy_request_span(api="anthropic", model=MODEL, headers=dict(upstream)) as span:
        span.inject(upstream)
        span.response({"id": "x"})
    assert upstream == {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
