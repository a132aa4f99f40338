"""What a streamed answer shows the caller: the upstream's events, relayed as they arrive, edited
only where the proxy's own tool shows.

The blocks of a `ctxwin_recall` call are dropped (the agent never sees that tool), and the positions
after them are renumbered so the caller's SDK sees contiguous indexes. Only the *end* of an answer is
held back: Anthropic's `message_delta` and `message_stop`, Chat's finish chunk, usage chunk and
`[DONE]`, Responses' `response.completed`. That is what must be buffered: only when the answer ends
is it known whether it asked for recall alone, and then the proxy answers the calls, calls the
upstream again and goes on relaying the next answer's content into the *same* message for the
caller, whose end is then the last answer's end (`Editor.next_round`). Nothing else waits.

A response that mixes recall calls with the agent's own calls goes to the agent as its own: its
calls were already relayed as they arrived, the recall calls are dropped unanswered (the tool's
description tells the model to call it alone), and the model can ask again on its next turn. The
whole-answer path decides the same way (`Api.without_recall`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ctxwin.errors import ProviderError, ProxyError
from ctxwin.providers.base import SSE, Done

from .apis import RECALL_TOOL, Api
from .errors import ANTHROPIC, OPENAI_CHAT


def encode(event: str, data: str) -> bytes:
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return (f"event: {event}\n{lines}\n" if event else f"{lines}\n").encode()


# ---------------------------------------------------------------------------------------------- editors


@dataclass
class Editor:
    """What the caller is shown of one or more upstream answers (a recall round continues the same
    message). `feed` returns what to send now; `finish` what was held back, once the last answer
    ended. `recall` and `own` say what the answer just read asked for."""

    round: int = 0
    recall: list[str] = field(default_factory=list)  # upstream positions of recall blocks this round
    own: int = 0  # the agent's own calls this round
    held: list[SSE] = field(default_factory=list)
    shown: int = 0  # positions the caller has seen (content blocks, tool calls or output items)
    mapping: dict[int, int] = field(default_factory=dict)  # upstream position -> the caller's

    def next_round(self) -> None:
        self.round += 1
        self.recall, self.own, self.held, self.mapping = [], 0, [], {}

    def feed(self, sse: SSE) -> list[bytes]:
        raise NotImplementedError

    def finish(self, *, dropped_only: bool) -> list[bytes]:
        raise NotImplementedError

    def place(self, index: int) -> int:
        if index not in self.mapping:
            self.mapping[index] = self.shown
            self.shown += 1
        return self.mapping[index]


class AnthropicEditor(Editor):
    def feed(self, sse: SSE) -> list[bytes]:
        kind = sse.event
        if kind == "ping":
            return [encode(sse.event, sse.data)]
        if kind in ("message_delta", "message_stop"):
            self.held.append(sse)
            return []
        if kind == "message_start" and self.round:
            return []  # the caller's message started with the first answer
        if kind.startswith("content_block_"):
            data = orjson.loads(sse.data)
            index = data.get("index")
            if kind == "content_block_start":
                block = data.get("content_block") or {}
                if block.get("type") == "tool_use" and block.get("name") == RECALL_TOOL:
                    self.recall.append(str(index))
                    return []
                self.own += block.get("type") == "tool_use"
            if str(index) in self.recall:
                return []
            placed = self.place(int(index)) if isinstance(index, int) else index
            if placed != index:
                data["index"] = placed
                return [encode(kind, orjson.dumps(data).decode())]
        return [encode(sse.event, sse.data)]

    def finish(self, *, dropped_only: bool) -> list[bytes]:
        out = []
        for sse in self.held:
            if sse.event == "message_delta" and dropped_only:
                data = orjson.loads(sse.data)
                if (data.get("delta") or {}).get("stop_reason") == "tool_use":
                    data["delta"]["stop_reason"] = "end_turn"  # its only calls were ctxwin's, dropped
                    out.append(encode(sse.event, orjson.dumps(data).decode()))
                    continue
            out.append(encode(sse.event, sse.data))
        return out


class ChatEditor(Editor):
    first_id: str | None = None
    hide_usage: bool = False  # the caller did not ask for usage: the proxy did, for itself

    def feed(self, sse: SSE) -> list[bytes]:
        if sse.data.strip() == "[DONE]":
            self.held.append(sse)
            return []
        data = orjson.loads(sse.data)
        if not isinstance(data, dict) or data.get("error") is not None:
            return [encode("", sse.data)]
        choices = data.get("choices") or []
        changed = False
        if self.first_id is None:
            self.first_id = data.get("id")
        elif self.round and data.get("id") != self.first_id:
            data["id"] = self.first_id  # one message for the caller, whatever the rounds
            changed = True
        if not choices:  # the usage chunk
            self.held.append(SSE("", orjson.dumps(data).decode() if changed else sse.data))
            return []
        choice = choices[0]
        if choice.get("finish_reason"):
            self.held.append(SSE("", orjson.dumps(data).decode() if changed else sse.data))
            return []
        delta = choice.get("delta") or {}
        if self.round and set(delta) <= {"role", "content", "refusal"} and not delta.get("content"):
            return []  # the next answer's opening chunk: the caller's message is already open
        if delta.get("tool_calls"):
            kept = []
            for piece in delta["tool_calls"]:
                index = piece.get("index", 0)
                name = (piece.get("function") or {}).get("name")
                if name == RECALL_TOOL:
                    self.recall.append(str(index))
                elif name:
                    self.own += 1
                if str(index) in self.recall:
                    continue
                placed = self.place(index)
                if placed != index:
                    piece = {**piece, "index": placed}
                    changed = True
                kept.append(piece)
            if len(kept) != len(delta["tool_calls"]):
                changed = True
                if not kept and not delta.get("content"):
                    return []
            delta = {**delta, "tool_calls": kept} if kept else {k: v for k, v in delta.items() if k != "tool_calls"}
            data["choices"] = [{**choice, "delta": delta}, *choices[1:]]
        if self.hide_usage and "usage" in data:
            del data["usage"]
            changed = True
        return [encode("", orjson.dumps(data).decode() if changed else sse.data)]

    def finish(self, *, dropped_only: bool) -> list[bytes]:
        out = []
        for sse in self.held:
            if sse.data.strip() == "[DONE]":
                out.append(encode("", sse.data))
                continue
            data = orjson.loads(sse.data)
            if not data.get("choices"):
                if self.hide_usage:
                    continue  # the usage chunk the caller did not ask for
                out.append(encode("", sse.data))
                continue
            if self.hide_usage:
                data.pop("usage", None)
            if dropped_only and data["choices"][0].get("finish_reason") == "tool_calls":
                data["choices"][0]["finish_reason"] = "stop"
            out.append(encode("", orjson.dumps(data).decode()))
        return out


class ResponsesEditor(Editor):
    sequence: int = 0
    items: dict[int, Any] | None = None  # the caller's position -> the finished item
    first_id: str | None = None  # the response the caller sees, whatever the rounds

    def feed(self, sse: SSE) -> list[bytes]:
        data = orjson.loads(sse.data)
        if not isinstance(data, dict):
            return [encode(sse.event, sse.data)]
        kind = data.get("type", sse.event)
        if kind in ("response.completed", "response.incomplete"):
            self.held.append(sse)
            return []
        if self.round and kind in ("response.created", "response.in_progress"):
            return []
        if kind == "response.created" and self.first_id is None:
            self.first_id = (data.get("response") or {}).get("id")
        index = data.get("output_index")
        if kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") == "function_call" and item.get("name") == RECALL_TOOL:
                self.recall.append(str(index))
                return []
            self.own += item.get("type") == "function_call"
        if index is not None and str(index) in self.recall:
            return []
        if isinstance(index, int):
            data["output_index"] = self.place(index)
            if kind == "response.output_item.done":
                if self.items is None:
                    self.items = {}
                self.items[data["output_index"]] = data.get("item")
        if "sequence_number" in data:
            data["sequence_number"] = self.sequence
        self.sequence += 1
        return [encode(sse.event, orjson.dumps(data).decode())]

    def finish(self, *, dropped_only: bool) -> list[bytes]:
        out = []
        for sse in self.held:
            data = orjson.loads(sse.data)
            response = dict(data.get("response") or {})
            if self.items is not None:  # what the caller was shown, over every round, in its order
                response["output"] = [self.items[i] for i in sorted(self.items)]
            if self.first_id is not None:
                response["id"] = self.first_id
            data["response"] = response
            if "sequence_number" in data:
                data["sequence_number"] = self.sequence
            self.sequence += 1
            out.append(encode(sse.event, orjson.dumps(data).decode()))
        return out


class PassEditor(Editor):
    """`--passthrough`: every event as it came."""

    def feed(self, sse: SSE) -> list[bytes]:
        return [encode(sse.event, sse.data)]

    def finish(self, *, dropped_only: bool) -> list[bytes]:
        return []


def editor_for(api: Api, passthrough: bool = False) -> Editor:
    if passthrough:
        return PassEditor()
    if api.name == ANTHROPIC:
        return AnthropicEditor()
    if api.name == OPENAI_CHAT:
        return ChatEditor()
    return ResponsesEditor()


def error_event(api: Api, message: str, editor: Editor) -> bytes:
    if api.name == ANTHROPIC:
        return encode("error", orjson.dumps({"type": "error", "error": {"type": "api_error",
                                                                        "message": message}}).decode())
    if api.name == OPENAI_CHAT:
        return encode("", orjson.dumps({"error": {"message": message, "type": "server_error", "param": None,
                                                  "code": "upstream_stream_broken"}}).decode())
    sequence = getattr(editor, "sequence", 0)
    return encode("error", orjson.dumps({"type": "error", "code": "upstream_stream_broken", "message": message,
                                         "param": None, "sequence_number": sequence}).decode())


def is_error(sse: SSE) -> bool:
    """An upstream's error event (Anthropic and Responses `error`, Responses `response.failed`, a Chat
    chunk that is `{"error": ...}`)."""
    return sse.event in ("error", "response.failed") or (not sse.event and sse.data.lstrip().startswith('{"error"'))


def completion_of(api: Api, events: list[SSE]) -> Any:
    """The answer the events add up to, read by the provider clients' own stream parsers (None when
    the stream broke or was an error)."""
    try:
        for event in api.stream_events(iter(events)):
            if isinstance(event, Done):
                return event.completion
    except (ProviderError, ProxyError, ValueError, KeyError, TypeError):
        return None
    return None


__all__ = ["Editor", "completion_of", "editor_for", "encode", "error_event", "is_error"]
