"""httpx clients for OpenAI's Chat Completions and Responses APIs, and for every server that speaks them
(Azure, OpenRouter, Groq, DeepSeek, vLLM, llama.cpp, LM Studio, Ollama, ...) by base URL. No SDK: one
POST per call, streamed or not.

Usage is reported the way ctxwin counts it everywhere: `Usage.input_tokens` is the uncached input,
`cache_read_tokens` the cached part (OpenAI's `prompt_tokens` and Responses' `input_tokens` include the
cached tokens, so they are subtracted), so `Usage.context_tokens` is what the model read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import httpx

from ctxwin.messages import Message, Text
from ctxwin.messages.providers import (
    canonical,
    from_openai_chat,
    from_openai_responses,
    to_openai_chat,
    to_openai_responses,
)
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

OPENAI_BASE_URL = "https://api.openai.com/v1"  # the SDK convention: the base URL includes the version
PROVIDER = "openai"

class _OpenAIClient(HttpClient):
    provider = PROVIDER
    key_env = "OPENAI_API_KEY"
    default_base_url = OPENAI_BASE_URL
    default_model = "gpt-4o-mini"

    def request_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return {**headers, **self.headers}


class OpenAIChatClient(_OpenAIClient):
    """`POST {base_url}/chat/completions` with `authorization: Bearer` (default: $OPENAI_API_KEY).
    `max_tokens_field` is the name the output cap is sent under: OpenAI's own models want
    `max_completion_tokens` (reasoning models reject `max_tokens`), older compatible servers only know
    `max_tokens`. Streams ask for the usage chunk (`stream_options.include_usage`)."""

    path = "/chat/completions"

    def __init__(self, base_url: str | None = None, api_key: str | None = None, model: str | None = None,
                 http_client: httpx.Client | None = None, *, max_tokens_field: str = "max_completion_tokens",
                 **options: Any) -> None:
        """`options`: headers, extra_body, timeout, retry, on_retry, rng (see `HttpClient`)."""
        super().__init__(base_url, api_key, model, http_client, **options)
        self.max_tokens_field = max_tokens_field

    def build_request(self, messages: Sequence[Message], *, system: str | None = None, max_tokens: int | None = 4096,
                      tools: Tools = None, tool_choice: ToolChoice | None = None,
                      stream: bool = False) -> dict[str, Any]:
        head = [Message("system", (Text(system),))] if system else []
        messages = canonical(messages, "the messages of a model call")
        payload: dict[str, Any] = {"model": self.model, "messages": to_openai_chat([*head, *messages])}
        if max_tokens is not None:  # None: the model's own limit, as the Anthropic client reads it
            payload[self.max_tokens_field] = max_tokens
        add_tools("chat", payload, tools, tool_choice)
        if stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return {**payload, **self.extra_body}

    def parse(self, data: Mapping[str, Any]) -> Completion:
        return parse_chat_completion(data)

    def stream_events(self, source: Iterator[SSE]) -> Iterator[StreamEvent]:
        return chat_stream_events(source)


class OpenAIResponsesClient(_OpenAIClient):
    """`POST {base_url}/responses`, stateless (`store: false`): the whole input is sent every call, which
    is what a context manager wants."""

    path = "/responses"

    def build_request(self, messages: Sequence[Message], *, system: str | None = None, max_tokens: int | None = 4096,
                      tools: Tools = None, tool_choice: ToolChoice | None = None,
                      stream: bool = False) -> dict[str, Any]:
        messages = canonical(messages, "the messages of a model call")
        payload: dict[str, Any] = {"model": self.model, "input": to_openai_responses(list(messages)), "store": False}
        if max_tokens is not None:
            payload["max_output_tokens"] = max_tokens
        if system:
            payload["instructions"] = system
        add_tools("responses", payload, tools, tool_choice)
        if stream:
            payload["stream"] = True
        return {**payload, **self.extra_body}

    def parse(self, data: Mapping[str, Any]) -> Completion:
        return parse_responses_response(data)

    def stream_events(self, source: Iterator[SSE]) -> Iterator[StreamEvent]:
        return responses_stream_events(source)


# --------------------------------------------------------------------------------------------------
# Whole answers


def parse_chat_completion(data: Mapping[str, Any]) -> Completion:
    """A Chat Completions response as a `Completion` (the first choice); one that is not what the API
    documents (choices not a list of objects, usage counts that are not numbers) is a `ProviderError`."""
    return parsing.guarded_parse(PROVIDER, data, _parse_chat)


def _parse_chat(data: Mapping[str, Any]) -> Completion:
    choices = data.get("choices")
    if choices is None or choices == []:
        choices = [{}]
    if not isinstance(choices, list) or not isinstance(choices[0], Mapping):
        raise parsing.malformed(PROVIDER, 200, dict(data), "choices is not a list of objects")
    choice = choices[0]
    raw_message = choice.get("message") or {"role": "assistant", "content": ""}
    if not isinstance(raw_message, Mapping):
        raise parsing.malformed(PROVIDER, 200, dict(data), "choices[0].message is not an object")
    messages = from_openai_chat([{**raw_message, "role": "assistant"}])
    message = messages[0] if messages else Message("assistant", ())
    stop = choice.get("finish_reason")
    return Completion(message=message, usage=usage_from_openai(data.get("usage")),
                      stop_reason=stop if isinstance(stop, str) else None, raw=dict(data))


def parse_responses_response(data: Mapping[str, Any]) -> Completion:
    """A Responses API response as a `Completion`: every assistant item of `output` (reasoning, text,
    function calls) in one assistant message."""
    return parsing.guarded_parse(PROVIDER, data, _parse_responses)


def _parse_responses(data: Mapping[str, Any]) -> Completion:
    output = parsing.object_list(PROVIDER, data, "output", "items")
    blocks = tuple(b for m in from_openai_responses(output) if m.role == "assistant" for b in m.blocks)
    details = data.get("incomplete_details")
    stop = details.get("reason") if isinstance(details, Mapping) else None
    status = data.get("status")
    return Completion(message=Message("assistant", blocks), usage=usage_from_openai(data.get("usage")),
                      stop_reason=stop or (status if isinstance(status, str) else None), raw=dict(data))


def usage_from_openai(usage: Any) -> Usage | None:
    """OpenAI usage (Chat: prompt/completion tokens; Responses: input/output tokens) as `Usage`, with the
    cached tokens moved out of `input_tokens` into `cache_read_tokens`."""
    if not isinstance(usage, Mapping):
        return None
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    cached = parsing.token_count(details, "cached_tokens") if isinstance(details, Mapping) else 0
    prompt = parsing.token_count(usage, "prompt_tokens" if "prompt_tokens" in usage else "input_tokens")
    output = parsing.token_count(usage, "completion_tokens" if "completion_tokens" in usage else "output_tokens")
    return Usage(input_tokens=max(0, prompt - cached), output_tokens=output, cache_read_tokens=cached)


# --------------------------------------------------------------------------------------------------
# Streams


def chat_stream_events(source: Iterator[SSE]) -> Iterator[StreamEvent]:
    """Chat Completions chunks (`delta.content`, `delta.tool_calls` by index, `finish_reason`, the final
    usage chunk, `[DONE]`, an `{"error": ...}` chunk) as typed events, ending with `Done`. A stream that
    is not what the API documents is a `ProviderError`."""
    return parsing.guarded_events(PROVIDER, _chat_events(source))


def _chat_events(source: Iterator[SSE]) -> Iterator[StreamEvent]:
    head: dict[str, Any] = {}
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish: str | None = None
    usage: Any = None
    done = False
    for sse in source:
        if sse.data.strip() == "[DONE]":
            done = True
            break
        data = parsing.event_json(PROVIDER, sse)
        with parsing.malformed_inside(PROVIDER, data):
            if data.get("error") is not None:
                raise parsing.stream_error(PROVIDER, data)
            head = head or {k: data.get(k) for k in ("id", "model", "created", "system_fingerprint")}
            if data.get("usage") is not None:
                usage = data["usage"]
                reported = usage_from_openai(usage)
                if reported is not None:
                    yield UsageReported(reported)
            for choice in data.get("choices") or ():
                if choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(parsing.text_field(delta["content"], "delta.content"))
                    yield TextDelta(delta["content"])
                if delta.get("reasoning_content"):  # DeepSeek, vLLM, llama.cpp
                    yield ThinkingDelta(parsing.text_field(delta["reasoning_content"], "delta.reasoning_content"))
                for piece in delta.get("tool_calls") or ():
                    index = int(piece.get("index", len(calls)))
                    function = piece.get("function") or {}
                    call = calls.get(index)
                    if call is None:
                        call = calls[index] = {
                            "id": parsing.text_field(piece.get("id") or "", "tool_calls.id"), "type": "function",
                            "function": {"name": parsing.text_field(function.get("name") or "", "function.name"),
                                         "arguments": ""}}
                        yield ToolCallStarted(index, call["id"], call["function"]["name"])
                    if function.get("arguments"):
                        call["function"]["arguments"] += parsing.text_field(function["arguments"], "function.arguments")
                        yield ToolCallDelta(index, function["arguments"])
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
    if not done and finish is None:
        raise parsing.malformed(PROVIDER, 200, None, "the stream ended before its last chunk")
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    completion = {**head, "object": "chat.completion",
                  "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}
    yield Done(parse_chat_completion(completion))


def responses_stream_events(source: Iterator[SSE]) -> Iterator[StreamEvent]:
    """Responses API events (response.created, response.output_item.added/done,
    response.output_text.delta, response.function_call_arguments.delta, response.completed /
    incomplete / failed, error) as typed events, ending with `Done` built from the final response. A
    stream that is not what the API documents is a `ProviderError`."""
    return parsing.guarded_events(PROVIDER, _responses_events(source))


def _responses_events(source: Iterator[SSE]) -> Iterator[StreamEvent]:
    items: dict[int, dict[str, Any]] = {}
    calls: dict[int, int] = {}  # output index -> tool call index
    final: Mapping[str, Any] | None = None
    for sse in source:
        data = parsing.event_json(PROVIDER, sse)
        kind = data.get("type", sse.event)
        with parsing.malformed_inside(PROVIDER, data):
            if kind == "error":
                raise parsing.stream_error(PROVIDER, {"error": {"type": data.get("code") or "server_error",
                                                        "message": data.get("message") or "stream error",
                                                        "param": data.get("param")}})
            if kind == "response.failed":
                error = (data.get("response") or {}).get("error") or {}
                raise parsing.stream_error(PROVIDER, {"error": {"type": error.get("code") or "server_error",
                                                        "message": error.get("message") or "the response failed"}})
            if kind == "response.output_item.added":
                index, item = int(data["output_index"]), dict(data["item"])
                items[index] = item
                if item.get("type") == "function_call":
                    calls[index] = len(calls)
                    yield ToolCallStarted(calls[index],
                                               parsing.text_field(item.get("call_id"), "function_call.call_id"),
                                               parsing.text_field(item.get("name"), "function_call.name"))
            elif kind == "response.output_text.delta":
                yield TextDelta(parsing.text_field(data["delta"], "output_text.delta"))
            elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
                yield ThinkingDelta(parsing.text_field(data["delta"], "reasoning delta"))
            elif kind == "response.function_call_arguments.delta":
                index = int(data["output_index"])
                yield ToolCallDelta(calls[index], parsing.text_field(data["delta"], "function_call_arguments.delta"))
            elif kind == "response.output_item.done":
                items[int(data["output_index"])] = dict(data["item"])
            elif kind in ("response.completed", "response.incomplete"):
                final = dict(data["response"])
                reported = usage_from_openai(final.get("usage"))
                if reported is not None:
                    yield UsageReported(reported)
                break
    if final is None:
        raise parsing.malformed(PROVIDER, 200, None, "the stream ended before response.completed")
    if not final.get("output") and items:  # some servers leave the final output empty: use what streamed
        final = {**final, "output": [items[i] for i in sorted(items)]}
    yield Done(parse_responses_response(final))


__all__ = [
    "OPENAI_BASE_URL",
    "OpenAIChatClient",
    "OpenAIResponsesClient",
    "chat_stream_events",
    "parse_chat_completion",
    "parse_responses_response",
    "responses_stream_events",
    "usage_from_openai",
]
