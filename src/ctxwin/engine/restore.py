"""Restore points (OpenClaw's `/checkpoint` and `/rewind`): a label on an entry of the log, and a
rewind that continues the session on a new branch from it. Nothing after a restore point is lost;
it stays on its own branch, and so do the restore points made there."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin.errors import InputError
from ctxwin.store.base import Entry, SessionLog
from ctxwin.store.entries import (
    CalibrationEntry,
    DecisionEntry,
    LabelEntry,
    LogEntry,
    PinEntry,
    RecoveryEntry,
    RewindEntry,
    parse,
)


def marks_of(log: SessionLog) -> dict[str, str | None]:
    """Every restore point of the session, on any branch: name -> the entry it names."""
    found: dict[str, str | None] = {}
    by_kind = getattr(log, "entries_of_kinds", None)  # the stores that can skip the other entries unread
    for entry in by_kind([LabelEntry.kind]) if callable(by_kind) else log:
        if entry.kind == LabelEntry.kind:
            label = parse(entry.kind, entry.payload, entry_id=entry.id)
            if isinstance(label, LabelEntry):
                found[label.label] = label.target
    return found


def new_mark(log: SessionLog, name: str) -> LabelEntry:
    """The entry that makes the current leaf restore point `name`."""
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"a restore point needs a name, not {name!r}", 'mark("before-refactor")')
    if name in marks_of(log):
        raise InputError(f"a restore point named {name!r} exists", "rewind to it, or choose another name")
    return LabelEntry(name, log.leaf_id)


def rewind(log: SessionLog, name: str) -> int:
    """Move the log's leaf back to restore point `name` and start the new branch there with a
    `RewindEntry`, so that a reopened session resumes on it (a reopen starts at the newest entry).
    Returns how many decisions about the kept history were carried onto the new branch."""
    marks = marks_of(log)
    if not isinstance(name, str) or name not in marks:
        known = ", ".join(sorted(marks)) or "none yet"
        raise InputError(f"no restore point named {name!r}", f"known restore points: {known}")
    path = list(log.path())
    target = marks[name]
    keep = next((i + 1 for i, e in enumerate(path) if e.id == target), 0)
    entry = RewindEntry(name, target)
    return branch_keeping_decisions(log, path, keep, first=entry)


def branch_keeping_decisions(log: SessionLog, path: Sequence[Entry], keep: int, first: LogEntry | None = None) -> int:
    """Continue the log on a new branch after `path[:keep]`. What was decided later on the old branch
    about the entries kept (spills, caps, masks, pins; calibration and recoveries, which are about the
    model) is appended again on the new one, so the kept history renders as it did: decisions are
    logged after the messages they concern, and a branch at the message alone would lose them.
    `first` is appended before them. Returns the entries carried over."""
    kept = {e.id for e in path[:keep]}
    log.branch(path[keep - 1].id if keep else None)
    if first is not None:
        log.append(first.kind, first.to_payload())
    carried = 0
    for old in path[keep:]:
        record = parse(old.kind, old.payload, entry_id=old.id)
        again: LogEntry | None = None
        if isinstance(record, DecisionEntry):
            renders = {k: v for k, v in record.renders.items() if k in kept}
            again = DecisionEntry(record.stage, renders, record.events) if renders else None
        elif isinstance(record, PinEntry):
            again = record if record.target in kept else None
        elif isinstance(record, CalibrationEntry | RecoveryEntry):
            again = record
        if again is not None:
            log.append(again.kind, again.to_payload())
            carried += 1
    return carried
