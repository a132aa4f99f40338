"""Sub-agents: the `task` tool a model calls, and the same as an API (`SubAgents.spawn/parallel/chain`).

- **isolated** (the default): a fresh session whose only user message is `Task: <task>` (after the
  definition's skills, preloaded as user messages); its own system prompt plus the allowlisted
  workspace files (AGENTS.md and TOOLS.md, as OpenClaw gives its children); its own tool allowlist and
  permission mode. Nothing of the parent's history.
- **fork** (Claude Code's forkSubagent): the parent's system prompt, tools and last request byte for
  byte, so the provider's prompt cache is read back; then the parent's last assistant message with all
  its tool calls, a placeholder result for each, and the directive in a `<fork-boilerplate>` envelope.
  Same definition and model only; a fork cannot fork; above `fork_max_tokens` it runs isolated and
  says so.
- **parallel** (at most 8 tasks, 4 at once, Pi) and **chain** (`{previous}` in a task is the previous
  result, Pi; without it the previous result is appended).

Each child is its own stored session (under `sessions_root`, or in memory), linked to its parent by a
`custom` entry in both logs. Its answer comes back as a tool result (budgeted by the parent's engine
like any other) that ends with a ref to the child's full transcript.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ctxwin.agent.loop import Agent, LoopEvent, tool_schema, tool_table
from ctxwin.agent.model import Model
from ctxwin.engine import ContextEngine
from ctxwin.errors import SubagentError
from ctxwin.messages import Message, Text, ToolResult
from ctxwin.store import Session
from ctxwin.store.base import SessionLog
from ctxwin.store.in_memory import MemorySessionLog
from ctxwin.tools import ToolError, ToolOutput, ToolSpec, Workspace

FORK_TAG = "fork-boilerplate"
FORK_DIRECTIVE = (
    "<{tag}>\nYou are a fork of the agent whose conversation is above: you share its history, but your "
    "work is only this directive. The tool calls of the last assistant message are handled by the parent; "
    "their results are not available to you. You cannot start forks. Answer with your result in text when "
    "done.\n\nDirective: {directive}\n</{tag}>"
)
FORK_PLACEHOLDER = "[Handled by the parent agent; this fork does not see the result.]"
FORK_SELF_PLACEHOLDER = "[This call started you, the fork; your directive follows.]"
PREVIOUS = "{previous}"
Context = Literal["isolated", "fork"]


class SubagentLimits(BaseModel):
    """Bounds on spawning (OpenClaw's defaults for depth and concurrency, Pi's for parallel runs)."""

    model_config = ConfigDict(extra="forbid")

    max_depth: int = Field(1, ge=1, le=5)
    """How deep sub-agents may nest: 1 lets the main agent spawn and its children not (maxSpawnDepth)."""
    max_children_per_agent: int = Field(5, ge=1)
    """Sub-agents one agent may have running at once (maxChildrenPerAgent); more are refused."""
    max_concurrent: int = Field(8, ge=1)
    """Sub-agents running at once in the whole tree (maxConcurrent); more wait for a slot."""
    max_parallel_tasks: int = Field(8, ge=1)
    """Tasks one parallel call may carry."""
    parallel_at_once: int = Field(4, ge=1)
    """Of those, how many run at once."""
    fork_max_tokens: int = Field(100_000, ge=0)
    """A fork whose parent's last request was above this many tokens runs isolated instead (and says so)."""


