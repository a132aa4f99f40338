"""Streamed answers, relayed to the caller event by event as they arrive.

Each upstream event goes out as soon as it is read, unchanged, except where the proxy's own tool
shows: the blocks of a `ctxwin_recall` call are dropped (the agent never sees that tool), and the
positions after them are renumbered so the caller's SDK sees contiguous indexes. Only the *end* of
an answer is held back: Anthropic's `message_delta` and `message_stop`, Chat's finish chunk, usage
chunk and `[DONE]`, Responses' `response.completed`. That is what must be buffered: only when the
answer ends is it known whether it asked for recall alone, and then the proxy answers the calls,
calls the upstream again and goes on relaying the next answer's content into the *same* message for
the caller, whose end is then the last answer's end. Nothing else waits.

A response that mixes recall calls with the agent's own calls goes to the agent as its own: its
calls were already relayed as they arrived, the recall calls are dropped unanswered (the tool's
description tells the model to call it alone), and the model can ask again on its next turn. The
non-streamed path decides the same way.

Errors before the first byte (an overflow) are recovered and retried as in the non-streamed path.
An upstream that breaks off mid-stream, sends an event that is not JSON, or a line or event over
`max_body_bytes`, gets the caller an error event in its API's shape and the entry a 502. The
request's entry is committed just before the held-back end (or that error event) goes out, so a
caller that has its whole answer has its entry, even if the worker dies the moment after. A caller
that goes away mid-stream cancels the upstream request (entry status 499); what was synced stays
logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ctxwin.engine import ContextEngine
from ctxwin.errors import ProviderError, ProxyRefusal
from ctxwin.providers.base import SSE, Done

from . import recall as recall_tool
from .apis import RECALL_TOOL, Api
from .errors import ANTHROPIC, OPENAI_CHAT
from .exchange import Exchange, Memo, Outgoing, compactions, recall_round, recover, response_headers

if TYPE_CHECKING:
    from .apis import Conversation
    from .app import Proxy
    from .body import Body


# ---------------------------------------------------------------------------------------------- SSE


def encode(event: str, data: str) -> bytes:
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return (f"event: {event}\n{lines}\n" if event else f"{lines}\n").encode()


async def sse_events(response: httpx.Response, timing: Exchange, limit: int) -> AsyncIterator[SSE]:
    """The server-sent events of an upstream answer as they arrive (`event` "" when the server named
    none, which Chat's chunks never do); the time spent waiting for them counts as upstream time.
    A line or an event over `limit` bytes is a 502 `ProxyRefusal`: an upstream cannot make the
    proxy buffer without bound."""
    chunks = response.aiter_bytes()
    pending = b""
    event, data, size = "", [], 0
    while True:
        started = time.perf_counter()
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            break
        finally:
            timing.upstream_s += time.perf_counter() - started
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > limit:
            raise _too_large(limit)
        for raw in lines:
            line = raw.removesuffix(b"\r").decode("utf-8", "replace")
            if not line:
                if data:
                    yield SSE(event, "\n".join(data))
                event, data, size = "", [], 0
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
                size += len(raw)
                if size > limit:
                    raise _too_large(limit)
            elif line.startswith("event:"):
                event = line[6:].strip()
    if pending.strip():
        line = pending.removesuffix(b"\r").decode("utf-8", "replace")
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield SSE(event, "\n".join(data))


def _too_large(limit: int) -> ProxyRefusal:
    return ProxyRefusal(502, f"the upstream sent a stream event over the proxy's limit of {limit:,} bytes",
                        "raise --max-body-bytes if the provider really sends events that large")


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


# ---------------------------------------------------------------------------------------------- the relay


class RelayResponse(Response):
    """A streamed answer that owns the session's lease until the stream ends, however it ends
    (finished, upstream broken, caller gone), and then writes the request's entry."""

    def __init__(self, run: Any, headers: Mapping[str, str], release: Any) -> None:
        # Not Response.__init__: that would declare a content-length for an empty body.
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.init_headers({**headers, "cache-control": "no-cache", "x-accel-buffering": "no"})
        self._run = run
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pump: asyncio.Future[None] | None = None
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            pump = asyncio.ensure_future(self._run(send))
            gone = asyncio.ensure_future(_disconnected(receive))
            try:
                done, _ = await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
                if pump not in done:  # the caller went away: stop reading the upstream
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError, OSError):
                        await pump
                else:
                    pump.result()
            finally:
                gone.cancel()
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await self._release(pump is not None and pump.done() and not pump.cancelled())


