"""Paging text by lines, as read and read_spilled show it: numbered lines, long lines cut, and
the notices that say exactly how to get the rest.

Line format (documented in every schema): `cat -n` style, the line number right-aligned in six
columns, a tab, then the line. A line longer than the per-line cap ends with
` [... N more characters in line L. Use offset=L column=C to read on.]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, BinaryIO

from ctxwin.tools.base import Limits, ToolError
from ctxwin.tools.lines import FileIndex, LineSlice, Window, read_window
from ctxwin.tools.truncate import Truncation, format_size, truncate_head

NUMBER_WIDTH = 6  # columns of the right-aligned line number (cat -n)


def number_line(number: int, text: str) -> str:
    return f"{number:>{NUMBER_WIDTH}}\t{text}"


def long_line_marker(line: LineSlice) -> str:
    more = line.total_chars - line.next_column + 1
    where = f"offset={line.number} column={line.next_column}"
    return f" [... {more} more characters in line {line.number}. Use {where} to read on.]"


@dataclass(frozen=True, slots=True)
class Page:
    """What one page shows and why it stops where it does."""

    text: str  # numbered lines and notices: what the model sees
    start: int  # first line shown
    end: int  # last line shown (start - 1 when none)
    total_lines: int | None
    next_offset: int | None  # where the next page starts, None at the end
    next_column: int | None  # column mode: where the rest of the line continues
    truncation: Truncation | None
    lines_cut: int  # lines cut at the per-line cap
    invalid_utf8: int  # bytes replaced with U+FFFD
    notices: tuple[str, ...]

    def facts(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "total_lines": self.total_lines,
            "next_offset": self.next_offset,
            "next_column": self.next_column,
            "truncation": self.truncation.facts() if self.truncation else None,
            "lines_cut": self.lines_cut,
            "invalid_utf8_bytes": self.invalid_utf8,
        }


def check_positive(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ToolError("bad_argument", f"{name}={value!r} is not valid; {name} is a whole number from 1.")


def _of_total(window: Window, size: int) -> str:
    if window.total_lines is None:
        return f"of a {format_size(size)} file (not counted)"
    return f"of {window.total_lines}"


def page(
    stream: BinaryIO,
    size: int,
    *,
    offset: int | None,
    limit: int | None,
    column: int | None,
    limits: Limits,
    index: FileIndex | None = None,
) -> Page:
    """One page of `stream`, following Pi's read: `offset` is the 1-based first line, `limit` the
    most lines; at most `limits.max_lines` lines and `limits.max_bytes` bytes are shown. `index`
    (what earlier pages learned about this exact file version) lets a page skip straight to its bytes."""
    check_positive("offset", offset)
    check_positive("limit", limit)
    check_positive("column", column)
    start = offset or 1
    if column is not None:
        return _column_page(stream, size, start, column, limits, index)
    count = min(limit, limits.max_lines) if limit else limits.max_lines
    window = read_window(
        stream, start, count, max_chars=limits.read_max_line_chars, count_max_bytes=limits.count_lines_max_bytes,
        index=index,
    )
    if not window.lines:
        if start == 1:
            return Page("[The file is empty.]", 1, 0, 0, None, None, None, 0, 0, ("empty",))
        raise ToolError(
            "offset_beyond", f"Offset {start} is beyond end of file ({window.total_lines} lines total).",
            "Use a smaller offset.",
        )
    formatted = [
        number_line(line.number, line.text) + (long_line_marker(line) if line.cut else "") for line in window.lines
    ]
    trunc = truncate_head(formatted, limits.max_lines, limits.max_bytes)
    notices: list[str] = []
    if trunc.first_line_exceeds_limit:
        first = window.lines[0]
        notice = (
            f"[Line {first.number} is {format_size(trunc.total_bytes)} shown, over the {format_size(limits.max_bytes)} "
            f"limit. Use offset={first.number} column=1 to read it in parts.]"
        )
        return Page(notice, start, start - 1, window.total_lines, start, 1, trunc, 0, 0, ("first_line_exceeds",))
    shown = window.lines[: trunc.output_lines]
    end = shown[-1].number
    at_eof = not window.more_after and len(shown) == len(window.lines)
    next_offset = None if at_eof else end + 1
    if trunc.truncated_by == "bytes":
        notices.append(
            f"[Showing lines {start}-{end} {_of_total(window, size)} ({format_size(limits.max_bytes)} limit). "
            f"Use offset={end + 1} to continue.]"
        )
    elif window.more_after and (limit is None or limit > limits.max_lines):
        notices.append(f"[Showing lines {start}-{end} {_of_total(window, size)}. Use offset={end + 1} to continue.]")
    elif window.more_after:
        remaining = f"{window.total_lines - end} more" if window.total_lines is not None else "More"
        notices.append(f"[{remaining} lines in file. Use offset={end + 1} to continue.]")
    if at_eof and window.ends_with_newline is False:
        notices.append("[No newline at end of file.]")
    if window.invalid_utf8:
        notices.append(f"[Note: {window.invalid_utf8} bytes that are not valid UTF-8 were replaced with U+FFFD.]")
    body = "\n".join(trunc.lines)
    text = body + ("\n\n" + "\n".join(notices) if notices else "")
    cut = sum(1 for line in shown if line.cut)
    return Page(
        text, start, end, window.total_lines, next_offset, None, trunc, cut, window.invalid_utf8, tuple(notices)
    )


def _column_page(
    stream: BinaryIO, size: int, number: int, column: int, limits: Limits, index: FileIndex | None
) -> Page:
    """The characters of one long line from `column` on (at most the per-line cap)."""
    window = read_window(
        stream, number, 1, column=column, max_chars=limits.read_max_line_chars,
        count_max_bytes=limits.count_lines_max_bytes, index=index,
    )
    if not window.lines:
        raise ToolError(
            "offset_beyond", f"Offset {number} is beyond end of file ({window.total_lines} lines total).",
            "Use a smaller offset.",
        )
    line = window.lines[0]
    if column > 1 and column > line.total_chars:
        raise ToolError(
            "column_beyond", f"Column {column} is beyond the end of line {number} ({line.total_chars} characters).",
            f"Use offset={number + 1} to read the next line." if window.more_after else None,
        )
    last = line.next_column - 1
    head = f"[Showing characters {line.column}-{last} of line {number} ({line.total_chars} characters)"
    notices = []
    next_offset: int | None = None
    next_column: int | None = None
    if line.cut:
        next_offset, next_column = number, line.next_column
        notices.append(f"{head}. Use offset={number} column={line.next_column} to continue.]")
    elif window.more_after:
        next_offset = number + 1
        notices.append(f"{head}, the end of the line. Use offset={number + 1} to continue.]")
    else:
        notices.append(f"{head}, the end of the line and of the file.]")
        if window.ends_with_newline is False:
            notices.append("[No newline at end of file.]")
    if window.invalid_utf8:
        notices.append(f"[Note: {window.invalid_utf8} bytes that are not valid UTF-8 were replaced with U+FFFD.]")
    text = number_line(number, line.text) + "\n\n" + "\n".join(notices)
    return Page(
        text, number, number, window.total_lines, next_offset, next_column, None, int(line.cut), window.invalid_utf8,
        tuple(notices),
    )
