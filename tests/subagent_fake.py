"""What the sub-agent tests share: a scripted parent, children and forks told apart by what they are sent
(a fork's directive envelope, a child's `Task: ` message), the agent built on the fake, and readers of
what the fake received."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path
from typing import Any

from agent_fake import ScriptedFake, Turn, make_workspace
from ctxwin.agent import AgentConfig, HttpModel, LoopEvent, create_agent
from ctxwin.agent.subagents import FORK_TAG, AgentDefinition, SubagentLimits, SubAgents
from ctxwin.messages import Message
from ctxwin.providers import client_for
from ctxwin.store import Session
from ctxwin.tools import Workspace

WINDOW = 32_000
MAX_OUTPUT = 1_000
MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4o"}
SECRET = "PARENT-SECRET-7731"

ParentPlan = Callable[[int], Turn]  # the parent's answer, by how many assistant messages it has sent


def kind_of(messages: list[Message]) -> str:
    if any(m.role == "user" and f"<{FORK_TAG}>" in m.text for m in messages):
        return "fork"
    first_user = next(m for m in messages if m.role == "user")
    return "child" if first_user.text.startswith("Task: ") or "<skill" in first_user.text else "parent"


def make_script(parent: ParentPlan, *, child: Callable[[list[Message]], Turn] | None = None,
                fork: Callable[[list[Message]], Turn] | None = None) -> Callable[[str, list[Message]], Turn]:
    def script(api: str, messages: list[Message]) -> Turn:
        kind = kind_of(messages)
        if kind == "parent":
            return parent(sum(1 for m in messages if m.role == "assistant"))
        if kind == "fork":
            return fork(messages) if fork else Turn(text="fork done")
        task = next(m.text for m in messages if m.role == "user" and m.text.startswith("Task: "))
        return child(messages) if child else Turn(text=f"answer to <{task[6:]}>")
    return script


def setup(fake: ScriptedFake, api: str, root: Path, tmp_path: Path, events: list[LoopEvent],
          limits: SubagentLimits | None = None, *, window: int = WINDOW, max_output: int = MAX_OUTPUT,
          definitions: Sequence[AgentDefinition] = (), **config: Any) -> tuple[Any, SubAgents]:
    """A parent on the fake with the sub-agent tools (task and the background ones), its session in
    `tmp_path/parent`, its children's in `tmp_path/children`."""
    model = HttpModel(client_for(api, fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url,  # type: ignore[arg-type]
                                 MODELS[api], api_key="k"))
    subagents = SubAgents(limits=limits, sessions_root=tmp_path / "children", definitions=definitions)
    agent = create_agent(model, session=Session.open(tmp_path / "parent"),
                         workspace=Workspace([root], model=MODELS[api]),
                         config=AgentConfig(**{"max_steps": 20, "max_tokens": max_output, **config}), window=window,
                         max_output=max_output, extra_tools=subagents.tools(), on_event=events.append)
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
    (root / "MEMORY.md").write_text("memory-file-marker: the parent's memory, not for children\n")
    (root / "memory").mkdir()
    (root / "memory" / f"{date.today():%Y-%m-%d}.md").write_text("notes-file-marker: the parent's notes\n")
    return root


def generation_requests(fake: ScriptedFake) -> list[Any]:
    return [r for r in fake.requests if r.status == 200]


def transcript_of(answer: str) -> Path:
    """The child's session folder, from the first line of its result (where a spilled preview keeps it)."""
    found = re.match(r"\[sub-agent [^\]]*full transcript: ([^\]]+)\]", answer)
    assert found is not None, answer[:300]
    return Path(found.group(1))


def no_cache(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in content]}
    return message


def messages_of(api: str, body: dict[str, Any]) -> list[Message]:
    """The canonical messages of a request body the fake received."""
    from ctxwin.testing.fake_provider import request_messages

    return request_messages("anthropic" if api == "anthropic" else "chat", body)


HOLD_S = 30.0
"""The longest a held model call waits: a safety cap only. The tests release held calls themselves,
after checking what happened while they were held, so they assert an order of events, not a time."""


class Hold:
    """Model calls held at the fake (the scripted model waits in the server's thread) until `release()`.
    `log` is what happened, in order: `call:<who>` when a held call arrived, `done:<who>` when it got
    its answer, and the test's own marks (`mark("interrupt")`) in between."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.log: list[str] = []
        self._changed = threading.Condition()

    def hold(self, who: str) -> None:
        self._add(f"call:{who}")
        self.released.wait(HOLD_S)
        self._add(f"done:{who}")

    def mark(self, what: str) -> None:
        self._add(what)

    def calls(self, before: str | None = None, after: str | None = None) -> list[str]:
        """The held calls that arrived (before / after a mark)."""
        with self._changed:
            log = list(self.log)
        if before is not None:
            log = log[:log.index(before)]
        if after is not None:
            log = log[log.index(after) + 1:]
        return [entry[5:] for entry in log if entry.startswith("call:")]

    def wait_for_calls(self, count: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while sum(e.startswith("call:") for e in self.log) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"only {self.log} after {timeout} s"
                self._changed.wait(left)

    def release(self) -> None:
        self.released.set()

    def _add(self, entry: str) -> None:
        with self._changed:
            self.log.append(entry)
            self._changed.notify_all()


def task_result(api: str, body: dict[str, Any], call_id: str) -> str:
    """The text of the result of call `call_id` in a request body."""
    return next(r.text for m in messages_of(api, body) for r in m.tool_results if r.call_id == call_id)
