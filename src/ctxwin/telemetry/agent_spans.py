"""Spans for an agent's runs and its sub-agents, from the loop's `on_event` stream.

A run (`ctxwin.agent.run`) opens at the run's first event and closes at `done`, `limit`,
`interrupted` or `error`; each sub-agent (`ctxwin.subagent`) opens at `subagent start` and closes
at `subagent end`, as a child of the run that called `task`. Everything else the loop reports
(model calls, tool calls and results, retries, overflows, pipeline events) is a span event on the
span of the agent that reported it. While a span is open it is the current span of its thread, so
what the engine's observer records there (`instrument`) nests under it.

Children report through their parent's sink, with nothing in the event saying which agent spoke;
each agent's events come from the thread that runs it, so spans are kept per thread. A child run
in a pool thread (parallel tasks, or `task` among several tool calls of one step) has no span in
its thread yet: its parent is the open span whose pending `task` call names its task, else the
newest one with a pending `task` call.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from ctxwin.agent.events import LoopEvent, RunStats

from . import attributes as a

Sink = Callable[[LoopEvent], None]
ENDS = frozenset({"done", "limit", "interrupted", "error"})
TASK_CHARS = 200
"""The loop's `subagent start` event carries the first 200 characters of the task."""


@dataclass(eq=False)  # compared by identity: each is one open span
class _Open:
    span: Any
    kind: str  # "run" | "subagent"
    token: object
    session: str | None = None
    pending: dict[str, list[str]] = field(default_factory=dict)  # task call id -> its tasks (truncated)
    model_calls: int = 0
    max_tokens: int = 0
    compactions: int = 0
    overflows: int = 0
    start_stats: tuple[int, int] = (0, 0)


