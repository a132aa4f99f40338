"""ctxwin's own sessions (`ctxwin run`, `ctxwin chat`, `Session.open`, the proxy's `--store`), read as a
`Transcript` like any other harness's file, so every reading command takes them.

A session folder (or its `session.jsonl`) is opened read-only through the store: nothing is created,
locked or rewritten, a writer may keep appending, and the store's own damage reports (lines that are
not entries, orphans re-attached, a torn last line) become the transcript's warnings. A copy of the
log elsewhere (renamed, gzipped) is read from its lines: the branch is the path from the last entry
to the root, as the store reads it.

The conversation is the current branch's messages as logged; each compaction entry on the branch is
a `CompactionRecord` at the message where it took effect (its summary is ctxwin's, the messages stay
what the user, the model and the tools said). Usage is taken from an assistant message's
`meta["usage"]` when the writer recorded it; the model from the header's `meta["model"]`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ctxwin.errors import CtxwinError, InputError
from ctxwin.messages import Message
from ctxwin.store.base import Entry, StoreProblem
from ctxwin.store.entries import CompactionEntry, MessageEntry, parse
from ctxwin.store.jsonl import SESSION_FILE, JsonlSessionLog
from ctxwin.store.tree import entry_from_dict
from ctxwin.transcripts.model import CompactionRecord, ReadReport, Transcript, UsageRecord
from ctxwin.transcripts.source import ImportLog, Source

FORMAT = "ctxwin"
HEADER_FORMAT = "ctxwin-session"  # the "format" of the first line of every session.jsonl


def is_header(data: Any) -> bool:
    """Whether a decoded first line is the header of a ctxwin session log."""
    return isinstance(data, dict) and data.get("format") == HEADER_FORMAT


def session_folder(path: Path) -> Path | None:
    """The session folder `path` names (the folder, or the `session.jsonl` inside one), or None when it
    names something else."""
    if path.is_dir():
        return path if os.path.lexists(path / SESSION_FILE) else None
    if path.name == SESSION_FILE and path.is_file():
        return path.parent
    return None


def read_folder(folder: Path, log: ImportLog) -> Transcript:
    """A session folder, opened read-only (nothing in it is created or changed); the store's problems
    go to `log`."""
    try:
        session = JsonlSessionLog(folder, readonly=True)
    except CtxwinError as error:
        raise InputError(f"{folder} is not a readable ctxwin session: {error.message}",
                         error.hint or "check the folder (`ctxwin sessions` lists what is wrong with it)") from None
    with session:
        entries = list(session.path())
        header = dict(session.header)
        problems = session.problems
        kinds = session.kind_counts()
    for problem in problems:
        log.damage(problem.kind, _problem_text(problem), problem.line)
    transcript = _transcript(entries, header, log, kinds)
    transcript.source = str(folder)
    return transcript


def read(source: Source) -> Transcript:
    """A copy of a session log (any file name, plain or .gz), read from its lines."""
    log = source.log
    records = source.records()
    header = records[0].data if records and is_header(records[0].data) else {}
    if not header:
        log.warn("no ctxwin session header on the first line; reading the entries anyway")
    by_id: dict[str, Entry] = {}
    order: list[Entry] = []
    for record in records[1:] if header else records:
        try:
            entry = entry_from_dict(record.data)
        except CtxwinError as error:
            log.skip_bad("not_an_entry", f"not a session entry ({error.message}); skipped", record.line)
            continue
        by_id[entry.id] = entry
        order.append(entry)
    transcript = _transcript(_branch(order, by_id, log), header, log, Counter(e.kind for e in order))
    transcript.source = str(source.path)
    return transcript


def _branch(order: Sequence[Entry], by_id: dict[str, Entry], log: ImportLog) -> list[Entry]:
    """The path from the last entry (the leaf, as the store has it) back to the root."""
    path: list[Entry] = []
    seen: set[str] = set()
    entry = order[-1] if order else None
    while entry is not None and entry.id not in seen:
        seen.add(entry.id)
        path.append(entry)
        if entry.parent_id is None:
            break
        parent = by_id.get(entry.parent_id)
        if parent is None:
            log.warn(f"entry {entry.id}'s parent {entry.parent_id} is not in the file; the branch starts there")
        entry = parent
    path.reverse()
    return path


def _transcript(entries: Iterable[Entry], header: dict[str, Any], log: ImportLog, kinds: dict[str, int]) -> Transcript:
    messages: list[Message] = []
    compactions: list[CompactionRecord] = []
    usage: list[UsageRecord] = []
    position: dict[str, int] = {}  # entry id -> index of its message
    pending: list[tuple[int, CompactionEntry, Entry]] = []
    timestamps = []
    for entry in entries:
        timestamps.append(entry.timestamp)
        try:
            typed = parse(entry.kind, entry.payload, entry_id=entry.id)
        except CtxwinError as error:
            log.skip_bad("bad_payload", error.message)
            continue
        if isinstance(typed, MessageEntry):
            message = typed.message
            own = {"timestamp": entry.timestamp, **message.meta, "entry": entry.id}  # the message's own time first
            position[entry.id] = len(messages)
            messages.append(Message(message.role, message.blocks, entry.id, own))
            recorded = _usage(message.meta.get("usage"), len(messages) - 1)
            if recorded is not None and message.role == "assistant":
                usage.append(recorded)
        elif isinstance(typed, CompactionEntry):
            pending.append((len(messages), typed, entry))
    for index, compaction, entry in pending:
        first_kept = position.get(compaction.first_kept_id or "", index)
        compactions.append(CompactionRecord(
            index=index, tokens_before=compaction.tokens_before or None, summary=compaction.summary,
            first_kept_index=min(first_kept, index), trigger=compaction.reason or None,
            details={"strategy": compaction.strategy, "entry": entry.id, "tokens_after": compaction.tokens_after,
                     "covered": len(compaction.covered_ids)}))
    meta: dict[str, Any] = header["meta"] if isinstance(header.get("meta"), dict) else {}
    model = meta.get("model") if isinstance(meta.get("model"), str) else None
    workspace = meta.get("workspace") if isinstance(meta.get("workspace"), str) else None
    return Transcript(
        format=FORMAT, messages=messages, compactions=compactions, usage=usage, model=model, cwd=workspace,
        session_id=str(header.get("session_id") or "") or None, started_at=timestamps[0] if timestamps else None,
        ended_at=timestamps[-1] if timestamps else None, skipped=log.skipped,
        metadata={"entries": dict(kinds), "meta": meta, "created": header.get("created")},
    )


def _usage(value: Any, index: int) -> UsageRecord | None:
    """A usage record from `meta["usage"]` ({input_tokens, output_tokens, cache_read_tokens,
    cache_write_tokens}, as `ctxwin.providers.Usage` has them), or None."""
    if not isinstance(value, dict):
        return None
    numbers = {key: value.get(key) for key in ("input_tokens", "output_tokens", "cache_read_tokens",
                                               "cache_write_tokens")}
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers.values()):
        return None
    return UsageRecord(message_index=index, **numbers)  # type: ignore[arg-type]  # checked just above


def _problem_text(problem: StoreProblem) -> str:
    """The store's message without its `line N:` prefix (the import log adds its own)."""
    return f"{problem.kind}: {problem.detail}; {problem.action}"


def store_report(path: Path, problems: Sequence[StoreProblem], messages: int) -> ReadReport:
    """The store's problems with a session (damaged lines, re-attached entries) as a read report."""
    kinds = Counter(str(p.kind) for p in problems)
    return ReadReport(str(path), "ctxwin session", messages, dict(kinds), {}, [p.message for p in problems])
