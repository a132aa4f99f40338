"""An httpx client for Anthropic's Messages API (and the servers that speak it: Bedrock and Vertex
gateways, MiniMax, Kimi, z.ai's Anthropic endpoints). No SDK: one POST per call, streamed or not.

Usage keeps Anthropic's own split: `input_tokens` is the uncached input, cache reads and cache writes
are counted separately, so `Usage.context_tokens` is what the model read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from ctxwin.messages import Message, Text
from ctxwin.messages.providers import canonical, from_anthropic, to_anthropic
from ctxwin.providers import parsing
from ctxwin.providers.client import HttpClient
from ctxwin.providers.interface import (
    SSE,
    Completion,
    Done,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallDelta,
    ToolCallStarted,
    ToolChoice,
    Tools,
    Usage,
    UsageReported,
)
from ctxwin.providers.tools import add_tools

ANTHROPIC_BASE_URL = "https://api.anthropic.com"  # the SDK convention: the base URL excludes /v1
ANTHROPIC_VERSION = "2023-06-01"  # the API version header every request must carry
PROVIDER = "anthropic"


class AnthropicClient(HttpClient):
    """`POST {base_url}/v1/messages` with `x-api-key` (default: $ANTHROPIC_API_KEY) and
    `anthropic-version` headers. `complete()` and `stream()` take tools; `count_tokens()` asks
    `/v1/messages/count_tokens` for the exact input count."""

    provider = PROVIDER
    key_env = "ANTHROPIC_API_KEY"
    default_base_url = ANTHROPIC_BASE_URL
    default_model = "claude-sonnet-4-5"
    path = "/v1/messages"

    def __init__(self, base_url: str | None = None, api_key: str | None = None, model: str | None = None,
                 http_client: httpx.Client | None = None, *, version: str = ANTHROPIC_VERSION,
                 prompt_cache: bool = False, **options: Any) -> None:
        """`options`: headers, extra_body, timeout, retry, on_retry, rng (see `HttpClient`)."""
        super().__init__(base_url, api_key, model, http_client, **options)
        self.version = version
        self.prompt_cache = prompt_cache  # mark cache breakpoints (see `with_cache_breakpoints`)

    def request_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "anthropic-version": self.version}
        if self.api_key:
            headers["x-api-key"] = self.api_key
        return {**headers, **self.headers}

    def build_request(self, messages: Sequence[Message], *, system: str | None = None,
                      max_tokens: int | None = 4096, tools: Tools = None, tool_choice: ToolChoice | None = None,
                      stream: bool = False) -> dict[str, Any]:
        head = [Message("system", (Text(system),))] if system else []
        messages = canonical(messages, "the messages of a model call")
        converted = to_anthropic([*head, *messages])
        payload: dict[str, Any] = {"model": self.model, "messages": converted["messages"]}
        if converted.get("system"):
            payload["system"] = converted["system"]
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        add_tools("anthropic", payload, tools, tool_choice)
        if stream:
            payload["stream"] = True
        if self.prompt_cache:
            payload = with_cache_breakpoints(payload)
        return {**payload, **self.extra_body}

    def parse(self, data: Mapping[str, Any]) -> Completion:
        return parse_anthropic_message(data)

    def stream_events(self, source: Iterator[SSE]) -> Iterator[StreamEvent]:
        return anthropic_stream_events(source)

    def count_tokens(self, messages: Sequence[Message], *, system: str | None = None, tools: Tools = None,
                     timeout: float | None = None) -> int:
        payload = self.build_request(messages, system=system, max_tokens=None, tools=tools)
        payload.pop("max_tokens", None)
        data = self._post_to(self.base_url + "/v1/messages/count_tokens", payload, timeout)
        count = data.get("input_tokens")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise parsing.malformed(PROVIDER, 200, data, "input_tokens is not a count")
        return count


CACHE_CONTROL = {"type": "ephemeral"}  # Anthropic's 5-minute prompt cache


def with_cache_breakpoints(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The request with `cache_control` breakpoints on the last tool, the last system block and the
    last block of the last message (3 of the 4 Anthropic allows): each call then writes the whole
    prompt to the cache and reads the previous call's prefix back, the incremental caching Claude Code
    does. Blocks that already carry a breakpoint keep theirs."""
    out = dict(payload)
    if out.get("tools"):
        out["tools"] = [*out["tools"][:-1], {"cache_control": CACHE_CONTROL, **out["tools"][-1]}]
    system = out.get("system")
    if isinstance(system, str) and system:
        system = [{"type": "text", "text": system}]
    if isinstance(system, list) and system:
        out["system"] = [*system[:-1], {"cache_control": CACHE_CONTROL, **system[-1]}]
    messages = list(out.get("messages") or [])
    if messages:
        last = dict(messages[-1])
        content = last.get("content")
        if isinstance(content, str) and content:
            content = [{"type": "text", "text": content}]
        if isinstance(content, list) and content:
            last["content"] = [*content[:-1], {"cache_control": CACHE_CONTROL, **content[-1]}]
            messages[-1] = last
        out["messages"] = messages
    return out


