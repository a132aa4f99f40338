"""The PostgreSQL index backend: many indexes (by `name`) in one database, beside the session store.

Full text: a generated `tsvector` column (the `simple` configuration: no stemming, any language)
with a GIN index, ranked by `ts_rank_cd`; CJK runs are matched by substring (`strpos`) since the
parser keeps a CJK run as one word. Vectors: a pgvector `vector` column scanned exactly by cosine
distance when the server has the extension; otherwise (or with `use_pgvector=False`) the vectors sit
in a `bytea` column and are scanned in process with numpy, like SQLite's.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import re2

from ctxwin.errors import InputError, MemoryIndexError, MissingExtraError
from ctxwin.memory.backend import FIELDS_WEIGHT, SCHEMA_VERSION, Filters, cjk_runs, whole_identifiers
from ctxwin.memory.chunks import IDENTIFIER, Chunk
from ctxwin.memory.vectors import VectorScan
from ctxwin.paths import re2_options

_TOKEN = re2.compile(r"[\pL\pN_]+", re2_options())
_SCHEMA = """
CREATE TABLE IF NOT EXISTS ctxwin_memory_meta(name text NOT NULL, key text NOT NULL, value text NOT NULL,
    PRIMARY KEY(name, key));
CREATE TABLE IF NOT EXISTS ctxwin_memory_files(name text NOT NULL, source text NOT NULL, path text NOT NULL,
    hash text NOT NULL, PRIMARY KEY(name, source, path));
CREATE TABLE IF NOT EXISTS ctxwin_memory_chunks(key bigserial PRIMARY KEY, name text NOT NULL, id text NOT NULL,
    source text NOT NULL, path text NOT NULL, start_line integer NOT NULL, end_line integer NOT NULL,
    hash text NOT NULL, ref text, role text, ts text, text text NOT NULL, embedding bytea,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED, UNIQUE(name, id));
ALTER TABLE ctxwin_memory_chunks ADD COLUMN IF NOT EXISTS speaker text;
ALTER TABLE ctxwin_memory_chunks ADD COLUMN IF NOT EXISTS fields text NOT NULL DEFAULT '';
ALTER TABLE ctxwin_memory_chunks ADD COLUMN IF NOT EXISTS ftsv tsvector
    GENERATED ALWAYS AS (to_tsvector('simple', fields)) STORED;
