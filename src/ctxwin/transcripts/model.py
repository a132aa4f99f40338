"""What an imported session file becomes: a `Transcript`."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ctxwin.messages import Message


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """A compaction the real harness performed.

    `index` is the position in `Transcript.messages` where the summary took effect: messages
    `[0, index)` were the history it compacted, and the first model call after it is the call that
    produced `messages[index]` or later. `first_kept_index` is the first message the harness kept
    verbatim after the summary (Pi keeps a tail; Claude Code keeps nothing, so it equals `index`).
    """

    index: int
    tokens_before: int | None
    summary: str
    first_kept_index: int | None = None
    trigger: str | None = None
    line: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """The provider's usage numbers for one model call: the call that produced
    `Transcript.messages[message_index]` (an assistant message)."""

    message_index: int
    input_tokens: int
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model: str | None = None
    cache_write_1h_tokens: int = 0
    """Of `cache_write_tokens`, those written to the 1-hour cache (billed 2x, not 1.25x), when recorded."""

    @property
    def context_tokens(self) -> int:
        """Everything the model read on this call: fresh input plus cache reads and writes."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass
class Transcript:
    """A session file, read: its conversation as canonical messages, the compactions and usage it
    recorded, where it came from, and what was skipped (nothing is dropped silently)."""

    format: str
    messages: list[Message]
    compactions: list[CompactionRecord] = field(default_factory=list)
    usage: list[UsageRecord] = field(default_factory=list)
    model: str | None = None
    cwd: str | None = None
    session_id: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    source: str | None = None
    skipped: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)
    sidechains: dict[str, list[Message]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def tool_calls(self) -> int:
        return sum(len(m.tool_calls) for m in self.messages)

    @property
    def tool_results(self) -> int:
        return sum(len(m.tool_results) for m in self.messages)
