"""The inputs of a consolidation, read from where the last run stopped (the watermark).

- Daily notes, `memory/YYYY-MM-DD.md`: append-only, so the watermark is the bytes consumed and the
  digest of those bytes; a note that grew is read from there (a note rewritten under it, whose first
  bytes changed, is read again whole: statements merged before are skipped by their refs). Only whole
  lines are consumed: a line being appended while we read is read next time. Each bullet, line or
  sentence is a `Unit` with the ref `memory/<name>.md:<line>`, the day of the note, and the heading
  above it. Inside code fences only `$ command` lines are read.
- Session logs, ctxwin's own JSONL sessions under the sessions folder: the watermark is the number of
  entries read per session; user messages are read sentence by sentence, and the assistant's only where
  it decides or finishes something (what it says it is about to do is no fact); tool output, ctxwin's
  own messages (flush prompts, checkpoint requests) and compaction summaries are not read. Refs are
  `entry:<id>@<session id>`.

Nothing here writes: the inputs stay append-only and untouched.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from ctxwin.errors import CtxwinError, InputError
from ctxwin.files import FileLimits, read_bytes
from ctxwin.memory.consolidate.extract import NOT_SPEAKERS, SPEAKER, Unit, split_sentences
from ctxwin.memory.files import MEMORY_DIR

NOTE_NAME = re.compile(r"^(?P<day>\d{4}-\d{2}-\d{2})\.md$")
ARCHIVE_DIR = "archive"
"""`memory/archive/`: hand edits of the outputs, kept as notes before an output is written again."""
ARCHIVE_NAME = re.compile(r"^(?:MEMORY|wiki-[\w-]+)-(?P<day>\d{4}-\d{2}-\d{2})-[0-9a-f]{8}\.md$")
_HEADING = re.compile(r"^(#{1,6})\s+(?P<title>.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_ASSISTANT_FACT = re.compile(
    r"\b(?:decided|decision|we'll go with|settled on|agreed|chose|done:|finished|completed|closed|fixed|"
    r"resolved|merged|shipped|reverted|switched to|the (?:root cause|fix) (?:is|was))\b", re.IGNORECASE)
MAX_UNIT_CHARS = 2_000
"""A message longer than this is read in its first sentences only (a pasted file is no statement)."""
MAX_NOTE_LINE_CHARS = 100_000
"""A note line longer than this is no note (a pasted file, a data dump): the note is refused, not read
in part, so what it says is never consolidated from its first characters alone."""
NOTE_LIMITS = FileLimits(max_bytes=64 * 1024 * 1024, allow_hard_links=False)
"""The largest note read (the memory index's cap; a hard-linked note is refused as the index refuses it)."""


@dataclass(frozen=True, slots=True)
class NoteMark:
    """How much of a note was consumed: `bytes` and the sha256 of those bytes."""

    bytes: int
    sha256: str


@dataclass
class Watermark:
    """Where the last run stopped: per note (its name under memory/) and per session (its id)."""

    notes: dict[str, NoteMark] = field(default_factory=dict)
    sessions: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"notes": {k: {"bytes": v.bytes, "sha256": v.sha256} for k, v in sorted(self.notes.items())},
                "sessions": dict(sorted(self.sessions.items()))}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Watermark:
        return Watermark({k: NoteMark(int(v["bytes"]), str(v["sha256"])) for k, v in data.get("notes", {}).items()},
                         {k: int(v) for k, v in data.get("sessions", {}).items()})


@dataclass
class Inputs:
    """What one read found: the units in the order they were written, the new watermark, and counts."""

    units: list[Unit]
    watermark: Watermark
    notes_read: list[str] = field(default_factory=list)
    sessions_read: list[str] = field(default_factory=list)
    bytes_read: int = 0
    entries_read: int = 0
    problems: list[str] = field(default_factory=list)
    uses: list[Use] = field(default_factory=list)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def note_day(name: str) -> date | None:
    """The day of `memory/<name>`: a daily note's date, or an archived output's."""
    base = name.rsplit("/", 1)[-1]
    match = NOTE_NAME.match(base) or ARCHIVE_NAME.match(base)
    if match is None:
        return None
    try:
        return date.fromisoformat(match.group("day"))
    except ValueError:
        return None


