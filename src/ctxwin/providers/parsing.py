"""Reading answers: the `ProviderError` an HTTP error response, an error event or a malformed answer
becomes, and the guards the parsers read a provider's JSON through (a field that is not what the API
documents is a malformed answer, never a stray `KeyError`)."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from ctxwin.errors import CtxwinError, ProviderError
from ctxwin.providers.interface import SSE, Completion, StreamEvent
from ctxwin.providers.retry import retry_after_seconds

MALFORMED = (CtxwinError, ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError)


def token_count(usage: Mapping[str, Any], key: str) -> int:
    """A token count from a usage object: absent or null is 0; anything but a non-negative integer is a
    malformed answer (ValueError, turned into `ProviderError` by the parsers)."""
    value = usage.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 \
            or (isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
        raise ValueError(f"usage.{key} is {value!r}, not a token count")
    return int(value)


def provider_error(response: httpx.Response, provider: str) -> ProviderError:
    """The `ProviderError` for an HTTP error response: the parsed body when it is JSON, the provider's
    own message when it gives one, and the wait it asks for."""
    try:
        text = response.text
    except (UnicodeDecodeError, LookupError):
        text = response.content.decode("utf-8", "replace")
    try:
        body: Any = json.loads(text) if text else text
    except (ValueError, RecursionError):
        body = text
    message = _error_message(body) or text.strip()[:2000] or \
        f"{response.status_code} {response.reason_phrase} (no body)"
    return ProviderError(response.status_code, body, message, provider, retry_after_seconds(response.headers))


def malformed(provider: str, status: int, body: Any, problem: str | BaseException) -> ProviderError:
    """A `ProviderError` for an answer that is not what the API documents."""
    detail = f"{type(problem).__name__}: {problem}" if isinstance(problem, BaseException) else problem
    return ProviderError(status, body, f"malformed response ({detail})", provider)


def text_field(value: Any, what: str) -> str:
    """A field an API documents as a string; anything else is a malformed answer (ValueError, turned
    into `ProviderError` by the parsers)."""
    if not isinstance(value, str):
        raise ValueError(f"{what} is {type(value).__name__}, not a string")
    return value


@contextlib.contextmanager
def malformed_inside(provider: str, body: Mapping[str, Any] | None) -> Iterator[None]:
    """Anything that goes wrong reading `body` (wrong types, missing fields) becomes the `ProviderError`
    of a malformed answer carrying it; a `ProviderError` raised inside passes as it is."""
    try:
        yield
    except ProviderError:
        raise
    except MALFORMED as problem:
        raise malformed(provider, 200, None if body is None else dict(body), problem) from None


def guarded_events(provider: str, events: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
    """`events`, with anything in the stream that is not what the API documents turned into a
    `ProviderError` (wherever the parser trips over it, the final assembly included)."""
    with malformed_inside(provider, None):
        yield from events


def guarded_parse(provider: str, data: Any, parse: Callable[[Mapping[str, Any]], Completion]) -> Completion:
    """`parse(data)`, with anything that is not what the API documents (not an object, wrong types,
    missing fields) turned into a `ProviderError` carrying the answer."""
    if not isinstance(data, Mapping):
        raise malformed(provider, 200, data, "the answer is not a JSON object")
    with malformed_inside(provider, data):
        return parse(data)


def object_list(provider: str, data: Mapping[str, Any], key: str, what: str) -> list[Mapping[str, Any]]:
    """`data[key]` where the API documents a list of JSON objects (absent or null: none); anything else
    is a malformed answer."""
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise malformed(provider, 200, dict(data), f"{key} is not a list of {what}")
    return value


def event_json(provider: str, sse: SSE) -> Mapping[str, Any]:
    """The JSON object one server-sent event carries; anything else is a malformed stream."""
    try:
        data = sse.json()
    except (ValueError, RecursionError) as problem:
        raise malformed(provider, 200, sse.data, problem) from None
    if not isinstance(data, Mapping):
        raise malformed(provider, 200, data, "an event that is not a JSON object")
    return data


def stream_error(provider: str, body: Mapping[str, Any]) -> ProviderError:
    """A `ProviderError` for an error event inside a stream, with the status its type stands for."""
    kind = _error_type(body)
    status = {"overloaded_error": 529, "rate_limit_error": 429, "api_error": 500, "server_error": 500,
              "rate_limit_exceeded": 429, "invalid_request_error": 400, "authentication_error": 401,
              "permission_error": 403, "not_found_error": 404, "request_too_large": 413}.get(kind or "", 500)
    return ProviderError(status, dict(body), _error_message(body) or "error event in the stream", provider)


def _error_type(body: Any) -> str | None:
    if not isinstance(body, Mapping):
        return None
    error = body.get("error")
    if isinstance(error, Mapping):
        for key in ("type", "code"):
            if isinstance(error.get(key), str):
                return error[key]
    code = body.get("code")
    return code if isinstance(code, str) else None


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


def json_object(response: httpx.Response, provider: str) -> dict[str, Any]:
    if response.status_code >= 400:
        raise provider_error(response, provider)
    try:
        data = json.loads(response.content)
    except (ValueError, RecursionError):
        raise ProviderError(response.status_code, response.text, "the response is not JSON", provider) from None
    if not isinstance(data, dict):
        raise ProviderError(response.status_code, data, "the response is not a JSON object", provider)
    return data
