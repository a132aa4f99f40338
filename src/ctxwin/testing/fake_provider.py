"""A fake model provider for tests: real HTTP on 127.0.0.1, speaking the OpenAI Chat Completions
(`/v1/chat/completions`), OpenAI Responses (`/v1/responses`) and Anthropic Messages (`/v1/messages`,
`/v1/messages/count_tokens`) APIs closely enough that the official SDKs and our httpx clients talk to it
unchanged.

It behaves like the real services where context management is concerned:
- it counts each request's input tokens (`ctxwin.tokens.counter_for(model)`) and rejects a request whose
  input plus `max_tokens` does not fit the window, with each provider's real status and error body;
- it validates what the real APIs validate and ctxwin can get wrong (a tool call without its result, a
  result without its call, roles that do not alternate, empty content), with the real error wording;
- it reports real-shaped usage, prompt caching included (Anthropic's explicit `cache_control`
  breakpoints, OpenAI's automatic prefix caching in 128-token steps past 1,024);
- it answers a request whose last user message asks for a summary with a deterministic structured
  summary of the request (the first line of every user message, every file path seen), so tests can
  check what survived a compaction; anything else gets a short deterministic reply.

- it streams like the real APIs when asked (`stream: true`): Anthropic's SSE events, OpenAI Chat chunks
  (with the usage chunk under `stream_options.include_usage`) and Responses events, paced by
  `stream_delay`, which the official SDKs' stream parsers read;
- it answers every malformed request (bad framing, deep JSON, wrong types, out-of-range numbers, bad
  images) with the real APIs' 400 body, never a dropped connection.

What the assistant says comes from a scripted model (`model=`, see `ctxwin.testing.scripted`: a script,
a function of the request, faults at chosen calls) or, without one, the deterministic reply. Tests can
also force single answers: `fail(...)`, `fail_with(pattern)` (serve a `CATALOG` entry's real body and
status), `report_usage(...)` (silent overflow), `reply(...)`, or any `ForcedResponse`, consumed in
order. Every request it received is in `requests`.

    with FakeProvider(context_window=8_000, max_output=1_000) as fake:
        client = AnthropicClient(fake.anthropic_base_url, "key", "claude-test")
        ...

(Long on purpose: three APIs' request validation, answers and SSE streams, faults and cache
accounting must agree with each other; split by API it would repeat the shared server.)
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeAlias

from ctxwin.messages import Image, Message, Text, ToolCall, ToolResult
from ctxwin.messages.model import image_problem
from ctxwin.messages.providers import arguments_object
from ctxwin.providers.overflow import OverflowPattern
from ctxwin.testing.scripted import Fault, ModelFn, ModelRequest, Reply
from ctxwin.tokens import counter_for
from ctxwin.tokens.base import TokenCounter

DEFAULT_CONTEXT_WINDOW = 200_000  # tokens, Claude's window
DEFAULT_MAX_OUTPUT = 8_192  # tokens a single response may ask for
MIN_CACHEABLE_TOKENS = 1_024  # a prompt prefix shorter than this is never cached (Anthropic and OpenAI)
OPENAI_CACHE_STEP = 128  # OpenAI caches in 128-token increments past the first 1,024
ANTHROPIC_LOOKBACK = 20  # a breakpoint reads a cache entry written up to 20 blocks before it (Anthropic's rule)
MAX_SUMMARY_LINE_CHARS = 200  # first lines of user messages are cut to this in the summary
MAX_SUMMARY_FILES = 500  # file paths listed in a summary, at most
REPLY_PREVIEW_CHARS = 80  # how much of the last user message the default reply quotes
CREATED_AT = 1_700_000_000  # a fixed timestamp, so responses are the same bytes on every run
SHUTDOWN_POLL_SECONDS = 0.05  # how often the server thread checks for shutdown (close() waits up to this)
READ_TIMEOUT_SECONDS = 30.0  # a request body that stops arriving for this long is dropped
MAX_BODY_BYTES = 32 * 1024 * 1024  # Anthropic's and OpenAI's request size limit (32 MB): 413 above
MAX_CHUNK_LINE = 1024  # bytes of one chunk-size line of a chunked request body
MAX_JSON_DEPTH = 100  # nesting deeper than this is refused with a 400, as the real APIs refuse it

SUMMARY_REQUEST = re.compile(r"\bsummar(?:y|ies|ize|ise|ization|isation)\b", re.IGNORECASE)
QUOTED_USER_TURN = re.compile(r"^\s*(?:\*\*|\[)?(?:user|human)(?:\*\*|\])?\s*[:>]\s*(\S.*)$",
                              re.IGNORECASE | re.MULTILINE)
FILE_PATH = re.compile(r"(?<![\w:/.~-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]*\w")

OPENAI_NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer "
    "auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're "
    "accessing the API from your browser and are prompted for a username and password. You can obtain an API "
    "key from https://platform.openai.com/account/api-keys."
)

CHAT, RESPONSES, MESSAGES, COUNT_TOKENS = (
    "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens")
GENERATION_PATHS = (CHAT, RESPONSES, MESSAGES)

Answer: TypeAlias = tuple[int, dict[str, str], "bytes | Iterator[bytes]"]  # status, headers, body or SSE chunks


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


class _Reject(Exception):
    """Internal control flow: answer this request with this error."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


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
        self._cache: dict[str, set[str]] = {}  # per API and model: digests of prompt prefixes seen
        self._serial = 0
        self._generation = 0  # bumped by reset(): a request still in flight then is not recorded after it
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeProvider:
        if self._server is None:
            server = _Server(("127.0.0.1", self._port), _Handler)
            server.fake = self  # type: ignore[attr-defined]
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

    def requests_to(self, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == path]

    # ------------------------------------------------------------------ handling

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Answer:
        """One request in, one response out (status, headers, body: bytes, or the SSE events of a
        streamed answer). Called from the server threads; never raises for what a client sent."""
        try:
            return self._handle(method, path, headers, raw)
        except Exception as bug:  # a bug of the fake must still be an HTTP answer, and visible as a 500
            body = _error(_api_of(path.split("?", 1)[0].rstrip("/")), "api_error",
                          f"fake provider internal error: {type(bug).__name__}: {bug}")
            return 500, {"content-type": "application/json"}, json.dumps(body).encode()

    def _handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Answer:
        path = path.split("?", 1)[0].rstrip("/")
        api = _api_of(path)
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
                raise _Reject(404, _not_found(api, method, path))
            _check_auth(api, headers, self.require_auth)
            if unparsable is not None:
                raise _Reject(400, _error(api, "invalid_request_error", unparsable))
            if not isinstance(body, Mapping):
                raise _Reject(400, _error(api, "invalid_request_error", "the request body is not a JSON object"))
            check_shape(api, body, for_count=path == COUNT_TOKENS)
            if path == COUNT_TOKENS:
                tokens = self._validated_input_tokens(api, body, for_count=True)
                return self._respond(RecordedRequest(method, path, headers, body, tokens, 200, None),
                                     {"input_tokens": tokens}, generation)
            tokens = self._validated_input_tokens(api, body, for_count=False)
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
        api = _api_of(clean)
        kind = "request_too_large" if status == 413 and api == "anthropic" else "invalid_request_error"
        body = _error(api, kind, message)
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
        if _api_of(request.path) == "anthropic":
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

    # ------------------------------------------------------------------ validation and counting

    def _validated_input_tokens(self, api: str, body: Mapping[str, Any], *, for_count: bool) -> int:
        model = body.get("model")
        if not model:
            raise _Reject(400, _error(api, "invalid_request_error", "model: Field required" if api == "anthropic"
                                      else "you must provide a model parameter"))
        if api == "anthropic":
            _validate_anthropic(body, strict_alternation=self.strict_alternation, for_count=for_count)
        elif api == "chat":
            _validate_chat(body)
        else:
            _validate_responses(body)
        try:
            _check_images(api, request_messages(api, body))
            return count_request_tokens(api, body, self.counter(str(model)))
        except (ValueError, TypeError, KeyError, AttributeError) as bad:  # what the converters reject, a server rejects
            raise _Reject(400, _error(api, "invalid_request_error", f"invalid request: {bad}")) from None

    def _answer(self, api: str, body: Mapping[str, Any], input_tokens: int,
                forced: ForcedResponse | None) -> dict[str, Any] | Fault:
        """The answer to an accepted request: the window is enforced first, then the forced response,
        the scripted model, or the default deterministic reply decides what the assistant says."""
        model = str(body["model"])
        max_tokens = _max_tokens(api, body)
        if max_tokens is not None and max_tokens > self.max_output:
            raise _Reject(400, _output_cap_error(api, model, max_tokens, self.max_output))
        if input_tokens + (max_tokens or 0) > self.context_window:
            raise _Reject(400, _overflow_error(api, input_tokens, max_tokens, self.context_window))
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
        return ModelRequest(api=api, model=str(body["model"]),  # type: ignore[arg-type]
                            messages=tuple(request_messages(api, body)), tools=tool_names(api, body),
                            input_tokens=input_tokens, call=call, stream=body.get("stream") is True, body=body)

    def _reply_dict(self, api: str, body: Mapping[str, Any], input_tokens: int, reply: Reply | None,
                    forced: ForcedResponse | None) -> dict[str, Any]:
        """The API's response object for this reply (None: the default deterministic text)."""
        model = str(body["model"])
        max_tokens = _max_tokens(api, body)
        counter = self.counter(model)
        if reply is None:
            reply = Reply(respond_to(request_messages(api, body), input_tokens))
        budget = max_tokens if max_tokens is not None else self.max_output
        text, truncated = _fit(reply.text, budget, counter)
        serial = self._next_serial()
        calls = [_OutCall(c.id or _call_id(api, serial, i), c.name,
                          c.arguments if isinstance(c.arguments, str) else dict(c.arguments))
                 for i, c in enumerate(reply.calls)]
        output_tokens = counter.count_text(text) + sum(counter.count_text(c.name + c.arguments_json) for c in calls)
        cache_read, cache_write = self._cache_hits(api, model, body, counter, input_tokens) if self.prompt_cache \
            else (0, 0)
        usage = {"input_tokens": input_tokens - cache_read - cache_write, "output_tokens": output_tokens,
                 "cache_read_tokens": cache_read, "cache_write_tokens": cache_write}
        if forced is not None and forced.usage is not None:
            usage.update({k: int(v) for k, v in forced.usage.items()})
        stop = (forced.stop_reason if forced is not None and forced.stop_reason else None) or reply.stop_reason
        if api == "anthropic":
            default = "max_tokens" if truncated else "tool_use" if calls else "end_turn"
            return _anthropic_message(serial, model, text, calls, usage, stop or default)
        if api == "chat":
            default = "length" if truncated else "tool_calls" if calls else "stop"
            return _chat_completion(serial, model, text, calls, usage, stop or default)
        return _responses_response(serial, model, text, calls, usage, stop or ("max_output_tokens" if truncated
                                                                              else None), max_tokens)

    def _cache_hits(self, api: str, model: str, body: Mapping[str, Any], counter: TokenCounter,
                    input_tokens: int) -> tuple[int, int]:
        """(cache read, cache write) tokens for this request, from the prompt prefixes seen before: the
        longest prefix of whole items (tool definitions, system prompt, messages) that an earlier request
        of the same API and model wrote, at most the request's counted input."""
        items = _prompt_items(api, body)
        texts = [json.dumps(_cache_key_form(item), sort_keys=True) for _, item, _ in items]
        # each item counted on its own, so a shared prefix has the same size in every request that has it
        tokens_at = [min(input_tokens, size) for size in
                     itertools.accumulate(_item_tokens(api, kind, item, counter) for kind, item, _ in items)]
        digests, running = [], hashlib.blake2b(digest_size=16)
        for text in texts:  # the cache is keyed by content: where the breakpoints sit is not part of it
            running.update(text.encode())
            digests.append(running.copy().hexdigest())
        with self._lock:
            seen = self._cache.setdefault(f"{api}:{model}", set())
            if api == "anthropic":  # explicit breakpoints: read the longest cached one, write up to the last
                marked_at = {i for i, (_, _, marked) in enumerate(items) if marked}
                if self.anthropic_auto_cache and items:
                    marked_at |= set(range(len(items)))  # every item boundary is a breakpoint
                marks = [i for i in sorted(marked_at) if tokens_at[i] >= MIN_CACHEABLE_TOKENS]
                if not marks:
                    return 0, 0
                # each breakpoint also finds entries written up to ANTHROPIC_LOOKBACK items before it
                candidates = {j for m in marks for j in range(max(0, m - ANTHROPIC_LOOKBACK + 1), m + 1)}
                hit = max((i for i in candidates if digests[i] in seen), default=None)
                read = tokens_at[hit] if hit is not None else 0
                seen.update(digests[i] for i in marks)
                return read, tokens_at[marks[-1]] - read
            hit = max((i for i, digest in enumerate(digests) if digest in seen), default=None)
            seen.update(digests)
        prefix = tokens_at[hit] if hit is not None else 0
        if prefix < MIN_CACHEABLE_TOKENS:
            return 0, 0
        return MIN_CACHEABLE_TOKENS + (prefix - MIN_CACHEABLE_TOKENS) // OPENAI_CACHE_STEP * OPENAI_CACHE_STEP, 0


