"""Streaming a window of lines out of a byte stream without reading more than needed.

Lines are split on `\\n` only (a `\\r` before it stays part of the line, so CRLF files round-trip);
a final newline ends the last line and does not start a new one. Bytes that are not UTF-8 decode to
U+FFFD, one per byte. Three phases: skip to the first wanted line counting raw newlines, decode the
window, then count the remaining newlines in raw bytes (up to a cap) for the total.

A `FileIndex` remembers what a scan learned about one version of a file (newline counts at chunk
starts, the total), so paging through a large file costs each page its own bytes, not the file's.
"""

from __future__ import annotations

import codecs
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import BinaryIO

STREAM_CHUNK = 256 * 1024  # bytes read per step when skipping or counting (and index checkpoint spacing)
DECODE_CHUNK = 64 * 1024  # bytes read per step inside the window (decoded and split: smaller wastes less)
INDEX_CACHE_FILES = 64  # file versions a LineIndexCache remembers (least recently used dropped)
_SURROGATES = re.compile("[\udc80-\udcff]")


@dataclass
class FileIndex:
    """Facts about one version of a file: newlines before each scanned chunk start, and its total."""

    checkpoints: dict[int, int] = field(default_factory=dict)  # byte offset -> newlines before it
    total_lines: int | None = None
    ends_with_newline: bool | None = None

    def best_start(self, newlines_before: int) -> tuple[int, int]:
        """The furthest known (offset, newlines) with fewer than `newlines_before` newlines before it."""
        best = (0, 0)
        for offset, count in self.checkpoints.items():
            if count < newlines_before and offset > best[0]:
                best = (offset, count)
        return best


class LineIndexCache:
    """`FileIndex`es keyed by a file version (device, inode, size, mtime), least recently used dropped.
    Not thread-safe: one per workspace, used by one agent loop."""

    def __init__(self, capacity: int = INDEX_CACHE_FILES) -> None:
        self._entries: OrderedDict[tuple[object, ...], FileIndex] = OrderedDict()
        self._capacity = capacity

    def get(self, key: tuple[object, ...]) -> FileIndex:
        index = self._entries.get(key)
        if index is None:
            index = self._entries[key] = FileIndex()
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        return index

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True, slots=True)
class LineSlice:
    """Line `number`, showing characters `column` .. `column + len(text) - 1` of `total_chars`."""

    number: int
    text: str
    column: int
    total_chars: int

    @property
    def cut(self) -> bool:
        return self.column - 1 + len(self.text) < self.total_chars

    @property
    def next_column(self) -> int:
        return self.column + len(self.text)


@dataclass(frozen=True, slots=True)
class Window:
    lines: tuple[LineSlice, ...]
    start: int  # the first line asked for (1-based)
    total_lines: int | None  # None when counting stopped at the byte cap
    more_after: bool  # a line exists after the window
    ends_with_newline: bool | None  # None when not known (counting stopped)
    invalid_utf8: int  # bytes in the window that were not UTF-8
    bytes_scanned: int


def _clean(text: str) -> tuple[str, int]:
    """Undecodable bytes (surrogate escapes) as U+FFFD, and how many there were."""
    if not _SURROGATES.search(text):
        return text, 0
    return _SURROGATES.subn("\ufffd", text)


