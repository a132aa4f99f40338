"""Sessions in PostgreSQL, for stateless workers: any worker can serve any request of any session.

`PostgresSessionStore` is the `SessionStore` of `proxy.sessions` behind `--postgres`. A request
leases its session's engine (`lease`) and, for the whole lease, holds the session's writer lock, a
PostgreSQL advisory lock (`store.postgres.lock_key("writer", session)`). That one lock keeps two
workers from syncing, compacting or noting into one session at once: everything the engine writes
happens inside a lease, a compaction (which runs inside `prepare`) included, so the store's separate
`compaction_lock` would add nothing here. Between requests the lock is released, and the connection,
the log and the engine stay cached in the worker.

A cached engine is only as fresh as the log was when the lease ended. On the next lease the log
takes in the rows another worker appended in between (`PostgresSessionLog.refresh`, one query) and
the engine applies just those (`ContextEngine.catch_up`: the reducer folds them in, or derives
everything again if the log branched under it), so what this worker sends next is what a worker that
never cached would send, at a cost proportional to what the other worker wrote (it was a rebuild
from the whole log: about 60 ms for a 170k-token session).

Durability: a lease is one transaction (`PostgresSessionLog.begin`): what a request writes (the
messages it synced, the decisions of its prepare, its calibration, its `ProxyRequestEntry`) is
committed once, with `synchronous_commit = on`, when the app settles the request (`settle`, just
before the caller has its answer's last bytes), instead of one fsync'd commit per entry. A dead
worker's connection takes its advisory locks (and its uncommitted transaction) with it, so the next
lease, on any worker, reads everything committed; a request whose answer never reached its caller
may lose what it synced, which the agent's next request (its whole history again) syncs anew. An
entry is acknowledged once the response it belongs to reached the client
(`tests/test_proxy_workers.py` kills a worker at both moments). A lease that ends in an exception
rolls back and drops the cached engine, so a half-done request is never continued from memory, only
from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from ctxwin.engine import ContextEngine
from ctxwin.errors import ArgumentError, SessionLockedError
from ctxwin.store.postgres import (
    LOCK_POLL_MAX_S,
    LOCK_POLL_S,
    PostgresSessionLog,
    connect,
    lock_key,
    try_advisory_lock,
)

from .config import ProxyConfig
from .sessions import EngineSpec, build_engine

LEASE_TIMEOUT_S = 120.0
"""How long a request waits for its session while another request of it (on any worker) is served:
longer than a slow model's answer, since one agent's requests of one session come one after another."""
MAX_CACHED = 32
"""Sessions a worker keeps open between requests (each holds one PostgreSQL connection); the least
recently used is closed past this. Two workers at this bound stay well under the server's default of
100 connections."""


@dataclass
class _Slot:
    """One session in this worker: the lock serializing this worker's own requests of it (the advisory
    lock is reentrant per connection, so it cannot), and, between requests, its open log and engine."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # requests holding or waiting for `lock`
    log: PostgresSessionLog | None = None
    engine: ContextEngine | None = None
    used_at: float = 0.0


