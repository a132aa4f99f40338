"""Background sub-agents (Claude Code's async agents): `task(background=true)` returns a handle at once,
the parent polls, waits for or cancels it, and a finished child's result comes into the parent's log
before its next call, as the result of a `task_wait` call, so the engine budgets it like any tool
result. Held calls make every "while" here an order of events."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from agent_fake import ScriptedFake, Turn
from ctxwin.agent import LoopEvent
from ctxwin.agent.subagents import BACKGROUND_RESULT, SubagentLimits
from ctxwin.engine import ContextEngine
from ctxwin.messages import Message
from ctxwin.messages.pairing import validate
from ctxwin.store import Session
from subagent_fake import (
    MAX_OUTPUT,
    MODELS,
    WINDOW,
    Hold,
    generation_requests,
    kind_of,
    messages_of,
    setup,
    workspace,
)

PROVIDER = {"anthropic": "anthropic", "openai": "openai_chat"}


def child_task(messages: list[Message]) -> str:
    return next(m.text for m in messages if m.role == "user" and m.text.startswith("Task: "))[6:]


def results(messages: list[Message]) -> dict[str, str]:
    return {r.call_id: r.text for m in messages for r in m.tool_results}


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_background_child_finishes_while_the_parent_works_and_its_result_comes_in(api: str, tmp_path: Path) -> None:
    root = workspace(tmp_path)
    hold = Hold()

    def script(api_name: str, messages: list[Message]) -> Turn:
        if kind_of(messages) == "child":
            hold.hold(child_task(messages))
            return Turn(text="the answer is 42")
        seen = results(messages)
        if "b1" not in seen and not any(c.id == "b1" for m in messages for c in m.tool_calls):
            return Turn(text="Starting it.", calls=[("b1", "task", {"task": "find the answer", "background": True})])
        if "ctxwin_bg_1" not in seen:
            reads = sum(1 for m in messages for c in m.tool_calls if c.name == "read")
            if reads == 0:  # the child runs while the parent works: its call is held at the fake now
                hold.wait_for_calls(1)
                hold.mark("parent working")
                hold.release()
            return Turn(text="Working.", calls=[(f"r{reads}", "read", {"path": f"docs/f00{reads % 8}.txt"})])
        return Turn(text=f"Done: {seen['ctxwin_bg_1'].rsplit(chr(10), 1)[-1]}")

    events: list[LoopEvent] = []
    with ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, subagents = setup(fake, api, root, tmp_path, events)
        result = agent.run("Turn 1: start it, then work")
        requests = [messages_of(api, r.body) for r in generation_requests(fake)]
        agent.engine.session.close()
    assert result.stop == "done" and result.text == "Done: the answer is 42"
    assert hold.log.index("call:find the answer") < hold.log.index("parent working") < \
        hold.log.index("done:find the answer")
    parent = [m for m in requests if kind_of(m) == "parent"]
    handle = results(parent[1])["b1"]  # the parent's very next request: the handle, the child still running
    assert handle.startswith("Started background task bg-1 (default, isolated): find the answer")
    arrived = next(i for i, m in enumerate(parent) if "ctxwin_bg_1" in results(m))
    assert arrived == len(parent) - 1 and any(c.name == "read" for m in parent[arrived] for c in m.tool_calls)
    assert results(parent[arrived])["ctxwin_bg_1"].startswith("[background task bg-1: find the answer]\n"
                                                              "[sub-agent main.1 (isolated) stopped: done")
    # In the log: a task_wait call marked as ctxwin's and its result (budgeted by the stages like any other).
    with Session.open(tmp_path / "parent") as log:
        messages = ContextEngine(log, model=MODELS[api], window=WINDOW, max_output=MAX_OUTPUT).messages
    call = next(m for m in messages if any(c.id == "ctxwin_bg_1" for c in m.tool_calls))
    assert call.meta == {"ctxwin": BACKGROUND_RESULT} and call.tool_calls[0].name == "task_wait"
    assert validate(messages, PROVIDER[api]) == []
    assert [e.data["action"] for e in events if e.kind == "subagent"] == ["background", "start", "end", "delivered"]
    assert subagents.status() == [{"handle": "bg-1", "state": "collected", "agent": "default", "steps": 1,
                                   "task": "find the answer", "stop": "done"}]
    assert agent.totals()["model_calls"] == agent.stats.model_calls + 1


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_status_wait_and_cancel(api: str, tmp_path: Path) -> None:
    root = workspace(tmp_path)
    hold = Hold()
    plan = [
        [("a", "task", {"task": "job a", "background": True}), ("b", "task", {"task": "job b", "background": True})],
        [("s", "task_status", {})],
        [("c", "task_cancel", {"handle": "bg-2"})],
        [("w", "task_wait", {"handles": ["bg-1"], "timeout_s": 30})],
        [("x", "task_wait", {"handles": ["bg-9"]})],
    ]

    def script(api_name: str, messages: list[Message]) -> Turn:
        if kind_of(messages) == "child":
            hold.hold(child_task(messages))
            return Turn(text=f"finished {child_task(messages)}")
        n = sum(1 for m in messages if m.role == "assistant")
        if n == 1:
            hold.wait_for_calls(2)  # both children running before the parent polls
        if n == 3:
            hold.release()  # bg-1 may finish once the parent waits for it
        return Turn(text="Next.", calls=plan[n]) if n < len(plan) else Turn(text="All done.")

    with ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, subagents = setup(fake, api, root, tmp_path, [])
        result = agent.run("Turn 1: go")
        seen = results(messages_of(api, generation_requests(fake)[-1].body))
        agent.engine.session.close()
    assert result.stop == "done"
    assert "bg-1" in seen["a"] and "bg-2" in seen["b"]
    assert seen["s"].splitlines()[:2] == ["bg-1: running (default, 1 steps so far) - job a",
                                          "bg-2: running (default, 1 steps so far) - job b"]
    assert seen["c"].startswith("[background task bg-2: job b]\n[sub-agent main.")
    assert "stopped: interrupted" in seen["c"]
    assert "finished job a" in seen["w"] and "stopped: done" in seen["w"]
    assert "no background task bg-9" in seen["x"]
    assert "ctxwin_bg_1" not in seen and "ctxwin_bg_2" not in seen  # collected by the tools: not delivered again
    assert hold.calls() == ["job a", "job b"] or hold.calls() == ["job b", "job a"]
    assert [j["state"] for j in subagents.status()] == ["collected", "collected"]


def test_a_parent_that_answers_while_a_child_runs_waits_for_it_and_goes_on(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    hold = Hold()

    def script(api_name: str, messages: list[Message]) -> Turn:
        if kind_of(messages) == "child":
            hold.hold("child")
            return Turn(text="late answer")
        seen = results(messages)
        if not seen:
            return Turn(text="Starting it.", calls=[("b1", "task", {"task": "slow job", "background": True})])
        if "ctxwin_bg_1" not in seen:
            hold.wait_for_calls(1)
            hold.release()
            return Turn(text="I have nothing else to do.")
        return Turn(text="All done, with the late answer.")

    events: list[LoopEvent] = []
    with ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, "anthropic", root, tmp_path, events)
        result = agent.run("Turn 1: go")
        agent.engine.session.close()
    assert result.stop == "done" and result.text == "All done, with the late answer."
    actions = [e.data.get("action") for e in events if e.kind == "subagent"]
    assert actions.index("waiting") < actions.index("delivered")
    dones = [(e.agent, e.depth) for e in events if e.kind == "done"]
    assert dones == [("main.1", 1), ("", 0)]  # the child's, then the parent's, once it had the child's answer
    with Session.open(tmp_path / "parent") as log:
        messages = ContextEngine(log, model=MODELS["anthropic"], window=WINDOW, max_output=MAX_OUTPUT).messages
    assert [m.role for m in messages[-4:]] == ["assistant", "assistant", "tool", "assistant"]
    assert validate(messages, "anthropic") == []


def test_background_children_count_against_the_per_agent_limit_and_an_interrupt_stops_them(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    hold = Hold()
    calls = [(f"b{n}", "task", {"task": f"job {n}", "background": True}) for n in range(3)]

    def script(api_name: str, messages: list[Message]) -> Turn:
        if kind_of(messages) == "child":
            hold.hold(child_task(messages))
            return Turn(text="never seen")
        if not results(messages):
            return Turn(text="Three.", calls=calls)
        return Turn(text="Waiting.", calls=[("w", "task_wait", {"timeout_s": 30})])

    with ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, subagents = setup(fake, "openai", root, tmp_path, [], SubagentLimits(max_children_per_agent=2))
        outcome: dict[str, object] = {}
        worker = threading.Thread(target=lambda: outcome.update(result=agent.run("Turn 1: go")))
        worker.start()
        hold.wait_for_calls(2)
        hold.mark("interrupt")
        agent.interrupt()
        worker.join(30)
        stopped_while_held = not worker.is_alive() and not any(e.startswith("done:") for e in hold.log)
        for job in subagents.background.values():
            job.done.wait(30)
        hold.release()
        agent.engine.session.close()
    assert stopped_while_held and outcome["result"].stop == "interrupted"  # type: ignore[attr-defined]
    with Session.open(tmp_path / "parent") as log:
        messages = ContextEngine(log, model=MODELS["openai"], window=WINDOW, max_output=MAX_OUTPUT).messages
    seen = results(messages)
    assert sum("already runs 2 sub-agents" in seen[f"b{n}"] for n in range(3)) == 1
    assert [job.result.stop for job in subagents.background.values() if job.result] == ["interrupted"] * 2
    assert hold.calls(after="interrupt") == []
    assert validate(messages, "openai_chat") == []


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_background_fork_forks_from_where_it_was_asked_for_though_it_starts_later(api: str, tmp_path: Path) -> None:
    # One slot in the tree, taken by a held child: the fork waits for it while the parent goes on, so it
    # is built after the parent's log has moved past the call that asked for it.
    root = workspace(tmp_path)
    hold = Hold()
    first = [("h", "task", {"task": "hold the slot", "background": True}),
             ("f", "task", {"task": "side check", "context": "fork", "background": True})]

    def script(api_name: str, messages: list[Message]) -> Turn:
        kind = kind_of(messages)
        if kind == "child":
            hold.hold(child_task(messages))
            return Turn(text="slot released")
        if kind == "fork":
            return Turn(text="fork done")
        seen = results(messages)
        if not seen:
            return Turn(text="Two in the background.", calls=first)
        if "ctxwin_bg_2" not in seen:
            reads = sum(1 for m in messages for c in m.tool_calls if c.name == "read")
            if reads == 1:
                hold.release()  # the parent has gone on: now the fork may have the slot
            return Turn(text="Working.", calls=[(f"r{reads}", "read", {"path": f"docs/f00{reads % 8}.txt"})])
        return Turn(text="All done.")

    with ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, api, root, tmp_path, [], SubagentLimits(max_concurrent=1))
        result = agent.run("Turn 1: go")
        requests = [messages_of(api, r.body) for r in generation_requests(fake)]
        agent.engine.session.close()
    assert result.stop == "done"
    fork = next(m for m in requests if kind_of(m) == "fork")
    assert any(c.id == "f" for m in fork for c in m.tool_calls)  # cloned from the message that asked for it
    assert not any(c.name == "read" for m in fork for c in m.tool_calls)  # nothing the parent did after
    delivered = results(requests[-1])["ctxwin_bg_2"]
    assert "(fork) stopped: done" in delivered and delivered.endswith("fork done")


def test_a_cancel_just_before_a_background_child_runs_is_not_cleared_by_its_run(tmp_path: Path) -> None:
    # task_cancel sets the job's own cancel; the child's run clears its cancel as every run does (a
    # new turn after Ctrl-C): that must not clear the job's, or a cancel that lands just before the
    # run starts (here: while its start is reported) is lost and the child runs to its end.
    root = workspace(tmp_path)
    asked: list[str] = []

    def script(api_name: str, messages: list[Message]) -> Turn:
        asked.append(kind_of(messages))
        return Turn(text="finished anyway")

    class CancelAtStart(list[LoopEvent]):
        def append(self, event: LoopEvent) -> None:
            super().append(event)
            if event.kind == "subagent" and event.data.get("action") == "start":
                subagents.cancel("bg-1", timeout=0)

    events = CancelAtStart()
    with ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, subagents = setup(fake, "openai", root, tmp_path, events)
        handle = subagents.start("job a")
        (job,) = subagents.wait([handle], timeout=30)
        agent.engine.session.close()
    assert job.done.is_set() and job.result is not None
    assert job.result.stop == "interrupted" and asked == []  # stopped before its first model call
    assert job.state() == "finished" and job.cancel.is_set()


def test_background_children_a_run_leaves_are_stopped_when_ctxwin_run_ends(tmp_path: Path) -> None:
    # The run stops on max_steps while its background child's model call is held at the fake: ctxwin
    # run must stop that child (its log ends, the totals say how it ended) rather than exit with it
    # still running, and so must `SubAgents.close()` for the library.
    import json

    from typer.testing import CliRunner

    from ctxwin.cli.main import app

    root = workspace(tmp_path)
    hold = Hold()

    def script(api_name: str, messages: list[Message]) -> Turn:
        if kind_of(messages) == "child":
            hold.hold(child_task(messages))
            return Turn(text="finished too late")
        n = sum(1 for m in messages if m.role == "assistant")
        if n == 0:
            return Turn(text="Starting it.", calls=[("b1", "task", {"task": "slow job", "background": True})])
        hold.wait_for_calls(1)  # the child is running when the parent's last step is answered
        return Turn(text="Reading.", calls=[("r1", "read", {"path": "docs/f001.txt"})])

    session = tmp_path / "runs" / "s"
    with ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        try:
            result = CliRunner().invoke(app, [
                "run", "Turn 1: start it", "--base-url", fake.openai_base_url, "--api-key", "k", "--session",
                str(session), "--workspace", str(root), "--window", str(WINDOW), "--max-output", str(MAX_OUTPUT),
                "--max-steps", "2", "--json"])
            stopped_while_held = not any(e.startswith("done:") for e in hold.log)
        finally:
            hold.release()
    assert result.exit_code == 0, result.output
    totals = json.loads(result.output.splitlines()[-1])
    assert totals["stop"] == "max_steps" and stopped_while_held
    (child,) = [row for row in totals["agents"] if row["depth"] == 1]
    assert child["background"] and child["stop"] == "interrupted"  # not "running": it was stopped, not orphaned
    folder = Path(child["session"])
    with Session.open(folder) as log:
        assert not log.problems
        assert validate(ContextEngine(log, model=MODELS["openai"], window=WINDOW, max_output=MAX_OUTPUT).messages,
                        "openai_chat") == []
