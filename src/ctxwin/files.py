"""The one guarded reader for every file ctxwin opens.

Regular files only (a FIFO, a device, a socket or a folder is refused at once, never blocked on), a size
cap on what is read, a cap on what gzip expands to, and a bound on JSON nesting. Everything else in
ctxwin that reads a file someone handed it goes through here, so these limits hold everywhere.

Imports only `ctxwin.errors` and the standard library: this is the bottom layer."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO, Literal

from ctxwin.errors import (
    ArgumentError,
    FileTooLargeError,
    InputError,
    JSONTooDeepError,
    MalformedJSONError,
    NotARegularFileError,
)

DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB: the most ctxwin reads from one file
DEFAULT_MAX_DECOMPRESSED_BYTES = 2 << 30  # 2 GiB: the most a compressed file may expand to
DEFAULT_MAX_JSON_DEPTH = 200  # nesting beyond this is refused before anything recurses on it
READ_CHUNK_BYTES = 1 << 20  # how much is read (or decompressed) per step
GZIP_MAGIC = b"\x1f\x8b"  # the first two bytes of every gzip stream
GZIP_WBITS = 47  # 32 + 15: a gzip or zlib header, the largest window
MAX_DEFLATE_RATIO = 1032  # deflate's best compression: no stream expands more than this

_BRACKET_DELTA = {"[": 1, "{": 1, "]": -1, "}": -1}
# A JSON string, unrolled so the regex engine never backtracks: quote, runs of plain characters and
# escapes, quote. Strings are removed before counting brackets, since brackets inside them do not nest.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_JSON_STRING_BYTES = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NOT_BRACKET_BYTES = re.compile(rb"[^\[\]{}]+")
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # how a surrogate can get into JSON text at all


@dataclass(frozen=True)
class FileLimits:
    """How much ctxwin reads from one file. Callers that read environment or CLI overrides build one of
    these; this module never looks at the environment."""

    max_bytes: int = DEFAULT_MAX_BYTES
    """The most bytes read from the file itself."""
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
    """The most bytes a gzip file may expand to."""
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    """The deepest nesting of arrays and objects accepted in JSON."""
    allow_hard_links: bool = True
    """Read a file with more than one hard link (False for sandboxes: its other names may be outside
    the folder, or secrets; `too_many_links`)."""


BINARY_SNIFF_BYTES = 8192
"""A file whose first this many bytes hold a NUL is binary, not text."""
BINARY_REFUSAL = "it holds binary data (NUL bytes), not text, so it is not read; replace it with a text file"


def is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


def too_many_links(info: os.stat_result, allow_hard_links: bool = False) -> bool:
    """A regular file with more than one hard link, refused by every sandbox (the workspace tools, the
    memory folder): `ln ~/.ssh/id_rsa notes.md` would otherwise read the key through a name inside."""
    return stat.S_ISREG(info.st_mode) and info.st_nlink > 1 and not allow_hard_links


def hard_link_refusal(links: int) -> str:
    return (f"it has {links} hard links, and its other names may be outside the folder or secrets, so it is "
            "not read; keep a copy there instead (cp makes one)")


@dataclass(frozen=True)
class FileBytes:
    """A file's content as read: decompressed if it was gzip, and whether its gzip stream stopped
    early (then `data` is what could be read before the cut)."""

    data: bytes
    compressed: bool
    truncated: bool


def as_path(value: Any, what: str = "a path") -> Path:
    """`value` (a str or an `os.PathLike`) as a Path. Anything else, and the empty path (which would
    quietly be the current folder), is an `ArgumentError` naming `what` was expected."""
    if not isinstance(value, str | os.PathLike):
        raise ArgumentError(f"{what} is a str or a Path, not {type(value).__name__}", "pass a str or a pathlib.Path")
    path = os.fspath(value)
    if not isinstance(path, str):  # an os.PathLike of bytes
        raise ArgumentError(f"{what} is a str or a Path, not a bytes path", "decode it: os.fsdecode(path)")
    if not path:
        raise ArgumentError(f"{what} is empty", "give the path (\".\" for the current folder)")
    if "\0" in path:
        raise ArgumentError(f"{what} holds a NUL character, which no file name can", "check where the path came from")
    return Path(path)


def open_regular(path: str | Path, *, limits: FileLimits = FileLimits()) -> BinaryIO:
    """Open `path` for reading in binary mode, refusing anything that is not a regular file or is over
    `limits.max_bytes`. Never blocks: the open is non-blocking (a FIFO with no writer would otherwise
    hang it) and the type is checked on the open descriptor, so a swap after a check cannot fool it."""
    path = as_path(path, "a file path")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as error:
        raise _open_error(path, error) from error
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFileError(
                f"{path} is {_kind(info.st_mode)}, not a regular file", "give the path of an ordinary file"
            )
        if info.st_size > limits.max_bytes:
            raise _too_large(path, info.st_size, limits.max_bytes, "file size")
        if too_many_links(info, limits.allow_hard_links):
            raise InputError(f"{path}: {hard_link_refusal(info.st_nlink)}")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str | Path, *, limits: FileLimits = FileLimits()) -> FileBytes:
    """The whole file, gzip decompressed, with the fact of a truncated gzip stream reported rather than
    raised (for readers that keep what they can and warn)."""
    path = Path(path)
    with open_regular(path, limits=limits) as handle:
        if not _is_gzip(handle):
            return FileBytes(_read_all(handle, path, limits), False, False)
        if os.fstat(handle.fileno()).st_size * MAX_DEFLATE_RATIO > limits.max_decompressed_bytes:
            # It could expand past the cap: measure first, keeping nothing, so a bomb is refused with
            # memory flat instead of after the cap's worth of output has been collected.
            try:
                for _ in _gunzip_chunks(_chunks(handle, path, limits), path, limits):
                    pass
            except _Truncated:
                pass
            handle.seek(0)
        chunks: list[bytes] = []
        truncated = _gunzip_into(chunks, _chunks(handle, path, limits), path, limits)
        return FileBytes(b"".join(chunks), True, truncated)


def read_bytes(path: str | Path, *, limits: FileLimits = FileLimits()) -> bytes:
    """The whole file, gzip decompressed transparently. A gzip stream that stops early is an
    `InputError`."""
    content = read_file(path, limits=limits)
    if content.truncated:
        raise _truncated(Path(path), len(content.data))
    return content.data


def read_text(path: str | Path, *, limits: FileLimits = FileLimits(),
              errors: Literal["strict", "replace"] = "strict") -> str:
    """The whole file decoded as UTF-8 (a leading byte-order mark dropped). With `errors="strict"`,
    invalid UTF-8 is an `InputError` naming where; with `"replace"`, it becomes U+FFFD."""
    data = read_bytes(path, limits=limits)
    try:
        text = data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise InputError(
            f"{path} is not valid UTF-8 (line {line}, byte {error.start:,})", "save the file as UTF-8"
        ) from error
    return text[1:] if text.startswith("\ufeff") else text


def iter_lines(path: str | Path, *, limits: FileLimits = FileLimits()) -> Iterator[tuple[int, bytes]]:
    """Each line of the file (gzip decompressed) as (1-based line number, bytes without the "\n"; a
    "\r" before it is kept), read a chunk at a time so the whole file is never held at once. A gzip
    stream that stops early raises `InputError` after the lines before the cut have been yielded."""
    path = Path(path)
    with open_regular(path, limits=limits) as handle:
        source = _chunks(handle, path, limits)
        if _is_gzip(handle):
            source = _gunzip_chunks(source, path, limits)
        yield from _split_lines(source)


def loads_json(text: str | bytes, *, max_depth: int = DEFAULT_MAX_JSON_DEPTH) -> Any:
    """`json.loads` that refuses nesting deeper than `max_depth` (`JSONTooDeepError`) before parsing, so
    neither the parser nor anything that walks the result later can run out of stack, and that turns a
    parse failure into `MalformedJSONError` with its position. The depth check costs nothing unless the
    text has more than `max_depth` opening brackets."""
    if _opening_brackets(text) > max_depth:
        depth = json_depth(text)
        if depth > max_depth:
            raise JSONTooDeepError(
                f"JSON nested {depth:,} levels deep, over the limit of {max_depth:,}",
                "flatten the data; nothing ctxwin reads needs that much nesting",
            )
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise MalformedJSONError(error.msg, error.pos, error.lineno, error.colno) from error
    except UnicodeDecodeError as error:
        raise MalformedJSONError(f"invalid UTF-8 ({error.reason})", error.start, 1, error.start + 1) from error
    except RecursionError as error:  # only when max_depth is set above the interpreter's own stack
        raise JSONTooDeepError(
            "JSON nested deeper than Python's recursion limit", "flatten the data or lower the depth limit"
        ) from error


def json_depth(text: str | bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text (brackets inside strings do not count).
    Linear and C-speed apart from one pass over the brackets themselves."""
    if isinstance(text, bytes):
        brackets = _NOT_BRACKET_BYTES.sub(b"", _JSON_STRING_BYTES.sub(b"", text)).decode("ascii")
    else:
        brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if not brackets:
        return 0
    return max(0, max(accumulate(map(_BRACKET_DELTA.__getitem__, brackets))))


