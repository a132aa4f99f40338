"""Letta's working set of open files: `open_files` / `close_files`, limited by the window.

At most `max_files` files are open, each showing at most `max_chars` characters of a line range;
opening one more closes the least recently used. The open files are rendered as one block meant to go
at the END of a request (after the last message), never into the system prompt or the history: the
cached prefix then stays the same whatever is opened or closed, and only the tail after it changes
(Letta renders them in core memory, inside the system prompt, so every open or close re-sends the
whole prompt uncached). The block lists files by path, so the same set renders the same bytes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwin.errors import InputError
from ctxwin.memory.sandbox import Confined, parts_of
from ctxwin.paths import DEFAULT_DENY, deny_match

WINDOW_LIMITS: tuple[tuple[int, int, int], ...] = (
    (8_000, 3, 5_000),
    (32_000, 5, 15_000),
    (128_000, 10, 25_000),
    (200_000, 10, 40_000),
)
"""(window up to, files, characters per file): Letta's limits; above 200k, 15 × 40,000."""
LARGE_WINDOW_LIMITS = (15, 40_000)
UNKNOWN_WINDOW_LIMITS = (5, 50_000)
"""Letta's limits when the window is not known."""
HEADER = "# Open files\n\nThese files are open (most recently used last in the tool results; shown by path):\n"


def limits_for_window(window: int | None) -> tuple[int, int]:
    """(files open at most, characters shown per file) for a context window in tokens."""
    if not window:
        return UNKNOWN_WINDOW_LIMITS
    for upper, files, chars in WINDOW_LIMITS:
        if window <= upper:
            return files, chars
    return LARGE_WINDOW_LIMITS


@dataclass(frozen=True, slots=True)
class OpenFile:
    path: str
    offset: int  # 0-based first line
    length: int | None  # lines, None for the rest
    text: str  # what is shown (already cut to the per-file limit)
    total_lines: int
    truncated: bool


class WorkingSet:
    """The open files of one agent, read from `root` (confined: no `..`, absolute paths or symlinks),
    never one that a `deny` pattern names."""

    def __init__(self, root: Confined, window: int | None = None, *, deny: Sequence[str] = DEFAULT_DENY) -> None:
        self.root = root
        self.deny = tuple(deny)
        self.max_files, self.max_chars = limits_for_window(window)
        self._open: OrderedDict[str, OpenFile] = OrderedDict()

    def _load(self, path: str, offset: int, length: int | None) -> OpenFile:
        text = self.root.read(path)
        if text is None:
            raise FileNotFoundError(2, "No such file", path)
        lines = text.split("\n")
        chosen = lines[offset: None if length is None else offset + length]
        shown = "\n".join(chosen)
        truncated = len(shown) > self.max_chars
        if truncated:
            shown = shown[: self.max_chars]
        return OpenFile(path, offset, length, shown, len(lines), truncated)

    def open(self, files: Sequence[Mapping[str, Any]], close_all_others: bool = False) -> dict[str, Any]:
        """Opens `[{file_name, offset?, length?}]`; returns what was opened and what closed (by LRU or
        `close_all_others`). Missing files are reported, not raised."""
        if not isinstance(files, Sequence) or isinstance(files, str) or not files:
            raise InputError("open_files needs a list of {file_name, offset?, length?}",
                             'e.g. [{"file_name": "notes/plan.md"}]')
        opened, missing, closed, denied = [], [], [], []
        loaded = []
        for spec in files:
            if not isinstance(spec, Mapping) or not isinstance(spec.get("file_name"), str):
                raise InputError(f"bad open_files entry {spec!r}", "each entry is {file_name, offset?, length?}")
            offset = int(spec.get("offset") or 0)
            length = spec.get("length")
            if offset < 0 or (length is not None and int(length) < 1):
                raise InputError(f"{spec['file_name']}: offset must be ≥ 0 and length ≥ 1")
            if deny_match("/".join(parts_of(spec["file_name"], self.root.alias)), self.deny) is not None:
                denied.append(spec["file_name"])
                continue
            try:
                loaded.append(self._load(spec["file_name"], offset, None if length is None else int(length)))
            except FileNotFoundError:
                missing.append(spec["file_name"])
        if close_all_others:
            keep = {f.path for f in loaded}
            for path in [p for p in self._open if p not in keep]:
                del self._open[path]
                closed.append(path)
        for item in loaded:
            self._open.pop(item.path, None)
            self._open[item.path] = item
            opened.append(item.path)
            while len(self._open) > self.max_files:
                old, _ = self._open.popitem(last=False)
                closed.append(old)
        return {"opened": opened, "closed": closed, "missing": missing, "denied": denied, "open": list(self._open),
                "limits": {"max_files": self.max_files, "max_chars_per_file": self.max_chars}}

    def close(self, names: Sequence[str]) -> dict[str, Any]:
        closed = [n for n in names if self._open.pop(n, None) is not None]
        return {"closed": closed, "not_open": [n for n in names if n not in closed], "open": list(self._open)}

    @property
    def paths(self) -> list[str]:
        """Open files, least recently used first."""
        return list(self._open)

    def render(self) -> str:
        """The block for the end of the request ('' when nothing is open), ordered by path."""
        if not self._open:
            return ""
        parts = [HEADER]
        for path in sorted(self._open):
            item = self._open[path]
            last = item.offset + len(item.text.split("\n"))
            note = " (cut to fit; open a smaller range to see more)" if item.truncated else ""
            parts.append(f"\n## {path} (lines {item.offset + 1}-{last} of {item.total_lines}){note}\n\n{item.text}\n")
        return "".join(parts)
