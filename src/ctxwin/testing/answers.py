"""What the fake answers an accepted request with: the deterministic reply (a structured summary
when asked for one, else a short acknowledgement), cut to the request's output budget, and each API's
response object around it (Anthropic's message, a Chat completion, a Responses response)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.messages.providers import arguments_object
from ctxwin.tokens.base import TokenCounter

MAX_SUMMARY_LINE_CHARS = 200  # first lines of user messages are cut to this in the summary
MAX_SUMMARY_FILES = 500  # file paths listed in a summary, at most
REPLY_PREVIEW_CHARS = 80  # how much of the last user message the default reply quotes
CREATED_AT = 1_700_000_000  # a fixed timestamp, so responses are the same bytes on every run

SUMMARY_REQUEST = re.compile(r"\bsummar(?:y|ies|ize|ise|ization|isation)\b", re.IGNORECASE)
QUOTED_USER_TURN = re.compile(r"^\s*(?:\*\*|\[)?(?:user|human)(?:\*\*|\])?\s*[:>]\s*(\S.*)$",
                              re.IGNORECASE | re.MULTILINE)
FILE_PATH = re.compile(r"(?<![\w:/.~-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]*\w")


def respond_to(messages: Sequence[Message], input_tokens: int) -> str:
    """The deterministic reply: a structured summary when the last user message asks for one, else a
    short acknowledgement quoting the last user message."""
    users = [m for m in messages if m.role == "user" and _plain_text(m).strip()]
    last = _plain_text(users[-1]) if users else ""
    if SUMMARY_REQUEST.search(last):
        if messages and messages[-1] is users[-1]:
            return summarize(messages[:-1], input_tokens, request=messages[-1])
        return summarize(messages, input_tokens)
    first = last.strip().splitlines()[0] if last.strip() else ""
    return f"OK. {len(messages)} messages read; the last user message begins: {first[:REPLY_PREVIEW_CHARS]}"


def summarize(messages: Sequence[Message], input_tokens: int, request: Message | None = None) -> str:
    """The first line of every user message, of every user turn quoted in a transcript ("User: ..."),
    and every file path seen (the summary request included), in order, as markdown sections."""
    everything = [*messages, *([request] if request is not None else [])]
    lines = ["## Summary", "", "### User messages"]
    for message in messages:
        if message.role == "user":
            text = _plain_text(message).strip()
            if text:
                lines.append("- " + text.splitlines()[0][:MAX_SUMMARY_LINE_CHARS])
    quoted = [q.strip()[:MAX_SUMMARY_LINE_CHARS] for m in everything for q in QUOTED_USER_TURN.findall(_plain_text(m))]
    if quoted:
        lines += ["", "### Quoted user turns", *(f"- {q}" for q in quoted)]
    lines += ["", "### Files"]
    lines += [f"- {path}" for path in _file_paths(everything)[:MAX_SUMMARY_FILES]]
    lines += ["", "### Stats", f"- messages: {len(messages)}", f"- input tokens: {input_tokens}"]
    return "\n".join(lines)


def _plain_text(message: Message) -> str:
    return "\n".join(b.text for b in message.blocks if isinstance(b, Text))


def _file_paths(messages: Iterable[Message]) -> list[str]:
    seen: dict[str, None] = {}
    for message in messages:
        for block in message.blocks:
            if isinstance(block, Text):
                texts = [block.text]
            elif isinstance(block, ToolCall):
                texts = [json.dumps(block.arguments, ensure_ascii=False)]
            elif isinstance(block, ToolResult):
                texts = [block.text]
            else:
                texts = []
            for text in texts:
                for found in FILE_PATH.findall(text):
                    seen.setdefault(found, None)
    return list(seen)


def fit(text: str, budget: int, counter: TokenCounter) -> tuple[str, bool]:
    """The reply cut to `budget` tokens, and whether it had to be cut."""
    if counter.count_text(text) <= budget:
        return text, False
    low, high = 0, len(text)
    while low < high:  # the longest prefix that fits
        mid = (low + high + 1) // 2
        if counter.count_text(text[:mid]) <= budget:
            low = mid
        else:
            high = mid - 1
    return text[:low], True


@dataclass(frozen=True)
class OutCall:
    id: str
    name: str
    arguments: dict[str, Any] | str  # a string: raw arguments, sent as they are (maybe not JSON)

    @property
    def arguments_json(self) -> str:
        """The arguments as Chat and Responses send them: a JSON string (raw ones verbatim)."""
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)

    @property
    def input(self) -> dict[str, Any]:
        """The arguments as Anthropic's `tool_use.input`, which is always an object: raw arguments that
        are not a JSON object are wrapped the way ctxwin's converters read them back."""
        return dict(arguments_object(self.arguments))


