"""The pure core every session-log backend shares: entry encoding and validation, ids, timestamps,
and the path of a leaf computed from *jumps*.

Entries are numbered in append order (`seq` 0, 1, 2, …). Most entries hang under the entry appended
just before them (`parent_seq == seq - 1`); the others (a branch, a second root, an orphan whose parent
is lost) are *jumps*. Knowing only the jumps, the path from any leaf to the root is a short list of
seq ranges: walk down from the leaf until the nearest jump at or below it, then hop to its parent.
So a 100,000-entry session gives its newest path in microseconds, and `EntryPath` reads the entries
of those ranges only when they are looked at.
"""

from __future__ import annotations

import bisect
import json
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, get_args, overload

from ctxwin.errors import InputError
from ctxwin.store.base import Entry, EntryKind

ENTRY_KINDS: frozenset[str] = frozenset(get_args(EntryKind))
ID_BYTES = 4  # entry ids are 8 hex digits; uniqueness within a session is checked on append
ID_ATTEMPTS = 64  # fresh ids tried before giving up (a full 32-bit space would be needed to fail)
CHUNK = 512  # entries an EntryPath reads at once
ROOT = -1  # parent_seq of an entry with no parent
MISSING = -2  # parent_seq of an entry whose parent is not in the log (its line was lost)


class EntryFormatError(ValueError):
    """A line or row that is not a valid entry (the message says why)."""


def now_timestamp() -> str:
    """UTC, ISO 8601 with microseconds and a Z: sortable as text."""
    return datetime.now(UTC).isoformat(timespec="microseconds")[:-6] + "Z"


def new_id(taken: Callable[[str], bool]) -> str:
    for _ in range(ID_ATTEMPTS):
        candidate = secrets.token_hex(ID_BYTES)
        if not taken(candidate):
            return candidate
    raise RuntimeError("could not find a free entry id")  # only if 2**32 ids were nearly all taken


def check_append(kind: str, payload: Any) -> None:
    if kind not in ENTRY_KINDS:
        raise InputError(f"unknown entry kind {kind!r}", f"use one of: {', '.join(sorted(ENTRY_KINDS))}")
    if not isinstance(payload, dict):
        raise InputError(f"an entry payload must be a dict, not {type(payload).__name__}")


def entry_to_dict(entry: Entry) -> dict[str, Any]:
    return {"id": entry.id, "parent_id": entry.parent_id, "kind": entry.kind, "timestamp": entry.timestamp,
            "payload": entry.payload}


# Built once: json.dumps with options builds a new encoder on every call.
_UTF8_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ASCII_JSON = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def dumps(data: Any) -> str:
    """Compact JSON, UTF-8 where possible; text holding lone surrogates (which UTF-8 cannot carry) is
    written with \\u escapes instead, so every line stays valid UTF-8 and round-trips exactly."""
    return encode_line(data).decode("utf-8")


def encode_line(data: Any) -> bytes:
    """`data` as compact JSON in UTF-8 bytes (see `dumps`)."""
    try:
        return _UTF8_JSON.encode(data).encode("utf-8")
    except UnicodeEncodeError:
        return _ASCII_JSON.encode(data).encode("utf-8")


def encode_entry(entry: Entry) -> bytes:
    """One JSONL line, newline included. Raises InputError for payloads JSON cannot hold."""
    try:
        return encode_line(entry_to_dict(entry)) + b"\n"
    except (TypeError, ValueError) as error:
        raise InputError(f"entry payload is not JSON: {error}", "payloads hold plain JSON data only") from None


def entry_from_dict(data: Any) -> Entry:
    """Validates the shape of a decoded entry; raises EntryFormatError saying what is wrong."""
    if not isinstance(data, dict):
        raise EntryFormatError(f"expected a JSON object, got {type(data).__name__}")
    entry_id, parent_id, kind = data.get("id"), data.get("parent_id"), data.get("kind")
    timestamp, payload = data.get("timestamp"), data.get("payload")
    if not isinstance(entry_id, str) or not entry_id:
        raise EntryFormatError("missing or empty 'id'")
    if parent_id is not None and not isinstance(parent_id, str):
        raise EntryFormatError("'parent_id' is neither a string nor null")
    if kind not in ENTRY_KINDS:
        raise EntryFormatError(f"unknown kind {kind!r}")
    if not isinstance(timestamp, str):
        raise EntryFormatError("missing 'timestamp'")
    if not isinstance(payload, dict):
        raise EntryFormatError("'payload' is not an object")
    return Entry(id=entry_id, parent_id=parent_id, kind=kind, timestamp=timestamp, payload=payload)


def decode_entry(line: bytes | str) -> Entry:
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError) as error:
        raise EntryFormatError(f"not JSON ({error})") from None
    return entry_from_dict(data)


