"""The one truncation module every tool shares (after Pi's `truncate.ts`).

Functions here decide what to keep and return a record of what happened; the tools write the notices
from those records, so tests can assert on facts, not on strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

DEFAULT_MAX_LINES = 2000  # lines a tool shows at most (read, shell tail, spilled output)
DEFAULT_MAX_BYTES = 50 * 1024  # UTF-8 bytes a tool shows at most; whichever of the two is hit first wins
GREP_MAX_LINE_CHARS = 500  # characters of one grep line; longer lines end with GREP_LINE_MARKER
READ_MAX_LINE_CHARS = 2000  # characters of one line read shows; the rest is paged with `column`
GREP_LINE_MARKER = "... [truncated]"  # Pi's suffix on a cut grep line

TruncatedBy = Literal["lines", "bytes"]


@dataclass(frozen=True, slots=True)
class Truncation:
    """What a head or tail truncation kept. Line counts are of the input lines; `output_bytes`
    counts the kept lines joined by newlines, as the model will see them."""

    lines: tuple[str, ...]
    truncated: bool
    truncated_by: TruncatedBy | None
    total_lines: int
    total_bytes: int
    output_lines: int
    output_bytes: int
    max_lines: int
    max_bytes: int
    first_line_exceeds_limit: bool = False  # head: the first line alone is over max_bytes, nothing kept
    last_line_partial: bool = False  # tail: the last line alone was over max_bytes, its tail bytes kept

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def facts(self) -> dict[str, Any]:
        """The record without the kept lines (for `details`)."""
        return {name: getattr(self, name) for name in _FACTS}


_FACTS = (
    "truncated", "truncated_by", "total_lines", "total_bytes", "output_lines", "output_bytes", "max_lines",
    "max_bytes", "first_line_exceeds_limit", "last_line_partial",
)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def format_size(size: int) -> str:
    """Pi's formatSize: `512B`, `50.0KB`, `1.2MB`."""
    if size < 1024:
        return f"{size}B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f}KB"
    return f"{size / (1024 * 1024):.1f}MB"


def _fit(sizes: Iterable[int], max_lines: int, max_bytes: int) -> tuple[int, int, TruncatedBy | None]:
    """How many lines of these byte sizes (in the order given, joined by newlines) fit: (lines, bytes,
    which limit stopped them)."""
    used = 0
    kept = 0
    for size in sizes:
        if kept >= max_lines:
            return kept, used, "lines"
        cost = size + (1 if kept else 0)
        if used + cost > max_bytes:
            return kept, used, "bytes"
        used += cost
        kept += 1
    return kept, used, None


def truncate_head(
    lines: Sequence[str], max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
) -> Truncation:
    """Whole lines from the top until either limit is reached; never a partial line. The byte count
    adds 1 for each newline after the first line."""
    total_lines = len(lines)
    sizes = [utf8_len(line) for line in lines]
    total_bytes = sum(sizes) + max(0, total_lines - 1)
    if sizes and sizes[0] > max_bytes:
        return Truncation((), True, "bytes", total_lines, total_bytes, 0, 0, max_lines, max_bytes, True)
    kept, used, by = _fit(sizes, max_lines, max_bytes)
    return Truncation(
        tuple(lines[:kept]), by is not None, by, total_lines, total_bytes, kept, used, max_lines, max_bytes
    )


def truncate_tail(
    lines: Sequence[str], max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
) -> Truncation:
    """Whole lines from the bottom until either limit is reached. The one exception: when the very
    last line alone is over `max_bytes`, its last bytes are kept (cut on a UTF-8 boundary)."""
    total_lines = len(lines)
    sizes = [utf8_len(line) for line in lines]
    total_bytes = sum(sizes) + max(0, total_lines - 1)
    kept, used, by = _fit(reversed(sizes), max_lines, max_bytes)
    if kept == 0 and total_lines:
        tail = tail_bytes(lines[-1], max_bytes)
        size = utf8_len(tail)
        return Truncation((tail,), True, "bytes", total_lines, total_bytes, 1, size, max_lines, max_bytes,
                          last_line_partial=True)
    kept_lines = tuple(lines[total_lines - kept:]) if kept else ()
    return Truncation(kept_lines, by is not None, by, total_lines, total_bytes, kept, used, max_lines, max_bytes)


def tail_bytes(text: str, max_bytes: int) -> str:
    """The longest suffix of `text` whose UTF-8 encoding fits in `max_bytes`."""
    data = text.encode("utf-8", "surrogatepass")[-max_bytes:] if max_bytes > 0 else b""
    # Continuation bytes (10xxxxxx) at the start belong to a character that was cut: drop them.
    start = 0
    while start < len(data) and data[start] & 0xC0 == 0x80:
        start += 1
    return data[start:].decode("utf-8", "surrogatepass")


def head_bytes(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` whose UTF-8 encoding fits in `max_bytes`, never splitting a character."""
    if utf8_len(text) <= max_bytes:
        return text
    data = text.encode("utf-8", "surrogatepass")
    end = max(max_bytes, 0)
    while end > 0 and data[end] & 0xC0 == 0x80:  # a continuation byte: its character started earlier
        end -= 1
    return data[:end].decode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class LineCut:
    text: str
    cut: bool
    total_chars: int


def truncate_line(line: str, max_chars: int = GREP_MAX_LINE_CHARS, marker: str = GREP_LINE_MARKER) -> LineCut:
    """One line cut to `max_chars` characters plus `marker` (grep's per-line cap)."""
    if len(line) <= max_chars:
        return LineCut(line, False, len(line))
    return LineCut(line[:max_chars] + marker, True, len(line))


def cut_middle(text: str, max_chars: int, marker: str) -> str:
    """`text` if it fits, else its head and tail around `marker` (`{omitted}` in the marker is
    replaced by the number of characters left out), about 60 % head and 40 % tail."""
    if len(text) <= max_chars:
        return text
    room = max(0, max_chars - len(marker.format(omitted=len(text))))
    head = (room * 3) // 5
    tail = room - head
    omitted = len(text) - head - tail
    return text[:head] + marker.format(omitted=omitted) + (text[len(text) - tail:] if tail else "")
