"""What the loop reports: a `LoopEvent` for every step, as a closed set of frozen types (one per
kind; engine `Event`s ride inside `PipelineReport`), `RunStats` over the agent's life, `RunResult`
for one run.

Every loop event has `kind` (its JSON name), `turn` (user turns of the session this process saw),
`step` (model calls of the current run), `agent` (the id of the agent that spoke, "" for the root)
and `depth` (0 for the root, 1 for its children ...), and `data`: the fields of its kind, as the
JSON carries them. `to_dict()` is what `ctxwin run --json` prints; `loop_event(kind, ...)` builds
the type a kind names (what the loop's `emit` and the model's `notify` call).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ctxwin.pipeline.events import Event


@dataclass(frozen=True)
class LoopEvent:
    """The base of the loop's events: never built itself."""

    kind: ClassVar[str] = ""
    omitted_when_none: ClassVar[frozenset[str]] = frozenset()
    """Fields of the kind that the JSON leaves out while they are None."""

    turn: int = 0
    step: int = 0
    agent: str = ""
    """The agent that reported it ("" for the root agent)."""
    depth: int = 0
    """How deep under the root that agent runs (0: the root)."""

    def __post_init__(self) -> None:
        if not type(self).kind:
            raise TypeError("LoopEvent is the base of the loop's event types; build one of its kinds")

    @property
    def event(self) -> Event | None:
        """The engine event a `pipeline` report carries (None for every other kind)."""
        return None

    @property
    def data(self) -> Mapping[str, Any]:
        """The kind's own fields, as the JSON names them."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name in _COMMON:
                continue
            value = getattr(self, f.name)
            if value is None and f.name in self.omitted_when_none:
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "turn": self.turn, "step": self.step}
        if self.agent or self.depth:  # the root's events print as they always did
            out.update(agent_id=self.agent, depth=self.depth)
        out.update(self.data)
        if self.event is not None:
            out["event"] = self.event.to_dict()
        return out


_COMMON = frozenset({"turn", "step", "agent", "depth"})


@dataclass(frozen=True)
class UserMessage(LoopEvent):
    """A user turn was logged."""

    kind = "user"
    text: str = field(kw_only=True)


@dataclass(frozen=True)
class ModelCall(LoopEvent):
    """A request is about to be sent: its size, its budget, its messages."""

    kind = "model_call"
    tokens: int = field(kw_only=True)
    budget: int = field(kw_only=True)
    messages: int = field(kw_only=True)


@dataclass(frozen=True)
class AssistantMessage(LoopEvent):
    """The model answered (text up to 500 characters, the tools it asked for, why it stopped)."""

    kind = "assistant"
    text: str = field(kw_only=True)
    tool_calls: tuple[str, ...] = field(kw_only=True)
    stop_reason: str | None = field(kw_only=True)


@dataclass(frozen=True)
class Delta(LoopEvent):
    """A piece of a streamed answer, as it arrives."""

    kind = "delta"
    text: str = field(kw_only=True)


@dataclass(frozen=True)
class ToolCallStarted(LoopEvent):
    """A tool call is about to run (`arguments`: its JSON object, or its text cut to 200 characters)."""

    kind = "tool_call"
    name: str = field(kw_only=True)
    call_id: str = field(kw_only=True)
    arguments: Mapping[str, Any] | str = field(kw_only=True)


@dataclass(frozen=True)
class ToolResultLogged(LoopEvent):
    """A tool call's result was logged."""

    kind = "tool_result"
    name: str = field(kw_only=True)
    call_id: str = field(kw_only=True)
    is_error: bool = field(kw_only=True)
    chars: int = field(kw_only=True)


@dataclass(frozen=True)
class PipelineReport(LoopEvent):
    """An engine event of the request being prepared (compaction, mask, fit ...). For a compaction,
    `inside_tool_loop` says whether it happened between two calls of one tool loop."""

    kind = "pipeline"
    pipeline_event: Event = field(kw_only=True)
    inside_tool_loop: bool = field(default=False, kw_only=True)

    @property
    def event(self) -> Event:
        return self.pipeline_event

    @property
    def data(self) -> Mapping[str, Any]:
        return {"inside_tool_loop": self.inside_tool_loop} if self.pipeline_event.is_compaction else {}


@dataclass(frozen=True)
class Retry(LoopEvent):
    """The provider client waits `delay_s` before attempt `attempt` (a 429, a 5xx)."""

    kind = "retry"
    attempt: int = field(kw_only=True)
    delay_s: float = field(kw_only=True)
    error: str = field(kw_only=True)


@dataclass(frozen=True)
class Overflow(LoopEvent):
    """The provider said the request was too long; the engine recovered to `tokens`."""

    kind = "overflow"
    error: str = field(kw_only=True)
    tokens: int = field(kw_only=True)


@dataclass(frozen=True)
class Limit(LoopEvent):
    """A limit stopped the run (`max_steps`, `max_cost`, `repeated_call`: then `call` is the call)."""

    kind = "limit"
    omitted_when_none = frozenset({"call"})
    limit: str = field(kw_only=True)
    call: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class RunInterrupted(LoopEvent):
    """The user stopped the step (Ctrl-C)."""

    kind = "interrupted"


@dataclass(frozen=True)
class RunError(LoopEvent):
    """The run stopped on an error (the provider's, recovery exhausted ...); `status` its HTTP status."""

    kind = "error"
    error: str = field(kw_only=True)
    status: int | None = field(kw_only=True)


@dataclass(frozen=True)
class Done(LoopEvent):
    """The model answered in text: the run is over."""

    kind = "done"
    text: str = field(kw_only=True)