# --------------------------------------------------------------------------------------------------
# The HTTP layer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a proxy opening tens of connections at once is not refused

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer (a cancelled stream) is normal; anything else is one line
        on stderr, not a traceback."""
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError | TimeoutError):
            print(f"fake provider: {type(error).__name__}: {error}", file=sys.stderr)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs expect
    disable_nagle_algorithm = True  # headers and body go out in two writes: without this, 40 ms delayed-ACK stalls
    timeout = READ_TIMEOUT_SECONDS  # a client that stops sending mid-body is dropped, not waited for forever

    def _serve(self) -> None:
        fake: FakeProvider = self.server.fake  # type: ignore[attr-defined]
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            raw = _read_body(self.rfile, headers)
        except _BadBody as bad:
            self.close_connection = True  # the rest of the stream cannot be framed: answer, then hang up
            self._write(*fake.refuse(self.path, bad.status, str(bad)))
            return
        self._write(*fake.handle(self.command, self.path, headers, raw))

    def _write(self, status: int, out_headers: Mapping[str, str], data: bytes | Iterator[bytes]) -> None:
        self.send_response(status)
        for key, value in out_headers.items():
            self.send_header(key, value)
        if isinstance(data, bytes):
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for chunk in data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except ConnectionError:  # the client cancelled the stream
            self.close_connection = True

    do_POST = do_GET = do_PUT = do_DELETE = do_PATCH = _serve  # the names http.server dispatches to

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's signature
        return


class _BadBody(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _read_body(stream: Any, headers: Mapping[str, str]) -> bytes:
    """The request body, framed by content-length or chunked transfer encoding, at most MAX_BODY_BYTES.
    A length that is not a non-negative integer, or a body over the cap, is a `_BadBody`."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts, total = [], 0
        while True:
            line = stream.readline(MAX_CHUNK_LINE)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _BadBody(400, "invalid chunked encoding") from None
            if size < 0:
                raise _BadBody(400, "invalid chunked encoding")
            total += size
            if total > MAX_BODY_BYTES:
                raise _BadBody(413, "Request exceeds the maximum allowed number of bytes.")
            if size == 0:
                while stream.readline(MAX_CHUNK_LINE) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            parts.append(stream.read(size))
            stream.readline(MAX_CHUNK_LINE)
    declared = headers.get("content-length")
    if declared is None:
        return b""
    if not declared.strip().isdigit():
        raise _BadBody(400, f"Invalid content-length header: {declared[:40]!r}")
    length = int(declared)
    if length > MAX_BODY_BYTES:
        raise _BadBody(413, "Request exceeds the maximum allowed number of bytes.")
    raw = stream.read(length) if length else b""
    if len(raw) < length:
        raise _BadBody(400, f"the body ended after {len(raw)} of the {length} bytes content-length announced")
    return raw


