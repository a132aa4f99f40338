"""`engine.catch_up()`: an engine whose log another writer appended to (a proxy's workers share one
PostgreSQL log) folds in only what was appended since it last read the log, and then sends exactly
what an engine freshly opened on the log would send; only a log that branched under it is read again
from the start."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwin.engine import ContextEngine
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.store.blobs import FileBlobStore
from ctxwin.store.in_memory import MemorySessionLog

NOW = 1_700_000_000.0


def clock() -> float:
    return NOW


def engine_on(log: MemorySessionLog, policy: str, window: int) -> ContextEngine:
    return ContextEngine(log, model="gpt-4o", policy=policy, window=window, max_output=1_000, clock=clock)


def copy_of(log: MemorySessionLog) -> MemorySessionLog:
    """The same entries (same ids: an in-memory log numbers them in append order) and leaf in another
    log with the same blob store, so a fresh engine can prepare on it without writing its own decisions
    into the log under test."""
    clone = MemorySessionLog(log.session_id, log.blobs, clock=clock)
    for entry in log:
        assert clone.append(entry.kind, entry.payload, parent_id=entry.parent_id).id == entry.id
    clone.branch(log.leaf_id)
    return clone


def payload(engine: ContextEngine, reports: bool = True) -> str:
    """What a request sends and, with `reports`, what the engine reports about it relative to what it
    remembers of its own earlier requests (how much of the previous one it repeats, a repair it
    already reported)."""
    prepared = engine.prepare()
    reported = [prepared.stable_prefix, prepared.prefix_kept, [e.to_dict() for e in prepared.events]]
    return json.dumps([prepared.to_anthropic(), prepared.budget, prepared.tokens, *(reported if reports else [])],
                      sort_keys=True)


IDS = itertools.count()


def round_messages(n: int, size: int, tool: str, lost: bool = False) -> list[Message]:
    """A user turn, then `n` tool rounds with outputs of about `size` lines (the same two commands with
    the same outputs again and again, so dedup has rereads to stub), then an answer. `lost`: the first
    call's result never arrives (repair answers it)."""
    out = [Message("user", (Text(f"turn: look at module m{n % 3} and fix test t{n}"),))]
    for k in range(n):
        call = ToolCall(f"c{next(IDS)}", tool, {"command": f"cat m{k % 2}.py"})
        out.append(Message("assistant", (Text(f"step {k}"), call)))
        if not (lost and k == 0):
            out.append(Message("tool", (ToolResult(call.id, (Text(f"a line of m{k % 2}\n" * size),), name=tool),)))
    out.append(Message("assistant", (Text(f"done with {n} steps"),)))
    return out


def feed(engine: ContextEngine, messages: list[Message], twin: ContextEngine | None = None) -> None:
    """As a harness does: prepare before each model call (each assistant message), append everything;
    `twin` gets the same calls, and every request the two build must be the same."""
    for message in messages:
        if message.role == "assistant":
            if twin is None:
                engine.prepare()
            else:
                assert payload(engine) == payload(twin)
        engine.append(message)
        if twin is not None:
            twin.append(message)


turns = st.tuples(st.integers(1, 5), st.sampled_from([3, 40, 400, 3_000]), st.sampled_from(["bash", "read"]),
                  st.sampled_from([False, False, False, True]))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.tuples(st.integers(0, 1), st.lists(turns, min_size=1, max_size=3)), min_size=2, max_size=6),
       policy=st.sampled_from(["ctxwin", "pi", "masking", "openclaw"]),
       window=st.sampled_from([12_000, 40_000]))
def test_a_writer_that_catches_up_sends_what_a_fresh_engine_sends(plan, policy: str, window: int, tmp_path) -> None:
    log = MemorySessionLog(blobs=FileBlobStore(tmp_path / "blobs"), clock=clock)
    writers = [engine_on(log, policy, window), engine_on(log, policy, window)]
    read = [0, 0]  # entries of the log each writer has taken in
    for who, session_turns in plan:
        engine = writers[who]
        before = len(log)
        applied = engine.catch_up()
        assert applied == before - read[who]  # exactly what the other writer appended, nothing read twice
        # From here on it behaves as an engine opened on the log now (on a copy of it) would: the same
        # requests, the same reports, also after what it remembers (dedup's outputs, what repair fixed)
        # comes into play on later calls.
        fresh = engine_on(copy_of(log), policy, window)
        # With nothing new, the engine still knows its own previous requests (a fresh one does not).
        assert payload(engine, reports=applied > 0) == payload(fresh, reports=applied > 0)
        for n, size, tool, lost in session_turns:
            feed(engine, round_messages(n, size, tool, lost), twin=fresh)
        read[who] = len(log)
        assert engine.catch_up() == 0  # its own appends are already in


