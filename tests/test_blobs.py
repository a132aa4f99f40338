"""The blob store contract, run against every backend (files; PostgreSQL when a server can start)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwin.errors import InputError
from ctxwin.store.base import BlobCorruptedError, BlobNotFoundError, BlobStore
from ctxwin.store.blobs import (
    HANDLE_MIN_HEX,
    FileBlobStore,
    count_lines,
    line_range,
    sha256_hex,
    shortest_unique_prefix,
)
from store_backends import BACKENDS, corrupt_blob, make_blob_store


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def blobs(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> BlobStore:
    return make_blob_store(backend, tmp_path, request)


def test_put_get_roundtrip_and_metadata(blobs: BlobStore) -> None:
    data = b"line one\nline two\nthree"
    info = blobs.put(data, media_type="text/plain", origin="e1")
    assert info.sha256 == sha256_hex(data)
    assert info.handle == "blob:" + info.sha256[:HANDLE_MIN_HEX]
    assert (info.size, info.lines, info.media_type, info.origin) == (len(data), 3, "text/plain", "e1")
    assert blobs.get(info.handle) == data
    assert blobs.stat(info.handle) == info
    # a longer prefix, up to the full hash, names the same blob
    assert blobs.get("blob:" + info.sha256) == data
    assert blobs.get("blob:" + info.sha256[:20].upper()) == data


def test_same_bytes_same_handle_first_metadata_kept(blobs: BlobStore) -> None:
    first = blobs.put(b"same", media_type="text/plain", origin="a")
    second = blobs.put(b"same", media_type="application/json", origin="b")
    assert second == first
    assert blobs.stat(first.handle).origin == "a"


def test_byte_and_line_ranges(blobs: BlobStore) -> None:
    data = "α\nb\r\nc\n\nlast".encode()
    handle = blobs.put(data).handle
    assert blobs.read_bytes(handle) == data
    assert blobs.read_bytes(handle, 1, 3) == data[1:4]
    assert blobs.read_bytes(handle, 100) == b""
    assert blobs.read_lines(handle) == (["α", "b", "c", "", "last"], 5)
    assert blobs.read_lines(handle, 2, 2) == (["b", "c"], 5)
    assert blobs.read_lines(handle, 5, 10) == (["last"], 5)
    assert blobs.read_lines(handle, 6) == ([], 5)
    with pytest.raises(InputError):
        blobs.read_lines(handle, 0)
    with pytest.raises(InputError):
        blobs.read_bytes(handle, -1)


def test_empty_blob(blobs: BlobStore) -> None:
    info = blobs.put(b"")
    assert (info.size, info.lines) == (0, 0)
    assert blobs.get(info.handle) == b""
    assert blobs.read_lines(info.handle) == ([], 0)


def test_unknown_and_malformed_handles(blobs: BlobStore) -> None:
    blobs.put(b"x")
    with pytest.raises(BlobNotFoundError, match="no blob"):
        blobs.get("blob:" + "0" * 16)
    for bad in ("0123456789abcdef", "blob:abc", "blob:zzzzzzzzzzzzzz", "blob:" + "a" * 65):
        with pytest.raises(BlobNotFoundError, match="not a blob handle"):
            blobs.stat(bad)


def test_corrupted_bytes_are_reported_not_served(blobs: BlobStore, backend: str, tmp_path: Path,
                                                request: pytest.FixtureRequest) -> None:
    info = blobs.put(b"precious bytes\n" * 10, origin="e7")
    corrupt_blob(backend, blobs, info.sha256, request)
    for read in (lambda: blobs.get(info.handle), lambda: blobs.read_bytes(info.handle, 0, 5),
                 lambda: blobs.read_lines(info.handle, 1, 1)):
        with pytest.raises(BlobCorruptedError, match="corrupted"):
            read()
    # putting the original bytes again repairs the stored copy
    assert blobs.put(b"precious bytes\n" * 10) == info
    assert blobs.get(info.handle) == b"precious bytes\n" * 10


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300))
def test_any_bytes_roundtrip(blobs: BlobStore, data: bytes) -> None:
    info = blobs.put(data)
    assert blobs.get(info.handle) == data
    assert info.lines == count_lines(data)
    lines, total = blobs.read_lines(info.handle)
    assert total == info.lines == len(lines)


def test_handles_stay_unique_and_stable_when_prefixes_collide(tmp_path: Path) -> None:
    """Two blobs whose hashes share the first 12 hex digits: finding a real pair by brute force is
    too slow, so the second one is planted under a hand-made name."""
    store = FileBlobStore(tmp_path / "blobs")
    first = store.put(b"first")
    digest = first.sha256
    twin = digest[:HANDLE_MIN_HEX] + ("0" if digest[HANDLE_MIN_HEX] != "0" else "1") + "f" * (63 - HANDLE_MIN_HEX)
    folder = store.directory / twin[:2]
    (folder / twin[2:]).write_bytes(b"not really")
    # the handle issued before the collision still names the first blob
    assert store.get(first.handle) == b"first"
    assert store.stat(first.handle).sha256 == digest
    # one more digit names the twin, whose planted bytes do not hash to its name: refused
    with pytest.raises(BlobCorruptedError):
        store.get("blob:" + twin[: HANDLE_MIN_HEX + 1])
    # a new blob whose hash shared the prefix would get a longer handle
    assert shortest_unique_prefix(twin, [digest, twin]) == twin[: HANDLE_MIN_HEX + 1]


def test_files_are_private_and_atomic(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    old = os.umask(0)
    try:
        info = store.put(b"secret")
    finally:
        os.umask(old)
    path = store.directory / info.sha256[:2] / info.sha256[2:]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((path.parent / (path.name + ".json")).stat().st_mode) == 0o600
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]


def test_metadata_lost_in_a_crash_is_recomputed(tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path / "blobs")
    info = store.put(b"a\nb\n", media_type="text/plain", origin="e1")
    (store.directory / info.sha256[:2] / (info.sha256[2:] + ".json")).unlink()
    again = store.stat(info.handle)
    assert (again.handle, again.size, again.lines, again.media_type) == (info.handle, 4, 2, None)


def test_line_range_matches_splitlines_on_newline_only() -> None:
    data = b"a\nb\n"
    assert line_range(data, 1, None) == (["a", "b"], 2)
    assert line_range(b"a", 1, 1) == (["a"], 1)
