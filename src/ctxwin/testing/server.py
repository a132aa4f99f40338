"""The fake provider itself: its settings, the scripted answers tests force, the requests it
recorded, and the dispatch of one request through the checks to an answer (whole, streamed or a
scripted fault). The HTTP layer is `httpd`, what it checks `checks`, what it answers `answers` and
`sse`, the prompt cache `cache`."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ctxwin.providers.overflow import OverflowPattern
from ctxwin.testing.answers import OutCall, call_id, fit, respond_to, response_object
from ctxwin.testing.cache import PromptCache
from ctxwin.testing.checks import _Reject, check_auth, check_shape, check_window, parse_body, validated_input_tokens
from ctxwin.testing.httpd import Answer, Server
from ctxwin.testing.refusals import error_body, fault_body, not_found
from ctxwin.testing.request import COUNT_TOKENS, GENERATION_PATHS, api_of, max_tokens_of, request_messages, tool_names
from ctxwin.testing.scripted import Fault, ModelFn, ModelRequest, Reply
from ctxwin.testing.sse import encode_sse, stream_error, stream_events, stream_head
from ctxwin.tokens import counter_for
from ctxwin.tokens.base import TokenCounter

DEFAULT_CONTEXT_WINDOW = 200_000  # tokens, Claude's window
DEFAULT_MAX_OUTPUT = 8_192  # tokens a single response may ask for
SHUTDOWN_POLL_SECONDS = 0.05  # how often the server thread checks for shutdown (close() waits up to this)


@dataclass(frozen=True)
class ForcedResponse:
    """What the next matching request gets instead of the normal answer. With `body` set, that body is
    served as is with `status` and `headers`. Without it, the normal reply is built and the overrides
    apply: `text` replaces the reply, `usage` replaces reported numbers (keys `input_tokens`,
    `output_tokens`, `cache_read_tokens`, `cache_write_tokens`; input is uncached input, as Anthropic
    counts it), `stop_reason` the stop reason. `delay` seconds pass before the answer (for timeouts).
    `paths` limits which endpoints consume it (default: the three generation endpoints); `times` how
    many requests it answers."""

    status: int = 200
    body: str | bytes | Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    text: str | None = None
    usage: Mapping[str, int] | None = None
    stop_reason: str | None = None
    delay: float = 0.0
    paths: tuple[str, ...] = GENERATION_PATHS
    times: int = 1


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it, and what it answered."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any  # the parsed JSON body (None when it was not JSON)
    input_tokens: int | None  # the server's count, when it got that far
    status: int
    response: Any  # the JSON it answered with (or the raw text of a forced non-JSON body)
    forced: bool = False


class FakeProvider:
    """The server. Use it as a context manager (or `start()` / `close()`); it listens on a random free
    port of 127.0.0.1 in a background thread."""

    def __init__(
        self,
        *,
        context_window: int = DEFAULT_CONTEXT_WINDOW,
        max_output: int = DEFAULT_MAX_OUTPUT,
        counter: TokenCounter | None = None,
        strict_alternation: bool = True,
        require_auth: bool = True,
        prompt_cache: bool = True,
        anthropic_auto_cache: bool = False,
        model: ModelFn | None = None,
        port: int = 0,
        stream_delay: float = 0.0,
    ) -> None:
        self.context_window = context_window
        self.max_output = max_output
        self.strict_alternation = strict_alternation  # Anthropic's historic "roles must alternate" rule
        self.require_auth = require_auth
        self.prompt_cache = prompt_cache
        # Anthropic caches only up to explicit `cache_control` breakpoints, and so does the fake; with this
        # on, every Anthropic request is treated as ending in one, so prefix reuse shows without them.
        self.anthropic_auto_cache = anthropic_auto_cache
        self.model = model  # the scripted model; None: the deterministic default reply
        self.stream_delay = stream_delay  # seconds between the events of a streamed answer
        self._port = port
        self._calls = 0  # requests the model answered (ModelRequest.call)
        self._counter = counter
        self._lock = threading.Lock()
        self._queue: list[list[Any]] = []  # [ForcedResponse, remaining]
        self._requests: list[RecordedRequest] = []
        self._cache = PromptCache()
        self._serial = 0
        self._streams_cut = 0  # streamed answers whose client left before their last event
        self._generation = 0  # bumped by reset(): a request still in flight then is not recorded after it
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeProvider:
        if self._server is None:
            server = Server(self._port, self)
            self._server = server
            self._thread = threading.Thread(target=server.serve_forever, name="fake-provider", daemon=True,
                                            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS})
            self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = self._thread = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeProvider is not running; use it as a context manager or call start()")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The server root, e.g. http://127.0.0.1:51234."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """Where OpenAI clients point (the SDK convention includes /v1)."""
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Where Anthropic clients point (the SDK convention excludes /v1)."""
        return self.base_url

    # ------------------------------------------------------------------ scripting

    def force(self, response: ForcedResponse) -> None:
        with self._lock:
            self._queue.append([response, max(1, response.times)])

    def fail(self, status: int, body: str | bytes | Mapping[str, Any] | None, *, times: int = 1,
             headers: Mapping[str, str] | None = None, paths: tuple[str, ...] = GENERATION_PATHS) -> None:
        """Answer the next `times` requests with this status and body (None: an empty body)."""
        self.force(ForcedResponse(status=status, body=b"" if body is None else body, headers=dict(headers or {}),
                                  paths=paths, times=times))

    def fail_with(self, pattern: OverflowPattern, *, times: int = 1,
                  paths: tuple[str, ...] = GENERATION_PATHS) -> None:
        """Serve a catalog entry's real example body with its real status."""
        headers = {"x-amzn-ErrorType": "ValidationException"} if pattern.provider == "bedrock" else {}
        self.fail(pattern.status or 400, pattern.example, times=times, headers=headers, paths=paths)

    def report_usage(self, input_tokens: int, *, output_tokens: int | None = None, cache_read_tokens: int = 0,
                     stop_reason: str | None = None, times: int = 1) -> None:
        """Answer normally but report these usage numbers (for silent overflow: more input than fits)."""
        usage = {"input_tokens": input_tokens, "cache_read_tokens": cache_read_tokens}
        if output_tokens is not None:
            usage["output_tokens"] = output_tokens
        self.force(ForcedResponse(usage=usage, stop_reason=stop_reason, times=times))

    def reply(self, text: str, *, times: int = 1) -> None:
        self.force(ForcedResponse(text=text, times=times))

    def reset(self) -> None:
        """Forget scripted responses, recorded requests and the prompt cache."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._cache.clear()
            self._calls = 0
            self._generation += 1

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def streams_cut(self) -> int:
        """How many streamed answers the client left before their last event (a cancelled stream)."""
        with self._lock:
            return self._streams_cut

    def stream_cut(self) -> None:
        with self._lock:
            self._streams_cut += 1

    def requests_to(self, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == path]

    # ------------------------------------------------------------------ handling

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Answer:
        """One request in, one response out (status, headers, body: bytes, or the SSE events of a
        streamed answer). Called from the server threads; never raises for what a client sent."""
        try:
            return self._handle(method, path, headers, raw)
        except Exception as bug:  # a bug of the fake must still be an HTTP answer, and visible as a 500
            body = error_body(api_of(path.split("?", 1)[0].rstrip("/")), "api_error",
                              f"fake provider internal error: {type(bug).__name__}: {bug}")
            return 500, {"content-type": "application/json"}, json.dumps(body).encode()

    def _handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Answer:
        path = path.split("?", 1)[0].rstrip("/")
        api = api_of(path)
        generation = self._generation
        body, unparsable = parse_body(raw)
        forced = self._peek_forced(path)
        if forced is not None and forced.delay > 0:
            time.sleep(forced.delay)
        tokens: int | None = None
        try:
            if forced is not None and forced.body is not None:
                self._consume(forced)
                return self._serve_forced(RecordedRequest(method, path, headers, body, None, forced.status, None,
                                                          True), forced, generation)
            if method != "POST" or api is None:
                raise _Reject(404, not_found(api, method, path))
            check_auth(api, headers, self.require_auth)
            if unparsable is not None:
                raise _Reject(400, error_body(api, "invalid_request_error", unparsable))
            if not isinstance(body, Mapping):
                raise _Reject(400, error_body(api, "invalid_request_error", "the request body is not a JSON object"))
            check_shape(api, body, for_count=path == COUNT_TOKENS)
            if path == COUNT_TOKENS:
                tokens = validated_input_tokens(api, body, self.counter, strict_alternation=self.strict_alternation,
                                                for_count=True)
                return self._respond(RecordedRequest(method, path, headers, body, tokens, 200, None),
                                     {"input_tokens": tokens}, generation)
            tokens = validated_input_tokens(api, body, self.counter, strict_alternation=self.strict_alternation,
                                            for_count=False)
            answer = self._answer(api, body, tokens, forced)
            if forced is not None:
                self._consume(forced)
            if isinstance(answer, Fault):
                return self._serve_fault(RecordedRequest(method, path, headers, body, tokens, 200, None), api, body,
                                         tokens, answer, generation)
            if body.get("stream") is True:
                return self._stream(RecordedRequest(method, path, headers, body, tokens, 200, None), api, body,
                                    answer, generation)
            return self._respond(RecordedRequest(method, path, headers, body, tokens, 200, None), answer, generation)
        except _Reject as reject:
            return self._respond(RecordedRequest(method, path, headers, body, tokens, reject.status, None),
                                 reject.body, generation)

    def refuse(self, path: str, status: int, message: str) -> Answer:
        """The answer to a request whose body could not even be read (bad framing, over the size cap)."""
        clean = path.split("?", 1)[0].rstrip("/")
        api = api_of(clean)
        kind = "request_too_large" if status == 413 and api == "anthropic" else "invalid_request_error"
        body = error_body(api, kind, message)
        self._record(RecordedRequest("POST", clean, {}, None, None, status, body), self._generation)
        return status, {"content-type": "application/json"}, json.dumps(body).encode()

    def _serve_fault(self, request: RecordedRequest, api: str, body: Mapping[str, Any], tokens: int, fault: Fault,
                     generation: int) -> Answer:
        """A scripted fault with the API's real status, body and retry headers; mid-stream faults of a
        streamed request arrive as an error event after the stream's first events."""
        status, error = fault_body(api, fault, tokens, self.context_window)
        headers = {"content-type": "application/json"}
        if fault.retry_after is not None:
            headers["retry-after"] = _seconds(fault.retry_after)
        if fault.retry_after_ms is not None:
            headers["retry-after-ms"] = str(fault.retry_after_ms)
        if api == "anthropic":
            headers["request-id"] = str(error.get("request_id") or f"req_fake_{self._serial}")
        if fault.mid_stream and body.get("stream") is True:
            self._record(replace(request, response=error), generation)
            head = stream_head(api, self._reply_dict(api, body, tokens, Reply(), None))
            return 200, {"content-type": "text/event-stream", "cache-control": "no-cache"}, \
                self._paced(encode_sse([*head, stream_error(api, error, len(head))]))
        self._record(replace(request, status=status, response=error), generation)
        return status, headers, json.dumps(error).encode()

    def _stream(self, request: RecordedRequest, api: str, body: Mapping[str, Any], answer: Mapping[str, Any],
                generation: int) -> Answer:
        self._record(replace(request, response=answer), generation)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage")) \
            if isinstance(body.get("stream_options"), Mapping) else False
        events = stream_events(api, answer, include_usage=include_usage)
        out = {"content-type": "text/event-stream", "cache-control": "no-cache"}
        if api == "anthropic":
            out["request-id"] = f"req_fake_{self._serial}"
        return 200, out, self._paced(encode_sse(events))

    def _paced(self, chunks: list[bytes]) -> Iterator[bytes]:
        """The stream's chunks, `stream_delay` seconds apart (so tests can cancel a stream midway)."""
        for i, chunk in enumerate(chunks):
            if i and self.stream_delay > 0:
                time.sleep(self.stream_delay)
            yield chunk

    def _peek_forced(self, path: str) -> ForcedResponse | None:
        """The first scripted response for this endpoint; it is consumed only once it is used (a request
        the server rejects does not use up an override)."""
        with self._lock:
            return next((item[0] for item in self._queue if path in item[0].paths), None)

    def _consume(self, response: ForcedResponse) -> None:
        with self._lock:
            for item in self._queue:
                if item[0] is response:
                    item[1] -= 1
                    if item[1] <= 0:
                        self._queue.remove(item)
                    return

    def _serve_forced(self, request: RecordedRequest, forced: ForcedResponse, generation: int) -> Answer:
        payload = forced.body
        if isinstance(payload, Mapping):
            data = json.dumps(payload).encode()
        elif isinstance(payload, str):
            data = payload.encode()
        else:
            data = bytes(payload or b"")
        self._record(replace(request, response=_decode(data)), generation)
        return forced.status, {"content-type": _content_type(data), **dict(forced.headers)}, data

    def _respond(self, request: RecordedRequest, answer: Mapping[str, Any], generation: int) -> Answer:
        self._record(replace(request, response=answer), generation)
        out = {"content-type": "application/json"}
        if api_of(request.path) == "anthropic":
            out["request-id"] = str(answer.get("request_id") or f"req_fake_{self._serial}")
        return request.status, out, json.dumps(answer).encode()

    def _record(self, request: RecordedRequest, generation: int) -> None:
        with self._lock:
            if generation == self._generation:
                self._requests.append(request)

    def _next_serial(self) -> int:
        with self._lock:
            self._serial += 1
            return self._serial

    def counter(self, model: str | None) -> TokenCounter:
        return self._counter if self._counter is not None else counter_for(model)  # a CachedCounter is falsy when empty

    # ------------------------------------------------------------------ answering

    def _answer(self, api: str, body: Mapping[str, Any], input_tokens: int,
                forced: ForcedResponse | None) -> dict[str, Any] | Fault:
        """The answer to an accepted request: the window is enforced first, then the forced response,
        the scripted model, or the default deterministic reply decides what the assistant says."""
        check_window(api, body, input_tokens, window=self.context_window, max_output=self.max_output)
        reply: Reply | Fault | None = None
        if forced is not None and forced.text is not None:
            reply = Reply(forced.text)
        elif self.model is not None:
            reply = self.model(self._model_request(api, body, input_tokens))
        if isinstance(reply, Fault):
            return reply
        return self._reply_dict(api, body, input_tokens, reply, forced)

    def _model_request(self, api: str, body: Mapping[str, Any], input_tokens: int) -> ModelRequest:
        with self._lock:
            call = self._calls
            self._calls += 1
        return ModelRequest(api=api, model=str(body["model"]),  # type: ignore[arg-type]  # api: one of the three dispatched
                            messages=tuple(request_messages(api, body)), tools=tool_names(api, body),
                            input_tokens=input_tokens, call=call, stream=body.get("stream") is True, body=body)

    def _reply_dict(self, api: str, body: Mapping[str, Any], input_tokens: int, reply: Reply | None,
                    forced: ForcedResponse | None) -> dict[str, Any]:
        """The API's response object for this reply (None: the default deterministic text)."""
        model = str(body["model"])
        max_tokens = max_tokens_of(api, body)
        counter = self.counter(model)
        if reply is None:
            reply = Reply(respond_to(request_messages(api, body), input_tokens))
        budget = max_tokens if max_tokens is not None else self.max_output
        text, truncated = fit(reply.text, budget, counter)
        serial = self._next_serial()
        calls = [OutCall(c.id or call_id(api, serial, i), c.name,
                         c.arguments if isinstance(c.arguments, str) else dict(c.arguments))
                 for i, c in enumerate(reply.calls)]
        output_tokens = counter.count_text(text) + sum(counter.count_text(c.name + c.arguments_json) for c in calls)
        cache_read, cache_write = self._cache.hits(api, model, body, counter, input_tokens,
                                                auto_breakpoints=self.anthropic_auto_cache) \
            if self.prompt_cache else (0, 0)
        usage = {"input_tokens": input_tokens - cache_read - cache_write, "output_tokens": output_tokens,
                 "cache_read_tokens": cache_read, "cache_write_tokens": cache_write}
        if forced is not None and forced.usage is not None:
            usage.update({k: int(v) for k, v in forced.usage.items()})
        stop = (forced.stop_reason if forced is not None and forced.stop_reason else None) or reply.stop_reason
        return response_object(api, serial, model, text, calls, usage, stop, truncated=truncated,
                               max_tokens=max_tokens)


def _seconds(value: float) -> str:
    """A retry-after header value: whole seconds when it is whole, else decimal seconds."""
    return str(int(value)) if math.isclose(value, round(value)) else f"{value:.3f}"

def _content_type(data: bytes) -> str:
    try:
        json.loads(data)
    except ValueError:
        return "text/plain; charset=utf-8"
    return "application/json"


def _decode(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")