def test_catch_up_reads_only_the_new_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    import ctxwin.engine.run as run

    log = MemorySessionLog(clock=clock)
    first, second = engine_on(log, "ctxwin", 200_000), engine_on(log, "ctxwin", 200_000)
    for _ in range(30):
        feed(first, round_messages(3, 20, "bash"))
    assert second.catch_up() == len(log)  # it opened on an empty log: everything is new to it
    before = len(log)
    feed(first, round_messages(2, 20, "bash"))
    parsed = []
    real_parse = run.parse
    monkeypatch.setattr(run, "parse", lambda *a, **k: parsed.append(a[0]) or real_parse(*a, **k))
    assert second.catch_up() == len(log) - before
    assert len(parsed) == len(log) - before  # the reducer saw the new entries only, not the whole log
    monkeypatch.undo()
    assert payload(second) == payload(engine_on(copy_of(log), "ctxwin", 200_000))


def test_a_log_branched_under_the_engine_is_read_again() -> None:
    log = MemorySessionLog(clock=clock)
    first, second = engine_on(log, "ctxwin", 200_000), engine_on(log, "ctxwin", 200_000)
    first.sync([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                {"role": "user", "content": "c"}])
    assert second.catch_up() == 3
    # The first writer's caller rewrote its history: the log continues on a branch from "a".
    first.sync([{"role": "user", "content": "a"}, {"role": "assistant", "content": "other"}])
    applied = second.catch_up()
    assert applied == len(log.path())  # the whole new path, taken in from the start
    assert [m.text for m in second.messages] == ["a", "other"]
    assert payload(second) == payload(engine_on(copy_of(log), "ctxwin", 200_000))
    assert second.catch_up() == 0


class BrokenSummarizer:
    """A summarizer whose every call fails (a model that is down): compactions fail, the breaker opens."""

    name = "broken"

    def summarize(self, *args, **kwargs):
        raise RuntimeError("the summary model is down")


def unique_rounds(engine: ContextEngine, count: int, lines: int) -> None:
    for _ in range(count):
        n = next(IDS)
        engine.append(Message("assistant", (ToolCall(f"b{n}", "bash", {"command": f"cat f{n}"}),)))
        engine.append(Message("tool", (ToolResult(f"b{n}", (Text(f"{n}: output line\n" * lines),), name="bash"),)))
        engine.prepare()


def broken_engine(log: MemorySessionLog) -> ContextEngine:
    return ContextEngine(log, model="gpt-4o", policy="pi", window=40_000, max_output=1_000, clock=clock,
                         summarizer=BrokenSummarizer())


def test_after_catching_up_the_breaker_is_the_one_a_fresh_engine_has() -> None:
    log = MemorySessionLog(clock=clock)
    first = broken_engine(log)
    first.append(Message("user", (Text("go"),)))
    unique_rounds(first, 30, 180)  # past Pi's trigger: every compaction fails, and the breaker opens
    assert first.prepare().tokens > first.window - 16_384
    assert not any(e.is_compaction_failure for e in first.prepare().events)  # open: not tried again
    second = broken_engine(log)
    unique_rounds(second, 1, 3)
    assert first.catch_up() > 0
    fresh = broken_engine(copy_of(log))
    after, expected = payload(first), payload(fresh)
    assert "compaction" in expected  # the fresh engine tries again, and says it failed ...
    assert after == expected  # ... and so does the one that caught up


# --------------------------------------------------------------------------------------------------
# Two workers over one PostgreSQL log (the proxy's --workers over --postgres)


@pytest.mark.postgres
def test_a_worker_catches_up_with_what_another_worker_appended_to_postgres(postgres_dsn: str) -> None:
    """Two workers each keep their session's log and engine between requests and pass the writer lock
    (an advisory lock) back and forth, as `proxy/shared.py` does: the one that gets the session back
    folds in only the other's entries and then sends what an engine opened on the log would."""
    import uuid

    from ctxwin.proxy.sessions import DraftLog
    from ctxwin.store.postgres import PostgresSessionLog, lock_key, try_advisory_lock

    session_id = f"catch-up-{uuid.uuid4().hex[:8]}"
    key = lock_key("writer", session_id)

    def engine(log) -> ContextEngine:
        return ContextEngine(log, model="gpt-4o", policy="ctxwin", window=40_000, max_output=1_000, clock=clock)

    first_log = PostgresSessionLog(postgres_dsn, session_id)  # takes the writer lock
    second_log = None
    try:
        first = engine(first_log)
        feed(first, round_messages(4, 300, "bash"))
        first_log.conn.execute("SELECT pg_advisory_unlock(%s)", (key,))  # the lease ends
        second_log = PostgresSessionLog(postgres_dsn, session_id)  # another worker's lease
        second = engine(second_log)
        before = len(second_log)
        feed(second, round_messages(3, 300, "bash"))
        appended = len(second_log) - before
        second_log.conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        assert try_advisory_lock(first_log.conn, key, 5)  # back to the first worker
        assert first.catch_up() == appended
        assert len(first_log) == len(second_log)
        expected = payload(engine(DraftLog(first_log)))  # a fresh engine, its own appends kept in memory
        assert payload(first) == expected
        assert first.catch_up() == 0
    finally:
        first_log.close()
        if second_log is not None:
            second_log.close()
