"""What every httpx model client shares (`HttpClient`): one request with retries (exponential backoff
with jitter on 429, 5xx and "overloaded", honouring `retry-after-ms` / `retry-after`, bounded),
timeouts, cancellation, and the stream of typed events; the API modules only specialize how a request
is built and an answer parsed. Also `post_json`, for JSON APIs beside the model clients."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import httpx

from ctxwin.errors import InputError, ModelCallCancelled, ProviderError
from ctxwin.messages import Message
from ctxwin.providers.cancel import abort_on, cancellable, check_cancel, send_cancellable
from ctxwin.providers.interface import (
    CONTENT_EVENTS,
    SSE,
    Completion,
    Done,
    Retrying,
    Stream,
    StreamEvent,
    ToolChoice,
    Tools,
    UsageReported,
)
from ctxwin.providers.parsing import json_object, malformed, provider_error
from ctxwin.providers.retry import NO_RETRY, RetryPolicy

DEFAULT_TIMEOUT = 120.0  # seconds for connecting and for each read when neither the client nor the call says


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
    return json_object(response, provider)


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
            check_cancel(cancel)
            try:
                with self._open(url, payload, timeout, cancel) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise provider_error(response, self.provider)
                    response.read()
                    return json_object(response, self.provider), attempt - 1
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
            check_cancel(cancel)
            yielded = False
            try:
                with self._open(url, payload, timeout, cancel) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise provider_error(response, self.provider)
                    if not response.headers.get("content-type", "").startswith("text/event-stream"):
                        response.read()  # a server that ignored stream=true: its JSON answer
                        completion = dataclasses.replace(parse_whole(json_object(response, self.provider)),
                                                         retries=attempt - 1)
                        if completion.usage is not None:
                            yield UsageReported(completion.usage)
                        yield Done(completion)
                        return
                    source = (SSE(sse.event, sse.data) for sse in EventSource(response).iter_sse())
                    for event in parse(cancellable(source, cancel)):
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
                send_cancellable(self._http, request, cancel)
        except httpx.TransportError:
            if cancel is not None and cancel.is_set():
                raise ModelCallCancelled("the model call was cancelled") from None
            raise
        try:
            with abort_on(cancel, response):
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
