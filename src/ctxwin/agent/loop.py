"""The agent loop: run -> step -> query -> execute, each overridable (mini-swe-agent's shape).

`engine.prepare()` runs before every model call, so compaction can happen between any two calls of
one tool loop (Pi #7821: compaction only between prompts came 45 turns late). The loop appends what
happens to the engine's session (the log is the truth): the user's message, each assistant message,
each batch of tool results. Resuming is opening the same session again: the engine rebuilds its
state and `resume()` continues from the last message.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

import httpx
from pydantic import BaseModel, ConfigDict, Field

from ctxwin import policies
from ctxwin.agent.events import LoopEvent, RunResult, RunStats, loop_event
from ctxwin.agent.model import Model
from ctxwin.agent.processes import child_groups, kill_tool_processes
from ctxwin.agent.tree import Cancel, ChildRecord, tree_totals
from ctxwin.compaction.checkpoint import request_message as checkpoint_request
from ctxwin.engine import ContextEngine, Prepared
from ctxwin.errors import CtxwinError, Interrupted, ModelCallCancelled
from ctxwin.memory.consolidate.schedule import SleepConfig, SleepTime, sleep_time
from ctxwin.memory.flush import daily_notes
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.messages.providers import RAW_ARGUMENTS
from ctxwin.pipeline.view import Event
from ctxwin.policies.model import Policy
from ctxwin.providers import Completion, ProviderError
from ctxwin.store.base import SessionLog
from ctxwin.tokens import model_info
from ctxwin.tokens.breakdown import Breakdown, usage_breakdown
from ctxwin.tokens.registry import ModelInfo
from ctxwin.tools import TOOLS, ToolError, ToolOutput, ToolSpec, Workspace
from ctxwin.tools.registry import available, validate_args

if TYPE_CHECKING:
    from ctxwin.agent.subagents import SubAgents

EventSink = Callable[["LoopEvent"], None]
A = TypeVar("A", bound="Agent")


class AgentConfig(BaseModel):
    """How the loop runs. Every limit is per `run()` (one user turn) unless it says otherwise."""

    model_config = ConfigDict(extra="forbid")

    system: str = "You are a careful software agent. Use the tools to work in the workspace; answer in text when done."
    """The system prompt (the engine adds bootstrap files and system messages to it)."""
    max_steps: int = Field(100, ge=1)
    """Model calls one run may make (each step is one assistant message) before it stops."""
    max_tokens: int = Field(4096, ge=1)
    """Output cap sent with each call (never above the engine's max_output)."""
    max_cost_usd: float | None = Field(None, ge=0)
    """Stop a run once its calls cost this much (priced with the two fields below); None: no limit."""
    input_usd_per_mtok: float = Field(0.0, ge=0)
    """Price of a million input tokens (cache reads and writes priced as input)."""
    output_usd_per_mtok: float = Field(0.0, ge=0)
    """Price of a million output tokens."""
    parallel_tools: int = Field(4, ge=1)
    """Tool calls of one assistant message run at once (results always come back in call order)."""
    max_repeats: int = Field(3, ge=1)
    """The same call (name and arguments) this many times in a row is answered; the next ones get an
    error result, and the run stops at two more."""
    tools: list[str] | None = None
    """Registry tools offered (None: every tool the workspace allows); extra tools are always offered."""
    memory_flush: bool = False
    """Before an automatic compaction, append notes on the span leaving the view to the workspace's
    memory/YYYY-MM-DD.md (OpenClaw's pre-compaction flush; the engine calls it)."""
    consolidate: SleepConfig | None = None
    """Sleep-time consolidation of the workspace's memory (`ctxwin.memory.consolidate`) on a background
    thread, when idle and after `agent.sleep.session_ended()`; None: off."""


def tool_schema(spec: ToolSpec) -> dict[str, Any]:
    """A tool's plain schema (name, description, parameters), the shape `Prepared` converts."""
    return {"name": spec.name, "description": spec.description, "parameters": dict(spec.parameters)}


def tool_table(ws: Workspace | None, names: Sequence[str] | None = None,
               extra: Sequence[ToolSpec] = ()) -> dict[str, ToolSpec]:
    """The tools an agent offers: registry tools the workspace allows (optionally only `names`), then
    the caller's own."""
    unknown = [n for n in names or () if n not in TOOLS and n not in {s.name for s in extra}]
    if unknown:
        raise ToolError("unknown_tool", f"no tool named {', '.join(unknown)}", f"Tools: {', '.join(TOOLS)}.")
    registry = [n for n in names or TOOLS if n in TOOLS]
    table = {s.name: s for s in (available(ws, registry) if ws is not None else [])}
    table.update({s.name: s for s in extra if names is None or s.name in names})
    return table


class Agent:
    """The loop over one engine. `model` sends prepared requests; `workspace` is where tools run;
    `extra_tools` are the caller's own `ToolSpec`s (offered besides the registry's). `on_event`
    receives every `LoopEvent`. Set `cancel` to stop the current step (`interrupt()` does): a `Cancel`,
    or a plain threading.Event this agent's own cancel then follows.

    A sub-agent is built with its `parent`: its id is `agent_id` (the root's is `main`), its depth one
    more than its parent's, its cancel a child of its parent's (an interrupt of any ancestor stops
    it), and what it spends counts against every ancestor's `max_cost_usd`. `children` records every
    sub-agent it started, so `totals()` sums the whole tree."""

    def __init__(self, engine: ContextEngine, model: Model, *, workspace: Workspace | None = None,
                 config: AgentConfig | None = None, extra_tools: Sequence[ToolSpec] = (),
                 on_event: EventSink | None = None, cancel: threading.Event | None = None,
                 parent: Agent | None = None, agent_id: str | None = None) -> None:
        self.engine = engine
        self.model = model
        self.workspace = workspace
        self.config = config or AgentConfig()
        self.tools = tool_table(workspace, self.config.tools, extra_tools)
        self.on_event = on_event
        self.parent = parent
        self.depth: int = parent.depth + 1 if parent is not None else 0
        self.id: str = agent_id or (f"{parent.id}.child" if parent is not None else "main")
        if isinstance(cancel, Cancel):
            self.cancel = cancel
        else:
            self.cancel = Cancel(cancel) if cancel is not None else \
                parent.cancel.child() if parent is not None else Cancel()
        self.children: list[ChildRecord] = []
        self.subagents: SubAgents | None = None  # set by SubAgents.attach: background results come in through it
        self.stats = RunStats(window=engine.window)
        self.last_prepared: Prepared | None = None
        self.last_completion: Completion | None = None
        self.last_outputs: list[ToolOutput] = []  # what the tools of the last step returned, details included
        self.cache_marks: tuple[int, ...] = ()  # extra cache breakpoints for the next call (a fork's)
        self._step = 0
        self._run_cost = 0.0
        self._repeat: tuple[str, int] = ("", 0)
        self._groups_before: set[int] = set()
        self._running_tools = False
        self._tree_lock = threading.Lock()  # children charge its run and record themselves from their threads
        self.sleep: SleepTime | None = None  # sleep-time consolidation, when configured (create_agent)

    # ---------------------------------------------------------------- events

    def emit(self, kind: str, event: Event | None = None, **data: Any) -> None:
        """Report `kind` to `on_event`, as this agent (a sub-agent's events carry its id and depth; the
        root's, "" and 0, print as they always did)."""
        if self.on_event is not None:
            self.on_event(loop_event(kind, self.stats.turns, self._step, event,
                                     agent_id=self.id if self.parent is not None else "", depth=self.depth, **data))

    # ---------------------------------------------------------------- run -> step -> query -> execute

    def run(self, task: str | Message | None = None, *, pending: Sequence[ToolCall] = ()) -> RunResult:
        """One user turn: log `task` (text or a user `Message`; None: continue from the log, see
        `resume`), run the `pending` calls of the last assistant message if any, and step until the
        model answers in text or a limit stops it."""
        if task is not None:
            message = task if isinstance(task, Message) else Message("user", (Text(task),))
            self.engine.append(message)
            self.stats.turns += 1
            self.emit("user", text=message.text)
        if self.sleep is not None:
            self.sleep.begin()  # never idle (for sleep-time consolidation) while a turn runs
        self._step = 0
        self._run_cost = 0.0
        self.cancel.clear()
        try:
            if pending:
                self.execute(list(pending))
            while True:
                limit = self.limit_reached()
                if limit is not None:
                    self.emit("limit", limit=limit)
                    return RunResult(limit, self.last_text(), self._step)
                if self.step():
                    if self.subagents is not None and self.subagents.await_background():
                        continue  # a background sub-agent finished: its result is the next call's
                    self.emit("done", text=self.last_text())
                    return RunResult("done", self.last_text(), self._step)
                if self._repeat[1] >= self.config.max_repeats + 2:
                    self.emit("limit", limit="repeated_call", call=self._repeat[0])
                    return RunResult("repeated_call", self.last_text(), self._step)
        except Interrupted:
            self.answer_pending("interrupted by the user")
            self.emit("interrupted")
            return RunResult("interrupted", self.last_text(), self._step)
        except (CtxwinError, httpx.TransportError) as error:  # the provider's error, recovery exhausted, ...
            text = _describe_failure(error)
            self.stats.errors.append(text)
            self.emit("error", error=text, status=getattr(error, "status_code", None))
            return RunResult("error", text, self._step)
        finally:
            if self.sleep is not None:
                self.sleep.end()

    def resume(self) -> RunResult | None:
        """Continue from the last logged message: run pending tool calls, or call the model after a
        user or tool message. None when the last turn was finished (the model answered)."""
        messages = self.engine.messages
        if not messages:
            return None
        last = messages[-1]
        if last.role == "assistant" and last.tool_calls:
            return self.run(None, pending=last.tool_calls)
        if last.role in ("user", "tool"):
            return self.run(None)
        return None

    def step(self) -> bool:
        """One model call and the tools it asked for. True when the model answered without tools."""
        if self.cancel.is_set():
            raise Interrupted
        if self.subagents is not None:
            self.subagents.deliver()  # finished background sub-agents: their results before the call
        self._step += 1
        self.stats.steps += 1
        completion = self.query()
        message = completion.message
        if not message.blocks:  # an empty answer is not a valid message; say so in the log
            message = Message("assistant", (Text("(no output)"),))
        self.engine.append(message)
        self.last_completion = completion
        self.emit("assistant", text=message.text[:500], tool_calls=[c.name for c in message.tool_calls],
                  stop_reason=completion.stop_reason)
        if not message.tool_calls:
            return True
        self.execute(list(message.tool_calls))
        return False

    def prepare(self) -> Prepared:
        """The request for the next call (the engine's pipeline runs here, compaction included)."""
        prepared = self.engine.prepare()
        self._report(prepared)
        return prepared

    def query(self) -> Completion:
        """Prepare and send, recovering from overflow: compact and retry, bounded by the engine.
        (Transient failures, 429 and 5xx, are retried by the provider client; each retry is an event.)"""
        prepared = self.prepare()
        while True:
            if self.cancel.is_set():
                raise Interrupted
            self.stats.model_calls += 1
            self.stats.max_request_tokens = max(self.stats.max_request_tokens, prepared.tokens)
            self.emit("model_call", tokens=prepared.tokens, budget=prepared.budget, messages=len(prepared.items))
            try:
                completion = self.send(prepared)
            except ProviderError as error:
                if self.engine.is_overflow_error(error):
                    prepared = self._recover(error)
                    continue
                raise
            if completion.usage is not None and self.engine.is_overflow_error(completion.usage):
                prepared = self._recover(completion.usage)  # silent overflow: the input was cut
                continue
            self.last_prepared = prepared
            self.cache_marks = ()
            if completion.usage is not None:
                self.engine.record_usage(completion.usage)
                self._charge(completion)
            return completion

    def send(self, prepared: Prepared) -> Completion:
        """The call itself; `cancel` aborts it (a blocked read, a stream, a wait before a retry)."""
        try:
            return self.model.send(prepared, max_tokens=min(self.config.max_tokens, self.engine.max_output),
                                   cache_marks=self.cache_marks, cancel=self.cancel, notify=self._notify)
        except ModelCallCancelled:
            raise Interrupted from None

    def _notify(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "retry":
            self.stats.retries += 1
        self.emit(kind, **data)

    def execute(self, calls: list[ToolCall]) -> list[ToolResult]:
        """Run the calls (several at once when the model asked for several) and log their results in
        call order, as one tool message."""
        for call in calls:
            self.emit("tool_call", name=call.name, call_id=call.id,
                      arguments=call.arguments if isinstance(call.arguments, dict) else str(call.arguments)[:200])
        checked = [self._check(call) for call in calls]
        self._groups_before = child_groups()  # only processes started from here on are the tools'
        self._running_tools = True
        runnable = [(i, call) for i, (call, refusal) in enumerate(zip(calls, checked, strict=True)) if refusal is None]
        outputs: list[ToolOutput | None] = list(checked)
        try:
            if len(runnable) == 1:
                index, call = runnable[0]
                outputs[index] = self.run_tool(call)
            elif runnable:
                with ThreadPoolExecutor(max_workers=min(self.config.parallel_tools, len(runnable))) as pool:
                    for (index, _), output in zip(runnable, pool.map(self.run_tool, [c for _, c in runnable]),
                                                  strict=True):
                        outputs[index] = output
        finally:
            self._running_tools = False
        done = [out for out in outputs if out is not None]
        results = [out.to_tool_result(call.id, call.name) for call, out in zip(calls, done, strict=True)]
        self.last_outputs = done
        self.engine.append(self.tool_message(results))
        for call, result in zip(calls, results, strict=True):
            self.emit("tool_result", name=call.name, call_id=call.id, is_error=result.is_error,
                      chars=len(result.text))
        if self.cancel.is_set():
            raise Interrupted
        return results

    def tool_message(self, results: list[ToolResult]) -> Message:
        """The message that logs one step's results (override to add meta, e.g. timestamps)."""
        return Message("tool", tuple(results))

    def run_tool(self, call: ToolCall) -> ToolOutput:
        """One tool call (arguments already checked to be a JSON object)."""
        spec = self.tools[call.name]
        try:
            args = validate_args(spec, call.arguments)
        except ToolError as error:
            return ToolOutput.error(error)
        if self.workspace is None and spec.name in TOOLS:
            return ToolOutput.error(ToolError("no_workspace", f"{call.name} needs a workspace and this agent has none"))
        try:
            return spec.invoke(self.workspace, args, None, call.id)
        except ToolError as error:
            return ToolOutput.error(error)

    # ---------------------------------------------------------------- limits and helpers

    def limit_reached(self) -> str | None:
        if self._step >= self.config.max_steps:
            return "max_steps"
        agent: Agent | None = self  # this run's cost limit, and every ancestor's over its whole tree
        while agent is not None:
            if agent.config.max_cost_usd is not None and agent._run_cost >= agent.config.max_cost_usd:
                return "max_cost"
            agent = agent.parent
        return None

    def totals(self) -> dict[str, Any]:
        """This agent's `RunStats` summed with every descendant's (calls, tokens, cost ...), with one
        row per agent under `agents` (what `ctxwin run --json` prints last)."""
        return tree_totals(self.id, self.stats, self.children)

    def last_text(self) -> str:
        for message in reversed(self.engine.messages):
            if message.role == "assistant":
                return message.text
        return ""

    def answer_pending(self, why: str) -> None:
        """Give unanswered calls of the last assistant message an error result (an interrupted step),
        so the log stays a valid conversation."""
        messages = self.engine.messages
        if messages and messages[-1].role == "assistant" and messages[-1].tool_calls:
            results = tuple(ToolResult(c.id, (Text(f"[{why}: the call did not run]"),), True, c.name)
                            for c in messages[-1].tool_calls)
            self.engine.append(Message("tool", results))

    def interrupt(self) -> None:
        """Stop the current step (Ctrl-C): the loop stops at once, and so does every sub-agent under it
        (running, waiting for a slot, or in the background: none starts after this); the tool
        processes running now (each in its own process group, children of this process) are killed
        with their children."""
        self.cancel.set()
        if self._running_tools:
            kill_tool_processes(spare=self._groups_before)

    def context_breakdown(self) -> Breakdown:
        """Where the tokens of the next request go (`/context`): system prompt, tool schemas, summary,
        messages, tool results, the reserve and free space of this engine's window."""
        prepared = self.engine.prepare()
        info = model_info(self.engine.model)
        info = ModelInfo(info.name, self.engine.window, self.engine.max_output, info.family, info.provider,
                         info.known, info.encoding)
        # Synthetic items are what a compaction put in the view (its summary and restored files).
        summary = "\n\n".join(item.message.text for item in prepared.items if item.synthetic)
        return usage_breakdown([item.message for item in prepared.items if not item.synthetic], model=info,
                               counter=self.engine.counter, system_prompt=prepared.system, tools=prepared.tools,
                               summary=summary or None, reserve_output=self.engine.reserve)

    def request_checkpoint(self) -> None:
        """Ask the agent for its own state summary now (`/checkpoint`); the checkpoint policy uses it
        at the next compaction."""
        tokens = self.last_prepared.tokens if self.last_prepared is not None else 0
        self.engine.append(checkpoint_request(tokens))

    def _check(self, call: ToolCall) -> ToolOutput | None:
        """An error output for a call that must not run (unknown tool, arguments that are not a JSON
        object, the same call again and again), else None."""
        key = json.dumps([call.name, call.arguments], sort_keys=True, default=str)
        count = self._repeat[1] + 1 if self._repeat[0] == key else 1
        self._repeat = (key, count)
        if call.name not in self.tools:
            return ToolOutput.error(ToolError("unknown_tool", f"Unknown tool {call.name!r}.",
                                              f"Tools: {', '.join(self.tools)}."))
        raw = call.arguments
        if isinstance(raw, dict) and list(raw) == [RAW_ARGUMENTS]:
            raw = raw[RAW_ARGUMENTS]  # how the Anthropic converters carry arguments that were not JSON
        if not isinstance(raw, dict):
            return ToolOutput.error(ToolError(
                "invalid_arguments", f"The arguments of {call.name} are not a JSON object: {str(raw)[:200]!r}.",
                "Send the arguments as one valid JSON object."))
        if count > self.config.max_repeats:
            return ToolOutput.error(ToolError(
                "repeated_call", f"{call.name} was called with the same arguments {count} times in a row; "
                "the result will not change.", "Use the result you have, or try something different."))
        return None

    def _recover(self, error: object) -> Prepared:
        prepared = self.engine.recover(error)  # raises ContextOverflowError once recovery is exhausted
        self.stats.overflows_recovered += 1
        self.emit("overflow", error=str(error)[:300], tokens=prepared.tokens)
        self._report(prepared)
        return prepared

    def _charge(self, completion: Completion) -> None:
        usage = completion.usage
        assert usage is not None
        self.stats.input_tokens += usage.context_tokens
        self.stats.output_tokens += usage.output_tokens
        cost = (usage.context_tokens * self.config.input_usd_per_mtok
                + usage.output_tokens * self.config.output_usd_per_mtok) / 1e6
        self.stats.cost_usd += cost
        agent: Agent | None = self
        while agent is not None:  # the run of every ancestor pays for what its sub-agents spend
            with agent._tree_lock:
                agent._run_cost += cost
            agent = agent.parent

    def _report(self, prepared: Prepared) -> None:
        inside = self._after_tool()  # the view ends in a tool result: we are inside a tool loop
        for event in prepared.events:
            if event.is_compaction:
                self.stats.compactions += 1
                self.stats.compactions_inside_tool_loops += inside
                self.emit("pipeline", event, inside_tool_loop=inside)
            else:
                self.emit("pipeline", event)

    def _after_tool(self) -> bool:
        messages = self.engine.messages
        return bool(messages) and messages[-1].role == "tool"



# Two signatures so that a caller gets the type it asked for: an Agent by default, else its subclass.
@overload
def create_agent(model: Model, *, session: SessionLog | None = None, workspace: Workspace | None = None,
                 config: AgentConfig | None = None, policy: str | Path | Policy = policies.DEFAULT,
                 window: int | None = None, max_output: int | None = None, extra_tools: Sequence[ToolSpec] = (),
                 on_event: EventSink | None = None, cancel: threading.Event | None = None,
                 system: str | None = None, agent_type: None = None) -> Agent: ...


@overload
def create_agent(model: Model, *, session: SessionLog | None = None, workspace: Workspace | None = None,
                 config: AgentConfig | None = None, policy: str | Path | Policy = policies.DEFAULT,
                 window: int | None = None, max_output: int | None = None, extra_tools: Sequence[ToolSpec] = (),
                 on_event: EventSink | None = None, cancel: threading.Event | None = None,
                 system: str | None = None, agent_type: type[A]) -> A: ...


def create_agent(model: Model, *, session: SessionLog | None = None, workspace: Workspace | None = None,
                 config: AgentConfig | None = None, policy: str | Path | Policy = policies.DEFAULT,
                 window: int | None = None, max_output: int | None = None, extra_tools: Sequence[ToolSpec] = (),
                 on_event: EventSink | None = None, cancel: threading.Event | None = None,
                 system: str | None = None, agent_type: type[Agent] | None = None) -> Agent:
    """An agent and its engine, built together so that the engine counts (and sends) exactly the tools
    the agent runs and its system prompt. `system` overrides `config.system`; `agent_type` is an
    `Agent` subclass to build (one that overrides a step of the loop)."""
    config = config or AgentConfig()
    tools = tool_table(workspace, config.tools, extra_tools)
    built: list[Agent] = []
    flush = None
    if config.memory_flush and workspace is not None:
        notes = daily_notes(workspace.roots[0])

        def flush(span: Sequence[Message]) -> None:
            path = notes(span)
            if built and path is not None:  # None: nothing new to write (already flushed, read-only)
                built[0].emit("memory_flush", path=str(path), messages=len(span))
    engine = ContextEngine(session, model=model.model, policy=policy, window=window, max_output=max_output,
                           system=config.system if system is None else system,
                           tools=[tool_schema(s) for s in tools.values()], memory_flush=flush)
    agent = (agent_type or Agent)(engine, model, workspace=workspace, config=config, extra_tools=extra_tools,
                                  on_event=on_event, cancel=cancel)
    built.append(agent)
    agent.sleep = sleep_time(workspace.roots[0] if workspace else None, config.consolidate,
                             sessions=getattr(getattr(session, "directory", None), "parent", None))
    return agent


def _describe_failure(error: BaseException) -> str:
    if isinstance(error, httpx.TransportError):
        try:
            where = f" at {error.request.url}"
        except RuntimeError:  # an error raised without its request
            where = ""
        return (f"the model's server did not answer{where} ({type(error).__name__}: {error}); check the base URL "
                "and that the server is running")
    return str(error)
