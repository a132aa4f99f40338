"""The pre-compaction memory flush (OpenClaw): before a compaction, the span about to leave the view is
written as notes to the day's file, `memory/YYYY-MM-DD.md`, so what outlives the window can be found
again (by `memory_search`, and at the next session start).

`daily_notes(workspace)` is the callback `ContextEngine(memory_flush=...)` takes. It

- appends, never overwrites (the file is opened for append; OpenClaw's agents overwrote it, #6877);
- writes once per compaction cycle: the content keys of flushed messages are recorded in
  `memory/.flushed`, and a span (or the part of it) already flushed is not written again, so a
  retried or failed compaction, or the overflow-recovery path compacting the same span, does not
  duplicate notes (#12590), and the recovery path flushes like any other (#114081: OpenClaw skips it);
- never writes to a read-only workspace (it returns None instead).

`FLUSH_PROMPT` and `flush_due` are OpenClaw's agent-turn variant: a silent turn before compaction
asking the agent itself to store durable memories.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ctxwin.compaction.base import Summarizer
from ctxwin.files import read_text
from ctxwin.memory.files import MEMORY_DIR, daily_note_path, is_writable
from ctxwin.messages import Message

NOTES_BUDGET_TOKENS = 1_500
"""Size of one flush's notes."""
RESERVE_TOKENS_FLOOR = 20_000
"""OpenClaw's reserve below the window at which the agent-turn flush is due..."""
SOFT_THRESHOLD_TOKENS = 4_000
"""...minus this soft margin."""
FLUSHED_FILE = ".flushed"
"""In the memory folder: the content keys of the messages flushed so far, one a line (kept out of the
notes, which are loaded into the prompt)."""
FLUSH_PROMPT = (
    "Pre-compaction memory flush. Store durable memories now (use memory/YYYY-MM-DD.md; create memory/ if "
    "needed). IMPORTANT: If the file already exists, APPEND new content only and do not overwrite existing "
    "entries. If nothing to store, reply with NO_REPLY."
)


def flush_due(tokens: int, window: int, reserve_floor: int = RESERVE_TOKENS_FLOOR,
              soft_threshold: int = SOFT_THRESHOLD_TOKENS) -> bool:
    """OpenClaw's trigger for the agent-turn flush: tokens ≥ window − reserve floor − soft threshold."""
    return tokens >= window - reserve_floor - soft_threshold


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


@dataclass
class DailyNotes:
    """The flush callback (see the module docstring). `written` lists the files it appended to;
    `skipped` says why a call wrote nothing (`read_only`, `already_flushed`, `empty`)."""

    workspace: Path
    summarizer: Summarizer | None = None
    clock: Callable[[], float] = time.time
    budget_tokens: int = NOTES_BUDGET_TOKENS
    read_only: bool | None = None  # True: never write (a sandbox's read-only workspace); None: detect
    flushed: set[str] = field(default_factory=set)
    written: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def _already(self) -> set[str]:
        """Message keys flushed before, by this process or an earlier one."""
        keys = set(self.flushed)
        record = self.workspace / MEMORY_DIR / FLUSHED_FILE
        if record.is_file():
            keys.update(read_text(record, errors="replace").split())
        return keys

    def __call__(self, span: Sequence[Message]) -> Path | None:
        from ctxwin.compaction.extractive import ExtractiveSummarizer
        from ctxwin.tokens import counter_for

        if not span:
            self.skipped.append("empty")
            return None
        if self.read_only or (self.read_only is None and not is_writable(self.workspace)):
            self.skipped.append("read_only")
            return None
        when = datetime.fromtimestamp(self.clock())
        path = daily_note_path(self.workspace, when.date())
        done = self._already()
        fresh = [m for m in span if m.content_key not in done]
        if not fresh:
            self.skipped.append("already_flushed")
            return None
        summary = (self.summarizer or ExtractiveSummarizer()).summarize(
            fresh, budget_tokens=self.budget_tokens, counter=counter_for())
        keys = [m.content_key for m in fresh]
        entry = f"\n## Notes before compaction, {when:%H:%M}\n\n{summary.text.strip()}\n"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Append-only and durable: the notes exist exactly to survive what comes next.
            _append(path, entry)
            _append(path.parent / FLUSHED_FILE, "".join(f"{k}\n" for k in keys))
        except OSError as error:
            if error.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            self.skipped.append("read_only")  # a read-only mount even root cannot write to
            return None
        self.flushed.update(keys)
        self.written.append(path)
        return path


def daily_notes(workspace: str | Path, *, summarizer: Summarizer | None = None,
                clock: Callable[[], float] = time.time, budget_tokens: int = NOTES_BUDGET_TOKENS,
                read_only: bool | None = None) -> DailyNotes:
    """A memory-flush callback for `ContextEngine(memory_flush=...)` that appends notes on the span to
    the day's memory file and returns its path (None when it wrote nothing). `read_only=True` for a
    workspace the agent may only read (never written); None detects it."""
    return DailyNotes(Path(workspace), summarizer, clock, budget_tokens, read_only)
