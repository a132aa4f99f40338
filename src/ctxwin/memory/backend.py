"""Where an index keeps its chunks: the interface both backends implement, and the SQLite one.

SQLite (next to a JSONL workspace): a `chunks` table with the text and the float32 vector as a BLOB,
an FTS5 table over its `text` and `fields` (`chunks.py`: speaker, headings, dates, identifiers
whole), ranked by BM25 with the fields at `FIELDS_WEIGHT`, tokenized by `porter unicode61` (prose
stemmed: "painted" finds "paint"; identifiers are split by unicode61 and kept whole in the fields),
and a second FTS5 table with the `trigram`
tokenizer holding only the chunks that contain CJK text (unicode61 sees a run of CJK characters as
one word, so a word inside it could never match). WAL mode: a search reads one snapshot while
another process appends. Vectors are scanned with numpy (`VectorScan`): stdlib `sqlite3` here cannot
load extensions, and where sqlite-vec does load its vec0 scan is ~4× slower than numpy (deps.md §3).

PostgreSQL lives in `pgbackend.py`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import re2

from ctxwin.errors import MemoryIndexError
from ctxwin.memory.chunks import IDENTIFIER, Chunk, whole_key
from ctxwin.memory.snippets import STOPWORDS
from ctxwin.memory.vectors import VectorScan
from ctxwin.paths import re2_options

SCHEMA_VERSION = "2"
FIELDS_WEIGHT = 0.5
"""BM25 weight of a chunk's fields against its text (1): a speaker or a date a query names counts,
but less than the words said (measured on the development sets, `benchmarks/memory.py`)."""
MAX_QUERY_TERMS = 8
"""Full-text queries keep at most this many words, the rarest: ranking every row that holds a common
word is what makes an OR query slow on a large index, and common words weigh little in BM25."""
POSTINGS_BUDGET = 2_000
"""Rows a full-text query may rank: words are taken rarest first while the chunks holding them add up
to at most this (the rarest word always), and an identifier is searched as a phrase only when all its
words together stay within it (measured: a phrase of common words costs 7 ms on 30,000 chunks)."""
DOC_COUNT_CACHE = 100_000
"""Words whose chunk counts are kept between searches."""
BUSY_TIMEOUT_MS = 10_000
"""How long a connection waits for another process's write lock before failing."""
_TOKEN = re2.compile(r"[\pL\pN\pM]+", re2_options())  # unicode61 splits on "_" too
_ANCHOR = re2.compile(r"(?:^|[^\pL\pN'])'([^'\n]{1,80})'(?:$|[^\pL\pN])|\"([^\"\n]{1,80})\"|"
                      r"[^.!?\s]\s+(\p{Lu}[\pL\pN]*)", re2_options())
_CJK = re2.compile(r"[\x{3040}-\x{30ff}\x{3400}-\x{4dbf}\x{4e00}-\x{9fff}\x{ac00}-\x{d7af}\x{f900}-\x{faff}]+",
                   re2_options())


@dataclass(frozen=True, slots=True)
class Filters:
    """Restrictions of a search. Timestamps compare as ISO 8601 text; `end` is inclusive (a date-only
    end covers that whole day)."""

    sources: tuple[str, ...] | None = None
    paths: tuple[str, ...] | None = None
    roles: tuple[str, ...] | None = None
    start: str | None = None
    end: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.sources or self.paths or self.roles or self.start or self.end)

    @property
    def end_bound(self) -> str | None:
        if self.end is None:
            return None
        return self.end + "\uffff" if len(self.end) == 10 else self.end


def query_terms(query: str) -> list[str]:
    """The query's words as unicode61 sees them (lowercase, diacritics kept apart), deduplicated."""
    import unicodedata

    out = []
    for token in _TOKEN.findall(query.lower()):
        plain = "".join(c for c in unicodedata.normalize("NFKD", token) if not unicodedata.combining(c))
        out.append(plain)
    return list(dict.fromkeys(t for t in out if t))


def identifiers(query: str) -> list[str]:
    """Identifier-like runs of the query (`needle-1-age50`, `src/app.py`, `frobnicate_widget`), as the
    phrase of words unicode61 splits them into."""
    return list(dict.fromkeys(" ".join(query_terms(m)) for m in IDENTIFIER.findall(query)))


