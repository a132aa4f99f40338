"""An in-memory session log: the same tree API as the durable backends, for replays, tests of the
pipeline, and harnesses that persist elsewhere. Nothing survives the process; blobs go wherever the
given blob store keeps them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from ctxwin.store.base import BlobStore, Entry, EntryKind, StoreProblem


class MemorySessionLog:
    def __init__(self, session_id: str = "memory", blobs: BlobStore | None = None,
                 clock: Any = None) -> None:
        self.session_id = session_id
        self.blobs = blobs  # type: ignore[assignment]
        self._entries: list[Entry] = []
        self._by_id: dict[str, Entry] = {}
        self._leaf: str | None = None
        self._ids = itertools.count(1)
        self._clock = clock

    @property
    def leaf_id(self) -> str | None:
        return self._leaf

    @property
    def problems(self) -> list[StoreProblem]:
        return []  # built in this process from valid appends: nothing can be damaged

    def _now(self) -> str:
        if self._clock is not None:
            return datetime.fromtimestamp(self._clock(), UTC).isoformat()
        return datetime.now(UTC).isoformat()

    def append(self, kind: EntryKind, payload: dict[str, Any], *, parent_id: str | None = None) -> Entry:
        parent = parent_id if parent_id is not None else self._leaf
        if parent is not None and parent not in self._by_id:
            raise KeyError(f"no entry {parent!r} in session {self.session_id}")
        entry = Entry(f"e{next(self._ids):06d}", parent, kind, self._now(), payload)
        self._entries.append(entry)
        self._by_id[entry.id] = entry
        self._leaf = entry.id
        return entry

    def branch(self, entry_id: str | None) -> None:
        """Moves the leaf to `entry_id`, so the next append forks there; `None`: a new root."""
        if entry_id is not None and entry_id not in self._by_id:
            raise KeyError(f"no entry {entry_id!r} in session {self.session_id}")
        self._leaf = entry_id

    def path(self, leaf_id: str | None = None) -> list[Entry]:
        out: list[Entry] = []
        current = leaf_id if leaf_id is not None else self._leaf
        while current is not None:
            entry = self._by_id[current]
            out.append(entry)
            current = entry.parent_id
        out.reverse()
        return out

    def get(self, entry_id: str) -> Entry:
        return self._by_id[entry_id]

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def close(self) -> None:
        pass

    def __enter__(self) -> MemorySessionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
