"""Model clients (httpx, no SDK in the core) behind the `ModelClient` protocol."""

from ctxwin.providers.anthropic import AnthropicClient
from ctxwin.providers.base import Completion, ModelClient, ProviderError, Usage
from ctxwin.providers.openai import OpenAIChatClient, OpenAIResponsesClient

__all__ = [
    "AnthropicClient",
    "Completion",
    "ModelClient",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "ProviderError",
    "Usage",
]
