"""The memory wiki (OpenClaw's Memory-Wiki): `memory/wiki/<topic>.md`, one page per kind of fact,
written by `ctxwin memory consolidate` from its facts.

Each page holds every fact of its topic: the current ones first (all of them, where MEMORY.md holds
only the best ranked within its cap), then the history: facts superseded, with the day they were
stated and the day they were superseded ("superseded 2026-11-30"), and tasks done, with the day they
were opened and closed. Every fact line ends with its refs (`memory/2026-11-30.md:12`,
`entry:<id>@<session>`), which `memory_get` resolves to the statements it came from. The pages are
memory files: `memory_search` indexes them like the notes.

Pure: facts in, page text out (`pages`); `consolidate` writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxwin.memory.consolidate.extract import Kind
from ctxwin.memory.consolidate.facts import Fact, information, rank

WIKI_DIR = "wiki"
"""Under memory/: `memory/wiki/<topic>.md`."""
MAX_REFS_SHOWN = 6
"""Refs written per wiki line: the first statement and the latest ones (the state keeps them all)."""


@dataclass(frozen=True, slots=True)
class Topic:
    """A section of MEMORY.md and its wiki page: the kinds it holds, its heading, its page's name."""

    page: str
    heading: str
    kinds: tuple[Kind, ...]


TOPICS: tuple[Topic, ...] = (
    Topic("preferences", "Preferences and constraints", ("preference", "constraint")),
    Topic("decisions", "Decisions", ("decision",)),
    Topic("project", "Project facts", ("project",)),
    Topic("people", "People", ("person",)),
    Topic("events", "Dates and events", ("event",)),
    Topic("tasks", "Open tasks", ("task",)),
    Topic("notes", "Notes", ("note",)),
)
TOPIC_OF: dict[Kind, Topic] = {kind: topic for topic in TOPICS for kind in topic.kinds}
PAGE_NOTE = ("<!-- Written by ctxwin memory consolidate from memory/*.md and the session logs; edits here are "
             "kept in memory/archive/ and read as notes. Each line ends with its sources: memory_get reads them. -->")


def page_path(topic: Topic) -> str:
    """The page's path relative to the workspace."""
    return f"memory/{WIKI_DIR}/{topic.page}.md"


def refs_text(refs: Sequence[str]) -> str:
    shown = list(refs) if len(refs) <= MAX_REFS_SHOWN else [refs[0], *refs[-(MAX_REFS_SHOWN - 1):]]
    more = f" (+{len(refs) - len(shown)} more)" if len(refs) > len(shown) else ""
    return " ".join(f"[{r}]" for r in shown) + more


def _stated(fact: Fact) -> str:
    times = f", {fact.mentions} times" if fact.mentions > 1 else ""
    if fact.first_day == fact.last_day:
        return f"stated {fact.first_day.isoformat()}{times}"
    return f"stated {fact.first_day.isoformat()} to {fact.last_day.isoformat()}{times}"


def current_line(fact: Fact) -> str:
    return f"- {fact.text} ({_stated(fact)}) {refs_text(fact.refs)}"


def history_line(fact: Fact, by: Fact | None) -> str:
    if fact.status == "done":
        when = f"opened {fact.first_day.isoformat()}, done {fact.ended.isoformat() if fact.ended else '?'}"
        if fact.refs == [fact.ended_ref]:
            when = f"done {fact.ended.isoformat() if fact.ended else '?'}"
        return f"- [x] {fact.text} ({when}) {refs_text(fact.refs)}"
    ended = fact.ended.isoformat() if fact.ended else "?"
    replaced = f"; now: {_short(by.text)}" if by is not None else ""
    refs = list(fact.refs) + ([fact.ended_ref] if fact.ended_ref and fact.ended_ref not in fact.refs else [])
    return f"- {fact.text} ({_stated(fact)}, superseded {ended}{replaced}) {refs_text(refs)}"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def pages(facts: Sequence[Fact]) -> dict[str, str]:
    """Every topic's page (path relative to the workspace -> text) that has at least one fact."""
    if not facts:
        return {}
    by_id = {f.id: f for f in facts}
    newest = max(f.last_day for f in facts)
    info = information(facts)
    out: dict[str, str] = {}
    for topic in TOPICS:
        mine = [f for f in facts if f.kind in topic.kinds]
        if not mine:
            continue
        current = sorted((f for f in mine if f.status == "current"),
                         key=lambda f: (-rank(f, newest, info[f.id]), f.first_day, f.id))
        past = sorted((f for f in mine if f.status != "current"), key=lambda f: (f.ended or f.first_day, f.id),
                      reverse=True)
        title = "Tasks" if topic.page == "tasks" else topic.heading
        lines = [f"# {title}", "", PAGE_NOTE]
        if current:
            lines += ["", f"## {'Open' if topic.page == 'tasks' else 'Current'}", ""]
            lines += grouped(_groups(current, current_line))
        if past:
            lines += ["", f"## {'Done' if topic.page == 'tasks' else 'History'}", ""]
            lines += grouped(_groups(past, lambda f: history_line(f, by_id.get(f.by or ""))))
        out[page_path(topic)] = "\n".join(lines).rstrip() + "\n"
    return out


def _groups(facts: Sequence[Fact], line: Callable[[Fact], str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for fact in facts:
        out.setdefault(fact.subject or "", []).append(line(fact))
    return out


def grouped(groups: dict[str, list[str]]) -> list[str]:
    """The lines of one section: those about no one in particular first, then one `### <name>` group
    per speaker of a dialogue (named once, not on every line), names in order."""
    out = list(groups.get("", []))
    for name in sorted(n for n in groups if n):
        out += ([""] if out else []) + [f"### {name}", ""] + groups[name]
    return out
