"""Matching a resent history against the stored one, for callers that send everything every time
(a proxy sees the agent's whole history on each request; framework adapters hold their own list)."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin.errors import EntryFormatError
from ctxwin.messages import Message
from ctxwin.store.base import Entry, SessionLog
from ctxwin.store.entries import MessageEntry, parse

LEAVES_CHECKED = 8
"""Other branch tips a diverging history is matched against (the newest ones): enough for the few
conversations that share a session, bounded so a session with many old branches stays cheap."""


def common_history(stored: Sequence[tuple[str, str, bool]], incoming: Sequence[Message]) -> tuple[int, int]:
    """How much of the two histories is shared, by content (role and blocks; ids, metadata and the
    provider's formatting do not count): (stored entries, incoming messages). Messages ctxwin wrote
    itself (a checkpoint request) are not in the caller's history: they are stepped over."""
    i = j = 0
    while i < len(stored):
        _, key, own = stored[i]
        if j < len(incoming) and incoming[j].content_key == key:
            i, j = i + 1, j + 1
        elif own:
            i += 1
        else:
            break
    return i, j


def history_of(path: Sequence[Entry]) -> list[tuple[str, str, bool]]:
    """A path's messages as `SessionState.history` holds them: (entry id, content key, ctxwin's own)."""
    out = []
    for entry in path:
        if entry.kind != "message":
            continue
        try:
            record = parse(entry.kind, entry.payload, entry_id=entry.id)
        except EntryFormatError:
            continue
        if isinstance(record, MessageEntry):
            out.append((entry.id, record.message.content_key, "ctxwin" in record.message.meta))
    return out


def leaves(log: SessionLog) -> list[str]:
    """The tips of every branch of the log, oldest first (the durable stores index them)."""
    indexed = getattr(log, "leaves", None)
    if callable(indexed):
        return list(indexed())
    entries = list(log)
    parents = {e.parent_id for e in entries}
    return [e.id for e in entries if e.id not in parents]


def extended_leaf(log: SessionLog, incoming: Sequence[Message], better_than: int) -> tuple[str, int] | None:
    """Another branch tip whose whole history the incoming one extends, sharing more than
    `better_than` messages with it: (its id, messages shared), the one sharing most; None when none
    does. Two conversations that share a session (the same task run twice, no session header) then
    each go on on their own branch instead of branching again on every request."""
    current = log.leaf_id
    best: tuple[str, int] | None = None
    for leaf in leaves(log)[-LEAVES_CHECKED - 1:]:
        if leaf == current:
            continue
        history = history_of(log.path(leaf))
        stored, shared = common_history(history, incoming)
        if stored == len(history) and shared > (best[1] if best is not None else better_than):
            best = (leaf, shared)
    return best
