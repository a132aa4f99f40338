"""What the user asked: the goal (their first message) and every message they typed, verbatim up to a
cap."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin.compaction.identifiers import user_text
from ctxwin.compaction.summary import merge_items
from ctxwin.messages import Message
from ctxwin.pipeline.cut import clip

PER_MESSAGE_CHARS = 1_000  # a user message is kept verbatim up to this many characters
USER_MEDIUM_CHARS = 300  # the middle form of a long user message
USER_SHORT_CHARS = 100  # the shortest form: its opening, enough to recognise the message
GOAL_CHARS = 600  # the goal shown at most this long


def user_messages(span: Sequence[Message], per_message_chars: int = PER_MESSAGE_CHARS) -> list[str]:
    """Every message the user typed, in order, each cut to `per_message_chars`."""
    return [clip(t, per_message_chars) for t in (user_text(m) for m in span) if t]


def dedup_last(items: Sequence[str]) -> list[str]:
    """Duplicates removed, each kept at its last position (most recent use)."""
    return merge_items([], list(reversed(items)), to_front=True)[::-1] if items else []
