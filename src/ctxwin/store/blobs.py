"""Content-addressed blobs on disk, and the pure helpers every blob store shares (handles, line
counts, line and byte ranges).

Layout of a `FileBlobStore` directory (mode 0700, files 0600):

    <dir>/<first 2 hex>/<remaining 62 hex>          the bytes, exactly as given to `put`
    <dir>/<first 2 hex>/<remaining 62 hex>.json     metadata: size, lines, media type, origin, handle

Writes are atomic (temp file in the same folder, fsync, rename, fsync of the folder), so a crash
leaves either the old state or the new one, never a half-written blob. Every read hashes the bytes
and refuses to serve them when they no longer match their name.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, BinaryIO

from ctxwin.errors import FileTooLargeError, InputError, NotARegularFileError
from ctxwin.files import READ_CHUNK_BYTES, FileLimits, open_regular
from ctxwin.store.base import BlobCorruptedError, BlobInfo, BlobNotFoundError

HANDLE_PREFIX = "blob:"  # every handle starts with this
HANDLE_MIN_HEX = 12  # shortest hash prefix a handle uses (48 bits: collisions are vanishingly rare)
SHA256_HEX = 64  # length of a full sha256 in hex
FILE_MODE = 0o600  # blob and metadata files: readable by their owner only
DIR_MODE = 0o700  # blob folders
_HEX = frozenset("0123456789abcdef")
META_MAX_BYTES = 64 * 1024  # a blob's metadata file is a few hundred bytes; more is not ours
UNSIZED_BLOB_MAX_BYTES = FileLimits().max_bytes  # read cap for a blob whose recorded size is lost
_META_SUFFIX = ".json"
_TMP_PREFIX = ".tmp-"


# --------------------------------------------------------------------------------------------------
# Pure helpers (shared with the PostgreSQL blob store)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def count_lines(data: bytes) -> int:
    """Lines as an editor counts them: a final line without a newline still counts; empty is 0."""
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def parse_handle(handle: str) -> str:
    """The lowercase hex prefix inside `blob:<hex>`, or an `InputError` saying what a handle is."""
    if not isinstance(handle, str) or not handle.startswith(HANDLE_PREFIX):
        raise BlobNotFoundError(
            f"not a blob handle: {handle!r}",
            f"handles look like {HANDLE_PREFIX}<at least {HANDLE_MIN_HEX} hex digits of the sha256>",
        )
    hex_part = handle[len(HANDLE_PREFIX):].strip().lower()
    if not (HANDLE_MIN_HEX <= len(hex_part) <= SHA256_HEX) or not set(hex_part) <= _HEX:
        raise BlobNotFoundError(
            f"not a blob handle: {handle!r}",
            f"handles look like {HANDLE_PREFIX}<{HANDLE_MIN_HEX} to {SHA256_HEX} hex digits of the sha256>",
        )
    return hex_part


def shortest_unique_prefix(digest: str, others: list[str]) -> str:
    """The shortest prefix of `digest` (at least HANDLE_MIN_HEX long) that no other digest starts with."""
    length = HANDLE_MIN_HEX
    while length < SHA256_HEX and any(o != digest and o.startswith(digest[:length]) for o in others):
        length += 1
    return digest[:length]


def choose_match(handle: str, prefix: str, matches: list[tuple[str, str | None]]) -> str:
    """Resolves a prefix among the digests that start with it. `matches` holds (digest, handle issued
    at put time). A handle once issued keeps naming its blob even after a later blob shares its
    prefix: the blob it was issued for wins."""
    if not matches:
        raise BlobNotFoundError(f"no blob {handle} in this store", "check the handle (it comes from put or a spill)")
    if len(matches) == 1:
        return matches[0][0]
    issued = [digest for digest, issued_handle in matches if issued_handle == HANDLE_PREFIX + prefix]
    if len(issued) == 1:
        return issued[0]
    raise InputError(
        f"blob handle {handle} is ambiguous: {len(matches)} blobs start with {prefix}",
        "give more hex digits of the sha256",
    )


def verify(handle: str, digest: str, data: bytes, where: str) -> bytes:
    """`data` if it hashes to `digest`; otherwise a `BlobCorruptedError` (the bytes are not served)."""
    actual = sha256_hex(data)
    if actual != digest:
        raise BlobCorruptedError(
            f"blob {handle} is corrupted: its stored bytes ({where}) hash to {actual[:16]}…, not {digest[:16]}…",
            "the stored copy was modified or damaged; put the original bytes again to repair it",
        )
    return data


def byte_range(data: bytes, offset: int, limit: int | None) -> bytes:
    if offset < 0 or (limit is not None and limit < 0):
        raise InputError(f"bad byte range: offset={offset}, limit={limit}", "offset and limit must be >= 0")
    return data[offset:] if limit is None else data[offset : offset + limit]


def line_range(data: bytes, offset: int, limit: int | None) -> tuple[list[str], int]:
    """Lines `offset` (1-based) .. `offset + limit - 1` without their line endings (\\n or \\r\\n),
    decoded as UTF-8 (undecodable bytes become U+FFFD), and the total line count."""
    if offset < 1 or (limit is not None and limit < 0):
        raise InputError(f"bad line range: offset={offset}, limit={limit}", "offset starts at 1; limit must be >= 0")
    total = count_lines(data)
    if offset > total or limit == 0:
        return [], total
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    chosen = lines[offset - 1 :] if limit is None else lines[offset - 1 : offset - 1 + limit]
    return [line.removesuffix(b"\r").decode("utf-8", errors="replace") for line in chosen], total


def info_to_dict(info: BlobInfo) -> dict[str, Any]:
    return asdict(info)


def info_from_dict(data: dict[str, Any]) -> BlobInfo:
    return BlobInfo(
        handle=str(data["handle"]),
        sha256=str(data["sha256"]),
        size=int(data["size"]),
        lines=int(data["lines"]),
        media_type=data.get("media_type"),
        origin=data.get("origin"),
    )


# --------------------------------------------------------------------------------------------------
# The store's own files: opened guarded, written atomically


def open_store_file(path: Path, max_bytes: int) -> BinaryIO:
    """A file of the store, for reading: a regular file named by `path` itself, at most `max_bytes`.
    A FIFO, a device or a folder is refused without blocking (`open_regular`), and so is a symbolic
    link: the store never makes one, and one there would serve bytes from outside the store (or
    /dev/zero). Raises NotARegularFileError or FileTooLargeError (both InputError)."""
    try:
        named = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}", "check the store's permissions") from None
    if stat.S_ISLNK(named.st_mode):
        raise NotARegularFileError(f"{path} is a symbolic link; a ctxwin store holds regular files only",
                                   "replace the link with the file it points to, or remove it")
    handle = open_regular(path, limits=FileLimits(max_bytes=max_bytes))
    opened = os.fstat(handle.fileno())
    if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
        handle.close()  # swapped between the look and the open: whatever it is now, it is not what we checked
        raise NotARegularFileError(f"{path} changed while it was being opened", "try again")
    return handle


def read_store_file(path: Path, max_bytes: int) -> bytes:
    """The whole of a store file (see `open_store_file`), never more than `max_bytes`, even if it grows
    while being read."""
    with open_store_file(path, max_bytes) as handle:
        # One read sized by fstat, never by the cap: `read(cap + 1)` allocates the whole cap up front
        # (4 GiB for the index), which a memory limit refuses. Not `ctxwin.files.read_bytes`: it
        # decompresses gzip, and a blob that is a gzip file must come back as its own bytes.
        size = min(os.fstat(handle.fileno()).st_size, max_bytes)
        chunks = [handle.read(size + 1)]
        total = len(chunks[0])
        while size < total <= max_bytes and (chunk := handle.read(min(READ_CHUNK_BYTES, max_bytes + 1 - total))):
            chunks.append(chunk)  # it grew since fstat: read on, a chunk at a time, up to the cap
            total += len(chunk)
    if total > max_bytes:
        raise FileTooLargeError(f"{path} grew past {max_bytes:,} bytes while being read", "it is not ctxwin's file")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


# --------------------------------------------------------------------------------------------------
# Atomic file writes


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Writes `path` so that readers and crashes see either the old file or all of `data`: a temp
    file in the same folder, fsync, rename over `path`, fsync of the folder."""
    tmp = path.with_name(f"{_TMP_PREFIX}{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # the umask must not widen or narrow what we promise
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


# --------------------------------------------------------------------------------------------------
# The store


class BlobReads:
    """Ranges and membership over `get` and `stat`, the same for every blob store."""

    get: Callable[[str], bytes]
    stat: Callable[[str], BlobInfo]

    def read_bytes(self, handle: str, offset: int = 0, limit: int | None = None) -> bytes:
        return byte_range(self.get(handle), offset, limit)

    def read_lines(self, handle: str, offset: int = 1, limit: int | None = None) -> tuple[list[str], int]:
        return line_range(self.get(handle), offset, limit)

    def __contains__(self, handle: object) -> bool:
        try:
            self.stat(str(handle))
        except (BlobNotFoundError, InputError):
            return False
        return True


class FileBlobStore(BlobReads):
    """A `BlobStore` in a folder. Safe to share between processes: writes are atomic renames of
    content-addressed names, so two processes putting the same bytes write the same file."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    # ---- paths

    def _data_path(self, digest: str) -> Path:
        return self.directory / digest[:2] / digest[2:]

    def _meta_path(self, digest: str) -> Path:
        return self.directory / digest[:2] / (digest[2:] + _META_SUFFIX)

    def _digests_with_prefix(self, prefix: str) -> list[str]:
        folder = self.directory / prefix[:2]
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        rest = prefix[2:]
        return [prefix[:2] + n for n in names if len(n) == SHA256_HEX - 2 and n.startswith(rest) and set(n) <= _HEX]

    def _resolve(self, handle: str) -> str:
        prefix = parse_handle(handle)
        digests = self._digests_with_prefix(prefix)
        matches = [(d, self._read_meta(d).handle if len(digests) > 1 else None) for d in digests]
        return choose_match(handle, prefix, matches)

    def _read_meta(self, digest: str) -> BlobInfo:
        info = self._meta_if_present(digest)
        if info is not None:
            return info
        # A crash between the two renames, or a damaged metadata file: the bytes are the truth,
        # so the facts that follow from them are recomputed; media type and origin are unknown.
        data = self._read_data(HANDLE_PREFIX + digest, digest, UNSIZED_BLOB_MAX_BYTES)
        prefix = shortest_unique_prefix(digest, self._digests_with_prefix(digest[:HANDLE_MIN_HEX]))
        return BlobInfo(HANDLE_PREFIX + prefix, digest, len(data), count_lines(data))

    def _read_data(self, handle: str, digest: str, max_bytes: int) -> bytes:
        """The stored bytes, unverified, refusing anything but a regular file of at most `max_bytes`
        (the recorded size: a blob file larger than that is corrupt, and is not read)."""
        path = self._data_path(digest)
        try:
            if stat.S_ISLNK(os.lstat(path.parent).st_mode):
                raise NotARegularFileError(f"{path.parent} is a symbolic link", "a ctxwin store holds no links")
            return read_store_file(path, max_bytes)
        except FileNotFoundError:
            raise BlobNotFoundError(f"no blob {handle} in this store", "check the handle") from None
        except FileTooLargeError:
            raise BlobCorruptedError(f"blob {handle} is corrupted: {path} is larger than its recorded size "
                                     f"({max_bytes:,} bytes)", "put the original bytes again to repair it") from None
        except InputError as error:
            raise BlobCorruptedError(f"blob {handle} is corrupted: {error.message}",
                                     "put the original bytes again to repair it") from None

    def _read_verified(self, handle: str) -> tuple[str, bytes]:
        digest = self._resolve(handle)
        size = self._read_meta(digest).size
        path = self._data_path(digest)
        return digest, verify(handle, digest, self._read_data(handle, digest, size), str(path))

    # ---- BlobStore

    def put(self, data: bytes, *, media_type: str | None = None, origin: str | None = None) -> BlobInfo:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InputError(f"blob data must be bytes, not {type(data).__name__}", "encode text first")
        data = bytes(data)
        digest = sha256_hex(data)
        path = self._data_path(digest)
        if os.path.lexists(path):
            try:
                verify("", digest, self._read_data("", digest, len(data)), str(path))
                return self._read_meta(digest)
            except (BlobCorruptedError, BlobNotFoundError):
                pass  # the same bytes again: rewriting them below repairs the damaged copy (or the link, or FIFO)
        path.parent.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        info = self._meta_if_present(digest)
        if info is None:
            prefix = shortest_unique_prefix(digest, self._digests_with_prefix(digest[:HANDLE_MIN_HEX]))
            info = BlobInfo(HANDLE_PREFIX + prefix, digest, len(data), count_lines(data), media_type, origin)
            # Metadata first: once the bytes exist under their name, their metadata already does.
            write_atomic(self._meta_path(digest), json.dumps(info_to_dict(info)).encode())
        write_atomic(path, data)
        return info

    def _meta_if_present(self, digest: str) -> BlobInfo | None:
        try:
            info = info_from_dict(json.loads(read_store_file(self._meta_path(digest), META_MAX_BYTES)))
        except (FileNotFoundError, InputError, ValueError, KeyError, TypeError, RecursionError):
            return None
        return info if info.sha256 == digest and info.size >= 0 else None

    def get(self, handle: str) -> bytes:
        return self._read_verified(handle)[1]

    def stat(self, handle: str) -> BlobInfo:
        digest = self._resolve(handle)
        if not os.path.lexists(self._data_path(digest)):
            raise BlobNotFoundError(f"no blob {handle} in this store", "check the handle")
        return self._read_meta(digest)

    # ---- extras

    def infos(self) -> list[BlobInfo]:
        """Every blob in the store (metadata only, unverified), sorted by sha256."""
        if not self.directory.exists():
            return []
        digests = sorted(
            folder.name + name
            for folder in self.directory.iterdir()
            if folder.is_dir() and len(folder.name) == 2
            for name in os.listdir(folder)
            if len(name) == SHA256_HEX - 2 and set(name) <= _HEX
        )
        return [self._read_meta(d) for d in digests]
