"""The SQLite index of a JSONL session: seq -> id, parent, kind, time, byte offset and line number of
each entry, the jumps of the tree (see `tree.py`), and the problems found while reading the file.

The index is a cache. The JSONL file is the truth, and the index records how much of it it covers
(size, mtime, line count, the last entry's offset and id). `check` compares that with the file and
says whether the index is fresh, can be caught up by reading only the bytes appended since, or must
be rebuilt; `index_lines` reads lines of the JSONL into it.

Damage is reported, never silently dropped or followed: a line that is not a usable entry is skipped
(its bytes stay in the file) and recorded as a problem, with the id and parent it still shows; an
entry whose parent is lost is re-attached to its nearest intact ancestor (the lost entry's own parent
when its line still shows it, else the intact entry just before it in the file), so a damaged line
costs the path that one entry, never everything before it.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwin.errors import EntryFormatError, InputError
from ctxwin.store.base import ProblemKind, StoreProblem
from ctxwin.store.blobs import FILE_MODE, read_store_file
from ctxwin.store.tree import ROOT, Jumps, decode_entry, payload_problem, salvage_head

INDEX_VERSION = 2  # bump when the schema below changes: older indexes are then rebuilt
READ_CHUNK = 8 << 20  # bytes of JSONL read at once while indexing
INSERT_BATCH = 10_000  # index rows inserted per executemany
SUM_SUFFIX = ".sum"  # <index>.sum holds the sha256 of the index file as ctxwin last wrote it
INDEX_MAX_BYTES = 4 << 30  # the index is read whole; one this large is not ctxwin's (rebuilt)
SUM_MAX_BYTES = 256  # <index>.sum holds one sha256 in hex

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    parent_id TEXT,
    parent_seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    ts TEXT NOT NULL,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
    line INTEGER NOT NULL
);
CREATE TABLE jumps (seq INTEGER PRIMARY KEY, parent_seq INTEGER NOT NULL);
CREATE TABLE problems (
    line INTEGER PRIMARY KEY,
    offset INTEGER NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    action TEXT NOT NULL,
    entry_id TEXT,
    parent_id TEXT,
    parent_known INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX problems_entry ON problems (entry_id) WHERE entry_id IS NOT NULL;
"""
SKIPPED = "skipped; its bytes stay in the file"  # what is done with a line that is not a usable entry
DAMAGED_KINDS = ("corrupt", "invalid_payload")  # skipped lines whose children may hang under them


@dataclass
class Coverage:
    """How much of the JSONL the index covers, and where numbering continues."""

    size: int = 0  # bytes of the file indexed (always the end of a complete line)
    mtime_ns: int = 0
    lines: int = 1  # lines indexed, the header included
    count: int = 0  # entries indexed (the next seq)
    last_offset: int = -1
    last_id: str = ""
    header_sha: str = ""

    def to_rows(self) -> list[tuple[str, Any]]:
        return [("version", INDEX_VERSION), *((k, v) for k, v in self.__dict__.items())]


@dataclass
class Scan:
    """What `index_lines` found: the new coverage, problems, and how many entries it added."""

    coverage: Coverage
    added: int = 0
    problems: list[StoreProblem] = field(default_factory=list)


def digest(image: bytes) -> str:
    return hashlib.sha256(image).hexdigest()


def read_sum(path: Path) -> str | None:
    """The checksum recorded for the index file at `path`. SQLite checks its own structure but not
    the values in it: a flipped byte in an offset would go unnoticed. The checksum notices any change
    not made by ctxwin, and any index write a crash cut short."""
    try:
        return read_store_file(path.with_name(path.name + SUM_SUFFIX), SUM_MAX_BYTES).decode().strip()
    except (FileNotFoundError, InputError, UnicodeDecodeError):
        return None


def write_sum(path: Path) -> None:
    # Not fsync'ed: after a power loss a stale checksum only costs a rebuild.
    side = path.with_name(path.name + SUM_SUFFIX)
    tmp = side.with_name(side.name + ".tmp")
    text = (digest(read_store_file(path, INDEX_MAX_BYTES)) + "\n").encode()
    tmp.unlink(missing_ok=True)  # whatever is there (a FIFO would block an open for writing)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    try:
        os.write(fd, text)
    finally:
        os.close(fd)
    os.replace(tmp, side)


def header_sha(header_line: bytes) -> str:
    return hashlib.sha256(header_line).hexdigest()


def create(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA)


def configure(conn: sqlite3.Connection) -> None:
    # The index is rebuilt from the JSONL after any loss, so it never waits for the disk. A rollback
    # journal (not WAL) keeps every committed change in the one file the checksum covers.
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA busy_timeout = 5000")


