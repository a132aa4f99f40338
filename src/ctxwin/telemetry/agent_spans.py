"""Spans for an agent's runs and its sub-agents, from the loop's `on_event` stream.

A run (`ctxwin.agent.run`) opens at the run's first event and closes at `done`, `limit`,
`interrupted` or `error`; each sub-agent (`ctxwin.subagent`) opens at `subagent start` and closes
at `subagent end`, as a child of the run that called `task`. Each model call is a span of its own,
named as the GenAI conventions name one (`chat {model}`, CLIENT, OpenInference kind LLM), a child of
the agent that made it: it opens at `model_call` and closes at the answer (`assistant`: finish
reason, and for the root agent the provider's usage and `gen_ai.response.id`/`model`), or at the
`overflow`, `error` or `interrupted` that ended it (an error span). Everything else the loop reports
(model calls, tool calls and results, retries, overflows, pipeline events) is a span event on the
span of the agent that reported it (pipeline events only when the engine's own spans do not carry
them already). While a span is open it is the current span of its thread, so what the engine's
observer records there (`instrument`) nests under it.

Content (the user's messages, answers, tool arguments, error texts, sub-agent tasks: the fields in
`CONTENT_KEYS`) goes on spans only with `capture_content`; otherwise each such field is replaced by
its size (`ctxwin.<field>_chars`, and a tool call's argument names).

Children report through their parent's sink, with nothing in the event saying which agent spoke;
each agent's events come from the thread that runs it, so spans are kept per thread. A child run
in a pool thread (parallel tasks, or `task` among several tool calls of one step) has no span in
its thread yet: its parent is the open span whose pending `task` call names its task, else the
newest one with a pending `task` call.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Callable, Mapping
from contextvars import Token
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from ctxwin.agent.events import (
    AssistantMessage,
    Done,
    ForkFallback,
    Limit,
    LoopEvent,
    ModelCall,
    Overflow,
    RunError,
    RunInterrupted,
    RunStats,
    SubagentEnded,
    SubagentEvent,
    SubagentStarted,
    ToolCallStarted,
    ToolResultLogged,
    UserMessage,
)
from ctxwin.tokens import model_info

from . import attributes as a

if TYPE_CHECKING:
    from ctxwin.providers import Completion

Sink = Callable[[LoopEvent], None]
ENDS = (Done, Limit, RunInterrupted, RunError)
TASK_CHARS = 200
"""The loop's `subagent start` event carries the first 200 characters of the task."""
CONTENT_KEYS = frozenset({"text", "arguments", "error", "call", "task"})
"""Loop event fields holding what users, models and tools wrote (a prompt, an answer, a tool call's
arguments, an error's text, the repeated call a limit names, a sub-agent's task)."""


@dataclass(eq=False)  # compared by identity: each is one open span
class _Open:
    span: Span
    kind: str  # "run" | "subagent"
    token: Token[Context] | None  # set by _push, when the span becomes the thread's current one
    session: str | None = None
    pending: dict[str, list[str]] = field(default_factory=dict)  # task call id -> its tasks (truncated)
    model_calls: int = 0
    max_tokens: int = 0
    compactions: int = 0
    overflows: int = 0
    start_stats: tuple[int, int] = (0, 0)
    call: Span | None = None  # the model call in flight, if any
    call_stats: tuple[int, int] = (0, 0)