def parse_anthropic_message(data: Mapping[str, Any]) -> Completion:
    """A Messages API response as a `Completion`; one that is not what the API documents (content not a
    list of blocks, usage counts that are not numbers) is a `ProviderError`."""
    return parsing.guarded_parse(PROVIDER, data, _parse_message)


def _parse_message(data: Mapping[str, Any]) -> Completion:
    content = parsing.object_list(PROVIDER, data, "content", "blocks")
    converted = from_anthropic([{"role": "assistant", "content": content}]) if content else []
    blocks = tuple(b for m in converted if m.role == "assistant" for b in m.blocks)
    stop = data.get("stop_reason")
    return Completion(message=Message("assistant", blocks), usage=usage_from_anthropic(data.get("usage")),
                      stop_reason=stop if isinstance(stop, str) else None, raw=dict(data))


def usage_from_anthropic(usage: Any) -> Usage | None:
    if not isinstance(usage, Mapping):
        return None
    return Usage(input_tokens=parsing.token_count(usage, "input_tokens"),
                 output_tokens=parsing.token_count(usage, "output_tokens"),
                 cache_read_tokens=parsing.token_count(usage, "cache_read_input_tokens"),
                 cache_write_tokens=parsing.token_count(usage, "cache_creation_input_tokens"))


def anthropic_stream_events(source: Iterator[SSE]) -> Iterator[StreamEvent]:
    """Messages API server-sent events (message_start, content_block_start/delta/stop, message_delta,
    message_stop, ping, error) as typed events, ending with `Done`; the completion is built from the
    accumulated message exactly as a non-streamed answer is parsed. A stream that is not what the API
    documents is a `ProviderError`."""
    return parsing.guarded_events(PROVIDER, _anthropic_events(source))


def _anthropic_events(source: Iterator[SSE]) -> Iterator[StreamEvent]:
    message: dict[str, Any] = {}
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    calls: dict[int, int] = {}  # content index -> tool call index
    stopped = False
    for sse in source:
        data = parsing.event_json(PROVIDER, sse)
        kind = data.get("type", sse.event)
        with parsing.malformed_inside(PROVIDER, data):
            if kind == "error":
                raise parsing.stream_error(PROVIDER, data)
            if kind == "message_start":
                message = dict(data["message"])
                usage = usage_from_anthropic(message.get("usage"))
                if usage is not None:
                    yield UsageReported(usage)
            elif kind == "content_block_start":
                index, block = int(data["index"]), dict(data["content_block"])
                blocks[index] = block
                if block.get("type") == "tool_use":
                    calls[index] = len(calls)
                    partial[index] = []
                    yield ToolCallStarted(calls[index], parsing.text_field(block["id"], "tool_use.id"),
                                          parsing.text_field(block["name"], "tool_use.name"))
                elif block.get("type") == "text" and block.get("text"):
                    yield TextDelta(parsing.text_field(block["text"], "text"))
            elif kind == "content_block_delta":
                index, delta = int(data["index"]), data["delta"]
                block = blocks[index]
                if delta["type"] == "text_delta":
                    piece = parsing.text_field(delta["text"], "text_delta.text")
                    block["text"] = parsing.text_field(block.get("text", ""), "text") + piece
                    yield TextDelta(piece)
                elif delta["type"] == "input_json_delta":
                    piece = parsing.text_field(delta["partial_json"], "input_json_delta.partial_json")
                    partial[index].append(piece)
                    yield ToolCallDelta(calls[index], piece)
                elif delta["type"] == "thinking_delta":
                    piece = parsing.text_field(delta["thinking"], "thinking_delta.thinking")
                    block["thinking"] = parsing.text_field(block.get("thinking", ""), "thinking") + piece
                    yield ThinkingDelta(piece)
                elif delta["type"] == "signature_delta":
                    block["signature"] = parsing.text_field(block.get("signature", ""), "signature") + \
                        parsing.text_field(delta["signature"], "signature_delta.signature")
                elif delta["type"] == "citations_delta":
                    block.setdefault("citations", []).append(delta["citation"])
            elif kind == "content_block_stop":
                index = int(data["index"])
                if index in partial:
                    text = "".join(partial.pop(index))
                    blocks[index]["input"] = json.loads(text) if text.strip() else {}
            elif kind == "message_delta":
                delta = data.get("delta") or {}
                message.update({k: v for k, v in delta.items() if k in ("stop_reason", "stop_sequence")})
                counts = {**(message.get("usage") or {}), **{k: v for k, v in (data.get("usage") or {}).items()
                                                             if v is not None}}
                message["usage"] = counts
                reported = usage_from_anthropic(counts)
                if reported is not None:
                    yield UsageReported(reported)
            elif kind == "message_stop":
                stopped = True
                break
    if not message or not stopped:
        raise parsing.malformed(PROVIDER, 200, message or None, "the stream ended before message_stop")
    message["content"] = [blocks[i] for i in sorted(blocks)]
    yield Done(parse_anthropic_message(message))


__all__ = ["ANTHROPIC_BASE_URL", "ANTHROPIC_VERSION", "AnthropicClient", "anthropic_stream_events",
           "parse_anthropic_message", "usage_from_anthropic", "with_cache_breakpoints"]
