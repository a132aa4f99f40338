"""Sub-agents: the `task` tool a model calls (with `task_status`, `task_wait`, `task_cancel` for the ones
it runs in the background), and the same as an API (`SubAgents.spawn/parallel/chain/start`).

- **isolated** (the default): a fresh session whose only user message is `Task: <task>` (after the
  definition's skills, preloaded as user messages); its own system prompt plus the allowlisted
  workspace files (AGENTS.md and TOOLS.md, as OpenClaw gives its children; nothing else, not even
  MEMORY.md); its own tool allowlist and permission mode. Nothing of the parent's history.
- **fork** (Claude Code's forkSubagent): the parent's system prompt, tools and last request byte for
  byte, so the provider's prompt cache is read back; then the parent's last assistant message with all
  its tool calls, a placeholder result for each, and the directive in a `<fork-boilerplate>` envelope.
  The fork's first request is sent with the parent's decisions as they were (no stage revises the
  prefix it shares with the parent); its own apply from its second request on. Same definition and
  model only; a fork cannot fork; above `fork_max_tokens` it runs isolated and says so.
- **parallel** (at most 8 tasks, 4 at once, Pi) and **chain** (`{previous}` in a task is the previous
  result, Pi; without it the previous result is appended).
- **background** (Claude Code's async agents): `task(..., background=true)` returns a handle at once;
  the parent polls, waits for or cancels it, and a finished one's result comes into the parent's log
  before its next model call, as the result of a `task_wait` call (so it is budgeted, spilled and
  masked like any tool result). A parent that answers while background children still run waits
  for the next to finish and goes on.
- **persistent** (Letta's stateful agents): a definition with `persistent = true` keeps one session
  under `state_root/<name>/session`, resumed on every call, and a memory folder
  (`state_root/<name>/memory`, the memory tools' `/memories`) shown in its system prompt at each call.

One cancel reaches the whole tree: each child's cancel is a child of its parent's (`agent.tree.Cancel`),
so an interrupt stops running children, and children still waiting for a slot (or later in a chain)
never start. Each child is its own stored session (under `sessions_root`, or in memory), linked to its
parent by a `custom` entry in both logs; its answer comes back as a tool result (budgeted by the
parent's engine like any other) that starts with a ref to the child's full transcript.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ctxwin.agent.definitions import SUBAGENT_TOOLS, AgentDefinition, resolve_model
from ctxwin.agent.loop import Agent, LoopEvent, tool_schema, tool_table
from ctxwin.agent.model import Model
from ctxwin.agent.tree import Cancel, ChildRecord
from ctxwin.engine import ContextEngine, Prepared
from ctxwin.errors import CtxwinError, Interrupted, SubagentError
from ctxwin.memory.files import MEMORY_DIR
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.pipeline import bootstrap
from ctxwin.policies.model import BootstrapPolicy, Policy
from ctxwin.store import Session
from ctxwin.store.base import SessionLog
from ctxwin.store.blobs import DIR_MODE
from ctxwin.store.entries import CalibrationEntry, MessageEntry
from ctxwin.store.in_memory import MemorySessionLog
from ctxwin.tools import ToolError, ToolOutput, ToolSpec, Workspace

if TYPE_CHECKING:  # the index loads SQLite and numpy: only a persistent child pays for them
    from ctxwin.memory.index import MemoryIndex

__all__ = ["AgentDefinition", "Background", "ChildResult", "SubAgents", "SubagentLimits"]

FORK_TAG = "fork-boilerplate"
FORK_DIRECTIVE = (
    "<{tag}>\nYou are a fork of the agent whose conversation is above: you share its history, but your "
    "work is only this directive. The tool calls of the last assistant message are handled by the parent; "
    "their results are not available to you. You cannot start forks. Answer with your result in text when "
    "done.\n\nDirective: {directive}\n</{tag}>"
)
FORK_PLACEHOLDER = "[Handled by the parent agent; this fork does not see the result.]"
FORK_SELF_PLACEHOLDER = "[This call started you, the fork; your directive follows.]"
PERSISTENT_NOTE = (
    "You are a persistent agent: this conversation goes on across the tasks you are given (earlier tasks and "
    "what you did are above, or in their summary). Your memory folder (/memories, shown below) is yours "
    "across calls: keep what later tasks will need there with the memory tool."
)
MEMORY_HEADER = "# Your memory (/memories, kept between calls)\n"
PREVIOUS = "{previous}"
NOT_STARTED = "not_started"
CHAIN_STOPS = frozenset({"error", "refused", "interrupted", NOT_STARTED})
"""A chain stops after a task that ended like this: the next one would get no result to go on."""
BACKGROUND_RESULT = "background_result"  # meta["ctxwin"] of the task_wait call that brings a result in
MEMORY_TOOLS = ("memory", "memory_search", "memory_get")  # what a persistent agent gets over its memory folder
Context = Literal["isolated", "fork"]


class SubagentLimits(BaseModel):
    """Bounds on spawning (OpenClaw's defaults for depth and concurrency, Pi's for parallel runs)."""

    model_config = ConfigDict(extra="forbid")

    max_depth: int = Field(1, ge=1, le=5)
    """How deep sub-agents may nest: 1 lets the main agent spawn and its children not (maxSpawnDepth)."""
    max_children_per_agent: int = Field(5, ge=1)
    """Sub-agents one agent may have running at once (maxChildrenPerAgent), background ones included;
    more are refused."""
    max_concurrent: int = Field(8, ge=1)
    """Sub-agents running at once in the whole tree (maxConcurrent); more wait for a slot."""
    max_parallel_tasks: int = Field(8, ge=1)
    """Tasks one parallel call may carry."""
    parallel_at_once: int = Field(4, ge=1)
    """Of those, how many run at once."""
    fork_max_tokens: int = Field(100_000, ge=0)
    """A fork whose parent's last request was above this many tokens runs isolated instead (and says so)."""
    max_wait_s: float = Field(600.0, gt=0)
    """The longest one `task_wait` call waits, in seconds."""


