"""Sub-agents, checked at the server: what an isolated child and a fork really send."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent_fake import ScriptedFake, Turn, make_workspace
from ctxwin.agent import AgentConfig, HttpModel, LoopEvent, create_agent
from ctxwin.agent.subagents import FORK_SELF_PLACEHOLDER, FORK_TAG, AgentDefinition, SubagentLimits, SubAgents
from ctxwin.engine import ContextEngine
from ctxwin.messages import Message
from ctxwin.providers import client_for
from ctxwin.store import Session
from ctxwin.tools import ToolOutput, ToolSpec, Workspace
from subagent_fake import (
    MAX_OUTPUT,
    MODELS,
    SECRET,
    WINDOW,
    generation_requests,
    kind_of,
    make_script,
    messages_of,
    no_cache,
    reading_parent,
    setup,
    task_result,
    transcript_of,
    workspace,
)


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
    child_first = next(r for r in requests if kind_of(messages_of(api, r.body)) == "child")
    body = json.dumps(child_first.body)
    assert SECRET not in body and "Reading 0." not in body and "file 000 line" not in body
    child_messages = messages_of(api, child_first.body)
    assert [m.role for m in child_messages] == ["system", "user"]
    assert child_messages[1].text == "Task: count the lines of docs/f001.txt"
    assert "agents-file-marker" in child_messages[0].text and "tools-file-marker" in child_messages[0].text
    assert "claude-file-marker" not in body
    assert "memory-file-marker" not in body and "notes-file-marker" not in body  # not in the allowlist
    # The answer came back as the task's tool result, with a ref to the child's stored session.
    parent_last = messages_of(api, requests[-1].body)
    answer = next(r.text for m in parent_last for r in m.tool_results if r.call_id == "t1")
    assert "answer to <count the lines of docs/f001.txt>" in answer and "full transcript:" in answer
    child_dir = transcript_of(answer)
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
    kinds = [kind_of(messages_of(api, r.body)) for r in requests]
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
    assert json.dumps(no_cache(clone)) == json.dumps(no_cache(original))
    tail = json.dumps(forked["messages"][n:])
    assert "k1" in tail and "k2" in tail and f"<{FORK_TAG}>" in tail and "check f002" in tail
    # The fake's prefix-cache accounting: the fork read the parent's prefix back.
    usage = fork_first.response["usage"]
    cached = usage.get("cache_read_input_tokens") if api == "anthropic" else \
        usage["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 1024
    assert cached >= 0.8 * (parent_last.input_tokens or 0)


def input_and_cached(api: str, usage: dict[str, Any]) -> tuple[int, int]:
    """(all input tokens, of which read from the cache), from a response's usage."""
    if api == "anthropic":
        cached = usage.get("cache_read_input_tokens") or 0
        return usage["input_tokens"] + cached + (usage.get("cache_creation_input_tokens") or 0), cached
    return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_fork_at_a_masking_batch_boundary_sends_the_parents_prefix_and_reads_it_from_the_cache(
        api: str, tmp_path: Path) -> None:
    # 11 reads in a 60K window: with the fork's clone and placeholders, 9 results are older than the
    # policy's last 4, over its batch of 8, so the next request's own pipeline masks them (the parent's
    # next request does). The fork's first request must still be the parent's last one as it was sent.
    root = make_workspace(tmp_path / "ws", files=16, lines=40)
    then = Turn(text="Forking a side check.", calls=[("k1", "task", {"task": "check f002", "context": "fork"}),
                                                      ("k2", "read", {"path": "docs/f005.txt"})])

    def fork(messages: list[Message]) -> Turn:  # one read of its own, then the answer
        if messages[-1].role == "user":
            return Turn(text="Fork reading.", calls=[("fr", "read", {"path": "docs/f012.txt"})])
        return Turn(text="fork done")

    window = 60_000
    with ScriptedFake(make_script(reading_parent(then, reads=11), fork=fork), context_window=window,
                      max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, api, root, tmp_path, [], window=window)
        assert agent.run("Turn 1: read, then fork.").stop == "done"
        requests = generation_requests(fake)
        agent.engine.session.close()
    kinds = [kind_of(messages_of(api, r.body)) for r in requests]
    fork_at = kinds.index("fork")
    parent_last, fork_first, fork_second = requests[fork_at - 1], requests[fork_at], requests[fork_at + 1]
    parent_next = requests[fork_at + 2]
    assert kinds[fork_at - 1: fork_at + 3] == ["parent", "fork", "fork", "parent"]
    cleared = "cleared to save context"
    assert cleared not in json.dumps(parent_last.body) and cleared in json.dumps(parent_next.body)  # the boundary
    n = len(parent_last.body["messages"])
    for key in ("system", "tools", "model"):
        assert json.dumps(fork_first.body.get(key)) == json.dumps(parent_last.body.get(key))
    assert [json.dumps(m) for m in fork_first.body["messages"][:n]] == \
        [json.dumps(m) for m in parent_last.body["messages"]]
    total, cached = input_and_cached(api, fork_first.response["usage"])
    assert cached >= 0.9 * total
    # From its second request on the fork decides for itself: it masks as the parent does.
    assert cleared in json.dumps(fork_second.body)


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
    fork_second = [r for r in requests if kind_of(messages_of(api, r.body)) == "fork"][1]
    refusal = next(r.text for m in messages_of(api, fork_second.body) for r in m.tool_results if r.call_id == "ff")
    assert "a fork cannot fork" in refusal
    parent_last = messages_of(api, requests[-1].body)
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
    assert [kind_of(messages_of(api, r.body)) for r in requests].count("fork") == 0
    child = next(r for r in requests if kind_of(messages_of(api, r.body)) == "child")
    assert [m.role for m in messages_of(api, child.body)] == ["system", "user"]
    answer = next(r.text for m in messages_of(api, requests[-1].body) for r in m.tool_results if r.call_id == "c")
    assert answer.split("\n\n")[1].startswith("[fork fell back to isolated: the parent's view is ")
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
    answer = next(r.text for m in messages_of("openai", requests[-1].body) for r in m.tool_results if r.call_id == "p")
    positions = [answer.index(f"result of <job {n}>") for n in range(1, 7)]
    assert positions == sorted(positions)
    assert [answer.index(f"## Task {n}") for n in range(1, 7)] == sorted(answer.index(f"## Task {n}")
                                                                        for n in range(1, 7))

    too_many = [f"job {n}" for n in range(9)]
    plan = reading_parent(Turn(text="Too many.", calls=[("q", "task", {"tasks": too_many, "mode": "parallel"})]), 0)
    with ScriptedFake(make_script(plan), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path / "b", [])
        agent.run("Turn 1: go")
        last = messages_of("openai", generation_requests(fake)[-1].body)
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
    children = [r for r in requests if kind_of(messages_of("openai", r.body)) == "child"]
    assert messages_of("openai", children[1].body)[-1].text == "Task: second after answer to <first>"


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
    child = next(r for r in requests if kind_of(messages_of("openai", r.body)) == "child")
    assert [t["function"]["name"] for t in child.body["tools"]] == ["read", "grep"]  # no shell: read-only
    messages = messages_of("openai", child.body)
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
    children = [r for r in requests if kind_of(messages_of("openai", r.body)) == "child"]
    offered = {t["function"]["name"] for t in children[0].body["tools"]}
    if depth == 1:  # a child of the main agent may not spawn: it is not even offered the tool
        assert "task" not in offered
        outer = next(r.text for m in messages_of("openai", children[-1].body) for r in m.tool_results
                     if r.call_id == "g1")
        assert "Unknown tool 'task'" in outer
    else:
        assert "task" in offered
        assert any(messages_of("openai", r.body)[-1].text == "Task: inner" for r in children)


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
        answer = next(r.text for m in messages_of("openai", generation_requests(fake)[-1].body) for r in m.tool_results
                      if r.call_id == "p")
        agent.engine.session.close()
    assert state["max"] == 2  # the tree's slots, though 4 may start at once
    assert all(f"done <job {n}>" in answer for n in range(1, 5))

    state["max"] = 0
    with ScriptedFake(make_script(plan, child=slow_child), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path / "b", [], SubagentLimits(max_children_per_agent=1))
        agent.run("Turn 1: go")
        answer = next(r.text for m in messages_of("openai", generation_requests(fake)[-1].body) for r in m.tool_results
                      if r.call_id == "p")
        agent.engine.session.close()
    assert state["max"] == 1
    assert answer.count("this agent already runs 1 sub-agents") == 3 and answer.count("done <job") == 1


