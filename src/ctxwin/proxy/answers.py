"""How a turn's upstream answers reach the caller: `WholeAnswer` (one JSON body) or `StreamedAnswer`
(server-sent events relayed as they arrive, through the stream editor of `proxy.editors`), both
driven by `Turn.send`.

A streamed answer is served by `TurnResponse`, an ASGI response that runs the whole turn while it
streams: until the first event is relayed nothing has been sent, so an error before it (an overflow
that cannot be recovered, any other status, an unreachable upstream) is an ordinary response in the
API's shape; from the first event on, an upstream that breaks off, ends its stream before its
answer's end, sends an event that is not JSON or more than `max_body_bytes` gets the caller an
error event in its API's shape and the entry a 502. A caller that goes away mid-stream cancels the
upstream request (entry status 499); what was synced stays logged. The response holds the session's
lease until the stream ends, however it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any

import httpx
import orjson
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from ctxwin.errors import CtxwinError, ProxyError, SessionLockedError, UpstreamError
from ctxwin.providers.base import SSE, Completion

from .body import refuse_json
from .editors import ChatEditor, Editor, completion_of, editor_for, error_event, is_error
from .errors import error_response, refusal_response
from .exchange import Outgoing
from .turn import Turn, parse_answer
from .upstream import over_limit, response_headers

log = logging.getLogger("ctxwin.proxy")
NOT_JSON = "the upstream sent a stream event that is not the API's JSON"
CUT_SHORT = "the upstream's stream ended before its answer did"
STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def failure_response(api: str, error: BaseException) -> Response | None:
    """What the caller gets when serving its request raised `error` before its answer started: the
    proxy's refusal, or what went wrong in ctxwin, in the API's error shape (an SDK raises its own
    typed error), never a plain-text 500; None for what is not ours to answer."""
    if isinstance(error, ProxyError):
        return refusal_response(api, error)
    if isinstance(error, ClientDisconnect):
        return Response(status_code=499)
    if isinstance(error, RecursionError):  # a body nested deeper than a converter's recursion goes
        return refusal_response(api, refuse_json(error))
    if isinstance(error, OSError | sqlite3.OperationalError | SessionLockedError):
        # Out of file descriptors or disk, or the session busy elsewhere: passes, so the caller's retry.
        return error_response(api, 503, f"ctxwin proxy: cannot open or write the session now ({error}); "
                                        "try again shortly")
    if isinstance(error, CtxwinError):  # a session that cannot be opened or managed as configured
        return error_response(api, 500, f"ctxwin proxy: {error}")
    return None


class WholeAnswer:
    """A non-streamed answer: read whole, returned as the handler's `Response`."""

    streamed = False

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.raw = b""
        self.response: httpx.Response | None = None

    def accepts(self, response: httpx.Response) -> bool:
        return response.status_code < 400

    async def relay(self, response: httpx.Response) -> Completion | None:
        self.response = response
        self.raw = await self.turn.proxy.upstream.read(response, self.turn.exchange)
        return parse_answer(self.turn.api, self.raw)

    async def as_it_came(self, response: httpx.Response, raw: bytes) -> Response:
        return await self._end(raw, response)

    async def finish(self, completion: Completion | None, recall_dropped: bool) -> Response:
        assert self.response is not None
        data = orjson.dumps(self.turn.api.without_recall(orjson.loads(self.raw))) if recall_dropped else self.raw
        return await self._end(data, self.response)

    async def fail(self, refusal: ProxyError) -> Response:
        raise refusal  # answered in the API's shape by the handler's guard, the entry written on the way

    def next_round(self) -> None:
        pass

    async def _end(self, data: bytes, response: httpx.Response) -> Response:
        # Before the caller has its answer: an answer that reached its caller has its entry (and the
        # calibration from its usage) committed, even if the worker dies the moment after.
        self.turn.exchange.ended = time.perf_counter()
        await self.turn.conclude()
        return Response(data, response.status_code, response_headers(response))