def whole_identifiers(query: str) -> list[str]:
    """The query's identifiers as the fields hold them whole (`pers-0001` is `pers0001`)."""
    return list(dict.fromkeys(whole_key(m) for m in IDENTIFIER.findall(query)))


def anchor_terms(query: str) -> set[str]:
    """The words of what a query quotes ('Tara', "7D U3378") and of its capitalised words after the
    first of a sentence (names): the words a long question must not lose to its longer ones."""
    return {t for groups in _ANCHOR.findall(query) for part in groups if part for t in query_terms(part)}


def fts_query(terms: Sequence[str], phrases: Sequence[str] = ()) -> str | None:
    """Each word quoted, joined with OR (an AND of words misses multi-word questions, OpenClaw PR #15339),
    plus each identifier of the query as a phrase: a phrase is rarer than any of its words, so the
    chunk holding the identifier itself outranks chunks that merely share its parts."""
    parts = [*phrases, *terms]
    if not parts:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in parts)


def cjk_runs(text: str) -> list[str]:
    return _CJK.findall(text)


def trigram_query(query: str) -> str | None:
    """CJK runs of three or more characters, quoted and OR-ed (trigram needs three)."""
    runs = [r for r in cjk_runs(query) if len(r) >= 3]
    if not runs:
        return None
    return " OR ".join('"' + r + '"' for r in dict.fromkeys(runs))


class Backend(Protocol):
    """The storage of one index. Keys are backend integers, ascending in insertion order."""

    kind: str

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, items: dict[str, str]) -> None: ...

    def file_hash(self, source: str, path: str) -> str | None: ...

    def file_paths(self, source: str) -> list[str]: ...

    def replace_file(self, source: str, path: str, digest: str, chunks: Sequence[Chunk],
                     vectors: np.ndarray | None) -> int:
        """Replaces the file's chunks; returns how many it now holds (identical units are held once)."""
        ...

    def remove_file(self, source: str, path: str) -> None: ...

    def known_ids(self, ids: Sequence[str]) -> set[str]: ...

    def add_chunks(self, chunks: Sequence[Chunk], vectors: np.ndarray | None) -> int: ...

    def text_search(self, query: str, k: int, filters: Filters) -> dict[int, float]: ...

    def holding(self, phrases: Sequence[str], k: int, filters: Filters) -> dict[int, float]:
        """The `k` chunks that hold any of `phrases` in their text or fields, by BM25: each phrase is
        words as `query_terms` gives them (a whole identifier, `whole_key`, is one word). For the
        search agent's links, where `text_search`'s word budget would keep only the rarest few."""
        ...

    def count_holding(self, phrase: str, limit: int) -> int:
        """How many chunks hold `phrase` (as in `holding`), counted up to `limit`."""
        ...

    def vector_search(self, query: np.ndarray, k: int, filters: Filters) -> list[tuple[int, float]]: ...

    def vector_scores(self, query: np.ndarray, keys: Sequence[int]) -> dict[int, float]: ...

    def fetch(self, keys: Sequence[int]) -> dict[int, Chunk]: ...

    def neighbours(self, key: int, source: str, path: str) -> tuple[Chunk | None, Chunk | None]:
        """The chunks of the same file or session just before and after chunk `key` (in key order,
        which is the order they were indexed in: the file's order, the log's order)."""
        ...

    def iter_texts(self) -> Iterator[list[tuple[int, str]]]: ...

    def set_vectors(self, rows: Sequence[tuple[int, np.ndarray]]) -> None: ...

    def clear(self) -> None: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(source TEXT NOT NULL, path TEXT NOT NULL, hash TEXT NOT NULL,
    PRIMARY KEY(source, path));
