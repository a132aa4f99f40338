"""Where the tokens of a context go, like Claude Code's `/context`: system prompt, tool schemas,
memory/bootstrap files, summary, messages, tool results, reserved output and free space, with the
pressure level that says what to do next."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwin.messages import Message, Text
from ctxwin.tokens.base import TokenCounter
from ctxwin.tokens.registry import ModelInfo, model_info

CATEGORIES: tuple[str, ...] = ("system_prompt", "tool_schemas", "memory_files", "summary", "messages",
                               "tool_results", "reserved_output", "free_space")
LABELS = {"system_prompt": "System prompt", "tool_schemas": "Tool schemas", "memory_files": "Memory files",
          "summary": "Summary", "messages": "Messages", "tool_results": "Tool results",
          "reserved_output": "Reserved output", "free_space": "Free space"}
PRESSURE_LEVELS: tuple[str, ...] = ("ok", "warn", "compact_due", "over")

WARN_SHARE = 0.75  # used / (window - reserved) from which the context is filling up
COMPACT_SHARE = 0.90  # ... from which a compaction is due
RESERVE_CAP = 32_000  # output reserved by default: the model's max output, but no more than this
SYSTEM_MESSAGE_TOKENS = 4  # framing of a system prompt passed as a string

# Text blocks that are harness-injected memory or bootstrap files (CLAUDE.md, AGENTS.md ...), not chat.
MEMORY_MARKERS = ("claudeMd", "CLAUDE.md", "AGENTS.md", "MEMORY.md", "SOUL.md", "TOOLS.md", "USER.md")

SUGGESTIONS = {
    "ok": "Plenty of room; nothing to do.",
    "warn": "The context is filling up: old tool output is the first thing to mask or spill.",
    "compact_due": "Compaction is due: compact now (`ctxwin compact`), or mask old tool output to gain time.",
    "over": "The context no longer fits the window: compact or drop old turns before the next call.",
}


@dataclass(frozen=True, slots=True)
class Category:
    name: str
    tokens: int
    percent: float  # of the context window
    note: str = ""


@dataclass(frozen=True)
class Breakdown:
    model: str
    context_window: int
    counter: str
    exact: bool
    categories: tuple[Category, ...]
    used: int  # everything but reserved output and free space
    reserved_output: int
    free: int
    pressure: str
    suggestion: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def percent_used(self) -> float:
        return 100.0 * self.used / self.context_window if self.context_window else 0.0

    def tokens(self, name: str) -> int:
        return next(c.tokens for c in self.categories if c.name == name)

    def headline(self) -> str:
        """`Token usage: 180K / 200K (90%)`."""
        used, window = short_tokens(self.used), short_tokens(self.context_window)
        return f"Token usage: {used} / {window} ({self.percent_used:.0f}%)"

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "context_window": self.context_window, "counter": self.counter, "exact": self.exact,
            "used": self.used, "percent_used": round(self.percent_used, 2), "reserved_output": self.reserved_output,
            "free": self.free, "pressure": self.pressure, "suggestion": self.suggestion,
            "categories": {c.name: {"tokens": c.tokens, "percent": round(c.percent, 2), **({"note": c.note}
                                                                                         if c.note else {})}
                           for c in self.categories},
            "notes": list(self.notes),
        }


def short_tokens(n: int) -> str:
    """180000 -> "180K", 1000000 -> "1M", 950 -> "950"."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M".replace(".0M", "M")
    if n >= 1_000:
        return f"{n / 1_000:.0f}K" if n >= 10_000 else f"{n / 1_000:.1f}K".replace(".0K", "K")
    return str(n)


def is_memory(message: Message) -> bool:
    """A user message that only carries injected memory/bootstrap files."""
    texts = [b.text for b in message.blocks if isinstance(b, Text)]
    return message.role == "user" and bool(texts) and len(texts) == len(message.blocks) and all(
        t.lstrip().startswith("<system-reminder>") and any(marker in t for marker in MEMORY_MARKERS) for t in texts)


def category_of(message: Message) -> str:
    if message.role == "system":
        return "system_prompt"
    if message.role == "tool" or message.tool_results:
        return "tool_results"
    if is_memory(message):
        return "memory_files"
    if message.meta.get("summary") or message.meta.get("kind") == "summary":
        return "summary"
    return "messages"


def pressure_level(used: int, window: int, reserved: int, warn_share: float = WARN_SHARE,
                   compact_share: float = COMPACT_SHARE) -> str:
    usable = max(window - reserved, 1)
    if used > usable:
        return "over"
    if used >= compact_share * usable:
        return "compact_due"
    if used >= warn_share * usable:
        return "warn"
    return "ok"


def usage_breakdown(
    messages: Sequence[Message],
    *,
    model: str | ModelInfo | None = None,
    counter: TokenCounter | None = None,
    system_prompt: str | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    memory: Mapping[str, str] | None = None,
    summary: str | None = None,
    reserve_output: int | None = None,
    extra: Mapping[str, tuple[int, str]] | None = None,
    warn_share: float = WARN_SHARE,
    compact_share: float = COMPACT_SHARE,
) -> Breakdown:
    """Count a context by category. `messages` are the conversation the model sees; system messages
    in it count as system prompt, tool messages as tool results, injected memory files as memory.
    `memory` maps file names to the texts of bootstrap files sent outside the messages. `extra`
    adds tokens known from elsewhere to a category, with a note (e.g. an inferred system prompt).
    The counter defaults to the model's best one (`counter_for`)."""
    from ctxwin.tokens import counter_for  # the package root builds counters; this module is below it

    info = model if isinstance(model, ModelInfo) else model_info(model)
    counter = counter or counter_for(info.name if info.known else None)
    totals = dict.fromkeys(CATEGORIES, 0)
    notes = dict.fromkeys(CATEGORIES, "")
    if system_prompt:
        totals["system_prompt"] += SYSTEM_MESSAGE_TOKENS + counter.count_text(system_prompt)
    if tools:
        totals["tool_schemas"] += counter.count_text(json.dumps(list(tools), ensure_ascii=False, sort_keys=True))
    for text in (memory or {}).values():
        totals["memory_files"] += counter.count_text(text)
    if summary:
        totals["summary"] += SYSTEM_MESSAGE_TOKENS + counter.count_text(summary)
    for message in messages:
        totals[category_of(message)] += counter.count_message(message)
    for name, (tokens, note) in (extra or {}).items():
        totals[name] += tokens
        notes[name] = note
    window = info.context_window
    reserved = min(info.max_output, RESERVE_CAP) if reserve_output is None else reserve_output
    used = sum(totals[name] for name in CATEGORIES[:6])
    free = max(window - used - reserved, 0)
    totals["reserved_output"], totals["free_space"] = reserved, free
    level = pressure_level(used, window, reserved, warn_share, compact_share)
    categories = tuple(Category(name, totals[name], 100.0 * totals[name] / window if window else 0.0, notes[name])
                       for name in CATEGORIES)
    extra_notes = () if info.known else (f"unknown model {info.name!r}: limits are a conservative default",)
    return Breakdown(info.name, window, counter.name, counter.exact, categories, used, reserved, free, level,
                     SUGGESTIONS[level], extra_notes)
