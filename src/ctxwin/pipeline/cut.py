"""Cutting text to a character budget: the one head/tail primitive every stage shares.

Functions return a `Cut` record (what was kept, of how much); callers write their own notices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SNAP_HEAD_SHARE = 0.8
"""A head cut moves back to the last line end when that line end is past this share of the head."""
SNAP_TAIL_SHARE = 0.2
"""A tail cut moves forward to the first line end within this share of the tail."""
IMPORTANT_TAIL_CHARS = 2_000
"""How much of the end of a text is searched for signs that the tail matters."""

_ERROR_WORDS = re.compile(r"\b(error|exception|failed|failure|fatal|traceback|panic|stack trace|errno|exit code)\b")
_TOTAL_WORDS = re.compile(r"\b(total|summary|result|results|complete|completed|finished|done|passed)\b")


@dataclass(frozen=True, slots=True)
class Cut:
    head: str
    tail: str
    total_chars: int

    @property
    def omitted(self) -> int:
        return self.total_chars - len(self.head) - len(self.tail)

    @property
    def changed(self) -> bool:
        return self.omitted > 0


def has_important_tail(text: str) -> bool:
    """OpenClaw's test: errors, totals or a closing JSON brace near the end mean the tail is worth keeping."""
    end = text[-IMPORTANT_TAIL_CHARS:].lower()
    return bool(_ERROR_WORDS.search(end) or _TOTAL_WORDS.search(end) or end.rstrip().endswith("}"))


def head_tail(text: str, head_chars: int, tail_chars: int) -> Cut:
    """Keep about `head_chars` from the start and `tail_chars` from the end, snapped to line ends
    where that costs little. Never returns more than `head_chars + tail_chars` characters."""
    head_chars = max(head_chars, 0)
    tail_chars = max(tail_chars, 0)
    if len(text) <= head_chars + tail_chars:
        return Cut(text, "", len(text))
    head = text[:head_chars]
    newline = head.rfind("\n")
    if newline >= SNAP_HEAD_SHARE * head_chars:
        head = head[: newline + 1]
    tail = text[len(text) - tail_chars :] if tail_chars else ""
    if tail:
        newline = tail.find("\n")
        if 0 <= newline <= SNAP_TAIL_SHARE * tail_chars:
            tail = tail[newline + 1 :]
    return Cut(head, tail, len(text))


CLIP_MARK = " […]"  # appended to a text that was shortened


def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters plus CLIP_MARK, at a word boundary when one is near."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space > limit * 0.8:
        cut = cut[:space]
    return cut.rstrip() + CLIP_MARK
