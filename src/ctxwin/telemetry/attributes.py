"""Span names and attributes, as plain data: what each span says about a request, a stage, a
recovery, an agent run or a proxy request. Pure functions of ctxwin's own records; nothing here
imports OpenTelemetry, so they cost nothing to test and the names live in one place.

Two conventions are written side by side, so that both kinds of backend read the spans: the
OpenTelemetry GenAI semantic conventions (`gen_ai.*`; a span that stands for a model call is named
`{gen_ai.operation.name} {gen_ai.request.model}`, e.g. `chat claude-sonnet-4-5`, and carries usage and
`gen_ai.response.*`) and OpenInference (`openinference.span.kind`, `llm.token_count.*`,
`session.id`). What neither names (tokens before and after a stage, the request budget, the stable
prefix) is under `ctxwin.*`. Token counts under `ctxwin.*` are the
engine's own (counter units before calibration for the stages, calibrated for the request); the
`gen_ai.usage.*` and `llm.token_count.*` counts are what a provider reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ctxwin.engine.prepared import Prepared, StageRun
from ctxwin.engine.recovery import Recovery
from ctxwin.pipeline.events import Event
from ctxwin.store.entries import ProxyRequestEntry

# Span names. A stage's span is `ctxwin.<stage>` (ctxwin.mask, ctxwin.compaction, ctxwin.fit ...); a
# model call's is `model_call_name(operation, model)` (the proxy's request, each call of an agent).
PREPARE = "ctxwin.prepare"
COMPACT = "ctxwin.compact"
RECOVER = "ctxwin.recover"
AGENT_RUN = "ctxwin.agent.run"
SUBAGENT = "ctxwin.subagent"
TRACER_NAME = "ctxwin"

# `gen_ai.operation.name` values. The conventions' own for a model call and an agent; ctxwin's own
# (the conventions let a system name operations they do not list) for what the engine does to a
# request before it is sent.
CHAT = "chat"
INVOKE_AGENT = "invoke_agent"
ENGINE_OPERATIONS = {"prepare": "prepare_context", "compact": "compact_context", "recover": "recover_context"}

# OpenTelemetry GenAI semantic conventions.
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_PROVIDER = "gen_ai.provider.name"
GEN_AI_CONVERSATION = "gen_ai.conversation.id"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_CACHE_WRITE = "gen_ai.usage.cache_creation.input_tokens"
ERROR_TYPE = "error.type"
HTTP_STATUS = "http.response.status_code"

# OpenInference.
SPAN_KIND = "openinference.span.kind"
SESSION_ID = "session.id"
LLM_MODEL = "llm.model_name"
LLM_PROVIDER = "llm.provider"
LLM_PROMPT_TOKENS = "llm.token_count.prompt"
LLM_COMPLETION_TOKENS = "llm.token_count.completion"
LLM_TOTAL_TOKENS = "llm.token_count.total"
LLM_CACHE_READ = "llm.token_count.prompt_details.cache_read"
LLM_CACHE_WRITE = "llm.token_count.prompt_details.cache_write"

MAX_IDS = 20
"""Entry ids listed on one span event (the count is always there)."""

Attributes = dict[str, Any]


def clean(attributes: Mapping[str, Any]) -> Attributes:
    """OpenTelemetry takes str, bool, int, float and lists of them; None means "not known" here and
    is left out rather than sent."""
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in attributes.items() if v is not None}


def session_attributes(session_id: str | None) -> Attributes:
    """The conversation, under both conventions' names."""
    return clean({GEN_AI_CONVERSATION: session_id, SESSION_ID: session_id})


def model_call_name(operation: str, model: str | None) -> str:
    """The conventions' name of a span that stands for a model call: `{operation} {model}`, or the
    operation alone when the model is not known."""
    return f"{operation} {model}" if model else operation


def provider_name(api_or_provider: str | None) -> str | None:
    """`gen_ai.provider.name` for an API name (`anthropic`, `openai-chat`, `openai-responses`) or a
    registry provider; the GenAI conventions' well-known values where one applies."""
    if not api_or_provider:
        return None
    if api_or_provider.startswith("openai"):
        return "openai"
    return {"bedrock": "aws.bedrock", "gemini": "gcp.gemini", "google": "gcp.gemini", "xai": "x_ai",
            "mistral": "mistral_ai"}.get(api_or_provider, api_or_provider)


