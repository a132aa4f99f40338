"""`MemoryIndex`: one hybrid index over memory files, workspace files and session entries.

The files and the session log stay the truth: the index holds chunks of them (text, where they came
from, a vector) and can always be rebuilt. Files are indexed by content hash (an unchanged file is
skipped, a changed one replaced); session entries as they are appended (`add_entries`, chunk ids are
deterministic, so giving an entry twice indexes it once). The index records which embedder built its
vectors; opened with another, it re-embeds every chunk before the first search.

    index = MemoryIndex.open(workspace / ".ctxwin" / "memory.sqlite")     # or MemoryIndex.postgres(dsn, name)
    index.index_workspace(workspace)                                      # MEMORY.md and memory/*.md
    index.add_entries(log, session=log.session_id)                        # or as entries are appended
    hits = index.search("which port does the staging proxy use", k=6)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from ctxwin.errors import InputError, MemoryIndexError
from ctxwin.files import FileLimits, read_bytes
from ctxwin.memory.backend import IDENTIFIER, Backend, Filters, SqliteBackend
from ctxwin.memory.chunks import Chunk, entry_chunks, file_chunks, snippet, text_hash
from ctxwin.memory.embed import Embedder, default_embedder
from ctxwin.memory.files import FileScope, memory_files, workspace_files
from ctxwin.memory.sandbox import Confined
from ctxwin.memory.scoring import (
    CANDIDATE_MULTIPLIER,
    DEFAULT_FUSION,
    Fusion,
    Mode,
    Scored,
    clamp_cosine,
    decay_factor,
    fuse,
    mmr,
    normalize_text,
)
from ctxwin.paths import deny_match
from ctxwin.store.base import Entry

FILE_LIMITS = FileLimits(max_bytes=64 * 1024 * 1024)
"""The largest file the index reads (memory notes are small; a larger file is reported and skipped)."""
EMBED_BATCH = 512
"""Chunks embedded per call while indexing."""
MAX_RESULTS = 100
"""The most results one search returns."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One hit: where it is (`path`, 1-based inclusive lines), how it scored, a snippet of at most 700
    characters, and for session chunks the `ref` that returns the original byte-identical."""

    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: str
    text_score: float
    vector_score: float
    ref: str | None = None
    role: str | None = None
    timestamp: str | None = None
    chunk_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("score", "text_score", "vector_score"):
            out[name] = round(out[name], 4)
        return out


@dataclass
class IndexReport:
    """What one indexing pass did."""

    files_seen: int = 0
    files_indexed: int = 0
    files_unchanged: int = 0
    files_removed: int = 0
    chunks_added: int = 0
    seconds: float = 0.0
    rebuilt: bool = False
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class MemoryIndex:
    """A hybrid index on a backend (`SqliteBackend`, `PostgresBackend`) with one embedder."""

    def __init__(self, backend: Backend, embedder: Embedder | None = None) -> None:
        self.backend = backend
        self.embedder = embedder or default_embedder()
        self.rebuilt = bool(getattr(backend, "recreated", False))
        recorded = backend.get_meta("embedder")
        if recorded is None:
            backend.set_meta({"embedder": self.embedder.name, "dims": str(self.embedder.dims)})
        elif recorded != self.embedder.name:
            self._reembed()

    @classmethod
    def open(cls, path: str | Path, embedder: Embedder | None = None) -> MemoryIndex:
        """The SQLite index at `path` (created if missing; recreated empty if unreadable: see `rebuilt`)."""
        embedder = embedder or default_embedder()
        return cls(SqliteBackend(path, embedder.dims), embedder)

    @classmethod
    def postgres(cls, dsn: str, name: str, embedder: Embedder | None = None, *,
                 use_pgvector: bool | None = None) -> MemoryIndex:
        """The index `name` in the PostgreSQL database at `dsn`: tsvector full text, pgvector when the
        server has it (`use_pgvector=None` detects), else vectors in a bytea column scanned with numpy."""
        from ctxwin.memory.pgbackend import PostgresBackend

        embedder = embedder or default_embedder()
        return cls(PostgresBackend(dsn, name, embedder.dims, use_pgvector=use_pgvector), embedder)

    # ------------------------------------------------------------------------------------------
    # Writing

    def _vectors(self, texts: Sequence[str]) -> np.ndarray:
        parts = [self.embedder.embed(list(texts[i:i + EMBED_BATCH])) for i in range(0, len(texts), EMBED_BATCH)]
        return np.vstack(parts) if parts else np.zeros((0, self.embedder.dims), dtype=np.float32)

    def _reembed(self) -> None:
        """Vectors from another embedder are never mixed with this one's: re-embed every chunk."""
        for batch in self.backend.iter_texts():
            vectors = self._vectors([t for _, t in batch])
            self.backend.set_vectors([(k, vectors[i]) for i, (k, _) in enumerate(batch)])
        self.backend.set_meta({"embedder": self.embedder.name, "dims": str(self.embedder.dims)})

    def add_chunks(self, chunks: Sequence[Chunk]) -> int:
        """Embeds and stores the chunks not yet held (by id); returns how many were added."""
        if not chunks:
            return 0
        known = self.backend.known_ids([c.id for c in chunks])
        seen: set[str] = set()
        fresh = []
        for chunk in chunks:
            if chunk.id not in known and chunk.id not in seen:
                seen.add(chunk.id)
                fresh.append(chunk)
        if not fresh:
            return 0
        return self.backend.add_chunks(fresh, self._vectors([c.text for c in fresh]))

    def add_entries(self, entries: Iterable[Entry], session: str) -> int:
        """Indexes the message entries among `entries` (the engine's eviction sink calls this as
        entries are appended; giving an entry again is a no-op). Returns chunks added."""
        return self.add_chunks(entry_chunks(entries, session))

    def index_text(self, source: str, path: str, text: str, *, force: bool = False) -> int:
        """(Re)indexes one file's text under `path` unless its content hash is unchanged; returns the
        chunks now held for it, or -1 when it was unchanged."""
        digest = text_hash(text)
        if not force and self.backend.file_hash(source, path) == digest:
            return -1
        chunks = file_chunks(source, path, text)
        self.backend.replace_file(source, path, digest, chunks, self._vectors([c.text for c in chunks]))
        return len(chunks)

    def index_files(self, root: str | Path, files: Iterable[str], source: str, *, force: bool = False,
                    prune: bool = True, deny: Sequence[str] = (), follow_symlinks: bool = True) -> IndexReport:
        """Indexes the given files (paths relative to `root`), and with `prune` forgets the files of
        `source` no longer among them. A file a `deny` pattern names is never read, and with `prune`
        forgotten (an index built before the pattern applied loses what it held of it). Without
        `follow_symlinks`, each file is opened component by component with O_NOFOLLOW from `root`
        (`sandbox.Confined`): no symlink, not even one swapped in after the listing, leads out."""
        started = time.perf_counter()
        base = Path(root)
        confined = None if follow_symlinks else Confined(base, alias=None)
        report = IndexReport(rebuilt=self.rebuilt)
        wanted = sorted(rel for rel in set(files) if deny_match(rel, deny) is None)
        for rel in wanted:
            report.files_seen += 1
            try:
                if confined is not None:
                    data = confined.read_bytes(rel, FILE_LIMITS.max_bytes)
                else:
                    data = read_bytes(base / rel, limits=FILE_LIMITS)  # regular files only, never blocking
            except InputError as error:  # a FIFO, a file over the cap, a folder: reported, skipped
                report.problems.append(f"{rel}: {error.message}")
                continue
            except OSError as error:
                report.problems.append(f"{rel}: {error.strerror or error}")
                continue
            if b"\x00" in data[:8192]:
                continue  # binary
            held = self.index_text(source, rel, data.decode("utf-8", "replace"), force=force)
            if held < 0:
                report.files_unchanged += 1
            else:
                report.files_indexed += 1
                report.chunks_added += held
        if prune:
            keep = set(wanted)
            for rel in self.backend.file_paths(source):
                if rel not in keep:
                    self.backend.remove_file(source, rel)
                    report.files_removed += 1
        report.seconds = round(time.perf_counter() - started, 4)
        return report

    def index_workspace(self, workspace: str | Path, *, include_files: bool = False, force: bool = False,
                        files: FileScope | None = None) -> IndexReport:
        """MEMORY.md and memory/**/*.md as source `memory`; with `include_files`, the other text files
        of `files` (default: the workspace, under the default deny list) as source `files` (for
        `semantic_search_files`), what the deny list names never read."""
        root = Path(workspace)
        if not root.is_dir():
            raise InputError(f"no workspace folder at {root}", "give the folder that holds MEMORY.md and memory/")
        report = self.index_files(root, memory_files(root), "memory", force=force)
        if include_files:
            scope = files if files is not None else FileScope(root)
            if not scope.root.is_dir():
                raise InputError(f"no folder at {scope.root} to index files from", "give an existing folder")
            other = self.index_files(scope.root, workspace_files(scope), "files", force=force, deny=scope.deny,
                                     follow_symlinks=False)
            for name in ("files_seen", "files_indexed", "files_unchanged", "files_removed", "chunks_added"):
                setattr(report, name, getattr(report, name) + getattr(other, name))
            report.problems.extend(other.problems)
            report.seconds = round(report.seconds + other.seconds, 4)
        return report

    def index_session(self, log: Iterable[Entry], session: str) -> int:
        """Every message entry of a session log (all branches, evicted and masked ones included)."""
        return self.add_entries(log, session)

    def rebuild(self) -> None:
        """Forgets everything; index the files and logs again after (they are the truth)."""
        self.backend.clear()
        self.backend.set_meta({"embedder": self.embedder.name, "dims": str(self.embedder.dims)})
        self.rebuilt = True

    # ------------------------------------------------------------------------------------------
    # Searching

    def search(self, query: str, k: int = 6, *, mode: Mode = "hybrid", fusion: Fusion = DEFAULT_FUSION,
               min_score: float = 0.0, sources: Sequence[str] | None = None, paths: Sequence[str] | None = None,
               roles: Sequence[str] | None = None, start: str | None = None, end: str | None = None,
               use_mmr: bool = False, decay_half_life_days: float | None = None, today: date | None = None,
               candidate_multiplier: int = CANDIDATE_MULTIPLIER) -> list[SearchResult]:
        """The best `k` chunks for `query`, best first. `mode`: hybrid, bm25 or vector. Filters:
        `sources` (memory, files, session), `paths` (files or session ids), `roles`, `start`/`end`
        (ISO timestamps or dates, inclusive). `use_mmr` diversifies; `decay_half_life_days` lowers dated
        notes by age (relative to `today`)."""
        if not isinstance(query, str) or not query.strip():
            raise InputError("the search query is empty", "give a few words to search for")
        if mode not in ("hybrid", "bm25", "vector"):
            raise InputError(f"unknown search mode {mode!r}", "use hybrid, bm25 or vector")
        if fusion not in ("weighted", "rrf"):
            raise InputError(f"unknown fusion {fusion!r}", "use weighted or rrf")
        k = max(1, min(int(k), MAX_RESULTS))
        filters = Filters(tuple(sources) if sources else None, tuple(paths) if paths else None,
                          tuple(roles) if roles else None, start, end)
        wanted = k * max(1, candidate_multiplier)
        snapshot = getattr(self.backend, "snapshot", None)
        if snapshot is not None:
            with snapshot():
                return self._search(query, k, wanted, mode, fusion, min_score, filters, use_mmr,
                                    decay_half_life_days, today)
        return self._search(query, k, wanted, mode, fusion, min_score, filters, use_mmr, decay_half_life_days, today)

    def _search(self, query: str, k: int, wanted: int, mode: Mode, fusion: Fusion, min_score: float,
                filters: Filters, use_mmr: bool, half_life: float | None, today: date | None) -> list[SearchResult]:
        text: dict[int, float] = {}
        vector: dict[int, float] = {}
        qvec = None
        if mode != "vector":
            text = normalize_text(self.backend.text_search(query, wanted, filters))
        if mode != "bm25":
            qvec = self.embedder.embed([query])[0]
            vector = {key: clamp_cosine(s) for key, s in self.backend.vector_search(qvec, wanted, filters)}
        if mode == "hybrid" and qvec is not None:
            # Every candidate gets both scores: a keyword hit the vector side did not fetch is scored
            # by its vector too, and a vector hit without the words scores 0 on text (it had none).
            missing = [key for key in text if key not in vector]
            vector.update({key: clamp_cosine(s) for key, s in self.backend.vector_scores(qvec, missing).items()})
        chunks = self.backend.fetch(sorted(set(text) | set(vector)))
        text = exact_first(text, chunks, query)
        ranked = fuse(text, vector, mode=mode, fusion=fusion)
        ranked = [s for s in ranked if s.key in chunks]  # deleted since the candidates were fetched
        if half_life:
            when = today or date.today()
            ranked = sorted((Scored(s.key, s.score * decay_factor(chunks[s.key].path, when, half_life),
                                    s.text_score, s.vector_score) for s in ranked), key=lambda s: (-s.score, s.key))
        ranked = [s for s in ranked if s.score >= min_score and s.score > 0]
        if use_mmr:
            ranked = mmr(ranked, {s.key: chunks[s.key].text for s in ranked}, k)
        results = []
        for scored in ranked[:k]:
            chunk = chunks[scored.key]
            results.append(SearchResult(chunk.path, chunk.start_line, chunk.end_line, scored.score,
                                        snippet(chunk.text), chunk.source, scored.text_score, scored.vector_score,
                                        chunk.ref, chunk.role, chunk.timestamp, chunk.id))
        return results

    def stats(self) -> dict[str, Any]:
        return {**self.backend.stats(), "embedder": self.embedder.name, "dims": self.embedder.dims}

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> MemoryIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def exact_first(text: dict[int, float], chunks: dict[int, Chunk], query: str) -> dict[int, float]:
    """Full-text scores with the chunks that hold every identifier of the query verbatim (case aside)
    in the upper half and the rest in the lower half: BM25 alone ranks a short chunk sharing most
    parts of `needle-1-age20-end` above the long one holding `needle-1-age1-end` itself."""
    wanted = [m.lower() for m in IDENTIFIER.findall(query)]
    if not wanted or not text:
        return text
    out = {}
    for key, score in text.items():
        body = chunks[key].text.lower() if key in chunks else ""
        out[key] = 0.5 + 0.5 * score if all(w in body for w in wanted) else 0.5 * score
    return out


DEFAULT_INDEX = Path(".ctxwin") / "memory.sqlite"
"""Where a workspace's SQLite index lives, relative to the workspace."""


def index_path(workspace: str | Path) -> Path:
    return Path(workspace) / DEFAULT_INDEX


def open_workspace_index(workspace: str | Path, embedder: Embedder | None = None, *,
                         index: str | Path | None = None, rebuild: bool = False,
                         include_files: bool = False) -> tuple[MemoryIndex, IndexReport]:
    """The workspace's index, brought up to date with its memory files (and, with `include_files`,
    its other files). A missing or unreadable index is rebuilt from the files."""
    root = Path(workspace)
    if not root.is_dir():
        raise InputError(f"no workspace folder at {root}", "give the folder that holds MEMORY.md and memory/")
    path = Path(index) if index is not None else index_path(root)
    if not os.access(path.parent if path.parent.exists() else root, os.W_OK):
        raise MemoryIndexError(f"cannot write the memory index at {path}", "give --index a writable path")
    memory = MemoryIndex.open(path, embedder)
    if rebuild:
        memory.rebuild()
    report = memory.index_workspace(root, include_files=include_files, force=rebuild)
    return memory, report