class StreamedAnswer:
    """A streamed answer, written to the caller's ASGI `send` as the upstream's events arrive."""

    streamed = True

    def __init__(self, turn: Turn, scope: Scope, receive: Receive, send: Send) -> None:
        self.turn = turn
        self.scope, self.receive, self.send = scope, receive, send
        passthrough = turn.proxy.config.passthrough or turn.conversation.untouched
        self.editor: Editor = editor_for(turn.api, passthrough)
        if isinstance(self.editor, ChatEditor):
            self.editor.hide_usage = turn.conversation.usage_hidden
        self.started = False  # the caller's response has begun (its status and headers are out)
        self.ended = False  # ... and its last event too
        self.whole = False  # it was one ordinary response (an error before the stream)

    def accepts(self, response: httpx.Response) -> bool:
        return response.status_code < 400 and response.headers.get("content-type", "").startswith("text/event-stream")

    async def relay(self, response: httpx.Response) -> Completion | None:
        if not self.started:
            await self._start(200, {**response_headers(response), **STREAM_HEADERS})
        exchange, limit = self.turn.exchange, self.turn.proxy.upstream.limit
        events: list[SSE] = []
        kept = 0  # what this answer's events hold (read for its usage and calls once it ends)
        try:
            async with contextlib.aclosing(self.turn.proxy.upstream.events(response, exchange)) as source:
                async for sse in source:
                    events.append(sse)
                    kept += len(sse.data)
                    if kept > limit:
                        raise over_limit(limit, "streamed answer")
                    for chunk in self.editor.feed(sse):
                        await self._write(chunk)
        except (ValueError, KeyError, TypeError, AttributeError):  # orjson.JSONDecodeError is a ValueError
            raise UpstreamError(502, NOT_JSON) from None
        completion: Completion | None = completion_of(self.turn.api, events)
        if completion is None and any(is_error(sse) for sse in events):
            exchange.status = 502  # the caller got the upstream's error event: not a success
        elif completion is None:
            # The HTTP stream ended (cleanly, or a close-delimited one cut) before the answer's own end:
            # half an answer must not pass for a whole one, to the caller or in the entry.
            raise UpstreamError(502, CUT_SHORT, "try again")
        return completion

    async def as_it_came(self, response: httpx.Response, raw: bytes) -> None:
        if not self.started:
            await self.turn.conclude()
            await self.whole_response(Response(raw, response.status_code, response_headers(response)))
            return
        await self.error(f"the upstream refused the request after a recall (HTTP {response.status_code})")

    async def finish(self, completion: Completion | None, recall_dropped: bool) -> None:
        try:
            chunks = self.editor.finish(dropped_only=bool(self.editor.recall) and not self.editor.own)
        except (ValueError, KeyError, TypeError, AttributeError):
            self.turn.exchange.status = 502
            await self.error(NOT_JSON)
            return
        await self.turn.conclude()
        for chunk in chunks:
            await self._write(chunk)
        self.ended = True

    async def fail(self, refusal: ProxyError) -> None:
        if not self.started:
            await self.turn.conclude()
            await self.whole_response(refusal_response(self.turn.api.name, refusal))
            return
        await self.error(refusal.message)

    def next_round(self) -> None:
        self.editor.next_round()

    async def error(self, message: str) -> None:
        await self.turn.conclude()
        await self._write(error_event(self.turn.api, message, self.editor))
        self.ended = True

    async def _start(self, status: int, headers: Mapping[str, str]) -> None:
        self.started = True
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        await self.send({"type": "http.response.start", "status": status, "headers": raw})

    async def _write(self, chunk: bytes) -> None:
        await self.send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def whole_response(self, response: Response) -> None:
        self.started = self.ended = self.whole = True
        await response(self.scope, self.receive, self.send)


class TurnResponse(Response):
    """The response of a streamed turn: runs `Turn.send` with a `StreamedAnswer` (see the module
    docstring) and owns the session's lease until the answer ends, however it ends."""

    def __init__(self, turn: Turn, outgoing: Outgoing, lease: AsyncExitStack) -> None:
        # Not Response.__init__: what this answers is known only once the upstream answered.
        self.status_code = 200
        self.background = None
        self.turn, self.outgoing, self.lease = turn, outgoing, lease

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = StreamedAnswer(self.turn, scope, receive, send)
        finished = False
        try:
            finished = await _until_gone(self.turn.send(answer, self.outgoing), receive)
        except Exception as error:  # answered in the API's shape, or raised again
            finished = True
            await self._failed(answer, error)
        finally:
            try:
                if not self.turn.noted:
                    if not finished:
                        self.turn.exchange.status = 499  # the caller went away
                    await self.turn.conclude()
            finally:
                await self.lease.aclose()
        if answer.started and not answer.whole:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _failed(self, answer: StreamedAnswer, error: Exception) -> None:
        """What went wrong outside the upstream's answer (the engine, the store): in the API's shape."""
        api = self.turn.api.name
        if not answer.started:
            response = failure_response(api, error)
            if response is None:
                raise error
            if isinstance(error, ProxyError):
                self.turn.exchange.status = error.status
            await self.turn.conclude()
            await answer.whole_response(response)
            return
        if not isinstance(error, CtxwinError):
            log.exception("serving a streamed answer failed")  # a bug: the caller gets an error event
        self.turn.exchange.status = error.status if isinstance(error, ProxyError) else 500
        await answer.error(f"ctxwin proxy: {error}")


async def _until_gone(work: Any, receive: Receive) -> bool:
    """Runs `work` until it ends (True) or the caller goes away (False: `work` is cancelled, which
    stops reading the upstream)."""
    pump = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(receive))
    try:
        done, _ = await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
        if pump not in done:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await pump
            return False
        pump.result()
        return True
    finally:
        gone.cancel()


async def _disconnected(receive: Callable[[], Any]) -> None:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return


__all__ = ["StreamedAnswer", "TurnResponse", "WholeAnswer", "failure_response"]