def request_attributes(prepared: Prepared) -> Attributes:
    """What a prepared request is: its size against its budget, and what a prompt cache can reuse."""
    return {
        SPAN_KIND: "CHAIN",
        "ctxwin.request.tokens": prepared.tokens,
        "ctxwin.request.raw_tokens": prepared.raw_tokens,
        "ctxwin.request.system_tokens": prepared.system_tokens,
        "ctxwin.request.budget": prepared.budget,
        "ctxwin.request.window": prepared.window,
        "ctxwin.request.messages": len(prepared.items),
        "ctxwin.request.valid": prepared.valid,
        "ctxwin.request.stable_prefix": prepared.stable_prefix,
        "ctxwin.request.stable_prefix_tokens": prepared.stable_prefix_tokens,
        "ctxwin.request.prefix_kept": prepared.prefix_kept,
        "ctxwin.stages": [run.stage for run in prepared.stages],
        "ctxwin.events": len(prepared.events),
    }


def stage_attributes(run: StageRun) -> Attributes:
    """One stage that acted: tokens before and after, and what it did (its actions, the entries it
    touched; each event is also a span event). A compaction adds its strategy, trigger and the
    entries it summarized."""
    entries = {entry for event in run.events for entry in event.entry_ids}
    out: Attributes = {
        SPAN_KIND: "CHAIN",
        "ctxwin.stage": run.stage,
        "ctxwin.tokens.before": run.tokens_before,
        "ctxwin.tokens.after": run.tokens_after,
        "ctxwin.tokens.saved": run.tokens_before - run.tokens_after,
        "ctxwin.stage.actions": sorted({event.action for event in run.events}),
        "ctxwin.stage.events": len(run.events),
        "ctxwin.stage.entries": len(entries),
        "ctxwin.stage.breaks_prefix": any(event.breaks_prefix for event in run.events),
    }
    out.update(compaction_attributes(run.events))
    return out


def compaction_attributes(events: Iterable[Event]) -> Attributes:
    """The compaction a stage run holds: `failed` names no strategy (history was left as it was). A
    summary written by a model adds that model and the usage its calls reported."""
    for event in events:
        if not (event.is_compaction or event.is_compaction_failure):
            continue
        failed = event.is_compaction_failure
        usage = summarizer_usage([event])
        return clean({
            "ctxwin.compaction.strategy": None if failed else event.action,
            "ctxwin.compaction.failed": failed,
            "ctxwin.compaction.trigger": event.details.get("trigger"),
            "ctxwin.compaction.entries_summarized": len(event.entry_ids),
            "ctxwin.compaction.tokens_before": event.tokens_before,
            "ctxwin.compaction.tokens_after": event.tokens_after,
            "ctxwin.compaction.reason": event.reason,
            "ctxwin.compaction.summarizer_model": usage.get("model") if usage else None,
            "ctxwin.compaction.summarizer_calls": usage.get("calls") if usage else None,
            **(usage_attributes(usage.get("input_tokens"), usage.get("output_tokens")) if usage else {}),
        })
    return {}


def summarizer_usage(events: Iterable[Event]) -> dict[str, Any]:
    """What the summarizer's model calls of these events' compactions reported (`model`, `calls`,
    `input_tokens`, `output_tokens`, summed); empty when no model wrote a summary (the extractive
    summarizer calls none)."""
    total: dict[str, Any] = {}
    for event in events:
        usage = event.details.get("summarizer_usage") if event.is_compaction else None
        if not isinstance(usage, Mapping):
            continue
        total["model"] = total.get("model") or usage.get("model")
        for key in ("calls", "input_tokens", "output_tokens"):
            total[key] = total.get(key, 0) + int(usage.get(key) or 0)
    return total


def operation_attributes(operation: str, events: Iterable[Event]) -> Attributes:
    """What an engine call is under the GenAI conventions: its operation, and the usage of the model
    calls it made itself (a compaction's summary), when it made any."""
    usage = summarizer_usage(events)
    return {GEN_AI_OPERATION: ENGINE_OPERATIONS.get(operation, operation),
            **(usage_attributes(usage.get("input_tokens"), usage.get("output_tokens")) if usage else {})}


def response_attributes(data: Mapping[str, Any], stop_reason: str | None = None) -> Attributes:
    """`gen_ai.response.*` from a provider's answer object: an Anthropic message, a Chat Completions
    completion (or its last chunk) or a Responses response. `stop_reason`: the finish reason when the
    caller already knows it (then it is the one reported)."""
    reasons: list[str] = []
    if stop_reason:
        reasons = [stop_reason]
    elif isinstance(data.get("stop_reason"), str):  # Anthropic
        reasons = [data["stop_reason"]]
    elif isinstance(data.get("choices"), list):  # Chat Completions
        reasons = [c["finish_reason"] for c in data["choices"]
                   if isinstance(c, Mapping) and isinstance(c.get("finish_reason"), str)]
    elif isinstance(data.get("status"), str):  # Responses: why it is incomplete, else its status
        details = data.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        reasons = [reason if isinstance(reason, str) else data["status"]]
    response_id, model = data.get("id"), data.get("model")
    return clean({
        GEN_AI_RESPONSE_ID: response_id if isinstance(response_id, str) else None,
        GEN_AI_RESPONSE_MODEL: model if isinstance(model, str) else None,
        GEN_AI_FINISH_REASONS: reasons or None,
    })


