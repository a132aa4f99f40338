"""The proxy's hot path on PostgreSQL (issue 26 item 6): one transaction per request, and a log that
takes in what another worker appended (`refresh`) instead of being opened again. A real server
(`tests/pg.py`)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from ctxwin.proxy.config import ProxyConfig
from ctxwin.proxy.serve import build_app
from ctxwin.store.postgres import PostgresSessionLog, connect, lock_key
from ctxwin.testing import FakeProvider
from proxy_server import serve

pytestmark = pytest.mark.postgres
HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


@pytest.fixture
def session_id() -> str:
    return f"pg-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def log(postgres_dsn: str, session_id: str) -> Iterator[PostgresSessionLog]:
    opened = PostgresSessionLog(postgres_dsn, session_id)
    yield opened
    opened.close()


def rows(dsn: str, session_id: str) -> list[tuple[int, str, str]]:
    """(seq, kind or custom type, the inserting transaction) of a session's entries, as another
    connection sees them."""
    conn = connect(dsn)
    try:
        return [(int(r[0]), r[1] if r[1] != "custom" else json.loads(r[3])["type"], str(r[2])) for r in conn.execute(
            "SELECT seq, kind, xmin, payload FROM ctxwin_entries WHERE session_id = %s ORDER BY seq", (session_id,))]
    finally:
        conn.close()


def test_appends_between_begin_and_commit_are_one_transaction(log: PostgresSessionLog, postgres_dsn: str) -> None:
    log.append("message", {"role": "user", "content": [{"type": "text", "text": "before"}]})
    log.begin()
    ids = [log.append("message", {"role": "user", "content": [{"type": "text", "text": f"in {n}"}]}).id
           for n in range(3)]
    assert len(rows(postgres_dsn, log.session_id)) == 1  # not acknowledged yet: nobody else sees them
    log.commit()
    seen = rows(postgres_dsn, log.session_id)
    assert len(seen) == 4 and len({xmin for _, _, xmin in seen[1:]}) == 1  # one transaction
    assert [e.id for e in log.path()][1:] == ids


def test_a_rollback_undoes_the_appends_in_the_database_and_in_the_log(log: PostgresSessionLog,
                                                                       postgres_dsn: str) -> None:
    first = log.append("message", {"role": "user", "content": [{"type": "text", "text": "kept"}]})
    log.begin()
    log.append("message", {"role": "user", "content": [{"type": "text", "text": "undone"}]})
    log.branch(first.id)
    log.append("message", {"role": "user", "content": [{"type": "text", "text": "undone too"}]})
    log.rollback()
    assert len(log) == 1 and log.leaf_id == first.id and [e.id for e in log.path()] == [first.id]
    again = log.append("message", {"role": "user", "content": [{"type": "text", "text": "after"}]})
    assert [e.id for e in log.path()] == [first.id, again.id]
    assert [seq for seq, _, _ in rows(postgres_dsn, log.session_id)] == [0, 1]


def test_refresh_takes_in_what_another_writer_appended(log: PostgresSessionLog, postgres_dsn: str) -> None:
    mine = log.append("message", {"role": "user", "content": [{"type": "text", "text": "one"}]})
    assert log.refresh() == 0
    writer = lock_key("writer", log.session_id)
    log.conn.execute("SELECT pg_advisory_unlock(%s)", (writer,))  # as a proxy worker between two requests
    other = PostgresSessionLog(postgres_dsn, log.session_id)
    try:
        theirs = [other.append("message", {"role": "assistant", "content": [{"type": "text", "text": f"t{n}"}]}).id
                  for n in range(2)]
        branch = other.append("message", {"role": "user", "content": [{"type": "text", "text": "b"}]},
                              parent_id=mine.id).id
    finally:
        other.close()
    log.conn.execute("SELECT pg_advisory_lock(%s)", (writer,))
    assert log.refresh() == 3
    assert len(log) == 4 and log.leaf_id == branch == log.newest_id
    assert [e.id for e in log.path()] == [mine.id, branch]  # the jumps came along: the branch's path
    assert [e.id for e in log.path(theirs[-1])] == [mine.id, *theirs]
    assert log.refresh() == 0


def test_a_request_through_the_proxy_is_one_transaction(postgres_dsn: str, session_id: str) -> None:
    """Every entry a request writes (the messages it synced, its decisions, its calibration, its
    proxy_request record) commits in one transaction: one WAL flush per request, not one per entry."""
    with FakeProvider() as fake:
        app = build_app(ProxyConfig(upstream=fake.base_url, postgres=postgres_dsn))
        with serve(app) as port:
            messages: list[dict[str, object]] = []
            for n in range(3):
                messages.append({"role": "user", "content": f"turn {n}: please go on with the task"})
                body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages,
                        "stream": n == 2}
                answer = httpx.post(f"http://127.0.0.1:{port}/v1/messages", json=body, timeout=30,
                                    headers={**HEADERS, "x-ctxwin-session": session_id})
                assert answer.status_code == 200, answer.text
                messages.append({"role": "assistant", "content": f"done {n}"})
    conn = connect(postgres_dsn)  # the stored id is the header's plus the conversation's hash
    try:
        stored = conn.execute("SELECT session_id FROM ctxwin_sessions WHERE session_id LIKE %s",
                              (f"{session_id}-%",)).fetchone()[0]
    finally:
        conn.close()
    entries = rows(postgres_dsn, stored)
    per_transaction = Counter(xmin for _, _, xmin in entries)
    records = [xmin for _, kind, xmin in entries if kind == "proxy_request"]
    assert len(records) == 3 and len(per_transaction) == 3  # one transaction per request ...
    assert set(per_transaction) == set(records)  # ... holding that request's record
    assert all(count >= 2 for count in per_transaction.values())  # and what it synced with it
