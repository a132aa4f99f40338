"""The pre-compaction memory flush (OpenClaw): before an automatic compaction, the span about to leave
the view is handed to a callback. `daily_notes` is the ready one: it appends deterministic notes on
the span (the extractive summary: files, commands, errors, decisions, open tasks) to
`memory/YYYY-MM-DD.md` in the workspace, creating the folder, never overwriting.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from ctxwin.compaction.base import Summarizer
from ctxwin.messages import Message

NOTES_BUDGET_TOKENS = 1_500
"""Size of one flush's notes."""


def notes_path(workspace: Path, when: datetime) -> Path:
    return workspace / "memory" / f"{when:%Y-%m-%d}.md"


def daily_notes(workspace: str | Path, *, summarizer: Summarizer | None = None,
                clock: Callable[[], float] = time.time,
                budget_tokens: int = NOTES_BUDGET_TOKENS) -> Callable[[Sequence[Message]], Path]:
    """A memory-flush callback for `ContextEngine(memory_flush=...)` that appends notes on the span to
    the day's memory file and returns its path."""
    root = Path(workspace)

    def flush(span: Sequence[Message]) -> Path:
        from ctxwin.compaction.extractive import ExtractiveSummarizer
        from ctxwin.tokens import counter_for

        summary = (summarizer or ExtractiveSummarizer()).summarize(
            list(span), budget_tokens=budget_tokens, counter=counter_for())
        when = datetime.fromtimestamp(clock())
        path = notes_path(root, when)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = f"\n## Notes before compaction, {when:%H:%M}\n\n{summary.text.strip()}\n"
        # Append-only and durable: the notes exist exactly to survive what comes next.
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(entry)
            handle.flush()
            os.fsync(handle.fileno())
        return path

    return flush
