"""Streaming: the server-sent events each API sends for a complete answer (Anthropic's Messages
events, OpenAI Chat chunks ending in `[DONE]`, OpenAI Responses events), the head of a stream where a
mid-stream fault cuts in, the error event, and their bytes on the wire."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

STREAM_PIECE_CHARS = 24  # text and JSON arguments arrive in pieces of at most this many characters

Event = tuple[str | None, Mapping[str, Any] | str]  # (SSE event name or None, data: JSON object or raw text)


def _pieces(text: str) -> list[str]:
    return [text[i:i + STREAM_PIECE_CHARS] for i in range(0, len(text), STREAM_PIECE_CHARS)] or []


def stream_events(api: str, answer: Mapping[str, Any], *, include_usage: bool = False) -> list[Event]:
    """The SSE events a real API sends for this complete answer (Anthropic Messages, OpenAI Chat
    chunks ending in `[DONE]`, OpenAI Responses events), in order."""
    if api == "anthropic":
        return _anthropic_events(answer)
    if api == "chat":
        return _chat_chunks(answer, include_usage=include_usage)
    return _responses_events(answer)


def stream_head(api: str, answer: Mapping[str, Any]) -> list[Event]:
    """The first events of a stream, before any content (where a mid-stream fault cuts in)."""
    events = stream_events(api, answer, include_usage=False)
    return events[:2] if api != "chat" else events[:1]


def stream_error(api: str, error: Mapping[str, Any], sequence: int) -> Event:
    """A fault as the event each API sends in the middle of a stream."""
    if api == "anthropic":
        return "error", {"type": "error", "error": dict(error["error"])}
    if api == "chat":
        return None, {"error": dict(error["error"])}
    inner = error["error"]
    return "error", {"type": "error", "code": inner.get("code") or inner.get("type"), "message": inner["message"],
                     "param": inner.get("param"), "sequence_number": sequence}


def encode_sse(events: Sequence[Event]) -> list[bytes]:
    out = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        out.append(((f"event: {name}\n" if name else "") + f"data: {payload}\n\n").encode())
    return out


def _anthropic_events(message: Mapping[str, Any]) -> list[Event]:
    usage = dict(message["usage"])
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 1}}
    events: list[Event] = [("message_start", {"type": "message_start", "message": start}),
                           ("ping", {"type": "ping"})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in _pieces(json.dumps(block["input"]))]
        else:
            opening = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": opening}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
                   for d in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                     "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _chat_chunks(completion: Mapping[str, Any], *, include_usage: bool) -> list[Event]:
    base = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"],
            "model": completion["model"], "system_fingerprint": completion["system_fingerprint"]}
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> Event:
        data: dict[str, Any] = {**base, "choices": [{"index": 0, "delta": dict(delta), "logprobs": None,
                                                     "finish_reason": finish}]}
        if include_usage:
            data["usage"] = None
        return None, data

    text = message.get("content")
    events = [chunk({"role": "assistant", "content": "" if text is not None else None, "refusal": None})]
    events += [chunk({"content": p}) for p in _pieces(text or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        events.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                             "function": {"name": function["name"], "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
                   for p in _pieces(function["arguments"])]
    events.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        events.append((None, {**base, "choices": [], "usage": completion["usage"]}))
    events.append((None, "[DONE]"))
    return events


def _responses_events(response: Mapping[str, Any]) -> list[Event]:
    events: list[Event] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **fields}))

    pending = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    emit("response.created", response=pending)
    emit("response.in_progress", response=pending)
    for index, item in enumerate(response["output"]):
        if item["type"] == "function_call":
            emit("response.output_item.added", output_index=index,
                 item={**item, "arguments": "", "status": "in_progress"})
            for piece in _pieces(item["arguments"]):
                emit("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=piece)
            emit("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                 arguments=item["arguments"], name=item["name"])
        else:
            emit("response.output_item.added", output_index=index,
                 item={**item, "status": "in_progress", "content": []})
            for part_index, part in enumerate(item["content"]):
                emit("response.content_part.added", item_id=item["id"], output_index=index,
                     content_index=part_index, part={**part, "text": ""})
                for piece in _pieces(part["text"]):
                    emit("response.output_text.delta", item_id=item["id"], output_index=index,
                         content_index=part_index, delta=piece, logprobs=[])
                emit("response.output_text.done", item_id=item["id"], output_index=index, content_index=part_index,
                     text=part["text"], logprobs=[])
                emit("response.content_part.done", item_id=item["id"], output_index=index,
                     content_index=part_index, part=part)
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.incomplete" if response["status"] == "incomplete" else "response.completed", response=response)
    return events
