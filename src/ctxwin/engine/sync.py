"""Matching a resent history against the stored one, for callers that send everything every time
(a proxy sees the agent's whole history on each request; framework adapters hold their own list)."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin.messages import Message


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
