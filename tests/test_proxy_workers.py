"""Stateless workers on one PostgreSQL: `ctxwin proxy --postgres DSN` processes (real uvicorn
servers) in front of the FakeProvider share sessions.

- One session's requests (some streamed) alternating between two workers are forwarded as one
  worker forwards them, byte for byte but for the random entry ids in recall refs, with as many
  compactions.
- The same request sent to both workers at once, at the turn that compacts, compacts once (the
  per-session advisory lock; without it both would sync the new messages and compact).
- A worker SIGKILLed while the upstream is slow loses no acknowledged entry (every entry committed
  before a response reached its client is still there, the proxy_request notes included) and the
  session continues on the other worker, the killed request's messages stored once. A worker killed
  the moment a response reached its client has committed that request's entry.
- `--workers 2` serves behind one port from two processes.
- The store itself: a lease waits while another worker holds the session and then sees what that
  worker wrote; a session held too long is refused with a typed error; a cancelled lease (a client
  that hung up) gives the session back; a worker keeps a bounded number of sessions open.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxwin.errors import SessionLockedError
from ctxwin.proxy.sessions import EngineSpec
from ctxwin.proxy.shared import PostgresSessionStore
from ctxwin.store.entries import CompactionEntry, MessageEntry, ProxyRequestEntry, parse
from ctxwin.store.session import Session
from ctxwin.testing import FakeProvider, Reply
from ctxwin.testing.scripted import ModelRequest
from proxy_procs import RunningProxy, running_proxy

pytestmark = pytest.mark.postgres

WINDOW = 60_000  # small enough that a few dozen turns compact (ctxwin compacts at 30 % of it)
TURNS = 40
HEADERS = {"x-api-key": "worker-test-key", "anthropic-version": "2023-06-01"}
TOOLS = [{"name": "Read", "description": "Read a file.",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
ENTRY_REF = re.compile(r"entry:[0-9a-f]+")
SLOW_S = 30.0  # how long the upstream holds the request a worker is killed in (released earlier)
KILLS = 4  # workers killed the moment their answer arrived (each a race the entry must never lose)


@dataclass
class Gate:
    """The fake model: answers at once, or, when `slow` is set, holds the request until `release`
    (the worker forwarding it is killed meanwhile)."""

    slow: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def __call__(self, request: ModelRequest) -> Reply:
        if self.slow.is_set():
            self.arrived.set()
            self.release.wait(SLOW_S)
        return Reply("Noted.")


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeProvider, Gate]]:
    gate = Gate()
    with FakeProvider(model=gate) as fake:
        yield fake, gate
        gate.release.set()


@pytest.fixture(scope="module")
def two_workers(upstream: tuple[FakeProvider, Gate], postgres_dsn: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningProxy, RunningProxy]]:
    tmp = tmp_path_factory.mktemp("workers")
    args = ("--postgres", postgres_dsn, "--window", str(WINDOW))
    with running_proxy(upstream[0].anthropic_base_url, *args, tmp=tmp) as a, \
         running_proxy(upstream[0].anthropic_base_url, *args, tmp=tmp) as b:
        yield a, b


def history(turns: int, task: str = "Refactor the parser module and keep every test green.") -> list[dict[str, Any]]:
    """An agent's history after `turns` tool rounds: the agent's reasoning (which masking leaves alone,
    so the history grows to a compaction) and distinct file reads of ~2,500 characters each."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for n in range(turns):
        call = f"toolu_{n:04d}"
        lines = "\n".join(f"{k:>4}  def handler_{n}_{k}(request): return route(request, '{n}.{k}')" for k in range(36))
        thought = " ".join(f"Part {n} step {k}: route {n}.{k} must keep its signature." for k in range(30))
        messages += [{"role": "assistant", "content": [{"type": "text", "text": thought},
                                                       {"type": "tool_use", "id": call, "name": "Read",
                                                        "input": {"path": f"src/parser/part_{n}.py"}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": lines}]}]
    return messages


def send(proxy: RunningProxy, session: str, turns: int, *, stream: bool = False) -> httpx.Response:
    """The agent's request after `turns` rounds, answered in full (a stream read to its end)."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "tools": TOOLS, "messages": history(turns),
            "stream": stream}
    answer = httpx.post(f"{proxy.url}/v1/messages", json=body, headers={**HEADERS, "x-ctxwin-session": session},
                        timeout=60)
    if answer.status_code == 200:
        assert ("event: message_stop" in answer.text) if stream else answer.json()["type"] == "message"
    return answer


def store_id(dsn: str, header: str) -> str:
    """The store's id of the session the proxy named after this header (the header plus a hash)."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT session_id FROM ctxwin_sessions WHERE session_id LIKE %s",
                            (f"{header}-%",)).fetchall()
    assert len(rows) == 1, rows
    return str(rows[0][0])


def entries(dsn: str, header: str) -> list[tuple[str, Any]]:
    """(id, typed entry) of every entry of the session, in the order written, every branch."""
    with Session.postgres(dsn, store_id(dsn, header), readonly=True) as log:
        return [(e.id, parse(e.kind, e.payload, entry_id=e.id)) for e in log]


def count(found: list[tuple[str, Any]], kind: type) -> int:
    return sum(isinstance(entry, kind) for _, entry in found)


def forwarded_since(fake: FakeProvider, start: int) -> list[str]:
    """The messages of each request forwarded since `start`, as JSON with the entry ids in recall refs
    made alike (they are random per session; everything else must be the same bytes)."""
    return [ENTRY_REF.sub("entry:ID", json.dumps(r.body["messages"])) for r in fake.requests[start:]]


def test_one_session_alternating_between_two_workers_is_served_as_by_one(
        two_workers: tuple[RunningProxy, RunningProxy], upstream: tuple[FakeProvider, Gate], postgres_dsn: str) -> None:
    a, b = two_workers
    fake = upstream[0]
    start = len(fake.requests)
    for turn in range(TURNS):  # every third answer streamed: a stream holds the lease until its end
        assert send(a if turn % 2 == 0 else b, "alternating", turn, stream=turn % 3 == 2).status_code == 200
    alternating = forwarded_since(fake, start)
    start = len(fake.requests)
    for turn in range(TURNS):
        assert send(a, "one-worker", turn, stream=turn % 3 == 2).status_code == 200
    assert forwarded_since(fake, start) == alternating  # the same requests, one by one

    shared, single = entries(postgres_dsn, "alternating"), entries(postgres_dsn, "one-worker")
    assert count(shared, CompactionEntry) == count(single, CompactionEntry) >= 2
    assert count(shared, ProxyRequestEntry) == TURNS
    assert count(shared, MessageEntry) == count(single, MessageEntry) == 1 + 2 * (TURNS - 1)


def test_the_turn_that_compacts_sent_to_both_workers_at_once_compacts_once(
        two_workers: tuple[RunningProxy, RunningProxy], postgres_dsn: str) -> None:
    a, b = two_workers
    compacting = None
    for turn in range(TURNS):  # find the turn at which this conversation first compacts
        assert send(a, "probe", turn).status_code == 200
        if count(entries(postgres_dsn, "probe"), CompactionEntry):
            compacting = turn
            break
    assert compacting is not None
    for turn in range(compacting):
        assert send(a if turn % 2 else b, "race", turn).status_code == 200
    assert count(entries(postgres_dsn, "race"), CompactionEntry) == 0
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda proxy: send(proxy, "race", compacting), (a, b)))
    assert [r.status_code for r in answers] == [200, 200]
    found = entries(postgres_dsn, "race")
    assert count(found, CompactionEntry) == 1
    assert count(found, MessageEntry) == 1 + 2 * compacting  # the new messages were stored once
    assert count(found, ProxyRequestEntry) == compacting + 2


def test_a_worker_killed_mid_request_loses_nothing_acknowledged(
        upstream: tuple[FakeProvider, Gate], postgres_dsn: str, tmp_path: Path) -> None:
    fake, gate = upstream
    args = ("--postgres", postgres_dsn, "--window", str(WINDOW))
    with running_proxy(fake.anthropic_base_url, *args, tmp=tmp_path) as c, \
         running_proxy(fake.anthropic_base_url, *args, tmp=tmp_path) as d:
        acknowledged: set[str] = set()
        turns = 6
        for turn in range(turns):
            assert send(c if turn % 2 == 0 else d, "killed", turn).status_code == 200
            # Read at once, before anything else can happen: what the client was answered for.
            acknowledged |= {entry_id for entry_id, _ in entries(postgres_dsn, "killed")}
        assert count(entries(postgres_dsn, "killed"), ProxyRequestEntry) == turns

        gate.arrived.clear()
        gate.slow.set()
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(send, c, "killed", turns)
            assert gate.arrived.wait(30), "the request never reached the upstream"
            c.kill()  # SIGKILL while the upstream holds the request
            with pytest.raises(httpx.HTTPError):
                pending.result(timeout=30)
        gate.slow.clear()
        gate.release.set()

        after_kill = entries(postgres_dsn, "killed")
        assert acknowledged <= {entry_id for entry_id, _ in after_kill}
        assert count(after_kill, ProxyRequestEntry) == turns  # the killed request was never answered

        # The session goes on on the other worker: the agent resends the same request.
        for turn in range(turns, turns + 3):
            assert send(d, "killed", turn).status_code == 200
        final = entries(postgres_dsn, "killed")
        assert {entry_id for entry_id, _ in after_kill} <= {entry_id for entry_id, _ in final}
        assert count(final, MessageEntry) == 1 + 2 * (turns + 2)  # each message once, the killed turn's too
        assert count(final, ProxyRequestEntry) == turns + 3


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_response_that_reached_its_client_has_its_entry_committed(
        upstream: tuple[FakeProvider, Gate], postgres_dsn: str, tmp_path: Path, stream: bool) -> None:
    fake = upstream[0]
    session = f"acknowledged-{'streamed' if stream else 'whole'}"
    answered = 0
    with running_proxy(fake.anthropic_base_url, "--postgres", postgres_dsn, tmp=tmp_path) as other:
        for turn in range(KILLS):
            with running_proxy(fake.anthropic_base_url, "--postgres", postgres_dsn, tmp=tmp_path) as worker:
                assert send(worker, session, turn, stream=stream).status_code == 200
                answered += 1
                worker.kill()  # at once: nothing the worker does after its client has the answer survives
            assert send(other, session, turn).status_code == 200  # the session goes on elsewhere
            answered += 1
    assert count(entries(postgres_dsn, session), ProxyRequestEntry) == answered


def test_two_workers_behind_one_port(upstream: tuple[FakeProvider, Gate], postgres_dsn: str, tmp_path: Path) -> None:
    fake = upstream[0]
    with running_proxy(fake.anthropic_base_url, "--postgres", postgres_dsn, "--workers", "2", tmp=tmp_path) as proxy:
        deadline = time.monotonic() + 30
        while len(children(proxy.process.pid)) < 2:
            assert time.monotonic() < deadline, "uvicorn did not start two workers"
            time.sleep(0.1)
        sessions = [f"port-{n}" for n in range(6)]
        with ThreadPoolExecutor(6) as pool:
            for turn in range(4):
                codes = list(pool.map(lambda name, t=turn: send(proxy, name, t).status_code, sessions))
                assert codes == [200] * len(sessions)
        for name in sessions:
            assert count(entries(postgres_dsn, name), ProxyRequestEntry) == 4
        # The live page reads the shared store: whichever worker answers shows every worker's sessions.
        for _ in range(4):
            listing = httpx.get(f"{proxy.url}/ctxwin/sessions.json", timeout=30)
            assert listing.status_code == 200
            shown = {row["session"]: row["requests"] for row in listing.json() if row["session"].startswith("port-")}
            assert sorted(shown.values()) == [4] * len(sessions)


def children(pid: int) -> list[int]:
    """Process ids whose parent is `pid` (uvicorn's worker processes)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


# --------------------------------------------------------------------------------------------------
# The store itself, two of them in one process standing for two workers


def spec() -> EngineSpec:
    return EngineSpec(model="claude-sonnet-4-5", policy="ctxwin")


def test_a_lease_waits_for_the_other_worker_and_catches_up_with_what_it_wrote(postgres_dsn: str) -> None:
    async def run() -> None:
        one, two = PostgresSessionStore(postgres_dsn), PostgresSessionStore(postgres_dsn, lock_timeout=10)
        try:
            async with one.lease("store-catch-up", spec()) as engine:
                engine.sync([{"role": "user", "content": "first"}])
                waiting = asyncio.ensure_future(_messages(two, "store-catch-up"))
                await asyncio.sleep(0.3)
                assert not waiting.done()  # the other worker waits while this one holds the session
                engine.sync([{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"}])
            assert await waiting == ["first", "second"]
            async with one.lease("store-catch-up", spec()) as engine:  # two wrote nothing: the cache holds
                assert [m.text for m in engine.messages] == ["first", "second"]
            assert (one.reopened, two.reopened) == (0, 0)
            async with two.lease("store-catch-up", spec()) as engine:
                engine.sync([{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"},
                             {"role": "user", "content": "third"}])
            async with one.lease("store-catch-up", spec()) as engine:
                assert [m.text for m in engine.messages] == ["first", "second", "third"]
            # It saw that two had advanced the session, and applied what two appended (issue 26: it read
            # the whole log again before, `reopened == 1`).
            assert (one.reopened, one.caught_up) == (0, 1)
        finally:
            await one.aclose()
            await two.aclose()

    asyncio.run(run())


async def _messages(store: PostgresSessionStore, session: str) -> list[str]:
    async with store.lease(session, spec()) as engine:
        return [m.text for m in engine.messages]


def test_a_session_held_too_long_is_refused_and_a_cancelled_lease_gives_it_back(postgres_dsn: str) -> None:
    async def run() -> None:
        one, two = PostgresSessionStore(postgres_dsn), PostgresSessionStore(postgres_dsn, lock_timeout=0.3)
        try:
            holder = asyncio.ensure_future(_hold(one, "store-cancel"))
            await asyncio.sleep(0.3)
            with pytest.raises(SessionLockedError, match="busy"):
                await _messages(two, "store-cancel")
            holder.cancel()  # a client that hung up mid-request
            with pytest.raises(asyncio.CancelledError):
                await holder
            assert await _messages(two, "store-cancel") == []  # given back, to the other worker too
            assert await _messages(one, "store-cancel") == []
        finally:
            await one.aclose()
            await two.aclose()

    asyncio.run(run())


async def _hold(store: PostgresSessionStore, session: str) -> None:
    async with store.lease(session, spec()):
        await asyncio.sleep(60)


def test_a_worker_keeps_at_most_max_cached_sessions_open(postgres_dsn: str) -> None:
    async def run() -> None:
        store = PostgresSessionStore(postgres_dsn, max_cached=3)
        try:
            for n in range(6):
                async with store.lease(f"store-cache-{n}", spec()) as engine:
                    engine.sync([{"role": "user", "content": f"session {n}"}])
            assert store.cached == 3
            assert await _messages(store, "store-cache-0") == ["session 0"]  # closed, and read back from the log
            assert {f"store-cache-{n}" for n in range(6)} <= set(store.session_ids())
        finally:
            await store.aclose()

    asyncio.run(run())
