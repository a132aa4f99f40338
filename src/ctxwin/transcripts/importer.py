"""Any transcript ctxwin can read becomes a session in the store.

The conversation becomes `message` entries (payload: `Message.to_dict()`), each compaction the real
harness recorded becomes a `compaction` entry at the point it took effect, the model a `model_change`
entry at the start, and each sub-agent conversation (sidechain) its own root branch headed by a
`label` entry, imported before the main conversation so that the main conversation's last message
is the session's leaf. What was imported, skipped and warned about is kept in the header's
`meta["import"]`, so the session says where it came from.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ctxwin.errors import InputError
from ctxwin.messages import Message
from ctxwin.store.entries import ModelChangeEntry
from ctxwin.store.jsonl import SESSION_FILE, JsonlSessionLog
from ctxwin.store.session import DEFAULT_ROOT, Session
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.model import CompactionRecord, Transcript

NAME_CHARS = 80  # longest folder name made from a session id or file name
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def session_name(transcript: Transcript, path: Path) -> str:
    """A folder name for the imported session: the transcript's own id, else the file's name."""
    raw = transcript.session_id or path.name.removesuffix(".gz").rsplit(".", 1)[0] or "session"
    name = _UNSAFE.sub("-", raw).strip("-.")[:NAME_CHARS]
    return name or "session"


def _timestamp(message: Message, fallback: str | None) -> str | None:
    value = message.meta.get("timestamp") if message.meta else None
    return value if isinstance(value, str) and value else fallback


def compaction_payload(record: CompactionRecord, fmt: str, message_ids: list[str], covered_from: int) -> dict[str, Any]:
    """The compaction entry for a recorded compaction. `first_kept_id` is the first message kept
    verbatim; null means none before the compaction (everything after it is new)."""
    first_kept = record.index if record.first_kept_index is None else record.first_kept_index
    return {
        "summary": record.summary,
        "first_kept_id": message_ids[first_kept] if first_kept < record.index else None,
        "tokens_before": record.tokens_before,
        "tokens_after": None,
        "strategy": fmt,
        "trigger": record.trigger,
        "covered_ids": message_ids[covered_from:first_kept],
        "details": dict(record.details),
        "source": {"imported": True, "line": record.line},
    }


def write_transcript(log: JsonlSessionLog | Any, transcript: Transcript) -> dict[str, int]:
    """Appends a transcript to an open log; returns counts of what it appended by kind."""
    counts = {"message": 0, "compaction": 0, "model_change": 0, "label": 0}
    fallback = transcript.started_at

    for name, messages in transcript.sidechains.items():
        log.branch(None)
        log.append("label", {"label": "sidechain", "name": name, "messages": len(messages)}, timestamp=fallback)
        counts["label"] += 1
        for message in messages:
            log.append("message", message.to_dict(), timestamp=_timestamp(message, fallback))
            counts["message"] += 1
    if transcript.sidechains:
        log.branch(None)

    if transcript.model:
        log.append("model_change", ModelChangeEntry(transcript.model, "import").to_payload(), timestamp=fallback)
        counts["model_change"] += 1
    by_index: dict[int, list[CompactionRecord]] = {}
    for record in transcript.compactions:
        by_index.setdefault(record.index, []).append(record)
    ids: list[str] = []
    covered_from = 0
    for index in range(len(transcript.messages) + 1):
        for record in by_index.get(index, []):
            log.append("compaction", compaction_payload(record, transcript.format, ids, covered_from),
                       timestamp=_timestamp(transcript.messages[index], fallback)
                       if index < len(transcript.messages) else transcript.ended_at or fallback)
            counts["compaction"] += 1
            covered_from = index if record.first_kept_index is None else record.first_kept_index
        if index < len(transcript.messages):
            message = transcript.messages[index]
            ids.append(log.append("message", message.to_dict(), timestamp=_timestamp(message, fallback)).id)
            counts["message"] += 1
    return counts


def import_transcript(path: str | Path, into: str | Path = DEFAULT_ROOT, *,
                      format: str | None = None) -> JsonlSessionLog:
    """Reads the transcript at `path` (any format `load_transcript` knows) into a new session folder
    under `into`, named after the transcript's session id (or the file). Returns the session, open for
    writing in `batch` durability (everything imported is already synced): close it when done.
    Refuses to overwrite an existing session."""
    source = Path(path)
    transcript = load_transcript(source, format=format)
    folder = Path(into) / session_name(transcript, source)
    if (folder / SESSION_FILE).exists():
        raise InputError(f"{folder} already holds a session", "delete it first, or import into another folder (--into)")
    meta = {"import": {
        "source": str(source.resolve()),
        "format": transcript.format,
        "session_id": transcript.session_id,
        "model": transcript.model,
        "cwd": transcript.cwd,
        "started_at": transcript.started_at,
        "ended_at": transcript.ended_at,
        "messages": len(transcript.messages),
        "compactions": len(transcript.compactions),
        "sidechains": len(transcript.sidechains),
        "skipped": dict(transcript.skipped),
        "warnings": list(transcript.warnings),
        "metadata": transcript.metadata,
    }}
    # batch durability: thousands of appends, made durable together by the flush below
    log = Session.open(folder, durability="batch", meta=json.loads(json.dumps(meta, default=str)))
    try:
        write_transcript(log, transcript)
        log.flush()
    except BaseException:
        log.close()
        raise
    return log
