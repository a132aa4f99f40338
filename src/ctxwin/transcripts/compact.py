"""Manual compaction (`/compact [focus]`) of a stored session or of any transcript file: the library
call behind `ctxwin compact`."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

from ctxwin import policies
from ctxwin.engine import ContextEngine
from ctxwin.messages.pairing import validate
from ctxwin.policies.model import compaction_for
from ctxwin.store.base import SessionLog
from ctxwin.store.entries import CompactionEntry, parse
from ctxwin.store.in_memory import MemorySessionLog
from ctxwin.store.session import Session, is_session_dir
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.model import DamagedInputWarning, ReadReport


def compact(source: str | Path, *, focus: str | None = None, strategy: str | None = None,
            policy: str = policies.DEFAULT, window: int | None = None, model: str | None = None,
            format: str | None = None) -> dict[str, Any]:
    """Compact `source` now. A stored session (a folder made by `Session.open` or `ctxwin import`) gets
    a compaction entry appended to its log; a transcript file is read into memory and left untouched.
    Returns what happened: tokens before and after, the strategy, whether the compacted view is valid
    for Anthropic and OpenAI, and how many messages the summary covers."""
    chosen = policies.get(policy)
    if strategy is not None:
        chosen = chosen.model_copy(update={"compaction": compaction_for(strategy, chosen.compaction, enabled=True)})
    path = Path(source)
    stored = path.is_dir() and is_session_dir(path)
    session: SessionLog
    if stored:
        session = Session.open(path)
        transcript_model = None
    else:
        transcript = load_transcript(path, format=format)
        session = MemorySessionLog(session_id=transcript.session_id or path.stem)
        transcript_model = transcript.model
    try:
        engine = ContextEngine(session, model=model or transcript_model, policy=chosen, window=window)
        if engine.problems:  # a damaged stored session: said the way every damaged input is said
            warnings.warn(DamagedInputWarning(store_report(path, engine)), stacklevel=2)
        if not stored:
            engine.append(transcript.messages)
        before = engine.prepare()
        after = engine.compact(focus=focus)
        entries = [e for e in session.path() if e.kind == CompactionEntry.kind]
        done = any(e.is_compaction for e in after.events)
        last = parse(entries[-1].kind, entries[-1].payload, entry_id=entries[-1].id) if entries and done else None
        entry = last if isinstance(last, CompactionEntry) else None
        return {
            "source": str(path),
            "stored": stored,
            "compacted": done,
            "strategy": chosen.compaction.strategy,
            "focus": focus,
            "tokens_before": before.tokens,
            "tokens_after": after.tokens,
            "window": engine.window,
            "valid": not validate(after.messages, "anthropic") and not validate(after.messages, "openai_chat"),
            "covered_messages": len(entry.covered_ids) if entry else 0,
            "kept_messages": sum(1 for i in after.items if not i.synthetic),
            "summary_tokens": entry.summary_tokens if entry else 0,
            "events": [e.to_dict() for e in after.events],
            "summary": entry.summary if entry else "",
            "problems": [p.to_dict() for p in engine.problems],
        }
    finally:
        session.close()


def store_report(path: Path, engine: ContextEngine) -> ReadReport:
    """The store's problems with a session (damaged lines, re-attached entries) as a read report."""
    kinds: Counter[str] = Counter(p.kind for p in engine.problems)
    return ReadReport(str(path), "ctxwin session", len(engine.messages), dict(kinds), {},
                      [p.message for p in engine.problems])
