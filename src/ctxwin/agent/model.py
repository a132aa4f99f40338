"""What the loop calls a model through: `Model.send(prepared, ...)` takes the engine's prepared request
and returns a `Completion`. `HttpModel` wraps ctxwin's provider clients (Anthropic Messages, OpenAI
Chat, OpenAI Responses: tools, streaming, retries, cancellation are theirs); `FunctionModel` wraps a
plain function (a scripted agent running in-process).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ctxwin.engine import Prepared
from ctxwin.messages import Message
from ctxwin.providers import AnthropicClient, Completion, OpenAIChatClient, OpenAIResponsesClient, Retrying, Stream

CACHE_MARK = {"type": "ephemeral"}  # Anthropic's prompt-cache breakpoint
Client = AnthropicClient | OpenAIChatClient | OpenAIResponsesClient
Notify = Callable[[str, dict[str, Any]], None]  # (event kind, data): deltas and retries, for the loop


class Model(Protocol):
    """One model call for the loop. `model` names the model (a fork must keep it). `cache_marks`:
    indexes of messages of `prepared` that also get a prompt-cache breakpoint (Anthropic; the last
    message always has one). `notify` receives `retry` and `delta` events."""

    model: str

    def send(self, prepared: Prepared, *, max_tokens: int, cache_marks: tuple[int, ...] = (),
             cancel: threading.Event | None = None, notify: Notify | None = None) -> Completion: ...


@dataclass
class FunctionModel:
    """A model that is a Python function of the prepared request (a scripted agent)."""

    respond: Callable[[Prepared], Completion]
    model: str = "scripted"

    def send(self, prepared: Prepared, *, max_tokens: int, cache_marks: tuple[int, ...] = (),
             cancel: threading.Event | None = None, notify: Notify | None = None) -> Completion:
        return self.respond(prepared)


class HttpModel:
    """A model behind one of ctxwin's provider clients; `stream` picks streamed calls (the same
    `Completion` either way, usage from the stream)."""

    def __init__(self, client: Client, *, stream: bool = False) -> None:
        self.client = client
        self.model = client.model
        self.stream = stream
        self._local = threading.local()  # the notify of the call running on this thread
        previous = client.on_retry

        def on_retry(notice: Retrying) -> None:
            notify = getattr(self._local, "notify", None)
            if notify is not None:
                notify("retry", {"attempt": notice.attempt, "delay_s": round(notice.delay, 3), "error": notice.error})
            if previous is not None:
                previous(notice)

        client.on_retry = on_retry

    def send(self, prepared: Prepared, *, max_tokens: int, cache_marks: tuple[int, ...] = (),
             cancel: threading.Event | None = None, notify: Notify | None = None) -> Completion:
        messages = prepared.messages
        if isinstance(self.client, AnthropicClient):
            messages = with_cache_marks(messages, cache_marks)
        options: dict[str, Any] = {"system": prepared.system or None, "max_tokens": max_tokens,
                                   "tools": prepared.tools or None, "cancel": cancel}
        if self.stream:
            return self._call(lambda: _drain(self.client.stream(messages, **options), notify), notify)
        return self._call(lambda: self.client.complete(messages, **options), notify)

    def _call(self, call: Callable[[], Completion], notify: Notify | None) -> Completion:
        self._local.notify = notify
        try:
            return call()
        finally:
            self._local.notify = None

    def close(self) -> None:
        self.client.close()


def _drain(stream: Stream, notify: Notify | None) -> Completion:
    """Read a stream to its end (the client stops it when the cancel event is set), passing text on."""
    from ctxwin.providers import TextDelta

    with stream:
        for event in stream:
            if notify is not None and isinstance(event, TextDelta):  # (retries come through on_retry)
                notify("delta", {"text": event.text})
        if stream.completion is None:
            raise RuntimeError("the stream ended without a completion")
        return stream.completion


def with_cache_marks(messages: list[Message], marks: tuple[int, ...]) -> list[Message]:
    """A copy of `messages` with an Anthropic cache breakpoint on the last block of the last message
    and of each message in `marks` (Anthropic caches only where asked; the log is not touched)."""
    out = list(messages)
    for index in {*(m for m in marks if 0 <= m < len(out)), len(out) - 1}:
        if index < 0 or not out[index].blocks:
            continue
        message = out[index]
        last = message.blocks[-1]
        extra = dict(last.extra)
        extra["anthropic"] = {**dict(extra.get("anthropic") or {}), "cache_control": CACHE_MARK}
        out[index] = replace(message, blocks=(*message.blocks[:-1], replace(last, extra=extra)), _key=None)
    return out
