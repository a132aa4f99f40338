"""MEMORY.md from the facts: the current ones, best ranked first, within the bootstrap cap.

One section per topic (the wiki's order: preferences and constraints, decisions, project facts,
people, dates and events, open tasks, notes); each line is a current fact, the day it was last stated
and the ref of that statement. Facts are taken by rank (`facts.rank`: kind, content, restatements,
recency) until the next line would pass `max_chars`; the rest are in the wiki, which the first line
says. Superseded facts and tasks done are never here (their history is in the wiki).

Pure and deterministic: the same facts give the same bytes on any day.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxwin.memory.consolidate.facts import Fact, information, rank
from ctxwin.memory.wiki import TOPIC_OF, TOPICS, WIKI_DIR, grouped

MAX_MEMORY_CHARS = 12_000
"""MEMORY.md's size cap: the per-file bootstrap cap of the OpenClaw version the design cites (the
bootstrap policy's own default, 20,000, is larger, so a MEMORY.md under this is never cut)."""
DENSITY = 0.5
HEADER_RESERVE = 400
"""Characters kept for the title and the first line, whose counts are known only at the end."""


@dataclass(frozen=True, slots=True)
class Rendered:
    """MEMORY.md's text, and which current facts it holds (`kept`) and leaves to the wiki (`left`)."""

    text: str
    kept: tuple[str, ...]
    left: tuple[str, ...]


def memory_line(fact: Fact) -> str:
    """`- <fact> (<day last stated>) [<its ref>]`; the day is left out when the ref is that day's note."""
    ref = fact.refs[-1]
    if fact.kind == "task":
        return f"- [ ] {fact.text} (opened {fact.first_day.isoformat()}) [{ref}]"
    day = fact.last_day.isoformat()
    return f"- {fact.text} [{ref}]" if ref.startswith(f"memory/{day}.md:") else f"- {fact.text} ({day}) [{ref}]"


def _header(newest: str, kept: int, left: int) -> list[str]:
    rest = f"; {left} more current facts and all history are in memory/{WIKI_DIR}/" if left else \
        f"; the history is in memory/{WIKI_DIR}/"
    return ["# Memory", "",
            f"<!-- Consolidated from memory/*.md and the session logs through {newest} by ctxwin memory consolidate: "
            f"{kept} current facts{rest}. Each line ends with its source, which memory_get reads. -->"]


def render_memory(facts: Sequence[Fact], max_chars: int = MAX_MEMORY_CHARS) -> Rendered:
    """MEMORY.md for `facts` (see the module docstring), at most `max_chars` characters."""
    current = [f for f in facts if f.status == "current"]
    if not current:
        return Rendered("# Memory\n", (), ())
    newest = max(f.last_day for f in facts)
    info = information(facts)
    ranked = sorted(current, key=lambda f: (-rank(f, newest, info[f.id]) / len(memory_line(f)) ** DENSITY,
                                            f.first_day, f.id))
    budget = max_chars - HEADER_RESERVE
    used = 0
    chosen: dict[str, dict[str, list[str]]] = {}  # topic -> subject ("" first) -> lines
    kept: list[str] = []
    left: list[str] = []
    for fact in ranked:
        line = memory_line(fact)
        topic = TOPIC_OF[fact.kind]
        group = fact.subject or ""
        cost = len(line) + 1
        cost += 0 if topic.page in chosen else len(topic.heading) + 5
        cost += 0 if group in chosen.get(topic.page, {}) or not group else len(group) + 6
        if used + cost > budget:
            left.append(fact.id)
            continue
        used += cost
        chosen.setdefault(topic.page, {}).setdefault(group, []).append(line)
        kept.append(fact.id)
    lines = _header(newest.isoformat(), len(kept), len(left))
    for topic in TOPICS:
        if topic.page in chosen:
            lines += ["", f"## {topic.heading}", ""]
            lines += grouped(chosen[topic.page])
    text = "\n".join(lines) + "\n"
    return Rendered(text, tuple(kept), tuple(left))

