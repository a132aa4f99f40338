"""What the loop calls a model through: `Model.send(prepared)` takes the engine's prepared request and
returns a `Completion`. `HttpModel` wraps ctxwin's httpx clients (Anthropic Messages, OpenAI Chat,
OpenAI Responses) and sends the request with its tool schemas; `FunctionModel` wraps a plain function
(a scripted agent, a test double that is a real component: it runs in-process, no HTTP).

TEMPORARY until the providers branch lands tool-aware streaming clients with retries: the payload is
built here from `Prepared.to_*()` and posted with `providers.base.post_json`; transient errors (429,
5xx, overloaded, transport) are retried by the loop (`retry_delay`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httpx

from ctxwin.engine import Prepared
from ctxwin.providers import AnthropicClient, Completion, OpenAIChatClient, OpenAIResponsesClient, ProviderError
from ctxwin.providers.anthropic import parse_anthropic_message
from ctxwin.providers.base import post_json
from ctxwin.providers.openai import parse_chat_completion, parse_responses_response

Api = Literal["anthropic", "openai", "openai-responses"]
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})  # 529: Anthropic's "overloaded"
CACHE_MARK = {"type": "ephemeral"}  # Anthropic's prompt-cache breakpoint


class Model(Protocol):
    """One model call for the loop. `model` names the model (a fork must keep it)."""

    model: str

    def send(self, prepared: Prepared, *, max_tokens: int, cache_marks: tuple[int, ...] = ()) -> Completion: ...


@dataclass
class FunctionModel:
    """A model that is a Python function of the prepared request (a scripted agent)."""

    respond: Callable[[Prepared], Completion]
    model: str = "scripted"

    def send(self, prepared: Prepared, *, max_tokens: int, cache_marks: tuple[int, ...] = ()) -> Completion:
        return self.respond(prepared)


class HttpModel:
    """A model behind one of ctxwin's httpx clients. `cache_marks`: indexes of messages (in the
    provider's message list) that get an Anthropic cache breakpoint besides the last one (a fork marks
    its parent's last message, so the parent's cached prefix is read back)."""

    def __init__(self, client: AnthropicClient | OpenAIChatClient | OpenAIResponsesClient) -> None:
        self.client = client
        self.model = client.model
        self._http = httpx.Client()  # its own pool: the client's is private to it
        self.sent: dict[str, Any] | None = None  # the last payload, for reports and tests

    @property
    def api(self) -> Api:
        if isinstance(self.client, AnthropicClient):
            return "anthropic"
        return "openai-responses" if isinstance(self.client, OpenAIResponsesClient) else "openai"

    def payload(self, prepared: Prepared, *, max_tokens: int, cache_marks: tuple[int, ...] = ()) -> dict[str, Any]:
        """The request body for this client's API, from the engine's prepared request."""
        client = self.client
        if isinstance(client, AnthropicClient):
            body = prepared.to_anthropic()
            _mark_cache(body, cache_marks)
            return {"model": client.model, **body, "max_tokens": max_tokens, **client.extra_body}
        if isinstance(client, OpenAIResponsesClient):
            return {"model": client.model, **prepared.to_openai_responses(), "max_output_tokens": max_tokens,
                    "store": False, **client.extra_body}
        return {"model": client.model, **prepared.to_openai_chat(), client.max_tokens_field: max_tokens,
                **client.extra_body}

    def send(self, prepared: Prepared, *, max_tokens: int, cache_marks: tuple[int, ...] = ()) -> Completion:
        client = self.client
        body = self.payload(prepared, max_tokens=max_tokens, cache_marks=cache_marks)
        self.sent = body
        if isinstance(client, AnthropicClient):
            url, parse = client.base_url + "/v1/messages", parse_anthropic_message
        elif isinstance(client, OpenAIResponsesClient):
            url, parse = client.url, parse_responses_response
        else:
            url, parse = client.url, parse_chat_completion
        data = post_json(self._http, url, body, headers=client.request_headers(), timeout=client.timeout,
                         provider=client.provider)
        return parse(data)

    def close(self) -> None:
        self._http.close()
        self.client.close()


def _mark_cache(body: dict[str, Any], marks: tuple[int, ...]) -> None:
    """Cache breakpoints (Anthropic caches only where asked): the system prompt, the last message, and
    the messages in `marks`."""
    messages = body.get("messages") or []
    if isinstance(body.get("system"), str) and body["system"]:
        body["system"] = [{"type": "text", "text": body["system"], "cache_control": CACHE_MARK}]
    for index in {*(m for m in marks if 0 <= m < len(messages)), len(messages) - 1}:
        if index < 0:
            continue
        message = messages[index] = copy.deepcopy(messages[index])
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = [{"type": "text", "text": content, "cache_control": CACHE_MARK}]
        elif isinstance(content, list) and content:
            content[-1] = {**content[-1], "cache_control": CACHE_MARK}


def client_for(api: Api, base_url: str, model: str, api_key: str | None = None,
               timeout: float = 120.0) -> AnthropicClient | OpenAIChatClient | OpenAIResponsesClient:
    """A client for `api` at `base_url` (the key from the usual environment variable when not given)."""
    import os

    if api == "anthropic":
        return AnthropicClient(base_url, api_key or os.environ.get("ANTHROPIC_API_KEY"), model, timeout=timeout)
    key = api_key or os.environ.get("OPENAI_API_KEY")
    if api == "openai-responses":
        return OpenAIResponsesClient(base_url, key, model, timeout=timeout)
    return OpenAIChatClient(base_url, key, model, timeout=timeout)


def is_transient(error: BaseException) -> bool:
    """A failure worth retrying as is: rate limits, overload, server errors, a dropped connection."""
    if isinstance(error, ProviderError):
        return error.status_code in RETRY_STATUSES
    return isinstance(error, httpx.TransportError)


def retry_delay(attempt: int, base: float, cap: float) -> float:
    """Exponential backoff: base, 2 x base, 4 x base ... at most `cap` seconds."""
    return min(cap, base * (2 ** max(0, attempt - 1)))