def event_attributes(event: Event) -> Attributes:
    """One engine event as a span event's attributes (its name is `<stage>.<action>`)."""
    return {
        "ctxwin.stage": event.stage,
        "ctxwin.action": event.action,
        "ctxwin.tokens.before": event.tokens_before,
        "ctxwin.tokens.after": event.tokens_after,
        "ctxwin.entries": len(event.entry_ids),
        "ctxwin.entry_ids": list(event.entry_ids[:MAX_IDS]),
        "ctxwin.reason": event.reason,
        "ctxwin.breaks_prefix": event.breaks_prefix,
    }


def recovery_attributes(recovery: Recovery, prepared: Prepared) -> Attributes:
    """What an overflow error taught and the budget kept from now on."""
    match = recovery.match
    return clean({
        "ctxwin.recovery.provider": match.provider,
        "ctxwin.recovery.pattern": match.pattern,
        "ctxwin.recovery.silent": match.silent,
        "ctxwin.recovery.observed_tokens": match.observed_tokens,
        "ctxwin.recovery.limit_tokens": match.limit_tokens,
        "ctxwin.recovery.window": recovery.entry.window,
        "ctxwin.recovery.max_output": recovery.entry.max_output,
        "ctxwin.recovery.budget_scale": recovery.entry.budget_scale,
        "ctxwin.recovery.budget": prepared.budget,
    })


def usage_attributes(input_tokens: int | None, output_tokens: int | None, cache_read: int | None = None,
                     cache_write: int | None = None) -> Attributes:
    """Provider-reported usage under both conventions. `input_tokens` is the uncached part, as ctxwin's
    `Usage` and Anthropic count it; both conventions' input count includes cached tokens, so the
    cache reads and writes are added to it (and also given on their own)."""
    if input_tokens is None and output_tokens is None:
        return {}
    prompt = None if input_tokens is None else input_tokens + (cache_read or 0) + (cache_write or 0)
    total = None if prompt is None or output_tokens is None else prompt + output_tokens
    return clean({
        GEN_AI_INPUT_TOKENS: prompt, GEN_AI_OUTPUT_TOKENS: output_tokens,
        GEN_AI_CACHE_READ: cache_read, GEN_AI_CACHE_WRITE: cache_write,
        LLM_PROMPT_TOKENS: prompt, LLM_COMPLETION_TOKENS: output_tokens, LLM_TOTAL_TOKENS: total,
        LLM_CACHE_READ: cache_read, LLM_CACHE_WRITE: cache_write,
    })


def model_call_attributes(model: str | None, provider: str | None) -> Attributes:
    """A span that stands for one model call, under both conventions."""
    return clean({SPAN_KIND: "LLM", GEN_AI_OPERATION: CHAT, GEN_AI_PROVIDER: provider, GEN_AI_REQUEST_MODEL: model,
                  LLM_MODEL: model, LLM_PROVIDER: provider})


def proxy_start_attributes(api: str, model: str | None, session_id: str | None) -> Attributes:
    """What a proxy request is known to be when it arrives."""
    return {**model_call_attributes(model, provider_name(api)), "ctxwin.proxy.api": api,
            **session_attributes(session_id)}


def proxy_attributes(entry: ProxyRequestEntry) -> Attributes:
    """Everything the proxy's request record says, on the request's span."""
    return clean({
        **proxy_start_attributes(entry.api, entry.model, None),
        HTTP_STATUS: entry.status,
        "ctxwin.proxy.tokens_received": entry.tokens_received,
        "ctxwin.proxy.tokens_forwarded": entry.tokens_forwarded,
        "ctxwin.proxy.tokens_saved": entry.tokens_received - entry.tokens_forwarded,
        "ctxwin.proxy.cache_prefix_reuse": entry.cache_prefix_reuse,
        "ctxwin.proxy.compactions": entry.compactions,
        "ctxwin.proxy.recoveries": entry.recoveries,
        "ctxwin.proxy.recall_calls": entry.recall_calls,
        "ctxwin.proxy.invalid_forwarded": entry.invalid_forwarded,
        "ctxwin.proxy.streamed": entry.streamed,
        "ctxwin.proxy.added_ms": entry.added_ms,
        "ctxwin.proxy.upstream_ms": entry.upstream_ms,
        **usage_attributes(entry.input_tokens, entry.output_tokens, entry.cache_read_tokens,
                           entry.cache_write_tokens),
    })