def may_hold_surrogates(text: str | bytes) -> bool:
    """Whether JSON text could decode to a string holding a lone UTF-16 surrogate: only a `\\uD800`-
    `\\uDFFF` escape can put one there. A cheap test before walking a parsed value."""
    if isinstance(text, bytes):
        return re.search(rb"\\u[dD][89a-fA-F]", text) is not None
    return _SURROGATE_ESCAPE.search(text) is not None


def replace_surrogates(value: Any) -> tuple[Any, int]:
    """`value` (parsed JSON) with every lone UTF-16 surrogate in its strings (keys included) replaced by
    U+FFFD, and how many were replaced. No provider accepts them: encoding one to UTF-8 fails. Walks the
    value with an explicit stack, so depth is no risk."""
    count = 0

    def fix(item: Any) -> Any:
        nonlocal count
        if isinstance(item, str):
            fixed, n = _SURROGATE.subn("\ufffd", item)
            count += n
            return fixed
        return item

    root: list[Any] = [value]
    stack: list[tuple[Any, Any]] = [(root, 0)]
    while stack:
        container, key = stack.pop()
        item = container[key]
        if isinstance(item, str):
            container[key] = fix(item)
        elif isinstance(item, list):
            stack.extend((item, index) for index in range(len(item)))
        elif isinstance(item, dict):
            if any(isinstance(k, str) and _SURROGATE.search(k) for k in item):
                renamed = {fix(k): v for k, v in item.items()}
                item.clear()
                item.update(renamed)
            stack.extend((item, k) for k in item)
    return root[0], count


