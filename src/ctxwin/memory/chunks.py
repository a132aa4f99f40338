"""What the index stores: chunks. Files are cut into ~400-token windows of whole lines with 80 tokens
of overlap (OpenClaw's defaults); a session message is one chunk, split the same way when it is long.
Pure functions of text; sizes in characters at `CHARS_PER_TOKEN` (OpenClaw's approximation, and all
a chunker needs: the boundaries only have to be stable and roughly the right size).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

from ctxwin.messages import Message, ToolCall, ToolResult
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


def file_chunks(source: str, path: str, text: str, *, chunk_tokens: int = CHUNK_TOKENS,
                overlap_tokens: int = OVERLAP_TOKENS, timestamp: str | None = None) -> list[Chunk]:
    chunks = []
    for start, end, body in split_lines(text, chunk_tokens, overlap_tokens):
        digest = text_hash(body)
        chunks.append(Chunk(chunk_id(source, path, start, end, digest), source, path, start, end, body, digest,
                            timestamp=timestamp))
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


def entry_chunks(entries: Iterable[Entry], session: str, *, chunk_tokens: int = CHUNK_TOKENS,
                 overlap_tokens: int = OVERLAP_TOKENS) -> list[Chunk]:
    """Chunks of the message entries among `entries`: one per message part, split when long. Lines
    count within the part's text; the ref returns the whole part as logged."""
    out: list[Chunk] = []
    skip: set[str] = set()
    for entry in entries:
        if entry.kind != "message":
            continue
        message = Message.from_dict(entry.payload)
        for call_id, text in message_parts(message, skip):
            ref = recall_ref(entry.id, call_id)
            windows = split_lines(text, chunk_tokens, overlap_tokens)
            for start, end, body in windows:
                digest = text_hash(body)
                out.append(Chunk(chunk_id("session", session, start, end, digest, ref), "session", session, start,
                                 end, body, digest, ref=ref, role="tool" if call_id else message.role,
                                 timestamp=entry.timestamp))
    return out


def snippet(text: str, max_chars: int = SNIPPET_MAX_CHARS) -> str:
    return text if len(text) <= max_chars else text[:max_chars - 1] + "…"