def note_names(workspace: Path) -> list[str]:
    """The daily notes and archived outputs under memory/, relative to it, oldest first. A symlink is
    read only when it resolves inside the memory folder (as the index reads them)."""
    folder = workspace / MEMORY_DIR
    if not folder.is_dir():
        return []
    inside = folder.resolve()

    def ours(path: Path) -> bool:
        return path.is_file() and path.resolve().is_relative_to(inside)

    names = [p.name for p in folder.glob("*.md") if NOTE_NAME.match(p.name) and ours(p)]
    archive = folder / ARCHIVE_DIR
    if archive.is_dir():
        names += [f"{ARCHIVE_DIR}/{p.name}" for p in archive.glob("*.md") if ARCHIVE_NAME.match(p.name) and ours(p)]
    return sorted(names, key=lambda n: (note_day(n) or date.min, n))


def note_text(rel: str, data: bytes) -> str:
    """The text of memory file `rel` (relative to the workspace); an `InputError` saying which file and
    what to do when it is no text a consolidation can take statements from: binary data, invalid
    UTF-8, a line longer than `MAX_NOTE_LINE_CHARS`. Refused whole, before anything is written, so a
    bad file never becomes MEMORY.md lines."""
    hint = f"fix {rel} or move it out of the memory folder; nothing was written"
    if b"\x00" in data:
        raise InputError(f"{rel} holds binary data (NUL bytes), not notes", hint)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        where = data.count(b"\n", 0, error.start) + 1
        raise InputError(f"{rel} is not valid UTF-8 (line {where}, byte {error.start:,})",
                         f"save it as UTF-8; {hint}") from None
    for number, line in enumerate(text.split("\n"), start=1):
        if len(line) > MAX_NOTE_LINE_CHARS:
            raise InputError(f"line {number} of {rel} is {len(line):,} characters; a note line is at most "
                             f"{MAX_NOTE_LINE_CHARS:,}",
                             f"split it, or keep the data in a file and note its path; {hint}")
    return text


def note_units(name: str, text: str, day: date, first_line: int = 1) -> list[Unit]:
    """The units of lines `first_line`.. of note `name` (relative to memory/), with the heading above
    each (the lines before are read for it and for open code fences, not emitted)."""
    units: list[Unit] = []
    heading: str | None = None
    fenced = False
    ref_base = f"{MEMORY_DIR}/{name}"
    for number, line in enumerate(text.split("\n"), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        stripped = line.strip()
        if fenced:
            if number >= first_line and stripped.startswith("$ "):
                units.append(Unit(f"Command: `{stripped[2:].strip()}`", day, f"{ref_base}:{number}", heading,
                                  None, (name, number, 0)))
            continue
        title = _HEADING.match(stripped)
        if title:
            heading = re.sub(r"[^\w &]+", " ", title.group("title")).strip().lower() or None
            heading = re.sub(r"\s+", " ", heading) if heading else None
            continue
        if number < first_line or not stripped or stripped.startswith(("<!--", "|", "{")):
            continue
        units.extend(_line_units(stripped.lstrip("> "), day, f"{ref_base}:{number}", heading, (name, number)))
    return units


def _line_units(line: str, day: date, ref: str, heading: str | None, where: tuple[str, int],
                speaker: str | None = None) -> list[Unit]:
    """A line's statements: the line whole when it is one bullet or sentence, else its sentences; a
    dialogue line's speaker ("Ana: ...") stays with every sentence of it."""
    body = re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", line)
    check = re.match(r"^\[[ xX]\]\s*", body)
    prefix = check.group(0) if check else ""
    body = body[len(prefix):]
    named = SPEAKER.match(body)
    if named and speaker is None and named.group("name").lower() not in NOT_SPEAKERS:
        speaker, body = named.group("name"), named.group("rest")
    sentences = split_sentences(body[:MAX_UNIT_CHARS]) if not prefix else [body]
    return [Unit(prefix + s, day, ref, heading, speaker, (where[0], where[1], k)) for k, s in enumerate(sentences)]


def read_notes(workspace: Path, marks: dict[str, NoteMark], since: date | None = None
               ) -> tuple[list[Unit], dict[str, NoteMark], list[str], int]:
    """The units of every note past its mark (notes before `since` are left as they are, marks
    included; from `since` on, notes are read whole), the new marks, the notes read, bytes read."""
    units: list[Unit] = []
    new_marks = dict(marks)
    read: list[str] = []
    total = 0
    folder = workspace / MEMORY_DIR
    for name in note_names(workspace):
        day = note_day(name)
        if day is None or (since is not None and day < since):
            continue
        data = read_bytes(folder / name, limits=NOTE_LIMITS)
        whole = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
        mark = None if since is not None else marks.get(name)
        start = 0
        if mark is not None and mark.bytes <= len(whole) and sha256(whole[: mark.bytes]) == mark.sha256:
            start = mark.bytes
        if start == len(whole):
            continue
        text = note_text(f"{MEMORY_DIR}/{name}", whole)
        first_line = whole[:start].count(b"\n") + 1
        units.extend(note_units(name, text, day, first_line))
        new_marks[name] = NoteMark(len(whole), sha256(whole))
        read.append(name)
        total += len(whole) - start
    return units, new_marks, read, total


def _day(timestamp: str) -> date | None:
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).date()
    except ValueError:
        return None


