"""Matching a resent history against the stored one, for callers that send everything every time
(a proxy sees the agent's whole history on each request; framework adapters hold their own list)."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin.messages import Message


def common_history(stored: Sequence[Message], incoming: Sequence[Message]) -> int:
    """How many leading messages the two histories share, by content (role and blocks; ids, metadata
    and the provider's formatting do not count)."""
    shared = 0
    for old, new in zip(stored, incoming, strict=False):
        if old.content_key != new.content_key:
            break
        shared += 1
    return shared
