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

import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from ctxwin.errors import InputError, MemoryIndexError, ProviderError
from ctxwin.files import BINARY_REFUSAL, FileLimits, is_binary, read_bytes
from ctxwin.memory.backend import Backend, Filters, SqliteBackend, query_terms
from ctxwin.memory.chunks import IDENTIFIER, Chunk, entry_chunks, file_chunks, text_hash
from ctxwin.memory.dates import query_spans, resolve_relative, timestamp_day
from ctxwin.memory.embed import Embedder, default_embedder
from ctxwin.memory.files import FileScope, memory_files, workspace_files
from ctxwin.memory.hops import (
    FOLLOW_UNITS,
    HOP_READ,
    LINK_MAX_UNITS,
    MAX_HOPS,
    Rewrite,
    carries,
    entities,
    head_key,
    holds_value,
    hop_query,
    is_link_key,
    link_keys,
    link_terms,
    links,
    merge,
    quoted,
    rank_entities,
)
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
from ctxwin.memory.snippets import CHARS_PER_RESULT, MIN_RESULT_CHARS, query_stems, room_for, shown
from ctxwin.paths import deny_match
from ctxwin.store.base import Entry

LOG = logging.getLogger(__name__)
FILE_LIMITS = FileLimits(max_bytes=64 * 1024 * 1024, allow_hard_links=False)
"""The largest file the index reads (memory notes are small; a larger file is reported and skipped);
a hard-linked file is reported and skipped too (its other names may be outside the folder)."""
EMBED_BATCH = 512
"""Chunks embedded per call while indexing."""
MAX_RESULTS = 100
"""The most results one search returns."""
DATE_BOOST = 0.5
"""A unit dated within a day or month the query names scores this much more ("what did Caroline say
in May 2023")."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One hit: where it is (`path`, 1-based inclusive lines), how it scored, and `text`, what of it
    fits the search's budget (`snippets.py`; `snippet` is the same text). `ref` gives the original:
    `entry:<id>[#<call>]` for session chunks (recall returns it byte-identical), `<path>:<a>-<b>` for
    files (memory_get reads it). `speaker`, `timestamp` (the message's time, or a note's day) and
    `dates` (the relative dates of the text resolved against that day) say who and when; `hop` is the
    search hop that found it."""

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
    speaker: str | None = None
    dates: tuple[str, ...] = ()
    hop: int = 1

    @property
    def text(self) -> str:
        return self.snippet

    @property
    def date(self) -> str | None:
        return self.timestamp[:10] if self.timestamp else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("score", "text_score", "vector_score"):
            out[name] = round(out[name], 4)
        out["text"] = self.snippet
        out["date"] = self.date
        out["dates"] = list(self.dates)
        return out


