"""What only the PostgreSQL backend has: schema migrations, listing and deleting sessions in a
database. The log and blob contracts run on PostgreSQL in test_store.py and test_blobs.py."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest

from ctxwin.errors import InputError
from ctxwin.store import Session, SessionFormatError, SessionLockedError

pytestmark = pytest.mark.postgres


@pytest.fixture
def fresh_dsn(postgres_dsn: str) -> Iterator[str]:
    """A new, empty database on the test server (dropped afterwards)."""
    import psycopg

    name = f"ctxwin_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield postgres_dsn.replace("dbname=postgres", f"dbname={name}")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_migrations_apply_once_even_when_racing(fresh_dsn: str) -> None:
    from ctxwin.store.postgres import SCHEMA_VERSION, connect

    errors: list[BaseException] = []

    def first_use() -> None:
        try:
            connect(fresh_dsn).close()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    conn = connect(fresh_dsn)
    try:
        versions = [r[0] for r in conn.execute("SELECT version FROM ctxwin_schema ORDER BY version").fetchall()]
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        conn.execute("INSERT INTO ctxwin_schema VALUES (%s, 'later')", (SCHEMA_VERSION + 1,))
    finally:
        conn.close()
    with pytest.raises(SessionFormatError, match="upgrade ctxwin"):
        Session.postgres(fresh_dsn, "s")


def test_list_and_delete_sessions(fresh_dsn: str) -> None:
    from ctxwin.store.postgres import delete_postgres_session, list_postgres_sessions

    with Session.postgres(fresh_dsn, "a") as log:
        log.append("message", {}, timestamp="2030-01-01T00:00:00.000000Z")
        log.blobs.put(b"bytes")
    with Session.postgres(fresh_dsn, "b", meta={"origin": "test"}) as log:
        log.append("message", {})
        log.append("pin", {})
    rows = {r.session_id: r for r in list_postgres_sessions(fresh_dsn)}
    assert (rows["a"].entries, rows["a"].blobs, rows["a"].last_activity) == (1, 1, "2030-01-01T00:00:00.000000Z")
    assert rows["b"].entries == 2
    with Session.postgres(fresh_dsn, "b", readonly=True) as log:
        assert log.header["meta"] == {"origin": "test"}
    with Session.postgres(fresh_dsn, "a"), pytest.raises(SessionLockedError):
        delete_postgres_session(fresh_dsn, "a")
    assert delete_postgres_session(fresh_dsn, "a") == {"session_id": "a", "entries": 1, "blobs": 1}
    assert [r.session_id for r in list_postgres_sessions(fresh_dsn)] == ["b"]
    with pytest.raises(InputError, match="no session"):
        delete_postgres_session(fresh_dsn, "a")


def test_a_bad_dsn_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="cannot connect to PostgreSQL"):
        Session.postgres("host=127.0.0.1 port=1 user=nobody dbname=none connect_timeout=2", "s")


def test_a_dead_writer_releases_its_lock(postgres_dsn: str) -> None:
    """The writer lock belongs to the connection: when it goes away, so does the lock."""
    session_id = f"dead-{uuid.uuid4().hex[:8]}"
    log = Session.postgres(postgres_dsn, session_id)
    log.append("message", {})
    log.conn.close()  # as if the process died: no close(), no unlock
    with Session.postgres(postgres_dsn, session_id, lock_timeout=5) as again:
        assert len(again) == 1
