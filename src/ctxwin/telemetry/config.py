"""Whether telemetry is on, where spans go, and whether they may carry content.

Off unless configured: a span is made only when a tracer provider is passed, when `CTXWIN_OTEL=1`
is set (a provider is then built from the standard `OTEL_*` variables and installed as
OpenTelemetry's global one, unless the application installed its own first), or when the
application installed a global provider itself (OpenTelemetry's contract with instrumented
libraries; `CTXWIN_OTEL=0` keeps ctxwin out of it). Otherwise nothing is imported and nothing is
recorded, so the integrations call the telemetry entry points unconditionally.

Content (what users and models wrote: prompts, answers, tool arguments, error texts, sub-agent
tasks) is never recorded unless asked for, by `capture_content=True` or the GenAI semantic
conventions' `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`; spans otherwise carry names,
ids, counts and sizes only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ctxwin.errors import TelemetryError

if TYPE_CHECKING:  # imported for real only when telemetry is on
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import TracerProvider

ENABLE = "CTXWIN_OTEL"
"""`1` (or `true`, `yes`, `on`) turns telemetry on from the environment; `0` (`false`, `no`, `off`)
keeps it off even when the application installed a global tracer provider."""
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI semantic conventions' opt-in for message content on spans: `true` (or `1`, `yes`, `on`,
or the newer values `span_only`, `span_and_event`, `event_only`) lets ctxwin's spans carry it."""
_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")
SERVICE_NAME = "ctxwin"
"""The service name when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES gives one."""
EXTRA_HINT = "pip install 'ctxwin[telemetry]'"


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `CTXWIN_OTEL` asks for telemetry."""
    value = (os.environ if environ is None else environ).get(ENABLE, "")
    return value.strip().lower() in _ON


def disabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `CTXWIN_OTEL` says no (`0`, `false`, `no`, `off`): not even the application's global
    provider is used then."""
    value = (os.environ if environ is None else environ).get(ENABLE, "")
    return value.strip().lower() in _OFF


def capture_content(choice: bool | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether spans may carry content: `choice` when given, else what
    `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` says (off when unset)."""
    if choice is not None:
        return bool(choice)
    value = (os.environ if environ is None else environ).get(CAPTURE_CONTENT, "")
    return value.strip().lower() in (*_ON, "span_only", "span_and_event", "event_only")


def configured_provider(tracer_provider: TracerProvider | None = None) -> TracerProvider | None:
    """The tracer provider to record with, or None when telemetry is off: the one given; else the
    one `CTXWIN_OTEL=1` configures; else the application's global provider, if it installed one and
    `CTXWIN_OTEL` does not say no."""
    if tracer_provider is not None:
        return tracer_provider
    if enabled():
        return from_env()
    if disabled():
        return None
    if "opentelemetry.trace" not in sys.modules:  # nobody imported OpenTelemetry: nobody configured it
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return None if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider) else provider


def from_env(environ: Mapping[str, str] | None = None) -> TracerProvider | None:
    """The provider `CTXWIN_OTEL=1` asks for, installed as OpenTelemetry's global provider (or the
    application's, when it installed one first); None when `CTXWIN_OTEL` is not set or
    `OTEL_TRACES_EXPORTER=none`.

    The exporter is `OTEL_TRACES_EXPORTER`: `otlp` (the default; `OTEL_EXPORTER_OTLP_*` say where,
    `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`/`OTEL_EXPORTER_OTLP_PROTOCOL` say `http/protobuf`, the
    default, or `grpc`), `console` (spans as JSON on stderr) or `none`. Resource attributes come from
    `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`; the batch processor reads `OTEL_BSP_*`."""
    environ = os.environ if environ is None else environ
    if not enabled(environ):
        return None
    trace = _import("opentelemetry.trace", "CTXWIN_OTEL=1 needs OpenTelemetry")
    current = trace.get_tracer_provider()
    if not isinstance(current, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return current
    provider = build_provider(environ)
    if provider is None:
        return None
    trace.set_tracer_provider(provider)
    return trace.get_tracer_provider()


def build_provider(environ: Mapping[str, str]) -> SdkTracerProvider | None:
    """An SDK tracer provider exporting where the `OTEL_*` variables say (None for exporter `none`).
    `environ` is read for the choice of exporter and protocol; the SDK and the exporters read the rest
    (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_EXPORTER_OTLP_*, OTEL_BSP_*) from the process
    environment themselves."""
    sdk_trace = _import("opentelemetry.sdk.trace", "CTXWIN_OTEL=1 needs the OpenTelemetry SDK")
    export = _import("opentelemetry.sdk.trace.export", "CTXWIN_OTEL=1 needs the OpenTelemetry SDK")
    from opentelemetry.sdk.resources import Resource

    exporter_name = (environ.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")[0].strip().lower()
    if exporter_name == "none":
        return None
    if exporter_name == "console":
        exporter = export.ConsoleSpanExporter(out=sys.stderr)  # stdout may carry a command's --json output
    elif exporter_name == "otlp":
        exporter = _otlp_exporter(environ)
    else:
        raise TelemetryError(f"OTEL_TRACES_EXPORTER={exporter_name!r} is not an exporter ctxwin can set up",
                             "use otlp, console or none, or pass your own tracer_provider")
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = sdk_trace.TracerProvider(resource=resource)
    provider.add_span_processor(export.BatchSpanProcessor(exporter))
    return provider


def _otlp_exporter(environ: Mapping[str, str]) -> SpanExporter:
    protocol = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "http/protobuf").strip().lower()
    if protocol == "grpc":
        module = _import("opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
                         "OTLP over gRPC needs opentelemetry-exporter-otlp-proto-grpc",
                         "pip install opentelemetry-exporter-otlp-proto-grpc, or use http/protobuf")
    elif protocol == "http/protobuf":
        module = _import("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                         "OTLP over HTTP needs opentelemetry-exporter-otlp-proto-http")
    else:
        raise TelemetryError(f"OTLP protocol {protocol!r} is not one ctxwin can set up",
                             "set OTEL_EXPORTER_OTLP_PROTOCOL to http/protobuf or grpc")
    return module.OTLPSpanExporter()  # reads OTEL_EXPORTER_OTLP_* itself


def _import(module: str, what: str, hint: str = EXTRA_HINT) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise TelemetryError(f"{what}, and {module} cannot be imported", hint) from None
