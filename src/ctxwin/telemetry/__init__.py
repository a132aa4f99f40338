"""OpenTelemetry spans for what ctxwin does: each request the engine prepares (one child per stage
that acted), compactions, overflow recoveries, agent runs and their sub-agents, proxy requests.

    from ctxwin import telemetry
    telemetry.instrument(engine, tracer_provider=provider)        # prepare / compact / recover spans
    agent = create_agent(model, on_event=telemetry.agent_event_sink(provider, session_id="s1"))
    telemetry.instrument_agent(agent, provider)                   # or both at once, for an agent
    with telemetry.proxy_request_span(api="anthropic", model=m, headers=request.headers) as span:
        span.inject(upstream_headers); ...; span.record(entry)    # trace passed on; the ProxyRequestEntry

Off unless configured (`config`): without a tracer provider, `CTXWIN_OTEL=1` or a global provider
the application installed, these return no-ops and OpenTelemetry is not even imported. Content
(prompts, answers, tool arguments) is left off spans unless `capture_content=True` or
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`. Attribute names: `attributes` (GenAI
semantic conventions and OpenInference side by side).

Layer: above `agent`, below the integrations (proxy, mcp, adapters), which may open spans; the core
never imports this package — the engine has a general observer hook (`ContextEngine.observers`)
that `instrument` subscribes to. Needs the `telemetry` extra (opentelemetry-api and -sdk) only when on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ctxwin.errors import TelemetryError

from . import config
from .config import CAPTURE_CONTENT, ENABLE, capture_content, configured_provider, enabled, from_env

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from ctxwin.agent.events import LoopEvent, RunStats
    from ctxwin.agent.loop import Agent
    from ctxwin.engine import ContextEngine
    from ctxwin.providers import Completion

    from .proxy_spans import ProxySpan


@dataclass
class Instrumentation:
    """What `instrument` / `instrument_agent` subscribed; `active` is False when telemetry was off.
    `uninstrument()` takes it back."""

    engine: ContextEngine
    observer: Callable[..., None] | None = None
    agent: Agent | None = None
    sink: Callable[[LoopEvent], None] | None = None
    previous_sink: Callable[[LoopEvent], None] | None = None

    @property
    def active(self) -> bool:
        return self.observer is not None

    def uninstrument(self) -> None:
        if self.observer is not None and self.observer in self.engine.observers:
            self.engine.observers.remove(self.observer)
        if self.agent is not None and self.agent.on_event is self.sink:
            self.agent.on_event = self.previous_sink
        self.observer = self.sink = None


def instrument(engine: ContextEngine, tracer_provider: TracerProvider | None = None) -> Instrumentation:
    """Record a span for each `prepare()`, `compact()` and `recover()` of `engine`, with a child per
    stage that acted. `tracer_provider` None: the configured one (see `config`), or off. Instrumenting
    an engine again for the same provider subscribes nothing new (spans are not doubled)."""
    provider = configured_provider(tracer_provider)
    if provider is None:
        return Instrumentation(engine)
    from .engine_spans import EngineSpans, engine_spans

    existing = next((o for o in engine.observers if isinstance(o, EngineSpans) and o.provider is provider), None)
    if existing is not None:
        return Instrumentation(engine, existing)
    observer = engine_spans(engine, provider)
    engine.observers.append(observer)
    return Instrumentation(engine, observer)


def agent_event_sink(tracer_provider: TracerProvider | None = None, *, session_id: str | None = None,
                     agent_name: str | None = None, model: str | None = None,
                     then: Callable[[LoopEvent], None] | None = None,
                     stats: RunStats | None = None, capture_content: bool | None = None,
                     engine_spans: bool = False,
                     completion: Callable[[], Completion | None] | None = None) -> Callable[[LoopEvent], None]:
    """An `on_event` sink for the agent loop that records a span per run and per sub-agent (children
    of the run that called `task`), then passes each event to `then`. Off: `then` itself (or a sink
    that does nothing). `stats`: the agent's `RunStats`, for the usage of each run.
    `capture_content`: let spans carry prompts, answers, tool arguments and error texts (None: as
    `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` says; off when unset). `engine_spans`: the
    engine is instrumented too, so pipeline events are left to its spans. `completion`: returns the
    agent's last `Completion` (`lambda: agent.last_completion`), for each model call's usage and
    `gen_ai.response.*`."""
    provider = configured_provider(tracer_provider)
    if provider is None:
        return then if then is not None else _ignore
    from . import attributes
    from .agent_spans import AgentSpans

    return AgentSpans(provider.get_tracer(attributes.TRACER_NAME), session_id=session_id, agent_name=agent_name,
                      model=model, then=then, stats=stats, capture_content=config.capture_content(capture_content),
                      engine_spans=engine_spans, completion=completion)


def instrument_agent(agent: Agent, tracer_provider: TracerProvider | None = None, *, agent_name: str = "agent",
                     capture_content: bool | None = None) -> Instrumentation:
    """Both at once for an agent: its engine's spans, nested under the spans of its runs and its
    sub-agents (its current `on_event` still gets every event). `capture_content`: as for
    `agent_event_sink`."""
    provider = configured_provider(tracer_provider)
    instrumentation = instrument(agent.engine, provider)
    if provider is None:
        return instrumentation
    previous = agent.on_event
    sink = agent_event_sink(provider, session_id=agent.engine.session.session_id, agent_name=agent_name,
                            model=agent.model.model, then=previous, stats=agent.stats,
                            capture_content=capture_content, engine_spans=True,
                            completion=lambda: agent.last_completion)
    agent.on_event = sink
    instrumentation.agent, instrumentation.sink, instrumentation.previous_sink = agent, sink, previous
    return instrumentation


@contextmanager
def proxy_request_span(*, api: str, model: str | None = None, session_id: str | None = None,
                       headers: Mapping[str, str] | None = None, tracer_provider: TracerProvider | None = None,
                       ) -> Iterator[ProxySpan]:
    """A span for one proxy request (`chat {model}`), current while it is served (an exception inside
    marks it failed). `headers`: the caller's; a W3C `traceparent` there puts the span in the caller's
    trace. `span.inject(upstream_headers)` passes the trace on upstream, `span.record(entry)` puts the
    request's `ProxyRequestEntry` on it, `span.response(answer)` the answer's id, model and finish
    reasons. Off: a span that does nothing (and injects nothing)."""
    provider = configured_provider(tracer_provider)
    if provider is None:
        from .proxy_spans import ProxySpan

        yield ProxySpan()
        return
    from .proxy_spans import request_span

    with request_span(provider, api, model, session_id, headers) as span:
        yield span


def _ignore(event: LoopEvent) -> None:
    """The sink when telemetry is off and the caller has none."""


__all__ = ["CAPTURE_CONTENT", "ENABLE", "Instrumentation", "TelemetryError", "agent_event_sink", "capture_content",
           "configured_provider", "enabled", "from_env", "instrument", "instrument_agent", "proxy_request_span"]