# --------------------------------------------------------------------------------------------------
# Requests: which API, what it contains, how many tokens


def _api_of(path: str) -> str | None:
    if path in (MESSAGES, COUNT_TOKENS):
        return "anthropic"
    if path == CHAT:
        return "chat"
    if path == RESPONSES:
        return "responses"
    return None


def request_messages(api: str, body: Mapping[str, Any]) -> list[Message]:
    """The request's conversation as canonical messages (system prompt first, when there is one)."""
    from ctxwin.messages import providers as convert

    if api == "anthropic":
        return convert.from_anthropic(body.get("messages") or [], system=body.get("system"))
    if api == "chat":
        return convert.from_openai_chat(body.get("messages") or [])
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    messages = list(convert.from_openai_responses(items or []))
    if body.get("instructions"):
        messages.insert(0, Message("system", (Text(str(body["instructions"])),)))
    return messages


def count_request_tokens(api: str, body: Mapping[str, Any], counter: TokenCounter) -> int:
    """Input tokens of a request by `counter`: every message (system prompt included) plus the tool
    definitions, which providers bill as input too."""
    total = sum(counter.count_message(m) for m in request_messages(api, body))
    tools = body.get("tools")
    if tools:
        total += counter.count_text(json.dumps(tools, sort_keys=True))
    return total