CREATE INDEX IF NOT EXISTS ctxwin_memory_chunks_tsv ON ctxwin_memory_chunks USING gin(tsv);
CREATE INDEX IF NOT EXISTS ctxwin_memory_chunks_ftsv ON ctxwin_memory_chunks USING gin(ftsv);
CREATE INDEX IF NOT EXISTS ctxwin_memory_chunks_path ON ctxwin_memory_chunks(name, source, path);
"""
_VECTOR_SCHEMA = "ALTER TABLE ctxwin_memory_chunks ADD COLUMN IF NOT EXISTS vec vector"
_COLUMNS = "key, id, source, path, start_line, end_line, hash, ref, role, ts, text, speaker, fields"
_LOCK = int.from_bytes(hashlib.blake2b(b"ctxwin:memory:schema", digest_size=8).digest(), "big", signed=True)


def _tokens(query: str) -> list[str]:
    return list(dict.fromkeys(t.lower() for t in _TOKEN.findall(query)))


def _phrases(phrases: Sequence[str]) -> str | None:
    """A tsquery matching any of the phrases (each its words in order)."""
    parts = []
    for phrase in phrases:
        words = [w for w in _tokens(phrase) if w]
        if words:
            parts.append("(" + " <-> ".join("'" + w.replace("'", "''").replace("\\", "") + "'" for w in words) + ")")
    return " | ".join(parts) or None


def _chunk(r: Sequence[Any]) -> Chunk:
    return Chunk(id=r[1], source=r[2], path=r[3], start_line=r[4], end_line=r[5], hash=r[6], ref=r[7], role=r[8],
                 timestamp=r[9], text=r[10], speaker=r[11], fields=r[12] or "")


def _where(filters: Filters) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for column, values in (("source", filters.sources), ("path", filters.paths), ("role", filters.roles)):
        if values:
            clauses.append(f"{column} = ANY(%s)")
            params.append(list(values))
    if filters.start:
        clauses.append("ts >= %s")
        params.append(filters.start)
    if filters.end_bound:
        clauses.append("ts <= %s")
        params.append(filters.end_bound)
    return (" AND " + " AND ".join(clauses)) if clauses else "", params


class PostgresBackend:
    kind = "postgres"

    def __init__(self, dsn: str, name: str, dims: int, *, use_pgvector: bool | None = None) -> None:
        try:
            import psycopg
        except ImportError:
            raise MissingExtraError("the PostgreSQL index needs psycopg 3", "pip install 'ctxwin[postgres]'") from None
        try:
            self.conn = psycopg.connect(dsn, autocommit=True)
        except psycopg.OperationalError as error:
            raise InputError(f"cannot connect to PostgreSQL: {str(error).strip()}",
                             "check the DSN and that the server is running") from None
        self.name = name
        self.dims = dims
        self.recreated = False
        with self.conn.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            self.conn.execute(_SCHEMA)
            self.recreated = self._check_version()
        self.pgvector = self._setup_pgvector() if use_pgvector in (None, True) else False
        if use_pgvector and not self.pgvector:
            raise MemoryIndexError("this PostgreSQL server has no pgvector extension",
                                   "install pgvector on the server, or pass use_pgvector=None to fall back")
        self._scan = VectorScan(dims)
        self._scan_version: tuple[int, str] | None = None

    def _check_version(self) -> bool:
        """Forgets this index's rows when another chunking wrote them (the version in its meta differs,
        or rows without one: written before versions were kept): the shared tables take the new
        columns, but old chunks would stay (their files' hashes are unchanged) with empty fields.
        The caller reindexes from the files and logs (`recreated`). Under the schema lock."""
        row = self.conn.execute("SELECT value FROM ctxwin_memory_meta WHERE name = %s AND key = 'schema'",
                                (self.name,)).fetchone()
        stale = False
        if row is None:
            stale = self.conn.execute("SELECT 1 FROM ctxwin_memory_chunks WHERE name = %s LIMIT 1",
                                      (self.name,)).fetchone() is not None
        elif row[0] != SCHEMA_VERSION:
            stale = True
        if stale:
            for table in ("ctxwin_memory_chunks", "ctxwin_memory_files", "ctxwin_memory_meta"):
                self.conn.execute(f"DELETE FROM {table} WHERE name = %s", (self.name,))
            self._bump()
        if row is None or stale:
            self.conn.execute("INSERT INTO ctxwin_memory_meta VALUES (%s, 'schema', %s) ON CONFLICT (name, key) "
                              "DO UPDATE SET value = excluded.value", (self.name, SCHEMA_VERSION))
        return stale

    def _setup_pgvector(self) -> bool:
        """Creates the extension and the vector column when the server has pgvector."""
        available = self.conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        if not available:
            return False
        try:
            with self.conn.transaction():
                self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
                self.conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                self.conn.execute(_VECTOR_SCHEMA)
        except Exception:  # no permission to create it: the numpy scan serves instead
            return False
        return True

    @staticmethod
    def _vec_literal(vector: np.ndarray) -> str:
        return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"

    # -- meta and files

    def _scalar(self, sql: str, params: Sequence[Any]) -> Any:
        """The one value of an aggregate query (which always answers one row)."""
        row = self.conn.execute(sql, params).fetchone()
        assert row is not None, "an aggregate query answers one row"
        return row[0]

    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM ctxwin_memory_meta WHERE name = %s AND key = %s",
                                (self.name, key)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, items: dict[str, str]) -> None:
        with self.conn.transaction():
            for key, value in items.items():
                self.conn.execute("INSERT INTO ctxwin_memory_meta VALUES (%s, %s, %s) ON CONFLICT (name, key) "
                                  "DO UPDATE SET value = excluded.value", (self.name, key, value))

    def _bump(self) -> None:
        self.conn.execute("INSERT INTO ctxwin_memory_meta VALUES (%s, 'deletions', '1') ON CONFLICT (name, key) "
                          "DO UPDATE SET value = (ctxwin_memory_meta.value::bigint + 1)::text", (self.name,))

    def file_hash(self, source: str, path: str) -> str | None:
        row = self.conn.execute("SELECT hash FROM ctxwin_memory_files WHERE name = %s AND source = %s AND path = %s",
                                (self.name, source, path)).fetchone()
        return None if row is None else str(row[0])

    def file_paths(self, source: str) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT path FROM ctxwin_memory_files WHERE name = %s AND source = %s ORDER BY path", (self.name, source))]

    # -- writes

    def _insert(self, chunks: Sequence[Chunk], vectors: np.ndarray | None) -> int:
        if not chunks:
            return 0
        rows = []
        for number, c in enumerate(chunks):
            vector = None if vectors is None else vectors[number].astype(np.float32)
            rows.append((self.name, c.id, c.source, c.path, c.start_line, c.end_line, c.hash, c.ref, c.role,
                         c.timestamp, c.text.replace("\x00", "\ufffd"), None if vector is None else vector.tobytes(),
                         c.speaker, c.fields.replace("\x00", "\ufffd"),
                         None if vector is None or not self.pgvector else self._vec_literal(vector)))
        vec_col, vec_val = (", vec", ", %s::vector") if self.pgvector else ("", "")
        with self.conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO ctxwin_memory_chunks(name, id, source, path, start_line, end_line, hash, ref, role, ts, "
                f"text, embedding, speaker, fields{vec_col}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                f"%s, %s{vec_val}) ON CONFLICT (name, id) DO NOTHING",
                rows if self.pgvector else [r[:-1] for r in rows])
            return max(int(cursor.rowcount), 0)  # psycopg sums the rows each statement inserted

    def replace_file(self, source: str, path: str, digest: str, chunks: Sequence[Chunk],
                     vectors: np.ndarray | None) -> int:
        with self.conn.transaction():
            deleted = self.conn.execute("DELETE FROM ctxwin_memory_chunks WHERE name = %s AND source = %s AND "
                                        "path = %s", (self.name, source, path)).rowcount
            if deleted:
                self._bump()
            added = self._insert(chunks, vectors)
            self.conn.execute("INSERT INTO ctxwin_memory_files VALUES (%s, %s, %s, %s) "
                              "ON CONFLICT (name, source, path) DO UPDATE SET hash = excluded.hash",
                              (self.name, source, path, digest))
        return added

    def remove_file(self, source: str, path: str) -> None:
        with self.conn.transaction():
            self.conn.execute("DELETE FROM ctxwin_memory_chunks WHERE name = %s AND source = %s AND path = %s",
                              (self.name, source, path))
            self.conn.execute("DELETE FROM ctxwin_memory_files WHERE name = %s AND source = %s AND path = %s",
                              (self.name, source, path))
            self._bump()

    def known_ids(self, ids: Sequence[str]) -> set[str]:
        rows = self.conn.execute("SELECT id FROM ctxwin_memory_chunks WHERE name = %s AND id = ANY(%s)",
                                 (self.name, list(ids)))
        return {r[0] for r in rows}

    def add_chunks(self, chunks: Sequence[Chunk], vectors: np.ndarray | None) -> int:
        with self.conn.transaction():
            return self._insert(chunks, vectors)

    def set_vectors(self, rows: Sequence[tuple[int, np.ndarray]]) -> None:
        with self.conn.transaction(), self.conn.cursor() as cursor:
            if self.pgvector:
                cursor.executemany("UPDATE ctxwin_memory_chunks SET embedding = %s, vec = %s::vector WHERE key = %s",
                                   [(v.astype(np.float32).tobytes(), self._vec_literal(v), k) for k, v in rows])
            else:
                cursor.executemany("UPDATE ctxwin_memory_chunks SET embedding = %s WHERE key = %s",
                                   [(v.astype(np.float32).tobytes(), k) for k, v in rows])
            self._bump()

    def clear(self) -> None:
        with self.conn.transaction():
            self.conn.execute("DELETE FROM ctxwin_memory_chunks WHERE name = %s", (self.name,))
            self.conn.execute("DELETE FROM ctxwin_memory_files WHERE name = %s", (self.name,))
            self.conn.execute("DELETE FROM ctxwin_memory_meta WHERE name = %s AND key <> 'schema'", (self.name,))
            self._bump()

    # -- reads

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One REPEATABLE READ transaction: the candidates and their rows come from one snapshot, so a
        search while another process writes sees its writes whole or not at all."""
        if self.conn.info.transaction_status != 0:  # already inside one
            yield
            return
        with self.conn.transaction():
            self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def holding(self, phrases: Sequence[str], k: int, filters: Filters) -> dict[int, float]:
        expression = _phrases(phrases)
        if expression is None:
            return {}
        where, params = _where(filters)
        rows = self.conn.execute(
            f"SELECT key, ts_rank_cd(tsv, q) + {FIELDS_WEIGHT!r} * ts_rank_cd(ftsv, q) FROM ctxwin_memory_chunks, "
            f"to_tsquery('simple', %s) q WHERE name = %s AND (tsv @@ q OR ftsv @@ q){where} ORDER BY 2 DESC, key "
            "LIMIT %s", [expression, self.name, *params, k])
        return {int(key): float(rank) for key, rank in rows}

    def count_holding(self, phrase: str, limit: int) -> int:
        expression = _phrases([phrase])
        if expression is None:
            return 0
        row = self.conn.execute("SELECT count(*) FROM (SELECT 1 FROM ctxwin_memory_chunks, to_tsquery('simple', %s) q "
                                "WHERE name = %s AND (tsv @@ q OR ftsv @@ q) LIMIT %s) s",
                                (expression, self.name, limit)).fetchone()
        return int(row[0]) if row else 0

    def text_search(self, query: str, k: int, filters: Filters) -> dict[int, float]:
        where, params = _where(filters)
        found: dict[int, float] = {}
        # The parser keeps a hyphenated word or a path whole, beside its parts: the query does too.
        tokens = [*dict.fromkeys(m.lower() for m in IDENTIFIER.findall(query)), *whole_identifiers(query),
                  *_tokens(query)]
        if tokens:
            expression = " | ".join("'" + t.replace("'", "''").replace("\\", "") + "'" for t in tokens)
            rows = self.conn.execute(
                f"SELECT key, ts_rank_cd(tsv, q) + {FIELDS_WEIGHT!r} * ts_rank_cd(ftsv, q) FROM ctxwin_memory_chunks, "
                "to_tsquery('simple', %s) q "
                f"WHERE name = %s AND (tsv @@ q OR ftsv @@ q){where} ORDER BY 2 DESC, key LIMIT %s",
                [expression, self.name, *params, k])
            found.update({int(key): float(rank) for key, rank in rows})
        for run in (r for r in cjk_runs(query) if len(r) >= 2):
            rows = self.conn.execute(
                "SELECT key, (length(text) - length(replace(text, %s, ''))) / length(%s)::float "
                f"FROM ctxwin_memory_chunks WHERE name = %s AND strpos(text, %s) > 0{where} ORDER BY 2 DESC, key "
                "LIMIT %s", [run, run, self.name, run, *params, k])
            for key, count in rows:
                found[int(key)] = max(found.get(int(key), 0.0), float(count))
        return found

    def _refresh_scan(self) -> None:
        deletions = self.get_meta("deletions") or "0"
        top = self._scalar("SELECT coalesce(max(key), 0) FROM ctxwin_memory_chunks WHERE name = %s", (self.name,))
        version = (int(top), deletions)
        if self._scan_version == version:
            return
        if self._scan_version is None or self._scan_version[1] != deletions:
            self._scan = VectorScan(self.dims)
        rows = self.conn.execute("SELECT key, embedding FROM ctxwin_memory_chunks WHERE name = %s AND key > %s "
                                 "ORDER BY key", (self.name, self._scan.last_key))
        self._scan.extend((int(k), bytes(v) if v is not None else None) for k, v in rows)
        self._scan_version = version

    def vector_search(self, query: np.ndarray, k: int, filters: Filters) -> list[tuple[int, float]]:
        where, params = _where(filters)
        if self.pgvector:
            rows = self.conn.execute(
                "SELECT key, 1 - (vec <=> %s::vector) FROM ctxwin_memory_chunks WHERE name = %s AND vec IS NOT NULL"
                f"{where} ORDER BY vec <=> %s::vector, key LIMIT %s",
                [self._vec_literal(query), self.name, *params, self._vec_literal(query), k])
            return [(int(key), float(score)) for key, score in rows]
        self._refresh_scan()
        allowed = None
        if not filters.empty:
            keys = [r[0] for r in self.conn.execute(
                f"SELECT key FROM ctxwin_memory_chunks WHERE name = %s{where}", [self.name, *params])]
            allowed = np.isin(self._scan.keys, np.asarray(keys, dtype=np.int64))
        return self._scan.search(query, k, allowed)

    def vector_scores(self, query: np.ndarray, keys: Sequence[int]) -> dict[int, float]:
        if not keys:
            return {}
        if self.pgvector:
            rows = self.conn.execute("SELECT key, 1 - (vec <=> %s::vector) FROM ctxwin_memory_chunks "
                                     "WHERE name = %s AND key = ANY(%s) AND vec IS NOT NULL",
                                     (self._vec_literal(query), self.name, list(keys)))
            return {int(key): float(score) for key, score in rows}
        self._refresh_scan()
        return self._scan.scores_for(query, keys)

    def fetch(self, keys: Sequence[int]) -> dict[int, Chunk]:
        if not keys:
            return {}
        rows = self.conn.execute(f"SELECT {_COLUMNS} FROM ctxwin_memory_chunks WHERE name = %s AND key = ANY(%s)",
                                 (self.name, list(keys)))
        return {int(r[0]): _chunk(r) for r in rows}

    def neighbours(self, key: int, source: str, path: str) -> tuple[Chunk | None, Chunk | None]:
        before = self.conn.execute(f"SELECT {_COLUMNS} FROM ctxwin_memory_chunks WHERE name = %s AND source = %s "
                                   "AND path = %s AND key < %s ORDER BY key DESC LIMIT 1",
                                   (self.name, source, path, key)).fetchone()
        after = self.conn.execute(f"SELECT {_COLUMNS} FROM ctxwin_memory_chunks WHERE name = %s AND source = %s "
                                  "AND path = %s AND key > %s ORDER BY key LIMIT 1",
                                  (self.name, source, path, key)).fetchone()
        return (None if before is None else _chunk(before)), (None if after is None else _chunk(after))

    def iter_texts(self) -> Iterator[list[tuple[int, str]]]:
        last = 0
        while True:
            rows = self.conn.execute("SELECT key, text FROM ctxwin_memory_chunks WHERE name = %s AND key > %s "
                                     "ORDER BY key LIMIT 2000", (self.name, last)).fetchall()
            if not rows:
                return
            yield [(int(k), str(t)) for k, t in rows]
            last = rows[-1][0]

    def stats(self) -> dict[str, Any]:
        by_source: dict[str, int] = dict(self.conn.execute(
            "SELECT source, count(*) FROM ctxwin_memory_chunks WHERE name = %s GROUP BY source",
            (self.name,)).fetchall())
        files = self._scalar("SELECT count(*) FROM ctxwin_memory_files WHERE name = %s", (self.name,))
        return {"backend": self.kind, "name": self.name, "chunks": sum(by_source.values()),
                "chunks_by_source": by_source, "files": files, "vectors": "pgvector" if self.pgvector else "numpy"}

    def close(self) -> None:
        self.conn.close()
