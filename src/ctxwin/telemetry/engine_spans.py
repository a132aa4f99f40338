"""Spans for what an engine does, from its observer hook (`ContextEngine.observers`).

Each `prepare()`, `compact()` and `recover()` becomes one span (`ctxwin.prepare`, `ctxwin.compact`,
`ctxwin.recover`; `gen_ai.operation.name` `prepare_context`, `compact_context`, `recover_context`,
with the usage of a model-written summary when it made one) with one child per stage that acted
(`ctxwin.result_budget`, `ctxwin.mask`, `ctxwin.compaction`, `ctxwin.fit`, `ctxwin.repair` ...), made
after the call from its recorded timings, so the engine never waits on a tracer. The span's parent
is whatever span is current where the call ran (an agent run, a proxy request, the application's
own).
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer, TracerProvider

from ctxwin.engine import ContextEngine
from ctxwin.engine.observe import Observation
from ctxwin.engine.prepared import StageRun
from ctxwin.pipeline.events import Event
from ctxwin.tokens import model_info

from . import attributes as a


@dataclass
class EngineSpans:
    """The observer `instrument` subscribes: turns each `Observation` into spans."""

    tracer: Tracer
    base: a.Attributes
    provider: TracerProvider | None = None  # what it records to (`instrument` subscribes one per provider)

    def __call__(self, observation: Observation) -> None:
        name = {"prepare": a.PREPARE, "compact": a.COMPACT, "recover": a.RECOVER}[observation.operation]
        span = self.tracer.start_span(name, start_time=observation.started_ns,
                                      attributes={**self.base, "ctxwin.operation": observation.operation})
        prepared = observation.prepared
        span.set_attributes(a.operation_attributes(observation.operation, prepared.events if prepared else ()))
        if prepared is not None:
            span.set_attributes(a.request_attributes(prepared))
            if observation.recovery is not None:
                span.set_attributes(a.recovery_attributes(observation.recovery, prepared))
            parent = trace.set_span_in_context(span)
            in_stages = {id(event) for run in prepared.stages for event in run.events}
            for run in prepared.stages:
                self._stage(run, parent)
            for event in prepared.events:  # what no stage run holds: a recovery, a branch, a changed prompt ...
                if id(event) not in in_stages:
                    _add_event(span, event, observation.ended_ns)
        if observation.error is not None:
            span.record_exception(observation.error)
            span.set_attribute(a.ERROR_TYPE, type(observation.error).__name__)
            span.set_status(Status(StatusCode.ERROR, str(observation.error)))
        span.end(end_time=observation.ended_ns)

    def _stage(self, run: StageRun, parent: Context) -> None:
        span = self.tracer.start_span(f"ctxwin.{run.stage}", context=parent, start_time=run.started_ns,
                                      attributes={**self.base, **a.stage_attributes(run)})
        for event in run.events:
            _add_event(span, event, run.ended_ns)
        failure = next((e for e in run.events if e.is_compaction_failure), None)
        if failure is not None:
            span.set_status(Status(StatusCode.ERROR, failure.reason))
        span.end(end_time=run.ended_ns)


def _add_event(span: Span, event: Event, at_ns: int) -> None:
    span.add_event(f"{event.stage}.{event.action}", a.event_attributes(event), timestamp=at_ns)


def engine_attributes(engine: ContextEngine) -> a.Attributes:
    """What every span of this engine carries: its session and model."""
    info = model_info(engine.model) if engine.model else None
    return a.clean({
        **a.session_attributes(engine.session.session_id),
        a.GEN_AI_REQUEST_MODEL: engine.model,
        a.GEN_AI_PROVIDER: a.provider_name(info.provider) if info is not None and info.known else None,
    })


def engine_spans(engine: ContextEngine, provider: TracerProvider) -> EngineSpans:
    return EngineSpans(provider.get_tracer(a.TRACER_NAME), engine_attributes(engine), provider)