CREATE TABLE IF NOT EXISTS chunks(key INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL, path TEXT NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
    hash TEXT NOT NULL, ref TEXT, role TEXT, timestamp TEXT, text TEXT NOT NULL, embedding BLOB,
    speaker TEXT, fields TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks(source, path);
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(text, fields, content='chunks', content_rowid='key',
    tokenize='porter unicode61 remove_diacritics 2');
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_tri USING fts5(text, content='chunks', content_rowid='key',
    tokenize='trigram');
"""
_COLUMNS = "key, id, source, path, start_line, end_line, hash, ref, role, timestamp, text, speaker, fields"


def _chunk(row: Sequence[Any]) -> Chunk:
    return Chunk(id=row[1], source=row[2], path=row[3], start_line=row[4], end_line=row[5], hash=row[6],
                 ref=row[7], role=row[8], timestamp=row[9], text=row[10], speaker=row[11], fields=row[12] or "")


def _where(filters: Filters, alias: str = "c") -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for column, values in (("source", filters.sources), ("path", filters.paths), ("role", filters.roles)):
        if values:
            clauses.append(f"{alias}.{column} IN ({','.join('?' * len(values))})")
            params.extend(values)
    if filters.start:
        clauses.append(f"{alias}.timestamp >= ?")
        params.append(filters.start)
    if filters.end_bound:
        clauses.append(f"{alias}.timestamp <= ?")
        params.append(filters.end_bound)
    return (" AND " + " AND ".join(clauses)) if clauses else "", params


class SqliteBackend:
    """An index in one SQLite file. Opening a file that is not a readable index (deleted, truncated,
    overwritten) starts an empty one in its place: the files and the log are the truth, the caller
    reindexes (`MemoryIndex.open` reports `rebuilt`)."""

    kind = "sqlite"

    def __init__(self, path: str | Path, dims: int) -> None:
        self.path = Path(path)
        self.dims = dims
        self.recreated = False
        try:
            self.conn = self._connect()
        except sqlite3.DatabaseError:
            self._discard()
            self.conn = self._connect()
            self.recreated = True
        self._scan = VectorScan(dims)
        self._scan_version: tuple[int, str] | None = None
        self._counts: dict[str, int] = {}
        self._counts_version: tuple[int, str] | None = None
        self._over_budget = False  # set by `_query`: even the query's rarest word is over the budget
        self.fields_weight = FIELDS_WEIGHT

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.executescript(_SCHEMA)
            version = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if version is None:
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
            elif version[0] != SCHEMA_VERSION:
                raise sqlite3.DatabaseError(f"index schema {version[0]}, expected {SCHEMA_VERSION}")
            conn.execute("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'x'").fetchone()
        except sqlite3.DatabaseError:
            conn.close()
            raise
        return conn

    def _discard(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    # -- meta and files

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, items: dict[str, str]) -> None:
        with self._write():
            self.conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(items.items()))

    def file_hash(self, source: str, path: str) -> str | None:
        row = self.conn.execute("SELECT hash FROM files WHERE source = ? AND path = ?", (source, path)).fetchone()
        return None if row is None else str(row[0])

    def file_paths(self, source: str) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT path FROM files WHERE source = ? ORDER BY path", (source,))]

    # -- writes

    def _write(self) -> _Transaction:
        return _Transaction(self.conn)

    def _delete_chunks(self, where: str, params: Sequence[Any]) -> int:
        rows = self.conn.execute(f"SELECT key, text, fields FROM chunks WHERE {where}", params).fetchall()
        for key, text, fields in rows:
            self.conn.execute("INSERT INTO chunks_fts(chunks_fts, rowid, text, fields) VALUES ('delete', ?, ?, ?)",
                              (key, text, fields))
            if cjk_runs(text):
                self.conn.execute("INSERT INTO chunks_tri(chunks_tri, rowid, text) VALUES ('delete', ?, ?)",
                                  (key, text))
        self.conn.execute(f"DELETE FROM chunks WHERE {where}", params)
        if rows:
            self.conn.execute("INSERT INTO meta VALUES ('deletions', '1') ON CONFLICT(key) DO UPDATE "
                              "SET value = CAST(value AS INTEGER) + 1")
        return len(rows)

    def _insert(self, chunks: Sequence[Chunk], vectors: np.ndarray | None) -> int:
        """Inserts the chunks not held yet (by id) and indexes their text; one statement per table for
        the whole batch (new rows are those above the highest key before: keys only grow)."""
        if not chunks:
            return 0
        before = self.conn.execute("SELECT coalesce(max(key), 0) FROM chunks").fetchone()[0]
        rows = [(c.id, c.source, c.path, c.start_line, c.end_line, c.hash, c.ref, c.role, c.timestamp, c.text,
                 None if vectors is None else vectors[n].astype(np.float32).tobytes(), c.speaker, c.fields)
                for n, c in enumerate(chunks)]
        self.conn.executemany(
            "INSERT OR IGNORE INTO chunks(id, source, path, start_line, end_line, hash, ref, role, timestamp, "
            "text, embedding, speaker, fields) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        self.conn.execute("INSERT INTO chunks_fts(rowid, text, fields) SELECT key, text, fields FROM chunks "
                          "WHERE key > ?", (before,))
        cjk = [c.id for c in chunks if cjk_runs(c.text)]
        for start in range(0, len(cjk), 500):
            part = cjk[start:start + 500]
            self.conn.execute(f"INSERT INTO chunks_tri(rowid, text) SELECT key, text FROM chunks WHERE key > ? AND "
                              f"id IN ({','.join('?' * len(part))})", (before, *part))
        return int(self.conn.execute("SELECT count(*) FROM chunks WHERE key > ?", (before,)).fetchone()[0])

    def replace_file(self, source: str, path: str, digest: str, chunks: Sequence[Chunk],
                     vectors: np.ndarray | None) -> int:
        with self._write():
            self._delete_chunks("source = ? AND path = ?", (source, path))
            added = self._insert(chunks, vectors)
            self.conn.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?)", (source, path, digest))
        return added

    def remove_file(self, source: str, path: str) -> None:
        with self._write():
            self._delete_chunks("source = ? AND path = ?", (source, path))
            self.conn.execute("DELETE FROM files WHERE source = ? AND path = ?", (source, path))

    def known_ids(self, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(ids), 500):
            part = list(ids[start:start + 500])
            found.update(r[0] for r in self.conn.execute(
                f"SELECT id FROM chunks WHERE id IN ({','.join('?' * len(part))})", part))
        return found

    def add_chunks(self, chunks: Sequence[Chunk], vectors: np.ndarray | None) -> int:
        with self._write():
            return self._insert(chunks, vectors)

    def set_vectors(self, rows: Sequence[tuple[int, np.ndarray]]) -> None:
        with self._write():
            self.conn.executemany("UPDATE chunks SET embedding = ? WHERE key = ?",
                                  [(v.astype(np.float32).tobytes(), k) for k, v in rows])
            self.conn.execute("INSERT INTO meta VALUES ('deletions', '1') ON CONFLICT(key) DO UPDATE "
                              "SET value = CAST(value AS INTEGER) + 1")

    def clear(self) -> None:
        with self._write():
            self.conn.execute("DELETE FROM chunks")
            self.conn.execute("DELETE FROM files")
            self.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('delete-all')")
            self.conn.execute("INSERT INTO chunks_tri(chunks_tri) VALUES ('delete-all')")
            self.conn.execute("DELETE FROM meta WHERE key NOT IN ('schema')")
            self.conn.execute("INSERT INTO meta VALUES ('deletions', '1') ON CONFLICT(key) DO UPDATE "
                              "SET value = CAST(value AS INTEGER) + 1")

    # -- reads (each search runs in one read transaction: a consistent snapshot)

    def snapshot(self) -> _Transaction:
        return _Transaction(self.conn, read=True)

    def text_search(self, query: str, k: int, filters: Filters) -> dict[int, float]:
        where, params = _where(filters)
        found: dict[int, float] = {}
        for table, expression in (("chunks_fts", self._query(query)),
                                  ("chunks_tri", trigram_query(query))):
            if expression is None:
                continue
            # bm25() is negative, more negative is better: its negation is the relevance. The join
            # (reading each matching chunk's row) is only paid when a filter needs it.
            rank = (f"bm25(chunks_fts, 1.0, {float(self.fields_weight)!r})" if table == "chunks_fts"
                    else f"bm25({table})")
            if where:
                sql = (f"SELECT c.key, -{rank} FROM {table} JOIN chunks c ON c.key = {table}.rowid "
                       f"WHERE {table} MATCH ?{where} ORDER BY {rank} LIMIT ?")
                rows = self.conn.execute(sql, [expression, *params, k]).fetchall()
            elif table == "chunks_fts" and self._over_budget:
                # Every word of the query is in more chunks than the budget: rank only the newest
                # POSTINGS_BUDGET chunks holding them (FTS5 walks rowids newest first and stops).
                sql = f"SELECT rowid, -{rank} FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?"
                rows = sorted(self.conn.execute(sql, [expression, POSTINGS_BUDGET]).fetchall(),
                              key=lambda r: -r[1])[:k]
            else:
                sql = f"SELECT rowid, -{rank} FROM {table} WHERE {table} MATCH ? ORDER BY {rank} LIMIT ?"
                rows = self.conn.execute(sql, [expression, k]).fetchall()
            for key, relevance in rows:
                found[key] = max(found.get(key, 0.0), float(relevance))
        return found

    def holding(self, phrases: Sequence[str], k: int, filters: Filters) -> dict[int, float]:
        expression = fts_query([p for p in phrases if p.strip()])
        if expression is None:
            return {}
        where, params = _where(filters)
        rank = f"bm25(chunks_fts, 1.0, {float(self.fields_weight)!r})"
        sql = (f"SELECT c.key, -{rank} FROM chunks_fts JOIN chunks c ON c.key = chunks_fts.rowid "
               f"WHERE chunks_fts MATCH ?{where} ORDER BY {rank} LIMIT ?") if where else \
            f"SELECT rowid, -{rank} FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY {rank} LIMIT ?"
        return {int(key): float(relevance) for key, relevance in self.conn.execute(sql, [expression, *params, k])}

    def count_holding(self, phrase: str, limit: int) -> int:
        expression = fts_query([phrase]) if phrase.strip() else None
        if expression is None:
            return 0
        return int(self.conn.execute("SELECT count(*) FROM (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? "
                                     "LIMIT ?)", (expression, limit)).fetchone()[0])

    def _doc_counts(self, terms: Sequence[str]) -> dict[str, int]:
        """Chunks holding each word, counted up to `POSTINGS_BUDGET + 1` (all a query plan needs to
        know): a count stops walking the word's postings there, where fts5vocab would walk them all.
        Cached until the index changes (`_data_version`)."""
        version = self._data_version()
        if version != self._counts_version:
            self._counts.clear()
            self._counts_version = version
        if len(self._counts) > DOC_COUNT_CACHE:
            self._counts.clear()
        for term in terms:
            if term not in self._counts:
                row = self.conn.execute(
                    "SELECT count(*) FROM (SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?)",
                    ('"' + term.replace('"', '""') + '"', POSTINGS_BUDGET + 1)).fetchone()
                self._counts[term] = int(row[0])
        return {t: self._counts[t] for t in terms}

    def _data_version(self) -> tuple[int, str]:
        top = self.conn.execute("SELECT coalesce(max(key), 0) FROM chunks").fetchone()[0]
        return int(top), self.get_meta("deletions") or "0"

    def _query(self, query: str) -> str | None:
        """The FTS5 expression for `query`: its words that occur in the index, rarest first, while the
        rows they would rank stay within `POSTINGS_BUDGET` (and at most `MAX_QUERY_TERMS` of them),
        plus each identifier as a phrase when its words fit the budget too."""
        # Each word costs a look-up, so only so many are counted: what the query quotes or names
        # first (a long question's 'Tara' was dropped for its 16 longest words), then longer words,
        # the rarer ones.
        asked = query_terms(query)
        content = [t for t in asked if t not in STOPWORDS]
        anchors = anchor_terms(query)
        # Question words ("what", "did") rank a chunk for sharing them only where they are rare, as
        # in a small index: they are asked for only when the query has nothing else.
        terms = sorted(dict.fromkeys([*whole_identifiers(query), *(content or asked)]),
                       key=lambda t: (t not in anchors, -len(t), t))[:2 * MAX_QUERY_TERMS]
        phrases = identifiers(query)
        words = {w for p in phrases for w in p.split()}
        counts = self._doc_counts(list(dict.fromkeys([*terms, *words])))
        present = sorted((t for t in terms if counts.get(t)), key=lambda t: (counts[t], t not in anchors, t))
        kept: list[str] = []
        rows = 0
        for term in present[:MAX_QUERY_TERMS]:
            if kept and rows + counts[term] > POSTINGS_BUDGET:
                break
            kept.append(term)
            rows += counts[term]
        self._over_budget = rows > POSTINGS_BUDGET
        fitting = []
        for phrase in phrases:
            # A phrase walks the postings of every word in it: only one whose words are all rare enough.
            found = [counts.get(w, 0) for w in phrase.split()]
            if all(found) and sum(found) <= POSTINGS_BUDGET:
                fitting.append(phrase)
        return fts_query(kept, fitting)

    def _refresh_scan(self) -> None:
        """Brings the in-memory vectors up to date with the file: new rows are appended; after any
        deletion or re-embedding (counted in meta) the matrix is rebuilt."""
        version = self._data_version()
        if self._scan_version == version:
            return
        if self._scan_version is None or self._scan_version[1] != version[1]:
            self._scan = VectorScan(self.dims)
        rows = self.conn.execute("SELECT key, embedding FROM chunks WHERE key > ? ORDER BY key",
                                 (self._scan.last_key,))
        self._scan.extend(rows)
        self._scan_version = version

    def _allowed(self, filters: Filters) -> np.ndarray | None:
        if filters.empty:
            return None
        where, params = _where(filters)
        keys = np.fromiter((r[0] for r in self.conn.execute(f"SELECT c.key FROM chunks c WHERE 1{where}", params)),
                           dtype=np.int64)
        return np.isin(self._scan.keys, keys)

    def vector_search(self, query: np.ndarray, k: int, filters: Filters) -> list[tuple[int, float]]:
        self._refresh_scan()
        return self._scan.search(query, k, self._allowed(filters))

    def vector_scores(self, query: np.ndarray, keys: Sequence[int]) -> dict[int, float]:
        self._refresh_scan()
        return self._scan.scores_for(query, keys)

    def fetch(self, keys: Sequence[int]) -> dict[int, Chunk]:
        out: dict[int, Chunk] = {}
        for start in range(0, len(keys), 500):
            part = list(keys[start:start + 500])
            for row in self.conn.execute(f"SELECT {_COLUMNS} FROM chunks WHERE key IN ({','.join('?' * len(part))})",
                                         part):
                out[row[0]] = _chunk(row)
        return out

    def neighbours(self, key: int, source: str, path: str) -> tuple[Chunk | None, Chunk | None]:
        before = self.conn.execute(f"SELECT {_COLUMNS} FROM chunks WHERE source = ? AND path = ? AND key < ? "
                                   "ORDER BY key DESC LIMIT 1", (source, path, key)).fetchone()
        after = self.conn.execute(f"SELECT {_COLUMNS} FROM chunks WHERE source = ? AND path = ? AND key > ? "
                                  "ORDER BY key LIMIT 1", (source, path, key)).fetchone()
        return (None if before is None else _chunk(before)), (None if after is None else _chunk(after))

    def iter_texts(self) -> Iterator[list[tuple[int, str]]]:
        last = 0
        while True:
            rows = self.conn.execute("SELECT key, text FROM chunks WHERE key > ? ORDER BY key LIMIT 2000",
                                     (last,)).fetchall()
            if not rows:
                return
            yield [(int(k), str(t)) for k, t in rows]
            last = rows[-1][0]

    def stats(self) -> dict[str, Any]:
        by_source = dict(self.conn.execute("SELECT source, count(*) FROM chunks GROUP BY source").fetchall())
        files = self.conn.execute("SELECT count(*) FROM files").fetchone()[0]
        size = sum(Path(f"{self.path}{s}").stat().st_size for s in ("", "-wal") if Path(f"{self.path}{s}").exists())
        return {"backend": self.kind, "path": str(self.path), "chunks": sum(by_source.values()),
                "chunks_by_source": by_source, "files": files, "bytes": size, "vectors": "numpy"}

    def close(self) -> None:
        self.conn.close()


class _Transaction:
    """BEGIN IMMEDIATE (a writer) or BEGIN (a reader's snapshot) ... COMMIT, ROLLBACK on error;
    nested uses join the outer transaction."""

    def __init__(self, conn: sqlite3.Connection, read: bool = False) -> None:
        self.conn = conn
        self.read = read
        self.outer = False

    def __enter__(self) -> _Transaction:
        if self.conn.in_transaction:
            return self
        self.outer = True
        try:
            self.conn.execute("BEGIN" if self.read else "BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            raise MemoryIndexError(f"the memory index is busy: {error}",
                                   "another process holds it for writing; try again") from error
        return self

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        if not self.outer:
            return
        if kind is None:
            self.conn.execute("COMMIT")
        else:
            self.conn.execute("ROLLBACK")
