"""Opening, listing and deleting sessions: the front door of the store.

A JSONL session is a folder (see `jsonl.py`); sessions are usually kept side by side under one root,
`./.ctxwin/sessions` by default (`DEFAULT_ROOT`). A PostgreSQL session is a `session_id` in a database.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwin.errors import CtxwinError, InputError
from ctxwin.store.base import StoreProblem
from ctxwin.store.jsonl import BLOB_DIR, SESSION_FILE, Durability, JsonlSessionLog
from ctxwin.store.locks import writer_lock

if TYPE_CHECKING:  # psycopg is an optional extra, imported only when a PostgreSQL session is opened
    from ctxwin.store.postgres import PostgresSessionLog

DEFAULT_ROOT = Path(".ctxwin/sessions")  # where `ctxwin import` and `ctxwin sessions` look by default


class Session:
    """Constructors of session logs (a namespace, never instantiated)."""

    @staticmethod
    def open(path: str | Path, *, durability: Durability = "fsync", lock_timeout: float | None = 0,
             readonly: bool = False, create: bool = True, meta: dict[str, Any] | None = None) -> JsonlSessionLog:
        """The JSONL session in folder `path`, created if missing (unless `readonly`, or `create` is
        false: then a folder that holds no session is refused and nothing is made). A writer holds
        the session's lock until `close()`: a second writer is refused (`lock_timeout=0`), waits up to
        `lock_timeout` seconds, or waits forever (`None`). `meta` goes into a new session's header."""
        return JsonlSessionLog(path, durability=durability, lock_timeout=lock_timeout, readonly=readonly,
                               create=create, meta=meta)

    @staticmethod
    def postgres(dsn: str, session_id: str, *, durability: str = "fsync", lock_timeout: float | None = 0,
                 readonly: bool = False, meta: dict[str, Any] | None = None) -> PostgresSessionLog:
        """The session `session_id` in the PostgreSQL database at `dsn` (schema created or migrated
        on first use), with the same API and locking as `open`."""
        from ctxwin.store.postgres import PostgresSessionLog

        return PostgresSessionLog(dsn, session_id, durability=durability, lock_timeout=lock_timeout,
                                  readonly=readonly, meta=meta)


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session in a listing. Sizes in bytes; times are ISO 8601 UTC."""

    path: str
    session_id: str
    entries: int
    size_bytes: int  # the whole folder: log, index, blobs
    log_bytes: int
    blobs: int
    created: str | None
    last_activity: str | None  # timestamp of the newest entry (for imports: the original time)
    modified: str  # when the log file last changed on this disk
    problems: int  # how many problems (corrupt lines, orphans re-attached, bad payloads, torn tail)
    problem_list: tuple[StoreProblem, ...] = ()  # each of them: what is wrong and what was done

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"problem_list": [p.to_dict() for p in self.problem_list]}


def is_session_dir(path: Path) -> bool:
    """A folder holding a session.jsonl (of any file type: one that is not a regular file is listed
    as unreadable, never skipped in silence)."""
    return os.path.lexists(path / SESSION_FILE)


def session_info(path: str | Path) -> SessionInfo:
    """Facts about one JSONL session, read without a lock (it may be in use). A session that cannot
    be opened at all is described by one `unreadable` problem rather than an error, so one broken
    session never hides the others in a listing."""
    folder = Path(path)
    try:
        with JsonlSessionLog(folder, readonly=True) as log:
            entries = len(log)
            newest = log.newest_timestamp()
            problems = tuple(log.problems)
            header = log.header
    except CtxwinError as error:
        return _unreadable(folder, error)
    stat = (folder / SESSION_FILE).stat()
    return SessionInfo(
        path=str(folder),
        session_id=str(header.get("session_id")),
        entries=entries,
        size_bytes=_tree_size(folder),
        log_bytes=stat.st_size,
        blobs=_count_blobs(folder / BLOB_DIR),
        created=header.get("created"),
        last_activity=newest or header.get("created"),
        modified=_utc(stat.st_mtime),
        problems=len(problems),
        problem_list=problems,
    )


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _unreadable(folder: Path, error: CtxwinError) -> SessionInfo:
    stat = os.lstat(folder / SESSION_FILE)
    problem = StoreProblem("unreadable", str(error), "not opened; nothing was changed")
    return SessionInfo(path=str(folder), session_id=folder.name, entries=0, size_bytes=_tree_size(folder),
                       log_bytes=stat.st_size, blobs=_count_blobs(folder / BLOB_DIR), created=None, last_activity=None,
                       modified=_utc(stat.st_mtime), problems=1, problem_list=(problem,))


def _tree_size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue  # removed while we looked (a temp file)
    return total


def _count_blobs(folder: Path) -> int:
    if not folder.is_dir():
        return 0
    return sum(1 for sub in folder.iterdir() if sub.is_dir() for name in os.listdir(sub)
               if not name.startswith(".") and not name.endswith(".json"))


def list_sessions(root: str | Path = DEFAULT_ROOT) -> list[SessionInfo]:
    """The sessions in folder `root` (each a sub-folder with a session.jsonl; `root` itself when it is
    one), most recently active first."""
    folder = Path(root)
    if not folder.is_dir():
        raise InputError(f"no sessions folder at {folder}", "import a transcript with `ctxwin import FILE`, "
                         "or give the folder that holds your sessions")
    if is_session_dir(folder):
        return [session_info(folder)]
    infos = [session_info(sub) for sub in sorted(folder.iterdir()) if sub.is_dir() and is_session_dir(sub)]
    return sorted(infos, key=lambda i: (i.last_activity or "", i.path), reverse=True)


def delete_session(path: str | Path) -> dict[str, Any]:
    """Deletes the JSONL session folder at `path`, with its index and blobs. Refused when the folder
    is not a ctxwin session or a writer has it open. Nothing else in ctxwin ever deletes a session."""
    folder = Path(path)
    if not is_session_dir(folder):
        raise InputError(f"{folder} is not a ctxwin session folder (no {SESSION_FILE})", "check the path")
    with JsonlSessionLog(folder, readonly=True) as log:  # refuses anything that is not a session file
        entries = len(log)
    lock = writer_lock(folder)
    lock.acquire(0, f"session {folder} is open for writing", "close it before deleting it")
    try:
        size = _tree_size(folder)
        shutil.rmtree(folder)
    finally:
        lock.release()
    return {"path": str(folder), "entries": entries, "bytes": size}