def call_id(api: str, serial: int, index: int) -> str:
    return f"{'toolu' if api == 'anthropic' else 'call'}_fake_{serial:06d}_{index}"


def _anthropic_message(serial: int, model: str, text: str, calls: Sequence[OutCall], usage: Mapping[str, int],
                       stop: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.input} for c in calls]
    return {
        "id": f"msg_fake_{serial:06d}", "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"],
                  "cache_creation_input_tokens": usage.get("cache_write_tokens", 0),
                  "cache_read_input_tokens": usage.get("cache_read_tokens", 0)},
    }


def _chat_usage(usage: Mapping[str, int]) -> dict[str, Any]:
    cached = usage.get("cache_read_tokens", 0)
    prompt = usage["input_tokens"] + cached + usage.get("cache_write_tokens", 0)
    return {"prompt_tokens": prompt, "completion_tokens": usage["output_tokens"],
            "total_tokens": prompt + usage["output_tokens"],
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}


def _chat_completion(serial: int, model: str, text: str, calls: Sequence[OutCall], usage: Mapping[str, int],
                     stop: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None, "refusal": None}
    if calls:
        message["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments_json}} for c in calls]
    return {
        "id": f"chatcmpl-fake-{serial:06d}", "object": "chat.completion", "created": CREATED_AT, "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": stop}],
        "usage": _chat_usage(usage), "system_fingerprint": "fp_fake",
    }


def _responses_response(serial: int, model: str, text: str, calls: Sequence[OutCall], usage: Mapping[str, int],
                        incomplete: str | None, max_output: int | None) -> dict[str, Any]:
    cached = usage.get("cache_read_tokens", 0)
    prompt = usage["input_tokens"] + cached + usage.get("cache_write_tokens", 0)
    output: list[dict[str, Any]] = []
    if text or not calls:
        output.append({"type": "message", "id": f"msg_fake_{serial:06d}", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
    output += [{"type": "function_call", "id": f"fc_fake_{serial:06d}_{i}", "call_id": c.id, "name": c.name,
                "arguments": c.arguments_json, "status": "completed"} for i, c in enumerate(calls)]
    return {
        "id": f"resp_fake_{serial:06d}", "object": "response", "created_at": CREATED_AT, "model": model,
        "status": "incomplete" if incomplete else "completed", "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": None, "max_output_tokens": max_output, "metadata": {}, "parallel_tool_calls": True,
        "temperature": 1.0, "top_p": 1.0, "tool_choice": "auto", "tools": [], "truncation": "disabled",
        "output": output,
        "usage": {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
                  "output_tokens": usage["output_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": prompt + usage["output_tokens"]},
    }


def response_object(api: str, serial: int, model: str, text: str, calls: Sequence[OutCall], usage: Mapping[str, int],
                    stop: str | None, *, truncated: bool, max_tokens: int | None) -> dict[str, Any]:
    """The API's response object for this reply; without an explicit `stop`, the stop reason the API
    gives (cut at the output budget, ended in tool calls, or done)."""
    if api == "anthropic":
        default = "max_tokens" if truncated else "tool_use" if calls else "end_turn"
        return _anthropic_message(serial, model, text, calls, usage, stop or default)
    if api == "chat":
        default = "length" if truncated else "tool_calls" if calls else "stop"
        return _chat_completion(serial, model, text, calls, usage, stop or default)
    return _responses_response(serial, model, text, calls, usage, stop or ("max_output_tokens" if truncated
                                                                          else None), max_tokens)