@dataclass(frozen=True)
class ChildResult:
    """What one sub-agent returned: its last text, why it stopped, where its transcript is, and which
    context it really ran in (`note` says why, when that is not the one asked for). `agent` is the
    child's id (empty when it never started)."""

    text: str
    stop: str
    steps: int
    context: Context
    session: str
    note: str = ""
    agent: str = ""

    def as_tool_text(self) -> str:
        """The result as the requester sees it: the facts first (a spilled result's preview keeps
        them), then the note, then the child's answer."""
        if self.stop == NOT_STARTED:
            return f"[sub-agent ({self.context}) not started: {self.note or 'cancelled'}]"
        if not self.agent:  # refused, or failed before it could start
            return f"[sub-agent ({self.context}) {self.stop}, not started]\n\n{self.text}"
        head = (f"[sub-agent {self.agent} ({self.context}) stopped: {self.stop} after {self.steps} steps; "
                f"full transcript: {self.session}]")
        return "\n\n".join(part for part in (head, self.note, self.text) if part)


@dataclass
class Background:
    """One background sub-agent: its handle, its own cancel (`task_cancel` sets it; the parent's
    interrupt reaches it too), its record once it runs, and its result once it ends."""

    handle: str
    task: str
    definition: str
    context: Context
    cancel: Cancel
    done: threading.Event = field(default_factory=threading.Event)
    record: ChildRecord | None = None
    result: ChildResult | None = None
    delivered: bool = False

    def state(self) -> str:
        if self.delivered:
            return "collected"
        if self.done.is_set():
            return "finished"
        return "cancelling" if self.cancel.is_set() else "running"


@dataclass(frozen=True)
class _Plan:
    """A spawn request checked against the rules: the context it really runs in and why; for a fork,
    what it forks from, taken when it was asked for (a background fork starts after the parent has
    gone on)."""

    context: Context
    definition: AgentDefinition
    model: str | None
    note: str = ""
    prepared: Prepared | None = None  # the parent's last request
    last: Message | None = None  # the parent's assistant message that asked for the fork
    calibration: dict[str, Any] | None = None


@dataclass
class _Tree:
    """What every agent of one tree shares: the global concurrency slots, the child counter, and one
    lock per persistent agent (its session has one writer: calls to it queue)."""

    slots: threading.BoundedSemaphore
    counter: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    persistent: dict[str, threading.Lock] = field(default_factory=dict)

    def next_id(self) -> int:
        with self.lock:
            self.counter += 1
            return self.counter

    def persistent_lock(self, name: str) -> threading.Lock:
        with self.lock:
            return self.persistent.setdefault(name, threading.Lock())


def _acquire(lock: threading.Lock | threading.BoundedSemaphore, cancel: threading.Event) -> bool:
    """Take `lock`, giving up when `cancel` is set (a child waiting for a slot must not start after
    an interrupt)."""
    while not cancel.is_set():
        if lock.acquire(timeout=0.05):
            if not cancel.is_set():
                return True
            lock.release()
    return False


