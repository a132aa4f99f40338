"""The model-client interface. ctxwin's core never imports a provider SDK: summarizers and the agent
loop talk to a `ModelClient`, and adapters (httpx clients for OpenAI- and Anthropic-compatible APIs)
implement it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from ctxwin.errors import CtxwinError
from ctxwin.messages import Message


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage a provider reported for one call."""

    input_tokens: int
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def context_tokens(self) -> int:
        """Everything the model read: fresh input plus cache reads and writes (`input_tokens` counts only
        the uncached part, as Anthropic reports it; the OpenAI clients subtract cached tokens to match)."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass(frozen=True, slots=True)
class Completion:
    message: Message  # the assistant message the model returned
    usage: Usage | None = None
    stop_reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def text(self) -> str:
        return self.message.text


class ProviderError(CtxwinError):
    """A model call the provider answered with an HTTP error. `body` is the parsed JSON body when it was
    JSON, else the raw text ("" when the response had no body); `message` the provider's own message
    when it gave one. `ctxwin.providers.overflow.is_overflow_error` reads all of it."""

    def __init__(self, status_code: int, body: Any, message: str, provider: str) -> None:
        super().__init__(f"{provider} API error {status_code}: {message}")
        self.status_code = status_code
        self.body = body
        self.message = message
        self.provider = provider

    def __str__(self) -> str:
        return f"{self.provider} API error {self.status_code}: {self.message}"


class ModelClient(Protocol):
    """One model call. Raises the provider's error (an exception carrying the HTTP status and body)
    when the call fails; `ctxwin.providers.overflow.is_overflow_error` recognises overflow errors."""

    model: str

    def complete(
        self,
        messages: list[Message],
        *,
        system: str | None = None,
        max_tokens: int = 4096,
        timeout: float | None = None,
    ) -> Completion: ...


# --------------------------------------------------------------------------------------------------
# What the httpx clients share: one POST, and the error it raises.

DEFAULT_TIMEOUT = 120.0  # seconds for one model call when neither the client nor the call says otherwise


def post_json(
    http: httpx.Client,
    url: str,
    payload: Mapping[str, Any],
    *,
    headers: Mapping[str, str],
    timeout: float,
    provider: str,
) -> dict[str, Any]:
    """POST `payload` as JSON and return the JSON answer; an HTTP error status raises `ProviderError`.
    Transport failures (refused connection, timeout) propagate as httpx exceptions."""
    response = http.post(url, json=payload, headers=dict(headers), timeout=timeout)
    if response.status_code >= 400:
        raise provider_error(response, provider)
    try:
        data = response.json()
    except ValueError:
        raise ProviderError(response.status_code, response.text, "the response is not JSON", provider) from None
    if not isinstance(data, dict):
        raise ProviderError(response.status_code, data, "the response is not a JSON object", provider)
    return data


def provider_error(response: httpx.Response, provider: str) -> ProviderError:
    """The `ProviderError` for an HTTP error response: the parsed body when it is JSON, the provider's
    own message when it gives one."""
    text = response.text
    try:
        body: Any = response.json()
    except ValueError:
        body = text
    message = _error_message(body) or text.strip() or f"{response.status_code} {response.reason_phrase} (no body)"
    return ProviderError(response.status_code, body, message, provider)


def _error_message(body: Any) -> str | None:
    """The message field of the error shapes providers use: {"error": {"message"}} (OpenAI, Anthropic,
    Gemini), {"error": "..."} (Ollama, LM Studio, xAI), {"message": ...} (Bedrock, Cohere), {"detail"}."""
    if not isinstance(body, Mapping):
        return None
    error = body.get("error")
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return error["message"]
    for value in (error, body.get("message"), body.get("detail")):
        if isinstance(value, str) and value:
            return value
    return None


class HttpClient:
    """What every httpx model client shares: where it posts, with which key and extra headers and body
    fields, its timeout, and the connection pool it owns (or was given, and then leaves open)."""

    provider = ""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        http_client: httpx.Client | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.model = model
        self.headers = dict(headers or {})
        self.extra_body = dict(extra_body or {})
        self.timeout = timeout
        self._own_http = http_client is None
        self._http = http_client or httpx.Client()

    def request_headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _post_to(self, url: str, payload: Mapping[str, Any], timeout: float | None) -> dict[str, Any]:
        return post_json(self._http, url, payload, headers=self.request_headers(),
                         timeout=self.timeout if timeout is None else timeout, provider=self.provider)

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
