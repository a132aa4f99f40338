"""Memory: what leaves the window can be found again, by meaning and by words.

- `files`: the memory folder (MEMORY.md, memory/YYYY-MM-DD.md) and what is loaded at session start.
- `flush`: the pre-compaction flush into the day's notes.
- `index`: `MemoryIndex`, one hybrid index (full text + vectors) over memory files, workspace files
  and session entries, on SQLite (`backend`) or PostgreSQL (`pgbackend`); `embed`: the embedders.
- `tools`: the memory tools and their schemas; `recall`: conversation search and ref resolution;
  `working_set`: Letta's open files; `sandbox`: file access confined to a folder.

The names below load on first use, so the engine, which reads only `files`, does not pay for the
index and the embedders (nor httpx).

Imports: errors, files, paths, messages, tokens, policy, store, pipeline, compaction, providers; it sits
below the engine and the tools.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxwin.lazy import lazy_exports

_EXPORTS = {
    **{name: "chunks" for name in ("Chunk", "entry_chunks", "file_chunks",)},
    **{name: "embed" for name in (
        "Embedder", "HashEmbedder", "HttpEmbedder", "MiniLMEmbedder", "WordLlamaEmbedder", "default_embedder",
        "embedder_from_spec",
    )},
    **{name: "files" for name in (
        "FileScope", "bootstrap_files", "daily_note_path", "memory_files", "reinjection", "startup_context",
        "workspace_files",
    )},
    **{name: "flush" for name in ("DailyNotes", "FLUSH_PROMPT", "daily_notes", "flush_due",)},
    **{name: "index" for name in ("IndexReport", "MemoryIndex", "SearchResult", "index_path", "open_workspace_index",)},
    **{name: "recall" for name in ("ConversationHit", "conversation_search", "resolve_ref",)},
    **{name: "tools" for name in ("MemoryToolOutput", "MemoryTools", "schemas",)},
    **{name: "working_set" for name in ("WorkingSet", "limits_for_window",)},
}

if TYPE_CHECKING:
    from ctxwin.memory.chunks import Chunk, entry_chunks, file_chunks
    from ctxwin.memory.embed import (
        Embedder,
        HashEmbedder,
        HttpEmbedder,
        MiniLMEmbedder,
        WordLlamaEmbedder,
        default_embedder,
        embedder_from_spec,
    )
    from ctxwin.memory.files import (
        FileScope,
        bootstrap_files,
        daily_note_path,
        memory_files,
        reinjection,
        startup_context,
        workspace_files,
    )
    from ctxwin.memory.flush import FLUSH_PROMPT, DailyNotes, daily_notes, flush_due
    from ctxwin.memory.index import IndexReport, MemoryIndex, SearchResult, index_path, open_workspace_index
    from ctxwin.memory.recall import ConversationHit, conversation_search, resolve_ref
    from ctxwin.memory.tools import MemoryToolOutput, MemoryTools, schemas
    from ctxwin.memory.working_set import WorkingSet, limits_for_window


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "FLUSH_PROMPT",
    "Chunk",
    "ConversationHit",
    "DailyNotes",
    "Embedder",
    "FileScope",
    "HashEmbedder",
    "HttpEmbedder",
    "IndexReport",
    "MemoryIndex",
    "MemoryToolOutput",
    "MemoryTools",
    "MiniLMEmbedder",
    "SearchResult",
    "WordLlamaEmbedder",
    "WorkingSet",
    "bootstrap_files",
    "conversation_search",
    "daily_note_path",
    "daily_notes",
    "default_embedder",
    "embedder_from_spec",
    "entry_chunks",
    "file_chunks",
    "flush_due",
    "index_path",
    "limits_for_window",
    "memory_files",
    "open_workspace_index",
    "reinjection",
    "resolve_ref",
    "schemas",
    "startup_context",
    "workspace_files",
]
