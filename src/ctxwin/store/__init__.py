"""Session storage: the append-only session log (JSONL + SQLite index, or PostgreSQL) and the
content-addressed blob store. Start with `Session.open(path)` or `Session.postgres(dsn, id)`.

Imports: errors, files, messages, tokens, policy.
"""

from ctxwin.store.base import (
    BlobCorruptedError,
    BlobInfo,
    BlobNotFoundError,
    BlobStore,
    Entry,
    EntryKind,
    SessionFormatError,
    SessionLockedError,
    SessionLog,
    StoreProblem,
)
from ctxwin.store.blobs import FileBlobStore
from ctxwin.store.jsonl import JsonlSessionLog, OpenReport
from ctxwin.store.session import DEFAULT_ROOT, Session, SessionInfo, delete_session, list_sessions
from ctxwin.store.tree import EntryPath

__all__ = [
    "DEFAULT_ROOT",
    "BlobCorruptedError",
    "BlobInfo",
    "BlobNotFoundError",
    "BlobStore",
    "Entry",
    "EntryKind",
    "EntryPath",
    "FileBlobStore",
    "JsonlSessionLog",
    "OpenReport",
    "Session",
    "SessionFormatError",
    "SessionInfo",
    "SessionLockedError",
    "SessionLog",
    "StoreProblem",
    "delete_session",
    "list_sessions",
]
