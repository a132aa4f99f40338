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

This module is the public face; the parts live beside it by job: `server` (the `FakeProvider`, its
scripting and dispatch), `httpd` (the HTTP layer), `request` (reading a request), `checks` (validation
and the window), `refusals` (the real error bodies), `answers` (the reply and response objects), `sse`
(the streams) and `cache` (the prompt cache).
"""

from ctxwin.testing.answers import respond_to, summarize
from ctxwin.testing.cache import MIN_CACHEABLE_TOKENS, OPENAI_CACHE_STEP
from ctxwin.testing.request import CHAT, COUNT_TOKENS, MESSAGES, RESPONSES, count_request_tokens, request_messages
from ctxwin.testing.server import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_OUTPUT,
    FakeProvider,
    ForcedResponse,
    RecordedRequest,
)
from ctxwin.testing.sse import stream_events

__all__ = [
    "CHAT",
    "COUNT_TOKENS",
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_OUTPUT",
    "MESSAGES",
    "MIN_CACHEABLE_TOKENS",
    "OPENAI_CACHE_STEP",
    "RESPONSES",
    "FakeProvider",
    "ForcedResponse",
    "RecordedRequest",
    "count_request_tokens",
    "request_messages",
    "respond_to",
    "stream_events",
    "summarize",
]
