"""The model-client interface and what the httpx clients share. ctxwin's core never imports a provider
SDK: summarizers and the agent loop talk to a `ModelClient` (one call) or a `StreamingClient` (calls
with tools, streamed or not), and the httpx clients for the Anthropic- and OpenAI-compatible APIs
implement both.

What every client does the same way lives here: one request with retries (exponential backoff with
jitter on 429, 5xx and "overloaded", honouring `retry-after-ms` / `retry-after`, bounded), timeouts,
cancellation (an event that aborts the request, the stream or the wait before a retry), the typed
stream events, and the `ProviderError` every HTTP error and every malformed answer becomes.

(Long on purpose: the data types, the stream events, retries and the shared HTTP client of three
APIs' clients, which the client modules only specialize.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import email.utils
import json
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

import httpx

from ctxwin.errors import CtxwinError, InputError, ModelCallCancelled, ProviderError
from ctxwin.messages import Message, ToolCall
from ctxwin.messages.tools import ToolSchema

DEFAULT_TIMEOUT = 120.0  # seconds for connecting and for each read when neither the client nor the call says
CANCEL_POLL_SECONDS = 0.05  # how often a blocked read checks its cancel event
MALFORMED = (CtxwinError, ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError)


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


def token_count(usage: Mapping[str, Any], key: str) -> int:
    """A token count from a usage object: absent or null is 0; anything but a non-negative integer is a
    malformed answer (ValueError, turned into `ProviderError` by the parsers)."""
    value = usage.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value != int(value):
        raise ValueError(f"usage.{key} is {value!r}, not a token count")
    return int(value)


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


# --------------------------------------------------------------------------------------------------
# Retries


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed call is tried again: on a retryable `ProviderError` (429, 5xx, 529, "overloaded")
    or a connection that failed before any answer, at most `attempts` tries in all. The wait is the
    server's `retry-after-ms` / `retry-after` when it gives one, else `base_delay * 2**n` capped at
    `max_delay`, with jitter (half of it random) so that many clients do not retry in step. A server
    asking for more than `max_retry_after` seconds is not waited for: its error is raised."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float | None:
        """Seconds to wait before attempt `attempt + 1` (attempt is 1-based), or None: do not retry."""
        if attempt >= self.attempts:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return ceiling / 2 + rng.random() * ceiling / 2


NO_RETRY = RetryPolicy(attempts=1)


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The wait a response asks for: `retry-after-ms` (OpenAI, Anthropic), else `retry-after` in seconds
    or as an HTTP date. Negative or unreadable values are ignored."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for key, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lowered.get(key)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(value) if key == "retry-after" else None
            if parsed is None:
                continue
            seconds = parsed.timestamp() - (time.time() if now is None else now)
        if seconds >= 0 and seconds == seconds:  # not NaN
            return seconds
    return None


# --------------------------------------------------------------------------------------------------
# Errors from responses


def provider_error(response: httpx.Response, provider: str) -> ProviderError:
    """The `ProviderError` for an HTTP error response: the parsed body when it is JSON, the provider's
    own message when it gives one, and the wait it asks for."""
    try:
        text = response.text
    except (UnicodeDecodeError, LookupError):
        text = response.content.decode("utf-8", "replace")
    try:
        body: Any = json.loads(text) if text else text
    except (ValueError, RecursionError):
        body = text
    message = _error_message(body) or text.strip()[:2000] or \
        f"{response.status_code} {response.reason_phrase} (no body)"
    return ProviderError(response.status_code, body, message, provider, retry_after_seconds(response.headers))


def malformed(provider: str, status: int, body: Any, problem: str | BaseException) -> ProviderError:
    """A `ProviderError` for an answer that is not what the API documents."""
    detail = f"{type(problem).__name__}: {problem}" if isinstance(problem, BaseException) else problem
    return ProviderError(status, body, f"malformed response ({detail})", provider)


def text_field(value: Any, what: str) -> str:
    """A field an API documents as a string; anything else is a malformed answer (ValueError, turned
    into `ProviderError` by the parsers)."""
    if not isinstance(value, str):
        raise ValueError(f"{what} is {type(value).__name__}, not a string")
    return value


@contextlib.contextmanager
def malformed_inside(provider: str, body: Mapping[str, Any] | None) -> Iterator[None]:
    """Anything that goes wrong reading `body` (wrong types, missing fields) becomes the `ProviderError`
    of a malformed answer carrying it; a `ProviderError` raised inside passes as it is."""
    try:
        yield
    except ProviderError:
        raise
    except MALFORMED as problem:
        raise malformed(provider, 200, None if body is None else dict(body), problem) from None


def guarded_events(provider: str, events: Iterator[StreamEvent]) -> Iterator[StreamEvent]:
    """`events`, with anything in the stream that is not what the API documents turned into a
    `ProviderError` (wherever the parser trips over it, the final assembly included)."""
    with malformed_inside(provider, None):
        yield from events


def guarded_parse(provider: str, data: Any, parse: Callable[[Mapping[str, Any]], Completion]) -> Completion:
    """`parse(data)`, with anything that is not what the API documents (not an object, wrong types,
    missing fields) turned into a `ProviderError` carrying the answer."""
    if not isinstance(data, Mapping):
        raise malformed(provider, 200, data, "the answer is not a JSON object")
    with malformed_inside(provider, data):
        return parse(data)


def object_list(provider: str, data: Mapping[str, Any], key: str, what: str) -> list[Mapping[str, Any]]:
    """`data[key]` where the API documents a list of JSON objects (absent or null: none); anything else
    is a malformed answer."""
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise malformed(provider, 200, dict(data), f"{key} is not a list of {what}")
    return value


def event_json(provider: str, sse: SSE) -> Mapping[str, Any]:
    """The JSON object one server-sent event carries; anything else is a malformed stream."""
    try:
        data = sse.json()
    except (ValueError, RecursionError) as problem:
        raise malformed(provider, 200, sse.data, problem) from None
    if not isinstance(data, Mapping):
        raise malformed(provider, 200, data, "an event that is not a JSON object")
    return data


def stream_error(provider: str, body: Mapping[str, Any]) -> ProviderError:
    """A `ProviderError` for an error event inside a stream, with the status its type stands for."""
    kind = _error_type(body)
    status = {"overloaded_error": 529, "rate_limit_error": 429, "api_error": 500, "server_error": 500,
              "rate_limit_exceeded": 429, "invalid_request_error": 400, "authentication_error": 401,
              "permission_error": 403, "not_found_error": 404, "request_too_large": 413}.get(kind or "", 500)
    return ProviderError(status, dict(body), _error_message(body) or "error event in the stream", provider)


def _error_type(body: Any) -> str | None:
    if not isinstance(body, Mapping):
        return None
    error = body.get("error")
    if isinstance(error, Mapping):
        for key in ("type", "code"):
            if isinstance(error.get(key), str):
                return error[key]
    code = body.get("code")
    return code if isinstance(code, str) else None


def _error_message(body: Any) -> str | None:
    """The message field of the error shapes providers use: {"error": {"message"}} (OpenAI, Anthropic,
    Gemini), {"error": "..."} (Ollama, LM Studio, xAI), {"message": ...} (Bedrock, Cohere), {"detail"}."""
    if not isinstance(body, Mapping):
        return None
    error = body.get("error")
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return error["message"]
    for value in (error, body.get("message"), body.get("detail")):
        if isinstance(value, str) and value:
            return value
    return None


def post_json(
    http: httpx.Client,
    url: str,
    payload: Mapping[str, Any],
    *,
    headers: Mapping[str, str],
    timeout: float,
    provider: str,
) -> dict[str, Any]:
    """POST `payload` as JSON once and return the JSON object answered, for JSON APIs beside the model
    clients (embeddings); an HTTP error status or an answer that is not a JSON object raises
    `ProviderError`. Transport failures propagate as httpx exceptions."""
    response = http.post(url, json=payload, headers=dict(headers), timeout=timeout)
    return _json_object(response, provider)


def _json_object(response: httpx.Response, provider: str) -> dict[str, Any]:
    if response.status_code >= 400:
        raise provider_error(response, provider)
    try:
        data = json.loads(response.content)
    except (ValueError, RecursionError):
        raise ProviderError(response.status_code, response.text, "the response is not JSON", provider) from None
    if not isinstance(data, dict):
        raise ProviderError(response.status_code, data, "the response is not a JSON object", provider)
    return data


# --------------------------------------------------------------------------------------------------
# The shared client


class HttpClient:
    """What every httpx model client shares: where it posts, with which key (from the environment when
    none is given) and extra headers and body fields, its timeout, its retry policy, and the connection
    pool it owns (or was given, and then leaves open). The key is never logged or shown in `repr`."""

    provider = ""
    key_env = ""  # the environment variable the key comes from when none is given
    default_base_url = ""
    default_model = ""
    path = ""  # where `complete` and `stream` post, after the base URL

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        http_client: httpx.Client | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy = NO_RETRY,
        on_retry: Callable[[Retrying], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.base_url = (self.default_base_url if base_url is None else base_url).rstrip("/")
        self.api_key = api_key if api_key is not None else (os.environ.get(self.key_env) if self.key_env else None)
        self.model = self.default_model if model is None else model
        self.headers = dict(headers or {})
        self.extra_body = dict(extra_body or {})
        self.timeout = timeout
        self.retry = retry
        self.on_retry = on_retry
        self._rng = rng or random.Random()
        self._own_http = http_client is None
        self._http = http_client or httpx.Client()

    def __repr__(self) -> str:
        key = "set" if self.api_key else "none"
        return f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, api_key={key})"

    @property
    def url(self) -> str:
        return self.base_url + self.path

    def request_headers(self) -> dict[str, str]:
        raise NotImplementedError

    def build_request(self, messages: Sequence[Message], *, system: str | None = None, max_tokens: int | None = 4096,
                      tools: Tools = None, tool_choice: ToolChoice | None = None,
                      stream: bool = False) -> dict[str, Any]:
        """The JSON body of one call in the API's shape."""
        raise NotImplementedError

    def parse(self, data: Mapping[str, Any]) -> Completion:
        """A whole JSON answer as a `Completion`."""
        raise NotImplementedError

    def stream_events(self, source: Iterator[SSE]) -> Iterator[StreamEvent]:
        """The server-sent events of a streamed answer as typed events, ending with `Done`."""
        raise NotImplementedError

    def complete(self, messages: Sequence[Message], *, system: str | None = None, max_tokens: int = 4096,
                 timeout: float | None = None, tools: Tools = None, tool_choice: ToolChoice | None = None,
                 cancel: threading.Event | None = None) -> Completion:
        payload = self.build_request(messages, system=system, max_tokens=max_tokens, tools=tools,
                                     tool_choice=tool_choice)
        return self._complete(self.url, payload, timeout, cancel, self.parse)

    def stream(self, messages: Sequence[Message], *, system: str | None = None, max_tokens: int = 4096,
               tools: Tools = None, tool_choice: ToolChoice | None = None, timeout: float | None = None,
               cancel: threading.Event | None = None) -> Stream:
        payload = self.build_request(messages, system=system, max_tokens=max_tokens, tools=tools,
                                     tool_choice=tool_choice, stream=True)
        return Stream(self._stream_from(self.url, payload, timeout, cancel, self.stream_events, self.parse))

    def _post_to(self, url: str, payload: Mapping[str, Any], timeout: float | None,
                 cancel: threading.Event | None = None) -> dict[str, Any]:
        """One JSON call with retries; the answer as a JSON object."""
        return self._call(url, payload, timeout, cancel)[0]

    def _complete(self, url: str, payload: Mapping[str, Any], timeout: float | None,
                  cancel: threading.Event | None, parse: Callable[[Mapping[str, Any]], Completion]) -> Completion:
        """One model call with retries, parsed, with the number of retries it took."""
        data, retries = self._call(url, payload, timeout, cancel)
        return dataclasses.replace(parse(data), retries=retries)

    def _call(self, url: str, payload: Mapping[str, Any], timeout: float | None,
              cancel: threading.Event | None) -> tuple[dict[str, Any], int]:
        attempt = 0
        while True:
            attempt += 1
            _check_cancel(cancel)
            try:
                with self._open(url, payload, timeout, cancel) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise provider_error(response, self.provider)
                    response.read()
                    return _json_object(response, self.provider), attempt - 1
            except (ProviderError, httpx.ConnectError, httpx.RemoteProtocolError) as error:
                self._wait_to_retry(error, attempt, cancel)

    def _stream_from(self, url: str, payload: Mapping[str, Any], timeout: float | None,
                     cancel: threading.Event | None, parse: Callable[[Iterator[SSE]], Iterator[StreamEvent]],
                     parse_whole: Callable[[Mapping[str, Any]], Completion]) -> Iterator[StreamEvent]:
        """The events of one streamed call, with retries while no content has been yielded yet. `parse`
        turns the server-sent events into stream events ending with `Done`; `parse_whole` reads the
        JSON answer of a server that ignored `stream: true`."""
        from httpx_sse import EventSource, SSEError

        attempt = 0
        while True:
            attempt += 1
            _check_cancel(cancel)
            yielded = False
            try:
                with self._open(url, payload, timeout, cancel) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise provider_error(response, self.provider)
                    if not response.headers.get("content-type", "").startswith("text/event-stream"):
                        response.read()  # a server that ignored stream=true: its JSON answer
                        completion = dataclasses.replace(parse_whole(_json_object(response, self.provider)),
                                                         retries=attempt - 1)
                        if completion.usage is not None:
                            yield UsageReported(completion.usage)
                        yield Done(completion)
                        return
                    source = (SSE(sse.event, sse.data) for sse in EventSource(response).iter_sse())
                    for event in parse(_cancellable(source, cancel)):
                        yielded = yielded or isinstance(event, CONTENT_EVENTS)
                        if isinstance(event, Done) and attempt > 1:
                            event = Done(dataclasses.replace(event.completion, retries=attempt - 1))
                        yield event
                    return
            except (ProviderError, httpx.ConnectError, httpx.RemoteProtocolError) as error:
                if yielded:
                    raise
                notice = self._wait_to_retry(error, attempt, cancel)
                yield notice
            except SSEError as error:
                raise malformed(self.provider, 200, None, error) from None

    def _wait_to_retry(self, error: Exception, attempt: int, cancel: threading.Event | None) -> Retrying:
        """Sleeps before the next attempt and says so, or raises `error` when it is not to be retried."""
        if cancel is not None and cancel.is_set():
            raise ModelCallCancelled("the model call was cancelled") from None
        if isinstance(error, ProviderError) and not error.retryable:
            raise error
        retry_after = error.retry_after if isinstance(error, ProviderError) else None
        delay = self.retry.delay(attempt, self._rng, retry_after)
        if delay is None:
            raise error
        notice = Retrying(attempt, delay, str(error))
        if self.on_retry is not None:
            self.on_retry(notice)
        if cancel is not None:
            if cancel.wait(delay):
                raise ModelCallCancelled("the model call was cancelled while waiting to retry") from None
        else:
            time.sleep(delay)
        return notice

    @contextlib.contextmanager
    def _open(self, url: str, payload: Mapping[str, Any], timeout: float | None,
              cancel: threading.Event | None) -> Iterator[httpx.Response]:
        seconds = self.timeout if timeout is None else timeout
        try:
            request = self._http.build_request("POST", url, json=dict(payload), headers=self.request_headers(),
                                               timeout=seconds)
        except (UnicodeEncodeError, ValueError) as error:  # a lone surrogate, NaN or infinity: not JSON
            raise InputError(f"the request cannot be sent as JSON: {error}",
                             "remove lone UTF-16 surrogates and NaN/infinite numbers from the messages") from None
        try:
            response = self._http.send(request, stream=True) if cancel is None else \
                _send_cancellable(self._http, request, cancel)
        except httpx.TransportError:
            if cancel is not None and cancel.is_set():
                raise ModelCallCancelled("the model call was cancelled") from None
            raise
        try:
            with _abort_on(cancel, response):
                yield response
        finally:
            response.close()

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise ModelCallCancelled("the model call was cancelled")


