"""The refs consolidated memory carries, and what they resolve to.

- `memory/2026-11-30.md:12` or `memory/2026-11-30.md:12-14`: lines of a memory file (the form
  `memory_search` gives its hits; `memory_get` takes it as its `path`, `memory.tools.parse_file_ref`).
- `entry:<id>@<session id>`: an entry of a stored session, which need not be the current one;
  `memory_get` finds the session under its sessions folder, and `recall` / `memory.recall.resolve_ref`
  take it on the session it names (`entry:<id>` without a session is the current session's, as before).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ctxwin.errors import InputError

_ENTRY = re.compile(r"^entry:(?P<id>[^@#\s]+)(?P<call>#[^@\s]+)?@(?P<session>\S+)$")


@dataclass(frozen=True, slots=True)
class EntryRef:
    """Entry `ref` (`entry:<id>` or `entry:<id>#<call id>`) of session `session`."""

    ref: str
    session: str


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
        return resolve_ref(log, ref.ref)