def _max_tokens(api: str, body: Mapping[str, Any]) -> int | None:
    keys = {"anthropic": ("max_tokens",), "chat": ("max_completion_tokens", "max_tokens"),
            "responses": ("max_output_tokens",)}[api]
    for key in keys:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _prompt_items(api: str, body: Mapping[str, Any]) -> list[tuple[str, Any, bool]]:
    """The prompt as a sequence of cacheable items in the order the API caches them: (kind: "tools",
    "system" or "message", the item, whether it carries a cache breakpoint)."""
    items: list[tuple[str, Any, bool]] = []
    if body.get("tools"):
        items.append(("tools", body["tools"], api == "anthropic" and _has_cache_control(body["tools"])))
    if api == "anthropic":
        if body.get("system"):
            items.append(("system", body["system"], _has_cache_control(body["system"])))
        return items + [("message", m, _has_cache_control(m)) for m in body.get("messages") or []]
    if api == "chat":
        return items + [("message", m, False) for m in body.get("messages") or []]
    listed = body.get("input")
    listed = [{"role": "user", "content": listed}] if isinstance(listed, str) else list(listed or [])
    if body.get("instructions"):
        items.append(("system", body["instructions"], False))
    return items + [("message", m, False) for m in listed]


def _item_tokens(api: str, kind: str, item: Any, counter: TokenCounter) -> int:
    """Tokens of one prompt item, counted like the request's input (tool definitions as their JSON, a
    system prompt or message through the canonical converter)."""
    from ctxwin.messages import providers as convert

    if kind == "tools":
        return counter.count_text(json.dumps(item, sort_keys=True))
    try:
        if kind == "system":  # a string, or Anthropic's text blocks
            text = item if isinstance(item, str) else "\n".join(
                str(b.get("text", "")) for b in item if isinstance(b, Mapping))
            return counter.count_message(Message("system", (Text(text),)))
        if api == "anthropic":
            messages = convert.from_anthropic([item])
        elif api == "chat":
            messages = convert.from_openai_chat([item])
        else:
            messages = convert.from_openai_responses([item])
        return sum(counter.count_message(m) for m in messages)
    except (ValueError, TypeError, KeyError, AttributeError):
        return counter.count_text(json.dumps(item, sort_keys=True))