class AgentDefinition(BaseModel):
    """A kind of sub-agent (Claude Code's `.claude/agents/*.md` frontmatter, the fields that matter here)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "default"
    """What `task(agent=...)` names; a fork must name its parent's definition."""
    description: str = ""
    system: str = ("You are a sub-agent. Do the task you are given with the tools you have, then answer with the "
                   "result in text: it is all the requester will see.")
    """The child's own system prompt (isolated children)."""
    tools: list[str] | None = None
    """Tool allowlist (None: every registry tool the workspace and the permission mode allow)."""
    permission_mode: Literal["default", "read-only"] = "default"
    """`read-only`: no shell, whatever the parent may do."""
    workspace_files: list[str] = Field(default_factory=lambda: ["AGENTS.md", "TOOLS.md"])
    """Workspace files put in the child's system prompt (OpenClaw gives children AGENTS.md and TOOLS.md)."""
    skills: list[str] = Field(default_factory=list)
    """Workspace paths of skill files, preloaded in full as user messages before the task."""
    max_steps: int = Field(50, ge=1)
    """Model calls the child may make."""
    model: str | None = None
    """The child's model (None: the parent's)."""


@dataclass(frozen=True)
class ChildResult:
    """What one sub-agent returned: its last text, why it stopped, where its transcript is, and which
    context it really ran in (`note` says why, when that is not the one asked for)."""

    text: str
    stop: str
    steps: int
    context: Context
    session: str
    note: str = ""

    def as_tool_text(self) -> str:
        head = f"{self.note}\n\n" if self.note else ""
        return (f"{head}{self.text}\n\n[sub-agent ({self.context}) stopped: {self.stop} after {self.steps} steps; "
                f"full transcript: {self.session}]")


@dataclass
class _Tree:
    """What every agent of one tree shares: the global concurrency slots."""

    slots: threading.BoundedSemaphore
    counter: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_id(self) -> int:
        with self.lock:
            self.counter += 1
            return self.counter


