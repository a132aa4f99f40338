"""A real PostgreSQL server for the store tests: one per test session, started on first use and
stopped at the end (`ctxwin.store.pgtemp`). `CTXWIN_PG_DSN` points the tests at an existing server
instead. Where no server can start, the tests that need one skip with the reason, and fail instead
under `CTXWIN_REQUIRE_SHARED=1` (as CI sets), so a broken CI setup cannot pass by skipping."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from ctxwin.store import pgtemp


def _unavailable(reason: str) -> None:
    if os.environ.get("CTXWIN_REQUIRE_SHARED") == "1":
        pytest.fail(f"CTXWIN_REQUIRE_SHARED=1 but PostgreSQL is unavailable: {reason}")
    pytest.skip(f"PostgreSQL is unavailable: {reason}")


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed (pip install 'ctxwin[postgres]')")
    given = os.environ.get("CTXWIN_PG_DSN")
    if given:
        yield given
        return
    reason = pgtemp.unavailable_reason()
    if reason:
        _unavailable(reason)
    try:
        server = pgtemp.start()
    except RuntimeError as error:
        _unavailable(str(error))
    try:
        pgtemp.wait_ready(server.dsn)
        yield server.dsn
    finally:
        server.stop()
