"""Invariants of the loop, searched by hypothesis over scripted models (in-process, no HTTP)."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_fake import make_workspace
from ctxwin.agent import AgentConfig, FunctionModel, create_agent
from ctxwin.engine import Prepared
from ctxwin.messages import Message, Text, ToolCall, validate
from ctxwin.providers import Completion
from ctxwin.tools import ToolOutput, ToolSpec, Workspace

ARGS = st.one_of(
    st.just({"path": "docs/f000.txt"}), st.just({"path": "docs"}), st.just({}),
    st.just({"path": "../outside"}), st.just({"nope": 1}), st.just('{"path": "docs/f000.txt"'),
)
CALL = st.tuples(st.sampled_from(["read", "ls", "grep", "no_such_tool"]), ARGS)
STEP = st.lists(CALL, min_size=1, max_size=4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(STEP, max_size=6))
def test_every_call_gets_one_result_in_order_and_the_log_stays_valid(tmp_path: Path,
                                                                      steps: list[list[tuple[str, Any]]]) -> None:
    root = tmp_path / "ws"
    if not root.exists():
        make_workspace(root, files=2)
    script = iter(enumerate(steps))

    def respond(prepared: Prepared) -> Completion:
        step = next(script, None)
        if step is None:
            return Completion(Message("assistant", (Text("done"),)))
        number, calls = step
        return Completion(Message("assistant", tuple(ToolCall(f"c{number}-{n}", name, args)
                                                     for n, (name, args) in enumerate(calls))))

    agent = create_agent(FunctionModel(respond, "claude-sonnet-4-5"), workspace=Workspace([root]),
                         config=AgentConfig(max_steps=20, max_repeats=100), window=16_000, max_output=1_000)
    result = agent.run("go")
    assert result.stop == "done" and result.steps == len(steps) + 1
    messages = agent.engine.messages
    assert not validate(messages, "anthropic")
    for asked, answered in itertools.pairwise(messages):
        if asked.role == "assistant" and asked.tool_calls:
            assert answered.role == "tool"
            assert [r.call_id for r in answered.tool_results] == [c.id for c in asked.tool_calls]
            for call, out in zip(asked.tool_calls, answered.tool_results, strict=True):
                if call.name == "no_such_tool" or not isinstance(call.arguments, dict):
                    assert out.is_error


def test_several_calls_of_one_message_run_at_once_bounded_results_in_call_order(tmp_path: Path) -> None:
    lock = threading.Lock()
    state = {"now": 0, "max": 0}

    def nap(ws: Any, n: int) -> ToolOutput:
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.2 if n % 2 else 0.05)  # the odd ones finish last
        with lock:
            state["now"] -= 1
        return ToolOutput(f"nap {n}")

    spec = ToolSpec("nap", "Sleep a little.", {"type": "object", "properties": {"n": {"type": "integer"}},
                                                "required": ["n"], "additionalProperties": False}, nap)
    replies = iter([Message("assistant", tuple(ToolCall(f"n{n}", "nap", {"n": n}) for n in range(6))),
                    Message("assistant", (Text("rested"),))])
    agent = create_agent(FunctionModel(lambda prepared: Completion(next(replies)), "gpt-4o"), extra_tools=[spec],
                         config=AgentConfig(parallel_tools=3), window=16_000, max_output=1_000)
    assert agent.run("go").stop == "done"
    assert state["max"] == 3  # three at once, never more
    results = agent.engine.messages[2].tool_results
    assert [r.text for r in results] == [f"nap {n}" for n in range(6)]
