"""Restore points (OpenClaw's `/checkpoint` and `/rewind`): a label on an entry of the log, and a
rewind that continues the session on a new branch from it. Nothing after a restore point is lost;
it stays on its own branch, and so do the restore points made there."""

from __future__ import annotations

from ctxwin.errors import InputError
from ctxwin.store.base import SessionLog
from ctxwin.store.entries import LabelEntry, RewindEntry, parse


def marks_of(log: SessionLog) -> dict[str, str | None]:
    """Every restore point of the session, on any branch: name -> the entry it names."""
    found: dict[str, str | None] = {}
    for entry in log:
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


def rewind(log: SessionLog, name: str) -> None:
    """Move the log's leaf back to restore point `name` and start the new branch there with a
    `RewindEntry`, so that a reopened session resumes on it (a reopen starts at the newest entry)."""
    marks = marks_of(log)
    if name not in marks:
        known = ", ".join(sorted(marks)) or "none yet"
        raise InputError(f"no restore point named {name!r}", f"known restore points: {known}")
    log.branch(marks[name])
    entry = RewindEntry(name, marks[name])
    log.append(entry.kind, entry.to_payload())