def _cancellable(source: Iterator[SSE], cancel: threading.Event | None) -> Iterator[SSE]:
    for item in source:
        _check_cancel(cancel)
        yield item


def _send_cancellable(http: httpx.Client, request: httpx.Request, cancel: threading.Event) -> httpx.Response:
    """`http.send(request, stream=True)`, given up on as soon as `cancel` is set. A server that answers
    a plain request only when the whole answer is ready sends no byte before then, so there is no body
    read to abort yet: the send runs in a helper thread, and a cancelled call returns at once while the
    helper closes whatever answer still arrives (it ends by the request's own timeout at the latest)."""
    outcome: dict[str, Any] = {}
    lock = threading.Lock()
    finished = threading.Event()

    def run() -> None:
        try:
            response = http.send(request, stream=True)
        except BaseException as error:  # handed to the caller, or dropped with the abandoned call
            with lock:
                outcome["error"] = error
        else:
            with lock:
                if outcome.get("abandoned"):
                    response.close()
                else:
                    outcome["response"] = response
        finally:
            finished.set()

    threading.Thread(target=run, name="ctxwin-send", daemon=True).start()
    while not finished.wait(CANCEL_POLL_SECONDS):
        if cancel.is_set():
            with lock:
                outcome["abandoned"] = True
                late = outcome.pop("response", None)
            if late is not None:
                late.close()
            raise ModelCallCancelled("the model call was cancelled")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["response"]