def test_totals_count_the_whole_tree(tmp_path: Path) -> None:
    root = workspace(tmp_path)

    def child(messages: list[Message]) -> Turn:  # a read, then the answer: two calls each
        if messages[-1].role == "user":
            return Turn(text="Reading.", calls=[("c", "read", {"path": "docs/f001.txt"})])
        return Turn(text="child done")

    tasks = ["job 1", "job 2", "job 3"]
    plan = reading_parent(Turn(text="Fan out.", calls=[("p", "task", {"tasks": tasks, "mode": "parallel"})]), reads=1)
    with ScriptedFake(make_script(plan, child=child), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path, [], input_usd_per_mtok=3.0, output_usd_per_mtok=15.0)
        assert agent.run("Turn 1: go").stop == "done"
        served = len(generation_requests(fake))
        agent.engine.session.close()
    totals = agent.totals()
    assert agent.stats.model_calls == 3 and totals["model_calls"] == 3 + 3 * 2 == served
    rows = {row["agent"]: row for row in totals["agents"]}
    assert sorted(rows) == ["main", "main.1", "main.2", "main.3"]
    assert [rows[a]["depth"] for a in sorted(rows)] == [0, 1, 1, 1]
    assert all(rows[a]["model_calls"] == 2 and rows[a]["stop"] == "done" for a in ("main.1", "main.2", "main.3"))
    for key in ("input_tokens", "output_tokens", "steps"):
        assert totals[key] == sum(row[key] for row in rows.values()) > rows["main"][key]
    assert totals["cost_usd"] == pytest.approx(sum(row["cost_usd"] for row in rows.values()), abs=1e-5)
    assert totals["cost_usd"] > agent.stats.cost_usd > 0