def read_coverage(conn: sqlite3.Connection) -> Coverage:
    """The coverage the index records; raises sqlite3.DatabaseError or ValueError when unreadable."""
    rows = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    if rows.get("version") != INDEX_VERSION:
        raise ValueError(f"index version {rows.get('version')!r}, expected {INDEX_VERSION}")
    cov = Coverage()
    for key in cov.__dict__:
        if key not in rows:
            raise ValueError(f"index meta lacks {key!r}")
        setattr(cov, key, type(getattr(cov, key))(rows[key]))
    return cov


def write_coverage(conn: sqlite3.Connection, cov: Coverage) -> None:
    conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", cov.to_rows())


def check(cov: Coverage, size: int, mtime_ns: int, head_sha: str, line_at: bytes | None) -> str | None:
    """None when the index can be used (fresh, or caught up from `cov.size`), else why it must be
    rebuilt. `line_at` is the JSONL line at `cov.last_offset` (None when there is none)."""
    if cov.header_sha != head_sha:
        return "it belongs to another session file (header differs)"
    if cov.size > size:
        return f"the session file is shorter than the index says ({size} < {cov.size} bytes)"
    if cov.size == size and cov.mtime_ns != mtime_ns:
        return "the session file was modified in place (same size, new mtime)"
    if cov.last_offset >= 0:
        try:
            last = decode_entry(line_at or b"")
        except EntryFormatError:
            return f"its last entry is not at byte {cov.last_offset} of the session file"
        if last.id != cov.last_id:
            return f"its last entry is not at byte {cov.last_offset} of the session file"
    return None


