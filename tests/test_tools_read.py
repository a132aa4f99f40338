"""read: caps, notices, gates, the re-read stub, notebooks, PDFs, images; on real files (the project's
tree and the letta-filesystem records) and a property: paging by the notices rebuilds any file."""

from __future__ import annotations

import io
import json
import re
import struct
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO, shared_path
from ctxwin.messages import Image
from ctxwin.tokens import counter_for
from ctxwin.tools import Limits, ReadState, Workspace, read
from ctxwin.tools.lines import FileIndex, read_window

_NUMBERED = re.compile(r" *(\d+)\t(.*)", re.DOTALL)
_LONG = re.compile(r" \[\.\.\. (\d+) more characters in line (\d+)\. Use offset=(\d+) column=(\d+) to read on\.\]$")
_CONTINUE = re.compile(r"Use offset=(\d+)(?: column=(\d+))? to continue")


def reconstruct(ws: Workspace, path: str, max_calls: int = 100_000) -> str:
    """Reads `path` only by following what the outputs say: page notices, long-line markers and the
    end-of-file note. Line numbers are stripped; the result must be the file."""
    lines: dict[int, list[str]] = {}
    no_newline = False
    queue: list[tuple[int | None, int | None]] = [(None, None)]
    calls = 0
    while queue:
        offset, column = queue.pop(0)
        calls += 1
        assert calls < max_calls
        out = read(ws, path, offset=offset, column=column)
        assert not out.is_error, out.text
        if out.text == "[The file is empty.]":
            return ""
        body, _, notices = out.text.partition("\n\n[")
        notices = "[" + notices if notices else ""
        no_newline = no_newline or "[No newline at end of file.]" in notices
        follow = _CONTINUE.search(notices)
        if column is not None:  # a piece of one long line
            number, text = _NUMBERED.fullmatch(body).groups()  # type: ignore[union-attr]
            lines[int(number)].append(text)
            if follow and follow.group(2):
                queue.insert(0, (int(follow.group(1)), int(follow.group(2))))
            continue
        long_lines: list[tuple[int, int]] = []
        for raw in body.split("\n"):
            number, text = _NUMBERED.fullmatch(raw).groups()  # type: ignore[union-attr]
            marker = _LONG.search(text)
            if marker:
                text = text[: marker.start()]
                long_lines.append((int(marker.group(3)), int(marker.group(4))))
            lines[int(number)] = [text]
        queue[:0] = list(long_lines)
        if follow:
            queue.append((int(follow.group(1)), None))
    assert sorted(lines) == list(range(1, len(lines) + 1))
    return "\n".join("".join(lines[n]) for n in sorted(lines)) + ("" if no_newline else "\n")


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


# --------------------------------------------------------------------------------------------------
# Caps and notices


def test_3000_line_file_pages_with_pi_notices(tmp_path: Path) -> None:
    write(tmp_path, "f.txt", "".join(f"line {n}\n" for n in range(1, 3001)))
    ws = Workspace([tmp_path])
    first = read(ws, "f.txt")
    body, notice = first.text.split("\n\n")
    assert body.split("\n")[0] == "     1\tline 1"
    assert body.split("\n")[-1] == "  2000\tline 2000"
    assert notice == "[Showing lines 1-2000 of 3000. Use offset=2001 to continue.]"
    assert first.details["truncation"]["truncated"] is False  # the line window, not the byte cap, stopped it
    assert first.details["next_offset"] == 2001
    rest = read(ws, "f.txt", offset=2001)
    assert rest.text.split("\n")[0] == "  2001\tline 2001"
    assert rest.text.endswith("  3000\tline 3000")
    assert rest.details["next_offset"] is None
    some = read(ws, "f.txt", offset=10, limit=5)
    assert some.text.endswith("[2986 more lines in file. Use offset=15 to continue.]")
    beyond = read(ws, "f.txt", offset=3001)
    assert beyond.is_error and beyond.text.startswith("Offset 3001 is beyond end of file (3000 lines total).")
    assert read(ws, "f.txt", offset=1, limit=5000).text.endswith(
        "[Showing lines 1-2000 of 3000. Use offset=2001 to continue.]"
    )


