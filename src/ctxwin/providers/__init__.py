"""Model clients (httpx, no SDK in the core) behind the `ModelClient` / `StreamingClient` protocols:
tool calls, streaming with typed events, retries, timeouts, cancellation; and the overflow catalog
(`ctxwin.providers.overflow`) beside them, where the errors are born."""

from ctxwin.providers.anthropic import AnthropicClient
from ctxwin.providers.base import (
    NO_RETRY,
    Completion,
    Done,
    ModelClient,
    ProviderError,
    Retrying,
    RetryPolicy,
    Stream,
    StreamEvent,
    StreamingClient,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStarted,
    ToolDef,
    Usage,
    UsageReported,
)
from ctxwin.providers.factory import APIS, client_for
from ctxwin.providers.openai import OpenAIChatClient, OpenAIResponsesClient

__all__ = [
    "APIS",
    "NO_RETRY",
    "AnthropicClient",
    "Completion",
    "Done",
    "ModelClient",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
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
    "ToolDef",
    "Usage",
    "UsageReported",
    "client_for",
]