def file_ref(path: str, start: int, end: int) -> str:
    """The ref of lines of a memory or workspace file: `memory/2023-05-08.md:12-14` (the form the
    memory tools print, and consolidation's sources)."""
    return f"{path}:{start}-{end}" if end != start else f"{path}:{start}"


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
        # The backend holds identical units once: what it holds is what is reported.
        return self.backend.replace_file(source, path, digest, chunks, self._vectors([c.text for c in chunks]))

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
            except InputError as error:  # a FIFO, a file over the cap, a folder, a hard link: reported, skipped
                report.problems.append(f"{rel}: {error.message}")
                continue
            except OSError as error:
                report.problems.append(f"{rel}: {error.strerror or error}")
                continue
            if is_binary(data):
                report.problems.append(f"{rel}: {BINARY_REFUSAL}")
                continue
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
               candidate_multiplier: int = CANDIDATE_MULTIPLIER, hops: int = 1, max_chars: int | None = None,
               context: bool = True, rewrite: Rewrite | None = None) -> list[SearchResult]:
        """The best `k` units for `query`, best first, their texts within `max_chars` characters in all
        (default `CHARS_PER_RESULT` per result: 2,000 for k = 5; results come in rank order until it
        is spent). `mode`: hybrid, bm25 or vector. Filters: `sources` (memory, files, session), `paths`
        (files or session ids), `roles`, `start`/`end` (ISO timestamps or dates, inclusive). `hops`
        (1-5) follows chained questions: each hop asks again with what links the best results onward
        (`hops.py`; `rewrite`, an LLM, may write that query instead). `context` adds matching lines
        of the neighbouring units. `use_mmr` diversifies; `decay_half_life_days` lowers dated notes by
        age (relative to `today`)."""
        if not isinstance(query, str) or not query.strip():
            raise InputError("the search query is empty", "give a few words to search for")
        if mode not in ("hybrid", "bm25", "vector"):
            raise InputError(f"unknown search mode {mode!r}", "use hybrid, bm25 or vector")
        if fusion not in ("weighted", "rrf"):
            raise InputError(f"unknown fusion {fusion!r}", "use weighted or rrf")
        if not isinstance(hops, int) or isinstance(hops, bool) or not 1 <= hops <= MAX_HOPS:
            raise InputError(f"hops must be a whole number from 1 to {MAX_HOPS}, not {hops!r}",
                             "1 for a plain search, 2-4 for a question that chains look-ups")
        k = max(1, min(int(k), MAX_RESULTS))
        budget = CHARS_PER_RESULT * k if max_chars is None else max_chars
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < MIN_RESULT_CHARS:
            raise InputError(f"max_chars must be a whole number of at least {MIN_RESULT_CHARS}, not {max_chars!r}",
                             f"e.g. {CHARS_PER_RESULT * 5} for five results")
        filters = Filters(tuple(sources) if sources else None, tuple(paths) if paths else None,
                          tuple(roles) if roles else None, start, end)
        plan = _Plan(k, k * max(1, candidate_multiplier), mode, fusion, min_score, filters, use_mmr,
                     decay_half_life_days, today, hops, budget, context, rewrite)
        snapshot = getattr(self.backend, "snapshot", None)
        if snapshot is not None:
            with snapshot():
                return self._search(query, plan)
        return self._search(query, plan)

    def _search(self, query: str, plan: _Plan) -> list[SearchResult]:
        ranked, chunks = self._rank(query, plan, plan.mode)
        if plan.hops > 1:
            ranked = anchored_first(ranked, chunks, query)
        lists = [[(s.key, s.score) for s in ranked]]
        scored = {s.key: s for s in ranked}
        asked: list[str] = []
        followed: set[str] = set()
        counts: dict[str, int] = {}
        frontier = [s.key for s in ranked[:1]]
        start = chunks[frontier[0]].text if frontier else ""
        found_by_links: dict[int, Chunk] = {key: chunks[key] for key in frontier}
        linked = False
        rewrite = plan.rewrite
        for _ in range(plan.hops - 1):
            best = [chunks[key].text for key, _ in lists[-1][:HOP_READ] if key in chunks]
            follow = _rewritten(rewrite, query, best)
            keys: list[str] = []
            values: list[tuple[str, str]] = []
            if follow is None:
                rewrite = None  # none, or its model failed: the hops go on with their own links
                keys, values = links(query, [(chunks[key].text, chunks[key].fields) for key in frontier],
                                     lambda x: self._count(x, counts), followed)
            if keys or values:
                more, found = self._follow(keys, values, plan)
                linked = True
                found_by_links.update((s.key, found[s.key]) for s in more)
                frontier = [s.key for s in more]
            else:
                if follow is not None:
                    terms = [follow] if follow and follow not in asked else []
                else:
                    terms = link_terms(query, best, asked)
                if not terms:
                    break
                asked.extend(terms)
                # A follow-up query is ids and names: full text finds them, meaning would only blur them.
                more, found = self._rank(hop_query(terms), plan, "bm25" if plan.mode == "hybrid" else plan.mode)
                frontier = [s.key for s in more[:HOP_READ]]
            chunks.update(found)
            lists.append([(s.key, s.score) for s in more])
            for s in more:
                scored.setdefault(s.key, s)
            if not more:
                break
        merged = merge(lists) if len(lists) > 1 else [(key, score, 1) for key, score in lists[0]]
        if linked:
            merged = self._entities_first(query, merged, found_by_links, start, chunks, scored, plan)
        stems = query_stems(" ".join([query, *asked]))
        results: list[SearchResult] = []
        remaining = plan.max_chars
        for key, score, hop in merged:
            if len(results) >= plan.k or remaining < MIN_RESULT_CHARS:
                break
            chunk = chunks[key]
            before, after = (self.backend.neighbours(key, chunk.source, chunk.path) if plan.context
                             else (None, None))
            view = shown(chunk.text, before.text if before else None, after.text if after else None, stems,
                         room_for(remaining, plan.k - len(results)), plan.context)
            remaining -= len(view.text)
            parts = scored[key]
            day = timestamp_day(chunk.timestamp)
            results.append(SearchResult(
                chunk.path, chunk.start_line, chunk.end_line, score, view.text, chunk.source, parts.text_score,
                parts.vector_score, chunk.ref or file_ref(chunk.path, chunk.start_line, chunk.end_line), chunk.role,
                chunk.timestamp, chunk.id, chunk.speaker, tuple(r.label() for r in resolve_relative(chunk.text, day)),
                hop))
        return results

    def _count(self, link: str, counts: dict[str, int]) -> int:
        """Units holding a (whole) link key or a value (up to one more than a link may have), once per search."""
        if link not in counts:
            counts[link] = self.backend.count_holding(_phrase(link), LINK_MAX_UNITS + 1)
        return counts[link]

    def _follow(self, keys: Sequence[str], values: Sequence[tuple[str, str]],
                plan: _Plan) -> tuple[list[Scored], dict[int, Chunk]]:
        """Every unit (up to `FOLLOW_UNITS`) that carries one of the keys or holds one of the values
        as a `key: value` line, best first (one query for all of them: `Backend.holding`)."""
        phrases = [*keys, *(_phrase(v) for _, v in values)]
        relevance = self.backend.holding(phrases, FOLLOW_UNITS, plan.filters)
        chunks = self.backend.fetch(sorted(relevance))
        kept = {key: r for key, r in relevance.items()
                if key in chunks and carries(chunks[key].text, chunks[key].fields, keys, values)}
        scores = normalize_text(kept)
        ranked = sorted((Scored(key, scores[key], scores[key], 0.0) for key in kept), key=lambda s: (-s.score, s.key))
        return ranked[:FOLLOW_UNITS], chunks

    def _entities_first(self, query: str, merged: list[tuple[int, float, int]], units: dict[int, Chunk],
                        start: str, chunks: dict[int, Chunk], scored: dict[int, Scored],
                        plan: _Plan) -> list[tuple[int, float, int]]:
        """When the links led to several entities: each best entity's own unit first, then the rest."""
        groups = entities({key: chunk.fields for key, chunk in units.items()})
        if len(groups) < 2:
            return merged
        best = rank_entities(query, groups, {key: chunk.text for key, chunk in units.items()}, start)[:plan.k]
        relevance = self.backend.holding(best, FOLLOW_UNITS, plan.filters)
        found = self.backend.fetch(sorted(relevance))
        chunks.update(found)
        own: dict[str, int] = {}
        for key in sorted(relevance, key=lambda key: (-relevance[key], key)):  # the short own units rank high
            if key in found and set(best) - set(own):
                entity = head_key(found[key].text)
                if entity in best and entity not in own:
                    own[entity] = key
        heads: list[tuple[int, float, int]] = []
        for rank, entity in enumerate(e for e in best if e in own):
            score = 1.0 - rank / (2 * len(best))
            heads.append((own[entity], score, plan.hops))
            scored.setdefault(own[entity], Scored(own[entity], score, score, 0.0))
        taken = {key for key, _, _ in heads}
        return heads + [row for row in merged if row[0] not in taken]

    def _rank(self, query: str, plan: _Plan, mode: Mode) -> tuple[list[Scored], dict[int, Chunk]]:
        """The candidates of one query, fused and filtered, best first, with their chunks."""
        text: dict[int, float] = {}
        vector: dict[int, float] = {}
        qvec = None
        if mode != "vector":
            text = normalize_text(self.backend.text_search(query, plan.wanted, plan.filters))
        if mode != "bm25":
            qvec = self.embedder.embed([query])[0]
            vector = {key: clamp_cosine(s) for key, s in self.backend.vector_search(qvec, plan.wanted, plan.filters)}
        if mode == "hybrid" and qvec is not None:
            # Every candidate gets both scores: a keyword hit the vector side did not fetch is scored
            # by its vector too, and a vector hit without the words scores 0 on text (it had none).
            missing = [key for key in text if key not in vector]
            vector.update({key: clamp_cosine(s) for key, s in self.backend.vector_scores(qvec, missing).items()})
        chunks = self.backend.fetch(sorted(set(text) | set(vector)))
        text = exact_first(text, chunks, query)
        ranked = fuse(text, vector, mode=mode, fusion=plan.fusion)
        ranked = [s for s in ranked if s.key in chunks]  # deleted since the candidates were fetched
        spans = query_spans(query)
        if spans:
            ranked = sorted((Scored(s.key, s.score * (1 + DATE_BOOST), s.text_score, s.vector_score)
                             if _within(chunks[s.key].timestamp, spans) else s for s in ranked),
                            key=lambda s: (-s.score, s.key))
        if plan.half_life:
            when = plan.today or date.today()
            ranked = sorted((Scored(s.key, s.score * decay_factor(chunks[s.key].path, when, plan.half_life),
                                    s.text_score, s.vector_score) for s in ranked), key=lambda s: (-s.score, s.key))
        ranked = [s for s in ranked if s.score >= plan.min_score and s.score > 0]
        if plan.use_mmr:
            ranked = mmr(ranked, {s.key: chunks[s.key].text for s in ranked}, plan.k)
        return ranked, chunks

    def stats(self) -> dict[str, Any]:
        return {**self.backend.stats(), "embedder": self.embedder.name, "dims": self.embedder.dims}

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> MemoryIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class _Plan:
    """One search's settings, checked (see `MemoryIndex.search`)."""

    k: int
    wanted: int
    mode: Mode
    fusion: Fusion
    min_score: float
    filters: Filters
    use_mmr: bool
    half_life: float | None
    today: date | None
    hops: int
    max_chars: int
    context: bool
    rewrite: Rewrite | None