@contextlib.contextmanager
def _abort_on(cancel: threading.Event | None, response: httpx.Response) -> Iterator[None]:
    """While the body is read, a set cancel event shuts the socket down, so a read blocked waiting for
    the server returns at once (closing a socket does not wake a thread blocked on it; shutdown does)."""
    if cancel is None:
        yield
        return
    finished = threading.Event()
    lock = threading.Lock()  # no shutdown once the call is over: the connection may be back in the pool

    def watch() -> None:
        while not finished.is_set():
            if cancel.wait(CANCEL_POLL_SECONDS):
                with lock:
                    if finished.is_set():
                        return
                    stream = response.extensions.get("network_stream")
                    sock = stream.get_extra_info("socket") if stream is not None else None
                    if isinstance(sock, socket.socket):
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
                return

    # Not joined: the watcher ends by itself within CANCEL_POLL_SECONDS, and the call does not wait for it.
    threading.Thread(target=watch, name="ctxwin-cancel", daemon=True).start()
    try:
        yield
    except (httpx.ReadError, httpx.RemoteProtocolError, httpx.StreamError):
        if cancel.is_set():
            raise ModelCallCancelled("the model call was cancelled") from None
        raise
    finally:
        with lock:
            finished.set()


__all__ = [
    "DEFAULT_TIMEOUT",
    "NO_RETRY",
    "SSE",
    "Completion",
    "Done",
    "HttpClient",
    "ModelClient",
    "ProviderError",
    "RetryPolicy",
    "Retrying",
    "Stream",
    "StreamEvent",
    "StreamingClient",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallDelta",
    "ToolCallStarted",
    "ToolChoice",
    "ToolDef",
    "Tools",
    "Usage",
    "UsageReported",
    "event_json",
    "guarded_events",
    "guarded_parse",
    "malformed",
    "malformed_inside",
    "object_list",
    "post_json",
    "provider_error",
    "retry_after_seconds",
    "stream_error",
    "text_field",
    "token_count",
]