def test_byte_cap_notice_on_real_letta_file() -> None:
    files = shared_path("letta-filesystem", "files")
    ws = Workspace([files])
    out = read(ws, "addresses.txt")  # 167 KB, 8,136 lines: the 50 KB cap stops it before 2,000 lines
    trunc = out.details["truncation"]
    assert trunc["truncated_by"] == "bytes" and trunc["output_bytes"] <= 50 * 1024
    end = out.details["end"]
    assert end < 2000
    assert out.text.endswith(f"[Showing lines 1-{end} of 8136 (50.0KB limit). Use offset={end + 1} to continue.]")
    assert len(out.text.encode()) <= 50 * 1024 + 200


def test_size_gate_on_real_letta_file_and_paging_past_it() -> None:
    files = shared_path("letta-filesystem", "files")
    ws = Workspace([files])
    refusal = read(ws, "bank_accounts.txt")  # 302 KB > 256 KB
    assert refusal.is_error and refusal.details["error"] == "too_large"
    assert "295.1KB" in refusal.text and "256.0KB" in refusal.text
    assert "offset and limit" in refusal.text and "grep" in refusal.text
    page = read(ws, "bank_accounts.txt", offset=1, limit=50)
    assert page.text.startswith("     1\t### acct-0001 (owner: pers-0001)")
    assert page.text.endswith("[14046 more lines in file. Use offset=51 to continue.]")


@pytest.mark.parametrize("name", ["people.txt", "medical_records.txt", "bank_accounts.txt", "employments.txt"])
def test_paging_reconstructs_real_letta_files(name: str) -> None:
    files = shared_path("letta-filesystem", "files")
    ws = Workspace([files])
    original = (files / name).read_text()
    if len(original) > 256 * 1024:  # the gate refuses the first call without offset; start at line 1
        assert read(ws, name).is_error
        ws = Workspace([files], limits=Limits(read_max_file_bytes=1 << 30))
    assert reconstruct(ws, name) == original


def test_paging_reconstructs_project_sources() -> None:
    ws = Workspace([REPO], limits=Limits(max_lines=97, max_bytes=3000, read_max_line_chars=60))
    for rel in ("src/ctxwin/messages/model.py", "src/ctxwin/tools/paging.py", "pyproject.toml"):
        assert reconstruct(ws, rel) == (REPO / rel).read_text(), rel


def test_long_lines_are_cut_with_a_marker_and_paged_by_column(tmp_path: Path) -> None:
    write(tmp_path, "min.js", "short\n" + "x" * 4500 + "y" * 500 + "\nend\n")
    ws = Workspace([tmp_path])
    out = read(ws, "min.js")
    second = out.text.split("\n")[1]
    marker = " [... 3000 more characters in line 2. Use offset=2 column=2001 to read on.]"
    assert second == "     2\t" + "x" * 2000 + marker
    assert out.details["lines_cut"] == 1
    middle = read(ws, "min.js", offset=2, column=2001)
    assert middle.text == (
        "     2\t" + "x" * 2000 + "\n\n[Showing characters 2001-4000 of line 2 (5000 characters). "
        "Use offset=2 column=4001 to continue.]"
    )
    last = read(ws, "min.js", offset=2, column=4001)
    assert last.text.split("\n")[0] == "     2\t" + "x" * 500 + "y" * 500
    assert last.text.endswith("the end of the line. Use offset=3 to continue.]")
    assert read(ws, "min.js", offset=2, column=5001).details["error"] == "column_beyond"


def test_no_newline_crlf_unicode_and_empty(tmp_path: Path) -> None:
    ws = Workspace([tmp_path])
    write(tmp_path, "a.txt", "alpha\nbeta")
    assert read(ws, "a.txt").text == "     1\talpha\n     2\tbeta\n\n[No newline at end of file.]"
    write(tmp_path, "crlf.txt", "one\r\ntwo\r\n")
    assert read(ws, "crlf.txt").text == "     1\tone\r\n     2\ttwo\r"
    write(tmp_path, "u.txt", "héllo wörld ✓ 漢字\n\u2028same line\n")
    assert read(ws, "u.txt").text == "     1\théllo wörld ✓ 漢字\n     2\t\u2028same line"
    write(tmp_path, "e.txt", "")
    out = read(ws, "e.txt")
    assert out.text == "[The file is empty.]" and not out.is_error
    write(tmp_path, "nl.txt", "\n")
    assert read(ws, "nl.txt").text == "     1\t"