# --------------------------------------------------------------------------------------------------
# Paths


@dataclass
class Jumps:
    """The entries whose parent is not the entry appended just before them, by seq (ascending)."""

    seqs: list[int]
    parents: list[int]

    def add(self, seq: int, parent_seq: int) -> None:
        if parent_seq != seq - 1:
            self.seqs.append(seq)
            self.parents.append(parent_seq)


def path_ranges(jumps: Jumps, leaf_seq: int) -> list[tuple[int, int]]:
    """The path from the root to `leaf_seq` as inclusive seq ranges, root first. Stops at a parent
    that is missing from the log (the caller reports those)."""
    ranges: list[tuple[int, int]] = []
    seq = leaf_seq
    while seq >= 0:
        at = bisect.bisect_right(jumps.seqs, seq) - 1
        if at < 0:  # contiguous all the way down to the first entry, which has no parent
            ranges.append((0, seq))
            break
        ranges.append((jumps.seqs[at], seq))
        seq = jumps.parents[at]
    ranges.reverse()
    return ranges


class EntryPath(Sequence[Entry]):
    """The entries of a path, root first, read in chunks when first looked at. Behaves as a
    read-only list (len, index, slice, iterate, compare with a list); `len` and `seqs` need no reads."""

    def __init__(self, ranges: list[tuple[int, int]], load: Callable[[int, int], list[Entry]]) -> None:
        self._ranges = ranges
        self._load = load  # entries with seq in [first, last], in seq order
        self._starts: list[int] = []
        total = 0
        for first, last in ranges:
            self._starts.append(total)
            total += last - first + 1
        self._len = total
        self._chunks: dict[int, list[Entry]] = {}

    def __len__(self) -> int:
        return self._len

    @property
    def seqs(self) -> Iterator[int]:
        for first, last in self._ranges:
            yield from range(first, last + 1)

    def _entry(self, index: int) -> Entry:
        chunk = index // CHUNK
        if chunk not in self._chunks:
            first, last = chunk * CHUNK, min(self._len, (chunk + 1) * CHUNK) - 1
            entries: list[Entry] = []
            # a chunk may straddle ranges: load each contiguous piece
            position = first
            while position <= last:
                at = bisect.bisect_right(self._starts, position) - 1
                range_first, range_last = self._ranges[at]
                start_seq = range_first + position - self._starts[at]
                end_seq = min(range_last, start_seq + last - position)
                entries.extend(self._load(start_seq, end_seq))
                position += end_seq - start_seq + 1
            self._chunks[chunk] = entries
        return self._chunks[chunk][index % CHUNK]

    @overload
    def __getitem__(self, index: int) -> Entry: ...

    @overload
    def __getitem__(self, index: slice) -> list[Entry]: ...

    def __getitem__(self, index: int | slice) -> Entry | list[Entry]:
        if isinstance(index, slice):
            return [self._entry(i) for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("path index out of range")
        return self._entry(index)

    def __iter__(self) -> Iterator[Entry]:
        for index in range(self._len):
            yield self._entry(index)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"EntryPath({self._len} entries in {len(self._ranges)} ranges)"


class TreeReads:
    """Reading a session log, the same for every backend: a backend keeps `_leaf` ((seq, id) or
    None), `_jumps`, `_count` and `_chunk`, and provides `_check_open`, `_seq_of` and `_load`."""

    _leaf: tuple[int, str] | None
    _jumps: Jumps
    _count: int
    _chunk: int
    _check_open: Callable[[], None]
    _seq_of: Callable[[str], int]
    _load: Callable[[int, int], list[Entry]]

    def get(self, entry_id: str) -> Entry:
        self._check_open()
        seq = self._seq_of(entry_id)
        return self._load(seq, seq)[0]

    def path(self, leaf_id: str | None = None) -> EntryPath:
        """Root-first entries from the root to `leaf_id` (default: the current leaf). The result is a
        lazy sequence: entries are read when looked at."""
        self._check_open()
        if leaf_id is None:
            if self._leaf is None:
                return EntryPath([], self._load)
            seq = self._leaf[0]
        else:
            seq = self._seq_of(leaf_id)
        return EntryPath(path_ranges(self._jumps, seq), self._load)

    def __iter__(self) -> Iterator[Entry]:
        """Every entry in append order."""
        return self.entries()

    def entries(self, start: int = 0, stop: int | None = None) -> Iterator[Entry]:
        """Entries by position in append order, `start` to `stop` (exclusive): a consumer that has seen
        the first N reads only what came after."""
        self._check_open()
        stop = self._count if stop is None else min(stop, self._count)
        for first in range(max(0, start), stop, self._chunk):
            yield from self._load(first, min(stop, first + self._chunk) - 1)