class AgentSpans:
    """A `LoopEvent` sink that records spans, then hands each event to `then` (the caller's own sink).
    `stats`: the root agent's `RunStats`, to put each run's provider-reported usage on its span."""

    def __init__(self, tracer: Any, *, session_id: str | None = None, agent_name: str | None = None,
                 model: str | None = None, then: Sink | None = None, stats: RunStats | None = None) -> None:
        self.tracer = tracer
        self.base = a.clean({a.GEN_AI_AGENT_NAME: agent_name, a.GEN_AI_REQUEST_MODEL: model})
        self.session_id = session_id
        self.then = then
        self.stats = stats
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: list[_Open] = []  # oldest first, every thread's
        self._warned = False

    def __call__(self, event: LoopEvent) -> None:
        try:
            self._record(event)
        except Exception as error:  # tracing must never stop the agent; say so once
            if not self._warned:
                self._warned = True
                warnings.warn(f"ctxwin telemetry: a span could not be recorded ({type(error).__name__}: {error})",
                              RuntimeWarning, stacklevel=2)
        if self.then is not None:
            self.then(event)

    # ---------------------------------------------------------------- spans

    def _stack(self) -> list[_Open]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _record(self, event: LoopEvent) -> None:
        stack = self._stack()
        if event.kind == "subagent":
            self._subagent(event, stack)
            return
        if event.kind == "user" and stack:  # a new run in a thread whose last one never ended (it raised)
            self._abandon(stack)
        if not stack:
            with self._lock:
                newest = self._open[-1] if self._open else None
            if newest is not None:  # a pool thread's stray event: the agent it belongs to is running
                self._event(newest, event)
                return
            self._push(stack, self._start_run())
        current = stack[-1]
        self._event(current, event)
        if event.kind in ENDS and current.kind == "run":
            self._end_run(current, event)
            self._pop(stack, current)

    def _start_run(self) -> _Open:
        span = self.tracer.start_span(a.AGENT_RUN, attributes={
            **self.base, a.SPAN_KIND: "AGENT", a.GEN_AI_OPERATION: "invoke_agent",
            **a.session_attributes(self.session_id)})
        start = (self.stats.input_tokens, self.stats.output_tokens) if self.stats is not None else (0, 0)
        return _Open(span, "run", None, self.session_id, start_stats=start)

    def _end_run(self, run: _Open, event: LoopEvent) -> None:
        span = run.span
        span.set_attributes(self._totals(run, event))
        if self.stats is not None:
            span.set_attributes(a.usage_attributes(self.stats.input_tokens - run.start_stats[0],
                                                   self.stats.output_tokens - run.start_stats[1]))
        if event.kind == "error":
            span.set_status(Status(StatusCode.ERROR, str(event.data.get("error", ""))))
        span.end()

    @staticmethod
    def _totals(run: _Open, event: LoopEvent) -> a.Attributes:
        stop = event.data.get("limit", "done") if event.kind == "limit" else event.kind
        return {"ctxwin.run.stop": str(stop), "ctxwin.run.steps": event.step, "ctxwin.run.model_calls": run.model_calls,
                "ctxwin.run.max_request_tokens": run.max_tokens, "ctxwin.run.compactions": run.compactions,
                "ctxwin.run.overflows_recovered": run.overflows}

    def _subagent(self, event: LoopEvent, stack: list[_Open]) -> None:
        data = event.data
        action = data.get("action")
        if action == "fork_fallback":
            self._local.fallback = str(data.get("reason", ""))
            return
        if action == "start":
            parent = stack[-1] if stack else self._adopt(str(data.get("task", "")))
            session = str(data.get("session", ""))
            attributes = {**self.base, a.SPAN_KIND: "AGENT", a.GEN_AI_OPERATION: "invoke_agent",
                          a.GEN_AI_AGENT_NAME: str(data.get("agent", "")), **a.session_attributes(session),
                          "ctxwin.subagent.context": str(data.get("context", "")),
                          "ctxwin.subagent.task": str(data.get("task", "")),
                          "ctxwin.subagent.parent_session": parent.session if parent is not None else None}
            fallback = getattr(self._local, "fallback", None)
            if fallback:
                attributes["ctxwin.subagent.fallback"] = fallback
                self._local.fallback = None
            context = trace.set_span_in_context(parent.span) if parent is not None else None
            span = self.tracer.start_span(a.SUBAGENT, context=context, attributes=a.clean(attributes))
            self._push(stack, _Open(span, "subagent", None, session))
        elif action == "end":
            session = str(data.get("session", ""))
            child = next((o for o in reversed(stack) if o.kind == "subagent" and o.session == session), None)
            if child is None:
                return
            stop = str(data.get("stop", ""))
            child.span.set_attributes({"ctxwin.subagent.stop": stop, "ctxwin.subagent.steps": int(data.get("steps", 0)),
                                       "ctxwin.run.model_calls": child.model_calls,
                                       "ctxwin.run.max_request_tokens": child.max_tokens,
                                       "ctxwin.run.compactions": child.compactions})
            if stop == "error":
                child.span.set_status(Status(StatusCode.ERROR, "the sub-agent stopped on an error"))
            child.span.end()
            self._pop(stack, child)

    def _adopt(self, task: str) -> _Open | None:
        """The parent of a child starting in a thread with no span of its own."""
        with self._lock:
            open_spans = list(self._open)
        for candidate in reversed(open_spans):
            if any(task == t for tasks in candidate.pending.values() for t in tasks):
                return candidate
        adopted = getattr(self._local, "adopted", None)
        if adopted is not None and adopted in open_spans:
            return adopted
        parent = next((o for o in reversed(open_spans) if o.pending), open_spans[-1] if open_spans else None)
        self._local.adopted = parent
        return parent

    def _event(self, current: _Open, event: LoopEvent) -> None:
        data = event.data
        if event.kind == "model_call":
            current.model_calls += 1
            current.max_tokens = max(current.max_tokens, int(data.get("tokens", 0) or 0))
        elif event.kind == "overflow":
            current.overflows += 1
        elif event.kind == "pipeline" and event.event is not None and event.event.stage == "compaction" \
                and event.event.action not in ("failed", "checkpoint_request"):
            current.compactions += 1
        elif event.kind == "tool_call" and data.get("name") == "task":
            arguments = data.get("arguments") if isinstance(data.get("arguments"), dict) else {}
            tasks = list(arguments.get("tasks") or [arguments.get("task", "")])
            with self._lock:
                current.pending[str(data.get("call_id"))] = [str(t)[:TASK_CHARS] for t in tasks]
        elif event.kind == "tool_result" and data.get("name") == "task":
            with self._lock:
                current.pending.pop(str(data.get("call_id")), None)
        if event.event is not None:
            current.span.add_event(f"{event.event.stage}.{event.event.action}", a.event_attributes(event.event))
        else:
            current.span.add_event(f"ctxwin.{event.kind}",
                                   _flat({"ctxwin.turn": event.turn, "ctxwin.step": event.step, **data}))

    def _push(self, stack: list[_Open], opened: _Open) -> None:
        opened.token = otel_context.attach(trace.set_span_in_context(opened.span))
        stack.append(opened)
        with self._lock:
            self._open.append(opened)

    def _abandon(self, stack: list[_Open]) -> None:
        for stale in stack:
            stale.span.set_status(Status(StatusCode.ERROR, "stopped without its final event (the run raised)"))
        bottom = stack[0]
        self._pop(stack, bottom)
        bottom.span.end()

    def _pop(self, stack: list[_Open], opened: _Open) -> None:
        # Spans close in the order they opened within a thread; anything above a closing span (a
        # child whose end never came) is closed with it, so the context stack stays balanced.
        while stack:
            top = stack.pop()
            if top is not opened:
                top.span.end()
            otel_context.detach(top.token)  # type: ignore[arg-type]
            with self._lock:
                if top in self._open:
                    self._open.remove(top)
            if top is opened:
                return


def _flat(data: dict[str, Any]) -> a.Attributes:
    """A loop event's data as span event attributes: scalars as they are, lists of scalars as lists,
    anything else as short text."""
    out: a.Attributes = {}
    for key, value in data.items():
        name = key if key.startswith("ctxwin.") else f"ctxwin.{key}"
        if value is None:
            continue
        if isinstance(value, bool | int | float | str):
            out[name] = value if not isinstance(value, str) else value[:1000]
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            out[name] = [v[:200] for v in value]
        else:
            out[name] = str(value)[:1000]
    return out
