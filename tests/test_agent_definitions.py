"""Agent definitions from the files Claude Code users write (a folder of Markdown files with YAML front
matter), every bad file named with what is wrong; persistent (Letta-style) agents that keep their
session and memory between calls; and a definitions folder used from `ctxwin run` in a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_fake import ScriptedFake, Turn
from ctxwin.agent import AgentDefinition, load_definitions, parse_definition
from ctxwin.agent.subagents import PERSISTENT_NOTE
from ctxwin.cli.main import app
from ctxwin.engine import ContextEngine
from ctxwin.errors import AgentDefinitionError
from ctxwin.messages import Message
from ctxwin.messages.pairing import validate
from ctxwin.store import Session
from subagent_fake import (
    MAX_OUTPUT,
    MODELS,
    WINDOW,
    Hold,
    generation_requests,
    messages_of,
    setup,
    workspace,
)

SRC = Path(__file__).resolve().parents[1] / "src"
DELIVERED = "ctxwin_bg_1"  # the call id of the task_wait call that brings background task bg-1's result in

REVIEWER = """---
name: code-reviewer
description: Reviews code for quality and security. Use proactively after changes.
tools: Read, Grep, Glob, Bash, Edit, Write
model: sonnet
permissionMode: plan
maxTurns: 7
color: cyan
---
You are a senior code reviewer.

