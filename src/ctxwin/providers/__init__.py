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
    "NO_RETRY": "retry",
    "RetryPolicy": "retry",
    "ProviderError": "parsing",
    **{name: "interface" for name in (
        "Completion", "Done", "ModelClient", "Retrying", "Stream", "StreamEvent", "StreamingClient", "TextDelta",
        "ThinkingDelta", "ToolCallDelta", "ToolCallStarted", "ToolDef", "Usage", "UsageReported")},
}

if TYPE_CHECKING:
    from ctxwin.errors import ProviderError
    from ctxwin.providers.anthropic import AnthropicClient
    from ctxwin.providers.factory import APIS, client_for
    from ctxwin.providers.interface import (
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
        ToolDef,
        Usage,
        UsageReported,
    )
    from ctxwin.providers.openai import OpenAIChatClient, OpenAIResponsesClient
    from ctxwin.providers.retry import NO_RETRY, RetryPolicy


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["APIS", "NO_RETRY", "AnthropicClient", "Completion", "Done", "ModelClient", "OpenAIChatClient",
           "OpenAIResponsesClient", "ProviderError", "RetryPolicy", "Retrying", "Stream", "StreamEvent",
           "StreamingClient", "TextDelta", "ThinkingDelta", "ToolCallDelta", "ToolCallStarted", "ToolDef", "Usage",
           "UsageReported", "client_for"]
