"""The storage interfaces: an append-only session log (a tree of entries) and a content-addressed
blob store. Backends (JSONL + SQLite index, PostgreSQL) implement these; nothing else in ctxwin
depends on a backend.

What "acknowledged" means, the same on every durable backend. An entry is acknowledged when
`append` has returned it. Durability `fsync`: an acknowledged entry survives any crash, of the
process, the database server or the machine. Durability `batch`: an acknowledged entry survives a
crash of the process that appended it (SIGKILL included); a crash of the machine, or of the
PostgreSQL server, can lose the entries acknowledged in its last fraction of a second (the bound of
each backend is in its module docstring), and never leaves part of an entry visible. `flush()` and
`close()` make everything acknowledged so far survive a machine crash too.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

# The store's errors live with every other error; they stay importable from here.
from ctxwin.errors import BlobCorruptedError as BlobCorruptedError
from ctxwin.errors import BlobNotFoundError as BlobNotFoundError
from ctxwin.errors import SessionFormatError as SessionFormatError
from ctxwin.errors import SessionLockedError as SessionLockedError

EntryKind: TypeAlias = Literal[
    "message", "compaction", "decision", "pin", "label", "model_change", "custom"
]
ProblemKind: TypeAlias = Literal[
    "corrupt",  # a line that is not an entry (cut, flipped or edited bytes): skipped, its bytes kept
    "duplicate_id",  # a line whose id an earlier line has: skipped
    "invalid_payload",  # a message entry whose payload is not a message: skipped, its line kept
    "orphan",  # an entry whose parent is lost: re-attached to its nearest intact ancestor
    "torn_tail",  # a last line without its newline: an append cut short (moved aside by a writer)
    "truncated",  # the file is shorter than ctxwin had indexed it: lines removed outside ctxwin
    "lock_file_removed",  # writer.lock deleted while this writer held the session: recreated
    "lock_check_failed",  # looking at writer.lock failed while open: the append stood, the folder lock held
    "sync_failed",  # a background fdatasync (batch mode) failed: flush() and close() sync again
    "unreadable",  # a session that cannot be opened at all (listing only)
]


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of a session log. `payload` is plain JSON; for `message` entries it is
    `Message.to_dict()`."""

    id: str
    parent_id: str | None
    kind: EntryKind
    timestamp: str
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoreProblem:
    """Something wrong found in a stored session, and what the store did about it. The store never
    fixes a problem silently: every one is in `SessionLog.problems` (and in `ctxwin sessions`)."""

    kind: ProblemKind
    detail: str  # what is wrong
    action: str  # what the store did about it
    line: int | None = None  # 1-based line of session.jsonl (the header is line 1); None off the JSONL
    offset: int | None = None  # byte offset of that line
    entry_id: str | None = None  # the entry concerned (read from a damaged line when its head survived)
    parent_id: str | None = None  # damaged line: its parent as far as readable; orphan: the parent now used

    @property
    def message(self) -> str:
        """One line for a person."""
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{where}{self.kind}: {self.detail}; {self.action}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail, "action": self.action, "line": self.line,
                "offset": self.offset, "entry_id": self.entry_id, "parent_id": self.parent_id,
                "message": self.message}


@dataclass(frozen=True, slots=True)
class BlobInfo:
    handle: str          # "blob:<sha256 prefix>"
    sha256: str
    size: int            # bytes
    lines: int
    media_type: str | None = None
    origin: str | None = None  # the entry (or tool call) the bytes came from


class BlobStore(Protocol):
    """Content-addressed bytes. `put` of the same bytes twice gives the same handle. Reads verify the
    hash and refuse to serve bytes that no longer match it."""

    def put(self, data: bytes, *, media_type: str | None = None, origin: str | None = None) -> BlobInfo: ...

    def get(self, handle: str) -> bytes: ...

    def stat(self, handle: str) -> BlobInfo: ...

    def read_bytes(self, handle: str, offset: int = 0, limit: int | None = None) -> bytes: ...

    def read_lines(self, handle: str, offset: int = 1, limit: int | None = None) -> tuple[list[str], int]:
        """Lines `offset` (1-based) to `offset + limit - 1`, without their newlines, and the blob's
        total line count."""
        ...


class SessionLog(Protocol):
    """An append-only tree of entries. Appends go under the current leaf and move it; `branch`
    moves the leaf back to any entry, so the next append forks there."""

    session_id: str

    @property
    def blobs(self) -> BlobStore | None:
        """Where spilled bytes go; None for a log that keeps none (a `MemorySessionLog` given no store).
        Read-only here so each backend may hold its own store class."""
        ...

    @property
    def leaf_id(self) -> str | None: ...

    @property
    def problems(self) -> list[StoreProblem]:
        """What opening (and writing) the log found wrong, and what was done; empty when all is well."""
        ...

    def append(self, kind: EntryKind, payload: dict[str, Any], *, parent_id: str | None = None) -> Entry: ...

    def branch(self, entry_id: str | None) -> None:
        """Move the leaf to `entry_id`; None makes the next append a new root."""
        ...

    def path(self, leaf_id: str | None = None) -> Sequence[Entry]:
        """Root first. The durable backends return a lazy `EntryPath` (read as entries are looked at);
        a list satisfies this too."""
        ...

    def get(self, entry_id: str) -> Entry: ...

    def __iter__(self) -> Iterator[Entry]: ...

    def __len__(self) -> int:
        """How many entries the log holds, on every branch."""
        ...

    def close(self) -> None: ...