def _cache_key_form(value: Any) -> Any:
    """What a prompt cache keys on: the content, not where the breakpoints sit nor how it is spelled
    (Anthropic's string content is the same prompt as one text block)."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]  # a system prompt given as a string
    if isinstance(value, Mapping):
        out = {k: v for k, v in value.items() if k != "cache_control"}
        if isinstance(out.get("content"), str):
            out["content"] = [{"type": "text", "text": out["content"]}]
        return {k: _cache_key_form(v) if isinstance(v, Mapping | list) else v for k, v in out.items()}
    if isinstance(value, list):
        return [_cache_key_form(v) if isinstance(v, Mapping | list) else v for v in value]
    return value


def _has_cache_control(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "cache_control" in value or any(_has_cache_control(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_cache_control(v) for v in value)
    return False


# --------------------------------------------------------------------------------------------------
# Validation, with the real APIs' wording


OPENAI_BAD_JSON = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library "
    "correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble "
    "figuring out how to fix this, please contact us through our help center at help.openai.com.)"
)


def parse_body(raw: bytes) -> tuple[Any, str | None]:
    """(the JSON body, None), or (None, why it is not acceptable JSON): invalid JSON or UTF-8, NaN or
    Infinity (not JSON), or nesting deeper than MAX_JSON_DEPTH. An empty body is (None, None)."""
    if not raw:
        return None, None

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        body = json.loads(raw, parse_constant=no_constants)
    except (ValueError, RecursionError):
        return None, OPENAI_BAD_JSON
    if _depth_over(body, MAX_JSON_DEPTH):
        return None, f"The request body is nested more than {MAX_JSON_DEPTH} levels deep."
    return body, None


def _depth_over(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


_JSON_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a decimal", str: "a string", list: "an array",
                    dict: "an object", type(None): "null"}


def _shape_error(api: str, param: str, expected: str, value: Any, code: str = "invalid_type") -> _Reject:
    """The real wording of a type error: pydantic's for Anthropic, OpenAI's own for OpenAI."""
    if api == "anthropic":
        kinds = {"an object": "dictionary", "an array": "list", "a string": "string", "an integer": "integer",
                 "a boolean": "boolean"}
        return _Reject(400, _error(api, "invalid_request_error",
                                   f"{param}: Input should be a valid {kinds.get(expected, expected)}"))
    got = _JSON_TYPE_NAMES.get(type(value), "a value")
    return _Reject(400, _error(api, "invalid_request_error",
                               f"Invalid type for '{param}': expected {expected}, but got {got} instead.",
                               param=param, code=code))


def _below_min(api: str, param: str, value: int, minimum: int) -> _Reject:
    if api == "anthropic":
        return _Reject(400, _error(api, "invalid_request_error",
                                   f"{param}: Input should be greater than or equal to {minimum}"))
    return _Reject(400, _error(api, "invalid_request_error",
                               f"Invalid '{param}': integer below minimum value. Expected a value >= {minimum}, but "
                               f"got {value} instead.", param=param, code="integer_below_min_value"))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_shape(api: str, body: Mapping[str, Any], *, for_count: bool = False) -> None:
    """The type checks the real APIs make before anything else, with their 400 answers: every field the
    fake reads has the JSON type the API documents, and integers are in range, so nothing later trips
    over a number where an object belongs."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _shape_error(api, "model", "a string", model)
    for flag in ("stream", "store", "parallel_tool_calls"):
        if flag in body and not isinstance(body[flag], bool | None):
            raise _shape_error(api, flag, "a boolean", body[flag])
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _shape_error(api, "tools", "an array", tools)
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise _shape_error(api, f"tools[{i}]" if api != "anthropic" else f"tools.{i}", "an object", tool)
    minimum = {"anthropic": 1, "chat": 1, "responses": 16}[api]
    for key in {"anthropic": ("max_tokens",), "chat": ("max_tokens", "max_completion_tokens"),
                "responses": ("max_output_tokens",)}[api]:
        value = body.get(key)
        if value is None or (for_count and api == "anthropic"):
            continue
        if not _is_int(value):
            raise _shape_error(api, key, "an integer", value)
        if value < minimum:
            raise _below_min(api, key, value, minimum)
    if api == "anthropic":
        _check_anthropic_shape(body)
    elif api == "chat":
        _check_chat_shape(body)
    else:
        _check_responses_shape(body)


ANTHROPIC_BLOCK_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "text": (("text", "a string"),),
    "tool_use": (("id", "a string"), ("name", "a string"), ("input", "an object")),
    "tool_result": (("tool_use_id", "a string"),),
    "image": (("source", "an object"),),
    "thinking": (("thinking", "a string"),),
    "redacted_thinking": (("data", "a string"),),
}  # the fields each block type requires, with their JSON types