Report findings by severity.
"""


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_a_claude_code_agent_file_becomes_a_definition(tmp_path: Path) -> None:
    agents = tmp_path / ".claude" / "agents"
    write(agents, "reviewer.md", REVIEWER)
    write(agents, "keeper.md", "---\nname: keeper\ndescription: Remembers.\nmemory: project\n---\nYou keep notes.\n")
    write(agents, "counter.md", "---\nname: counter\ndescription: Counts.\nskills:\n  - counting\n  - docs/extra.md\n"
                                "tools: [Read]\nbackground: true\n---\nCount.\n")
    skill = write(tmp_path / ".claude" / "skills" / "counting", "SKILL.md", "# Counting\n")
    write(agents, "notes.txt", "not a definition")
    found = {d.name: d for d in load_definitions(agents)}
    assert sorted(found) == ["code-reviewer", "counter", "keeper"]
    reviewer = found["code-reviewer"]
    assert reviewer.description.startswith("Reviews code") and reviewer.system.startswith("You are a senior")
    assert reviewer.system.endswith("Report findings by severity.")
    assert reviewer.tools == ["read", "grep", "find", "shell"] and reviewer.permission_mode == "read-only"
    assert reviewer.max_steps == 7 and reviewer.model == "sonnet" and reviewer.source == str(agents / "reviewer.md")
    assert any("Edit has no ctxwin counterpart" in n for n in reviewer.notes)
    assert any("Write has no ctxwin counterpart" in n for n in reviewer.notes)
    assert any("`color` is not used" in n for n in reviewer.notes)
    assert found["keeper"].persistent and found["keeper"].tools is None
    counter = found["counter"]
    assert counter.background and counter.tools == ["read"]
    assert counter.skills == [str(skill.resolve()), "docs/extra.md"]  # found beside the folder; a path as given
    only_denied = parse_definition("---\nname: x\ndescription: d\ndisallowedTools: Bash\n---\n")
    assert only_denied.tools is not None and "shell" not in only_denied.tools and "read" in only_denied.tools


BAD = {
    "no-front-matter.md": ("You are an agent.\n", "no front matter"),
    "bad-yaml.md": ("---\nname: x\ndescription: [unclosed\n---\nbody\n", "not valid YAML (line"),
    "no-description.md": ("---\nname: lonely\n---\nbody\n", "`description` is required"),
    "bad-name.md": ("---\nname: Code Reviewer\ndescription: d\n---\n", "`name` 'Code Reviewer' is not lowercase"),
    "unknown-tool.md": ("---\nname: a\ndescription: d\ntools: Read, Teleport\n---\n", "unknown tool 'Teleport'"),
    "rule.md": ("---\nname: b\ndescription: d\ntools: Bash(git status:*)\n---\n", "is a permission rule"),
    "turns.md": ("---\nname: c\ndescription: d\nmaxTurns: 0\n---\n", "`maxTurns` must be a whole number"),
    "field.md": ("---\nname: e\ndescription: d\nflavour: mint\n---\n", "unknown field `flavour`"),
    "list.md": ("---\n- name\n- description\n---\n", "must be YAML fields"),
    "twice.md": ("---\nname: good\ndescription: again\n---\n", "is also the name of"),
}


def test_every_bad_file_is_named_with_what_is_wrong(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    write(agents, "good.md", "---\nname: good\ndescription: fine\n---\nbody\n")
    for name, (text, _) in BAD.items():
        write(agents, name, text)
    write(agents, "binary.md", "")
    (agents / "binary.md").write_bytes(b"---\nname: z\n\xff\xfe\n---\n")
    with pytest.raises(AgentDefinitionError) as caught:
        load_definitions(agents)
    problems = dict(caught.value.problems)
    assert set(problems) == {str(agents / n) for n in [*BAD, "binary.md"]}
    for name, (_, expected) in BAD.items():
        assert expected in problems[str(agents / name)], (name, problems[str(agents / name)])
    assert "not valid UTF-8" in problems[str(agents / "binary.md")]
    # The CLI says the same, every file on its own line, before anything runs.
    result = CliRunner().invoke(app, ["run", "go", "--base-url", "http://127.0.0.1:9", "--agents", str(agents),
                                      "--workspace", str(tmp_path)])
    assert result.exit_code == 2
    assert f"{len(BAD) + 1} agent definition file(s) cannot be used" in result.output
    assert all(f"{agents / name}: " in result.output for name in BAD)
    chat = CliRunner().invoke(app, ["chat", "--base-url", "http://127.0.0.1:9", "--agents", str(agents),
                                    "--workspace", str(tmp_path), "--sessions", str(tmp_path / "chats")], input="")
    assert chat.exit_code == 2 and f"{agents / 'rule.md'}: " in chat.output
    missing = CliRunner().invoke(app, ["run", "go", "--base-url", "http://127.0.0.1:9", "--agents",
                                       str(tmp_path / "nowhere"), "--workspace", str(tmp_path)])
    assert missing.exit_code == 2 and "is not a folder" in missing.output


# ------------------------------------------------------------------------------------------------
# Persistent agents


def keeper_script(calls: list[list[Message]]) -> Any:
    """A persistent agent: told to remember, it writes the code to its memory folder; asked, it answers
    from what its system prompt shows of its memory."""
    def script(messages: list[Message]) -> Turn:
        calls.append(messages)
        task = [m.text for m in messages if m.role == "user" and m.text.startswith("Task: ")][-1]
        if "remember" in task:
            if messages[-1].role == "user":
                return Turn(calls=[(f"m{len(calls)}", "memory", {"command": "create", "path": "/memories/code.md",
                                                     "file_text": "the code is 4417\n"})])
            return Turn(text="remembered")
        system = messages[0].text
        return Turn(text="the code is 4417" if "the code is 4417" in system else "I do not know the code")
    return script


def script_of(parent: Any, keeper: Any) -> Any:
    def script(api: str, messages: list[Message]) -> Turn:
        if messages and messages[0].role == "system" and PERSISTENT_NOTE in messages[0].text:
            return keeper(messages)
        return parent(messages)
    return script


def test_a_persistent_agent_keeps_its_session_and_memory_between_calls_and_runs(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keeper = AgentDefinition(name="keeper", description="Keeps notes.", persistent=True, tools=["read"])
    calls: list[list[Message]] = []

    def parent(asks: list[str]) -> Any:
        def plan(messages: list[Message]) -> Turn:
            n = sum(1 for m in messages if m.role == "assistant")
            if n < len(asks):
                return Turn(text="Asking.", calls=[(f"k{n}", "task", {"task": asks[n], "agent": "keeper"})])
            return Turn(text="All done.")
        return plan

    with ScriptedFake(script_of(parent(["remember the code 4417", "what is the code?"]), keeper_script(calls)),
                      context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, subagents = setup(fake, "openai", root, tmp_path / "one", [], definitions=[keeper])
        subagents.state_root = tmp_path / "state"
        assert agent.run("Turn 1: ask the keeper").stop == "done"
        first_run = messages_of("openai", generation_requests(fake)[-1].body)
        agent.engine.session.close()
        # Another parent, another session, the same state root: the keeper goes on.
        again, subagents = setup(fake, "openai", root, tmp_path / "two", [], definitions=[keeper])
        subagents.state_root = tmp_path / "state"
        assert again.run("Turn 1: ask again").stop == "done"
        again.engine.session.close()
    answers = [r.text for m in first_run for r in m.tool_results if r.call_id == "k1"]
    assert answers and answers[0].endswith("the code is 4417")
    offered = {t["function"]["name"] for t in generation_requests(fake)[1].body["tools"]}
    assert {"read", "memory", "memory_search", "memory_get"} <= offered and "shell" not in offered
    assert (tmp_path / "state" / "keeper" / "memory" / "code.md").read_text() == "the code is 4417\n"
    # Its second call resumed its own session: the first task and what it did are in the request.
    second = next(m for m in calls if [x.text for x in m if x.text.startswith("Task: ")][-1]
                  == "Task: what is the code?")
    assert any(m.text == "Task: remember the code 4417" for m in second)
    assert "/memories/code.md" in second[0].text and "the code is 4417" in second[0].text
    with Session.open(tmp_path / "state" / "keeper" / "session") as log:
        stored = ContextEngine(log, model=MODELS["openai"], window=WINDOW, max_output=MAX_OUTPUT).messages
    tasks = [m.text for m in stored if m.text.startswith("Task: ")]
    assert tasks == ["Task: remember the code 4417", "Task: what is the code?", "Task: remember the code 4417",
                     "Task: what is the code?"]
    assert validate(stored, "openai_chat") == []


# ------------------------------------------------------------------------------------------------
# From ctxwin run, in a real process


AGENTS = {
    "reader.md": "---\nname: reader\ndescription: Reads and counts, never changes anything.\ntools: Read, Grep, Bash\n"
                 "permissionMode: plan\n---\nYou are the reader.\n",
    "skilled.md": "---\nname: skilled\ndescription: Counts the way the counting skill says.\nskills: [counting]\n"
                  "---\nYou are the skilled one.\n",
    "keeper.md": "---\nname: keeper\ndescription: Remembers what it is told between calls.\npersistent: true\n"
                 "tools: Read\n---\nYou are the keeper.\n",
}


@pytest.mark.slow  # a CLI process (and the memory index's embedder in it)
@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_definitions_folder_used_from_ctxwin_run_with_a_background_child(api: str, tmp_path: Path) -> None:
    root = workspace(tmp_path)
    for name, text in AGENTS.items():
        write(root / ".claude" / "agents", name, text)
    write(root / ".claude" / "skills" / "counting", "SKILL.md", "# Counting skill\nskill-marker: use grep -c.\n")
    hold = Hold()
    seen: dict[str, list[Message]] = {}
    keeper_calls: list[list[Message]] = []
    keeper = keeper_script(keeper_calls)
    steps = [("reader", "count the lines of docs/f001.txt", False), ("skilled", "count with the skill", False),
             ("keeper", "remember the code 4417", False), ("keeper", "what is the code?", True)]

    def parent(messages: list[Message]) -> Turn:
        asked = sum(1 for m in messages for c in m.tool_calls if c.name == "task")
        if asked < len(steps):
            agent, task, background = steps[asked]
            return Turn(text=f"Asking {agent}.", calls=[(f"t{asked}", "task", {"task": task, "agent": agent,
                                                                               "background": background})])
        if not any(r.call_id == DELIVERED for m in messages for r in m.tool_results):
            reads = sum(1 for m in messages for c in m.tool_calls if c.name == "read")
            if reads == 0:  # the parent goes on working while the keeper runs: its call arrives meanwhile
                hold.wait_for_calls(1, timeout=60)
                hold.mark("parent working")
                hold.release()  # the keeper may finish now, while the parent works
            return Turn(text="Working meanwhile.", calls=[(f"r{reads}", "read", {"path": f"docs/f00{reads % 8}.txt"})])
        return Turn(text="All done.")

    def script(api_name: str, messages: list[Message]) -> Turn:
        system = messages[0].text if messages and messages[0].role == "system" else ""
        for name in ("reader", "skilled"):
            if system.startswith(f"You are the {name}"):
                seen[name] = messages
                return Turn(text=f"{name} done")
        if system.startswith("You are the keeper"):
            if any(m.text == "Task: what is the code?" for m in messages) and messages[-1].role == "user":
                hold.hold("keeper")
            return keeper(messages)
        return parent(messages)

    session = tmp_path / "runs" / "s"
    with ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
        done = subprocess.run(
            [sys.executable, "-m", "ctxwin.cli.main", "run", "Turn 1: use the agents", "--base-url", url, "--api", api,
             "--session", str(session), "--workspace", str(root), "--window", str(WINDOW), "--max-output",
             str(MAX_OUTPUT), "--api-key", "k", "--json", "--allow-shell",
             "--agents", str(root / ".claude" / "agents")],
            env={**os.environ, "PYTHONPATH": str(SRC)}, capture_output=True, text=True, timeout=180)
        hold.release()
        requests = generation_requests(fake)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    totals = lines[-1]
    assert totals["stop"] == "done"
    # read-only: the reader is not offered the shell its file lists (the parent has it)
    assert "shell" in tool_names(api, requests[0].body)
    reader_request = next(r for r in requests if who(api, r.body) == "reader")
    assert tool_names(api, reader_request.body) == ["read", "grep"]
    assert any("skill-marker: use grep -c." in m.text for m in seen["skilled"])
    # persistent: the second call resumed the keeper's session, its memory in its system prompt
    state = root / ".ctxwin" / "agents" / "keeper"
    assert (state / "memory" / "code.md").read_text() == "the code is 4417\n"
    assert (state / "session" / "session.jsonl").is_file()
    # background: the handle came back at once; the keeper finished while the parent was reading, and its
    # result reached the parent's next request as a task_wait result, before the parent's answer
    assert hold.log.index("call:keeper") < hold.log.index("parent working") < hold.log.index("done:keeper")
    parent_requests = [messages_of(api, r.body) for r in requests if who(api, r.body) == "parent"]
    delivered_at = next(i for i, m in enumerate(parent_requests) if any(r.call_id == DELIVERED for x in m
                                                                        for r in x.tool_results))
    delivered = next(r.text for x in parent_requests[delivered_at] for r in x.tool_results if r.call_id == DELIVERED)
    assert delivered.startswith("[background task bg-1: what is the code?]") and delivered.endswith("the code is 4417")
    assert any(c.name == "read" for x in parent_requests[delivered_at] for c in x.tool_calls)
    assert delivered_at == len(parent_requests) - 1  # the parent answered once it had the result
    started = next(r.text for x in parent_requests[delivered_at] for r in x.tool_results if r.call_id == "t3")
    assert started.startswith("Started background task bg-1 (keeper, isolated)")
    # totals over the tree, each child a row; each event says which agent reported it
    rows = totals["agents"]
    dones = [(e.get("agent_id"), e.get("depth", 0)) for e in lines[:-1] if e["kind"] == "done"]
    assert dones.count((None, 0)) == 1 and dones[-1] == (None, 0)  # the root's done prints as it always did
    assert sorted(a for a, depth in dones if depth == 1) == sorted(r["agent"] for r in rows[1:])
    assert [r["definition"] for r in rows[1:]] == ["reader", "skilled", "keeper", "keeper"]
    assert rows[-1]["background"] is True and totals["model_calls"] == sum(r["model_calls"] for r in rows)
    assert totals["model_calls"] == len(requests)
    messages = stored(session, api)
    assert validate(messages, "anthropic" if api == "anthropic" else "openai_chat") == []


def tool_names(api: str, body: dict[str, Any]) -> list[str]:
    return [t["name"] if api == "anthropic" else t["function"]["name"] for t in body.get("tools", [])]


def who(api: str, body: dict[str, Any]) -> str:
    """Which agent sent a request: a child by its definition's system prompt, else the parent."""
    messages = messages_of(api, body)
    system = messages[0].text if messages and messages[0].role == "system" else ""
    return next((name for name in ("reader", "skilled", "keeper") if system.startswith(f"You are the {name}")),
                "parent")


