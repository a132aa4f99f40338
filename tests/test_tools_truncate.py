"""The shared truncation module: facts, not strings (Pi's truncate.ts semantics)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxwin.tools.truncate import (
    cut_middle,
    format_size,
    tail_bytes,
    truncate_head,
    truncate_line,
    truncate_tail,
    utf8_len,
)


def test_format_size() -> None:
    assert [format_size(n) for n in (0, 1023, 1024, 51200, 1536 * 1024, 1024**3)] == [
        "0B", "1023B", "1.0KB", "50.0KB", "1.5MB", "1024.0MB"
    ]


def test_head_by_lines_and_by_bytes() -> None:
    lines = [f"line {n}" for n in range(10)]
    by_lines = truncate_head(lines, max_lines=3, max_bytes=1000)
    assert by_lines.lines == ("line 0", "line 1", "line 2")
    assert (by_lines.truncated, by_lines.truncated_by, by_lines.output_lines, by_lines.total_lines) == (
        True, "lines", 3, 10
    )
    assert by_lines.output_bytes == 6 * 3 + 2
    by_bytes = truncate_head(lines, max_lines=100, max_bytes=19)
    assert by_bytes.lines == ("line 0", "line 1") and by_bytes.truncated_by == "bytes" and by_bytes.output_bytes == 13
    exact = truncate_head(lines[:3], max_lines=3, max_bytes=20)
    assert not exact.truncated and exact.truncated_by is None and exact.output_bytes == exact.total_bytes == 20
    huge = truncate_head(["x" * 100, "y"], max_lines=10, max_bytes=50)
    assert huge.first_line_exceeds_limit and huge.lines == () and huge.output_lines == 0


def test_tail_keeps_the_end_and_cuts_a_huge_last_line_on_a_utf8_boundary() -> None:
    lines = [f"l{n}" for n in range(100)]
    tail = truncate_tail(lines, max_lines=5, max_bytes=1000)
    assert tail.lines == ("l95", "l96", "l97", "l98", "l99") and tail.truncated_by == "lines"
    partial = truncate_tail(["start", "é" * 100], max_lines=10, max_bytes=51)
    assert partial.last_line_partial and partial.lines == ("é" * 25,) and partial.output_bytes == 50
    assert tail_bytes("aé", 2) == "é" and tail_bytes("aé", 1) == ""


def test_line_cut_and_middle_cut() -> None:
    cut = truncate_line("a" * 600)
    assert cut.cut and cut.text == "a" * 500 + "... [truncated]" and cut.total_chars == 600
    assert not truncate_line("short").cut
    middle = cut_middle("H" * 100 + "T" * 100, 60, "[{omitted} cut]")
    assert middle.startswith("H") and middle.endswith("T") and "[" in middle and len(middle) <= 60
    assert cut_middle("short", 60, "[{omitted}]") == "short"


@given(st.lists(st.text(max_size=30)), st.integers(1, 20), st.integers(1, 200))
def test_property_head_is_a_prefix_within_limits(lines: list[str], max_lines: int, max_bytes: int) -> None:
    result = truncate_head(lines, max_lines, max_bytes)
    assert list(result.lines) == lines[: result.output_lines]
    assert result.output_lines <= max_lines and result.output_bytes <= max_bytes
    assert result.output_bytes == utf8_len("\n".join(result.lines))
    assert result.truncated == (result.output_lines < len(lines))
    if result.truncated and not result.first_line_exceeds_limit:
        next_cost = result.output_bytes + utf8_len(lines[result.output_lines]) + (1 if result.output_lines else 0)
        assert result.output_lines == max_lines or next_cost > max_bytes


@given(st.lists(st.text(max_size=30), min_size=1), st.integers(1, 20), st.integers(1, 200))
def test_property_tail_is_a_suffix_within_limits(lines: list[str], max_lines: int, max_bytes: int) -> None:
    result = truncate_tail(lines, max_lines, max_bytes)
    assert result.output_bytes <= max_bytes
    if result.last_line_partial:
        assert lines[-1].endswith(result.lines[0])
    else:
        assert list(result.lines) == lines[len(lines) - result.output_lines :]
        assert result.output_bytes == utf8_len("\n".join(result.lines))