class PostgresSessionStore:
    """The session store of one worker over PostgreSQL (see the module docstring)."""

    def __init__(self, dsn: str, *, lock_timeout: float = LEASE_TIMEOUT_S, max_cached: int = MAX_CACHED) -> None:
        self.dsn = dsn
        self.lock_timeout = lock_timeout
        self.max_cached = max_cached
        self._slots: dict[str, _Slot] = {}
        self._pending: set[asyncio.Future[None]] = set()  # sessions being given back
        self.reopened = 0
        """Leases that found their cached engine behind the log in a way it cannot catch up, and rebuilt it."""
        self.caught_up = 0
        """Leases that found another worker had advanced their session, and applied what it appended."""

    @classmethod
    def for_config(cls, config: ProxyConfig) -> PostgresSessionStore:
        if not config.postgres:
            raise ArgumentError("PostgresSessionStore needs config.postgres", "give the PostgreSQL DSN (--postgres)")
        return cls(config.postgres)

    @asynccontextmanager
    async def lease(self, session_id: str, spec: EngineSpec) -> AsyncIterator[ContextEngine]:
        """The session's engine, exclusively (across workers and within this one) until the block
        ends, current with the stored log. Raises `SessionLockedError` when the session stays busy
        for `lock_timeout` seconds."""
        slot = self._slots.setdefault(session_id, _Slot())
        slot.users += 1
        try:
            try:
                await asyncio.wait_for(slot.lock.acquire(), self.lock_timeout)
            except TimeoutError:
                raise _busy(session_id, self.lock_timeout) from None
            engine = await self._acquire_waiting(session_id, slot, spec)
            ok = False
            try:
                yield engine
                ok = True
            finally:
                await self._give_back(session_id, slot, ok=ok)
        finally:
            slot.users -= 1
            idle = self._evict()
            if idle:
                await asyncio.to_thread(_close_all, idle)

    async def _acquire_waiting(self, session_id: str, slot: _Slot, spec: EngineSpec) -> ContextEngine:
        """Tries the writer lock in a thread (the database calls block: off the event loop, so other
        sessions go on meanwhile) and, while another worker holds it, waits here, not in a thread:
        waiting requests must not use up the pool the engines' work runs in."""
        deadline = time.monotonic() + self.lock_timeout
        pause = LOCK_POLL_S
        while True:
            acquiring = asyncio.ensure_future(asyncio.to_thread(self._acquire, session_id, slot, spec))
            try:
                engine = await asyncio.shield(acquiring)
            except BaseException:
                # Failed, or cancelled while the thread goes on (it may yet take the writer lock).
                await self._give_back(session_id, slot, ok=False, acquiring=acquiring)
                raise
            if engine is not None:
                return engine
            try:
                if time.monotonic() >= deadline:
                    raise _busy(session_id, self.lock_timeout)
                await asyncio.sleep(pause)
            except BaseException:  # busy too long, or cancelled while waiting: nothing is held but ours
                slot.lock.release()
                raise
            pause = min(pause * 2, LOCK_POLL_MAX_S)

    async def _give_back(self, session_id: str, slot: _Slot, *, ok: bool,
                         acquiring: asyncio.Future[ContextEngine | None] | None = None) -> None:
        """Releases the writer lock, then this worker's lock of the session, in a task the caller's
        cancellation cannot stop: a client that hangs up cancels its request, and the session must
        still be given back (else no worker could have it again)."""
        async def give_back() -> None:
            try:
                if acquiring is not None:
                    with contextlib.suppress(BaseException):
                        await acquiring
                await asyncio.to_thread(self._release, session_id, slot, ok)
            finally:
                slot.lock.release()

        task = asyncio.ensure_future(give_back())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        await asyncio.shield(task)

    def _acquire(self, session_id: str, slot: _Slot, spec: EngineSpec) -> ContextEngine | None:
        """Takes the writer lock if it is free and returns an engine current with the stored log;
        None while another worker holds the session."""
        import psycopg

        if slot.log is not None and slot.engine is not None:
            try:
                if not try_advisory_lock(slot.log.conn, lock_key("writer", session_id), 0):
                    return None
                if slot.log.refresh():  # another worker advanced the session: take in what it appended
                    slot.engine.catch_up()
                    self.caught_up += 1
                if slot.log.leaf_id == slot.log.newest_id:
                    slot.log.begin()
                    return slot.engine
                self.reopened += 1  # the engine moved the leaf back without appending: as a fresh open
            except psycopg.Error:
                pass  # the cached connection broke (the server restarted): open again below
            _drop(slot)
        try:
            log = PostgresSessionLog(self.dsn, session_id, lock_timeout=0)  # takes the writer lock
        except SessionLockedError:
            return None
        try:
            slot.engine = build_engine(log, spec)
            log.begin()
        except BaseException:
            log.close()
            raise
        slot.log = log
        return slot.engine

    def settle(self, engine: ContextEngine) -> None:
        """Commits what the request wrote so far (its one transaction): called just before the caller
        has its answer, which is when its entries must be acknowledged."""
        for slot in self._slots.values():
            if slot.engine is engine and slot.log is not None:
                slot.log.commit()
                return

    def _release(self, session_id: str, slot: _Slot, ok: bool) -> None:
        """Lets the other workers have the session; keeps it open here unless the lease failed (the
        next lease then starts again from the log, never from a half-done engine)."""
        import psycopg

        if ok and slot.log is not None:
            try:
                slot.log.commit()
                slot.log.conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key("writer", session_id),))
                slot.used_at = time.monotonic()
                return
            except psycopg.Error:
                pass  # a broken connection holds no lock any more: forget it
        _drop(slot)

    def _evict(self) -> list[PostgresSessionLog]:
        """Forgets slots nobody uses, and takes the least recently used open sessions past
        `max_cached` out of the cache; returns their logs, to be closed off the event loop."""
        idle = [(name, slot) for name, slot in self._slots.items() if slot.users == 0 and not slot.lock.locked()]
        open_idle = sorted((slot.used_at, name) for name, slot in idle if slot.log is not None)
        excess = sum(1 for slot in self._slots.values() if slot.log is not None) - self.max_cached
        closing = []
        for _used, name in open_idle[:max(0, excess)]:
            log = self._slots.pop(name).log
            if log is not None:
                closing.append(log)
        for name, slot in idle:
            if slot.log is None:
                self._slots.pop(name, None)
        return closing

    @property
    def cached(self) -> int:
        """Sessions this worker holds open."""
        return sum(1 for slot in self._slots.values() if slot.log is not None)

    def session_ids(self) -> list[str]:
        """Every session in the database, whichever worker served it."""
        conn = connect(self.dsn)
        try:
            return [row[0] for row in conn.execute("SELECT session_id FROM ctxwin_sessions ORDER BY created")]
        finally:
            conn.close()

    async def aclose(self) -> None:
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        slots, self._slots = list(self._slots.values()), {}
        await asyncio.to_thread(_close_all, [slot.log for slot in slots if slot.log is not None])


def _drop(slot: _Slot) -> None:
    log, slot.log, slot.engine = slot.log, None, None
    if log is not None:
        log.conn.close()  # releases every advisory lock the connection holds


def _close_all(logs: list[PostgresSessionLog]) -> None:
    for log in logs:
        log.conn.close()


def _busy(session_id: str, timeout: float) -> SessionLockedError:
    return SessionLockedError(f"session {session_id} stayed busy for {timeout:g} s while another request of it "
                              "was served", "retry the request: one session's requests are served one at a time")


__all__ = ["LEASE_TIMEOUT_S", "MAX_CACHED", "PostgresSessionStore"]
