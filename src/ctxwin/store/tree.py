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
import math
import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, get_args, overload

from ctxwin.errors import CtxwinError, EntryFormatError, InputError
from ctxwin.messages import Message, message_problem
from ctxwin.store.base import Entry, EntryKind

ENTRY_KINDS: frozenset[str] = frozenset(get_args(EntryKind))
ID_BYTES = 4  # entry ids are 8 hex digits; uniqueness within a session is checked on append
ID_ATTEMPTS = 64  # fresh ids tried before giving up (a full 32-bit space would be needed to fail)
CHUNK = 512  # entries an EntryPath reads at once
ROOT = -1  # parent_seq of an entry with no parent (an orphan is re-attached, never left dangling)


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
    problem = message_shape_problem(kind, payload)
    if problem is not None:
        raise InputError(f"a message entry's payload is not a message: {problem}",
                         "append Message.to_dict() (or pass the Message to the engine)")


def message_shape_problem(kind: str, payload: dict[str, Any]) -> str | None:
    """The append-time check, cheap enough for every append: a `message` payload carrying message
    fields is what `Message.from_dict` reads (`ctxwin.messages.message_problem`). What comes from
    ctxwin's own `Message.to_dict()` always passes; the full parse (`payload_problem`) runs where
    damage can come from outside: on open, rebuild and load."""
    if kind != "message" or ("role" not in payload and "blocks" not in payload):
        return None
    return message_problem(payload)


def payload_problem(kind: str, payload: dict[str, Any]) -> str | None:
    """Why the payload of a `kind` entry cannot be read back as what it claims to be, or None. A
    `message` payload that carries message fields (`role`, `blocks`) must parse with
    `Message.from_dict`; one with neither is opaque data this check leaves alone."""
    if kind != "message" or ("role" not in payload and "blocks" not in payload):
        return None
    try:
        Message.from_dict(payload)
    except (CtxwinError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as error:
        # the message model signals a bad shape with whatever its parsing trips over
        return str(error) or type(error).__name__
    return None


def entry_to_dict(entry: Entry) -> dict[str, Any]:
    return {"id": entry.id, "parent_id": entry.parent_id, "kind": entry.kind, "timestamp": entry.timestamp,
            "payload": entry.payload}


# Built once: json.dumps with options builds a new encoder on every call. NaN and infinities are
# refused: they are not JSON, and other readers of the log (PostgreSQL's json, jq, JavaScript) reject them.
_UTF8_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_ASCII_JSON = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def dumps(data: Any, what: str = "value") -> str:
    """Compact JSON, UTF-8 where possible; text holding lone surrogates (which UTF-8 cannot carry) is
    written with \\u escapes instead, so every line stays valid UTF-8 and round-trips exactly.
    Raises InputError for data JSON cannot hold, naming the field (`what` names the root)."""
    return encode_line(data, what).decode("utf-8")


def encode_line(data: Any, what: str = "value") -> bytes:
    """`data` as compact JSON in UTF-8 bytes (see `dumps`)."""
    try:
        try:
            return _UTF8_JSON.encode(data).encode("utf-8")
        except UnicodeEncodeError:
            return _ASCII_JSON.encode(data).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as error:
        raise _not_json(data, what, error) from None


def _not_json(data: Any, what: str, error: Exception) -> InputError:
    field, value = _first_non_json(data, what)
    if isinstance(value, float):
        return InputError(f"{field} is {value!r}, not JSON (JSON has no NaN or infinity)",
                          "replace it with null, a finite number or a string before appending")
    if field is not None:
        return InputError(f"{field} is not JSON (a Python {type(value).__name__})",
                          "payloads hold plain JSON data only: dict, list, str, int, float, bool, None")
    if isinstance(error, RecursionError):
        return InputError(f"{what} is not JSON it can write: nested too deeply", "flatten the data")
    return InputError(f"{what} is not JSON: {error}", "payloads hold plain JSON data only")


def _first_non_json(data: Any, root: str) -> tuple[str | None, Any]:
    """The path (like `payload.blocks[0].arguments.x`) and value of the first thing in `data` JSON
    cannot hold: a NaN or infinity, a key that is not a string, or an object of another type. Walks
    with an explicit stack, so depth is no risk; runs only after encoding has already failed."""
    stack: list[tuple[str, Any]] = [(root, data)]
    seen: set[int] = set()
    while stack:
        path, value = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                return path, value
        elif isinstance(value, dict):
            if id(value) in seen:
                continue  # looked at already (shared, or a cycle: the encoder's own message names those)
            seen.add(id(value))
            for key in reversed(list(value)):
                if not isinstance(key, str | int | float | bool) and key is not None:
                    return f"{path} key {key!r}", key
                stack.append((f"{path}.{key}" if isinstance(key, str) and key.isidentifier() else f"{path}[{key!r}]",
                              value[key]))
        elif isinstance(value, list | tuple):
            if id(value) in seen:
                continue
            seen.add(id(value))
            stack.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))
        elif not isinstance(value, str | int | bool) and value is not None:
            return path, value
    return None, None


