"""The model-client interface and what the httpx clients share, under one name (what callers
import). ctxwin's core never imports a provider SDK: summarizers and the agent loop talk to a
`ModelClient` (one call) or a `StreamingClient` (calls with tools, streamed or not), and the httpx
clients for the Anthropic- and OpenAI-compatible APIs implement both.

The parts live beside it by job: `interface` (the data types, stream events, `Stream`, the
protocols), `parsing` (`ProviderError` from error responses and events, the guards for malformed
answers), `retry` (`RetryPolicy`, the wait a response asks for), `cancel` (aborting a call, its
stream or its wait), `client` (`HttpClient`: one request with retries, timeouts and cancellation;
`post_json`).
"""

from ctxwin.errors import ProviderError
from ctxwin.providers.client import DEFAULT_TIMEOUT, HttpClient, post_json
from ctxwin.providers.interface import (
    SSE,
    Completion,
    Done,
    ModelClient,
    Retrying,
    Stream,
    StreamEvent,
    StreamingClient,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStarted,
    ToolChoice,
    ToolDef,
    Tools,
    Usage,
    UsageReported,
)
from ctxwin.providers.parsing import (
    event_json,
    guarded_events,
    guarded_parse,
    malformed,
    malformed_inside,
    object_list,
    provider_error,
    stream_error,
    text_field,
    token_count,
)
from ctxwin.providers.retry import NO_RETRY, RetryPolicy, retry_after_seconds

__all__ = [
    "DEFAULT_TIMEOUT",
    "NO_RETRY",
    "SSE",
    "Completion",
    "Done",
    "HttpClient",
    "ModelClient",
    "ProviderError",
    "RetryPolicy",
    "Retrying",
    "Stream",
    "StreamEvent",
    "StreamingClient",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "ToolCallStarted",
    "ToolChoice",
    "ToolDef",
    "Tools",
    "Usage",
    "UsageReported",
    "event_json",
    "guarded_events",
    "guarded_parse",
    "malformed",
    "malformed_inside",
    "object_list",
    "post_json",
    "provider_error",
    "retry_after_seconds",
    "stream_error",
    "text_field",
    "token_count",
]