def test_invalid_utf8_is_replaced_with_a_note(tmp_path: Path) -> None:
    write(tmp_path, "bad.txt", b"caf\xe9 au lait\nok\n")
    out = read(Workspace([tmp_path]), "bad.txt")
    assert out.text.startswith("     1\tcaf\ufffd au lait\n     2\tok")
    assert "[Note: 1 bytes that are not valid UTF-8 were replaced with U+FFFD.]" in out.text
    assert out.details["invalid_utf8_bytes"] == 1


def test_token_gate_refuses_token_dense_pages(tmp_path: Path) -> None:
    write(tmp_path, "cjk.txt", "".join("漢字仮名交じり文" * 20 + "\n" for _ in range(300)))
    ws = Workspace([tmp_path], limits=Limits(read_max_tokens=2000), counter=counter_for("gpt-4o"))
    out = read(ws, "cjk.txt")
    assert out.is_error and out.details["error"] == "too_many_tokens"
    assert "2000-token limit" in out.text and "offset and limit" in out.text
    small = read(ws, "cjk.txt", offset=1, limit=5)
    assert not small.is_error and small.details["tokens"] <= 2000
    assert small.details["counter"] == ws.counter.name  # type: ignore[union-attr]


def test_default_token_gate_passes_ordinary_code() -> None:
    out = read(Workspace([REPO]), "src/ctxwin/messages/model.py")
    assert not out.is_error
    assert out.details["tokens"] <= 25_000


# --------------------------------------------------------------------------------------------------
# Re-read stub


def test_unchanged_reread_is_a_stub(tmp_path: Path) -> None:
    path = write(tmp_path, "f.txt", "a\nb\nc\n")
    ws = Workspace([tmp_path])
    state = ReadState(clock=lambda: 1_700_000_000.0)
    first = read(ws, "f.txt", state=state, call_id="toolu_01")
    assert "     1\ta" in first.text
    again = read(ws, "./f.txt", state=state)
    assert again.details["stub"] is True and not again.is_error
    assert again.text.startswith("File unchanged since call toolu_01 at 22:13:20 UTC")
    assert "refer to it instead of re-reading" in again.text
    other_range = read(ws, "f.txt", offset=2, state=state)
    assert "stub" not in other_range.details
    assert read(ws, "f.txt", offset=2, state=state).text.startswith("File unchanged since read #2")
    path.write_text("a\nb\nc\nd\n")  # changed: full content again
    changed = read(ws, "f.txt", state=state)
    assert "     4\td" in changed.text
    state.forget()
    assert "stub" not in read(ws, "f.txt", state=state).details
    assert "stub" not in read(ws, "f.txt").details  # no state, no stub


# --------------------------------------------------------------------------------------------------
# Notebooks, PDFs, images


def test_notebook_cells_and_summarized_outputs(tmp_path: Path) -> None:
    notebook = {
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [
            {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": ["# Analysis\n", "Intro."]},
            {
                "cell_type": "code", "id": "c1", "execution_count": 3, "metadata": {}, "source": "print('x' * 9000)",
                "outputs": [{"output_type": "stream", "name": "stdout", "text": ["x" * 9000 + "\n"]}],
            },
            {
                "cell_type": "code", "id": "c2", "execution_count": 4, "metadata": {}, "source": "df.plot()",
                "outputs": [{
                    "output_type": "execute_result", "execution_count": 4, "metadata": {},
                    "data": {"text/plain": "<Axes>", "image/png": "iVBORw0KGgo" * 2000},
                }],
            },
            {
                "cell_type": "code", "id": "c3", "execution_count": 5, "metadata": {}, "source": "1/0",
                "outputs": [{
                    "output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero",
                    "traceback": ["\x1b[0;31mTraceback\x1b[0m", "----> 1 1/0", "ZeroDivisionError: division by zero"],
                }],
            },
        ],
    }
    write(tmp_path, "nb.ipynb", json.dumps(notebook))
    out = read(Workspace([tmp_path]), "nb.ipynb")
    text = out.text
    assert not out.is_error, text
    assert "[Jupyter notebook: 4 cells (3 code, 1 markdown), kernel python3]" in text
    assert "--- Cell 1 [markdown] ---" in text and "# Analysis" in text
    assert "--- Cell 2 [code, In [3]] ---" in text
    assert "characters of output omitted" in text and "x" * 9000 not in text
    assert "[image/png output, 21.5KB: not shown]" in text and "iVBORw0KGgo" not in text
    assert "ZeroDivisionError: division by zero" in text and "\x1b" not in text
    assert out.details["kind"] == "notebook" and out.details["outputs_cut"] == 1


def test_notebook_without_nbformat_is_parsed_as_plain_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cells = [{"cell_type": "code", "execution_count": 1, "metadata": {}, "source": ["x = 1\n", "x"], "outputs": [
        {"output_type": "execute_result", "execution_count": 1, "metadata": {}, "data": {"text/plain": ["1"]}}
    ]}]
    write(tmp_path, "nb.ipynb", json.dumps({"nbformat": 4, "nbformat_minor": 2, "metadata": {}, "cells": cells}))
    monkeypatch.setitem(sys.modules, "nbformat", None)  # `import nbformat` now fails as if not installed
    out = read(Workspace([tmp_path]), "nb.ipynb")
    assert out.text == (
        "     1\t[Jupyter notebook: 1 cells (1 code), kernel unknown]\n     2\t--- Cell 1 [code, In [1]] ---\n"
        "     3\tx = 1\n     4\tx\n     5\t--- Output of cell 1 (execute_result [1]) ---\n     6\t1"
    )
    write(tmp_path, "broken.ipynb", "{not json")
    assert read(Workspace([tmp_path]), "broken.ipynb").details["error"] == "bad_notebook"


def _pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF with one line of Helvetica text per page."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>")
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET"
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            f"/Contents {5 + 2 * i} 0 R >>"
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream")
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


