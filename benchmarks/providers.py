"""Benchmark of the provider clients against the fake provider on 127.0.0.1 (real HTTP, one process):

- per API (Anthropic Messages, OpenAI Chat, OpenAI Responses): median milliseconds per call, plain and
  streamed, for a tool-calling answer over a conversation of about `HISTORY_TOKENS` tokens;
- the clients' share of a streamed call: time spent parsing events and building the completion
  (`stream_parse_ms`), measured by feeding a recorded stream to the parser without the network;
- cancellation: milliseconds from setting the cancel event to the stream raising, while the client is
  blocked waiting for the server's next event; and what passing a cancel event that is never set costs
  a plain call (`complete_with_cancel_ms` against `complete_ms`).

Prints one JSON object on its last line.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from typing import Any

from ctxwin.errors import ModelCallCancelled
from ctxwin.messages import assistant, user
from ctxwin.providers import APIS, RetryPolicy, TextDelta, client_for
from ctxwin.providers.anthropic import anthropic_stream_events
from ctxwin.providers.base import SSE
from ctxwin.providers.openai import chat_stream_events, responses_stream_events
from ctxwin.testing import Call, FakeProvider, Reply
from ctxwin.testing.fake_provider import stream_events

CALLS = 30  # timed calls per API and mode
HISTORY_TOKENS = 8_000  # size of the conversation sent with every call
REPLY = Reply("I will read the module and search for its callers before changing anything. " * 4,
              (Call("read", {"path": "src/app.py", "offset": 1, "limit": 200}),
               Call("grep", {"pattern": "def main", "path": "src"})))
PARSERS = {"anthropic": anthropic_stream_events, "openai": chat_stream_events,
           "openai-responses": responses_stream_events}
WIRE = {"anthropic": "anthropic", "openai": "chat", "openai-responses": "responses"}


def timed(call: Any) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    history = [user("context " * HISTORY_TOKENS), assistant("noted"), user("Fix the bug in main.")]
    results: dict[str, Any] = {"calls": CALLS, "history_tokens": HISTORY_TOKENS}
    with FakeProvider(context_window=200_000, max_output=8_000, model=lambda request: REPLY) as fake:
        for api in APIS:
            url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
            with client_for(api, url, "bench-model", api_key="k", retry=RetryPolicy(attempts=1)) as client:
                client.complete(history, max_tokens=500)  # warm the connection
                plain = [timed(lambda c=client: c.complete(history, max_tokens=500)) for _ in range(CALLS)]
                streamed = [timed(lambda c=client: c.stream(history, max_tokens=500).until_done())
                            for _ in range(CALLS)]
                idle = threading.Event()  # a cancel event that is never set: what watching it costs
                watched = [timed(lambda c=client, e=idle: c.complete(history, max_tokens=500, cancel=e))
                           for _ in range(CALLS)]
            answer = fake.requests[-1].response
            events = [SSE(name or "", data if isinstance(data, str) else json.dumps(data))
                      for name, data in stream_events(WIRE[api], answer, include_usage=True)]
            parse = [timed(lambda p=PARSERS[api], e=events: list(p(iter(e)))) for _ in range(CALLS)]
            results[api] = {"complete_ms": round(statistics.median(plain), 2),
                            "complete_with_cancel_ms": round(statistics.median(watched), 2),
                            "stream_ms": round(statistics.median(streamed), 2),
                            "stream_events": len(events),
                            "stream_parse_ms": round(statistics.median(parse), 3)}
        fake.stream_delay = 1.0
        fake.model = lambda request: Reply("slow " * 50)
        with client_for("anthropic", fake.anthropic_base_url, "bench-model", api_key="k") as client:
            delays = []
            for _ in range(3):
                cancel = threading.Event()
                stream = client.stream([user("hi")], max_tokens=500, cancel=cancel)
                try:
                    for event in stream:
                        if isinstance(event, TextDelta):
                            set_at = time.perf_counter()
                            cancel.set()
                except ModelCallCancelled:
                    delays.append((time.perf_counter() - set_at) * 1000)
            results["cancel_to_raise_ms"] = round(statistics.median(delays), 1)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
