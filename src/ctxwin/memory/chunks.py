"""What the index stores: chunks, one per unit people search for (`units.py`: a note's section or
paragraph, a dialogue turn, a list item, a code block; a session message part, cut the same way when
it is long). Beside its text each chunk carries `fields`, searched with a lower weight: its speaker,
the headings above it, its day in the words people use for dates, the relative dates of its text
resolved against that day (`dates.py`), and its identifiers kept whole (`pers-0001` as `pers0001`,
`parseHttpRequest` also as `parse http request`). Pure functions of text.

`split_lines` (windows of ~400 tokens with 80 of overlap, OpenClaw's defaults) stays for callers that
want fixed windows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import date
from typing import Any

import re2

from ctxwin.memory.dates import day_words, first_date, resolve_relative, span_words, timestamp_day
from ctxwin.memory.scoring import note_date
from ctxwin.memory.units import text_units
from ctxwin.messages import Message, ToolCall, ToolResult
from ctxwin.paths import re2_options
from ctxwin.pipeline.view import CHARS_PER_TOKEN, recall_ref
from ctxwin.store.base import Entry

CHUNK_TOKENS = 400
"""Target size of a file chunk."""
OVERLAP_TOKENS = 80
"""Tokens a file chunk shares with the one before it."""
SNIPPET_MAX_CHARS = 700
"""Characters of a chunk shown as a result's snippet (OpenClaw's cap)."""
LINE_MAX_CHARS = CHUNK_TOKENS * CHARS_PER_TOKEN
"""A single line longer than a chunk is cut into pieces of this size (same line number each)."""
MAX_KEYS = 48
"""Identifiers of one unit added whole to its fields (a unit of 500 ids does not need them all)."""

IDENTIFIER = re2.compile(r"[\pL\pN]+(?:[-_./:#@][\pL\pN]+)+", re2_options())
"""Identifier-like runs (`needle-1-age50`, `src/app.py`, `frobnicate_widget`): RE2, linear in the text
whatever it holds (Python's `re` took 8.8 s on a 16,000-character word)."""
_CAMEL = re2.compile(r"\b[\pL\pN]*\p{Ll}\p{Lu}[\pL\pN]*", re2_options())
_CAMEL_PART = re2.compile(r"\p{Lu}?[\p{Ll}\pN]+|\p{Lu}+(?:$|[^\p{Ll}])", re2_options())
_SEPARATORS = str.maketrans("", "", "-_./:#@")
"""The characters IDENTIFIER joins words with, dropped to keep an identifier whole."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One searchable piece. `source` is `memory` (MEMORY.md, memory/*.md), `files` (other workspace
    files) or `session` (a session entry). `path` is the file (relative to the workspace) or the
    session id; lines are 1-based and inclusive. `ref` is the recall ref of a session chunk
    (`entry:<id>` or `entry:<id>#<call id>`), which returns the original byte-identical."""

    id: str
    source: str
    path: str
    start_line: int
    end_line: int
    text: str
    hash: str
    ref: str | None = None
    role: str | None = None
    timestamp: str | None = None
    speaker: str | None = None
    fields: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def chunk_id(source: str, path: str, start: int, end: int, digest: str, part: str = "") -> str:
    raw = f"{source}\x00{path}\x00{start}\x00{end}\x00{part}\x00{digest}"
    return hashlib.sha1(raw.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def _pieces(lines: list[str], max_chars: int) -> list[tuple[int, str]]:
    """(line number, text) with lines longer than a chunk cut into pieces."""
    out: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if len(line) <= max_chars:
            out.append((number, line))
        else:
            out.extend((number, line[i:i + max_chars]) for i in range(0, len(line), max_chars))
    return out


def split_lines(text: str, chunk_tokens: int = CHUNK_TOKENS,
                overlap_tokens: int = OVERLAP_TOKENS) -> list[tuple[int, int, str]]:
    """(start line, end line, text) windows of whole lines of about `chunk_tokens`, each starting
    `overlap_tokens` before the previous one ended. Empty text gives no windows."""
    if not text.strip():
        return []
    max_chars = max(chunk_tokens * CHARS_PER_TOKEN, 1)
    overlap_chars = max(min(overlap_tokens, chunk_tokens - 1), 0) * CHARS_PER_TOKEN
    pieces = _pieces(text.split("\n"), max_chars)
    out: list[tuple[int, int, str]] = []
    start = 0
    while start < len(pieces):
        end, size = start, 0
        while end < len(pieces) and (end == start or size + len(pieces[end][1]) + 1 <= max_chars):
            size += len(pieces[end][1]) + 1
            end += 1
        body = "\n".join(p[1] for p in pieces[start:end])
        if body.strip():
            out.append((pieces[start][0], pieces[end - 1][0], body))
        if end >= len(pieces):
            break
        # Step back over whole pieces worth the overlap, but always move forward.
        back, kept = end, 0
        while back - 1 > start and kept + len(pieces[back - 1][1]) + 1 <= overlap_chars:
            back -= 1
            kept += len(pieces[back][1]) + 1
        start = back
    return out


def whole_key(identifier: str) -> str:
    """An identifier as the fields hold it: separators dropped, lowercase (`pers-0001` is `pers0001`)."""
    return identifier.translate(_SEPARATORS).lower()


def identifier_keys(text: str, limit: int = MAX_KEYS) -> list[str]:
    """The identifiers of `text` kept whole (`whole_key`) and the words of its camelCase names
    (`parseHttpRequest` gives `parse http request`): what a full-text tokenizer that splits on
    punctuation and lowercases would otherwise lose. Matches are read lazily and stop at the limit:
    this runs on every message appended, and a tool output may hold thousands of paths."""
    keys: list[str] = []
    for match in IDENTIFIER.finditer(text):
        keys.append(whole_key(match.group(0)))
        if len(keys) >= limit:
            break
    for match in _CAMEL.finditer(text):
        parts = [p.lower() for p in _CAMEL_PART.findall(match.group(0))]
        if len(parts) > 1:
            keys.append(" ".join(parts))
        if len(keys) >= 2 * limit:
            break
    return list(dict.fromkeys(keys))


def unit_fields(text: str, *, speaker: str | None = None, heading: str = "", day: date | None = None) -> str:
    """The fields line of a unit: speaker, headings, its day's words, its relative dates resolved,
    its identifiers whole."""
    parts = [p for p in (speaker, heading) if p]
    if day is not None:
        parts.append(day_words(day))
    parts.extend(f"{r.phrase} {span_words(r.start, r.end)}" for r in resolve_relative(text, day))
    parts.extend(identifier_keys(text))
    return " | ".join(parts)


def file_chunks(source: str, path: str, text: str, *, timestamp: str | None = None) -> list[Chunk]:
    """The units of a file as chunks. A unit's day is the date in its headings, else the note's date
    (`memory/YYYY-MM-DD.md`), else `timestamp`'s; it becomes the chunk's timestamp, so date filters
    and date words reach notes too."""
    chunks = []
    default = note_date(path) or timestamp_day(timestamp)
    headings: dict[str, date | None] = {}
    for unit in text_units(text):
        if unit.heading not in headings:
            headings[unit.heading] = first_date(unit.heading) if unit.heading else None
        day = headings[unit.heading] or default
        digest = text_hash(unit.text)
        chunks.append(Chunk(chunk_id(source, path, unit.start_line, unit.end_line, digest), source, path,
                            unit.start_line, unit.end_line, unit.text, digest,
                            timestamp=day.isoformat() if day is not None else timestamp, speaker=unit.speaker,
                            fields=unit_fields(unit.text, speaker=unit.speaker, heading=unit.heading, day=day)))
    return chunks


def _call_text(call: ToolCall) -> str:
    arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments, ensure_ascii=False)
    return f"{call.name}({arguments})"


UNINDEXED_TOOLS = frozenset({"conversation_search"})
"""Calls (and their results) left out of the session index: a search for a search's own results would
nest them without end (Letta's executor drops them too)."""


def message_parts(message: Message, skip_calls: set[str] | None = None) -> Iterator[tuple[str | None, str]]:
    """(call id or None, searchable text) of one message: its text and calls as one part, each tool
    result as its own part (so a hit names the one result its ref returns). Calls of
    `UNINDEXED_TOOLS` are added to `skip_calls`, and results of those calls are left out."""
    skip = skip_calls if skip_calls is not None else set()
    calls = message.tool_calls
    if any(c.name in UNINDEXED_TOOLS for c in calls):
        skip.update(c.id for c in calls)
        return
    head = [message.text] if message.text else []
    head.extend(_call_text(c) for c in calls)
    if head:
        yield None, "\n".join(head)
    for block in message.blocks:
        if (isinstance(block, ToolResult) and block.text and block.call_id not in skip
                and block.name not in UNINDEXED_TOOLS):
            yield block.call_id, block.text


def entry_chunks(entries: Iterable[Entry], session: str) -> list[Chunk]:
    """Chunks of the message entries among `entries`: one per message part, cut into units when long
    (`units.text_units`). Lines count within the part's text; the ref returns the whole part as
    logged. The speaker is the role, or the tool's name for a tool result."""
    out: list[Chunk] = []
    skip: set[str] = set()
    for entry in entries:
        if entry.kind != "message":
            continue
        message = Message.from_dict(entry.payload)
        day = timestamp_day(entry.timestamp)
        names = {b.call_id: b.name for b in message.blocks if isinstance(b, ToolResult)}
        for call_id, text in message_parts(message, skip):
            ref = recall_ref(entry.id, call_id)
            speaker = (names.get(call_id) or "tool") if call_id else message.role
            if len(text) <= LINE_MAX_CHARS // 2:
                pieces = [(1, text.count("\n") + 1, text)]
            else:
                pieces = [(u.start_line, u.end_line, u.text) for u in text_units(text)]
            for start, end, body in pieces:
                digest = text_hash(body)
                out.append(Chunk(chunk_id("session", session, start, end, digest, ref), "session", session, start,
                                 end, body, digest, ref=ref, role="tool" if call_id else message.role,
                                 timestamp=entry.timestamp, speaker=speaker,
                                 fields=unit_fields(body, speaker=speaker, day=day)))
    return out


def snippet(text: str, max_chars: int = SNIPPET_MAX_CHARS) -> str:
    return text if len(text) <= max_chars else text[:max_chars - 1] + "…"