def encode_entry(entry: Entry) -> bytes:
    """One JSONL line, newline included. Raises InputError for payloads JSON cannot hold, naming the
    field (`payload.…`, as the PostgreSQL backend does)."""
    try:
        return encode_line(entry_to_dict(entry)) + b"\n"
    except InputError as error:
        # only the payload can hold what JSON cannot (id, kind and timestamp are ours): name it from there
        raise _not_json(entry.payload, "payload", error) from None


def entry_from_dict(data: Any) -> Entry:
    """Validates the shape of a decoded entry; raises EntryFormatError saying what is wrong."""
    if not isinstance(data, dict):
        raise EntryFormatError(f"expected a JSON object, got {type(data).__name__}")
    entry_id, parent_id, kind = data.get("id"), data.get("parent_id"), data.get("kind")
    timestamp, payload = data.get("timestamp"), data.get("payload")
    if not isinstance(entry_id, str) or not entry_id:
        raise EntryFormatError("missing or empty 'id'")
    if "parent_id" not in data:
        # every writer writes it (null for a root): without it, a damaged entry would pass for a root
        raise EntryFormatError("missing 'parent_id'")
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
    except RecursionError:
        raise EntryFormatError("not JSON (nested too deeply)") from None
    return entry_from_dict(data)


# Writers put "id" and "parent_id" first, so they usually survive a cut or a flipped byte further on.
_HEAD = re.compile(rb'\A\s*\{\s*"id"\s*:\s*"([^"\\]{1,128})"\s*,\s*"parent_id"\s*:\s*(?:null|"([^"\\]{1,128})")\s*[,}]')
_HEAD_ID = re.compile(rb'\A\s*\{\s*"id"\s*:\s*"([^"\\]{1,128})"')


def salvage_head(raw: bytes) -> tuple[str | None, str | None, bool]:
    """From a line that is not a valid entry: its id, its parent id, and whether the parent is known
    (a root's parent is known to be None). Used to re-attach the damaged entry's children."""
    head = _HEAD.match(raw)
    if head is not None:
        parent = head.group(2)
        return (head.group(1).decode("utf-8", "replace"), None if parent is None else parent.decode("utf-8", "replace"),
                True)
    only_id = _HEAD_ID.match(raw)
    return (None if only_id is None else only_id.group(1).decode("utf-8", "replace")), None, False


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
    """The path from the root to `leaf_seq` as inclusive seq ranges, root first."""
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

    __hash__ = None  # type: ignore[assignment]  # equal by value, so unhashable, as a list is

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


class ClosableReads(TreeReads):
    """A durable log's open/closed and read-only checks (JSONL and PostgreSQL say them alike): a
    backend sets `_closed` and `readonly` and names itself in `_label()`."""

    _closed: bool
    readonly: bool

    def _label(self) -> str:
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise InputError(f"session {self._label()} is closed", "open it again")

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise InputError(f"session {self._label()} is open read-only", "open it for writing to append")
