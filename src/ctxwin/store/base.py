"""The storage interfaces: an append-only session log (a tree of entries) and a content-addressed
blob store. Backends (JSONL + SQLite index, PostgreSQL) implement these; nothing else in ctxwin
depends on a backend."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias

from ctxwin.errors import CtxwinError, InputError

EntryKind: TypeAlias = Literal[
    "message", "compaction", "decision", "checkpoint", "pin", "label", "model_change", "custom"
]


class BlobNotFoundError(InputError):
    """A handle that names no blob in this store (or is not a handle at all)."""


class BlobCorruptedError(CtxwinError):
    """Stored bytes that no longer match their sha256: refused, never served."""


class SessionLockedError(CtxwinError):
    """Another writer holds the session (or another worker is compacting it)."""


class SessionFormatError(InputError):
    """A session file or database ctxwin cannot read as a session log."""


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
    blobs: BlobStore

    @property
    def leaf_id(self) -> str | None: ...

    def append(self, kind: EntryKind, payload: dict[str, Any], *, parent_id: str | None = None) -> Entry: ...

    def branch(self, entry_id: str) -> None: ...

    def path(self, leaf_id: str | None = None) -> Sequence[Entry]:
        """Root first. The durable backends return a lazy `EntryPath` (read as entries are looked at);
        a list satisfies this too."""
        ...

    def get(self, entry_id: str) -> Entry: ...

    def __iter__(self) -> Iterator[Entry]: ...

    def close(self) -> None: ...
