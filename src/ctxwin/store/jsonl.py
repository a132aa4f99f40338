"""The JSONL session log: one folder per session.

    <dir>/session.jsonl      line 1: header {"format": "ctxwin-session", "version": 1, ...}; then one entry per line
    <dir>/index.sqlite       the index (a cache, rebuilt from session.jsonl whenever missing, stale or corrupt)
    <dir>/blobs/             the session's blobs (`FileBlobStore`)
    <dir>/writer.lock        the pid of the one writer, flocked by it (and <dir> itself is flocked first)
    <dir>/compaction.lock    flock held while a worker compacts the session
    <dir>/session.jsonl.torn-<offset>-<time>   bytes of a crashed append, moved aside on open (never deleted)

Durability ("acknowledged" is defined once, in `base.py`, for every backend). `fsync` (default):
`append` returns after the line is written and fdatasync'ed. `batch` (group commit): `append` returns
once the line is written to the OS, which is what makes it survive a SIGKILL of the process, and a
background thread fdatasyncs the file every BATCH_MAX_DELAY_S and whenever BATCH_MAX_ENTRIES appends
are unsynced, without making appends wait; `flush()` and `close()` sync too. The bound on a machine
crash in batch mode: the entries acknowledged since the last sync, about BATCH_MAX_DELAY_S of appends
and never more than BATCH_HARD_LIMIT entries (past that, append waits for the disk). It never leaves a
half-written entry visible: a torn last line is moved aside on the next open.

Locking. One writer at a time, by an exclusive `flock` on the session folder itself, held from open to
close (a second writer is refused at once, or waits up to `lock_timeout` seconds). Locking the folder,
not a file in it, is what makes the lock survive someone deleting writer.lock; the writer notices such
a deletion, makes, locks and writes the file again and reports it (`lock_file_removed`). Once it has
the folder, the writer also flocks writer.lock without waiting, because that is the lock older ctxwin
versions take: an old and a new writer still exclude each other. A folder deleted and made again while
a writer waited for its lock is noticed (the locked folder is no longer the one at the path) and the
lock is taken again on the new one. Every OSError on the way (permissions, a read-only disk, a file
system without locks, a folder where writer.lock belongs) is a `SessionFormatError` or
`SessionLockedError` saying what to do. Readers (`readonly=True`) take no lock: they see every complete
line and ignore a line still being written.

Damage. Every file of the folder is opened without following symbolic links and refused unless it
is a regular file (a FIFO never blocks an open). Lines that are not usable entries are skipped and
reported, and the entries hanging under them are re-attached (see `jsonl_index.py`); everything found
is in `problems`, a list of `StoreProblem`.

The locks themselves (`FileLock`, the writer's and the compaction's) live in `locks.py`; durability,
torn-line recovery and index upkeep stay here: they share one file handle and one mutex.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal, NoReturn

from ctxwin.errors import EntryFormatError, InputError
from ctxwin.files import as_path
from ctxwin.store import jsonl_index as ix
from ctxwin.store.base import Entry, EntryKind, SessionFormatError, SessionLockedError, StoreProblem
from ctxwin.store.blobs import DIR_MODE, FileBlobStore, open_store_file, read_store_file, write_atomic
from ctxwin.store.locks import COMPACTION_LOCK, WRITER_LOCK, FileLock, lock_error, writer_lock
from ctxwin.store.tree import (
    ROOT,
    ClosableReads,
    check_append,
    decode_entry,
    dumps,
    encode_entry,
    new_id,
    now_timestamp,
)

FORMAT = "ctxwin-session"  # the header's "format"
FORMAT_VERSION = 1  # the header's "version"; files with a newer version are refused
SESSION_FILE = "session.jsonl"
INDEX_FILE = "index.sqlite"
BLOB_DIR = "blobs"
TORN_SUFFIX = ".torn-"  # side files holding the bytes of a torn last line
BATCH_MAX_ENTRIES = 256  # batch mode: the background thread syncs once this many appends are unsynced
BATCH_MAX_DELAY_S = 0.05  # batch mode: ... or this long after an append
BATCH_HARD_LIMIT = 1024  # batch mode: past this many unsynced appends (a slow disk), append syncs itself
INDEX_FLUSH_ROWS = 4096  # index rows kept in memory before they are written to SQLite
ITER_CHUNK = 1024  # entries read at once when iterating
LOG_MAX_BYTES = 1 << 62  # the log is read by offset, never whole: no cap on its size

Durability = Literal["fsync", "batch"]
DURABILITIES: tuple[str, ...] = ("fsync", "batch")


@dataclass
class OpenReport:
    """What opening the session found and did. Problems are reported, never fixed silently."""

    entries: int = 0
    index: str = "fresh"  # fresh | caught_up | rebuilt | created
    index_reason: str | None = None  # why it was rebuilt
    torn_tail_bytes: int = 0
    torn_tail_file: str | None = None  # where the torn bytes were moved (writers only)
    torn_tail_line: int = 0  # its line number
    problems: list[StoreProblem] = field(default_factory=list)  # the lines of the file that are not entries
    shrunk: StoreProblem | None = None  # the file is shorter than the index it had (lines removed)
    seconds: float = 0.0

    @property
    def torn_tail(self) -> StoreProblem | None:
        if not self.torn_tail_bytes:
            return None
        action = f"moved to {self.torn_tail_file}" if self.torn_tail_file else "ignored (read-only open)"
        return StoreProblem("torn_tail", f"torn last line ({self.torn_tail_bytes} bytes, an append cut short by a "
                            "crash, or one in progress)", action, self.torn_tail_line or None)

    @property
    def messages(self) -> list[str]:
        """One line per fact worth telling a person."""
        out = []
        if self.torn_tail_bytes:
            where = f"moved to {self.torn_tail_file}" if self.torn_tail_file else "ignored (read-only open)"
            out.append(f"torn last line ({self.torn_tail_bytes} bytes, an append cut short by a crash): {where}")
        if self.index == "rebuilt":
            out.append(f"index rebuilt: {self.index_reason}")
        out.extend(p.message for p in self.problems)
        return out


# --------------------------------------------------------------------------------------------------
# Header and torn tail


def make_header(session_id: str, meta: dict[str, Any] | None) -> bytes:
    header = {"format": FORMAT, "version": FORMAT_VERSION, "session_id": session_id, "created": now_timestamp(),
              "meta": meta or {}}
    return (dumps(header) + "\n").encode()


def parse_header(line: bytes, path: Path) -> dict[str, Any]:
    try:
        header = json.loads(line)
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SessionFormatError(f"{path} is not a ctxwin session file (line 1 is not its header)",
                                 "give the folder of a session made by ctxwin, or import the file with `ctxwin import`")
    version = header.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise SessionFormatError(f"{path} has session format version {version!r}; this ctxwin reads up to "
                                 f"{FORMAT_VERSION}", "upgrade ctxwin")
    return header


def last_newline_end(fd: int, size: int) -> int:
    """Offset just past the last newline in the first `size` bytes (0 when there is none)."""
    position = size
    while position > 0:
        start = max(0, position - 65536)
        chunk = os.pread(fd, position - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        position = start
    return 0


# --------------------------------------------------------------------------------------------------
# The log


class JsonlSessionLog(ClosableReads):
    """A `SessionLog` in a folder (see the module docstring). Use `Session.open` to get one."""

    _chunk = ITER_CHUNK

    def __init__(self, directory: str | Path, *, durability: Durability = "fsync", lock_timeout: float | None = 0,
                 readonly: bool = False, create: bool = True, session_id: str | None = None,
                 meta: dict[str, Any] | None = None) -> None:
        started = time.perf_counter()
        if durability not in DURABILITIES:
            raise InputError(f"unknown durability {durability!r}", f"use one of: {', '.join(DURABILITIES)}")
        if meta:
            dumps(meta, "meta")  # refused before anything is created (NaN, objects JSON cannot hold)
        self.directory = as_path(directory, "a session folder")
        self.durability = durability
        self.readonly = readonly
        self._create = create and not readonly
        self.report = OpenReport()
        self._file = self.directory / SESSION_FILE
        self._writer_lock = writer_lock(self.directory)
        self._mutex = threading.RLock()  # appends vs. the group-commit thread
        self._runtime_problems: list[StoreProblem] = []  # found while open (the lock file deleted)
        self._read_handle: BinaryIO | None = None
        self._read_fd = -1
        self._write_fd = -1
        self._closed = False
        self._flusher: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._appended = 0  # appends written to the OS since open
        self._synced = 0  # of those, how many a completed fdatasync covers (only ever raised after one)
        self._pending: list[tuple[Any, ...]] = []  # index rows not yet in SQLite
        self._pending_jumps: list[tuple[int, int]] = []
        self._pending_ids: dict[str, int] = {}
        self._index: sqlite3.Connection | None = None
        self._ids: set[str] | None = None
        try:
            self._open(lock_timeout, session_id, meta)
        except BaseException as error:
            self._release()
            if isinstance(error, OSError):  # anything the steps below did not name more precisely
                raise lock_error(Path(error.filename or self.directory), error, "check the folder and the disk") \
                    from None
            raise
        self.report.entries = self._count
        self.report.seconds = time.perf_counter() - started

    # ---- opening

    def _open(self, lock_timeout: float | None, session_id: str | None, meta: dict[str, Any] | None) -> None:
        if self.directory.is_file():
            raise InputError(f"{self.directory} is a file; a session is a folder holding {SESSION_FILE}",
                             "give the session's folder (to import a transcript file, use `ctxwin import`)")
        if not self._create and not os.path.lexists(self._file):
            raise InputError(f"no session at {self.directory} (no {SESSION_FILE})",
                             "check the path (`ctxwin sessions` lists the sessions of a folder)")
        if not self.readonly:
            hint = "close the other writer first, wait for it (lock_timeout=SECONDS), or open the session read-only"
            try:
                self.directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            except OSError as error:
                raise lock_error(self.directory, error, hint) from None
            self._writer_lock.acquire(lock_timeout, f"session {self.directory} is already open for writing", hint)
            if not os.path.lexists(self._file):
                try:
                    write_atomic(self._file, make_header(session_id or self.directory.name, meta))
                except OSError as error:
                    raise lock_error(self._file, error, "check the disk") from None
                self.report.index = "created"
        self._read_handle = open_store_file(self._file, LOG_MAX_BYTES)
        self._read_fd = self._read_handle.fileno()
        if not self.readonly:
            try:
                self._write_fd = self._open_for_append()
            except OSError as error:
                raise lock_error(self._file, error, "check the disk") from None
            # The writer reads through its own descriptor (O_RDWR): one fewer per open session, which
            # is what bounds how many sessions a proxy can hold open under its file limit.
            self._read_handle.close()
            self._read_handle, self._read_fd = None, self._write_fd
        header_end = ix.first_line_end(self._read_fd)
        if header_end < 0:
            raise SessionFormatError(f"{self._file} has no complete header line", "it is not a ctxwin session")
        head = os.pread(self._read_fd, header_end, 0)
        self.header = parse_header(head, self._file)
        self.session_id = str(self.header.get("session_id") or self.directory.name)
        self.blobs = FileBlobStore(self.directory / BLOB_DIR)
        size = os.fstat(self._read_fd).st_size
        end = last_newline_end(self._read_fd, size)
        if end < size:
            self._handle_torn_tail(end, size)
        self._size = end
        self._open_index(ix.header_sha(head), end)
        if not self.readonly and self.durability == "batch":
            self._flusher = threading.Thread(target=self._flush_loop, name="ctxwin-group-commit", daemon=True)
            self._flusher.start()

    def _open_for_append(self) -> int:
        """The writer's fd, on the very file the read fd checked (no link followed, no swap between)."""
        fd = os.open(self._file, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        opened, checked = os.fstat(fd), os.fstat(self._read_fd)
        if (opened.st_dev, opened.st_ino) != (checked.st_dev, checked.st_ino):
            os.close(fd)
            raise SessionFormatError(f"{self._file} was replaced while it was being opened", "open it again")
        return fd

    def _handle_torn_tail(self, end: int, size: int) -> None:
        self.report.torn_tail_bytes = size - end
        if self.readonly:
            return  # a writer may be in the middle of this very line; never touch it
        tail = os.pread(self._read_fd, size - end, end)
        side = self._file.with_name(f"{SESSION_FILE}{TORN_SUFFIX}{end}-{time.strftime('%Y%m%dT%H%M%S')}")
        write_atomic(side, tail)
        os.ftruncate(self._write_fd, end)
        os.fsync(self._write_fd)
        self.report.torn_tail_file = str(side)

    def _open_index(self, head_sha: str, end: int) -> None:
        path = self.directory / INDEX_FILE
        mtime = os.fstat(self._read_fd).st_mtime_ns
        reason = None
        conn: sqlite3.Connection | None = None
        cov = None
        before: ix.Coverage | None = None
        try:
            image: bytes | None = read_store_file(path, ix.INDEX_MAX_BYTES)
        except FileNotFoundError:
            image, reason = None, "missing"
        except InputError as error:  # a FIFO, a link, a giant: not an index ctxwin wrote
            image, reason = None, f"unusable ({error.message})"
        if image is not None:
            if ix.read_sum(path) != ix.digest(image):
                reason = "corrupt (its checksum does not match: changed outside ctxwin, or a crash cut an index write)"
            else:
                try:
                    conn = self._connect(path, image)
                    cov = ix.read_coverage(conn)
                    line = self._line_at(cov.last_offset, end) if cov.last_offset >= 0 else None
                    reason = ix.check(cov, end, mtime, head_sha, line)
                    if cov.size > end and cov.header_sha == head_sha:
                        before = cov  # the file shrank: if it lost lines too, they were removed
                except (sqlite3.DatabaseError, ValueError, TypeError) as error:
                    reason = f"corrupt ({error})"
        if reason is not None:
            if conn is not None:
                conn.close()
            if self.report.index != "created":
                self.report.index, self.report.index_reason = "rebuilt", reason
            if self.readonly:
                conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
                ix.create(conn)
                start = ix.Coverage(size=ix.first_line_end(self._read_fd), header_sha=head_sha)
                scan = ix.index_lines(conn, self._read_fd, end, start, mtime)
            else:
                scan = ix.build(path, self._read_fd, end, head_sha, mtime)
                conn = self._connect(path, None)
            cov = scan.coverage
        else:
            assert conn is not None and cov is not None
            if cov.size < end:
                scan = ix.index_lines(conn, self._read_fd, end, cov, mtime)
                cov = scan.coverage
                self.report.index = "caught_up"
                if not self.readonly:
                    ix.write_sum(path)
        if before is not None and cov.lines < before.lines:
            fewer = before.lines - cov.lines
            self.report.shrunk = StoreProblem(
                "truncated", f"{SESSION_FILE} has {fewer:,} line{'s' if fewer > 1 else ''} fewer than ctxwin had "
                f"indexed ({cov.lines:,}, not {before.lines:,}): lines were removed outside ctxwin",
                "index rebuilt from the file as it is; the removed lines are not in it")
        self._index = conn
        self._coverage = cov
        self._jumps = ix.load_jumps(conn)
        self.report.problems = ix.load_problems(conn)
        if self.report.torn_tail_line == 0 and self.report.torn_tail_bytes:
            self.report.torn_tail_line = cov.lines + 1
        self._count = cov.count
        self._lines = cov.lines
        self._leaf: tuple[int, str] | None = (cov.count - 1, cov.last_id) if cov.count else None

    def _connect(self, path: Path, image: bytes | None) -> sqlite3.Connection:
        """Writers use the index file in place; readers work on a private in-memory copy of the
        image they checked, so they never write to a file the writer owns."""
        if self.readonly:
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            conn.deserialize(image if image is not None else read_store_file(path, ix.INDEX_MAX_BYTES))
            return conn
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        ix.configure(conn)
        return conn

    def _line_at(self, offset: int, end: int) -> bytes | None:
        if offset >= end:
            return None
        data = os.pread(self._read_fd, min(1 << 20, end - offset), offset)
        newline = data.find(b"\n")
        return data if newline < 0 else data[:newline]

    # ---- properties

    @property
    def leaf_id(self) -> str | None:
        return None if self._leaf is None else self._leaf[1]

    @property
    def problems(self) -> list[StoreProblem]:
        """Everything wrong found in this session (`StoreProblem`, typed): the lines that are not
        entries and the orphans re-attached (`report.problems`), a torn last line, and what happened
        while open (writer.lock deleted). Empty when all is well."""
        found = [self.report.shrunk, self.report.torn_tail]
        with self._mutex:
            return [*self.report.problems, *(p for p in found if p is not None), *self._runtime_problems]

    def __len__(self) -> int:
        return self._count

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def unsynced(self) -> int:
        """Appends acknowledged but not yet covered by a completed fdatasync (always 0 in fsync mode)."""
        with self._mutex:
            return self._appended - self._synced

    # ---- writing

    def append(self, kind: EntryKind, payload: dict[str, Any], *, parent_id: str | None = None,
               timestamp: str | None = None) -> Entry:
        """Appends under `parent_id` (default: the current leaf) and makes the new entry the leaf.
        Returns once the entry is durable (see the module docstring for what `batch` means)."""
        self._check_writable()
        check_append(kind, payload)
        with self._mutex:
            if parent_id is None:
                parent = self._leaf
            else:
                parent = (self._seq_of(parent_id), parent_id)
            entry = Entry(id=self._new_id(), parent_id=None if parent is None else parent[1], kind=kind,
                          timestamp=timestamp or now_timestamp(), payload=payload)
            line = encode_entry(entry)
            offset = self._size
            self._write(line, offset)
            if self.durability == "fsync":
                try:
                    os.fdatasync(self._write_fd)
                except OSError:
                    # Not known to be on disk, so not appended: an append that raises leaves no entry.
                    os.ftruncate(self._write_fd, offset)
                    raise
                self._appended += 1
                self._synced = self._appended
            else:
                self._appended += 1
                unsynced = self._appended - self._synced
                if unsynced >= BATCH_HARD_LIMIT:
                    self._sync()
                elif unsynced >= BATCH_MAX_ENTRIES and not self._wake.is_set():
                    self._wake.set()
            self._size += len(line)
            self._lines += 1
            seq = self._count
            self._count += 1
            parent_seq = ROOT if parent is None else parent[0]
            self._pending.append((seq, entry.id, entry.parent_id, parent_seq, kind, entry.timestamp, offset, len(line),
                                  self._lines))
            if parent_seq != seq - 1:
                self._pending_jumps.append((seq, parent_seq))
            self._pending_ids[entry.id] = seq
            self._jumps.add(seq, parent_seq)
            self._leaf = (seq, entry.id)
            if self.durability == "fsync":
                self._check_lock_file()  # after the state update: the entry is appended whatever it finds
            if len(self._pending) >= INDEX_FLUSH_ROWS:
                self._flush_index()
            return entry

    def _write(self, line: bytes, offset: int) -> None:
        view = memoryview(line)
        try:
            while view:
                view = view[os.write(self._write_fd, view) :]
        except BaseException:
            # A partial line would corrupt the next append: cut the file back to where it was.
            os.ftruncate(self._write_fd, offset)
            raise

    def _sync(self) -> None:
        """Every append so far on disk when this returns (called under the mutex). A sync the
        background thread has begun does not count: only one that completed covers an append."""
        if self._appended > self._synced:
            covered = self._appended
            os.fdatasync(self._write_fd)
            self._synced = max(self._synced, covered)

    def _report(self, problem: StoreProblem) -> None:
        """Records a problem found while open, once per kind (called under the mutex)."""
        if not any(p.kind == problem.kind for p in self._runtime_problems):
            self._runtime_problems.append(problem)

    def _check_lock_file(self) -> None:
        """Notices writer.lock deleted (or replaced) behind the writer's back: the folder lock still
        excludes other writers, but the file naming this writer is made, locked and written again, and
        it is reported. Never raises: it runs after an entry is already appended, and on the
        group-commit thread."""
        try:
            lost = self._writer_lock.file_lost()
            action = "written again; the lock itself is on the folder and was never lost, so no other writer got in"
        except OSError as error:  # the folder itself is going away: the append stands, the file cannot
            lost, action = True, f"could not be written again ({error.strerror}); no other writer can get in"
        except SessionLockedError as error:
            lost, action = True, (f"could not be locked again: {error.message}; ctxwin writers are still kept out "
                                  "by the folder lock, an older ctxwin is not")
        except Exception as error:  # whatever it is, the append stands and it is reported
            self._report(StoreProblem("lock_check_failed", f"checking {WRITER_LOCK} failed: {error}",
                                      "the append stands; the folder lock still keeps other ctxwin writers out"))
            return
        if lost:
            self._report(StoreProblem(
                "lock_file_removed", f"{WRITER_LOCK} was deleted or replaced while this writer held the session",
                action))

    def _flush_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(BATCH_MAX_DELAY_S)
            self._wake.clear()
            with self._mutex:
                covered, synced = self._appended, self._synced
            if covered <= synced:
                continue
            # Outside the mutex, so appends go on meanwhile: fdatasync covers every write that
            # returned before it was called, and later ones count towards the next sync. close()
            # stops this thread before it closes the file.
            try:
                os.fdatasync(self._write_fd)
            except OSError as error:
                with self._mutex:  # nothing counted as synced: flush() and close() sync again, and raise
                    self._report(StoreProblem("sync_failed", f"a background fdatasync failed ({error.strerror})",
                                              "the entries stay unsynced; flush() or close() will try again"))
                continue
            with self._mutex:
                self._synced = max(self._synced, covered)
                self._check_lock_file()

    def _flush_index(self) -> None:
        if not self._pending:
            return
        conn = self._db
        conn.execute("BEGIN")
        try:
            ix.insert_rows(conn, self._pending, self._pending_jumps)
            last = self._pending[-1]
            cov = self._coverage
            cov.size, cov.lines, cov.count = self._size, self._lines, self._count
            cov.last_offset, cov.last_id = last[6], last[1]
            cov.mtime_ns = os.fstat(self._read_fd).st_mtime_ns
            ix.write_coverage(conn, cov)
            conn.execute("COMMIT")
        except BaseException as error:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            if isinstance(error, sqlite3.Error):  # e.g. the folder was deleted under the writer
                raise SessionFormatError(f"cannot write the index of {self.directory}: {error}",
                                         f"the entries are safe in {SESSION_FILE}; reopen the session to rebuild "
                                         "the index") from None
            raise
        ix.write_sum(self.directory / INDEX_FILE)
        self._pending, self._pending_jumps, self._pending_ids = [], [], {}

    def branch(self, entry_id: str | None) -> None:
        """Moves the leaf to `entry_id`, so the next append forks there; `None` makes the next append
        a new root. The leaf lives in memory: reopening starts at the newest entry."""
        self._check_open()
        with self._mutex:
            self._leaf = None if entry_id is None else (self._seq_of(entry_id), entry_id)

    # ---- reading

    def _seq_of(self, entry_id: str) -> int:
        seq = self._pending_ids.get(entry_id)
        if seq is not None:
            return seq
        row = self._db.execute("SELECT seq FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise InputError(f"no entry {entry_id!r} in session {self.session_id}", "check the entry id")
        return int(row[0])

    def _id_taken(self, entry_id: str) -> bool:
        if entry_id in self._pending_ids:
            return True
        return self._db.execute("SELECT 1 FROM entries WHERE id = ?", (entry_id,)).fetchone() is not None

    def _new_id(self) -> str:
        """A fresh id, unique in the session. The writer keeps every id in memory (loaded on its
        first append): an index query per append would cost more than the append."""
        if self._ids is None:
            self._ids = {row[0] for row in self._db.execute("SELECT id FROM entries")}
            self._ids.update(self._pending_ids)
            self._ids.update(ix.damaged_ids(self._db))
        entry_id = new_id(self._ids.__contains__)
        self._ids.add(entry_id)
        return entry_id

    def _load(self, first: int, last: int) -> list[Entry]:
        """Entries with seq in [first, last], read from the JSONL by the offsets in the index."""
        with self._mutex:
            self._flush_index()
            rows = self._db.execute(
                "SELECT seq, id, offset, length, parent_id FROM entries WHERE seq BETWEEN ? AND ? ORDER BY seq",
                (first, last)).fetchall()
        if len(rows) != last - first + 1:
            self._distrust_index(f"seqs {first}..{last} are not all in the index")
        if not rows:
            return []
        start = rows[0][2]
        return self._decode(rows, os.pread(self._read_fd, rows[-1][2] + rows[-1][3] - start, start), start)

    def _decode(self, rows: list[tuple[Any, ...]], data: bytes, start: int) -> list[Entry]:
        """The entries of index `rows` (seq, id, offset, length, parent_id), from `data`, the file's
        bytes from offset `start` on."""
        out = []
        for seq, entry_id, offset, length, parent_id in rows:
            try:
                entry = decode_entry(data[offset - start : offset - start + length])
            except EntryFormatError:
                entry = None
            if entry is None or entry.id != entry_id:
                self._distrust_index(f"entry {seq} ({entry_id}) is not at byte {offset}")
            if entry.parent_id != parent_id:  # an orphan, re-attached on indexing (see `problems`)
                entry = dataclasses.replace(entry, parent_id=parent_id)
            out.append(entry)
        return out

    @property
    def _db(self) -> sqlite3.Connection:
        """The index's connection: `_open` sets it before anything can read or append."""
        assert self._index is not None, "the index is opened in _open"
        return self._index

    def _distrust_index(self, why: str) -> NoReturn:
        """The index disagrees with the JSONL (edited behind our back): make the next open rebuild it."""
        if not self.readonly:
            (self.directory / INDEX_FILE).with_name(INDEX_FILE + ix.SUM_SUFFIX).unlink(missing_ok=True)
        raise SessionFormatError(f"the index of {self.directory} disagrees with {SESSION_FILE}: {why}",
                                 "reopen the session: the index is rebuilt from the JSONL on open")

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, str) and self._id_taken(entry_id)

    def leaves(self) -> list[str]:
        """Ids of the entries nobody hangs under (the tips of all branches), oldest first."""
        self._check_open()
        with self._mutex:
            self._flush_index()
            rows = self._db.execute(
                "SELECT id FROM entries WHERE seq NOT IN (SELECT parent_seq FROM entries) ORDER BY seq"
            ).fetchall()
        return [r[0] for r in rows]

    def entries_of_kinds(self, kinds: Collection[str], start: int = 0) -> Iterator[Entry]:
        """The entries of `kinds` from position `start` on, in append order, found by the index: the
        lines of other kinds are never read (a reader of the log's own records skips the messages)."""
        self._check_open()
        wanted = tuple(kinds)
        with self._mutex:
            self._flush_index()
            rows = self._db.execute(
                "SELECT seq, id, offset, length, parent_id FROM entries WHERE seq >= ? "
                f"AND kind IN ({', '.join('?' * len(wanted))}) ORDER BY seq", (max(0, start), *wanted)).fetchall()
        for row in rows:  # one read per line: the lines between may be large messages
            yield from self._decode([row], os.pread(self._read_fd, row[3], row[2]), row[2])

    def kind_counts(self) -> dict[str, int]:
        """How many entries of each kind the log holds."""
        self._check_open()
        with self._mutex:
            self._flush_index()
            rows = self._db.execute("SELECT kind, count(*) FROM entries GROUP BY kind ORDER BY kind").fetchall()
        return dict(rows)

    def newest_timestamp(self) -> str | None:
        """The latest entry timestamp (entries may carry the original times of an import)."""
        self._check_open()
        with self._mutex:
            self._flush_index()
            newest: str | None = self._db.execute("SELECT max(ts) FROM entries").fetchone()[0]  # a TEXT column
        return newest

    @contextlib.contextmanager
    def compaction_lock(self, timeout: float | None = 0) -> Iterator[None]:
        """Held while a worker compacts this session, so two workers never compact it at once. Works
        on read-only opens too (a worker may summarize while the agent keeps appending)."""
        self._check_open()
        lock = FileLock(self.directory / COMPACTION_LOCK)
        lock.acquire(timeout, f"session {self.directory} is already being compacted",
                     "wait for the other compaction to finish, or pass a timeout")
        try:
            yield
        finally:
            lock.release()

    # ---- closing

    def _label(self) -> str:
        return str(self.directory)

    def flush(self) -> None:
        """Makes everything appended so far durable and indexed (batch mode syncs early)."""
        self._check_open()
        with self._mutex:
            if self._write_fd >= 0:
                self._sync()
                self._check_lock_file()
            if not self.readonly:
                self._flush_index()

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._write_fd >= 0 and self._index is not None:
                self.flush()
        finally:
            self._closed = True
            self._release()

    def _release(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._flusher is not None:
            self._flusher.join()
            self._flusher = None
        with self._mutex:
            if self._write_fd >= 0:
                os.close(self._write_fd)
            if self._read_handle is not None:
                self._read_handle.close()
            self._read_handle = None
            self._write_fd = self._read_fd = -1
        if self._index is not None:
            self._index.close()
        self._writer_lock.release()

    def __enter__(self) -> JsonlSessionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Only releases OS resources of a log nobody closed; never writes.
        if not getattr(self, "_closed", True):
            with contextlib.suppress(Exception):
                self._stop.set()
                self._writer_lock.release()
