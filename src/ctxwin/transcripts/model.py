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
    damaged: Counter[str] = field(default_factory=Counter)
    """What in the file was damaged, by reason: malformed lines skipped, invalid UTF-8 or lone
    surrogates replaced, a gzip stream cut short. Each also has a warning naming its line."""
    repaired: Counter[str] = field(default_factory=Counter)
    """What was malformed but read in full all the same (records glued on one line)."""
    sidechains: dict[str, list[Message]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def is_damaged(self) -> bool:
        """Whether reading it skipped or replaced anything it should not have (the warnings say what):
        every command that reads a session then warns on stderr and exits 3."""
        return bool(self.warnings)

    def read_report(self) -> ReadReport:
        return ReadReport(self.source or "", self.format, len(self.messages), dict(self.damaged),
                          dict(self.repaired), list(self.warnings))

    @property
    def tool_calls(self) -> int:
        return sum(len(m.tool_calls) for m in self.messages)

    @property
    def tool_results(self) -> int:
        return sum(len(m.tool_results) for m in self.messages)


REPAIR_DETAILS = frozenset({"glued_json_records"})
"""Counts in `repaired` that say how much a repair recovered (the records a glued line held), not
repairs of their own."""


@dataclass(frozen=True)
class ReadReport:
    """What reading one session file found wrong with it: the same facts on every command (stderr
    warnings, the `read` object of `--json` output, exit code 3)."""

    source: str
    format: str
    messages: int
    damaged: dict[str, int]
    repaired: dict[str, int]
    warnings: list[str]

    @property
    def is_damaged(self) -> bool:
        return bool(self.warnings)

    @property
    def repairs(self) -> int:
        """How many things were repaired: one glued line is one repair, whatever it held."""
        return sum(n for reason, n in self.repaired.items() if reason not in REPAIR_DETAILS)

    def notes(self) -> list[str]:
        """What was repaired with nothing lost, in words."""
        lines = self.repaired.get("glued_json_lines", 0)
        if not lines:
            return []
        records = self.repaired.get("glued_json_records", 0)
        return [f"{lines:,} line(s) held {records:,} JSON records glued together; each was read"]

    def summary(self) -> str:
        counts = ", ".join(f"{count:,} {reason}" for reason, count in sorted(self.damaged.items(),
                                                                             key=lambda item: -item[1]))
        if not self.warnings:
            return f"{self.source}: read as {self.format}; " + "; ".join(self.notes())
        return f"{self.source}: read as {self.format} with {len(self.warnings):,} problem(s)" + \
            (f" ({counts})" if counts else "")

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "format": self.format, "messages": self.messages, "damaged": self.damaged,
                "damaged_total": sum(self.damaged.values()), "repaired": self.repaired, "repairs": self.repairs,
                "warnings": len(self.warnings)}


class DamagedInputWarning(UserWarning):
    """Issued by `load_transcript` for a file it read with problems, or had to repair (see
    `ReadReport`): a library user sees it as a Python warning; the CLI collects it, prints the problems
    and exits 3 when something was damaged."""

    def __init__(self, report: ReadReport | str) -> None:
        # Rebuilt from its message alone (pytest-xdist and pickling pass a warning on as its args), it
        # keeps the words and has no report.
        super().__init__(report if isinstance(report, str) else report.summary())
        self.report: ReadReport | None = None if isinstance(report, str) else report