def read_window(
    stream: BinaryIO,
    start: int,
    count: int,
    *,
    column: int = 1,
    max_chars: int,
    count_max_bytes: int,
    index: FileIndex | None = None,
    chunk_bytes: int = STREAM_CHUNK,
    decode_bytes: int = DECODE_CHUNK,
) -> Window:
    """Lines `start` .. `start + count - 1` of `stream`, each cut to `max_chars` characters from
    `column`; the total line count when the stream is at most `count_max_bytes` long (or `index`
    already knows it)."""
    offset, newlines = index.best_start(start - 1) if index is not None else (0, 0)
    if offset:
        stream.seek(offset)
    scanned = 0
    last_byte = b""
    pending = b""

    def read_chunk(size: int) -> bytes:
        """The next bytes; their start is remembered with the newlines before it (never at EOF, so a
        checkpoint always has bytes after it)."""
        at = stream.tell() if index is not None else 0
        chunk = stream.read(size)
        if chunk and index is not None:
            index.checkpoints.setdefault(at, newlines)
        return chunk

    def finish(total: int, ends: bool | None) -> int:
        if index is not None:
            index.total_lines, index.ends_with_newline = total, ends
        return total

    # Phase 1: skip to line `start` on raw bytes ('\n' is one byte in UTF-8, never inside a character).
    need = start - 1 - newlines
    while need > 0:
        chunk = read_chunk(chunk_bytes)
        if not chunk:
            break
        scanned += len(chunk)
        last_byte = chunk[-1:]
        found = chunk.count(b"\n")
        if found < need:
            newlines += found
            need -= found
            continue
        pos = -1
        for _ in range(need):
            pos = chunk.index(b"\n", pos + 1)
        newlines += need
        need = 0
        pending = chunk[pos + 1 :]
    if need > 0:  # the stream ended first
        total = finish(newlines + (1 if last_byte and last_byte != b"\n" else 0), last_byte == b"\n")
        return Window((), start, total, False, last_byte == b"\n" if last_byte else None, 0, scanned)

    # Phase 2: decode the window.
    decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
    lines: list[LineSlice] = []
    line_no = start
    end_line = start + count - 1
    lo = column - 1
    hi = lo + max_chars
    seen = 0  # characters of the current line so far
    keep: list[str] = []
    invalid = 0
    started = bool(pending) or newlines > 0
    rest = ""  # decoded text after the window
    eof = False
    first = True
    while True:
        if first and pending:
            chunk = pending
        else:
            chunk = read_chunk(decode_bytes)
            scanned += len(chunk)
        first = False
        if not chunk:
            eof = True
            text = decoder.decode(b"", final=True)
        else:
            last_byte = chunk[-1:]
            text = decoder.decode(chunk)
            started = True
        pieces = text.split("\n")
        last = len(pieces) - 1
        for i, piece in enumerate(pieces):
            if i:  # a new line starts after each newline
                seen = 0
                keep = []
            if seen < hi and seen + len(piece) > lo:
                keep.append(piece[max(0, lo - seen) : hi - seen])
            seen += len(piece)
            if i == last:
                break  # the line goes on in the next chunk
            newlines += 1
            shown, bad = _clean(keep[0] if len(keep) == 1 else "".join(keep))
            invalid += bad
            lines.append(LineSlice(line_no, shown, column, seen))
            line_no += 1
            if line_no > end_line:
                rest = "\n".join(pieces[i + 1 :])
                seen = 0
                keep = []
                break
        if line_no > end_line or eof:
            break
    if line_no <= end_line:  # the stream ended inside the window
        if seen > 0:
            shown, bad = _clean("".join(keep))
            lines.append(LineSlice(line_no, shown, column, seen))
            return Window(tuple(lines), start, finish(newlines + 1, False), False, False, invalid + bad, scanned)
        ends = (last_byte == b"\n") if started else None
        return Window(tuple(lines), start, finish(newlines, bool(ends)), False, ends, invalid, scanned)

    # Phase 3: is there more, and how many lines in all?
    more_after = bool(rest) or bool(decoder.getstate()[0])  # undecoded bytes of a cut character count
    if index is not None and index.total_lines is not None:
        total = index.total_lines
        return Window(tuple(lines), start, total, end_line < total, index.ends_with_newline, invalid, scanned)
    newlines += rest.count("\n")
    last_char_newline = rest.endswith("\n") if rest else last_byte == b"\n"
    if decoder.getstate()[0]:
        last_char_newline = False
    while True:
        if scanned > count_max_bytes:
            if not more_after:
                more_after = bool(stream.read(1))
            return Window(tuple(lines), start, None, more_after, None, invalid, scanned)
        chunk = read_chunk(chunk_bytes)
        if not chunk:
            break
        scanned += len(chunk)
        more_after = True
        newlines += chunk.count(b"\n")
        last_char_newline = chunk.endswith(b"\n")
    if not more_after:
        return Window(tuple(lines), start, finish(newlines, True), False, True, invalid, scanned)
    total = finish(newlines + (0 if last_char_newline else 1), last_char_newline)
    return Window(tuple(lines), start, total, True, last_char_newline, invalid, scanned)