def session_folders(root: Path) -> Iterator[Path]:
    from ctxwin.store.session import is_session_dir

    if not root.is_dir():
        return
    if is_session_dir(root):
        yield root
        return
    for sub in sorted(root.iterdir()):
        if sub.is_dir() and is_session_dir(sub):
            yield sub


def message_statements(text: str) -> list[str]:
    """A message's statements: its lines' sentences, code blocks, headings and tables left out."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        stripped = line.strip()
        if fenced or not stripped or stripped.startswith(("#", "|", "<", "{", "[{")):  # code, markup, JSON
            continue
        out.extend(split_sentences(re.sub(r"^\s*(?:[-*+]|\d+[.)])\s+", "", stripped)))
    return out


@dataclass(frozen=True, slots=True)
class Use:
    """The agent read a source of consolidated memory: `memory_get` of `ref`, on `day`; `key` names the
    call (so reading a log twice counts it once)."""

    ref: str
    day: date
    key: str


@dataclass
class SessionsRead:
    """What `read_sessions` found: the units, the new marks, the sessions read, the entries read, and
    the agent's reads of memory sources (`uses`)."""

    units: list[Unit] = field(default_factory=list)
    marks: dict[str, int] = field(default_factory=dict)
    read: list[str] = field(default_factory=list)
    entries: int = 0
    uses: list[Use] = field(default_factory=list)


def read_sessions(root: Path | None, marks: dict[str, int], since: date | None = None,
                  problems: list[str] | None = None) -> SessionsRead:
    """The units of every session's messages past its mark (the entries before `since` are skipped),
    and each `memory_get` the agent called (how often a fact was used). Sessions are opened read-only,
    without a lock: an agent may be appending to one (what it appends after we counted is read next
    time)."""
    from ctxwin.messages import Message
    from ctxwin.store.session import Session

    out = SessionsRead(marks=dict(marks))
    units, new_marks, read, uses = out.units, out.marks, out.read, out.uses
    entries = 0
    if root is None:
        return out
    for folder in session_folders(root):
        try:
            log = Session.open(folder, readonly=True)
        except CtxwinError as error:  # one damaged session must not keep the others out
            if problems is not None:
                problems.append(f"session {folder.name} not read: {error}")
            continue
        with log:
            sid = log.session_id
            count = len(log)
            start = marks.get(sid, 0) if since is None else 0
            if start > count:
                start = 0  # a log shorter than we read it: another log under the same id
            if start == count:
                continue
            for entry in log.entries_of_kinds(("message",), start):
                entries += 1
                day = _day(entry.timestamp)
                if day is None or (since is not None and day < since):
                    continue
                message = Message.from_dict(entry.payload)
                if message.role not in ("user", "assistant") or "ctxwin" in message.meta:
                    continue
                ref = f"entry:{entry.id}@{sid}"
                for n, call in enumerate(message.tool_calls):
                    path = call.arguments.get("path") if isinstance(call.arguments, dict) else None
                    if call.name == "memory_get" and isinstance(path, str):
                        uses.append(Use(path.strip(), day, f"use:{ref}#{n}"))
                text = message.text.strip()
                if not text:
                    continue
                for k, sentence in enumerate(message_statements(text[:MAX_UNIT_CHARS])):
                    if message.role == "assistant" and not _ASSISTANT_FACT.search(sentence):
                        continue
                    # Ordered by time within a day, after the day's notes ("2026-11-30." < "2026-11-30T").
                    units.append(Unit(sentence, day, ref, None, message.role, (entry.timestamp, start + entries, k)))
            new_marks[sid] = count
            read.append(sid)
    out.entries = entries
    return out


def read_inputs(workspace: Path, sessions: Path | None, watermark: Watermark, since: date | None = None) -> Inputs:
    """Notes and sessions past `watermark` (or from `since` on), as one list of units in writing order."""
    note_list, note_marks, notes, total = read_notes(workspace, watermark.notes, since)
    problems: list[str] = []
    logs = read_sessions(sessions, watermark.sessions, since, problems)
    units = note_list + logs.units
    units.sort(key=lambda u: (u.day, u.order))
    return Inputs(units, Watermark(note_marks, logs.marks), notes, logs.read, total, logs.entries, problems, logs.uses)
