"""Reading a request the fake received: which API a path is, the conversation as canonical
messages, the tools it offers, its output cap, and its input tokens as the server counts them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ctxwin.messages import Message, Text
from ctxwin.messages import providers as convert
from ctxwin.tokens.base import TokenCounter

CHAT, RESPONSES, MESSAGES, COUNT_TOKENS = (
    "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens")
GENERATION_PATHS = (CHAT, RESPONSES, MESSAGES)


def api_of(path: str) -> str | None:
    if path in (MESSAGES, COUNT_TOKENS):
        return "anthropic"
    if path == CHAT:
        return "chat"
    if path == RESPONSES:
        return "responses"
    return None


def request_messages(api: str, body: Mapping[str, Any]) -> list[Message]:
    """The request's conversation as canonical messages (system prompt first, when there is one)."""
    if api == "anthropic":
        return convert.from_anthropic(body.get("messages") or [], system=body.get("system"))
    if api == "chat":
        return convert.from_openai_chat(body.get("messages") or [])
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    messages = list(convert.from_openai_responses(items or []))
    if body.get("instructions"):
        messages.insert(0, Message("system", (Text(str(body["instructions"])),)))
    return messages


def count_request_tokens(api: str, body: Mapping[str, Any], counter: TokenCounter) -> int:
    """Input tokens of a request by `counter`: every message (system prompt included) plus the tool
    definitions, which providers bill as input too."""
    total = sum(counter.count_message(m) for m in request_messages(api, body))
    tools = body.get("tools")
    if tools:
        total += counter.count_text(json.dumps(tools, sort_keys=True))
    return total


def max_tokens_of(api: str, body: Mapping[str, Any]) -> int | None:
    keys = {"anthropic": ("max_tokens",), "chat": ("max_completion_tokens", "max_tokens"),
            "responses": ("max_output_tokens",)}[api]
    for key in keys:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def tool_names(api: str, body: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the tools a request offers (Anthropic and Responses: `name`; Chat: `function.name`)."""
    names = []
    for tool in body.get("tools") or ():
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        name = function.get("name") if api == "chat" and isinstance(function, Mapping) else tool.get("name")
        if isinstance(name, str):
            names.append(name)
    return tuple(names)