class AgentSpans:
    """A `LoopEvent` sink that records spans, then hands each event to `then` (the caller's own sink).
    `stats`: the root agent's `RunStats`, to put each run's provider-reported usage on its span.
    `completion`: returns the root agent's last `Completion` (`Agent.last_completion`), for the
    usage and `gen_ai.response.*` of each of its model calls (without it, usage comes from `stats`).
    `capture_content`: let spans carry content (`CONTENT_KEYS`). `engine_spans`: the engine is
    instrumented too, so its pipeline events are on its own spans and are not repeated here."""

    def __init__(self, tracer: Tracer, *, session_id: str | None = None, agent_name: str | None = None,
                 model: str | None = None, then: Sink | None = None, stats: RunStats | None = None,
                 capture_content: bool = False, engine_spans: bool = False,
                 completion: Callable[[], Completion | None] | None = None) -> None:
        self.tracer = tracer
        self.capture_content = capture_content
        self.engine_spans = engine_spans
        self.base = a.clean({a.GEN_AI_AGENT_NAME: agent_name, a.GEN_AI_REQUEST_MODEL: model})
        self.model = model
        info = model_info(model) if model else None
        self.provider = a.provider_name(info.provider) if info is not None and info.known else None
        self.completion = completion
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
        if isinstance(event, SubagentEvent):
            self._subagent(event, stack)
            return
        if isinstance(event, UserMessage) and stack:  # a new run in a thread whose last one never ended (it raised)
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
        if isinstance(event, ENDS) and current.kind == "run":
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
        if isinstance(event, RunError):
            text = event.error if self.capture_content else "the run stopped on an error"
            span.set_status(Status(StatusCode.ERROR, text))
        span.end()

    @staticmethod
    def _totals(run: _Open, event: LoopEvent) -> a.Attributes:
        stop = event.limit if isinstance(event, Limit) else event.kind
        return {"ctxwin.run.stop": str(stop), "ctxwin.run.steps": event.step, "ctxwin.run.model_calls": run.model_calls,
                "ctxwin.run.max_request_tokens": run.max_tokens, "ctxwin.run.compactions": run.compactions,
                "ctxwin.run.overflows_recovered": run.overflows}

    def _subagent(self, event: SubagentEvent, stack: list[_Open]) -> None:
        if isinstance(event, ForkFallback):
            self._local.fallback = event.reason
            return
        if isinstance(event, SubagentStarted):
            parent = stack[-1] if stack else self._adopt(event.task)
            session = event.session
            attributes = {**self.base, a.SPAN_KIND: "AGENT", a.GEN_AI_OPERATION: "invoke_agent",
                          a.GEN_AI_AGENT_NAME: event.name, **a.session_attributes(session),
                          "ctxwin.subagent.context": event.context,
                          **({"ctxwin.subagent.task": event.task} if self.capture_content
                             else {"ctxwin.subagent.task_chars": len(event.task)}),
                          "ctxwin.subagent.parent_session": parent.session if parent is not None else None}
            fallback = getattr(self._local, "fallback", None)
            if fallback:
                attributes["ctxwin.subagent.fallback"] = fallback
                self._local.fallback = None
            context = trace.set_span_in_context(parent.span) if parent is not None else None
            span = self.tracer.start_span(a.SUBAGENT, context=context, attributes=a.clean(attributes))
            self._push(stack, _Open(span, "subagent", None, session))
        elif isinstance(event, SubagentEnded):
            session = event.session
            child = next((o for o in reversed(stack) if o.kind == "subagent" and o.session == session), None)
            if child is None:
                return
            stop = event.stop
            child.span.set_attributes({"ctxwin.subagent.stop": stop, "ctxwin.subagent.steps": event.steps,
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
        if isinstance(event, ModelCall):
            current.model_calls += 1
            current.max_tokens = max(current.max_tokens, event.tokens)
            self._start_call(current, event)
        elif isinstance(event, AssistantMessage | Overflow | RunError | RunInterrupted):
            self._end_call(current, event)
        if isinstance(event, Overflow):
            current.overflows += 1
        elif event.event is not None and event.event.is_compaction:
            current.compactions += 1
        elif isinstance(event, ToolCallStarted) and event.name == "task":
            arguments = event.arguments if isinstance(event.arguments, Mapping) else {}
            tasks = list(arguments.get("tasks") or [arguments.get("task", "")])
            with self._lock:
                current.pending[event.call_id] = [str(t)[:TASK_CHARS] for t in tasks]
        elif isinstance(event, ToolResultLogged) and event.name == "task":
            with self._lock:
                current.pending.pop(event.call_id, None)
        if event.event is not None:
            if not self.engine_spans:  # else already on the engine's spans
                current.span.add_event(f"{event.event.stage}.{event.event.action}", a.event_attributes(event.event))
        else:
            data = dict(event.data)
            shown = data if self.capture_content else without_content(data)
            current.span.add_event(f"ctxwin.{event.kind}",
                                   _flat({"ctxwin.turn": event.turn, "ctxwin.step": event.step, **shown}))

    def _start_call(self, current: _Open, event: ModelCall) -> None:
        if current.call is not None:  # a call that never got its answer (cannot happen in the loop today)
            current.call.set_status(Status(StatusCode.ERROR, "no answer before the next call"))
            current.call.end()
        current.call = self.tracer.start_span(
            a.model_call_name(a.CHAT, self.model), context=trace.set_span_in_context(current.span),
            kind=SpanKind.CLIENT, attributes=a.clean({
                **a.model_call_attributes(self.model, self.provider), **a.session_attributes(current.session),
                "ctxwin.request.tokens": event.tokens, "ctxwin.request.budget": event.budget,
                "ctxwin.request.messages": event.messages, "ctxwin.step": event.step}))
        current.call_stats = self._usage_now()

    def _end_call(self, current: _Open, event: LoopEvent) -> None:
        call, current.call = current.call, None
        if call is None:
            return
        if isinstance(event, AssistantMessage):
            call.set_attributes(self._answer_attributes(current, event))
        else:
            error = ("context_overflow" if isinstance(event, Overflow) else "cancelled"
                     if isinstance(event, RunInterrupted) else str(event.status or "error")
                     if isinstance(event, RunError) else "error")
            call.set_attribute(a.ERROR_TYPE, error)
            call.set_status(Status(StatusCode.ERROR, f"the model call ended in {event.kind}"))
        call.end()

    def _answer_attributes(self, current: _Open, event: AssistantMessage) -> a.Attributes:
        """An answered call: its finish reason; for the root agent's calls (the ones `stats` and
        `completion` describe) the usage the provider reported and the response's id and model."""
        out = a.clean({a.GEN_AI_FINISH_REASONS: [event.stop_reason] if event.stop_reason else None})
        if current.kind != "run":
            return out
        completion = self.completion() if self.completion is not None else None
        if completion is not None:
            usage = completion.usage
            if usage is not None:
                out.update(a.usage_attributes(usage.input_tokens, usage.output_tokens, usage.cache_read_tokens,
                                              usage.cache_write_tokens))
            out.update(a.response_attributes(completion.raw, completion.stop_reason))
        elif self.stats is not None:
            now = self._usage_now()
            out.update(a.usage_attributes(now[0] - current.call_stats[0], now[1] - current.call_stats[1]))
        return out

    def _usage_now(self) -> tuple[int, int]:
        return (self.stats.input_tokens, self.stats.output_tokens) if self.stats is not None else (0, 0)

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
            if top.call is not None:  # a call in flight when its agent's span closes
                top.call.set_status(Status(StatusCode.ERROR, "its agent stopped before the answer"))
                top.call.end()
                top.call = None
            if top is not opened:
                top.span.end()
            if top.token is not None:  # (always: only _push puts spans on a stack)
                otel_context.detach(top.token)
            with self._lock:
                if top in self._open:
                    self._open.remove(top)
            if top is opened:
                return


def without_content(data: dict[str, Any]) -> dict[str, Any]:
    """A loop event's data with each content field (`CONTENT_KEYS`) replaced by its size in
    characters, and a tool call's arguments by their names."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key not in CONTENT_KEYS:
            out[key] = value
        elif value is not None:
            out[f"{key}_chars"] = len(value if isinstance(value, str) else json.dumps(value, default=str))
            if key == "arguments" and isinstance(value, dict):
                out["argument_names"] = sorted(str(name) for name in value)
    return out


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