class SubAgents:
    """Spawns children for one parent agent. `models(name)` gives a `Model` for a model name (default:
    the parent's own model, for its name only); `sessions_root` is where child sessions are stored
    (None: in memory). Call `tool()` for the `task` tool spec, and `attach(parent)` once the parent
    exists (the parent's engine must be built with the tool's schema, so the tool comes first)."""

    def __init__(self, *, definitions: Sequence[AgentDefinition] = (), definition: str = "default",
                 limits: SubagentLimits | None = None, models: Callable[[str], Model] | None = None,
                 sessions_root: str | Path | None = None, depth: int = 0, is_fork: bool = False,
                 on_event: Callable[[LoopEvent], None] | None = None, tree: _Tree | None = None) -> None:
        self.definitions = {d.name: d for d in definitions} or {"default": AgentDefinition()}
        self.definitions.setdefault(definition, AgentDefinition(name=definition))
        self.definition = definition
        self.limits = limits or SubagentLimits()
        self.models = models
        self.sessions_root = Path(sessions_root) if sessions_root is not None else None
        self.depth = depth
        self.is_fork = is_fork
        self.on_event = on_event
        self.tree = tree or _Tree(threading.BoundedSemaphore(self.limits.max_concurrent))
        self.parent: Agent | None = None
        self._active = 0
        self._lock = threading.Lock()

    def attach(self, parent: Agent) -> SubAgents:
        self.parent = parent
        return self

    # ---------------------------------------------------------------- the tool

    def tool(self) -> ToolSpec:
        return ToolSpec("task", TASK_DESCRIPTION, TASK_PARAMETERS, self._run_tool, context=("call_id",))

    def _run_tool(self, ws: Workspace, call_id: str | None = None, **args: Any) -> ToolOutput:
        try:
            tasks = list(args.get("tasks") or ([args["task"]] if args.get("task") else []))
            mode = args.get("mode") or ("parallel" if len(tasks) > 1 else "single")
            if not tasks:
                raise ToolError("bad_argument", "task needs `task` (one) or `tasks` (several)")
            options = {"context": args.get("context", "isolated"), "agent": args.get("agent"),
                       "model": args.get("model"), "call_id": call_id}
            if mode == "single":
                if len(tasks) != 1:
                    raise ToolError("bad_argument", "mode single takes one task", "Use mode parallel or chain.")
                results = [self.spawn(tasks[0], **options)]
            elif mode == "parallel":
                results = self.parallel(tasks, **options)
            else:
                results = self.chain(tasks, **options)
        except SubagentError as error:
            return ToolOutput.error(ToolError("subagent", error.message, error.hint))
        text = "\n\n".join(f"## Task {n}\n{r.as_tool_text()}" if len(results) > 1 else r.as_tool_text()
                           for n, r in enumerate(results, 1))
        return ToolOutput(text, is_error=all(r.stop in ("error", "refused") for r in results),
                          details={"children": [r.session for r in results], "contexts": [r.context for r in results]})

    # ---------------------------------------------------------------- the API

    def parallel(self, tasks: Sequence[str], **options: Any) -> list[ChildResult]:
        """Run `tasks` at once (`parallel_at_once` at a time); results in task order."""
        if len(tasks) > self.limits.max_parallel_tasks:
            raise SubagentError(f"{len(tasks)} parallel tasks; at most {self.limits.max_parallel_tasks}",
                                "split them into several calls, or chain them")
        call_id = options.pop("call_id", None)
        with ThreadPoolExecutor(max_workers=min(self.limits.parallel_at_once, len(tasks))) as pool:
            futures = [pool.submit(self._spawn_or_refusal, task, call_id=f"{call_id or 'task'}-{n}", **options)
                       for n, task in enumerate(tasks, 1)]
            return [f.result() for f in futures]

    def _spawn_or_refusal(self, task: str, **options: Any) -> ChildResult:
        """One task of several: a refusal (a limit) is that task's result, not the whole call's."""
        try:
            return self.spawn(task, **options)
        except SubagentError as error:
            text = f"{error.message} ({error.hint})" if error.hint else error.message
            return ChildResult(text, "refused", 0, options.get("context", "isolated"), "(not started)")

    def chain(self, tasks: Sequence[str], **options: Any) -> list[ChildResult]:
        """Run `tasks` one after another, each seeing the previous result (`{previous}` in the task, or
        appended to it)."""
        call_id = options.pop("call_id", None)
        results: list[ChildResult] = []
        for n, task in enumerate(tasks, 1):
            if results:
                previous = results[-1].text
                task = task.replace(PREVIOUS, previous) if PREVIOUS in task else \
                    f"{task}\n\n<previous-result>\n{previous}\n</previous-result>"
            results.append(self._spawn_or_refusal(task, call_id=f"{call_id or 'task'}-{n}", **options))
            if results[-1].stop in ("error", "refused"):
                break
        return results

    def spawn(self, task: str, *, context: Context = "isolated", agent: str | None = None, model: str | None = None,
              call_id: str | None = None) -> ChildResult:
        """Run one child to its end and return what it said."""
        parent = self._parent()
        if context == "fork" and self.is_fork:
            raise SubagentError("a fork cannot fork", "do the directive yourself")
        if self.depth + 1 > self.limits.max_depth:
            raise SubagentError(f"sub-agents may nest {self.limits.max_depth} deep; this agent is at depth "
                                f"{self.depth}", "do the task yourself")
        name = agent or self.definition
        if name not in self.definitions:
            raise SubagentError(f"no agent definition {name!r}", f"definitions: {', '.join(self.definitions)}")
        note = ""
        if context == "fork":
            if name != self.definition:
                raise SubagentError(f"a fork runs the requester's own definition ({self.definition!r}), not {name!r}",
                                    "use context isolated for another agent")
            if model is not None and model != parent.model.model:
                raise SubagentError(f"a fork keeps the requester's model ({parent.model.model}); {model} would miss "
                                    "the prompt cache", "use context isolated for another model")
            size = parent.last_prepared.tokens if parent.last_prepared is not None else 0
            if parent.last_prepared is None or size > self.limits.fork_max_tokens:
                context = "isolated"
                note = (f"[fork fell back to isolated: the parent's view is {size:,} tokens, above fork_max_tokens "
                        f"{self.limits.fork_max_tokens:,}]" if parent.last_prepared is not None else
                        "[fork fell back to isolated: the parent has made no model call to fork from]")
                self._emit("subagent", action="fork_fallback", reason=note)
        with self._lock:
            if self._active >= self.limits.max_children_per_agent:
                raise SubagentError(f"this agent already runs {self._active} sub-agents "
                                    f"(max_children_per_agent {self.limits.max_children_per_agent})",
                                    "wait for them, or run the tasks in a chain")
            self._active += 1
        try:
            with self.tree.slots:
                return self._run_child(parent, task, context, name, model, call_id, note)
        finally:
            with self._lock:
                self._active -= 1

    # ---------------------------------------------------------------- children

    def _parent(self) -> Agent:
        if self.parent is None:
            raise SubagentError("SubAgents has no parent agent", "call attach(agent) after creating the agent")
        return self.parent

    def _emit(self, kind: str, **data: Any) -> None:
        if self.parent is not None:
            self.parent.emit(kind, **data)

    def _open_session(self, parent: Agent, call_id: str | None) -> tuple[SessionLog, str]:
        number = self.tree.next_id()
        if self.sessions_root is None:
            return MemorySessionLog(), f"memory:child-{number}"
        parent_id = getattr(parent.engine.session, "session_id", "session")
        folder = self.sessions_root / f"{parent_id}.{call_id or 'task'}.{number}"
        return Session.open(folder, meta={"parent": str(parent_id), "call_id": call_id}), str(folder)

    def _model(self, parent: Agent, name: str | None) -> Model:
        if name is None or name == parent.model.model:
            return parent.model
        if self.models is None:
            raise SubagentError(f"no client for model {name!r}", "give SubAgents(models=...) a factory of models")
        return self.models(name)

    def _run_child(self, parent: Agent, task: str, context: Context, name: str, model_name: str | None,
                   call_id: str | None, note: str) -> ChildResult:
        definition = self.definitions[name]
        session, ref = self._open_session(parent, call_id)
        link = {"type": "subagent", "context": context, "agent": name, "call_id": call_id}
        parent.engine.session.append("custom", {**link, "child": ref})
        session.append("custom", {**link, "type": "subagent_parent",
                                  "parent": str(getattr(parent.engine.session, "directory", "memory"))})
        self._emit("subagent", action="start", context=context, agent=name, session=ref, task=task[:200])
        try:
            child = (self._fork(parent, session, task, call_id) if context == "fork"
                     else self._isolated(parent, session, definition, task, model_name))
            result = child.run(None)
        finally:
            if hasattr(session, "directory"):
                session.close()
        self._emit("subagent", action="end", context=context, session=ref, stop=result.stop, steps=result.steps)
        return ChildResult(result.text, result.stop, result.steps, context, ref, note)

    def _child_subagents(self, definition: str, is_fork: bool) -> SubAgents:
        return SubAgents(definitions=list(self.definitions.values()), definition=definition, limits=self.limits,
                         models=self.models, sessions_root=self.sessions_root, depth=self.depth + 1, is_fork=is_fork,
                         tree=self.tree)

    def _isolated(self, parent: Agent, session: SessionLog, definition: AgentDefinition, task: str,
                  model_name: str | None) -> Agent:
        ws = parent.workspace
        if ws is not None and definition.permission_mode == "read-only" and ws.allow_shell:
            ws = replace(ws, allow_shell=False)
        extra: list[ToolSpec] = []
        subagents = None
        if self.depth + 1 < self.limits.max_depth:  # only then may the child spawn in turn
            subagents = self._child_subagents(definition.name, is_fork=False)
            extra.append(subagents.tool())
        tools = tool_table(ws, definition.tools, extra)
        model = self._model(parent, model_name or definition.model)
        policy = parent.engine.policy
        files = definition.workspace_files
        root = Path(ws.roots[0]) if ws is not None else None
        if files and root is not None:
            policy = policy.model_copy(update={"bootstrap": policy.bootstrap.model_copy(
                update={"enabled": True, "files": list(files)})})
        engine = ContextEngine(session, model=model.model, policy=policy, window=parent.engine.window,
                               max_output=parent.engine.max_output, system=definition.system,
                               tools=[tool_schema(s) for s in tools.values()], workspace=root if files else None)
        for skill in definition.skills:
            engine.append(Message("user", (Text(f"<skill name=\"{skill}\">\n{_read_skill(ws, skill)}\n</skill>"),)))
        engine.append(Message("user", (Text(f"Task: {task}"),)))
        config = parent.config.model_copy(update={"max_steps": definition.max_steps, "tools": definition.tools})
        child = Agent(engine, model, workspace=ws, config=config, extra_tools=extra, on_event=parent.on_event,
                      cancel=parent.cancel)
        if subagents is not None:
            subagents.attach(child)
        return child

    def _fork(self, parent: Agent, session: SessionLog, directive: str, call_id: str | None) -> Agent:
        prepared = parent.last_prepared
        assert prepared is not None
        last = parent.engine.messages[-1]
        if last.role != "assistant" or not last.tool_calls:
            raise SubagentError("a fork starts from the parent's last assistant message with its tool calls",
                                "call task(context=fork) as a tool call of the model")
        engine = ContextEngine(session, model=parent.engine.model, policy=parent.engine.policy,
                               window=parent.engine.window, max_output=parent.engine.max_output,
                               system=prepared.system, tools=prepared.tools)
        engine.append(prepared.messages)  # the parent's view as it was sent
        engine.append(last)  # the clone, every tool call and its id, as the parent itself sends it
        engine.append(Message("tool", tuple(
            ToolResult(c.id, (Text(FORK_SELF_PLACEHOLDER if c.id == call_id else FORK_PLACEHOLDER),), False, c.name)
            for c in last.tool_calls)))
        engine.append(Message("user", (Text(FORK_DIRECTIVE.format(tag=FORK_TAG, directive=directive)),)))
        subagents = self._child_subagents(self.definition, is_fork=True)
        # The same tool table (and so the same schemas) as the parent; the child's `task` refuses forks.
        extra = [subagents.tool()] if "task" in parent.tools else []
        child = Agent(engine, parent.model, workspace=parent.workspace, config=parent.config, extra_tools=extra,
                      on_event=parent.on_event, cancel=parent.cancel)
        child.tools = {**parent.tools, **{s.name: s for s in extra}}
        subagents.attach(child)
        # Read the parent's cached prefix back: a breakpoint where the parent's last request ended.
        child.cache_marks = (len(prepared.to_anthropic()["messages"]) - 1,)
        return child


