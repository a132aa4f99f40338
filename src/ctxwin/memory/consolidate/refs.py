"""The refs consolidated memory carries, and what they resolve to.

- `memory/2026-11-30.md:12` or `memory/2026-11-30.md:12-14`: lines of a memory file (the form
  `memory_search` prints its hits in); `memory_get` takes it as its `path`.
- `entry:<id>@<session id>`: an entry of a stored session, which need not be the current one;
  `memory_get` finds the session under its sessions folder, and `recall` / `memory.recall.resolve_ref`
  take it on the session it names (`entry:<id>` without a session is the current session's, as before).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ctxwin.errors import InputError

_LINES = re.compile(r"^(?P<path>[^:\s]+\.md):(?P<first>\d+)(?:-(?P<last>\d+))?$")
_ENTRY = re.compile(r"^entry:(?P<id>[^@#\s]+)(?P<call>#[^@\s]+)?@(?P<session>\S+)$")


@dataclass(frozen=True, slots=True)
class LinesRef:
    """Lines `first`..`last` (1-based, inclusive) of the memory file at `path`."""

    path: str
    first: int
    last: int


@dataclass(frozen=True, slots=True)
class EntryRef:
    """Entry `ref` (`entry:<id>` or `entry:<id>#<call id>`) of session `session`."""

    ref: str
    session: str


def parse_lines(ref: str) -> LinesRef | None:
    """`memory/2026-11-30.md:12-14` as a `LinesRef`; None for anything else (a plain path)."""
    match = _LINES.match(ref.strip())
    if match is None:
        return None
    first = int(match.group("first"))
    last = int(match.group("last") or first)
    if first < 1 or last < first:
        raise InputError(f"{ref}: lines {first}-{last} are not a range", "refs look like memory/2026-11-30.md:12-14")
    return LinesRef(match.group("path"), first, last)


def parse_entry(ref: str) -> EntryRef | None:
    """`entry:<id>@<session>` (or `entry:<id>#<call>@<session>`) as an `EntryRef`; None otherwise."""
    match = _ENTRY.match(ref.strip())
    if match is None:
        return None
    return EntryRef(f"entry:{match.group('id')}{match.group('call') or ''}", match.group("session"))


def session_folder(sessions: Path, session_id: str) -> Path | None:
    """The folder of session `session_id` under `sessions`: the folder of that name, else the one whose
    header names it."""
    from ctxwin.memory.consolidate.sources import session_folders
    from ctxwin.store.session import Session, is_session_dir

    if "/" in session_id or session_id in (".", ".."):
        return None
    named = sessions / session_id
    if named.is_dir() and is_session_dir(named):
        return named
    for folder in session_folders(sessions):
        with Session.open(folder, readonly=True) as log:
            if log.session_id == session_id:
                return folder
    return None


def resolve_entry(sessions: Path | None, ref: EntryRef) -> str:
    """The text of an entry ref, read from its session under `sessions` (read-only, no lock)."""
    from ctxwin.memory.recall import resolve_ref
    from ctxwin.store.session import Session

    folder = session_folder(sessions, ref.session) if sessions is not None and sessions.is_dir() else None
    if folder is None:
        raise InputError(f"{ref.ref}@{ref.session}: no session {ref.session!r} in {sessions}",
                         "give the sessions folder the consolidation read (ctxwin memory consolidate --sessions)")
    with Session.open(folder, readonly=True) as log:
        # A JsonlSessionLog is a SessionLog; mypy disagrees only on FileBlobStore.read_lines (22.6).
        return resolve_ref(log, ref.ref)  # type: ignore[arg-type]
