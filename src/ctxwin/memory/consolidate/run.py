"""`consolidate()`: notes and session logs since the last run become MEMORY.md and the wiki.

One run, under the memory folder's lock (`memory/.consolidate/lock`: never two at once, in any
number of processes):

1. load the state (`memory/.consolidate/state.json`: the facts, the statements merged, the watermark,
   the digest of every file written);
2. keep hand edits: an output whose bytes are not what the last run wrote was edited by hand; its lines
   that no run wrote are saved as a note in `memory/archive/` (read like any note), so the new output
   loses nothing;
3. read what the notes and sessions gained past the watermark (`sources`), extract observations
   (`extract`, or the model extractor), merge them into the facts (`facts`);
4. render MEMORY.md (`render`) and the wiki pages (`ctxwin.memory.wiki`) and write the ones whose bytes
   changed, each by an atomic replace (a reader sees the old file or the new one), the state last: a
   run cut short leaves the old state, and the next run redoes the same work.

Inputs are only read (notes are append-only; a flush appending while we run lands past the watermark
and is read next time). A run with no new input writes nothing at all: every output renders to the
bytes already there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Protocol

from ctxwin.errors import InputError
from ctxwin.files import read_bytes
from ctxwin.memory.consolidate.extract import Observation, Unit, observe
from ctxwin.memory.consolidate.facts import Fact, FactStore, MergeReport
from ctxwin.memory.consolidate.render import MAX_MEMORY_CHARS, render_memory
from ctxwin.memory.consolidate.sources import (
    ARCHIVE_DIR,
    NOTE_LIMITS,
    NoteMark,
    Watermark,
    note_text,
    note_units,
    read_inputs,
    read_notes,
    sha256,
)
from ctxwin.memory.files import MEMORY_DIR, MEMORY_FILE
from ctxwin.memory.wiki import TOPICS, current_line, history_line, page_path, pages

STATE_DIR = ".consolidate"
"""Under memory/: the state and the lock (a dot folder: never indexed, never loaded into a prompt)."""
STATE_FILE = "state.json"
LOCK_FILE = "lock"
STATE_VERSION = 1
OUTPUT_MODE = 0o644
"""Mode of a new MEMORY.md or wiki page (an existing file keeps its own)."""


class Extractor(Protocol):
    """What turns statements into observations: the rules (default) or a model."""

    name: str

    def observe(self, units: Sequence[Unit]) -> list[Observation]: ...


class RuleExtractor:
    """The deterministic extractor (`extract.classify` on every unit)."""

    name = "rules"

    def observe(self, units: Sequence[Unit]) -> list[Observation]:
        return observe(list(units))


@dataclass
class ConsolidationReport:
    """What a run read, found and wrote. `written` lists the files replaced (relative to the
    workspace; none on a dry run, where `would_write` says what would be); `memory_text` is the
    MEMORY.md the run rendered (whether written or not)."""

    workspace: str
    dry_run: bool
    extractor: str
    units: int = 0
    observations: int = 0
    notes_read: list[str] = field(default_factory=list)
    sessions_read: list[str] = field(default_factory=list)
    bytes_read: int = 0
    entries_read: int = 0
    merge: MergeReport = field(default_factory=MergeReport)
    facts: int = 0
    current: int = 0
    in_memory: int = 0
    wiki_only: int = 0
    memory_chars: int = 0
    written: list[str] = field(default_factory=list)
    would_write: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    memory_text: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.written or self.would_write)

    def to_dict(self) -> dict[str, Any]:
        return {"workspace": self.workspace, "dry_run": self.dry_run, "extractor": self.extractor,
                "units": self.units, "observations": self.observations, "notes_read": self.notes_read,
                "sessions_read": self.sessions_read, "bytes_read": self.bytes_read, "entries_read": self.entries_read,
                "merge": self.merge.to_dict(), "facts": self.facts, "current": self.current,
                "in_memory": self.in_memory, "wiki_only": self.wiki_only, "memory_chars": self.memory_chars,
                "written": self.written, "would_write": self.would_write, "archived": self.archived,
                "problems": self.problems, "changed": self.changed, "seconds": round(self.seconds, 4)}


@dataclass
class State:
    """What a run leaves for the next (see the module docstring)."""

    facts: list[Fact] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    watermark: Watermark = field(default_factory=Watermark)
    outputs: dict[str, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        data = {"version": STATE_VERSION, "watermark": self.watermark.to_dict(),
                "outputs": dict(sorted(self.outputs.items())), "seen": sorted(self.seen),
                "facts": [f.to_dict() for f in self.facts]}
        return (json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n").encode()

    @staticmethod
    def load(path: Path) -> State:
        if not path.is_file():
            return State()
        from ctxwin.files import loads_json

        try:
            data = loads_json(read_bytes(path))
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"version {data.get('version')!r}")
            return State([Fact.from_dict(f) for f in data["facts"]], set(data["seen"]),
                         Watermark.from_dict(data["watermark"]), dict(data["outputs"]))
        except (InputError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise InputError(f"{path} is not a consolidation state this ctxwin reads ({error})",
                             f"move it aside to consolidate from scratch (the notes and logs are the truth): "
                             f"mv {path} {path}.old") from None


def state_dir(workspace: Path) -> Path:
    return workspace / MEMORY_DIR / STATE_DIR


def _write(path: Path, data: bytes) -> None:
    from ctxwin.store.blobs import write_atomic

    mode = OUTPUT_MODE
    with contextlib.suppress(FileNotFoundError):
        mode = os.stat(path).st_mode & 0o777
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, mode)


def _ours(facts: Sequence[Fact], memory: str) -> set[str]:
    """Every line a run renders from `facts` (MEMORY.md's and the wiki's), to tell a hand edit apart."""
    by_id = {f.id: f for f in facts}
    lines = set(memory.split("\n"))
    for fact in facts:
        lines.add(current_line(fact))
        lines.add(history_line(fact, by_id.get(fact.by or "")))
    for text in pages(facts).values():
        lines.update(text.split("\n"))
    return lines


_TRAILING_REFS = re.compile(r"(?:\s*\[(?:memory/|entry:)[^\]]*\])+\s*$")


@dataclass(frozen=True)
class _Edits:
    """Hand edits of one output, as the archive note that keeps them: its name under memory/, its text,
    its day, and whether it is new (not on disk yet: this run writes it, or a dry run would)."""

    name: str
    text: str
    day: date
    new: bool


def _archive(workspace: Path, state: State, max_chars: int) -> list[_Edits]:
    """Hand edits of the outputs (see the module docstring), as the archive notes that keep them;
    writes nothing (`_run` writes them once every input has been read). A MEMORY.md or wiki page no
    run wrote (a curated MEMORY.md from before consolidation) is all hand edits."""
    out: list[_Edits] = []
    ours: set[str] | None = None
    candidates = {MEMORY_FILE, *(page_path(t) for t in TOPICS)} | set(state.outputs)
    for rel in sorted(candidates):
        path = workspace / rel
        if not path.is_file():
            continue
        data = read_bytes(path, limits=NOTE_LIMITS)
        if sha256(data) == state.outputs.get(rel):
            continue
        if ours is None:
            ours = _ours(state.facts, render_memory(state.facts, max_chars).text)
        kept: list[str] = []
        own = 0
        for line in note_text(rel, data).split("\n"):
            if line.startswith("#"):
                kept.append(line)  # the headings stay: they say what the lines under them are
            elif line.strip() and line not in ours and not line.startswith("<!--"):
                kept.append(_TRAILING_REFS.sub("", line))
                own += 1
        if not own:
            continue
        day = datetime.fromtimestamp(path.stat().st_mtime).date()
        stem = "MEMORY" if rel == MEMORY_FILE else "wiki-" + Path(rel).stem
        name = f"{ARCHIVE_DIR}/{stem}-{day.isoformat()}-{sha256(data)[:8]}.md"
        text = f"# Edits to {rel} found on {day.isoformat()}\n\n" + "\n".join(kept) + "\n"
        out.append(_Edits(name, text, day, not (workspace / MEMORY_DIR / name).exists()))
    return out


def consolidate(workspace: str | Path, *, sessions: str | Path | None = None, since: date | str | None = None,
                dry_run: bool = False, max_chars: int = MAX_MEMORY_CHARS, extractor: Extractor | None = None,
                lock_timeout: float | None = 0) -> ConsolidationReport:
    """Consolidates the workspace's memory (see the module docstring). `sessions` is the folder of
    ctxwin sessions to read (default `<workspace>/.ctxwin/sessions` when it exists; None and no such
    folder: notes only); `since` reads inputs from that day on instead of from the watermark;
    `dry_run` writes nothing and reports what would change; `max_chars` caps MEMORY.md; `extractor`
    (default the rules) turns statements into facts. Another consolidation of the same workspace
    running: waits `lock_timeout` seconds (None: forever), then raises `SessionLockedError`."""
    started = time.perf_counter()
    root = Path(workspace)
    if not root.is_dir():
        raise InputError(f"no workspace folder at {root}", "give the folder that holds MEMORY.md and memory/")
    if max_chars < 1_000:
        raise InputError(f"max_chars {max_chars} is too small for MEMORY.md", "give at least 1000 characters")
    day = _day(since)
    folder = _sessions_folder(root, sessions)
    if folder is None and not (root / MEMORY_FILE).is_file() and not (root / MEMORY_DIR).is_dir():
        raise InputError(f"{root} is not a workspace: it holds no {MEMORY_FILE}, no {MEMORY_DIR}/ folder and no "
                         ".ctxwin/sessions", "give the folder that holds MEMORY.md and memory/ (or --sessions)")
    chosen: Extractor = extractor or RuleExtractor()
    report = ConsolidationReport(str(root), dry_run, chosen.name)
    if dry_run:
        _run(root, folder, day, dry_run, max_chars, chosen, report)
    else:
        from ctxwin.store.locks import FileLock

        if not state_dir(root).exists():  # a first run refused for a bad note leaves no state folder behind
            _archive(root, State(), max_chars)
            read_notes(root, {}, day)
        state_dir(root).mkdir(parents=True, exist_ok=True)
        lock = FileLock(state_dir(root) / LOCK_FILE)
        lock.acquire(lock_timeout, f"the memory of {root} is being consolidated",
                     "it never takes long without a model: run again once it has finished (from Python, "
                     "consolidate(..., lock_timeout=SECONDS) waits for it)")
        try:
            _run(root, folder, day, dry_run, max_chars, chosen, report)
        finally:
            lock.release()
    report.seconds = time.perf_counter() - started
    return report


def _day(since: date | str | None) -> date | None:
    if since is None or isinstance(since, date):
        return since
    try:
        return date.fromisoformat(since)
    except ValueError:
        raise InputError(f"--since {since!r} is not a date", "write YYYY-MM-DD, e.g. --since 2026-11-01") from None


def _sessions_folder(root: Path, sessions: str | Path | None) -> Path | None:
    if sessions is not None:
        path = Path(sessions)
        if not path.is_dir():
            raise InputError(f"no sessions folder at {path}", "give the folder that holds the ctxwin sessions to read")
        return path
    default = root / ".ctxwin" / "sessions"
    return default if default.is_dir() else None


def _run(root: Path, sessions: Path | None, since: date | None, dry_run: bool, max_chars: int,
         extractor: Extractor, report: ConsolidationReport) -> None:
    state_path = state_dir(root) / STATE_FILE
    state = State.load(state_path)
    edits = _archive(root, state, max_chars)
    inputs = read_inputs(root, sessions, state.watermark, since)  # a bad note stops the run here: nothing written
    report.archived = [f"{MEMORY_DIR}/{e.name}" for e in edits]
    fresh = [e for e in edits if e.new]  # (an archive note already on disk is read with the notes)
    units = [u for e in fresh for u in note_units(e.name, e.text, e.day)] + inputs.units
    for e in fresh:
        data = e.text.encode()
        inputs.watermark.notes[e.name] = NoteMark(len(data), sha256(data))
        inputs.notes_read.append(e.name)
        inputs.bytes_read += len(data)
        if not dry_run:
            _write(root / MEMORY_DIR / e.name, data)
    report.units = len(units)
    report.notes_read, report.sessions_read = inputs.notes_read, inputs.sessions_read
    report.bytes_read, report.entries_read = inputs.bytes_read, inputs.entries_read
    report.problems.extend(inputs.problems)
    observations = extractor.observe(units)
    observations.sort(key=lambda o: (o.day, o.order))
    report.problems.extend(getattr(extractor, "problems", ()))
    report.observations = len(observations)
    store = FactStore(state.facts, set(state.seen))
    report.merge = store.merge(observations, _seen_keys(observations))
    report.merge.used = store.use([(u.ref, u.key) for u in inputs.uses])
    rendered = render_memory(store.facts, max_chars)
    outputs = dict(pages(store.facts))
    outputs[MEMORY_FILE] = rendered.text
    report.facts, report.current = len(store.facts), len(store.current())
    report.in_memory, report.wiki_only = len(rendered.kept), len(rendered.left)
    report.memory_chars, report.memory_text = len(rendered.text), rendered.text
    if not store.facts and not (root / MEMORY_FILE).exists() and not state.outputs:
        outputs = {}  # nothing to say yet: no empty MEMORY.md
    digests: dict[str, str] = {}
    for rel, text in sorted(outputs.items(), key=lambda item: item[0] == MEMORY_FILE):  # MEMORY.md last
        data = text.encode()
        digests[rel] = sha256(data)
        path = root / rel
        if path.is_file() and read_bytes(path) == data:
            continue
        (report.would_write if dry_run else report.written).append(rel)
        if not dry_run:
            _write(path, data)
    new_state = State(store.facts, store.seen, inputs.watermark, digests)
    data = new_state.to_bytes()
    if dry_run or (state_path.is_file() and read_bytes(state_path) == data):
        return
    _write(state_path, data)


def _seen_keys(observations: Sequence[Observation]) -> list[str]:
    """Each observation's identity: its statement's ref and place in it, numbered when one place
    gives several observations (a model may find two facts in one sentence)."""
    counts: dict[str, int] = {}
    keys = []
    for o in observations:
        base = f"{o.ref}#{o.order[2]}"
        n = counts.get(base, 0)
        counts[base] = n + 1
        keys.append(base if n == 0 else f"{base}.{n}")
    return keys
