"""An httpx client for Anthropic's Messages API (and the servers that speak it: Bedrock and Vertex
gateways, MiniMax, Kimi, z.ai's Anthropic endpoints). No SDK: one POST per call.

Usage keeps Anthropic's own split: `input_tokens` is the uncached input, cache reads and cache writes
are counted separately, so `Usage.context_tokens` is what the model read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ctxwin.messages import Message, Text
from ctxwin.providers.base import DEFAULT_TIMEOUT, Completion, HttpClient, Usage

ANTHROPIC_BASE_URL = "https://api.anthropic.com"  # the SDK convention: the base URL excludes /v1
ANTHROPIC_VERSION = "2023-06-01"  # the API version header every request must carry


class AnthropicClient(HttpClient):
    """`POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version` headers.
    `count_tokens()` asks `/v1/messages/count_tokens` for the exact input count."""

    provider = "anthropic"

    def __init__(
        self,
        base_url: str = ANTHROPIC_BASE_URL,
        api_key: str | None = None,
        model: str = "claude-sonnet-4-5",
        http_client: httpx.Client | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        version: str = ANTHROPIC_VERSION,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__(base_url, api_key, model, http_client, headers=headers, extra_body=extra_body,
                         timeout=timeout)
        self.version = version

    def request_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "anthropic-version": self.version}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return {**headers, **self.headers}

    def build_request(self, messages: Sequence[Message], *, system: str | None = None,
                      max_tokens: int | None = 4096) -> dict[str, Any]:
        from ctxwin.messages.providers import to_anthropic

        head = [Message("system", (Text(system),))] if system else []
        converted = to_anthropic([*head, *messages])
        payload: dict[str, Any] = {"model": self.model, "messages": converted["messages"]}
        if converted.get("system"):
            payload["system"] = converted["system"]
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        return {**payload, **self.extra_body}

    def complete(self, messages: list[Message], *, system: str | None = None, max_tokens: int = 4096,
                 timeout: float | None = None) -> Completion:
        payload = self.build_request(messages, system=system, max_tokens=max_tokens)
        return parse_anthropic_message(self._post("/v1/messages", payload, timeout))

    def count_tokens(self, messages: list[Message], *, system: str | None = None,
                     timeout: float | None = None) -> int:
        payload = self.build_request(messages, system=system, max_tokens=None)
        payload.pop("max_tokens", None)
        return int(self._post("/v1/messages/count_tokens", payload, timeout).get("input_tokens") or 0)

    def _post(self, path: str, payload: Mapping[str, Any], timeout: float | None) -> dict[str, Any]:
        return self._post_to(self.base_url + path, payload, timeout)


def parse_anthropic_message(data: Mapping[str, Any]) -> Completion:
    """A Messages API response as a `Completion`."""
    from ctxwin.messages.providers import from_anthropic

    content = data.get("content") or []
    converted = from_anthropic([{"role": "assistant", "content": content}]) if content else []
    blocks = tuple(b for m in converted if m.role == "assistant" for b in m.blocks)
    return Completion(message=Message("assistant", blocks), usage=usage_from_anthropic(data.get("usage")),
                      stop_reason=data.get("stop_reason"), raw=dict(data))


def usage_from_anthropic(usage: Any) -> Usage | None:
    if not isinstance(usage, Mapping):
        return None
    return Usage(input_tokens=int(usage.get("input_tokens") or 0), output_tokens=int(usage.get("output_tokens") or 0),
                 cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
                 cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0))


__all__ = ["ANTHROPIC_BASE_URL", "ANTHROPIC_VERSION", "AnthropicClient", "parse_anthropic_message",
           "usage_from_anthropic"]
