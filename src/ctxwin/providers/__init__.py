"""Model clients (httpx, no SDK in the core) behind the `ModelClient` / `StreamingClient` protocols:
tool calls, streaming with typed events, retries, timeouts, cancellation; and the overflow catalog
(`ctxwin.providers.overflow`) beside them, where the errors are born.

The names below load on first use, so `import ctxwin` (which needs only the overflow catalog) does not
pay for httpx.

Imports: errors, files, messages, tokens; it sits below the engine, which reads its overflow catalog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxwin.lazy import lazy_exports

_EXPORTS = {
    "AnthropicClient": "anthropic",
    "OpenAIChatClient": "openai",
    "OpenAIResponsesClient": "openai",
    "APIS": "factory",
    "client_for": "factory",
    **{name: "base" for name in (
        "NO_RETRY", "Completion", "Done", "ModelClient", "ProviderError", "RetryPolicy", "Retrying", "Stream",
        "StreamEvent", "StreamingClient", "TextDelta", "ThinkingDelta", "ToolCallDelta", "ToolCallStarted",
        "ToolDef", "Usage", "UsageReported")},
}

if TYPE_CHECKING:
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


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["APIS", "NO_RETRY", "AnthropicClient", "Completion", "Done", "ModelClient", "OpenAIChatClient",
           "OpenAIResponsesClient", "ProviderError", "RetryPolicy", "Retrying", "Stream", "StreamEvent",
           "StreamingClient", "TextDelta", "ThinkingDelta", "ToolCallDelta", "ToolCallStarted", "ToolDef", "Usage",
           "UsageReported", "client_for"]
