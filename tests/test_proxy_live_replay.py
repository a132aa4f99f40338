"""Real sessions as live traffic: every recorded model call of the three long shared Claude Code
sessions and the Pi session, sent to the proxy as the harness sent it (the whole history so far, in
Anthropic format, `evaluation.live`), over a real socket, in front of the FakeProvider, which
validates every forwarded request as the API does and enforces the window.

Checked per session:
- every forwarded request was accepted (valid, and input plus max_tokens within the window);
- the total forwarded input equals `replay(transcript, "ctxwin", max_output=8192)` within 1 %: the
  replay with the output reserve the live requests ask for (the proxy's engine takes its reserve
  from the request's `max_tokens`, and every trigger is a share of the budget that reserve leaves).
  Both are counted with the same estimator (the FakeProvider's counter is the engine's, memoized),
  and the proxy calibrates on the FakeProvider's usage, which is that same count, so its factor
  stays 1.0, as the replay's is without usage records. What can still differ: the Anthropic wire
  format merges a user's consecutive messages into one turn, which the proxy reads back as one
  message where the transcript has two (the results of parallel tools are read one message per
  result, as the transcript has them);
- the prefix reuse between consecutive forwarded requests (bytes of the messages they begin with in
  common, over bytes sent) is at least 90 %.

Time, on this shared 2-core machine: a Claude Code session 3-6 s, the Pi session (465 calls over histories of up to
970 messages) 15-25 s, marked slow. Most of it is the FakeProvider reading and counting every
forwarded request as the API would; the proxy's share is a few milliseconds a call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import orjson
import pytest

from conftest import shared_path
from ctxwin.evaluation.live import LIVE_MAX_TOKENS, live_calls
from ctxwin.evaluation.replay import replay
from ctxwin.proxy.apis import strip_cache_control
from ctxwin.proxy.config import ProxyConfig
from ctxwin.proxy.serve import build_app
from ctxwin.testing import FakeProvider
from ctxwin.testing.fake_provider import ForcedResponse, RecordedRequest
from ctxwin.tokens import CachedCounter, counter_for
from ctxwin.transcripts import load_transcript
from proxy_server import serve

POLICY = "ctxwin"
TOLERANCE = 0.01
MIN_PREFIX_REUSE = 0.90
SESSIONS = {
    "claude-code-4d5611e5": "claude-code/4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    "claude-code-8463c716": "claude-code/8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl",
    "claude-code-258c7280": "claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "pi": "pi/before-compaction.jsonl",
}
HEADERS = {"x-api-key": "live-replay-key", "anthropic-version": "2023-06-01", "content-type": "application/json"}


@dataclass
class Served:
    fake: FakeProvider
    url: str


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """The FakeProvider, and the proxy in front of it on a real socket (uvicorn in a thread, serving
    the app `ctxwin proxy` serves). Memoizing the fake's counter changes no count: it keeps
    the fake from re-estimating every message of every request (the test's main cost otherwise);
    so does a fixed answer (the default one reads the whole conversation once more). Prompt-cache
    accounting is off: the reuse is measured here from the bodies themselves."""
    counter = CachedCounter(counter_for("claude-opus-4-5"))
    with FakeProvider(counter=counter, prompt_cache=False) as fake, \
         serve(build_app(ProxyConfig(fake.anthropic_base_url, policy=POLICY))) as port:
        fake.force(ForcedResponse(text="Noted.", times=10**9))  # the same short answer, every call
        yield Served(fake, f"http://127.0.0.1:{port}")


def prefix_reuse(bodies: list[dict[str, object]]) -> float:
    """Bytes of each forwarded request's messages that repeat the previous request's first messages,
    over the bytes of the messages sent, across consecutive requests. The agent's own `cache_control`
    markers are left out of the comparison (they move every request and do not break a cache)."""
    shared = sent = 0
    previous: list[object] = []
    for body in bodies:
        messages = [strip_cache_control(m) for m in body["messages"]]  # type: ignore[union-attr]
        same = 0
        while same < min(len(messages), len(previous)) and messages[same] == previous[same]:
            same += 1
        if previous:
            shared += len(orjson.dumps(messages[:same]))
            sent += len(orjson.dumps(messages))
        previous = messages
    return shared / sent if sent else 1.0


@dataclass
class Replayed:
    """One session sent through the proxy: the requests it forwarded, and the replay's total."""

    calls: int
    forwarded: list[RecordedRequest]
    expected: int


@pytest.fixture(scope="module")
def replayed(served: Served) -> Callable[[str], Replayed]:
    """Sends a session through the proxy once per module, for the tests that read what it forwarded."""
    done: dict[str, Replayed] = {}

    def run(name: str) -> Replayed:
        if name not in done:
            done[name] = send_session(served, name)
        return done[name]

    return run


def send_session(served: Served, name: str) -> Replayed:
    transcript = load_transcript(shared_path(*SESSIONS[name].split("/")))
    calls = list(live_calls(transcript, session=f"live-{name}"))
    fake = served.fake
    before = len(fake.requests)
    with httpx.Client(base_url=served.url, timeout=120) as client:
        for call in calls:
            answer = client.post("/v1/messages", content=orjson.dumps(call.body), headers={**HEADERS, **call.headers})
            assert answer.status_code == 200, f"call at message {call.index}: {answer.status_code} {answer.text[:500]}"
            assert answer.json()["type"] == "message"
    # The replay with the output reserve the live requests ask for (their max_tokens): the proxy's engine
    # takes its reserve from the request, and the budget every trigger is a share of depends on it.
    expected = replay(transcript, POLICY, max_output=LIVE_MAX_TOKENS).cumulative_tokens
    return Replayed(len(calls), fake.requests[before:], expected)


@pytest.mark.parametrize("name", [*list(SESSIONS)[:-1], pytest.param("pi", marks=pytest.mark.slow)])
def test_every_forwarded_request_of_a_real_session_is_valid_fits_and_keeps_the_prefix(
        name: str, replayed: Callable[[str], Replayed], served: Served) -> None:
    run = replayed(name)
    assert len(run.forwarded) == run.calls  # one upstream request per call: no retries, no recall rounds
    assert all(r.status == 200 and r.input_tokens is not None for r in run.forwarded)
    window = served.fake.context_window
    assert all(r.input_tokens + r.body["max_tokens"] <= window for r in run.forwarded)  # type: ignore[operator]
    assert prefix_reuse([r.body for r in run.forwarded]) >= MIN_PREFIX_REUSE


@pytest.mark.parametrize("name", [
    "claude-code-4d5611e5",
    "claude-code-8463c716",
    "claude-code-258c7280",
    pytest.param("pi", marks=pytest.mark.slow),
])
def test_a_real_session_through_the_proxy_forwards_what_the_replay_prepares(
        name: str, replayed: Callable[[str], Replayed]) -> None:
    run = replayed(name)
    total = sum(r.input_tokens or 0 for r in run.forwarded)
    assert abs(total - run.expected) <= TOLERANCE * run.expected, (name, total, run.expected, total / run.expected)
