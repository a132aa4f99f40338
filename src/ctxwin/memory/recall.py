"""Searching a conversation (Letta's `conversation_search`) and resolving what a hit points at.

Every message of a session log is indexed, evicted and masked ones included (`MemoryIndex.add_entries`
takes the log itself); a hit carries the `recall` ref, `entry:<id>` or `entry:<id>#<call id>`, and
`resolve_ref` returns the original text byte for byte, read from the log, exactly as the engine's
`recall` does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from ctxwin.compaction.extractive.lists import LIST_NAMES, list_text
from ctxwin.errors import CtxwinError, InputError
from ctxwin.memory.index import MemoryIndex, SearchResult
from ctxwin.messages import Message
from ctxwin.store.base import SessionLog

ROLES = ("assistant", "user", "tool")
"""The roles `conversation_search` filters by (Letta's)."""
DEFAULT_LIMIT = 5
"""Letta's default number of results."""


def resolve_ref(log: SessionLog, ref: str) -> str:
    """The text a ref names, byte for byte as logged: `entry:<id>` (the message's text, or its tool
    results joined, or the message as JSON), `entry:<id>#<call id>` (that tool result, or a call's
    arguments as JSON), or `entry:<id>#<list>` (a full list a summary cut: the engine's recall); any of
    them may end in `@<this log's session id>`."""
    if not ref.startswith("entry:"):
        raise InputError(f"not an entry ref: {ref!r}", "refs look like entry:<id> or entry:<id>#<call id>")
    ref, at, session = ref.partition("@")  # entry:<id>@<session>: a consolidated memory's ref names its session
    if at and session != log.session_id:
        raise InputError(f"{ref}@{session} is an entry of session {session}, not of {log.session_id}",
                         "read it with memory_get, which finds the session under the sessions folder")
    entry_id, _, call_id = ref[len("entry:"):].partition("#")
    try:
        entry = log.get(entry_id)
    except (KeyError, CtxwinError):
        raise InputError(f"{ref}: no such entry in this session", "use a ref from a search result") from None
    if entry.kind == "compaction":  # a summary, or one of the full lists it cut (`#commands`, `#errors`, ...)
        found = entry.payload.get("summary") if not call_id else list_text(entry.payload.get("summarizer_state") or {},
                                                                           call_id)
        if not isinstance(found, str):
            raise InputError(f"{ref}: the compaction has no list {call_id!r}", f"lists: {', '.join(LIST_NAMES)}")
        return found
    if entry.kind != "message":
        raise InputError(f"{ref}: entry is a {entry.kind}, not a message")
    message = Message.from_dict(entry.payload)
    if call_id:
        for result in message.tool_results:
            if result.call_id == call_id:
                return result.text
        for call in message.tool_calls:
            if call.id == call_id:
                return json.dumps(call.arguments, ensure_ascii=False)
        listed = _covering_list(log, entry_id, call_id)
        if listed is not None:
            return listed
        raise InputError(f"{ref}: entry has no result or call {call_id}")
    return message.text or "\n".join(r.text for r in message.tool_results) or json.dumps(message.to_dict())


def _covering_list(log: SessionLog, entry_id: str, name: str) -> str | None:
    """The full list `name` of the latest compaction on the branch that summarized entry `entry_id`
    (the ref a summary's cut list ends with), or None."""
    if name not in LIST_NAMES:
        return None
    for stored in reversed(list(log.path())):
        if stored.kind == "compaction" and entry_id in (stored.payload.get("covered_ids") or ()):
            return list_text(stored.payload.get("summarizer_state") or {}, name)
    return None


def _iso_day(value: str | None, name: str) -> str | None:
    if value is None or value == "":
        return None
    try:
        (date.fromisoformat(value) if len(value) == 10 else datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        raise InputError(f"{name} {value!r} is not an ISO date", "write YYYY-MM-DD or an ISO 8601 timestamp") from None
    return value


@dataclass(frozen=True, slots=True)
class ConversationHit:
    """One message (part) found: its ref, role, time, score and text snippet; `session` names its log."""

    ref: str
    role: str | None
    timestamp: str | None
    score: float
    snippet: str
    session: str

    def to_dict(self) -> dict[str, Any]:
        return {"ref": self.ref, "role": self.role, "timestamp": self.timestamp, "score": round(self.score, 4),
                "snippet": self.snippet, "session": self.session}


def conversation_search(index: MemoryIndex, query: str, *, sessions: Sequence[str] | None = None,
                        roles: Sequence[str] | None = None, limit: int = DEFAULT_LIMIT,
                        start_date: str | None = None, end_date: str | None = None, hops: int = 1,
                        max_chars: int | None = None) -> list[ConversationHit]:
    """Messages of the given sessions (all indexed sessions when None) matching `query`, best first.
    Dates are inclusive ISO dates or timestamps (a date-only end covers the whole day). `hops` and
    `max_chars` as in `MemoryIndex.search` (a chained question; the characters of all snippets)."""
    for role in roles or ():
        if role not in ROLES:
            raise InputError(f"unknown role {role!r}", f"roles are {', '.join(ROLES)}")
    results = index.search(query, k=limit, sources=["session"], paths=sessions, roles=roles,
                           start=_iso_day(start_date, "start_date"), end=_iso_day(end_date, "end_date"),
                           hops=hops, max_chars=max_chars)
    return [_hit(r) for r in results if r.source == "session" and r.ref]


def _hit(result: SearchResult) -> ConversationHit:
    return ConversationHit(result.ref or "", result.role, result.timestamp, result.score, result.snippet, result.path)


def search_log(log: SessionLog, query: str, *, index: MemoryIndex | None = None, limit: int = DEFAULT_LIMIT,
               roles: Sequence[str] | None = None, start_date: str | None = None,
               end_date: str | None = None, hops: int = 1, max_chars: int | None = None) -> list[ConversationHit]:
    """`conversation_search` over one session log, indexing it first (into `index`, or a throwaway
    in-memory SQLite index)."""
    own = index is None
    target = index if index is not None else MemoryIndex.open(":memory:")
    try:
        target.add_entries(log, log.session_id)
        return conversation_search(target, query, sessions=[log.session_id], roles=roles, limit=limit,
                                   start_date=start_date, end_date=end_date, hops=hops, max_chars=max_chars)
    finally:
        if own:
            target.close()


def index_sessions(index: MemoryIndex, root: str | Path) -> dict[str, int]:
    """Indexes every JSONL session under `root` (a sessions folder, as `ctxwin sessions` lists it),
    so `conversation_search` can search across the workspace's sessions; returns chunks added per
    session id. Read without a lock (they may be in use); entries already indexed are skipped."""
    from ctxwin.store.session import list_sessions

    return dict(index_stored_session(index, info.path) for info in list_sessions(root))


def index_stored_session(index: MemoryIndex, path: str | Path) -> tuple[str, int]:
    """Indexes what is new in the JSONL session in folder `path` since the last call (read without a
    lock: it may be in use); returns (its session id, chunks added)."""
    from ctxwin.store.session import Session

    with Session.open(path, readonly=True) as log:
        key = f"session-entries:{log.session_id}"
        done = int(index.backend.get_meta(key) or 0)
        entries = list(log)
        added = index.add_entries(entries[done:], log.session_id) if len(entries) > done else 0
        index.backend.set_meta({key: str(len(entries))})
        return log.session_id, added
