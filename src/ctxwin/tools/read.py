"""The read tool: a capped, paged view of one file, plus notebooks, PDFs and images.

Order of checks, cheapest first and nothing opened before `stat` says it is a regular file:
sandbox -> stat (folders, FIFOs, devices, sockets refused) -> unchanged re-read stub -> sniff the
first 8 KB (images, PDFs, binary) -> size gate (whole files over 256 KB) -> page -> token gate.
"""

from __future__ import annotations

import base64
import io
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from ctxwin.messages import Image, Text
from ctxwin.tools.base import DESCRIPTION_FACTS, ToolError, ToolOutput
from ctxwin.tools.documents import render_notebook, render_pdf
from ctxwin.tools.lines import FileIndex
from ctxwin.tools.paging import check_positive, page
from ctxwin.tools.sniff import IMAGE_TYPES, SNIFF_BYTES, Sniff, image_info, sniff
from ctxwin.tools.spec import Positive, tool
from ctxwin.tools.truncate import format_size
from ctxwin.tools.workspace import Opened, Resolved, Workspace

INDEX_MIN_BYTES = 1024 * 1024  # files at least this large remember where their lines start between pages
# Files with these suffixes are sniffed before the size gate: an image or a PDF is not read as text.
RENDERED_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".pdf", ".ipynb"})
ReadKey = tuple[str, int | None, int | None, int | None, str | None]


@dataclass(frozen=True, slots=True)
class ReadRecord:
    """One earlier read of a range: which call, when, and the file's size and mtime then."""

    call: int
    call_id: str | None
    at: float
    size: int
    mtime_ns: int


