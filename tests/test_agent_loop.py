"""The agent loop against the (scripted) fake provider over real HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent_fake import ScriptedFake, Turn, long_task, make_workspace
from ctxwin.agent import Agent, AgentConfig, HttpModel, LoopEvent, create_agent, tool_table
from ctxwin.messages import Message, Text, ToolCall
from ctxwin.providers import RetryPolicy, client_for
from ctxwin.store import Session
from ctxwin.testing import FakeProvider, overflow, rate_limited, server_error
from ctxwin.tools import Workspace

WINDOW = 16_000
MAX_OUTPUT = 1_000
MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4o"}


def base_url(fake: FakeProvider, api: str) -> str:
    return fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url


FAST_RETRY = RetryPolicy(attempts=4, base_delay=0.001, max_delay=0.01)


def build(fake: FakeProvider, api: str, root: Path, events: list[LoopEvent], *, session: Any = None,
          stream: bool = False, policy: str = "ctxwin", **config: Any) -> Agent:
    client = client_for(api, base_url(fake, api), MODELS[api], api_key="test-key", retry=FAST_RETRY)  # type: ignore[arg-type]
    model = HttpModel(client, stream=stream)
    settings = {"max_steps": 200, "max_tokens": MAX_OUTPUT, **config}
    return create_agent(model, session=session, workspace=Workspace([root], model=MODELS[api]),
                        config=AgentConfig(**settings), window=WINDOW, max_output=MAX_OUTPUT, policy=policy,
                        on_event=events.append)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_300_step_task_fits_compacts_inside_tool_loops_and_recovers(api: str, stream: bool, tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    # Errors at chosen steps of every turn: an overflow, a 429, two 500s in a row.
    faults = {30: [overflow()], 50: [rate_limited(retry_after=0)], 70: [server_error(), server_error()],
              90: [server_error(mid_stream=True)]}  # an error event inside the stream (a plain call: a 500)
    fake = ScriptedFake(long_task(100, faults=faults), context_window=WINDOW, max_output=MAX_OUTPUT)
    events: list[LoopEvent] = []
    with fake:
        agent = build(fake, api, root, events, stream=stream)
        results = [agent.run(f"Turn {t}: read through the docs folder.") for t in (1, 2, 3)]

    assert [r.stop for r in results] == ["done"] * 3
    assert [r.text for r in results] == [f"Turn {t} done after 100 steps." for t in (1, 2, 3)]
    stats = agent.stats
    assert stats.steps == 303 and stats.turns == 3
    generations = [r for r in fake.requests if r.path != "/v1/messages/count_tokens"]
    assert all(r.input_tokens is None or r.input_tokens + MAX_OUTPUT <= WINDOW for r in generations)
    assert max(r.input_tokens or 0 for r in generations) <= WINDOW - MAX_OUTPUT
    failed = [400, 429, 500, 500] + ([] if stream else [500])  # a stream that breaks starts as a 200
    assert [r.status for r in generations if r.status != 200] == failed * 3  # once per turn
    assert stats.overflows_recovered == 3
    assert stats.retries == 12 == len([e for e in events if e.kind == "retry"])
    assert all(r.body.get("stream", False) is stream for r in generations)
    assert not stats.errors
    # Compaction happened between two tool calls of one user turn, as the events say.
    inside = [e for e in events if e.kind == "pipeline" and e.event is not None and e.event.stage == "compaction"
              and e.data.get("inside_tool_loop")]
    assert inside and stats.compactions_inside_tool_loops == len(inside) >= 1
    assert all(e.step > 1 for e in inside)
    # Several calls in one message ran and came back in call order.
    parallel = [r for r in generations if r.status == 200 and _last_results(api, r.body)[-2:] and
                len(_last_results(api, r.body)) == 2]
    assert parallel and all(ids[0].endswith("a") and ids[1].endswith("b") for ids in
                            (_last_results(api, r.body) for r in parallel))


def _last_results(api: str, body: dict[str, Any]) -> list[str]:
    """Call ids of the tool results at the end of a request."""
    messages = body["messages"]
    if api == "anthropic":
        content = messages[-1]["content"]
        return [b["tool_use_id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    ids = []
    for message in reversed(messages):
        if message["role"] != "tool":
            break
        ids.insert(0, message["tool_call_id"])
    return ids


@pytest.mark.parametrize(("api", "stream"), [("openai", False), ("openai", True), ("anthropic", False)])
def test_bad_calls_get_clear_errors_and_the_limits_stop_a_looping_model(api: str, stream: bool,
                                                                        tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", files=2)

    def script(api: str, messages: list[Any]) -> Turn:
        # Invalid JSON arguments, then an unknown tool, then the same call forever.
        n = sum(1 for m in messages if m.role == "assistant")
        if n == 0:
            return Turn(calls=[("c0", "read", '{"path": "docs/f000.txt"')])
        if n == 1:
            return Turn(calls=[("c1", "rm_rf", {"path": "/"})])
        return Turn(calls=[(f"c{n}", "read", {"path": "docs/f000.txt"})])

    events: list[LoopEvent] = []
    with ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent = build(fake, api, root, events, max_steps=50, stream=stream)
        result = agent.run("Turn 1: go")
    assert result.stop == "repeated_call"
    assert result.steps == 2 + 3 + 2  # two bad calls, three answered repeats, two refused
    results = [r for m in agent.engine.messages for r in m.tool_results]
    assert "The arguments of read are not a JSON object" in results[0].text and results[0].is_error
    assert "Unknown tool 'rm_rf'" in results[1].text and results[1].is_error
    assert "file 000 line 00" in results[2].text and not results[2].is_error
    assert "same arguments 4 times in a row" in results[5].text and results[5].is_error
    assert any(e.kind == "limit" and e.data["limit"] == "repeated_call" for e in events)

    with ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent = build(fake, "openai", root, [], max_steps=4, max_repeats=100)
        assert agent.run("Turn 1: go").stop == "max_steps"
        assert agent.stats.steps == 4


def test_the_loop_logs_everything_and_resumes_in_process(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", files=5)
    with ScriptedFake(long_task(6, files=5), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        session = Session.open(tmp_path / "s1")
        agent = build(fake, "anthropic", root, [], session=session, max_steps=3)
        assert agent.run("Turn 1: go").stop == "max_steps"
        session.close()
        reopened = Session.open(tmp_path / "s1")
        again = build(fake, "anthropic", root, [], session=reopened)
        result = again.resume()
        reopened.close()
    assert result is not None and result.stop == "done" and result.text == "Turn 1 done after 6 steps."
    log = [json.loads(line) for line in (tmp_path / "s1" / "session.jsonl").read_text().splitlines()[1:]]
    roles = [e["payload"]["role"] for e in log if e["kind"] == "message"]
    assert roles == ["user"] + ["assistant", "tool"] * 6 + ["assistant"]

    # A process that died after logging a model's tool calls, before their results: resume runs them.
    with Session.open(tmp_path / "s2") as log2:
        log2.append("message", Message("user", (Text("Turn 1: go"),)).to_dict())
        log2.append("message", Message("assistant", (ToolCall("t1s5a", "read", {"path": "docs/f001.txt"}),)).to_dict())
    with ScriptedFake(long_task(6, files=5), context_window=WINDOW, max_output=MAX_OUTPUT) as fake, \
            Session.open(tmp_path / "s2") as log2:
        result = build(fake, "openai", root, [], session=log2).resume()
        first = fake.requests[0].body["messages"]
    assert result is not None and result.text == "Turn 1 done after 6 steps."
    assert first[-1]["role"] == "tool" and first[-1]["tool_call_id"] == "t1s5a" and "file 001" in first[-1]["content"]


def test_memory_flush_before_compaction_and_the_checkpoint_protocol(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", files=10)
    events: list[LoopEvent] = []
    with ScriptedFake(long_task(40, files=10), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent = build(fake, "anthropic", root, events, memory_flush=True)
        assert agent.run("Turn 1: read the docs").stop == "done"
    breakdown = agent.context_breakdown()  # what /context shows: the compaction's summary has its own line
    assert breakdown.context_window == WINDOW and breakdown.tokens("summary") > 0
    assert breakdown.tokens("tool_schemas") > 0 and breakdown.reserved_output == agent.engine.reserve
    assert any(e.kind == "memory_flush" for e in events)
    notes = list((root / "memory").glob("*.md"))
    assert len(notes) == 1 and notes[0].read_text().count("## Notes before compaction") == agent.stats.compactions >= 1

    events = []
    with ScriptedFake(long_task(40, files=10), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent = build(fake, "openai", root, events, policy="checkpoint")
        assert agent.run("Turn 1: read the docs").stop == "done"
    stages = [(e.event.stage, e.event.action) for e in events if e.kind == "pipeline" and e.event is not None]
    assert ("compaction", "checkpoint_request") in stages
    asked = stages.index(("compaction", "checkpoint_request"))
    assert ("compaction", "checkpoint") in stages[asked:]
    replies = [e.data["text"] for e in events if e.kind == "assistant"]
    assert any(text.startswith("<checkpoint>Goal: turn 1") for text in replies)
    summaries = [e.event.details for e in events if e.kind == "pipeline" and e.event is not None
                 and e.event.action == "checkpoint"]
    assert summaries


def test_the_cost_limit_stops_a_run(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", files=5)
    with ScriptedFake(long_task(50, files=5), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent = build(fake, "openai", root, [], max_cost_usd=0.05, input_usd_per_mtok=3.0, output_usd_per_mtok=15.0)
        result = agent.run("Turn 1: read")
    assert result.stop == "max_cost"
    assert agent.stats.cost_usd >= 0.05 and 1 < result.steps < 50


def test_interrupt_stops_the_step_and_kills_the_tool_process_group(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", files=1)
    sleep = f"sleep 48.{os.getpid()}"  # pgrep finds this run's only, even with the suite run twice at once

    def script(api: str, messages: list[Any]) -> Turn:
        if messages[-1].role == "tool":
            return Turn(text="carried on")
        return Turn(calls=[("s1", "shell", {"command": f"{sleep} & {sleep}; wait"})])

    def running() -> bool:
        return bool(subprocess.run(["pgrep", "-f", sleep], capture_output=True, text=True).stdout.strip())

    bystander = subprocess.Popen(["sleep", "30"], start_new_session=True)  # not the tools': must survive
    with ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent = build(fake, "openai", root, [])
        agent.workspace = Workspace([root], allow_shell=True, model=MODELS["openai"])
        agent.tools = tool_table(agent.workspace, None)  # (the engine already offers shell: same registry)
        outcome: dict[str, Any] = {}
        worker = threading.Thread(target=lambda: outcome.update(result=agent.run("Turn 1: sleep")))
        worker.start()
        deadline = time.monotonic() + 10
        while not running() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert running()
        agent.interrupt()
        worker.join(10)  # a hang guard: uninterrupted, the tool's sleep runs on
        assert outcome["result"].stop == "interrupted"
        assert not running()  # the command and its background child are gone
        assert bystander.poll() is None  # a process group that was there before the tools ran is spared
        bystander.kill()
        bystander.wait()
        # The log stays a valid conversation, and the session goes on.
        assert agent.resume() is not None and agent.last_text() == "carried on"