def _check_anthropic_shape(body: Mapping[str, Any]) -> None:
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise _shape_error("anthropic", "system", "a string", system)
    for i, block in enumerate(system if isinstance(system, list) else ()):
        if not isinstance(block, dict) or not isinstance(block.get("text"), str):
            raise _shape_error("anthropic", f"system.{i}", "an object", block)
    messages = body.get("messages")
    if messages is not None and not isinstance(messages, list):
        raise _shape_error("anthropic", "messages", "an array", messages)
    for i, message in enumerate(messages or ()):
        if not isinstance(message, dict):
            raise _shape_error("anthropic", f"messages.{i}", "an object", message)
        content = message.get("content")
        if not isinstance(content, str | list):
            raise _shape_error("anthropic", f"messages.{i}.content", "a string", content)
        for j, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise _shape_error("anthropic", f"messages.{i}.content.{j}", "an object", block)
            for key, expected in ANTHROPIC_BLOCK_FIELDS.get(block["type"], ()):
                value = block.get(key)
                if not isinstance(value, dict if expected == "an object" else str):
                    raise _shape_error("anthropic", f"messages.{i}.content.{j}.{block['type']}.{key}", expected,
                                       value)
            inner = block.get("content")
            if block.get("type") == "tool_result" and not isinstance(inner, str | list | None):
                raise _shape_error("anthropic", f"messages.{i}.content.{j}.content", "a string", inner)
            for k, part in enumerate(inner if isinstance(inner, list) else ()):
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise _shape_error("anthropic", f"messages.{i}.content.{j}.content.{k}", "an object", part)


def _check_chat_shape(body: Mapping[str, Any]) -> None:
    messages = body.get("messages")
    if messages is not None and not isinstance(messages, list):
        raise _shape_error("chat", "messages", "an array", messages)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _shape_error("chat", "stream_options", "an object", options)
    for i, message in enumerate(messages or ()):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _shape_error("chat", where, "an object", message)
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _shape_error("chat", f"{where}.content", "one of a string or array of objects", content)
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise _shape_error("chat", f"{where}.content[{j}]", "an object", part)
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise _shape_error("chat", f"{where}.tool_calls", "an array", calls)
        for j, call in enumerate(calls or ()):
            if not isinstance(call, dict):
                raise _shape_error("chat", f"{where}.tool_calls[{j}]", "an object", call)
            function = call.get("function")
            if not isinstance(function, dict):
                raise _shape_error("chat", f"{where}.tool_calls[{j}].function", "an object", function)
            for key in ("name", "arguments"):
                if not isinstance(function.get(key), str):
                    raise _shape_error("chat", f"{where}.tool_calls[{j}].function.{key}", "a string",
                                       function.get(key))
            if not isinstance(call.get("id"), str):
                raise _shape_error("chat", f"{where}.tool_calls[{j}].id", "a string", call.get("id"))
        if message.get("role") == "tool" and not isinstance(message.get("tool_call_id"), str):
            raise _shape_error("chat", f"{where}.tool_call_id", "a string", message.get("tool_call_id"))


def _check_responses_shape(body: Mapping[str, Any]) -> None:
    items = body.get("input")
    if items is not None and not isinstance(items, str | list):
        raise _shape_error("responses", "input", "one of a string or an array of input items", items)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _shape_error("responses", "instructions", "a string", instructions)
    for i, item in enumerate(items if isinstance(items, list) else ()):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _shape_error("responses", where, "an object", item)
        content = item.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _shape_error("responses", f"{where}.content", "one of a string or array of objects", content)
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise _shape_error("responses", f"{where}.content[{j}]", "an object", part)
        if item.get("type") in ("function_call", "function_call_output"):
            for key in ("call_id", *(("name", "arguments") if item["type"] == "function_call" else ())):
                if not isinstance(item.get(key), str):
                    raise _shape_error("responses", f"{where}.{key}", "a string", item.get(key))


OPENAI_BAD_IMAGE = ("You uploaded an unsupported image. Please make sure your image is below 20 MB in size and is "
                    "of one the following formats: ['png', 'jpeg', 'gif', 'webp'].")


def _check_images(api: str, messages: Sequence[Message]) -> None:
    """Every inline image as the real APIs check it: base64, one of four media types matching the bytes,
    at most 5 MB (Anthropic's limit; the stricter one)."""
    for i, message in enumerate(messages):
        parts = [p for b in message.blocks for p in (b.content if isinstance(b, ToolResult) else (b,))]
        for part in parts:
            problem = image_problem(part) if isinstance(part, Image) else None
            if problem is None:
                continue
            if api == "anthropic":
                raise _Reject(400, _error(api, "invalid_request_error", f"messages.{i}: image: {problem}"))
            message_text = "Invalid image data" if "base64" in problem else OPENAI_BAD_IMAGE
            raise _Reject(400, _error(api, "invalid_request_error", f"{message_text} ({problem})",
                                      param="messages" if api == "chat" else "input", code="invalid_image_format"))


