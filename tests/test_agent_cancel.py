"""One cancel for the whole tree: an interrupt stops the running children, and the ones still queued
(or later in a chain) never start; the parent returns while its children's model calls are still
held at the fake, its open `task` call answered with what they returned so far; the log validates and
resumes. In process (both APIs), and `ctxwin run` under SIGINT in a real process.

Held calls wait in the fake's server thread until the test releases them (`Hold`), so every "before"
here is an order of events, not a time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_fake import ScriptedFake, Turn
from ctxwin.agent import Cancel, LoopEvent
from ctxwin.engine import ContextEngine
from ctxwin.messages import Message, Text, ToolCall
from ctxwin.messages.pairing import validate
from ctxwin.store import Session
from subagent_fake import (
    HOLD_S,
    MAX_OUTPUT,
    MODELS,
    WINDOW,
    Hold,
    make_script,
    messages_of,
    reading_parent,
    setup,
    workspace,
)

SRC = Path(__file__).resolve().parents[1] / "src"
PROVIDER = {"anthropic": "anthropic", "openai": "openai_chat"}


def held_child(hold: Hold) -> Any:
    def child(messages: list[Message]) -> Turn:
        task = next(m.text for m in messages if m.role == "user" and m.text.startswith("Task: "))[6:]
        hold.hold(task)
        return Turn(text=f"answer to <{task}>")
    return child


def stored_messages(folder: Path, api: str) -> list[Message]:
    with Session.open(folder) as log:
        assert not log.problems
        return ContextEngine(log, model=MODELS[api], window=WINDOW, max_output=MAX_OUTPUT).messages


def run_in_thread(agent: Any) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: outcome.update(result=agent.run("Turn 1: delegate")))
    worker.start()
    return worker, outcome


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_an_interrupt_stops_running_children_and_queued_ones_never_start(api: str, tmp_path: Path) -> None:
    root = workspace(tmp_path)
    hold = Hold()
    tasks = [f"job {n}" for n in range(1, 7)]  # 4 run at once (parallel_at_once), 2 wait for a worker
    plan = reading_parent(Turn(text="Fan out.", calls=[("p", "task", {"tasks": tasks, "mode": "parallel"})]), reads=0)
    events: list[LoopEvent] = []
    with ScriptedFake(make_script(plan, child=held_child(hold)), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, api, root, tmp_path, events)
        worker, outcome = run_in_thread(agent)
        hold.wait_for_calls(4)
        hold.mark("interrupt")
        agent.interrupt()
        worker.join(HOLD_S)
        returned_while_held = not worker.is_alive() and not any(e.startswith("done:") for e in hold.log)
        hold.release()
        agent.engine.session.close()
        assert returned_while_held  # the parent did not wait for its children's held calls
        assert outcome["result"].stop == "interrupted"
        assert len(hold.calls(before="interrupt")) == 4 and hold.calls(after="interrupt") == []
        starts = [e for e in events if e.kind == "subagent" and e.data.get("action") == "start"]
        assert len(starts) == 4  # the queued two never started
        # The open task call is answered, with what each child did; the log validates and resumes.
        messages = stored_messages(tmp_path / "parent", api)
        assert validate(messages, PROVIDER[api]) == []
        answer = next(r.text for m in messages for r in m.tool_results if r.call_id == "p")
        assert answer.count("stopped: interrupted after 1 steps") == 4
        assert answer.count("[sub-agent (isolated) not started: the requester was interrupted]") == 2
        for child in (tmp_path / "children").iterdir():
            assert validate(stored_messages(child, api), PROVIDER[api]) == []
        resumed, _ = setup(fake, api, root, tmp_path, [])
        result = resumed.resume()
        resumed.engine.session.close()
    assert result is not None and result.stop == "done" and result.text == "All done."
    assert validate(stored_messages(tmp_path / "parent", api), PROVIDER[api]) == []
    totals = agent.totals()
    assert totals["model_calls"] == 1 + 4 and len(totals["agents"]) == 1 + 4  # the queued two made no record


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_an_interrupt_ends_a_chain_where_it_is(api: str, tmp_path: Path) -> None:
    root = workspace(tmp_path)
    hold = Hold()
    tasks = ["first", "second after {previous}", "third after {previous}"]
    plan = reading_parent(Turn(text="Chain.", calls=[("c", "task", {"tasks": tasks, "mode": "chain"})]), reads=0)
    with ScriptedFake(make_script(plan, child=held_child(hold)), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, _ = setup(fake, api, root, tmp_path, [])
        worker, outcome = run_in_thread(agent)
        hold.wait_for_calls(1)
        hold.mark("interrupt")
        agent.interrupt()
        worker.join(HOLD_S)
        returned_while_held = not worker.is_alive() and "done:first" not in hold.log
        hold.release()
        agent.engine.session.close()
        assert returned_while_held and outcome["result"].stop == "interrupted"
        assert hold.calls() == ["first"]  # the rest of the chain never started
        messages = stored_messages(tmp_path / "parent", api)
        assert validate(messages, PROVIDER[api]) == []
        answer = next(r.text for m in messages for r in m.tool_results if r.call_id == "c")
        assert "## Task 1\n[sub-agent main.1 (isolated) stopped: interrupted" in answer
        assert "## Task 2\n[sub-agent (isolated) not started: task 1 of the chain ended with interrupted]" in answer
        assert "## Task 3\n[sub-agent (isolated) not started: task 2 of the chain ended with not_started]" in answer
        resumed, _ = setup(fake, api, root, tmp_path, [])
        result = resumed.resume()
        resumed.engine.session.close()
    assert result is not None and result.stop == "done"


def test_a_task_call_run_again_after_a_resume_gets_new_child_sessions(tmp_path: Path) -> None:
    # A second Ctrl-C (or a crash) leaves the parent's task call unanswered while its children's
    # sessions are on disk; the resumed run calls it again in a new process, whose child ids start at 1
    # again. Its children must start afresh, not in the folders of the first attempt.
    import shutil

    root = workspace(tmp_path)
    api = "openai"
    parent = tmp_path / "parent"
    with Session.open(parent) as log:
        engine = ContextEngine(log, model=MODELS[api], window=WINDOW, max_output=MAX_OUTPUT)
        engine.append(Message("user", (Text("Turn 1: delegate"),)))
        engine.append(Message("assistant", (Text("Delegating."), ToolCall("t", "task", {"task": "job 1"}))))
    shutil.copytree(parent, tmp_path / "before")
    plan = reading_parent(Turn(text="All done."), reads=0)
    with ScriptedFake(make_script(plan), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        first, _ = setup(fake, api, root, tmp_path, [])
        assert first.resume() is not None
        first.engine.session.close()
        (earlier,) = (tmp_path / "children").iterdir()
        kept = (earlier / "session.jsonl").read_bytes()
        shutil.rmtree(parent)  # as if the process died before the task call's result was logged
        shutil.copytree(tmp_path / "before", parent)
        sent = len(fake.requests)
        again, _ = setup(fake, api, root, tmp_path, [])
        result = again.resume()
        again.engine.session.close()
        child_request = next(r for r in fake.requests[sent:] if r.status == 200
                             and "Task: " in json.dumps(r.body["messages"]))
    assert result is not None and result.stop == "done"
    tasks = [m for m in messages_of(api, child_request.body) if m.role == "user" and m.text.startswith("Task: ")]
    assert [m.text for m in tasks] == ["Task: job 1"]  # only its own task: nothing of the earlier attempt
    folders = sorted(p.name for p in (tmp_path / "children").iterdir())
    assert len(folders) == 2 and folders[1] == f"{earlier.name}-2" and (earlier / "session.jsonl").read_bytes() == kept
    assert {(tmp_path / "children" / f).stat().st_mode & 0o777 for f in folders} == {0o700}  # as Session.open makes
    answer = next(r.text for m in stored_messages(parent, api) for r in m.tool_results if r.call_id == "t")
    assert f"full transcript: {tmp_path / 'children' / folders[1]}]" in answer


def test_a_cancel_reaches_every_descendant_and_clearing_one_keeps_what_it_inherits() -> None:
    root = Cancel()
    child = root.child()
    grandchild = child.child()
    sibling = root.child()
    child.set()
    assert child.is_set() and grandchild.is_set() and not root.is_set() and not sibling.is_set()
    root.set()
    late = root.child()  # made after the interrupt, as a queued child's would be
    late.clear()  # what Agent.run() does first
    assert late.is_set() and sibling.wait(0) and late.wait(0.01)
    outside = threading.Event()  # a plain event given to an agent as its cancel
    linked = Cancel(outside)
    assert not linked.wait(0.01)
    threading.Timer(0.05, outside.set).start()
    assert linked.wait(5)


def test_a_sigint_landing_while_the_main_thread_links_a_child_cancel_does_not_hang() -> None:
    # ctxwin run's SIGINT handler calls agent.interrupt() -> cancel.set() on the main thread, which
    # may be holding the cancel's own lock at that moment (a task spawned from the main thread links
    # its child's cancel under it). A fresh process, so a hang is a timeout, not a stuck test run.
    code = (
        "import os, signal\n"
        "from ctxwin.agent.tree import Cancel\n"
        "root = Cancel()\n"
        "signal.signal(signal.SIGUSR1, lambda *_: root.set())\n"
        "with root._links:\n"
        "    os.kill(os.getpid(), signal.SIGUSR1)\n"
        "    child = root.child()\n"
        "print(root.is_set(), child.is_set())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["child", "set", "clear"]), st.integers(0, 50)), max_size=40))
def test_a_cancel_is_set_exactly_when_it_or_an_ancestor_was_set_and_it_was_not_cleared_since(
        ops: list[tuple[str, int]]) -> None:
    # The model: set() marks a node and every node under it at that moment; clear() unmarks the node
    # alone; a node is cancelled when it or any ancestor is marked.
    nodes, parents, marked = [Cancel()], [-1], [False]
    for op, pick in ops:
        i = pick % len(nodes)
        if op == "child":
            nodes.append(nodes[i].child())
            parents.append(i)
            marked.append(False)
        elif op == "set":
            nodes[i].set()
            for j in range(len(nodes)):
                k = j
                while k != -1 and k != i:
                    k = parents[k]
                if k == i:
                    marked[j] = True
        else:
            nodes[i].clear()
            marked[i] = False
        for j, node in enumerate(nodes):
            k, expected = j, False
            while k != -1:
                expected = expected or marked[k]
                k = parents[k]
            assert node.is_set() is expected


# ------------------------------------------------------------------------------------------------
# ctxwin run under SIGINT, a real process


def run_command(fake: ScriptedFake, api: str, root: Path, session: Path, *args: str) -> list[str]:
    url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
    return [sys.executable, "-m", "ctxwin.cli.main", "run", *args, "--base-url", url, "--api", api, "--session",
            str(session), "--workspace", str(root), "--window", str(WINDOW), "--max-output", str(MAX_OUTPUT),
            "--api-key", "test-key", "--json"]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC)}


@pytest.mark.slow  # two CLI processes, each paying ctxwin's import time
@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_ctxwin_run_stops_its_children_on_sigint_and_the_session_resumes(api: str, tmp_path: Path) -> None:
    root = workspace(tmp_path)
    hold = Hold()
    tasks = [f"job {n}" for n in range(1, 7)]
    plan = reading_parent(Turn(text="Fan out.", calls=[("p", "task", {"tasks": tasks, "mode": "parallel"})]), reads=0)
    session = tmp_path / "runs" / "s"
    with ScriptedFake(make_script(plan, child=held_child(hold)), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        process = subprocess.Popen(run_command(fake, api, root, session, "Turn 1: fan out"), env=child_env(),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            hold.wait_for_calls(4, timeout=60)
            hold.mark("interrupt")
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=HOLD_S)
            exited_while_held = not any(e.startswith("done:") for e in hold.log)
        finally:
            hold.release()
            if process.poll() is None:
                process.kill()
        assert exited_while_held, err
        assert process.returncode == 130, err
        assert "interrupting" in err and hold.calls(after="interrupt") == []
        lines = [json.loads(line) for line in out.splitlines()]
        totals = lines[-1]
        assert totals["stop"] == "interrupted"
        assert totals["model_calls"] == 5 and [row["depth"] for row in totals["agents"]] == [0, 1, 1, 1, 1]
        assert sum(1 for e in lines[:-1] if e["kind"] == "subagent" and e.get("action") == "start") == 4
        messages = stored_messages(session, api)
        assert validate(messages, PROVIDER[api]) == []
        answer = next(r.text for m in messages for r in m.tool_results if r.call_id == "p")
        assert answer.count("stopped: interrupted") == 4 and answer.count("not started") == 2
        again = subprocess.run(run_command(fake, api, root, session, "--resume"), env=child_env(), capture_output=True,
                               text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[-1])["stop"] == "done"
    assert validate(stored_messages(session, api), PROVIDER[api]) == []


@pytest.mark.slow
def test_a_second_sigint_exits_at_once_and_the_session_still_resumes(tmp_path: Path) -> None:
    # A tool that does not stop when told: a command that moved itself into its own session holds the
    # shell tool's output open after its process group is killed, so the first SIGINT cannot finish.
    root = workspace(tmp_path)
    stray = "41.6180339"
    command = f"if [ ! -e held ]; then touch held; setsid sleep {stray} & fi; wait"
    asked = threading.Event()

    def plan(n: int) -> Turn:
        if n == 0:
            asked.set()
            return Turn(text="Running it.", calls=[("s1", "shell", {"command": command})])
        return Turn(text="All done.")

    session = tmp_path / "runs" / "s"
    with ScriptedFake(make_script(plan), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        process = subprocess.Popen(run_command(fake, "openai", root, session, "Turn 1: run it", "--allow-shell"),
                                   env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert asked.wait(60)
            while not (root / "held").exists() and process.poll() is None:
                threading.Event().wait(0.02)
            process.send_signal(signal.SIGINT)
            assert process.stderr is not None
            assert "interrupting" in process.stderr.readline()
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=HOLD_S)
        finally:
            subprocess.run(["pkill", "-f", f"sleep {stray}"], check=False)
            if process.poll() is None:
                process.kill()
        assert process.returncode == 130
        assert "exiting now" in err
        assert all("kind" in json.loads(line) for line in out.splitlines())  # events only: no totals waited for
        with Session.open(session) as log:
            assert not log.problems
        again = subprocess.run(run_command(fake, "openai", root, session, "--resume", "--allow-shell"),
                               env=child_env(), capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.splitlines()[-1])["stop"] == "done"
    messages = stored_messages(session, "openai")
    assert validate(messages, "openai_chat") == [] and messages[-1].text == "All done."