def _within(timestamp: str | None, spans: Sequence[tuple[date, date]]) -> bool:
    day = timestamp_day(timestamp)
    return day is not None and any(start <= day <= end for start, end in spans)


def _rewritten(rewrite: Rewrite | None, query: str, texts: list[str]) -> str | None:
    """The rewriter's follow-up query; None without one, or when its model failed (the search goes on
    with its own follow-up: the rewriter is an option, the search must not fail for it)."""
    if rewrite is None:
        return None
    try:
        return rewrite(query, texts).strip()
    except ProviderError as error:
        LOG.warning("memory search: the query rewriter failed (%s); hops go on without it", error.message)
        return None


def _phrase(link: str) -> str:
    """A link key (whole already: `pers0045`) or a value as the full-text index holds it: its words."""
    return link if " " not in link and is_link_key(link) and not link_keys(link) else " ".join(query_terms(link))


def anchored_first(ranked: list[Scored], chunks: dict[int, Chunk], query: str) -> list[Scored]:
    """The units that hold a value the query quotes as a whole field value ('Tara': `name: Tara`)
    first, in their order: a chained question starts from the thing it names exactly."""
    anchors = quoted(query)
    if not anchors:
        return ranked
    exact = [s for s in ranked if any(holds_value(chunks[s.key].text, a) for a in anchors)]
    return exact + [s for s in ranked if s not in exact]


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