def _read_skill(ws: Workspace | None, path: str) -> str:
    if ws is None:
        raise SubagentError(f"skill {path}: this agent has no workspace to read it from")
    try:
        return Path(ws.resolve(path).real).read_text("utf-8")
    except (OSError, ToolError) as error:
        raise SubagentError(f"skill {path} cannot be read: {error}", "give a skill file inside the workspace") from None


TASK_DESCRIPTION = (
    "Delegate work to a sub-agent and get its final answer back. context=isolated (default): a fresh agent that "
    "sees only the task (and AGENTS.md/TOOLS.md); say everything it needs. context=fork: a copy of you with your "
    "whole conversation, for a side task that needs it (same agent and model; a fork cannot fork). "
    "mode=parallel runs `tasks` at once (at most 8, 4 at a time); mode=chain runs them in order, {previous} in a "
    "task standing for the previous answer."
)
TASK_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "The task (mode single)."},
        "tasks": {"type": "array", "items": {"type": "string"}, "description": "Tasks (mode parallel or chain)."},
        "mode": {"type": "string", "enum": ["single", "parallel", "chain"], "default": "single"},
        "context": {"type": "string", "enum": ["isolated", "fork"], "default": "isolated"},
        "agent": {"type": "string", "description": "Agent definition name (default: your own)."},
        "model": {"type": "string", "description": "Model for an isolated sub-agent (default: yours)."},
    },
    "required": [],
    "additionalProperties": False,
}