async def _disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def relay(proxy: Proxy, api: Api, request: Request, engine: ContextEngine, body: Body,
                conversation: Conversation, memo: Memo, outgoing: Outgoing, exchange: Exchange,
                lease: AsyncExitStack) -> Response:
    """The caller's streamed answer. The first upstream answer is opened here, so an error before the
    stream (an overflow, recovered and retried; any other status, relayed as it came) is an ordinary
    response; from the first event on, the `RelayResponse` holds the lease."""
    editor = editor_for(api, proxy.config.passthrough or conversation.untouched)
    if isinstance(editor, ChatEditor):
        editor.hide_usage = conversation.usage_hidden
    opened = await open_stream(proxy, api, request, engine, body, conversation, memo, outgoing, exchange, editor)
    if isinstance(opened, Response):
        return opened
    upstream, outgoing = opened

    noted = False

    async def run(send: Send) -> None:
        nonlocal upstream, outgoing, noted

        async def end(chunks: list[bytes], status: int | None = None) -> None:
            # The request's entry is committed before the caller's last events go out: a caller that
            # has its answer (message_stop, [DONE], response.completed, or the error) has its entry.
            nonlocal noted
            if status is not None:
                exchange.status = status
            noted = True
            await proxy.run(exchange.note, engine)
            for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})

        limit = proxy.config.max_body_bytes
        while True:
            events: list[SSE] = []
            kept = 0  # what this answer's events hold (read for its usage and calls once it ends)
            try:
                async for sse in sse_events(upstream, exchange, limit):
                    events.append(sse)
                    kept += len(sse.data)
                    if kept > limit:
                        raise ProxyRefusal(502, f"the upstream's streamed answer is over the proxy's limit of "
                                                f"{limit:,} bytes",
                                           "raise --max-body-bytes if the provider really sends answers that large")
                    for chunk in editor.feed(sse):
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except httpx.HTTPError as error:
                await end([error_event(api, f"the upstream broke off its answer: {type(error).__name__}", editor)],
                          502)
                return
            except ProxyRefusal as refusal:
                await end([error_event(api, refusal.message, editor)], refusal.status)
                return
            except (ValueError, KeyError, TypeError, AttributeError):  # orjson.JSONDecodeError is a ValueError
                await end([error_event(api, "the upstream sent a stream event that is not the API's JSON",
                                       editor)], 502)
                return
            finally:
                await upstream.aclose()
            completion = _completion(api, events)
            if completion is None and any(_is_error(sse) for sse in events):
                exchange.status = 502  # the caller got the upstream's error event: not a success
            if completion is not None and completion.usage is not None:
                exchange.usage = completion.usage
                engine.record_usage(completion.usage)
            calls = [c for c in (completion.tool_calls if completion is not None else ()) if c.name == RECALL_TOOL]
            if completion is None or not calls or editor.own or editor.round >= recall_tool.MAX_ROUNDS:
                dropped_only = bool(editor.recall) and not editor.own
                try:
                    chunks = editor.finish(dropped_only=dropped_only)
                except (ValueError, KeyError, TypeError, AttributeError):
                    await end([error_event(api, "the upstream sent a stream event that is not the API's JSON",
                                           editor)], 502)
                    return
                await end(chunks)
                return
            exchange.recall_calls += len(calls)
            last = editor.round >= recall_tool.MAX_ROUNDS - 1
            outgoing = await proxy.run(recall_round, proxy, engine, api, body, conversation, memo, completion, calls,
                                       last)
            editor.next_round()
            opened = await open_stream(proxy, api, request, engine, body, conversation, memo, outgoing, exchange,
                                       editor)
            if isinstance(opened, Response):
                await end([error_event(
                    api, f"the upstream refused the request after a recall (HTTP {opened.status_code})", editor)])
                return
            upstream, outgoing = opened

    async def release(finished: bool) -> None:
        try:
            if not noted:
                if not finished:
                    exchange.status = 499  # the caller went away mid-stream
                await proxy.run(exchange.note, engine)
        finally:
            await lease.aclose()

    return RelayResponse(run, response_headers(upstream), release)


async def open_stream(proxy: Proxy, api: Api, request: Request, engine: ContextEngine, body: Body,
                      conversation: Conversation, memo: Memo, outgoing: Outgoing, exchange: Exchange,
                      editor: Editor) -> tuple[httpx.Response, Outgoing] | Response:
    """An upstream answer that is streaming (status 200), after overflow recoveries; else the
    error response to give the caller."""
    while True:
        exchange.tokens_forwarded += outgoing.tokens
        exchange.compactions += compactions(outgoing.prepared) if outgoing.prepared is not None else 0
        response = await proxy.send(request, outgoing.body, exchange, stream=True, memo=memo)
        exchange.status = response.status_code
        if response.status_code < 400:
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                return response, outgoing
            raw = await proxy.read(response, exchange)  # a server that ignored stream=true
            return Response(raw, response.status_code, response_headers(response))
        raw = await proxy.read(response, exchange)
        retry = await recover(proxy, api, engine, body, conversation, memo, response, raw, exchange)
        if retry is None:
            return Response(raw, response.status_code, response_headers(response))
        outgoing = retry


def _is_error(sse: SSE) -> bool:
    """An upstream's error event (Anthropic and Responses `error`, Responses `response.failed`, a Chat
    chunk that is `{"error": ...}`)."""
    return sse.event in ("error", "response.failed") or (not sse.event and sse.data.lstrip().startswith('{"error"'))


def _completion(api: Api, events: list[SSE]) -> Any:
    """The answer the events add up to, read by the provider clients' own stream parsers (None when
    the stream broke or was an error)."""
    try:
        for event in api.stream_events(iter(events)):
            if isinstance(event, Done):
                return event.completion
    except (ProviderError, ProxyRefusal, ValueError, KeyError, TypeError):
        return None
    return None


__all__ = ["RelayResponse", "relay"]
