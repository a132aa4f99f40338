"""httpx clients for OpenAI's Chat Completions and Responses APIs, and for every server that speaks them
(Azure, OpenRouter, Groq, DeepSeek, vLLM, llama.cpp, LM Studio, Ollama, ...). No SDK: one POST per call.

Usage is reported the way ctxwin counts it everywhere: `Usage.input_tokens` is the uncached input,
`cache_read_tokens` the cached part (OpenAI's `prompt_tokens` and Responses' `input_tokens` include the
cached tokens, so they are subtracted), so `Usage.context_tokens` is what the model read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ctxwin.messages import Message, Text
from ctxwin.providers.base import DEFAULT_TIMEOUT, Completion, HttpClient, Usage

OPENAI_BASE_URL = "https://api.openai.com/v1"  # the SDK convention: the base URL includes the version


class _OpenAIClient(HttpClient):
    provider = "openai"
    path = ""

    def __init__(
        self,
        base_url: str = OPENAI_BASE_URL,
        api_key: str | None = None,
        model: str = "gpt-4o-mini",
        http_client: httpx.Client | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(base_url, api_key, model, http_client, headers=headers, extra_body=extra_body,
                         timeout=timeout)

    @property
    def url(self) -> str:
        return self.base_url + self.path

    def request_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return {**headers, **self.headers}

    def _post(self, payload: Mapping[str, Any], timeout: float | None) -> dict[str, Any]:
        return self._post_to(self.url, payload, timeout)


class OpenAIChatClient(_OpenAIClient):
    """`POST {base_url}/chat/completions`. `max_tokens_field` is the name the output cap is sent under:
    OpenAI's own models want `max_completion_tokens` (reasoning models reject `max_tokens`), older
    compatible servers only know `max_tokens`."""

    path = "/chat/completions"

    def __init__(self, base_url: str = OPENAI_BASE_URL, api_key: str | None = None, model: str = "gpt-4o-mini",
                 http_client: httpx.Client | None = None, *, max_tokens_field: str = "max_completion_tokens",
                 headers: Mapping[str, str] | None = None, extra_body: Mapping[str, Any] | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(base_url, api_key, model, http_client, headers=headers, extra_body=extra_body,
                         timeout=timeout)
        self.max_tokens_field = max_tokens_field

    def build_request(self, messages: Sequence[Message], *, system: str | None = None,
                      max_tokens: int = 4096) -> dict[str, Any]:
        from ctxwin.messages.providers import to_openai_chat

        head = [Message("system", (Text(system),))] if system else []
        return {"model": self.model, "messages": to_openai_chat([*head, *messages]),
                self.max_tokens_field: max_tokens, **self.extra_body}

    def complete(self, messages: list[Message], *, system: str | None = None, max_tokens: int = 4096,
                 timeout: float | None = None) -> Completion:
        return parse_chat_completion(self._post(self.build_request(messages, system=system, max_tokens=max_tokens),
                                                timeout))


class OpenAIResponsesClient(_OpenAIClient):
    """`POST {base_url}/responses`, stateless (`store: false`): the whole input is sent every call, which
    is what a context manager wants."""

    path = "/responses"

    def build_request(self, messages: Sequence[Message], *, system: str | None = None,
                      max_tokens: int = 4096) -> dict[str, Any]:
        from ctxwin.messages.providers import to_openai_responses

        payload: dict[str, Any] = {"model": self.model, "input": to_openai_responses(list(messages)),
                                   "max_output_tokens": max_tokens, "store": False}
        if system:
            payload["instructions"] = system
        return {**payload, **self.extra_body}

    def complete(self, messages: list[Message], *, system: str | None = None, max_tokens: int = 4096,
                 timeout: float | None = None) -> Completion:
        return parse_responses_response(self._post(self.build_request(messages, system=system,
                                                                      max_tokens=max_tokens), timeout))


def parse_chat_completion(data: Mapping[str, Any]) -> Completion:
    """A Chat Completions response as a `Completion` (the first choice)."""
    from ctxwin.messages.providers import from_openai_chat

    choices = data.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], Mapping) else {}
    raw_message = choice.get("message") or {"role": "assistant", "content": ""}
    messages = from_openai_chat([{**raw_message, "role": "assistant"}])
    message = messages[0] if messages else Message("assistant", ())
    return Completion(message=message, usage=usage_from_openai(data.get("usage")),
                      stop_reason=choice.get("finish_reason"), raw=dict(data))


def parse_responses_response(data: Mapping[str, Any]) -> Completion:
    """A Responses API response as a `Completion`: every assistant item of `output` (reasoning, text,
    function calls) in one assistant message."""
    from ctxwin.messages.providers import from_openai_responses

    blocks = tuple(b for m in from_openai_responses(list(data.get("output") or [])) if m.role == "assistant"
                   for b in m.blocks)
    details = data.get("incomplete_details")
    stop = details.get("reason") if isinstance(details, Mapping) else None
    return Completion(message=Message("assistant", blocks), usage=usage_from_openai(data.get("usage")),
                      stop_reason=stop or data.get("status"), raw=dict(data))


def usage_from_openai(usage: Any) -> Usage | None:
    """OpenAI usage (Chat: prompt/completion tokens; Responses: input/output tokens) as `Usage`, with the
    cached tokens moved out of `input_tokens` into `cache_read_tokens`."""
    if not isinstance(usage, Mapping):
        return None
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, Mapping) else 0
    prompt = int(usage.get("prompt_tokens", usage.get("input_tokens")) or 0)
    output = int(usage.get("completion_tokens", usage.get("output_tokens")) or 0)
    return Usage(input_tokens=max(0, prompt - cached), output_tokens=output, cache_read_tokens=cached)


__all__ = [
    "OPENAI_BASE_URL",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "parse_chat_completion",
    "parse_responses_response",
    "usage_from_openai",
]
