"""Sub-agents, checked at the server: what an isolated child and a fork really send."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_fake import ScriptedFake, Turn, make_workspace
from ctxwin.agent import AgentConfig, HttpModel, LoopEvent, create_agent
from ctxwin.agent.subagents import FORK_TAG, AgentDefinition, SubagentLimits, SubAgents
from ctxwin.engine import ContextEngine
from ctxwin.messages import Message
from ctxwin.providers import client_for
from ctxwin.store import Session
from ctxwin.tools import Workspace

WINDOW = 32_000
MAX_OUTPUT = 1_000
MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4o"}
SECRET = "PARENT-SECRET-7731"

ParentPlan = Callable[[int], Turn]  # the parent's answer, by how many assistant messages it has sent


def _kind(messages: list[Message]) -> str:
    if any(m.role == "user" and f"<{FORK_TAG}>" in m.text for m in messages):
        return "fork"
    first_user = next(m for m in messages if m.role == "user")
    return "child" if first_user.text.startswith("Task: ") or "<skill" in first_user.text else "parent"


def make_script(parent: ParentPlan, *, child: Callable[[list[Message]], Turn] | None = None,
                fork: Callable[[list[Message]], Turn] | None = None) -> Callable[[str, list[Message]], Turn]:
    def script(api: str, messages: list[Message]) -> Turn:
        kind = _kind(messages)
        if kind == "parent":
            return parent(sum(1 for m in messages if m.role == "assistant"))
        if kind == "fork":
            return fork(messages) if fork else Turn(text="fork done")
        task = next(m.text for m in messages if m.role == "user" and m.text.startswith("Task: "))
        return child(messages) if child else Turn(text=f"answer to <{task[6:]}>")
    return script


def setup(fake: ScriptedFake, api: str, root: Path, tmp_path: Path, events: list[LoopEvent],
          limits: SubagentLimits | None = None) -> tuple[Any, SubAgents]:
    model = HttpModel(client_for(api, fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url,  # type: ignore[arg-type]
                                 MODELS[api], api_key="k"))
    subagents = SubAgents(limits=limits, sessions_root=tmp_path / "children")
    agent = create_agent(model, session=Session.open(tmp_path / "parent"),
                         workspace=Workspace([root], model=MODELS[api]),
                         config=AgentConfig(max_steps=20, max_tokens=MAX_OUTPUT), window=WINDOW,
                         max_output=MAX_OUTPUT, extra_tools=[subagents.tool()], on_event=events.append)
    subagents.attach(agent)
    return agent, subagents


def reading_parent(then: Turn, reads: int = 4) -> ParentPlan:
    """A parent that reads `reads` files (so its prompt is past the cacheable minimum), then does `then`."""
    def plan(n: int) -> Turn:
        if n < reads:
            return Turn(text=f"Reading {n}.", calls=[(f"r{n}", "read", {"path": f"docs/f{n:03d}.txt"})])
        if n == reads:
            return then
        return Turn(text="All done.")
    return plan


def workspace(tmp_path: Path) -> Path:
    root = make_workspace(tmp_path / "ws", files=8, lines=40)
    (root / "AGENTS.md").write_text("agents-file-marker: be brief\n")
    (root / "TOOLS.md").write_text("tools-file-marker: prefer grep\n")
    (root / "CLAUDE.md").write_text("claude-file-marker: not for children\n")
    return root


def generation_requests(fake: ScriptedFake) -> list[Any]:
    return [r for r in fake.requests if r.status == 200]


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_an_isolated_child_sees_only_its_task_and_the_allowlisted_files(api: str, tmp_path: Path) -> None:
    root = workspace(tmp_path)
    delegate = ("t1", "task", {"task": "count the lines of docs/f001.txt"})
    plan = reading_parent(Turn(text="Delegating.", calls=[delegate]), reads=2)
    events: list[LoopEvent] = []
    with ScriptedFake(make_script(plan), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, api, root, tmp_path, events)
        result = agent.run(f"Turn 1: the code is {SECRET}; delegate the counting.")
        requests = generation_requests(fake)
        agent.engine.session.close()
    assert result.stop == "done"
    child_first = next(r for r in requests if _kind(_msgs(api, r.body)) == "child")
    body = json.dumps(child_first.body)
    assert SECRET not in body and "Reading 0." not in body and "file 000 line" not in body
    child_messages = _msgs(api, child_first.body)
    assert [m.role for m in child_messages] == ["system", "user"]
    assert child_messages[1].text == "Task: count the lines of docs/f001.txt"
    assert "agents-file-marker" in child_messages[0].text and "tools-file-marker" in child_messages[0].text
    assert "claude-file-marker" not in body
    # The answer came back as the task's tool result, with a ref to the child's stored session.
    parent_last = _msgs(api, requests[-1].body)
    answer = next(r.text for m in parent_last for r in m.tool_results if r.call_id == "t1")
    assert "answer to <count the lines of docs/f001.txt>" in answer and "full transcript:" in answer
    child_dir = Path(answer.rsplit("full transcript: ", 1)[1].rstrip("]"))
    assert (child_dir / "session.jsonl").is_file()
    parent_log = (tmp_path / "parent" / "session.jsonl").read_text()
    assert str(child_dir) in parent_log
    child_log = child_dir.joinpath("session.jsonl").read_text()
    assert '"subagent_parent"' in child_log and str(tmp_path / "parent") in child_log
    assert [e.data["action"] for e in events if e.kind == "subagent"] == ["start", "end"]
    # Both logs reopen with their links (kept as custom entries), the engine rebuilding its state.
    for folder, messages in ((tmp_path / "parent", 8), (child_dir, 2)):
        with Session.open(folder) as log:
            assert len(ContextEngine(log, model=MODELS[api], window=WINDOW, max_output=MAX_OUTPUT).messages) == messages


def _msgs(api: str, body: dict[str, Any]) -> list[Message]:
    from ctxwin.testing.fake_provider import request_messages

    return request_messages("anthropic" if api == "anthropic" else "chat", body)


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_fork_sends_the_parents_last_request_byte_for_byte_and_hits_the_cache(api: str, tmp_path: Path) -> None:
    root = workspace(tmp_path)
    then = Turn(text="Forking a side check.", calls=[("k1", "task", {"task": "check f002", "context": "fork"}),
                                                      ("k2", "read", {"path": "docs/f005.txt"})])
    with ScriptedFake(make_script(reading_parent(then)), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, api, root, tmp_path, [])
        assert agent.run("Turn 1: read, then fork.").stop == "done"
        requests = generation_requests(fake)
        agent.engine.session.close()
    kinds = [_kind(_msgs(api, r.body)) for r in requests]
    fork_at = kinds.index("fork")
    parent_last, fork_first, parent_next = requests[fork_at - 1], requests[fork_at], requests[fork_at + 1]
    assert kinds[fork_at - 1] == kinds[fork_at + 1] == "parent"
    sent, forked = parent_last.body, fork_first.body
    n = len(sent["messages"])
    for key in ("system", "tools", "model"):
        assert json.dumps(forked.get(key)) == json.dumps(sent.get(key))
    assert [json.dumps(m) for m in forked["messages"][:n]] == [json.dumps(m) for m in sent["messages"]]
    # Then the clone of the parent's assistant message, tool calls and ids as the parent itself sends it next.
    clone = forked["messages"][n]
    original = parent_next.body["messages"][n]
    assert json.dumps(_no_cache(clone)) == json.dumps(_no_cache(original))
    tail = json.dumps(forked["messages"][n:])
    assert "k1" in tail and "k2" in tail and f"<{FORK_TAG}>" in tail and "check f002" in tail
    # The fake's prefix-cache accounting: the fork read the parent's prefix back.
    usage = fork_first.response["usage"]
    cached = usage.get("cache_read_input_tokens") if api == "anthropic" else \
        usage["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 1024
    assert cached >= 0.8 * (parent_last.input_tokens or 0)


def _no_cache(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in content]}
    return message


def test_fork_refusals_and_the_size_fallback(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    api = "openai"

    def fork_that_forks(messages: list[Message]) -> Turn:
        if messages[-1].role == "user":
            return Turn(calls=[("ff", "task", {"task": "deeper", "context": "fork"})])
        return Turn(text="fork finished")

    calls = [("a", "task", {"task": "x", "context": "fork"}),
             ("b", "task", {"task": "y", "context": "fork", "model": "another-model"})]
    with ScriptedFake(make_script(reading_parent(Turn(text="Two forks.", calls=calls), reads=1), fork=fork_that_forks),
                      context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, api, root, tmp_path / "one", [])
        agent.run("Turn 1: go")
        requests = generation_requests(fake)
        agent.engine.session.close()
    fork_second = [r for r in requests if _kind(_msgs(api, r.body)) == "fork"][1]
    refusal = next(r.text for m in _msgs(api, fork_second.body) for r in m.tool_results if r.call_id == "ff")
    assert "a fork cannot fork" in refusal
    parent_last = _msgs(api, requests[-1].body)
    results = {r.call_id: r for m in parent_last for r in m.tool_results}
    assert "fork finished" in results["a"].text
    assert "keeps the requester's model" in results["b"].text

    events: list[LoopEvent] = []
    plan = reading_parent(Turn(text="Fork.", calls=[("c", "task", {"task": "z", "context": "fork"})]), reads=1)
    with ScriptedFake(make_script(plan), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, api, root, tmp_path / "two", events, SubagentLimits(fork_max_tokens=100))
        agent.run("Turn 1: go")
        requests = generation_requests(fake)
        agent.engine.session.close()
    assert [_kind(_msgs(api, r.body)) for r in requests].count("fork") == 0
    child = next(r for r in requests if _kind(_msgs(api, r.body)) == "child")
    assert [m.role for m in _msgs(api, child.body)] == ["system", "user"]
    answer = next(r.text for m in _msgs(api, requests[-1].body) for r in m.tool_results if r.call_id == "c")
    assert answer.startswith("[fork fell back to isolated: the parent's view is ")
    assert "above fork_max_tokens 100" in answer
    assert any(e.kind == "subagent" and e.data.get("action") == "fork_fallback" for e in events)


def test_parallel_children_run_concurrently_bounded_and_come_back_in_order(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    lock = threading.Lock()
    state = {"now": 0, "max": 0}

    def slow_child(messages: list[Message]) -> Turn:
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.25)
        with lock:
            state["now"] -= 1
        task = messages[-1].text
        return Turn(text=f"result of <{task[6:]}>")

    tasks = [f"job {n}" for n in range(1, 7)]
    plan = reading_parent(Turn(text="Fan out.", calls=[("p", "task", {"tasks": tasks, "mode": "parallel"})]), reads=0)
    with ScriptedFake(make_script(plan, child=slow_child), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path, [])
        agent.run("Turn 1: go")
        requests = generation_requests(fake)
        agent.engine.session.close()
    assert state["max"] == 4  # really concurrent (not one after another), and bounded at 4 at once
    answer = next(r.text for m in _msgs("openai", requests[-1].body) for r in m.tool_results if r.call_id == "p")
    positions = [answer.index(f"result of <job {n}>") for n in range(1, 7)]
    assert positions == sorted(positions)
    assert [answer.index(f"## Task {n}") for n in range(1, 7)] == sorted(answer.index(f"## Task {n}")
                                                                        for n in range(1, 7))

    too_many = [f"job {n}" for n in range(9)]
    plan = reading_parent(Turn(text="Too many.", calls=[("q", "task", {"tasks": too_many, "mode": "parallel"})]), 0)
    with ScriptedFake(make_script(plan), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path / "b", [])
        agent.run("Turn 1: go")
        last = _msgs("openai", generation_requests(fake)[-1].body)
        agent.engine.session.close()
    refusal = next(r for m in last for r in m.tool_results if r.call_id == "q")
    assert "9 parallel tasks; at most 8" in refusal.text  # (OpenAI chat carries no error flag)


def test_a_chain_hands_each_result_to_the_next_task(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    plan = reading_parent(Turn(text="Chain.", calls=[("c", "task", {"tasks": ["first", "second after {previous}"],
                                                                    "mode": "chain"})]), reads=0)
    with ScriptedFake(make_script(plan), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path, [])
        agent.run("Turn 1: go")
        requests = generation_requests(fake)
        agent.engine.session.close()
    children = [r for r in requests if _kind(_msgs("openai", r.body)) == "child"]
    assert _msgs("openai", children[1].body)[-1].text == "Task: second after answer to <first>"


def test_an_isolated_child_has_its_own_tools_permission_mode_and_skills(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    (root / "skills").mkdir()
    (root / "skills" / "count.md").write_text("# Counting skill\nUse grep -c for counts.\n")
    reader = AgentDefinition(name="reader", system="You only read.", tools=["read", "grep", "shell"],
                             permission_mode="read-only", skills=["skills/count.md"])
    plan = reading_parent(Turn(text="Delegating.", calls=[("t1", "task", {"task": "count", "agent": "reader"})]), 0)
    with ScriptedFake(make_script(plan), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        model = HttpModel(client_for("openai", fake.openai_base_url, MODELS["openai"], api_key="k"))
        subagents = SubAgents(definitions=[AgentDefinition(), reader])
        agent = create_agent(model, workspace=Workspace([root], allow_shell=True, model=MODELS["openai"]),
                             config=AgentConfig(max_tokens=MAX_OUTPUT), window=WINDOW, max_output=MAX_OUTPUT,
                             extra_tools=[subagents.tool()])
        subagents.attach(agent)
        agent.run("Turn 1: go")
        requests = generation_requests(fake)
    parent_tools = {t["function"]["name"] for t in requests[0].body["tools"]}
    assert {"shell", "task"} <= parent_tools
    child = next(r for r in requests if _kind(_msgs("openai", r.body)) == "child")
    assert [t["function"]["name"] for t in child.body["tools"]] == ["read", "grep"]  # no shell: read-only
    messages = _msgs("openai", child.body)
    assert messages[0].text.startswith("You only read.")
    assert [m.role for m in messages] == ["system", "user", "user"]
    assert "Use grep -c for counts." in messages[1].text and messages[2].text == "Task: count"


@pytest.mark.parametrize("depth", [1, 2])
def test_the_depth_limit(depth: int, tmp_path: Path) -> None:
    root = workspace(tmp_path)

    def child(messages: list[Message]) -> Turn:
        task = next(m.text for m in messages if m.role == "user" and m.text.startswith("Task: "))
        if task == "Task: outer" and messages[-1].role == "user":
            return Turn(calls=[("g1", "task", {"task": "inner"})])
        return Turn(text=f"answer to <{task[6:]}>")

    plan = reading_parent(Turn(text="Delegating.", calls=[("t1", "task", {"task": "outer"})]), 0)
    with ScriptedFake(make_script(plan, child=child), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path, [], SubagentLimits(max_depth=depth))
        agent.run("Turn 1: go")
        requests = generation_requests(fake)
        agent.engine.session.close()
    children = [r for r in requests if _kind(_msgs("openai", r.body)) == "child"]
    offered = {t["function"]["name"] for t in children[0].body["tools"]}
    if depth == 1:  # a child of the main agent may not spawn: it is not even offered the tool
        assert "task" not in offered
        outer = next(r.text for m in _msgs("openai", children[-1].body) for r in m.tool_results if r.call_id == "g1")
        assert "Unknown tool 'task'" in outer
    else:
        assert "task" in offered
        assert any(_msgs("openai", r.body)[-1].text == "Task: inner" for r in children)


def test_the_concurrency_limits_of_the_tree_and_of_one_agent(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    lock = threading.Lock()
    state = {"now": 0, "max": 0}

    def slow_child(messages: list[Message]) -> Turn:
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.3)
        with lock:
            state["now"] -= 1
        return Turn(text=f"done <{messages[-1].text[6:]}>")

    tasks = [f"job {n}" for n in range(1, 5)]
    plan = reading_parent(Turn(text="Fan out.", calls=[("p", "task", {"tasks": tasks, "mode": "parallel"})]), 0)
    with ScriptedFake(make_script(plan, child=slow_child), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path / "a", [], SubagentLimits(max_concurrent=2))
        agent.run("Turn 1: go")
        answer = next(r.text for m in _msgs("openai", generation_requests(fake)[-1].body) for r in m.tool_results
                      if r.call_id == "p")
        agent.engine.session.close()
    assert state["max"] == 2  # the tree's slots, though 4 may start at once
    assert all(f"done <job {n}>" in answer for n in range(1, 5))

    state["max"] = 0
    with ScriptedFake(make_script(plan, child=slow_child), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path / "b", [], SubagentLimits(max_children_per_agent=1))
        agent.run("Turn 1: go")
        answer = next(r.text for m in _msgs("openai", generation_requests(fake)[-1].body) for r in m.tool_results
                      if r.call_id == "p")
        agent.engine.session.close()
    assert state["max"] == 1
    assert answer.count("this agent already runs 1 sub-agents") == 3 and answer.count("done <job") == 1
