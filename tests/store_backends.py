"""Test helpers shared by the store tests: one way to make a blob store or session log per backend,
so that the same tests run on files and on PostgreSQL."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from ctxwin.store.base import BlobStore
from ctxwin.store.blobs import FileBlobStore

BACKENDS = ["file", pytest.param("postgres", marks=pytest.mark.postgres)]  # blob stores
LOG_BACKENDS = ["jsonl", pytest.param("postgres", marks=pytest.mark.postgres)]  # session logs


def unique_id(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def make_blob_store(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> BlobStore:
    if backend == "file":
        return FileBlobStore(tmp_path / "blobs")
    from ctxwin.store.postgres import PostgresBlobStore, connect

    dsn = request.getfixturevalue("postgres_dsn")
    conn = connect(dsn)
    request.addfinalizer(conn.close)
    return PostgresBlobStore(conn, unique_id())


def corrupt_blob(backend: str, store: BlobStore, sha256: str, request: pytest.FixtureRequest) -> None:
    """Damages the stored bytes behind the store's back, the way a disk or a careless edit would."""
    if backend == "file":
        assert isinstance(store, FileBlobStore)
        path = store.directory / sha256[:2] / sha256[2:]
        data = bytearray(path.read_bytes())
        data[0] ^= 0xFF
        os.chmod(path, 0o600)
        path.write_bytes(bytes(data))
        return
    from ctxwin.store.postgres import PostgresBlobStore

    assert isinstance(store, PostgresBlobStore)
    store.conn.execute(
        "UPDATE ctxwin_blobs SET data = overlay(data placing '\\xff'::bytea from 1 for 1) "
        "WHERE session_id = %s AND sha256 = %s",
        (store.session_id, sha256),
    )
