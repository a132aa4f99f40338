"""The PostgreSQL backend: session logs and blobs in tables, for many processes or machines sharing
sessions. Same API and semantics as the JSONL backend (`jsonl.py`), with these equivalents:

- The schema is created and upgraded by numbered migrations (`MIGRATIONS`), applied once under a
  transaction-level advisory lock, so concurrent first connections do not race.
- One writer per session: a session-level advisory lock (`pg_try_advisory_lock`) held by the writer's
  connection from open to close; it is released by the server if the process dies.
- `compaction_lock()`: a second advisory lock per session, so two workers never compact at once.
- Durability ("acknowledged" is defined once, in `base.py`, for every backend): in both modes every
  append is its own committed transaction before `append` returns, so the client process dying
  (SIGKILL included) never loses an acknowledged entry; between `begin()` and `commit()` the appends
  share one transaction (one WAL flush for a proxy request's 4-5 entries) and are acknowledged when
  `commit()` returns (a crash before it loses them, and only them). `fsync` commits with `synchronous_commit =
  on` (the commit waits for the server's WAL flush). `batch` commits with `synchronous_commit = off`
  (PostgreSQL's asynchronous commit: the server acknowledges before its WAL flush), which saves the
  disk wait, not the round trip; the bound on a crash of the machine or of the server is the entries
  committed in the last 3 × `wal_writer_delay` (600 ms by default). `flush()` and `close()` wait for
  the WAL flush. Blob writes on the log's connection follow the same mode.
- Readers (`readonly=True`) take no lock and see the log as it was when they opened it.

Needs the `postgres` extra (psycopg 3).

(Long on purpose: the same API as the JSONL backend, with its migrations and advisory locks.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ctxwin.errors import ArgumentError, EntryFormatError, InputError, MissingExtraError
from ctxwin.store.base import (
    BlobCorruptedError,
    BlobInfo,
    BlobNotFoundError,
    Entry,
    EntryKind,
    SessionFormatError,
    SessionLockedError,
    StoreProblem,
)
from ctxwin.store.blobs import (
    HANDLE_MIN_HEX,
    HANDLE_PREFIX,
    BlobReads,
    choose_match,
    count_lines,
    parse_handle,
    sha256_hex,
    shortest_unique_prefix,
    verify,
)
from ctxwin.store.tree import (
    ROOT,
    ClosableReads,
    Jumps,
    check_append,
    dumps,
    entry_from_dict,
    new_id,
    now_timestamp,
    payload_problem,
)

LOCK_POLL_S = 0.01  # how often a waiting writer retries the advisory lock (doubling up to LOCK_POLL_MAX_S)
LOCK_POLL_MAX_S = 0.1
LOAD_CHUNK = 2048  # entries fetched per query when iterating
SYNCHRONOUS_COMMIT = {"fsync": "on", "batch": "off"}  # the server setting each durability commits with
MIGRATION_LOCK = 0x637478_77696E  # pg_advisory_xact_lock key serializing migrations ("ctxwin")
DURABILITIES: tuple[str, ...] = ("fsync", "batch")

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, """
CREATE TABLE ctxwin_sessions (
    session_id text PRIMARY KEY,
    created text NOT NULL,
    meta text NOT NULL DEFAULT '{}'
);
CREATE TABLE ctxwin_entries (
    session_id text NOT NULL REFERENCES ctxwin_sessions (session_id) ON DELETE CASCADE,
    seq bigint NOT NULL,
    id text NOT NULL,
    parent_id text,
    parent_seq bigint NOT NULL,
    kind text NOT NULL,
    ts text NOT NULL,
    payload text NOT NULL,  -- JSON as written (jsonb would reorder keys; json rejects lone surrogates)
    PRIMARY KEY (session_id, seq),
    UNIQUE (session_id, id)
);
CREATE INDEX ctxwin_entries_jumps ON ctxwin_entries (session_id, seq) WHERE parent_seq <> seq - 1;
CREATE TABLE ctxwin_blobs (
    session_id text NOT NULL,
    sha256 text COLLATE "C" NOT NULL,
    handle text NOT NULL,
    size bigint NOT NULL,
    lines bigint NOT NULL,
    media_type text,
    origin text,
    data bytea NOT NULL,
    created text NOT NULL,
    PRIMARY KEY (session_id, sha256)
);
"""),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

if TYPE_CHECKING:  # psycopg is imported when a connection is made (the postgres extra)
    from psycopg import Connection


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MissingExtraError("the PostgreSQL backend needs psycopg 3", "pip install 'ctxwin[postgres]'") from None
    return psycopg


def connect(dsn: str) -> Connection:
    """An autocommit psycopg connection with the schema migrated to SCHEMA_VERSION."""
    psycopg = _psycopg()
    if not isinstance(dsn, str):
        raise ArgumentError(f"a PostgreSQL DSN is text, not {type(dsn).__name__}",
                            'pass e.g. "postgresql://user@host/db"')
    try:
        conn: Connection = psycopg.connect(dsn, autocommit=True)
    except psycopg.OperationalError as error:
        raise InputError(f"cannot connect to PostgreSQL: {str(error).strip()}",
                         "check the DSN and that the server is running") from None
    except psycopg.ProgrammingError as error:  # a DSN that does not parse
        raise ArgumentError(f"not a PostgreSQL DSN: {str(error).strip()}",
                            'pass e.g. "postgresql://user@host/db" or "host=... dbname=..."') from None
    migrate(conn)
    return conn


def migrate(conn: Connection) -> int:
    """Applies the migrations the database lacks; returns the schema version."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS ctxwin_schema (version integer NOT NULL, applied text NOT NULL)")
        current = _one(conn, "SELECT coalesce(max(version), 0) FROM ctxwin_schema")
        if current > SCHEMA_VERSION:
            raise SessionFormatError(f"the database has ctxwin schema version {current}; this ctxwin knows up to "
                                     f"{SCHEMA_VERSION}", "upgrade ctxwin")
        for version, sql in MIGRATIONS:
            if version > current:
                conn.execute(sql)
                conn.execute("INSERT INTO ctxwin_schema VALUES (%s, %s)", (version, now_timestamp()))
    return SCHEMA_VERSION