def test_the_cost_limit_bounds_a_run_whose_children_spend_it(tmp_path: Path) -> None:
    root = workspace(tmp_path)

    def child(messages: list[Message]) -> Turn:  # would read 12 files, then answer
        reads = sum(1 for m in messages if m.role == "tool")
        if reads < 12:
            return Turn(text=f"Reading {reads}.", calls=[(f"c{reads}", "read", {"path": f"docs/f00{reads % 8}.txt"})])
        return Turn(text="child done")

    limit = 0.03
    tasks = ["job 1", "job 2", "job 3"]
    plan = reading_parent(Turn(text="Fan out.", calls=[("p", "task", {"tasks": tasks, "mode": "parallel"})]), reads=0)
    with ScriptedFake(make_script(plan, child=child), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path, [], max_cost_usd=limit, input_usd_per_mtok=3.0,
                         output_usd_per_mtok=15.0)
        result = agent.run("Turn 1: go")
        agent.engine.session.close()
    totals = agent.totals()
    children = [row for row in totals["agents"] if row["depth"] == 1]
    assert result.stop == "max_cost" and agent.stats.model_calls == 1  # no call after the children spent it
    assert agent.stats.cost_usd < limit <= totals["cost_usd"]  # the parent alone is far under: the tree is not
    assert [row["stop"] for row in children] == ["max_cost"] * 3
    assert totals["model_calls"] < 1 + 3 * 13  # what they would have made unbounded
    # Over by at most one call per child running when the limit was reached (each checks before its call).
    largest_call = (totals["max_request_tokens"] * 3.0 + MAX_OUTPUT * 15.0) / 1e6
    assert totals["cost_usd"] <= limit + 3 * largest_call


def test_a_spilled_result_keeps_its_transcript_ref_in_the_preview(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    long_answer = "\n".join(f"finding {n:05d}: " + "x" * 60 for n in range(400))  # ~30K characters: spilled

    def child(messages: list[Message]) -> Turn:
        return Turn(text=long_answer)

    plan = reading_parent(Turn(text="Delegating.", calls=[("t1", "task", {"task": "list everything"})]), reads=0)
    with ScriptedFake(make_script(plan, child=child), context_window=60_000, max_output=10_000) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path, [], window=60_000, max_output=10_000)
        agent.run("Turn 1: go")
        seen = task_result("openai", generation_requests(fake)[-1].body, "t1")
        agent.engine.session.close()
    assert seen.startswith("[Output too large for the context") and "finding 00399" not in seen
    assert transcript_of(seen.split("Preview (first ", 1)[1].split("\n", 1)[1]).is_dir()


def test_parallel_forks_each_see_the_call_that_started_them_as_their_own(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    call = ("p", "task", {"tasks": ["side a", "side b"], "mode": "parallel", "context": "fork"})
    with ScriptedFake(make_script(reading_parent(Turn(text="Two forks.", calls=[call]), reads=1)),
                      context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "openai", root, tmp_path, [])
        agent.run("Turn 1: go")
        forks = [r for r in generation_requests(fake) if kind_of(messages_of("openai", r.body)) == "fork"]
        agent.engine.session.close()
    assert len(forks) == 2
    for request in forks:
        assert task_result("openai", request.body, "p") == FORK_SELF_PLACEHOLDER


def test_a_hand_written_tool_spec_without_required_or_properties_runs(tmp_path: Path) -> None:
    root = workspace(tmp_path)

    def run(ws: Any, **args: Any) -> ToolOutput:
        return ToolOutput(f"got {sorted(args.items())}")

    echo = ToolSpec("echo", "Echo the text.", {"type": "object", "properties": {"text": {"type": "string"}}}, run)
    ping = ToolSpec("ping", "Ping.", {"type": "object"}, run)
    calls = [("e1", "echo", {"text": "hi"}), ("e2", "ping", {"anything": 1}), ("e3", "echo", {"other": 1})]

    def plan(n: int) -> Turn:
        return Turn(text="Calling.", calls=calls) if n == 0 else Turn(text="All done.")

    with ScriptedFake(make_script(plan), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        model = HttpModel(client_for("openai", fake.openai_base_url, MODELS["openai"], api_key="k"))
        agent = create_agent(model, workspace=Workspace([root], model=MODELS["openai"]), window=WINDOW,
                             max_output=MAX_OUTPUT, config=AgentConfig(max_tokens=MAX_OUTPUT), extra_tools=[echo, ping])
        result = agent.run("Turn 1: go")
        last = generation_requests(fake)[-1].body
    assert result.stop == "done"
    assert task_result("openai", last, "e1") == "got [('text', 'hi')]"
    assert task_result("openai", last, "e2") == "got [('anything', 1)]"  # no properties: any argument
    assert "echo has no argument other" in task_result("openai", last, "e3")
