"""The model-client interface: what one call returns (`Completion`, `Usage`), the tools a call may
offer, the typed events of a streamed call and the `Stream` that carries them, and the `ModelClient` /
`StreamingClient` protocols summarizers and the agent loop talk to. Plain data: no HTTP here."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

from ctxwin.messages import Message, ToolCall
from ctxwin.messages.tools import ToolSchema


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage a provider reported for one call."""

    input_tokens: int
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def context_tokens(self) -> int:
        """Everything the model read: fresh input plus cache reads and writes (`input_tokens` counts only
        the uncached part, as Anthropic reports it; the OpenAI clients subtract cached tokens to match)."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass(frozen=True, slots=True)
class Completion:
    message: Message  # the assistant message the model returned
    usage: Usage | None = None
    stop_reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    retries: int = 0  # failed attempts before this answer (each also reported as `Retrying`)

    @property
    def text(self) -> str:
        return self.message.text

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self.message.tool_calls


# --------------------------------------------------------------------------------------------------
# Tools, for the clients that send them


ToolDef = ToolSchema  # a tool the model may call (name, description, JSON Schema of its arguments)


ToolChoice: TypeAlias = str  # "auto", "none", "required" (any tool), or a tool's name
Tools: TypeAlias = Sequence[ToolDef | Mapping[str, Any]] | None  # what a call's `tools=` takes


# --------------------------------------------------------------------------------------------------
# Stream events


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    index: int  # the call's position among this answer's tool calls
    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    index: int
    arguments: str  # the next piece of the arguments' JSON text


@dataclass(frozen=True, slots=True)
class UsageReported:
    usage: Usage  # the numbers so far (input at the start of an Anthropic stream, all of it at the end)


@dataclass(frozen=True, slots=True)
class Retrying:
    """The request failed before anything was streamed and is tried again after `delay` seconds."""

    attempt: int  # the attempt that failed, 1-based
    delay: float
    error: str


@dataclass(frozen=True, slots=True)
class Done:
    completion: Completion


CONTENT_EVENTS = (TextDelta, ThinkingDelta, ToolCallStarted, ToolCallDelta)  # once one is out, no retry
StreamEvent: TypeAlias = TextDelta | ThinkingDelta | ToolCallStarted | ToolCallDelta | UsageReported | Retrying | Done


@dataclass(frozen=True, slots=True)
class SSE:
    """One server-sent event as it came: its `event:` name ("" when none) and its `data:` text."""

    event: str
    data: str

    def json(self) -> Any:
        return json.loads(self.data)


class Stream:
    """The typed events of one streamed model call, ending with `Done`; `completion` is set once the
    stream is finished. Iterate it (or call `until_done()`); close it (or use `with`) to stop early."""

    def __init__(self, events: Iterator[StreamEvent]) -> None:
        self._events = events
        self.completion: Completion | None = None

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __next__(self) -> StreamEvent:
        event = next(self._events)
        if isinstance(event, Done):
            self.completion = event.completion
        return event

    def until_done(self) -> Completion:
        for _ in self:
            pass
        if self.completion is None:  # an event source that ends without Done is a bug of the parser
            raise RuntimeError("the stream ended without a completion")
        return self.completion

    def close(self) -> None:
        close = getattr(self._events, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------------
# Protocols


class ModelClient(Protocol):
    """One model call. Raises `ProviderError` when the provider answers with an error;
    `ctxwin.providers.overflow.is_overflow_error` recognises overflow errors."""

    model: str

    def complete(self, messages: list[Message], *, system: str | None = None, max_tokens: int = 4096,
                 timeout: float | None = None) -> Completion: ...


class StreamingClient(ModelClient, Protocol):
    """What an agent lives on: calls with tools, streamed or not, cancellable."""

    def complete(self, messages: list[Message], *, system: str | None = None, max_tokens: int = 4096,
                 timeout: float | None = None, tools: Tools = None, tool_choice: ToolChoice | None = None,
                 cancel: threading.Event | None = None) -> Completion: ...

    def stream(self, messages: Sequence[Message], *, system: str | None = None, max_tokens: int = 4096,
               tools: Tools = None, tool_choice: ToolChoice | None = None, timeout: float | None = None,
               cancel: threading.Event | None = None) -> Stream: ...