def iter_lines(fd: int, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line without its newline) for each complete line in bytes [start, end)."""
    carry = b""
    carry_offset = start
    position = start
    while position < end:
        chunk = os.pread(fd, min(READ_CHUNK, end - position), position)
        if not chunk:
            break
        position += len(chunk)
        data = carry + chunk
        begin = 0
        while True:
            newline = data.find(b"\n", begin)
            if newline < 0:
                break
            yield carry_offset + begin, data[begin:newline]
            begin = newline + 1
        carry = data[begin:]
        carry_offset += begin


def index_lines(conn: sqlite3.Connection, fd: int, end: int, cov: Coverage, mtime_ns: int) -> Scan:
    """Reads the JSONL from `cov.size` to `end` (the end of a complete line) into the index, in one
    transaction with the new coverage. Bad lines become problems; the rest is indexed."""
    scan = Scan(coverage=Coverage(**cov.__dict__))
    new = scan.coverage
    fresh_ids: dict[str, int] = {}
    damaged: dict[str, tuple[str | None, bool]] = {}  # id read from a skipped line -> (its parent, known)
    rows: list[tuple[Any, ...]] = []
    jumps: list[tuple[int, int]] = []
    problems: list[tuple[Any, ...]] = []

    def seq_of(entry_id: str) -> int | None:
        if entry_id in fresh_ids:
            return fresh_ids[entry_id]
        row = conn.execute("SELECT seq FROM entries WHERE id = ?", (entry_id,)).fetchone()
        return None if row is None else int(row[0])

    def damaged_parent(entry_id: str) -> tuple[str | None, bool] | None:
        if entry_id in damaged:
            return damaged[entry_id]
        row = conn.execute(f"SELECT parent_id, parent_known FROM problems WHERE entry_id = ? AND kind IN "
                           f"{DAMAGED_KINDS} ORDER BY line LIMIT 1", (entry_id,)).fetchone()
        return None if row is None else (row[0], bool(row[1]))

    def reattach(lost: str, seq: int) -> tuple[int, str | None, str]:
        """The nearest intact ancestor of an entry whose parent `lost` is not in the log: (its seq,
        its id, what was done)."""
        current, seen = lost, set()
        while current not in seen:
            seen.add(current)
            known = damaged_parent(current)
            if known is None or not known[1]:
                break
            parent = known[0]
            if parent is None:
                return ROOT, None, f"made a root: the lost parent {lost} was a root"
            found = seq_of(parent)
            if found is not None:
                return found, parent, f"re-attached to {parent}, the parent of the lost entry {current}"
            current = parent
        if seq == 0:
            return ROOT, None, "made a root: no intact entry comes before it"
        return seq - 1, new.last_id, f"re-attached to {new.last_id}, the intact entry before it in the file"

    def problem(line: int, offset: int, kind: ProblemKind, detail: str, action: str, entry_id: str | None = None,
                parent_id: str | None = None, parent_known: bool = False) -> None:
        scan.problems.append(StoreProblem(kind, detail, action, line, offset, entry_id, parent_id))
        problems.append((line, offset, kind, detail, action, entry_id, parent_id, int(parent_known)))
        if kind in DAMAGED_KINDS and entry_id is not None and seq_of(entry_id) is None:
            damaged.setdefault(entry_id, (parent_id, parent_known))

    conn.execute("BEGIN")
    try:
        for offset, raw in iter_lines(fd, cov.size, end):
            new.lines += 1
            line_no = new.lines
            if not raw.strip():
                problem(line_no, offset, "corrupt", "blank line", SKIPPED)
                continue
            try:
                entry = decode_entry(raw)
            except EntryFormatError as error:
                salvaged, parent, known = salvage_head(raw)
                what = f"entry {salvaged}: " if salvaged else ""
                problem(line_no, offset, "corrupt", f"{what}{error}", SKIPPED, salvaged, parent, known)
                continue
            if seq_of(entry.id) is not None:
                problem(line_no, offset, "duplicate_id", f"id {entry.id} appeared earlier; this line is ignored",
                        "skipped; the first line with this id is the entry", entry.id)
                continue
            invalid = payload_problem(entry.kind, entry.payload)
            if invalid is not None:
                problem(line_no, offset, "invalid_payload", f"entry {entry.id}: {invalid}", SKIPPED, entry.id,
                        entry.parent_id, True)
                continue
            seq = new.count
            parent_id = entry.parent_id
            if parent_id is None:
                parent_seq = ROOT
            else:
                found = seq_of(parent_id)
                if found is None:
                    parent_seq, parent_id, action = reattach(parent_id, seq)
                    problem(line_no, offset, "orphan", f"entry {entry.id}: parent {entry.parent_id} is not in the log",
                            action, entry.id, parent_id)
                else:
                    parent_seq = found
            fresh_ids[entry.id] = seq
            rows.append((seq, entry.id, parent_id, parent_seq, entry.kind, entry.timestamp, offset,
                         len(raw) + 1, line_no))
            if parent_seq != seq - 1:
                jumps.append((seq, parent_seq))
            new.count += 1
            new.last_offset, new.last_id = offset, entry.id
            scan.added += 1
            if len(rows) >= INSERT_BATCH:
                insert_rows(conn, rows, jumps)
                rows, jumps = [], []
        insert_rows(conn, rows, jumps)
        conn.executemany("INSERT OR REPLACE INTO problems VALUES (?, ?, ?, ?, ?, ?, ?, ?)", problems)
        new.size, new.mtime_ns = end, mtime_ns
        write_coverage(conn, new)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return scan


def insert_rows(conn: sqlite3.Connection, rows: list[tuple[Any, ...]], jumps: list[tuple[int, int]]) -> None:
    conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.executemany("INSERT INTO jumps VALUES (?, ?)", jumps)


def load_jumps(conn: sqlite3.Connection) -> Jumps:
    rows = conn.execute("SELECT seq, parent_seq FROM jumps ORDER BY seq").fetchall()
    return Jumps(seqs=[r[0] for r in rows], parents=[r[1] for r in rows])


def load_problems(conn: sqlite3.Connection) -> list[StoreProblem]:
    rows = conn.execute("SELECT kind, detail, action, line, offset, entry_id, parent_id FROM problems ORDER BY line")
    return [StoreProblem(*row) for row in rows]


def damaged_ids(conn: sqlite3.Connection) -> set[str]:
    """Ids still readable on skipped lines: never given to a new entry, so a repaired line cannot
    collide with one appended since."""
    return {row[0] for row in conn.execute("SELECT entry_id FROM problems WHERE entry_id IS NOT NULL")}


def build(path: Path, fd: int, end: int, head_sha: str, mtime_ns: int) -> Scan:
    """A complete new index of bytes [header end, end) written to `path` (replaced atomically)."""
    tmp = path.with_name(path.name + ".tmp")
    for stale in (tmp, tmp.with_name(tmp.name + "-journal")):
        stale.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = OFF")  # a failed build is thrown away whole
        conn.execute("PRAGMA synchronous = OFF")
        create(conn)
        header_end = first_line_end(fd)
        scan = index_lines(conn, fd, end, Coverage(size=header_end, header_sha=head_sha), mtime_ns)
    finally:
        conn.close()
    # A journal or WAL left by the old index would be replayed into the new one: remove them first.
    for suffix in ("-journal", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    os.replace(tmp, path)
    write_sum(path)
    return scan


def first_line_end(fd: int) -> int:
    """Offset just past the first newline (the end of the header line), or -1."""
    position = 0
    while True:
        chunk = os.pread(fd, 65536, position)
        if not chunk:
            return -1
        newline = chunk.find(b"\n")
        if newline >= 0:
            return position + newline + 1
        position += len(chunk)
