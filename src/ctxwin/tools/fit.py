"""fit_slice: the largest prefix of a table or list that fits a token budget (Alyx's binary search),
long cell values cut head and tail with a reference to the full value."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwin.store.base import BlobStore
from ctxwin.tokens import TokenCounter, counter_for
from ctxwin.tools.truncate import cut_middle

FIT_CELL_MAX_CHARS = 500  # a cell value longer than this (as text) is cut head and tail


@dataclass(frozen=True, slots=True)
class CellCut:
    row: int  # 0-based index in the input rows
    column: str | int | None  # key or index; None when the row itself is the value
    total_chars: int
    handle: str | None  # where the full value is, when a blob store was given


@dataclass(frozen=True, slots=True)
class SliceResult:
    rows: tuple[Any, ...]  # the kept rows, long cells cut
    text: str  # the kept rows as JSON lines, then the note: what the model sees
    kept: int
    total: int
    tokens: int  # of `text`, by `counter`
    budget_tokens: int
    cells_cut: tuple[CellCut, ...]
    note: str

    @property
    def omitted(self) -> int:
        return self.total - self.kept


def _cell_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _marker(total: int, ref: str) -> str:
    return f" [... {{omitted}} of {total} chars cut; full value: {ref}] "


def _predicted_handle(text: str) -> str:
    # A blob store names bytes by the first 12 hex digits of their sha256 (longer only on a clash).
    return "blob:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _cut_cell(
    value: Any, index: int, column: str | int | None, max_chars: int, use_blobs: bool
) -> tuple[Any, CellCut | None]:
    if isinstance(value, bool | int | float) or value is None:
        return value, None
    text = _cell_text(value)
    if len(text) <= max_chars:
        return value, None
    if use_blobs:
        ref = _predicted_handle(text)
    else:
        where = f"[{index}]" + (f"[{json.dumps(column)}]" if column is not None else "")
        ref = f"rows{where}"
    return cut_middle(text, max_chars, _marker(len(text), ref)), CellCut(
        index, column, len(text), ref if use_blobs else None
    )


def _cut_row(row: Any, index: int, max_chars: int, use_blobs: bool) -> tuple[Any, list[CellCut]]:
    cuts: list[CellCut] = []
    if isinstance(row, Mapping):
        out: dict[Any, Any] = {}
        for key, value in row.items():
            column = key if isinstance(key, str | int) else str(key)
            out[key], cut = _cut_cell(value, index, column, max_chars, use_blobs)
            if cut:
                cuts.append(cut)
        return out, cuts
    if isinstance(row, list | tuple):
        items = []
        for position, value in enumerate(row):
            new, cut = _cut_cell(value, index, position, max_chars, use_blobs)
            items.append(new)
            if cut:
                cuts.append(cut)
        return items, cuts
    new, cut = _cut_cell(row, index, None, max_chars, use_blobs)
    return new, [cut] if cut else []


def _note(kept: int, total: int, budget: int, cuts: int) -> str:
    parts = []
    if kept < total:
        if kept == 0:
            parts.append(
                f"No rows fit the budget of {budget} tokens: the first row alone is over it; {total} rows left out."
            )
        else:
            parts.append(
                f"Showing rows 1-{kept} of {total} (budget {budget} tokens). {total - kept} rows left out; "
                f"ask for rows from {kept + 1} on, or narrow the query."
            )
    if cuts:
        parts.append(f"{cuts} long values were cut (head and tail kept); each names where its full value is.")
    return f"[{' '.join(parts)}]" if parts else ""


def _render(lines: Sequence[str], kept: int, total: int, budget: int, cuts: int) -> tuple[str, str]:
    note = _note(kept, total, budget, cuts)
    body = "\n".join(lines[:kept])
    return body + (("\n\n" if body else "") + note if note else ""), note


def fit_slice(
    rows: Sequence[Any],
    budget_tokens: int,
    counter: TokenCounter | None = None,
    *,
    blobs: BlobStore | None = None,
    cell_max_chars: int = FIT_CELL_MAX_CHARS,
) -> SliceResult:
    """The longest prefix of `rows` whose rendering (one JSON line per row, plus the note) is at
    most `budget_tokens`, found by binary search over the prefix length. Cell values longer than
    `cell_max_chars` are cut head and tail; the cut names the full value's blob handle when `blobs`
    is given (the full value is stored there), else its place in `rows`."""
    counter = counter or counter_for(None)
    total = len(rows)
    cut_rows: list[Any] = []
    cuts_per_row: list[list[CellCut]] = []
    lines: list[str] = []
    for index, row in enumerate(rows):
        new, cuts = _cut_row(row, index, cell_max_chars, blobs is not None)
        cut_rows.append(new)
        cuts_per_row.append(cuts)
        lines.append(json.dumps(new, ensure_ascii=False, default=str))
    cut_counts = [0]
    for cuts in cuts_per_row:
        cut_counts.append(cut_counts[-1] + len(cuts))

    def tokens_for(kept: int) -> int:
        return counter.count_text(_render(lines, kept, total, budget_tokens, cut_counts[kept])[0])

    # Everything at once has no note, so it can fit when a shorter prefix plus its note does not:
    # try it first, then binary search the prefixes that carry a note (longer ones cost more).
    if total and tokens_for(total) <= budget_tokens:
        low = high = total
    else:
        low, high = 0, max(0, total - 1)  # invariant: prefix `low` fits (or is 0), `high + 1` does not
    while low < high:
        middle = (low + high + 1) // 2
        if tokens_for(middle) <= budget_tokens:
            low = middle
        else:
            high = middle - 1
    kept = low
    while kept > 0 and tokens_for(kept) > budget_tokens:  # the note's digits are not quite monotonic
        kept -= 1
    cells = [cut for cuts in cuts_per_row[:kept] for cut in cuts]
    if blobs is not None:
        cells, cut_rows, lines = _store_cells(blobs, rows, cells, cut_rows, lines, cell_max_chars)
        while kept > 0 and tokens_for(kept) > budget_tokens:
            kept -= 1
        cells = [cell for cell in cells if cell.row < kept]
    text, note = _render(lines, kept, total, budget_tokens, len(cells))
    return SliceResult(
        tuple(cut_rows[:kept]), text, kept, total, counter.count_text(text), budget_tokens, tuple(cells), note
    )


def _store_cells(
    blobs: BlobStore, rows: Sequence[Any], cells: list[CellCut], cut_rows: list[Any], lines: list[str], max_chars: int
) -> tuple[list[CellCut], list[Any], list[str]]:
    """Puts the full values of the kept cut cells in the blob store; re-renders a row whose handle
    turned out longer than predicted."""
    stored: list[CellCut] = []
    for cell in cells:
        row = rows[cell.row]
        if cell.column is None:
            value = row
        else:
            value = row[cell.column] if isinstance(row, Mapping) else row[int(cell.column)]
        text = _cell_text(value)
        info = blobs.put(text.encode("utf-8"), media_type="text/plain", origin=f"fit_slice row {cell.row}")
        if info.handle != cell.handle:
            new_text = cut_middle(text, max_chars, _marker(len(text), info.handle))
            row_out = cut_rows[cell.row]
            if cell.column is None:
                cut_rows[cell.row] = new_text
            elif isinstance(row_out, dict):
                row_out[cell.column] = new_text
            else:
                row_out[int(cell.column)] = new_text
            lines[cell.row] = json.dumps(cut_rows[cell.row], ensure_ascii=False, default=str)
        stored.append(CellCut(cell.row, cell.column, cell.total_chars, info.handle))
    return stored, cut_rows, lines