def _opening_brackets(text: str | bytes) -> int:
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{")
    return text.count("[") + text.count("{")


def _is_gzip(handle: BinaryIO) -> bool:
    head: bytes = handle.peek(len(GZIP_MAGIC))  # type: ignore[attr-defined]  # a BufferedReader's
    return head[: len(GZIP_MAGIC)] == GZIP_MAGIC


def _read_all(handle: BinaryIO, path: Path, limits: FileLimits) -> bytes:
    """The file in one read sized by `fstat` (one buffer, no joining of chunks, so a big file costs its
    size once), then chunks, capped, if it grew meanwhile."""
    size = min(os.fstat(handle.fileno()).st_size, limits.max_bytes)
    data = handle.read(size + 1)
    if len(data) <= size:
        return data
    return b"".join(_chunks(handle, path, limits, data))


def _chunks(handle: BinaryIO, path: Path, limits: FileLimits, head: bytes = b"") -> Iterator[bytes]:
    """The file's bytes a chunk at a time. The file may have grown since `fstat`, so the cap is checked
    on what is actually read too."""
    total = len(head)
    if head:
        yield head
    while chunk := handle.read(READ_CHUNK_BYTES):
        total += len(chunk)
        if total > limits.max_bytes:
            raise _too_large(path, None, limits.max_bytes, "file size")
        yield chunk


def _gunzip_chunks(raw: Iterator[bytes], path: Path, limits: FileLimits) -> Iterator[bytes]:
    """Decompressed output, chunk by chunk, of every gzip member in `raw`. Output is produced a bounded
    chunk at a time and stops with `FileTooLargeError` as soon as it passes the cap, so a bomb never
    expands in memory; a stream that stops early raises the truncation `InputError` at the end."""
    produced = 0
    decompressor = zlib.decompressobj(wbits=GZIP_WBITS)
    started = False  # whether the current member has begun (a fresh one after the last member has not)
    for pending in raw:
        while pending:
            if decompressor.eof:  # the previous member ended: the rest may be another member
                if not pending.strip(b"\x00"):  # or padding after the last one
                    break
                decompressor = zlib.decompressobj(wbits=GZIP_WBITS)
            started = True
            try:
                out = decompressor.decompress(pending, READ_CHUNK_BYTES)
            except zlib.error as error:
                raise InputError(
                    f"{path} is not a readable gzip file ({error})", "check the file, or give it uncompressed"
                ) from error
            pending = decompressor.unused_data if decompressor.eof else decompressor.unconsumed_tail
            produced += len(out)
            if produced > limits.max_decompressed_bytes:
                raise _too_large(path, None, limits.max_decompressed_bytes, "decompressed size")
            if out:
                yield out
        if decompressor.eof:
            started = False
    if started and not decompressor.eof:
        raise _truncated(path, produced)


def _gunzip_into(out: list[bytes], raw: Iterator[bytes], path: Path, limits: FileLimits) -> bool:
    """Collect decompressed chunks into `out`; True when the stream stopped early."""
    try:
        for chunk in _gunzip_chunks(raw, path, limits):
            out.append(chunk)
    except _Truncated:
        return True
    return False


def _split_lines(chunks: Iterator[bytes]) -> Iterator[tuple[int, bytes]]:
    number = 0
    rest = b""
    for chunk in chunks:
        parts = (rest + chunk).split(b"\n") if rest else chunk.split(b"\n")
        rest = parts.pop()
        for line in parts:
            number += 1
            yield number, line
    if rest:
        yield number + 1, rest


class _Truncated(InputError):
    """A gzip stream that stops before its end (an `InputError` to callers of `read_bytes`)."""


def _truncated(path: Path, produced: int) -> InputError:
    return _Truncated(
        f"{path} is a truncated gzip file: the stream stops after {produced:,} decompressed bytes",
        "copy the file again, or decompress what is there with `zcat` and give that",
    )


def _too_large(path: Path, size: int | None, cap: int, what: str) -> FileTooLargeError:
    actual = f" ({size:,} bytes)" if size is not None else ""
    setting, variable = ("max_bytes", "CTXWIN_MAX_FILE_BYTES") if what == "file size" else \
        ("max_decompressed_bytes", "CTXWIN_MAX_DECOMPRESSED_BYTES")
    return FileTooLargeError(
        f"{path} is over the {what} cap of {cap:,} bytes{actual}",
        f"if the file is genuine, raise the cap: {variable}=<bytes> for the CLI, FileLimits.{setting} in the library",
    )


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _open_error(path: Path, error: OSError) -> InputError:
    if error.errno == errno.ENOENT:
        return InputError(f"no such file: {path}", "check the path")
    if error.errno in (errno.EACCES, errno.EPERM):
        return InputError(f"permission denied reading {path}", "check the file's permissions")
    if error.errno == errno.ENXIO:  # a socket, or a FIFO/device that cannot be opened this way
        return NotARegularFileError(f"{path} is not a regular file", "give the path of an ordinary file")
    if error.errno == errno.ENOTDIR:
        return InputError(f"no such file: {path} (a part of the path is not a directory)", "check the path")
    if error.errno == errno.ELOOP:
        return InputError(f"{path} is a symlink loop", "check the path")
    return InputError(f"cannot read {path}: {error.strerror or error}", "check the path and the disk")