@dataclass(frozen=True)
class MemoryFlushed(LoopEvent):
    """Before a compaction, notes on the span leaving the view were written to `path`."""

    kind = "memory_flush"
    path: str = field(kw_only=True)
    messages: int = field(kw_only=True)


@dataclass(frozen=True)
class SubagentEvent(LoopEvent):
    """What a sub-agent did; `action` says which (`start`, `end`, `fork_fallback`)."""

    kind = "subagent"
    action: ClassVar[str] = ""

    @property
    def data(self) -> Mapping[str, Any]:
        return {"action": self.action, **super().data}


@dataclass(frozen=True)
class SubagentStarted(SubagentEvent):
    """A sub-agent starts: `context` isolated or fork, `name` the agent type (the JSON's `agent`),
    `session` its session, `task` its first 200 characters, `child` the id its own events carry."""

    action = "start"
    context: str = field(kw_only=True)
    name: str = field(kw_only=True)
    session: str = field(kw_only=True)
    task: str = field(kw_only=True)
    child: str = field(default="", kw_only=True)

    @property
    def data(self) -> Mapping[str, Any]:
        out: dict[str, Any] = {"action": self.action, "context": self.context, "agent": self.name,
                               "session": self.session, "task": self.task}
        return {**out, "child": self.child} if self.child else out


@dataclass(frozen=True)
class SubagentEnded(SubagentEvent):
    """A sub-agent ended: how (`stop`) and after how many model calls (`steps`); `child` its id."""

    action = "end"
    omitted_when_none = frozenset({"child"})
    context: str = field(kw_only=True)
    session: str = field(kw_only=True)
    stop: str = field(kw_only=True)
    steps: int = field(kw_only=True)
    child: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class SubagentBackground(SubagentEvent):
    """A sub-agent was started in the background: its `handle`, agent type (the JSON's `agent`), task."""

    action = "background"
    handle: str = field(kw_only=True)
    name: str = field(kw_only=True)
    task: str = field(kw_only=True)

    @property
    def data(self) -> Mapping[str, Any]:
        return {"action": self.action, "handle": self.handle, "agent": self.name, "task": self.task}


@dataclass(frozen=True)
class SubagentWaiting(SubagentEvent):
    """The agent answered while background sub-agents run: it waits for the next of `handles` to end."""

    action = "waiting"
    handles: tuple[str, ...] = field(kw_only=True)


@dataclass(frozen=True)
class SubagentDelivered(SubagentEvent):
    """A finished background sub-agent's result was logged for the agent's next call (`stop`: how it ended)."""

    action = "delivered"
    handle: str = field(kw_only=True)
    stop: str | None = field(kw_only=True)


@dataclass(frozen=True)
class ForkFallback(SubagentEvent):
    """A fork was asked for and could not be made; the child runs isolated (`reason` says why)."""

    action = "fork_fallback"
    reason: str = field(kw_only=True)


LOOP_EVENT_TYPES: tuple[type[LoopEvent], ...] = (
    UserMessage, ModelCall, AssistantMessage, Delta, ToolCallStarted, ToolResultLogged, PipelineReport, Retry,
    Overflow, Limit, RunInterrupted, RunError, Done, MemoryFlushed, SubagentStarted, SubagentEnded, ForkFallback,
    SubagentBackground, SubagentWaiting, SubagentDelivered,
)
"""Every kind of loop event, the closed set."""

_BY_KIND: dict[tuple[str, str], type[LoopEvent]] = {
    (t.kind, t.action if issubclass(t, SubagentEvent) else ""): t for t in LOOP_EVENT_TYPES}
_RENAMED: dict[type[LoopEvent], dict[str, str]] = {SubagentStarted: {"agent": "name"},
                                                  SubagentBackground: {"agent": "name"}}
"""JSON names that differ from the field's (a sub-agent's type is `agent` in the JSON; `agent` on
the event is who reported it)."""


def loop_event(kind: str, turn: int = 0, step: int = 0, event: Event | None = None, *, agent_id: str = "",
               depth: int = 0, **data: Any) -> LoopEvent:
    """The loop event of `kind` with its fields by their JSON names (a `subagent` event's `action`
    picks its type; `agent` there is the sub-agent's type), reported by agent `agent_id` at `depth`.
    Unknown kinds and fields raise TypeError: the set is closed."""
    cls = _BY_KIND.get((kind, str(data.pop("action", "")) if kind == SubagentEvent.kind else ""))
    if cls is None:
        raise TypeError(f"no loop event of kind {kind!r}; the kinds are {sorted({t.kind for t in LOOP_EVENT_TYPES})}")
    renamed = _RENAMED.get(cls, {})
    values = {renamed.get(k, k): tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    if event is not None:
        values["pipeline_event"] = event
    return cls(turn, step, agent_id, depth, **values)


@dataclass
class RunStats:
    """Totals over the agent's life in this process (what `ctxwin run --json` prints last)."""

    turns: int = 0
    steps: int = 0
    model_calls: int = 0
    compactions: int = 0
    compactions_inside_tool_loops: int = 0
    overflows_recovered: int = 0
    retries: int = 0
    max_request_tokens: int = 0
    window: int = 0
    errors: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"turns": self.turns, "steps": self.steps, "model_calls": self.model_calls,
                "compactions": self.compactions, "compactions_inside_tool_loops": self.compactions_inside_tool_loops,
                "overflows_recovered": self.overflows_recovered, "retries": self.retries,
                "max_request_tokens": self.max_request_tokens, "window": self.window, "errors": list(self.errors),
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cost_usd": round(self.cost_usd, 6)}


@dataclass(frozen=True)
class RunResult:
    """How one run ended: `stop` is `done` (the model answered in text), `max_steps`, `max_cost`,
    `repeated_call`, `interrupted` or `error`; `text` the last assistant text."""

    stop: str
    text: str
    steps: int
