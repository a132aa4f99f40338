"""Documents read renders to text before paging it: Jupyter notebooks (cells, outputs summarized)
and PDFs (text per page, a page range at a time)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from ctxwin.errors import JSONTooDeepError, MalformedJSONError
from ctxwin.files import loads_json
from ctxwin.tools.base import ToolError
from ctxwin.tools.truncate import cut_middle, format_size

NOTEBOOK_OUTPUT_CHARS = 2000  # characters of one cell output shown (head and tail)
NOTEBOOK_TRACEBACK_LINES = 6  # last traceback lines shown for an error output
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CUT = "\n[... {omitted} characters of output omitted ...]\n"


def _joined(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return "" if value is None else str(value)


def _bad(what: str) -> ToolError:
    return ToolError("bad_notebook", f"not a valid notebook ({what})", "Read it as text with grep, or fix the file.")


def _load_notebook(raw: bytes) -> dict[str, Any]:
    """The notebook as plain data, its shape checked: a dict with a list of cells, each a dict whose
    outputs are a list of dicts. Anything else is a `bad_notebook` refusal, never a traceback."""
    text = raw.decode("utf-8", errors="replace")
    data: Any = None
    try:
        import nbformat  # optional extra: upgrades old notebook versions to v4
    except ImportError:
        pass
    else:
        try:
            data = nbformat.reads(text, as_version=4)
        except Exception:  # nbformat raises many kinds for a broken file; the plain reading below decides
            data = None
    if data is None:
        try:
            data = loads_json(text)
        except MalformedJSONError as error:
            raise _bad(f"JSON error: {error.msg} at line {error.lineno}") from None
        except JSONTooDeepError:
            raise _bad("nested too deeply") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("cells", []), list):
        raise _bad("no list of cells")
    for number, cell in enumerate(data.get("cells", []), 1):
        if not isinstance(cell, Mapping):
            raise _bad(f"cell {number} is {type(cell).__name__}, not an object")
        outputs = cell.get("outputs", [])
        if outputs is not None and not (isinstance(outputs, list) and all(isinstance(o, Mapping) for o in outputs)):
            raise _bad(f"the outputs of cell {number} are not a list of objects")
        for output in outputs or []:
            if not isinstance(output.get("data") or {}, Mapping) or not isinstance(output.get("traceback", []), list):
                raise _bad(f"an output of cell {number} has a malformed data or traceback field")
    if not isinstance(data.get("metadata") or {}, Mapping):
        raise _bad("metadata is not an object")
    return dict(data)


def _output_text(output: Mapping[str, Any]) -> tuple[str, str]:
    """(header, body) of one cell output."""
    kind = output.get("output_type", "?")
    if kind == "stream":
        return f"stream {output.get('name', 'stdout')}", _joined(output.get("text"))
    if kind == "error":
        traceback = [_ANSI.sub("", line) for line in output.get("traceback", [])]
        tail = "\n".join(traceback[-NOTEBOOK_TRACEBACK_LINES:])
        return "error", f"{output.get('ename', 'Error')}: {output.get('evalue', '')}\n{tail}".rstrip()
    data = output.get("data") or {}
    count = output.get("execution_count")
    label = f"{kind} [{count}]" if count is not None else str(kind)
    others = [mime for mime in data if mime != "text/plain"]
    body = _joined(data.get("text/plain")) if "text/plain" in data else ""
    notes = []
    for mime in others:
        size = len(_joined(data[mime]))
        notes.append(f"[{mime} output, {format_size(size)}: not shown]")
    return label, "\n".join([body, *notes]).strip("\n")


def render_notebook(raw: bytes) -> tuple[str, dict[str, Any]]:
    """The notebook as text: one header line per cell, its source, its outputs summarized."""
    notebook = _load_notebook(raw)
    cells = notebook.get("cells", [])
    kernelspec = (notebook.get("metadata") or {}).get("kernelspec")
    kernel = kernelspec.get("name", "unknown") if isinstance(kernelspec, Mapping) else "unknown"
    counts: dict[str, int] = {}
    for cell in cells:
        kind = str(cell.get("cell_type", "?"))
        counts[kind] = counts.get(kind, 0) + 1
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    out = [f"[Jupyter notebook: {len(cells)} cells ({summary}), kernel {kernel}]"]
    cut_outputs = 0
    for index, cell in enumerate(cells, 1):
        kind = str(cell.get("cell_type", "?"))
        count = cell.get("execution_count")
        label = f"{kind}, In [{count}]" if kind == "code" and count is not None else kind
        out.append(f"--- Cell {index} [{label}] ---")
        out.append(_joined(cell.get("source")))
        for output in cell.get("outputs", []) or []:
            header, body = _output_text(output)
            short = cut_middle(body, NOTEBOOK_OUTPUT_CHARS, _CUT)
            cut_outputs += short != body
            out.append(f"--- Output of cell {index} ({header}) ---")
            if short:
                out.append(short)
    return "\n".join(out) + "\n", {"cells": len(cells), "cell_types": counts, "outputs_cut": cut_outputs}


@dataclass(frozen=True, slots=True)
class PdfPages:
    text: str
    first: int
    last: int
    total: int


def parse_pages(spec: str, total: int) -> tuple[int, int]:
    """`"3"`, `"2-5"`, `"4-"` as a 1-based inclusive range clamped to the document."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d*)\s*)?", str(spec))
    if not match:
        raise ToolError("bad_argument", f"pages={spec!r} is not a page range", 'Use pages="3" or pages="1-10".')
    first = int(match.group(1))
    last = first if match.group(2) is None else int(match.group(2) or total)
    if first < 1 or last < first:
        raise ToolError("bad_argument", f"pages={spec!r} is not a valid range", 'Pages start at 1, e.g. pages="1-10".')
    if first > total:
        raise ToolError("bad_argument", f"pages={spec!r} is beyond the end of the document ({total} pages).")
    return first, min(last, total)


def render_pdf(stream: BinaryIO, pages: str | None, *, without_range: int, max_pages: int, name: str) -> PdfPages:
    try:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError
    except ImportError:
        raise ToolError(
            "missing_extra", f"{name} is a PDF, and reading PDFs needs pypdf, which is not installed.",
            "Install it with: pip install 'ctxwin[pdf]'",
        ) from None
    try:
        reader = PdfReader(stream)
        total = len(reader.pages)
    except (PyPdfError, ValueError, KeyError, OSError) as error:
        raise ToolError("bad_pdf", f"{name} could not be parsed as a PDF: {error}") from None
    if pages is None:
        if total > without_range:
            raise ToolError(
                "pdf_needs_pages",
                f"{name} is a PDF with {total} pages, too many to read at once.",
                f'Give a page range with pages, for example pages="1-{min(max_pages, total)}" '
                f"(at most {max_pages} pages per read).",
            )
        first, last = 1, total
    else:
        first, last = parse_pages(pages, total)
        if last - first + 1 > max_pages:
            raise ToolError(
                "bad_argument",
                f"pages={pages!r} asks for {last - first + 1} pages; at most {max_pages} pages per read.",
                f'Use pages="{first}-{first + max_pages - 1}" and continue from there.',
            )
    parts = []
    for number in range(first, last + 1):
        try:
            text = reader.pages[number - 1].extract_text() or ""
        except (PyPdfError, ValueError, KeyError) as error:
            text = f"[text of this page could not be extracted: {error}]"
        parts.append(f"--- Page {number} ---\n{text.rstrip()}")
    return PdfPages("\n".join(parts) + "\n", first, last, total)