def stored(folder: Path, api: str) -> list[Message]:
    with Session.open(folder) as log:
        return ContextEngine(log, model=MODELS[api], window=WINDOW, max_output=MAX_OUTPUT).messages



def test_a_persistent_agent_whose_session_another_process_holds_is_that_tasks_error(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    keeper = AgentDefinition(name="keeper", description="Keeps notes.", persistent=True)

    def script(api: str, messages: list[Message]) -> Turn:
        if not any(m.tool_results for m in messages):
            return Turn(text="Asking.", calls=[("k", "task", {"task": "remember", "agent": "keeper"}),
                                               ("j", "task", {"tasks": ["a", "b"], "agent": "keeper"})])
        return Turn(text="All done.")

    with Session.open(tmp_path / "state" / "keeper" / "session"), \
            ScriptedFake(script, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, subagents = setup(fake, "openai", root, tmp_path, [], definitions=[keeper])
        subagents.state_root = tmp_path / "state"
        result = agent.run("Turn 1: ask")
        last = messages_of("openai", generation_requests(fake)[-1].body)
        agent.engine.session.close()
    assert result.stop == "done"  # the parent goes on
    answers = {r.call_id: r.text for m in last for r in m.tool_results}
    assert "keeper/session is already open for writing" in answers["k"]
    assert answers["j"].count("[sub-agent (isolated) error, not started]\n\nsession ") == 2  # each task says so


def test_a_persistent_agent_whose_skill_cannot_be_read_leaves_nothing_open_and_nothing_half_loaded(
        tmp_path: Path) -> None:
    # The first call fails on its second skill: the memory index it had opened is closed at once (not
    # when the garbage collector gets to it), and no skill was logged, so once the skill exists the next
    # call starts the session afresh with both skills instead of taking it as resumed.
    import contextlib
    import gc

    from ctxwin.errors import SubagentError

    root = workspace(tmp_path)
    (root / "skills").mkdir()
    (root / "skills" / "first.md").write_text("FIRST-SKILL-MARK\n")
    keeper = AgentDefinition(name="keeper", description="Keeps notes.", persistent=True,
                             skills=["skills/first.md", "skills/second.md"])

    def index_fds() -> int:  # files of the keeper's memory index this process holds open
        held = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # (the listing's own descriptor is gone by now)
                held.append(os.readlink(f"/proc/self/fd/{fd}"))
        return sum(str(tmp_path / "state" / "keeper" / "index.sqlite") in path for path in held)

    with ScriptedFake(lambda api, messages: Turn(text="kept"), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        agent, subagents = setup(fake, "openai", root, tmp_path, [], definitions=[keeper])
        subagents.state_root = tmp_path / "state"
        gc.disable()
        try:
            for _ in range(2):
                with pytest.raises(SubagentError, match=r"skill skills/second\.md cannot be read"):
                    subagents.spawn("remember the port", agent="keeper")
            assert index_fds() == 0
        finally:
            gc.enable()
        assert stored(tmp_path / "state" / "keeper" / "session", "openai") == []  # no skill half loaded
        (root / "skills" / "second.md").write_text("SECOND-SKILL-MARK\n")
        result = subagents.spawn("remember the port", agent="keeper")
        sent = messages_of("openai", generation_requests(fake)[-1].body)
        agent.engine.session.close()
    assert result.stop == "done"
    users = [m.text for m in sent if m.role == "user"]
    assert len(users) == 3 and "FIRST-SKILL-MARK" in users[0] and "SECOND-SKILL-MARK" in users[1]