class ReadState:
    """The reads of one agent session, so an unchanged re-read of the same range can be answered
    with a stub. Call `forget()` after a compaction or anything else that removes earlier results
    from the model's view, so the stub never points at content the model no longer has."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._records: dict[ReadKey, ReadRecord] = {}
        self._calls = 0
        self._clock = clock

    def next_call(self) -> int:
        self._calls += 1
        return self._calls

    def unchanged(self, key: ReadKey, st: os.stat_result) -> ReadRecord | None:
        record = self._records.get(key)
        if record is not None and record.size == st.st_size and record.mtime_ns == st.st_mtime_ns:
            return record
        return None

    def record(self, key: ReadKey, st: os.stat_result, call: int, call_id: str | None) -> ReadRecord:
        record = ReadRecord(call, call_id, self._clock(), st.st_size, st.st_mtime_ns)
        self._records[key] = record
        return record

    def forget(self, real_path: str | None = None) -> None:
        if real_path is None:
            self._records.clear()
        else:
            self._records = {k: v for k, v in self._records.items() if k[0] != real_path}

    def __len__(self) -> int:
        return len(self._records)


def _stub(resolved: Resolved, record: ReadRecord) -> ToolOutput:
    when = time.strftime("%H:%M:%S UTC", time.gmtime(record.at))
    ref = f"call {record.call_id}" if record.call_id else f"read #{record.call}"
    text = (
        f"File unchanged since {ref} at {when} (same path, offset and limit; same size and modification time). "
        "The content from that earlier read result is still current; refer to it instead of re-reading."
    )
    details = {"path": resolved.display, "stub": True, "earlier_call": record.call, "earlier_call_id": record.call_id}
    return ToolOutput(text, details=details)


@tool(reads_files=True, facts=DESCRIPTION_FACTS)
def read(
    ws: Workspace,
    path: str,
    offset: Positive | None = None,
    limit: Positive | None = None,
    *,
    column: Positive | None = None,
    pages: str | None = None,
    state: ReadState | None = None,
    call_id: str | None = None,
) -> ToolOutput:
    """Read a file in the workspace. Output is numbered lines, cat -n style: the line number
    right-aligned in 6 columns, a tab, then the line.

    Limits: at most {lines} lines or {bytes} per call, whichever comes first. When more remains, the
    output ends with a notice such as [Showing lines 1-{lines} of 50000. Use offset={next_offset} to
    continue.]: call read again with that offset until you have what you need.
    - offset: first line to read (1-based); limit: number of lines. Use them to read a part of a large file.
    - Files over {read_max_file} cannot be read whole: page them with offset/limit, or find the part you
      need with grep first. A page over {read_max_tokens} tokens is refused the same way.
    - Lines longer than {read_line_chars} characters are cut; the marker at the cut says which offset and
      column to read the rest of that line with.
    - Reading the same range of an unchanged file again returns a short note pointing at your earlier
      result instead of the content.
    - Jupyter notebooks (.ipynb) are shown as cells with outputs summarized. PDFs are shown as text per
      page: pages="1-10" picks pages (at most {pdf_max_pages} per call, required above
      {pdf_without_range} pages). Images (png, jpeg, gif, webp) are attached as images.
    - Binary files are described, not shown. Paths outside the workspace and secrets (.env, keys,
      credentials) are refused, and so are files with more than one hard link.

    Args:
        path: File to read, relative to the workspace root.
        offset: First line to read, 1-based. Omit to start at the top.
        limit: Number of lines to read (at most {lines} are shown per call).
        column: Read one long line from this character on (1-based); use with offset.
        pages: PDF page range such as "1-10" or "3".
    """
    # The page format is ctxwin.tools.paging's; `state` answers unchanged re-reads with a stub.
    for name, value in (("offset", offset), ("limit", limit), ("column", column)):
        check_positive(name, value)
    with ws.opened(path) as opened:
        resolved = opened.resolved
        ws.require_file(resolved)
        key: ReadKey = (resolved.real, offset, limit, column, pages)
        if state is not None:
            earlier = state.unchanged(key, resolved.st)
            if earlier is not None:
                return _stub(resolved, earlier)
        output = _read_file(ws, opened, offset, limit, column, pages)
    if state is not None and not output.is_error:
        call = state.next_call()
        state.record(key, resolved.st, call, call_id)
    return output


@dataclass(frozen=True, slots=True)
class _Text:
    """The text a read pages through: the file itself, or a rendering of a notebook or PDF."""

    stream: BinaryIO
    size: int
    facts: dict[str, Any]
    notices: tuple[str, ...] = ()  # added after the page's own notices (the PDF page range)
    index: FileIndex | None = None  # only plain text files are indexed


def _read_file(
    ws: Workspace, opened: Opened, offset: int | None, limit: int | None, column: int | None, pages: str | None
) -> ToolOutput:
    resolved = opened.resolved
    limits = ws.limits
    whole = offset is None and limit is None and column is None
    if whole and os.path.splitext(resolved.real)[1].lower() not in RENDERED_SUFFIXES:
        _size_gate(resolved.display, resolved.st.st_size, limits.read_max_file_bytes)  # from stat, nothing opened
    with opened.open_file() as stream:
        head = stream.read(SNIFF_BYTES)
        facts = sniff(head, at_eof=len(head) >= resolved.st.st_size)
        if facts.media_type in IMAGE_TYPES:
            return _read_image(stream, head, resolved, limits.read_max_image_bytes)
        stream.seek(0)
        text = _text_of(ws, resolved, stream, facts, pages, whole)
        result = page(
            text.stream, text.size, offset=offset, limit=limit, column=column, limits=limits, index=text.index
        )
    output = result.text
    if text.notices:
        output += ("\n" if result.notices else "\n\n") + "\n".join(text.notices)
    assert ws.counter is not None
    tokens = ws.counter.count_text(output)
    if tokens > limits.read_max_tokens:
        raise ToolError(
            "too_many_tokens",
            f"The requested range of {resolved.display} is {tokens} tokens, over the {limits.read_max_tokens}-token "
            "limit for one read.",
            "Read a smaller range with offset and limit, or search it with grep for the part you need.",
        )
    details = {
        "path": resolved.display, "size": resolved.st.st_size, **text.facts, **result.facts(),
        "tokens": tokens, "counter": ws.counter.name,
    }
    return ToolOutput(output, details=details)


def _text_of(
    ws: Workspace, resolved: Resolved, stream: BinaryIO, facts: Sniff, pages: str | None, whole: bool
) -> _Text:
    limits = ws.limits
    name = resolved.display
    size = resolved.st.st_size
    if facts.media_type == "application/pdf":
        pdf = render_pdf(stream, pages, without_range=limits.pdf_pages_without_range, max_pages=limits.pdf_max_pages,
                         name=name)
        data = pdf.text.encode("utf-8")
        notices: tuple[str, ...] = ()
        if pdf.last < pdf.total:
            upto = min(pdf.total, pdf.last + limits.pdf_max_pages)
            notices = (f'[Showing pages {pdf.first}-{pdf.last} of {pdf.total}. Use pages="{pdf.last + 1}-{upto}" '
                       "to continue.]",)
        facts_out = {"kind": "pdf", "pages_first": pdf.first, "pages_last": pdf.last, "pages_total": pdf.total}
        return _Text(io.BytesIO(data), len(data), facts_out, notices)
    if resolved.real.lower().endswith(".ipynb") and not facts.binary:
        if size > limits.read_max_notebook_bytes:
            raise ToolError(
                "too_large", f"{name} is a {format_size(size)} notebook, over the "
                f"{format_size(limits.read_max_notebook_bytes)} limit for parsing notebooks.",
                "Search it with grep instead.",
            )
        rendered, notebook_facts = render_notebook(stream.read())
        data = rendered.encode("utf-8")
        return _Text(io.BytesIO(data), len(data), {"kind": "notebook", **notebook_facts})
    if facts.binary:
        raise ToolError(
            "binary",
            f"{name} is a binary file ({facts.description}, {format_size(size)}); its bytes are not shown.",
            "Use a tool made for this file type if you need what is inside.",
        )
    if whole:
        _size_gate(name, size, limits.read_max_file_bytes)
    st = resolved.st
    # Small files are scanned afresh each time; only large ones, where paging would rescan megabytes,
    # use the index (keyed by file version: an edit within one timestamp tick at the same size is the risk).
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    index = ws.line_index.get(key) if size >= INDEX_MIN_BYTES else None
    return _Text(stream, size, {"kind": "text"}, index=index)


def _size_gate(name: str, size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise ToolError(
            "too_large",
            f"{name} is {format_size(size)}, over the {format_size(max_bytes)} limit for reading a whole file.",
            "Read it in pages with offset and limit (for example offset=1, limit=2000), "
            "or search it with grep for the part you need.",
        )


def _read_image(stream: Any, head: bytes, resolved: Resolved, max_bytes: int) -> ToolOutput:
    size = resolved.st.st_size
    info = image_info(head)
    dims = f"{info.width}x{info.height}" if info and info.width else "unknown size"
    media_type = info.media_type if info else "image"
    if size > max_bytes:
        raise ToolError(
            "too_large",
            f"{resolved.display} is a {media_type} image ({dims}, {format_size(size)}), over the "
            f"{format_size(max_bytes)} limit for attaching images.",
            "Use a smaller or downscaled copy of the image.",
        )
    data = head + stream.read(max_bytes + 1 - len(head))
    info = image_info(data) or info
    if info is not None and info.width:
        dims = f"{info.width}x{info.height}"
    text = f"Read image file [{media_type}] {resolved.display}: {dims}, {format_size(len(data))}"
    image = Image(
        media_type=media_type,
        data=base64.b64encode(data).decode("ascii"),
        width=info.width if info else None,
        height=info.height if info else None,
    )
    details = {
        "path": resolved.display, "size": len(data), "kind": "image", "media_type": media_type,
        "width": image.width, "height": image.height,
    }
    return ToolOutput(text, parts=(Text(text), image), details=details)