def _one(conn: Connection, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """The value a query that always answers one row answers (an aggregate, a function call)."""
    row = conn.execute(sql, params).fetchone()
    assert row is not None, "an aggregate or a function call answers one row"
    return row[0]


def lock_key(purpose: str, session_id: str) -> int:
    """A signed 64-bit advisory-lock key for (purpose, session)."""
    digest = hashlib.blake2b(f"ctxwin:{purpose}:{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def try_advisory_lock(conn: Connection, key: int, timeout: float | None,
                      guard: contextlib.AbstractContextManager[Any] | None = None) -> bool:
    """Takes a session-level advisory lock, retrying until `timeout` (None: forever). `guard` is held
    around each attempt (not while sleeping), for connections shared between threads."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = LOCK_POLL_S
    while True:
        with guard or contextlib.nullcontext():
            got = _one(conn, "SELECT pg_try_advisory_lock(%s)", (key,))
        if got:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, LOCK_POLL_MAX_S)


# --------------------------------------------------------------------------------------------------
# Blobs


class PostgresBlobStore(BlobReads):
    """A `BlobStore` in the `ctxwin_blobs` table, one namespace per session. `lock` guards the
    connection when it is shared (a session log passes its own)."""

    def __init__(self, conn: Connection, session_id: str, lock: threading.RLock | None = None) -> None:
        self.conn = conn
        self.session_id = session_id
        self._lock = lock or threading.RLock()

    def _with_prefix(self, prefix: str, columns: str) -> list[tuple[Any, ...]]:
        # sha256 is COLLATE "C", so this range is a prefix scan of the primary key
        return list(self.conn.execute(
            f"SELECT {columns} FROM ctxwin_blobs WHERE session_id = %s AND sha256 >= %s AND sha256 < %s",
            (self.session_id, prefix, prefix + "g"),
        ).fetchall())

    def _resolve(self, handle: str) -> str:
        prefix = parse_handle(handle)
        return choose_match(handle, prefix, [(r[0], r[1]) for r in self._with_prefix(prefix, "sha256, handle")])

    def put(self, data: bytes, *, media_type: str | None = None, origin: str | None = None) -> BlobInfo:
        with self._lock:
            return self._put(data, media_type=media_type, origin=origin)

    def _put(self, data: bytes, *, media_type: str | None = None, origin: str | None = None) -> BlobInfo:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InputError(f"blob data must be bytes, not {type(data).__name__}", "encode text first")
        data = bytes(data)
        digest = sha256_hex(data)
        with self.conn.transaction():
            # sha256() runs in the server: an intact copy is recognized without shipping it back
            row = self.conn.execute(
                "SELECT encode(sha256(data), 'hex') = sha256 FROM ctxwin_blobs WHERE session_id = %s AND sha256 = %s "
                "FOR UPDATE", (self.session_id, digest)).fetchone()
            if row is not None:
                if not row[0]:  # the same bytes again repair a damaged copy
                    self.conn.execute("UPDATE ctxwin_blobs SET data = %s WHERE session_id = %s AND sha256 = %s",
                                      (data, self.session_id, digest))
                return self._stat(HANDLE_PREFIX + digest)
            others = [r[0] for r in self._with_prefix(digest[:HANDLE_MIN_HEX], "sha256")]
            info = BlobInfo(HANDLE_PREFIX + shortest_unique_prefix(digest, others), digest, len(data),
                            count_lines(data), media_type, origin)
            self.conn.execute(
                "INSERT INTO ctxwin_blobs VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (self.session_id, digest, info.handle, info.size, info.lines, media_type, origin, data,
                 now_timestamp()))
        return self._stat(HANDLE_PREFIX + digest)

    def stat(self, handle: str) -> BlobInfo:
        with self._lock:
            return self._stat(handle)

    def _stat(self, handle: str) -> BlobInfo:
        digest = self._resolve(handle)
        row = self.conn.execute(
            "SELECT handle, sha256, size, lines, media_type, origin FROM ctxwin_blobs "
            "WHERE session_id = %s AND sha256 = %s", (self.session_id, digest)).fetchone()
        if row is None:
            raise BlobNotFoundError(f"no blob {handle} in this store", "check the handle")
        return BlobInfo(row[0], row[1], int(row[2]), int(row[3]), row[4], row[5])

    def get(self, handle: str) -> bytes:
        with self._lock:
            return self._get(handle)

    def _get(self, handle: str) -> bytes:
        digest = self._resolve(handle)
        # bytes past the recorded size are never shipped: a row larger than its size is corrupt
        row = self.conn.execute("SELECT CASE WHEN octet_length(data) = size THEN data END, octet_length(data), size "
                                "FROM ctxwin_blobs WHERE session_id = %s AND sha256 = %s",
                                (self.session_id, digest)).fetchone()
        if row is None:
            raise BlobNotFoundError(f"no blob {handle} in this store", "check the handle")
        where = f"table ctxwin_blobs, session {self.session_id}"
        if row[0] is None:
            raise BlobCorruptedError(f"blob {handle} is corrupted: its stored bytes ({where}) are {int(row[1]):,} "
                                     f"bytes, not its recorded size of {int(row[2]):,}",
                                     "put the original bytes again to repair it")
        return verify(handle, digest, bytes(row[0]), where)

    def infos(self) -> list[BlobInfo]:
        with self._lock:
            return self._infos()

    def _infos(self) -> list[BlobInfo]:
        rows = self.conn.execute(
            "SELECT handle, sha256, size, lines, media_type, origin FROM ctxwin_blobs WHERE session_id = %s "
            "ORDER BY sha256", (self.session_id,)).fetchall()
        return [BlobInfo(r[0], r[1], int(r[2]), int(r[3]), r[4], r[5]) for r in rows]


# --------------------------------------------------------------------------------------------------
# The log


class PostgresSessionLog(ClosableReads):
    """A `SessionLog` in PostgreSQL. Use `Session.postgres(dsn, session_id)` to get one."""

    _chunk = LOAD_CHUNK

    def __init__(self, dsn: str, session_id: str, *, durability: str = "fsync", lock_timeout: float | None = 0,
                 readonly: bool = False, meta: dict[str, Any] | None = None) -> None:
        if durability not in DURABILITIES:
            raise InputError(f"unknown durability {durability!r}", f"use one of: {', '.join(DURABILITIES)}")
        if not session_id or not isinstance(session_id, str):
            raise ArgumentError(f"a PostgreSQL session needs a session id (text), not {session_id!r:.40}")
        self.session_id = session_id
        self.durability = durability
        self.readonly = readonly
        self._closed = False
        self._compacting = False
        self._began: tuple[int, tuple[int, str] | None, tuple[int, str] | None, int] | None = None
        """(count, leaf, newest, jumps) at `begin()`, to restore on `rollback()`."""
        self._mutex = threading.RLock()  # the connection may be shared between threads
        self.conn = connect(dsn)
        try:
            self.conn.execute("SELECT set_config('synchronous_commit', %s, false)", (SYNCHRONOUS_COMMIT[durability],))
            self._open(lock_timeout, meta)
        except BaseException:
            self.conn.close()
            raise
        self.blobs = PostgresBlobStore(self.conn, session_id, self._mutex)

    def _open(self, lock_timeout: float | None, meta: dict[str, Any] | None) -> None:
        conn = self.conn
        if not self.readonly and not try_advisory_lock(conn, lock_key("writer", self.session_id), lock_timeout):
            waited = f" after waiting {lock_timeout:g} s" if lock_timeout else ""
            raise SessionLockedError(
                f"session {self.session_id} is already open for writing{waited}",
                "close the other writer first, wait for it (lock_timeout=SECONDS), or open the session read-only")
        row = conn.execute("SELECT created, meta FROM ctxwin_sessions WHERE session_id = %s",
                           (self.session_id,)).fetchone()
        if row is None:
            if self.readonly:
                raise InputError(f"no session {self.session_id!r} in the database", "check the session id")
            conn.execute("INSERT INTO ctxwin_sessions VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                         (self.session_id, now_timestamp(), dumps(meta or {}, "meta")))
            row = conn.execute("SELECT created, meta FROM ctxwin_sessions WHERE session_id = %s",
                               (self.session_id,)).fetchone()
            assert row is not None, "the row was inserted just above, or by another writer first"
        self.header = {"session_id": self.session_id, "created": row[0], "meta": json.loads(row[1])}
        last = conn.execute("SELECT seq, id FROM ctxwin_entries WHERE session_id = %s ORDER BY seq DESC LIMIT 1",
                            (self.session_id,)).fetchone()
        self._count = 0 if last is None else int(last[0]) + 1
        self._leaf: tuple[int, str] | None = None if last is None else (int(last[0]), last[1])
        self._newest = self._leaf
        rows = conn.execute("SELECT seq, parent_seq FROM ctxwin_entries "
                            "WHERE session_id = %s AND parent_seq <> seq - 1 ORDER BY seq",
                            (self.session_id,)).fetchall()
        self._jumps = Jumps(seqs=[int(r[0]) for r in rows], parents=[int(r[1]) for r in rows])

    # ---- properties

    @property
    def leaf_id(self) -> str | None:
        return None if self._leaf is None else self._leaf[1]

    def __len__(self) -> int:
        return self._count

    @property
    def problems(self) -> list[StoreProblem]:
        """Rows are typed and constrained, and payloads are checked on append: nothing is found on
        open. (A payload edited in the database behind ctxwin's back is refused when read, with a
        SessionFormatError naming the entry.)"""
        return []

    # ---- writing

    def append(self, kind: EntryKind, payload: dict[str, Any], *, parent_id: str | None = None,
               timestamp: str | None = None) -> Entry:
        """Appends under `parent_id` (default: the current leaf) and returns once the entry is committed
        (see the module docstring for what each durability waits for)."""
        self._check_writable()
        check_append(kind, payload)
        text = dumps(payload, "payload")
        with self._mutex:
            parent = self._leaf if parent_id is None else (self._seq_of(parent_id), parent_id)
            parent_seq = ROOT if parent is None else parent[0]
            parent_ref = None if parent is None else parent[1]
            ts = timestamp or now_timestamp()
            seq = self._count
            while True:
                entry_id = new_id(lambda _candidate: False)  # the unique constraint catches a collision
                inserted = self.conn.execute(
                    "INSERT INTO ctxwin_entries VALUES (%s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (session_id, id) DO NOTHING RETURNING seq",
                    (self.session_id, seq, entry_id, parent_ref, parent_seq, kind, ts, text),
                ).fetchone()
                if inserted is not None:
                    break
            self._count += 1
            self._jumps.add(seq, parent_seq)
            self._leaf = self._newest = (seq, entry_id)
        return Entry(id=entry_id, parent_id=parent_ref, kind=kind, timestamp=ts, payload=json.loads(text))

    def branch(self, entry_id: str | None) -> None:
        self._check_open()
        with self._mutex:
            self._leaf = None if entry_id is None else (self._seq_of(entry_id), entry_id)

    # ---- one transaction for several appends

    def begin(self) -> None:
        """From now until `commit()`, appends go into one transaction (and blob writes with them):
        one commit, so one wait for the WAL flush, instead of one per append. They are acknowledged
        only when `commit()` returns; `rollback()` undoes them. Nothing is done while one is open."""
        self._check_writable()
        with self._mutex:
            if self._began is None:
                self.conn.execute("BEGIN")
                self._began = (self._count, self._leaf, self._newest, len(self._jumps.seqs))

    def commit(self) -> None:
        """Commits what was appended since `begin()` (nothing to do without one)."""
        with self._mutex:
            if self._began is not None:
                self._began = None
                self.conn.execute("COMMIT")

    def rollback(self) -> None:
        """Undoes what was appended since `begin()`, in the database and in this log."""
        with self._mutex:
            if self._began is None:
                return
            (self._count, self._leaf, self._newest, jumps), self._began = self._began, None
            del self._jumps.seqs[jumps:], self._jumps.parents[jumps:]
            if not self.conn.closed:
                self.conn.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        return self._began is not None

    def refresh(self) -> int:
        """Takes in the entries another writer appended since this log last read the table (a session
        moving between a proxy's workers): its count, its jumps and, when there were any, its leaf,
        which becomes the newest entry, as on a fresh open. Returns how many there were."""
        self._check_open()
        with self._mutex:
            rows = self.conn.execute("SELECT seq, id, parent_seq FROM ctxwin_entries WHERE session_id = %s "
                                     "AND seq >= %s ORDER BY seq", (self.session_id, self._count)).fetchall()
            for seq, _entry_id, parent_seq in rows:
                self._jumps.add(int(seq), int(parent_seq))
            if rows:
                self._count = int(rows[-1][0]) + 1
                self._leaf = (int(rows[-1][0]), rows[-1][1])
                self._newest = self._leaf
        return len(rows)

    @property
    def newest_id(self) -> str | None:
        """The id of the newest entry this log knows (its leaf, unless it was moved back)."""
        return None if self._newest is None else self._newest[1]

    # ---- reading

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._mutex:
            return list(self.conn.execute(sql, params).fetchall())

    def _seq_of(self, entry_id: str) -> int:
        rows = self._query("SELECT seq FROM ctxwin_entries WHERE session_id = %s AND id = %s",
                           (self.session_id, entry_id))
        if not rows or int(rows[0][0]) >= self._count:
            raise InputError(f"no entry {entry_id!r} in session {self.session_id}", "check the entry id")
        return int(rows[0][0])

    def _load(self, first: int, last: int) -> list[Entry]:
        rows = self._query("SELECT seq, id, parent_id, kind, ts, payload FROM ctxwin_entries "
                           "WHERE session_id = %s AND seq BETWEEN %s AND %s ORDER BY seq",
                           (self.session_id, first, last))
        return [self._entry(r) for r in rows]

    def _entry(self, row: tuple[Any, ...]) -> Entry:
        """A row as an entry, or a SessionFormatError naming it (a row changed behind ctxwin's back)."""
        seq, entry_id = row[0], row[1]
        try:
            entry = entry_from_dict({"id": entry_id, "parent_id": row[2], "kind": row[3], "timestamp": row[4],
                                     "payload": json.loads(row[5])})
            problem = payload_problem(entry.kind, entry.payload)
        except (EntryFormatError, ValueError, RecursionError) as error:
            problem = str(error)
        if problem is not None:
            raise SessionFormatError(f"entry {entry_id} (seq {seq}) of session {self.session_id} is not readable: "
                                     f"{problem}", "repair or delete that row of ctxwin_entries; ctxwin never "
                                     "writes one like it")
        return entry

    def __contains__(self, entry_id: object) -> bool:
        if not isinstance(entry_id, str):
            return False
        try:
            self._seq_of(entry_id)
        except InputError:
            return False
        return True

    def leaves(self) -> list[str]:
        self._check_open()
        rows = self._query(
            "SELECT id FROM ctxwin_entries WHERE session_id = %s AND seq < %s AND seq NOT IN "
            "(SELECT parent_seq FROM ctxwin_entries WHERE session_id = %s AND seq < %s) ORDER BY seq",
            (self.session_id, self._count, self.session_id, self._count))
        return [r[0] for r in rows]

    def entries_of_kinds(self, kinds: Collection[str], start: int = 0) -> Iterator[Entry]:
        """The entries of `kinds` from position `start` on, in append order; rows of other kinds are
        never fetched (a reader of the log's own records skips the messages)."""
        self._check_open()
        rows = self._query("SELECT seq, id, parent_id, kind, ts, payload FROM ctxwin_entries WHERE session_id = %s "
                           "AND seq >= %s AND seq < %s AND kind = ANY(%s) ORDER BY seq",
                           (self.session_id, max(0, start), self._count, list(kinds)))
        return iter([self._entry(r) for r in rows])

    def kind_counts(self) -> dict[str, int]:
        self._check_open()
        rows = self._query("SELECT kind, count(*) FROM ctxwin_entries WHERE session_id = %s AND seq < %s "
                           "GROUP BY kind ORDER BY kind", (self.session_id, self._count))
        return {r[0]: int(r[1]) for r in rows}

    def newest_timestamp(self) -> str | None:
        self._check_open()
        rows = self._query("SELECT max(ts) FROM ctxwin_entries WHERE session_id = %s AND seq < %s",
                           (self.session_id, self._count))
        newest: str | None = rows[0][0]  # a text column
        return newest

    @contextlib.contextmanager
    def compaction_lock(self, timeout: float | None = 0) -> Iterator[None]:
        """Held while a worker compacts this session (an advisory lock), so two workers never compact
        it at once. Not reentrant: a second `compaction_lock` on the same log is refused too."""
        self._check_open()
        key = lock_key("compaction", self.session_id)
        if self._compacting or not try_advisory_lock(self.conn, key, timeout, self._mutex):
            raise SessionLockedError(f"session {self.session_id} is already being compacted",
                                     "wait for the other compaction to finish, or pass a timeout")
        self._compacting = True
        try:
            yield
        finally:
            self._compacting = False
            with self._mutex:
                if not self.conn.closed:
                    self.conn.execute("SELECT pg_advisory_unlock(%s)", (key,))

    # ---- closing

    def _label(self) -> str:
        return self.session_id

    def flush(self) -> None:
        """Waits until everything appended so far survives a crash of the machine too (in batch mode:
        the server's WAL flush; in fsync mode every commit waited for it already)."""
        self._check_open()
        if self.readonly or self.durability == "fsync":
            return
        with self._mutex, self.conn.transaction():
            # A commit that wrote WAL, made with synchronous_commit on, waits for the WAL flush up to
            # its own record, which covers every asynchronous commit before it. The no-op update is the
            # cheapest write that makes one.
            self.conn.execute("SET LOCAL synchronous_commit = on")
            self.conn.execute("UPDATE ctxwin_sessions SET created = created WHERE session_id = %s",
                              (self.session_id,))

    def close(self) -> None:
        if self._closed:
            return
        try:
            if not self.conn.closed:
                self.commit()  # a clean close acknowledges what a transaction held
                self.flush()
                if not self.readonly:
                    # Closing the connection releases the lock too, but the server notices the
                    # disconnect a moment later: a writer reopening at once would be refused.
                    with self._mutex:
                        self.conn.execute("SELECT pg_advisory_unlock(%s)", (lock_key("writer", self.session_id),))
        finally:
            self._closed = True
            self.conn.close()

    def __enter__(self) -> PostgresSessionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------------------------------
# Listing and deleting


@dataclass(frozen=True, slots=True)
class PostgresSessionRow:
    session_id: str
    entries: int
    payload_bytes: int
    blobs: int
    blob_bytes: int
    created: str
    last_activity: str | None


def list_postgres_sessions(dsn: str) -> list[PostgresSessionRow]:
    conn = connect(dsn)
    try:
        rows = conn.execute("""
            SELECT s.session_id, s.created,
                   (SELECT count(*) FROM ctxwin_entries e WHERE e.session_id = s.session_id),
                   (SELECT coalesce(sum(octet_length(payload)), 0) FROM ctxwin_entries e
                    WHERE e.session_id = s.session_id),
                   (SELECT max(ts) FROM ctxwin_entries e WHERE e.session_id = s.session_id),
                   (SELECT count(*) FROM ctxwin_blobs b WHERE b.session_id = s.session_id),
                   (SELECT coalesce(sum(size), 0) FROM ctxwin_blobs b WHERE b.session_id = s.session_id)
            FROM ctxwin_sessions s ORDER BY s.session_id""").fetchall()
    finally:
        conn.close()
    return [PostgresSessionRow(session_id=r[0], created=r[1], entries=int(r[2]), payload_bytes=int(r[3]),
                               last_activity=r[4], blobs=int(r[5]), blob_bytes=int(r[6])) for r in rows]


def postgres_session_counts(dsn: str) -> dict[str, int]:
    """How many entries each session holds: one index probe per session, so a caller polling for
    what changed does not scan the entries (as `list_postgres_sessions` does for its sizes)."""
    conn = connect(dsn)
    try:
        rows = conn.execute("""
            SELECT s.session_id, coalesce((SELECT e.seq + 1 FROM ctxwin_entries e WHERE e.session_id = s.session_id
                                           ORDER BY e.seq DESC LIMIT 1), 0)
            FROM ctxwin_sessions s ORDER BY s.session_id""").fetchall()
    finally:
        conn.close()
    return {r[0]: int(r[1]) for r in rows}


def delete_postgres_session(dsn: str, session_id: str) -> dict[str, Any]:
    """Deletes a session's entries and blobs; refused while a writer has it open."""
    conn = connect(dsn)
    try:
        if not try_advisory_lock(conn, lock_key("writer", session_id), 0):
            raise SessionLockedError(f"session {session_id} is open for writing", "close it before deleting it")
        with conn.transaction():
            blobs = conn.execute("DELETE FROM ctxwin_blobs WHERE session_id = %s", (session_id,)).rowcount
            entries = conn.execute("DELETE FROM ctxwin_entries WHERE session_id = %s", (session_id,)).rowcount
            sessions = conn.execute("DELETE FROM ctxwin_sessions WHERE session_id = %s", (session_id,)).rowcount
        if not sessions:
            raise InputError(f"no session {session_id!r} in the database", "check the session id")
    finally:
        conn.close()
    return {"session_id": session_id, "entries": entries, "blobs": blobs}