def tool_names(api: str, body: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of the tools a request offers (Anthropic and Responses: `name`; Chat: `function.name`)."""
    names = []
    for tool in body.get("tools") or ():
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        name = function.get("name") if api == "chat" and isinstance(function, Mapping) else tool.get("name")
        if isinstance(name, str):
            names.append(name)
    return tuple(names)


def fault_body(api: str, fault: Fault, input_tokens: int, window: int) -> tuple[int, dict[str, Any]]:
    """(status, body) of a scripted fault, as each API really answers it."""
    if fault.kind == "status":
        return fault.status or 500, dict(fault.body or _error(api, "api_error", "scripted error"))
    if fault.kind == "overflow":
        return 400, _overflow_error(api, max(input_tokens, window + 1), None, window)
    if api == "anthropic":
        status, kind, message = {
            "rate_limit": (429, "rate_limit_error", "This request would exceed the rate limit for your organization "
                           "of 50 requests per minute. For details, refer to: https://docs.claude.com/en/api/"
                           "rate-limits. You can see the response headers for current usage."),
            "server_error": (500, "api_error", "Internal server error"),
            "overloaded": (529, "overloaded_error", "Overloaded"),
        }[fault.kind]
        return status, _error(api, kind, message)
    if fault.kind == "rate_limit":
        return 429, _error(api, "requests", "Rate limit reached for requests per min (RPM): Limit 500, Used 500, "
                           "Requested 1. Please try again in 120ms. Visit https://platform.openai.com/account/"
                           "rate-limits to learn more.", code="rate_limit_exceeded")
    if fault.kind == "overloaded":
        return 503, _error(api, "server_error", "The engine is currently overloaded, please try again later")
    return 500, _error(api, "server_error", "The server had an error while processing your request. Sorry about that!")


def _seconds(value: float) -> str:
    """A retry-after header value: whole seconds when it is whole, else decimal seconds."""
    return str(int(value)) if math.isclose(value, round(value)) else f"{value:.3f}"



def _check_auth(api: str, headers: Mapping[str, str], required: bool) -> None:
    if api == "anthropic" and "anthropic-version" not in headers:
        raise _Reject(400, _error(api, "invalid_request_error", "anthropic-version: header is required"))
    if not required:
        return
    if api == "anthropic":
        if not headers.get("x-api-key") and not headers.get("authorization", "").lower().startswith("bearer "):
            raise _Reject(401, _error(api, "authentication_error", "x-api-key header is required"))
    elif not headers.get("authorization", "").lower().startswith("bearer ") or len(headers["authorization"]) <= 7:
        raise _Reject(401, _error(api, "invalid_request_error", OPENAI_NO_KEY))


def _validate_anthropic(body: Mapping[str, Any], *, strict_alternation: bool, for_count: bool) -> None:
    def reject(message: str) -> _Reject:
        return _Reject(400, _error("anthropic", "invalid_request_error", message))

    if not for_count and not isinstance(body.get("max_tokens"), int):
        raise reject("max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise reject("messages: at least one message is required")
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role not in ("user", "assistant"):
            raise reject(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if strict_alternation and i and messages[i - 1].get("role") == role:
            raise reject(f'messages: roles must alternate between "user" and "assistant", but found multiple '
                         f'"{role}" roles in a row')
        blocks = _anthropic_blocks(message.get("content"))
        last = i == len(messages) - 1
        if not blocks and not (last and role == "assistant"):
            raise reject(f"messages.{i}: all messages must have non-empty content except for the optional final "
                         f"assistant message")
        for j, block in enumerate(blocks):
            if block.get("type") == "text" and not str(block.get("text", "")).strip():
                raise reject(f"messages.{i}.content.{j}.text: text content blocks must be non-empty")
        uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        if uses:
            following = _anthropic_blocks(messages[i + 1].get("content")) if i + 1 < len(messages) else []
            answered = {b.get("tool_use_id") for b in following if b.get("type") == "tool_result"}
            missing = [u for u in uses if u not in answered]
            if missing:
                raise reject(f"messages.{i + 1 if i + 1 < len(messages) else i}: `tool_use` ids were found without "
                             f"`tool_result` blocks immediately after: {', '.join(map(str, missing))}. Each "
                             f"`tool_use` block must have a corresponding `tool_result` block in the next message.")
        for j, block in enumerate(blocks):
            if block.get("type") != "tool_result":
                continue
            previous = _anthropic_blocks(messages[i - 1].get("content")) if i else []
            called = {b.get("id") for b in previous if b.get("type") == "tool_use"}
            if block.get("tool_use_id") not in called:
                raise reject(f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                             f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                             f"`tool_use` block in the previous message.")


def _anthropic_blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [b for b in content if isinstance(b, Mapping)]
    return []


def _validate_chat(body: Mapping[str, Any]) -> None:
    def reject(message: str, param: str | None) -> _Reject:
        return _Reject(400, _error("chat", "invalid_request_error", message, param=param))

    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise reject("[] is too short - 'messages'", "messages")
    pending: dict[str, int] = {}  # tool_call_id -> index of the assistant message that asked
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                raise reject("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                             "message with 'tool_calls'.", f"messages.[{i}].role")
            pending.pop(message.get("tool_call_id"))
            continue
        if pending:
            asked = min(pending.values())
            raise reject("An assistant message with 'tool_calls' must be followed by tool messages responding to "
                         "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                         f"{', '.join(pending)}", f"messages.[{asked}].role")
        if role not in ("system", "developer", "user", "assistant"):
            raise reject(f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
                         f"'function', 'tool', and 'developer'.", f"messages[{i}].role")
        calls = message.get("tool_calls") if role == "assistant" else None
        for call in calls or ():
            pending[str(call.get("id"))] = i
    if pending:
        raise reject("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                     "'tool_call_id'. The following tool_call_ids did not have response messages: "
                     f"{', '.join(pending)}", f"messages.[{min(pending.values())}].role")


def _validate_responses(body: Mapping[str, Any]) -> None:
    items = body.get("input")
    if isinstance(items, str) or items is None:
        return
    called: set[str] = set()
    answered: set[str] = set()
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "function_call":
            called.add(str(item.get("call_id")))
        elif item.get("type") == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id not in called:
                raise _Reject(400, _error("responses", "invalid_request_error",
                                          f"No tool call found for function call output with call_id {call_id}.",
                                          param="input"))
            answered.add(call_id)
    missing = sorted(called - answered)
    if missing:
        raise _Reject(400, _error("responses", "invalid_request_error",
                                  f"No tool output found for function call {missing[0]}.", param="input"))


# --------------------------------------------------------------------------------------------------
# Errors, with the real APIs' shapes


def _error(api: str | None, kind: str, message: str, *, param: str | None = None,
           code: str | None = None) -> dict[str, Any]:
    if api == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message},
                "request_id": "req_fake_" + hashlib.blake2b(message.encode(), digest_size=6).hexdigest()}
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _not_found(api: str | None, method: str, path: str) -> dict[str, Any]:
    if path.startswith(MESSAGES):
        return _error("anthropic", "not_found_error", "Not Found")
    return _error(api, "invalid_request_error", f"Invalid URL ({method} {path})")


def _overflow_error(api: str, input_tokens: int, max_tokens: int | None, window: int) -> dict[str, Any]:
    """The error each provider returns when the request does not fit (see CATALOG for the originals)."""
    if api == "anthropic":
        if input_tokens > window:
            message = f"prompt is too long: {input_tokens} tokens > {window} maximum"
        else:
            message = (f"input length and `max_tokens` exceed context limit: {input_tokens} + {max_tokens} > "
                       f"{window}, decrease input length or `max_tokens` and try again")
        return _error(api, "invalid_request_error", message)
    if api == "responses":
        return _error(api, "invalid_request_error", "Your input exceeds the context window of this model. Please "
                      "adjust your input and try again.", param="input", code="context_length_exceeded")
    if max_tokens:
        message = (f"This model's maximum context length is {window} tokens. However, you requested "
                   f"{input_tokens + max_tokens} tokens ({input_tokens} in the messages, {max_tokens} in the "
                   f"completion). Please reduce the length of the messages or completion.")
    else:
        message = (f"This model's maximum context length is {window} tokens. However, your messages resulted in "
                   f"{input_tokens} tokens. Please reduce the length of the messages.")
    return _error(api, "invalid_request_error", message, param="messages", code="context_length_exceeded")


def _output_cap_error(api: str, model: str, max_tokens: int, cap: int) -> dict[str, Any]:
    if api == "anthropic":
        return _error(api, "invalid_request_error", f"max_tokens: {max_tokens} > {cap}, which is the maximum allowed "
                      f"number of output tokens for {model}")
    param = "max_output_tokens" if api == "responses" else "max_tokens"
    return _error(api, "invalid_request_error", f"{param} is too large: {max_tokens}. This model supports at most "
                  f"{cap} completion tokens, whereas you provided {max_tokens}.", param=param, code="invalid_value")


# --------------------------------------------------------------------------------------------------
# Answers


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


def _fit(text: str, budget: int, counter: TokenCounter) -> tuple[str, bool]:
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
class _OutCall:
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


def _call_id(api: str, serial: int, index: int) -> str:
    return f"{'toolu' if api == 'anthropic' else 'call'}_fake_{serial:06d}_{index}"


def _anthropic_message(serial: int, model: str, text: str, calls: Sequence[_OutCall], usage: Mapping[str, int],
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


def _chat_completion(serial: int, model: str, text: str, calls: Sequence[_OutCall], usage: Mapping[str, int],
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


def _responses_response(serial: int, model: str, text: str, calls: Sequence[_OutCall], usage: Mapping[str, int],
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


# --------------------------------------------------------------------------------------------------
# Streaming: each API's server-sent events, built from the complete answer


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


__all__ = [
    "CHAT",
    "COUNT_TOKENS",
    "MESSAGES",
    "RESPONSES",
    "FakeProvider",
    "ForcedResponse",
    "RecordedRequest",
    "count_request_tokens",
    "request_messages",
    "respond_to",
    "summarize",
]
