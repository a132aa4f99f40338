"""The session-log contract, run against both backends (JSONL + SQLite index, and PostgreSQL)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwin.errors import InputError
from ctxwin.messages import Message, ToolCall, assistant, tool_result, user
from ctxwin.store import Entry, Session, SessionLockedError
from store_backends import LOG_BACKENDS, unique_id

Opener = Callable[..., Any]


@pytest.fixture(params=LOG_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_log(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Opener]:
    """`open_log(name="s", **options)` opens session `name` on the backend under test; every log is
    closed at the end of the test."""
    opened: list[Any] = []
    prefix = unique_id("t")
    dsn = request.getfixturevalue("postgres_dsn") if backend == "postgres" else None

    def opener(name: str = "s", **options: Any) -> Any:
        if dsn is None:
            log = Session.open(tmp_path / name, **options)
        else:
            log = Session.postgres(dsn, f"{prefix}-{name}", **options)
        opened.append(log)
        return log

    yield opener
    for log in opened:
        log.close()


def naive_path(entries: dict[str, Entry], leaf: str | None) -> list[str]:
    out = []
    while leaf is not None:
        out.append(leaf)
        leaf = entries[leaf].parent_id
    return out[::-1]


def test_append_get_iterate_and_reopen(open_log: Opener) -> None:
    log = open_log()
    assert log.leaf_id is None and len(log) == 0 and list(log.path()) == []
    first = log.append("message", user("hello").to_dict())
    second = log.append("message", assistant("hi there").to_dict())
    assert (first.parent_id, second.parent_id, log.leaf_id) == (None, first.id, second.id)
    assert len(first.id) == 8 and first.id != second.id
    assert first.timestamp < second.timestamp or first.timestamp == second.timestamp
    assert log.get(first.id) == first
    assert list(log) == [first, second]
    assert Message.from_dict(log.get(second.id).payload) == assistant("hi there")
    log.close()
    again = open_log()
    assert list(again) == [first, second]
    assert again.leaf_id == second.id
    third = again.append("pin", {"entry": first.id})
    assert third.parent_id == second.id


def test_payloads_roundtrip_exactly(open_log: Opener) -> None:
    log = open_log()
    call = ToolCall("c1", "bash", {"cmd": "ls -la ~/é"})
    messages = [user("naïve 😀 \u2028 \x00 end"), assistant("", call), tool_result("c1", "x" * 5000, name="bash"),
                user("lone surrogate \udc80 kept")]
    entries = [log.append("message", m.to_dict()) for m in messages]
    log.close()
    log = open_log()
    assert [Message.from_dict(e.payload) for e in log] == messages
    assert [log.get(e.id).payload for e in entries] == [m.to_dict() for m in messages]


def test_branches_and_paths(open_log: Opener) -> None:
    log = open_log()
    a = log.append("message", {"n": "a"})
    b = log.append("message", {"n": "b"})
    c = log.append("message", {"n": "c"})
    log.branch(a.id)
    d = log.append("label", {"n": "d"})
    e = log.append("message", {"n": "e"}, parent_id=b.id)
    log.branch(None)
    root2 = log.append("label", {"n": "r2"})  # any kind; "checkpoint" is no longer one (never written)
    assert [x.id for x in log.path(c.id)] == [a.id, b.id, c.id]
    assert [x.id for x in log.path(d.id)] == [a.id, d.id]
    assert [x.id for x in log.path(e.id)] == [a.id, b.id, e.id]
    assert [x.id for x in log.path()] == [root2.id]
    assert sorted(log.leaves()) == sorted([c.id, d.id, e.id, root2.id])
    log.close()
    log = open_log()
    assert log.leaf_id == root2.id  # the newest entry
    assert [x.id for x in log.path(e.id)] == [a.id, b.id, e.id]
    path = log.path(d.id)
    assert len(path) == 2 and path[-1] == d and path[0] == a and path[:] == [a, d]


def test_bad_input_is_refused_clearly(open_log: Opener) -> None:
    log = open_log()
    log.append("message", {})
    with pytest.raises(InputError, match="unknown entry kind"):
        log.append("nonsense", {})
    with pytest.raises(InputError, match="payload must be a dict"):
        log.append("message", ["no"])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="not JSON"):
        log.append("message", {"x": object()})
    with pytest.raises(InputError, match="no entry"):
        log.append("message", {}, parent_id="deadbeef")
    with pytest.raises(InputError, match="no entry"):
        log.branch("deadbeef")
    with pytest.raises(InputError, match="no entry"):
        log.get("deadbeef")
    assert len(log) == 1  # nothing half-appended by the refusals
    log.close()
    with pytest.raises(InputError, match="closed"):
        log.append("message", {})
    with pytest.raises(InputError, match="unknown durability"):
        open_log("other", durability="sometimes")


def test_second_writer_is_refused_then_waits(open_log: Opener) -> None:
    log = open_log()
    log.append("message", {"n": 1})
    with pytest.raises(SessionLockedError, match="already open for writing") as refused:
        open_log()
    assert refused.value.hint and "read-only" in refused.value.hint
    started = time.monotonic()
    with pytest.raises(SessionLockedError, match=r"after waiting 0\.3 s"):
        open_log(lock_timeout=0.3)
    assert time.monotonic() - started >= 0.3
    # a waiting writer gets the session once the first one closes
    threading.Timer(0.3, log.close).start()
    second = open_log(lock_timeout=10)
    assert [e.payload for e in second] == [{"n": 1}]
    second.append("message", {"n": 2})


def test_readers_need_no_lock(open_log: Opener) -> None:
    writer = open_log()
    first = writer.append("message", {"n": 1})
    reader = open_log(readonly=True)
    assert list(reader) == [first]
    with pytest.raises(InputError, match="read-only"):
        reader.append("message", {})
    writer.append("message", {"n": 2})  # the writer is not disturbed by the reader
    assert len(open_log(readonly=True)) == 2


def test_readonly_open_of_a_missing_session_fails(open_log: Opener) -> None:
    with pytest.raises(InputError, match="no session"):
        open_log("absent", readonly=True)


def test_compaction_lock_is_exclusive(open_log: Opener) -> None:
    log = open_log()
    log.append("message", {})
    worker = open_log(readonly=True)
    with log.compaction_lock():
        with pytest.raises(SessionLockedError, match="already being compacted"), worker.compaction_lock():
            pass
        with pytest.raises(SessionLockedError), log.compaction_lock():
            pass
    with worker.compaction_lock(timeout=1):  # free again
        log.append("compaction", {"summary": "s"})


def test_batch_durability_keeps_everything_after_close(open_log: Opener) -> None:
    log = open_log(durability="batch")
    ids = [log.append("message", {"i": i}).id for i in range(1000)]
    log.close()
    again = open_log()
    assert [e.id for e in again] == ids
    assert [e.id for e in again.path()] == ids


def test_session_blobs(open_log: Opener) -> None:
    log = open_log()
    entry = log.append("message", {})
    info = log.blobs.put(b"spilled output\n", media_type="text/plain", origin=entry.id)
    log.close()
    again = open_log()
    assert again.blobs.get(info.handle) == b"spilled output\n"
    assert again.blobs.stat(info.handle).origin == entry.id


def test_ids_are_unique_over_many_appends(open_log: Opener) -> None:
    log = open_log(durability="batch")
    ids = [log.append("custom", {}).id for _ in range(3000)]
    assert len(set(ids)) == 3000 and all(len(i) == 8 for i in ids)


def test_kind_counts_and_newest_timestamp(open_log: Opener) -> None:
    log = open_log()
    log.append("message", {}, timestamp="2024-01-01T00:00:00.000000Z")
    log.append("pin", {}, timestamp="2024-05-01T00:00:00.000000Z")
    log.append("message", {}, timestamp="2024-03-01T00:00:00.000000Z")
    assert log.kind_counts() == {"message": 2, "pin": 1}
    assert log.newest_timestamp() == "2024-05-01T00:00:00.000000Z"


# An operation: ("append", parent choice) or ("branch", choice) or ("root",); choices index existing entries.
_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(min_value=-1, max_value=10_000)),
        st.tuples(st.just("branch"), st.integers(min_value=0, max_value=10_000)),
        st.tuples(st.just("root"), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_paths_match_a_naive_tree(open_log: Opener, ops: list[tuple[str, int]]) -> None:
    """Whatever sequence of appends, branches and new roots, every path equals the naive walk up
    the parent links, before and after reopening."""
    name = unique_id("h")
    log = open_log(name, durability="batch")
    entries: dict[str, Entry] = {}
    order: list[str] = []
    for op, choice in ops:
        if op == "append":
            parent = order[choice % len(order)] if order and choice >= 0 else None
            entry = log.append("message", {"k": len(order)}, parent_id=parent)
            entries[entry.id] = entry
            order.append(entry.id)
        elif op == "branch" and order:
            log.branch(order[choice % len(order)])
        elif op == "root":
            log.branch(None)
    for reopened in (False, True):
        if reopened:
            log.close()
            log = open_log(name)
        assert [e.id for e in log] == order
        for entry_id in order:
            assert [e.id for e in log.path(entry_id)] == naive_path(entries, entry_id)
        if reopened:
            assert log.leaf_id == (order[-1] if order else None)