def test_pdf_text_per_page_with_page_ranges(tmp_path: Path) -> None:
    write(tmp_path, "short.pdf", _pdf(["Hello page one", "Second page here"]))
    write(tmp_path, "long.pdf", _pdf([f"Content of page {n}" for n in range(1, 31)]))
    ws = Workspace([tmp_path])
    out = read(ws, "short.pdf")
    assert not out.is_error, out.text
    assert out.text == (
        "     1\t--- Page 1 ---\n     2\tHello page one\n     3\t--- Page 2 ---\n     4\tSecond page here"
    )
    refusal = read(ws, "long.pdf")
    assert refusal.details["error"] == "pdf_needs_pages"
    assert "30 pages" in refusal.text and 'pages="1-20"' in refusal.text
    part = read(ws, "long.pdf", pages="3-4")
    assert "Content of page 3" in part.text and "Content of page 4" in part.text and "page 5" not in part.text
    assert part.text.endswith('[Showing pages 3-4 of 30. Use pages="5-24" to continue.]')
    assert read(ws, "long.pdf", pages="1-25").details["error"] == "bad_argument"
    assert read(ws, "long.pdf", pages="40").details["error"] == "bad_argument"


def test_pdf_without_pypdf_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "short.pdf", _pdf(["Hello"]))
    monkeypatch.setitem(sys.modules, "pypdf", None)  # makes `import pypdf` fail as if not installed
    out = read(Workspace([tmp_path]), "short.pdf")
    assert out.details["error"] == "missing_extra"
    assert "pip install 'ctxwin[pdf]'" in out.text


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"".join(b"\x00" + b"\x00\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def test_images_become_image_parts_with_dimensions(tmp_path: Path) -> None:
    write(tmp_path, "a.png", _png(64, 32))
    write(tmp_path, "b.gif", b"GIF89a" + struct.pack("<HH", 10, 20) + b"\x00" * 20)
    jpeg = b"\xff\xd8\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x00" * 9
    jpeg += b"\xff\xc0" + struct.pack(">HBHH", 17, 8, 480, 640) + b"\x03" + b"\x00" * 9 + b"\xff\xd9"
    write(tmp_path, "c.jpg", jpeg)
    webp = b"RIFF" + struct.pack("<I", 30) + b"WEBPVP8X" + struct.pack("<I", 10) + b"\x00" * 4
    webp += (299).to_bytes(3, "little") + (199).to_bytes(3, "little")
    write(tmp_path, "d.webp", webp)
    ws = Workspace([tmp_path])
    for name, media_type, size in (
        ("a.png", "image/png", (64, 32)), ("b.gif", "image/gif", (10, 20)),
        ("c.jpg", "image/jpeg", (640, 480)), ("d.webp", "image/webp", (300, 200)),
    ):
        out = read(ws, name)
        assert not out.is_error, out.text
        image = out.parts[1]
        assert isinstance(image, Image) and image.media_type == media_type
        assert (image.width, image.height) == size
        assert out.text.startswith(f"Read image file [{media_type}] {name}: {size[0]}x{size[1]}")
    big = Workspace([tmp_path], limits=Limits(read_max_image_bytes=40))
    assert read(big, "a.png").details["error"] == "too_large"


# --------------------------------------------------------------------------------------------------
# The property: following the notices rebuilds any file exactly

_LINE_CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\x00")  # NUL makes it binary
_LINES = st.lists(
    st.one_of(st.text(_LINE_CHARS, max_size=12), st.text(_LINE_CHARS, min_size=15, max_size=70), st.just("")),
    max_size=40,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=_LINES, final_newline=st.booleans())
def test_property_paging_by_notices_rebuilds_the_file(tmp_path: Path, lines: list[str], final_newline: bool) -> None:
    content = "\n".join(lines) + ("\n" if final_newline and lines else "")
    path = tmp_path / "prop.txt"
    path.write_bytes(content.encode("utf-8"))
    tight = Workspace([tmp_path], limits=Limits(max_lines=7, max_bytes=400, read_max_line_chars=16))
    assert reconstruct(tight, "prop.txt") == content
    assert reconstruct(Workspace([tmp_path]), "prop.txt") == content


def test_line_index_gives_the_same_pages_as_a_fresh_scan(tmp_path: Path) -> None:
    """A 3 MB file paged with the per-workspace line index, forwards and backwards, reads exactly as
    a fresh workspace (no index) reads it."""
    rows = [("é" * (n % 7)) + f"row {n} " + "x" * ((n * 37) % 300) + "\r" * (n % 11 == 0) for n in range(40_000)]
    rows[12_345] = "L" * 9000  # a long line inside
    write(tmp_path, "big.txt", "\n".join(rows))  # no final newline
    cached = Workspace([tmp_path])
    for offset in (1, 30_000, 2001, 39_990, 12_345, 17_000, 40_000, 5):
        fresh = read(Workspace([tmp_path]), "big.txt", offset=offset)
        assert read(cached, "big.txt", offset=offset).text == fresh.text
    piece = read(cached, "big.txt", offset=12_346, column=2001)
    assert piece.text.startswith(" 12346\t" + "L" * 2000 + "\n\n[Showing characters 2001-4000 of line 12346")
    assert piece.text == read(Workspace([tmp_path]), "big.txt", offset=12_346, column=2001).text
    assert read(cached, "big.txt", offset=12_346, column=9001).details["error"] == "column_beyond"
    assert read(cached, "big.txt", offset=40_001).text.startswith("Offset 40001 is beyond end of file (40000 lines")
    assert len(cached.line_index) == 1
    tail = read(cached, "big.txt", offset=39_999)
    assert tail.text.endswith("[No newline at end of file.]") and tail.details["total_lines"] == 40_000


@settings(max_examples=150, deadline=None)
@given(
    lines=_LINES,
    final_newline=st.booleans(),
    queries=st.lists(st.tuples(st.integers(1, 45), st.integers(1, 9), st.integers(1, 40)), min_size=1, max_size=8),
    chunk=st.integers(1, 64),
)
def test_property_line_index_never_changes_a_window(
    lines: list[str], final_newline: bool, queries: list[tuple[int, int, int]], chunk: int
) -> None:
    """Tiny chunks put checkpoints everywhere (mid-character, at newlines, at the end); any sequence
    of windows read through one shared index equals the same windows read from scratch."""
    data = ("\n".join(lines) + ("\n" if final_newline and lines else "")).encode("utf-8")
    index = FileIndex()
    for start, count, column in queries:
        args = {"column": column, "max_chars": 5, "count_max_bytes": 1 << 30, "chunk_bytes": chunk}
        cached = read_window(io.BytesIO(data), start, count, index=index, decode_bytes=chunk, **args)
        fresh = read_window(io.BytesIO(data), start, count, decode_bytes=chunk, **args)
        assert (cached.lines, cached.total_lines) == (fresh.lines, fresh.total_lines)
        assert cached.more_after == fresh.more_after
        truth = data.decode("utf-8").split("\n")
        if data.endswith(b"\n") or not data:
            truth.pop()
        wanted = truth[start - 1 : start - 1 + count]
        assert [(s.number, s.text, s.total_chars) for s in fresh.lines] == [
            (start + i, line[column - 1 : column - 1 + 5], len(line)) for i, line in enumerate(wanted)
        ]
        assert fresh.total_lines == len(truth)
        assert fresh.more_after == (start - 1 + count < len(truth))
        if cached.more_after is False and fresh.ends_with_newline is not None:
            assert cached.ends_with_newline == fresh.ends_with_newline
