"""`client_for`: the one way to get a model client for an API, a base URL and a model."""

from __future__ import annotations

from typing import Any, Literal

from ctxwin.errors import InputError
from ctxwin.providers.anthropic import ANTHROPIC_BASE_URL, AnthropicClient
from ctxwin.providers.openai import OPENAI_BASE_URL, OpenAIChatClient, OpenAIResponsesClient
from ctxwin.providers.retry import RetryPolicy

ApiName = Literal["anthropic", "openai", "openai-responses"]
APIS: tuple[ApiName, ...] = ("anthropic", "openai", "openai-responses")


def client_for(api: ApiName, base_url: str | None = None, model: str | None = None, *,
               api_key: str | None = None, retry: RetryPolicy | None = None,
               **options: Any) -> AnthropicClient | OpenAIChatClient | OpenAIResponsesClient:
    """A client for `api`: "anthropic" (Messages), "openai" (Chat Completions, and every
    OpenAI-compatible server: vLLM, Ollama, llama.cpp, LM Studio, OpenRouter ... by `base_url`) or
    "openai-responses". The key comes from ANTHROPIC_API_KEY / OPENAI_API_KEY when `api_key` is None
    (pass "" to send none). Retries are on (`RetryPolicy()`: 4 tries with backoff) unless `retry` says
    otherwise. Other options (timeout, headers, extra_body, http_client, on_retry, max_tokens_field for
    "openai") go to the client."""
    if api not in APIS:
        raise InputError(f"unknown API {api!r}", f"use one of: {', '.join(APIS)}")
    if base_url is not None and not (isinstance(base_url, str) and base_url.startswith(("http://", "https://"))):
        raise InputError(f"base URL {base_url!r} is not an http(s) URL", "pass e.g. http://127.0.0.1:8000/v1")
    common: dict[str, Any] = {"api_key": api_key, "retry": RetryPolicy() if retry is None else retry, **options}
    if model is not None:
        common["model"] = model
    if api == "anthropic":
        return AnthropicClient(base_url or ANTHROPIC_BASE_URL, **common)
    if api == "openai":
        return OpenAIChatClient(base_url or OPENAI_BASE_URL, **common)
    return OpenAIResponsesClient(base_url or OPENAI_BASE_URL, **common)