class SubAgents:
    """Spawns children for one parent agent. `models(name)` gives a `Model` for a model name (default:
    the parent's own model, for its name only); `sessions_root` is where child sessions are stored
    (None: in memory); `state_root` is where persistent agents keep their session and memory folder
    (default: `sessions_root/agents`). Call `tools()` for the specs (`task` and the background tools;
    `tool()` for `task` alone), and `attach(parent)` once the parent exists (the parent's engine must
    be built with the tools' schemas, so the tools come first)."""

    def __init__(self, *, definitions: Sequence[AgentDefinition] = (), definition: str = "default",
                 limits: SubagentLimits | None = None, models: Callable[[str], Model] | None = None,
                 sessions_root: str | Path | None = None, state_root: str | Path | None = None, depth: int = 0,
                 is_fork: bool = False, on_event: Callable[[LoopEvent], None] | None = None,
                 tree: _Tree | None = None) -> None:
        self.definitions = {d.name: d for d in definitions} or {"default": AgentDefinition()}
        self.definitions.setdefault(definition, AgentDefinition(name=definition))
        self.definition = definition
        self.limits = limits or SubagentLimits()
        self.models = models
        self.sessions_root = Path(sessions_root) if sessions_root is not None else None
        self.state_root = Path(state_root) if state_root is not None else \
            self.sessions_root / "agents" if self.sessions_root is not None else None
        self.depth = depth
        self.is_fork = is_fork
        self.on_event = on_event
        self.tree = tree or _Tree(threading.BoundedSemaphore(self.limits.max_concurrent))
        self.parent: Agent | None = None
        self.background: dict[str, Background] = {}
        self._active = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition()  # a background child finished

    def attach(self, parent: Agent) -> SubAgents:
        self.parent = parent
        parent.subagents = self
        return self

    # ---------------------------------------------------------------- the tools

    def tool(self) -> ToolSpec:
        """The `task` tool alone (background results still come in at the next turn)."""
        return ToolSpec("task", self._description(), _task_parameters(list(self.definitions)), self._run_tool,
                        context=("call_id",))

    def tools(self) -> list[ToolSpec]:
        """`task`, and `task_status`, `task_wait`, `task_cancel` for the background ones."""
        return [self.tool(),
                ToolSpec("task_status", STATUS_DESCRIPTION, HANDLES_PARAMETERS, self._status_tool),
                ToolSpec("task_wait", WAIT_DESCRIPTION, WAIT_PARAMETERS, self._wait_tool),
                ToolSpec("task_cancel", CANCEL_DESCRIPTION, CANCEL_PARAMETERS, self._cancel_tool)]

    def _description(self) -> str:
        named = [d for d in self.definitions.values() if d.name != self.definition or d.description]
        if not named:
            return TASK_DESCRIPTION
        lines = [f"- {d.name}{' (persistent: remembers earlier tasks)' if d.persistent else ''}"
                 f"{' (runs in the background)' if d.background else ''}: {d.description or 'no description'}"
                 for d in named]
        return f"{TASK_DESCRIPTION}\nAgents (the `agent` argument):\n" + "\n".join(lines)

    def _run_tool(self, ws: Workspace, call_id: str | None = None, **args: Any) -> ToolOutput:
        try:
            tasks = list(args.get("tasks") or ([args["task"]] if args.get("task") else []))
            mode = args.get("mode") or ("parallel" if len(tasks) > 1 else "single")
            if not tasks:
                raise ToolError("bad_argument", "task needs `task` (one) or `tasks` (several)")
            options = {"context": args.get("context", "isolated"), "agent": args.get("agent"),
                       "model": args.get("model"), "call_id": call_id}
            name = args.get("agent") or self.definition
            background = args.get("background")
            if background is None:
                background = name in self.definitions and self.definitions[name].background
            if background:
                if mode == "chain":
                    raise ToolError("bad_argument", "a chain cannot run in the background",
                                    "Start its tasks one by one, or run the chain in the foreground.")
                if mode == "single" and len(tasks) != 1:
                    raise ToolError("bad_argument", "mode single takes one task", "Use mode parallel.")
                if len(tasks) > self.limits.max_parallel_tasks:
                    raise SubagentError(f"{len(tasks)} background tasks; at most {self.limits.max_parallel_tasks} "
                                        "per call", "split them into several calls")
                return self._start_all(tasks, call_id, options)
            if mode == "single":
                if len(tasks) != 1:
                    raise ToolError("bad_argument", "mode single takes one task", "Use mode parallel or chain.")
                results = [self.spawn(tasks[0], **options)]
            elif mode == "parallel":
                results = self.parallel(tasks, **options)
            else:
                results = self.chain(tasks, **options)
        except (Interrupted, ToolError):
            raise  # (the loop's, and a bad argument the runner reports as it is)
        except CtxwinError as error:  # a refusal, or a child that could not be set up: the model reads why
            return ToolOutput.error(ToolError("subagent", error.message, error.hint))
        text = "\n\n".join(f"## Task {n}\n{r.as_tool_text()}" if len(results) > 1 else r.as_tool_text()
                           for n, r in enumerate(results, 1))
        return ToolOutput(text, is_error=all(r.stop in ("error", "refused") for r in results),
                          details={"children": [r.session for r in results], "contexts": [r.context for r in results],
                                   "stops": [r.stop for r in results], "agents": [r.agent for r in results]})

    def _start_all(self, tasks: list[str], call_id: str | None, options: dict[str, Any]) -> ToolOutput:
        """Start each task in the background; a refused one (a limit) is said next to those started."""
        handles: list[str] = []
        lines: list[str] = []
        for n, task in enumerate(tasks, 1):
            try:
                handle = self.start(task, label=f"{call_id or 'task'}-{n}" if len(tasks) > 1 else None, **options)
            except SubagentError as error:
                lines.append(f"Not started: {task[:200]} ({_said(error)})")
                continue
            job = self.background[handle]
            handles.append(handle)
            lines.append(f"Started background task {handle} ({job.definition}, {job.context}): {task[:200]}")
        if handles:
            lines.append("It runs while you work; its result comes to you before your next call once it finishes "
                         "(task_status polls, task_wait waits, task_cancel stops it).")
        return ToolOutput("\n".join(lines), is_error=not handles, details={"handles": handles})

    # ---------------------------------------------------------------- the API

    def parallel(self, tasks: Sequence[str], **options: Any) -> list[ChildResult]:
        """Run `tasks` at once (`parallel_at_once` at a time); results in task order. After an
        interrupt, the tasks still waiting for a worker do not start (`not_started`)."""
        if len(tasks) > self.limits.max_parallel_tasks:
            raise SubagentError(f"{len(tasks)} parallel tasks; at most {self.limits.max_parallel_tasks}",
                                "split them into several calls, or chain them")
        call_id = options.pop("call_id", None)
        with ThreadPoolExecutor(max_workers=min(self.limits.parallel_at_once, len(tasks))) as pool:
            futures = [pool.submit(self._spawn_or_refusal, task, call_id=call_id, label=f"{call_id or 'task'}-{n}",
                                   **options) for n, task in enumerate(tasks, 1)]
            return [f.result() for f in futures]

    def _spawn_or_refusal(self, task: str, **options: Any) -> ChildResult:
        """One task of several: a refusal (a limit) is that task's result, not the whole call's, and so
        is a child that could not be set up (a skill file gone, its session held by another process)."""
        try:
            return self.spawn(task, **options)
        except SubagentError as error:
            return ChildResult(_said(error), "refused", 0, options.get("context", "isolated"), "(not started)")
        except Interrupted:
            raise
        except CtxwinError as error:
            return ChildResult(_said(error), "error", 0, options.get("context", "isolated"), "(not started)")

    def chain(self, tasks: Sequence[str], **options: Any) -> list[ChildResult]:
        """Run `tasks` one after another, each seeing the previous result (`{previous}` in the task, or
        appended to it). A task that fails, is refused or is interrupted ends the chain: the tasks
        after it are reported as not started."""
        call_id = options.pop("call_id", None)
        results: list[ChildResult] = []
        for n, task in enumerate(tasks, 1):
            if results and results[-1].stop in CHAIN_STOPS:
                why = f"task {n - 1} of the chain ended with {results[-1].stop}"
                results.append(ChildResult("", NOT_STARTED, 0, options.get("context", "isolated"), "", why))
                continue
            if results:
                previous = results[-1].text
                task = task.replace(PREVIOUS, previous) if PREVIOUS in task else \
                    f"{task}\n\n<previous-result>\n{previous}\n</previous-result>"
            results.append(self._spawn_or_refusal(task, call_id=call_id, label=f"{call_id or 'task'}-{n}", **options))
        return results

    def spawn(self, task: str, *, context: Context = "isolated", agent: str | None = None, model: str | None = None,
              call_id: str | None = None, label: str | None = None) -> ChildResult:
        """Run one child to its end and return what it said. `call_id` is the parent's tool call that
        asked for it (a fork answers that one with its own placeholder); `label` names its session
        folder (default: the call id). Raises `SubagentError` for a request the rules refuse."""
        parent = self._parent()
        plan = self._plan(parent, context, agent, model)
        self._reserve()
        return self._spawn(parent, plan, task, call_id, label, parent.cancel.child(), None)

    def start(self, task: str, *, context: Context = "isolated", agent: str | None = None, model: str | None = None,
              call_id: str | None = None, label: str | None = None) -> str:
        """Start one child in the background and return its handle at once. Refused at once (a
        `SubagentError`) for what `spawn` refuses."""
        parent = self._parent()
        plan = self._plan(parent, context, agent, model)
        self._reserve()
        with self._lock:
            handle = f"bg-{len(self.background) + 1}"
            job = Background(handle, task, plan.definition.name, plan.context, parent.cancel.child())
            self.background[handle] = job

        def on_record(record: ChildRecord) -> None:
            job.record = record

        def run() -> None:
            try:
                job.result = self._spawn(parent, plan, task, call_id, label or handle, job.cancel, on_record)
            except Exception as error:  # a failure is this job's result; the parent's loop goes on
                job.result = ChildResult(f"the sub-agent failed: {error}", "error", 0, plan.context, "")
            finally:
                with self._changed:
                    job.done.set()
                    self._changed.notify_all()

        self._emit("subagent", action="background", handle=handle, agent=plan.definition.name, task=task[:200])
        threading.Thread(target=run, name=f"ctxwin-{handle}", daemon=True).start()
        return handle

    def status(self, handles: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The background children (all, or `handles`): state, steps so far, and the result once ended."""
        out = []
        for job in self._jobs(handles):
            steps = job.record.stats.steps if job.record is not None else 0
            out.append({"handle": job.handle, "state": job.state(), "agent": job.definition, "steps": steps,
                        "task": job.task[:200], "stop": job.result.stop if job.result is not None else None})
        return out

    def wait(self, handles: Sequence[str] | None = None, timeout: float | None = None) -> list[Background]:
        """Wait until the background children (all not yet collected, or `handles`) have finished, at
        most `timeout` seconds (`limits.max_wait_s`); the parent's interrupt ends the wait. Returns
        the jobs waited for."""
        parent = self._parent()
        jobs = [j for j in self._jobs(handles) if handles is not None or not j.delivered]
        deadline = time.monotonic() + min(timeout if timeout is not None else self.limits.max_wait_s,
                                          self.limits.max_wait_s)
        with self._changed:
            while not all(j.done.is_set() for j in jobs) and not parent.cancel.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(min(left, 0.05))
        return jobs

    def cancel(self, handle: str, timeout: float = 10.0) -> Background:
        """Cancel one background child (and everything under it) and wait up to `timeout` seconds for
        it to stop (a tool it is running finishes first)."""
        (job,) = self._jobs([handle])
        job.cancel.set()
        job.done.wait(timeout)
        return job

    def close(self, timeout: float = 10.0) -> list[str]:
        """The parent is done with its background children (a `ctxwin run` that ends on a limit, a
        chat session left): each one still running is cancelled, with everything under it, and waited
        for up to `timeout` seconds in all, so that it stops spending, its log ends as an interrupted
        run instead of being cut off with the process, and the tree's totals are final. Their results
        stay in `background`. Returns the handles it cancelled."""
        with self._changed:
            running = [j for j in self.background.values() if not j.done.is_set()]
        for job in running:
            job.cancel.set()
        deadline = time.monotonic() + timeout
        for job in running:
            job.done.wait(max(0.0, deadline - time.monotonic()))
        return [j.handle for j in running]

    def deliver(self) -> int:
        """Log the results of background children that finished and were not collected yet, each as a
        `task_wait` call and its result (marked in the call's meta), so the parent's next request
        carries them, budgeted like any tool result. Called by the parent before each model call;
        returns how many came in."""
        parent = self._parent()
        with self._changed:
            ready = [j for j in self.background.values() if j.done.is_set() and not j.delivered]
            for job in ready:
                job.delivered = True
        for job in ready:
            call = ToolCall(f"ctxwin_{job.handle.replace('-', '_')}", "task_wait", {"handles": [job.handle]})
            parent.engine.append(Message("assistant", (call,), meta={"ctxwin": BACKGROUND_RESULT}))
            parent.engine.append(Message("tool", (ToolResult(call.id, (Text(_job_text(job)),), False, call.name),)))
            self._emit("subagent", action="delivered", handle=job.handle,
                       stop=job.result.stop if job.result else None)
        return len(ready)

    def await_background(self) -> bool:
        """The parent answered in text: if background children are not collected yet, wait for the
        next to finish (the parent's interrupt stops the wait: `Interrupted`) and return True, so the
        loop calls the model again with its result; False when there is none."""
        parent = self._parent()
        with self._changed:
            pending = [j for j in self.background.values() if not j.delivered]
        if not pending:
            return False
        self._emit("subagent", action="waiting", handles=[j.handle for j in pending])
        with self._changed:
            while not any(j.done.is_set() for j in pending):
                if parent.cancel.is_set():
                    raise Interrupted
                self._changed.wait(0.05)
        return True

    # ---------------------------------------------------------------- the background tools

    def _jobs(self, handles: Sequence[str] | None) -> list[Background]:
        if handles is None:
            return list(self.background.values())
        unknown = [h for h in handles if h not in self.background]
        if unknown:
            raise ToolError("unknown_handle", f"no background task {', '.join(unknown)}",
                            f"Handles: {', '.join(self.background) or 'none started yet'}.")
        return [self.background[h] for h in handles]

    def _status_tool(self, ws: Workspace, handles: list[str] | None = None) -> ToolOutput:
        rows = self.status(handles)
        if not rows:
            return ToolOutput("No background tasks.", details={"tasks": []})
        lines = [f"{r['handle']}: {r['state']} ({r['agent']}, {r['steps']} steps so far"
                 f"{', stopped: ' + r['stop'] if r['stop'] else ''}) - {r['task']}" for r in rows]
        if any(r["state"] == "finished" for r in rows):
            lines.append("Finished results come to you before your next call (or now with task_wait).")
        return ToolOutput("\n".join(lines), details={"tasks": rows})

    def _wait_tool(self, ws: Workspace, handles: list[str] | None = None, timeout_s: float | None = None) -> ToolOutput:
        jobs = self.wait(handles, timeout_s)
        if not jobs:
            return ToolOutput("No background tasks to wait for.")
        parts = []
        with self._changed:
            for job in jobs:
                if job.done.is_set():
                    job.delivered = True
        for job in jobs:
            parts.append(_job_text(job) if job.done.is_set() else
                         f"[{job.handle}: still {job.state()} ({job.definition}); wait again, or task_cancel it]")
        return ToolOutput("\n\n".join(parts), details={"handles": [j.handle for j in jobs],
                                                       "states": [j.state() for j in jobs]})

    def _cancel_tool(self, ws: Workspace, handle: str) -> ToolOutput:
        job = self.cancel(handle)
        if not job.done.is_set():
            return ToolOutput(f"[{job.handle}: cancel requested; it stops after the tool it is running, and its result "
                              "comes to you then]")
        with self._changed:
            job.delivered = True
        return ToolOutput(_job_text(job))

    # ---------------------------------------------------------------- children

    def _parent(self) -> Agent:
        if self.parent is None:
            raise SubagentError("SubAgents has no parent agent", "call attach(agent) after creating the agent")
        return self.parent

    def _emit(self, kind: str, **data: Any) -> None:
        if self.parent is not None:
            self.parent.emit(kind, **data)

    def _plan(self, parent: Agent, context: Context, agent: str | None, model: str | None) -> _Plan:
        """The request checked against the rules (a `SubagentError` says which one it breaks)."""
        if context == "fork" and self.is_fork:
            raise SubagentError("a fork cannot fork", "do the directive yourself")
        if self.depth + 1 > self.limits.max_depth:
            raise SubagentError(f"sub-agents may nest {self.limits.max_depth} deep; this agent is at depth "
                                f"{self.depth}", "do the task yourself")
        name = agent or self.definition
        if name not in self.definitions:
            raise SubagentError(f"no agent definition {name!r}", f"definitions: {', '.join(self.definitions)}")
        definition = self.definitions[name]
        if definition.persistent and self.state_root is None:
            raise SubagentError(f"agent {name!r} is persistent and there is nowhere to keep its session",
                                "give SubAgents(state_root=...) or sessions_root (ctxwin run: --session)")
        if context != "fork":
            return _Plan("isolated", definition, model)
        if name != self.definition:
            raise SubagentError(f"a fork runs the requester's own definition ({self.definition!r}), not {name!r}",
                                "use context isolated for another agent")
        if definition.persistent:
            raise SubagentError(f"{name!r} is a persistent agent: it runs in its own session, not as a fork",
                                "use context isolated")
        if model is not None and model != parent.model.model:
            raise SubagentError(f"a fork keeps the requester's model ({parent.model.model}); {model} would miss "
                                "the prompt cache", "use context isolated for another model")
        size = parent.last_prepared.tokens if parent.last_prepared is not None else 0
        if parent.last_prepared is None or size > self.limits.fork_max_tokens:
            note = (f"[fork fell back to isolated: the parent's view is {size:,} tokens, above fork_max_tokens "
                    f"{self.limits.fork_max_tokens:,}]" if parent.last_prepared is not None else
                    "[fork fell back to isolated: the parent has made no model call to fork from]")
            self._emit("subagent", action="fork_fallback", reason=note)
            return _Plan("isolated", definition, model, note)
        last = parent.engine.messages[-1] if parent.engine.messages else None
        if last is None or last.role != "assistant" or not last.tool_calls:
            raise SubagentError("a fork starts from the parent's last assistant message with its tool calls",
                                "call task(context=fork) as a tool call of the model")
        return _Plan("fork", definition, model, prepared=parent.last_prepared, last=last,
                     calibration=parent.engine.calibrator.to_dict())

    def _reserve(self) -> None:
        with self._lock:
            if self._active >= self.limits.max_children_per_agent:
                raise SubagentError(f"this agent already runs {self._active} sub-agents "
                                    f"(max_children_per_agent {self.limits.max_children_per_agent})",
                                    "wait for them, or run the tasks in a chain")
            self._active += 1

    def _spawn(self, parent: Agent, plan: _Plan, task: str, call_id: str | None, label: str | None, cancel: Cancel,
               on_record: Callable[[ChildRecord], None] | None) -> ChildResult:
        """Run a planned child in the slot it waits for (its reservation is released at the end). A
        child whose cancel is set before it starts does not start."""
        try:
            if not _acquire(self.tree.slots, cancel):
                return ChildResult("", NOT_STARTED, 0, plan.context, "", "the requester was interrupted")
            try:
                lock = self.tree.persistent_lock(plan.definition.name) if plan.definition.persistent else None
                if lock is not None and not _acquire(lock, cancel):
                    return ChildResult("", NOT_STARTED, 0, plan.context, "", "the requester was interrupted")
                try:
                    return self._run_child(parent, plan, task, call_id, label or call_id, cancel, on_record)
                finally:
                    if lock is not None:
                        lock.release()
            finally:
                self.tree.slots.release()
        finally:
            with self._lock:
                self._active -= 1

    def _open_session(self, parent: Agent, definition: AgentDefinition, label: str | None,
                      number: int) -> tuple[SessionLog, str]:
        log: SessionLog
        if definition.persistent:
            assert self.state_root is not None  # (_plan refuses a persistent agent without one)
            folder = self.state_root / definition.name / "session"
            log = Session.open(folder, meta={"agent": definition.name, "persistent": True})
        elif self.sessions_root is None:
            return MemorySessionLog(), f"memory:child-{number}"
        else:
            parent_id = getattr(parent.engine.session, "session_id", "session")
            folder = _new_folder(self.sessions_root, f"{parent_id}.{label or 'task'}.{number}")
            log = Session.open(folder, meta={"parent": str(parent_id), "call_id": label})
        return log, str(folder)

    def _model(self, parent: Agent, name: str | None) -> Model:
        if name is None or name == parent.model.model:
            return parent.model
        if self.models is None:
            raise SubagentError(f"no client for model {name!r}", "give SubAgents(models=...) a factory of models")
        return self.models(name)

    def _run_child(self, parent: Agent, plan: _Plan, task: str, call_id: str | None, label: str | None,
                   cancel: Cancel, on_record: Callable[[ChildRecord], None] | None) -> ChildResult:
        definition, context = plan.definition, plan.context
        if cancel.is_set():
            return ChildResult("", NOT_STARTED, 0, context, "", "the requester was interrupted")
        number = self.tree.next_id()
        child_id = f"{parent.id}.{number}"
        session, ref = self._open_session(parent, definition, label, number)
        link = {"type": "subagent", "context": context, "agent": definition.name, "call_id": call_id,
                "agent_id": child_id}
        memory = None
        try:
            parent.engine.session.append("custom", {**link, "child": ref})
            session.append("custom", {**link, "type": "subagent_parent",
                                      "parent": str(getattr(parent.engine.session, "directory", "memory"))})
            # The child's own cancel under the one it was given: its run clears its own at the start (as
            # every run does), never the one given (a background job's, which task_cancel sets).
            own = cancel.child()
            if context == "fork":
                child: Agent = self._fork(parent, plan, session, task, call_id, own, child_id)
            else:
                child, memory = self._isolated(parent, session, definition, task, plan.model, own, child_id)
            record = ChildRecord(child_id, child.depth, definition.name, context, ref, child.stats, child.children,
                                 background=on_record is not None)
            with parent._tree_lock:
                parent.children.append(record)
            if on_record is not None:
                on_record(record)
            if cancel.is_set():  # interrupted while it was being built: it never makes a call
                record.stop = NOT_STARTED
                return ChildResult("", NOT_STARTED, 0, context, ref, "the requester was interrupted", child_id)
            self._emit("subagent", action="start", context=context, agent=definition.name, child=child_id,
                       session=ref, task=task[:200])
            result = child.run(None)
            record.stop = result.stop
        finally:
            if memory is not None:
                memory.close()
            if hasattr(session, "directory"):
                session.close()
        self._emit("subagent", action="end", context=context, child=child_id, session=ref, stop=result.stop,
                   steps=result.steps)
        return ChildResult(result.text, result.stop, result.steps, context, ref, plan.note, child_id)

    def _child_subagents(self, definition: str, is_fork: bool) -> SubAgents:
        return SubAgents(definitions=list(self.definitions.values()), definition=definition, limits=self.limits,
                         models=self.models, sessions_root=self.sessions_root, state_root=self.state_root,
                         depth=self.depth + 1, is_fork=is_fork, tree=self.tree)

    def _isolated(self, parent: Agent, session: SessionLog, definition: AgentDefinition, task: str,
                  model_name: str | None, cancel: Cancel, child_id: str) -> tuple[Agent, MemoryIndex | None]:
        ws = parent.workspace
        if ws is not None and definition.permission_mode == "read-only" and ws.allow_shell:
            ws = replace(ws, allow_shell=False)
        nested = self.depth + 1 < self.limits.max_depth  # only then may the child spawn in turn
        subagents = self._child_subagents(definition.name, is_fork=False) if nested else None
        extra: list[ToolSpec] = subagents.tools() if subagents is not None else []
        names = definition.tools
        if names is not None:  # the background tools come with task; none of them without a way to spawn
            names = [n for n in names if n not in SUBAGENT_TOOLS] + \
                (list(SUBAGENT_TOOLS) if nested and "task" in names else [])
        memory = None
        folder = None
        if definition.persistent:
            assert self.state_root is not None
            folder = self.state_root / definition.name
            memory, specs = _memory_tools(folder)
            extra += specs
            names = None if names is None else [*names, *MEMORY_TOOLS]
        try:
            tools = tool_table(ws, names, extra)
            model = self._model(parent, resolve_model(model_name or definition.model, parent.model.model))
            policy = parent.engine.policy
            today = date.fromtimestamp(parent.engine.clock())
            flush = None
            if folder is not None:
                from ctxwin.memory.flush import daily_notes

                notes = daily_notes(folder, clock=parent.engine.clock)

                def flush(span: list[Message]) -> None:  # before a compaction: notes in its memory folder
                    notes(span)
            engine = ContextEngine(session, model=model.model, policy=policy, window=parent.engine.window,
                                   max_output=parent.engine.max_output,
                                   system=child_system(definition, ws, policy.bootstrap, folder, today),
                                   tools=[tool_schema(s) for s in tools.values()], memory_flush=flush)
            config = parent.config.model_copy(update={"max_steps": definition.max_steps, "tools": names})
            child = Agent(engine, model, workspace=ws, config=config, extra_tools=extra, on_event=parent.on_event,
                          cancel=cancel, parent=parent, agent_id=child_id)
            if subagents is not None:
                subagents.attach(child)
            resumed = bool(engine.messages)
            if resumed:  # a persistent agent's earlier call may have stopped with calls open
                child.answer_pending("the previous call was stopped")
            else:
                # Every skill read before one is logged: a skill that cannot be read leaves no part of them
                # (a persistent agent's next call would take a half-loaded session as resumed).
                skills = [(Path(path).parent.name if Path(path).name == "SKILL.md" else path, _read_skill(ws, path))
                          for path in definition.skills]
                for name, text in skills:
                    engine.append(Message("user", (Text(f"<skill name=\"{name}\">\n{text}\n</skill>"),)))
            engine.append(Message("user", (Text(f"Task: {task}"),)))
        except BaseException:
            if memory is not None:  # its index is closed by the caller only once the child exists
                memory.close()
            raise
        return child, memory

    def _fork(self, parent: Agent, plan: _Plan, session: SessionLog, directive: str, call_id: str | None,
              cancel: Cancel, child_id: str) -> Agent:
        prepared, last = plan.prepared, plan.last
        assert prepared is not None and last is not None and plan.calibration is not None  # (_plan took them)
        # The fork's log starts as the parent's last request, as it was sent, then the clone of the
        # parent's assistant message (every tool call and its id, as the parent itself sends it), a
        # placeholder result for each call and the directive. Written before the fork's engine opens,
        # so its per-message stages take all of it as processed, and with the parent's calibration,
        # so it counts tokens as the parent does.
        placeholders = tuple(
            ToolResult(c.id, (Text(FORK_SELF_PLACEHOLDER if c.id == call_id else FORK_PLACEHOLDER),), False, c.name)
            for c in last.tool_calls)
        envelope = Text(FORK_DIRECTIVE.format(tag=FORK_TAG, directive=directive))
        tail = [last, Message("tool", placeholders), Message("user", (envelope,))]
        for message in [*prepared.messages, *tail]:
            session.append(MessageEntry.kind, MessageEntry(message).to_payload())
        calibration = CalibrationEntry(plan.calibration)
        session.append(calibration.kind, calibration.to_payload())
        engine = ContextEngine(session, model=parent.engine.model, policy=parent.engine.policy,
                               window=parent.engine.window, max_output=parent.engine.max_output,
                               system=prepared.system, tools=prepared.tools)
        subagents = self._child_subagents(self.definition, is_fork=True)
        # The same tool table (and so the same schemas) as the parent; the child's `task` refuses forks.
        extra = [s for s in subagents.tools() if s.name in parent.tools]
        child = ForkAgent(engine, parent.model, workspace=parent.workspace, config=parent.config, extra_tools=extra,
                          on_event=parent.on_event, cancel=cancel, parent=parent, agent_id=child_id)
        child.tools = {**parent.tools, **{s.name: s for s in extra}}
        subagents.attach(child)
        # Read the parent's cached prefix back: a breakpoint where the parent's last request ended.
        child.cache_marks = (len(prepared.to_anthropic()["messages"]) - 1,)
        return child


class ForkAgent(Agent):
    """A fork's loop: its first request is prepared with the parent's decisions frozen (no masking
    or pruning revises the prefix it shares with the parent, so that prefix goes out byte for byte and
    is read from the provider's cache); its own decisions apply from the next request on. Fit and
    compaction still run, so the first request fits whatever it costs the cache."""

    frozen = True

    def prepare(self) -> Prepared:
        if not self.frozen:
            return super().prepare()
        self.frozen = False
        policy = self.engine.policy
        self.engine.policy = frozen_policy(policy)
        try:
            return super().prepare()
        finally:
            self.engine.policy = policy


def frozen_policy(policy: Policy) -> Policy:
    """`policy` without the stages that revise what an earlier request already sent (masking, pruning)."""
    return policy.model_copy(update={"mask": policy.mask.model_copy(update={"enabled": False}),
                                     "prune": policy.prune.model_copy(update={"enabled": False})})


def child_system(definition: AgentDefinition, ws: Workspace | None, policy: BootstrapPolicy,
                 memory_root: Path | None, today: date) -> str:
    """An isolated child's system prompt: its definition's, then the allowlisted workspace files (and
    only those), then, for a persistent agent, its memory folder, read now (so it is fixed for the call)."""
    parts = [definition.system]
    if memory_root is not None:
        parts.append(PERSISTENT_NOTE)
    if ws is not None and definition.workspace_files:
        allowed = policy.model_copy(update={"files": list(definition.workspace_files)})
        parts.append(bootstrap.render(bootstrap.read_files(Path(ws.roots[0]), allowed), allowed).text)
    if memory_root is not None:
        parts.append(memory_section(memory_root, policy))
    return "\n\n".join(p for p in parts if p)


def memory_section(root: Path, policy: BootstrapPolicy) -> str:
    """A persistent agent's memory folder (`root/memory`, the memory tool's /memories) for its system
    prompt: every file, in name order, under the bootstrap caps."""
    folder = root / MEMORY_DIR
    paths = sorted(p for p in folder.rglob("*.md") if p.is_file()) if folder.is_dir() else []
    if not paths:
        return MEMORY_HEADER + "\nEmpty: nothing kept yet."
    out, remaining = [MEMORY_HEADER], policy.total_max_chars
    for path in paths:
        name = f"/memories/{path.relative_to(folder).as_posix()}"
        if remaining < bootstrap.MIN_REMAINING_CHARS:
            out.append(f"\n## {name}\n\n[not shown: over the memory section's cap; view it with the memory tool]\n")
            continue
        shown = bootstrap.fit_file(name, path.read_bytes().decode("utf-8", "replace"),
                                   min(policy.per_file_max_chars, remaining), policy.head_share)
        remaining -= len(shown)
        out.append(f"\n## {name}\n\n{shown}\n")
    return "".join(out)


def _memory_tools(folder: Path) -> tuple[MemoryIndex, list[ToolSpec]]:
    """The memory tools (`memory`, `memory_search`, `memory_get`) over a persistent agent's folder, as
    tool specs, and the index they search (closed when the call ends)."""
    from ctxwin.memory.index import MemoryIndex
    from ctxwin.memory.tools import SPECS, MemoryTools

    folder.mkdir(parents=True, exist_ok=True)
    index = MemoryIndex.open(folder / "index.sqlite")
    tools = MemoryTools(folder, index)

    def runner(name: str) -> Callable[..., ToolOutput]:
        def run(ws: Workspace | None, **args: Any) -> ToolOutput:
            out = tools.run(name, args)
            return ToolOutput(out.text, is_error=out.is_error, details=dict(out.details))
        return run

    return index, [ToolSpec(n, SPECS[n].description, SPECS[n].parameters, runner(n)) for n in MEMORY_TOOLS]


def _new_folder(root: Path, name: str) -> Path:
    """A folder no session is in yet for a new child: `root/name`, or `name-2`, `name-3` ... when an
    earlier run left one there (a resumed parent calls the same task again, in a process whose child
    numbers start at 1 again). Made here, so two writers never take the same one."""
    root.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    attempt = 1
    while True:
        folder = root / (name if attempt == 1 else f"{name}-{attempt}")
        try:
            folder.mkdir(mode=DIR_MODE)  # a session's own mode: its owner alone reads the conversation
        except FileExistsError:
            attempt += 1
            continue
        return folder


def _read_skill(ws: Workspace | None, path: str) -> str:
    """A skill's text: an absolute path (from a definition file) as it is; a workspace path; or a
    Claude Code skill name, `.claude/skills/<name>/SKILL.md` in the workspace."""
    if Path(path).is_absolute():
        try:
            return Path(path).read_text("utf-8")
        except OSError as error:
            raise SubagentError(f"skill {path} cannot be read: {error}", "fix the skill path in the definition") \
                from None
    if ws is None:
        raise SubagentError(f"skill {path}: this agent has no workspace to read it from")
    candidates = [path] if "/" in path or path.endswith(".md") else [f".claude/skills/{path}/SKILL.md", path]
    for candidate in candidates:
        try:
            return Path(ws.resolve(candidate).real).read_text("utf-8")
        except (OSError, ToolError) as error:
            last = error
    raise SubagentError(f"skill {path} cannot be read: {last}",
                        "give a skill file inside the workspace, or a skill in .claude/skills/<name>/SKILL.md")


def _said(error: CtxwinError) -> str:
    return f"{error.message} ({error.hint})" if error.hint else error.message


def _job_text(job: Background) -> str:
    result = job.result
    if result is None:
        return f"[{job.handle}: still {job.state()}]"
    return f"[background task {job.handle}: {job.task[:200]}]\n{result.as_tool_text()}"


TASK_DESCRIPTION = (
    "Delegate work to a sub-agent and get its final answer back. context=isolated (default): a fresh agent that "
    "sees only the task (and AGENTS.md/TOOLS.md); say everything it needs. context=fork: a copy of you with your "
    "whole conversation, for a side task that needs it (same agent and model; a fork cannot fork). "
    "mode=parallel runs `tasks` at once (at most 8, 4 at a time); mode=chain runs them in order, {previous} in a "
    "task standing for the previous answer. background=true returns a handle at once and the sub-agent works "
    "while you go on; its answer comes to you when it is done."
)
STATUS_DESCRIPTION = "The state of your background tasks (all, or `handles`): running, finished or collected."
WAIT_DESCRIPTION = ("Wait for background tasks (all not yet collected, or `handles`) to finish, at most timeout_s "
                    "seconds, and get their answers.")
CANCEL_DESCRIPTION = "Stop a background task (and its own sub-agents) and get what it did so far."


def _task_parameters(agents: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "The task (mode single)."},
            "tasks": {"type": "array", "items": {"type": "string"}, "description": "Tasks (mode parallel or chain)."},
            "mode": {"type": "string", "enum": ["single", "parallel", "chain"], "default": "single"},
            "context": {"type": "string", "enum": ["isolated", "fork"], "default": "isolated"},
            "agent": {"type": "string", "enum": agents, "description": "Agent definition name (default: your own)."},
            "model": {"type": "string", "description": "Model for an isolated sub-agent (default: yours)."},
            "background": {"type": "boolean", "description": "Run in the background: a handle now, the answer later."},
        },
        "required": [],
        "additionalProperties": False,
    }


TASK_PARAMETERS = _task_parameters(["default"])
HANDLES_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"handles": {"type": "array", "items": {"type": "string"},
                               "description": "Handles task returned (default: all)."}},
    "required": [], "additionalProperties": False,
}
WAIT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {**HANDLES_PARAMETERS["properties"],
                   "timeout_s": {"type": "number", "minimum": 0, "description": "The longest to wait, in seconds."}},
    "required": [], "additionalProperties": False,
}
CANCEL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"handle": {"type": "string", "description": "The handle task returned."}},
    "required": ["handle"], "additionalProperties": False,
}
