"""Relative dates written out as the dates they meant, in the statement itself.

"yesterday" in a note of 2026-11-30 is 2026-11-29 for ever; consolidated memory outlives the day, so
each relative phrase that `ctxwin.memory.dates.resolve_relative` finds (the index's resolver: one set
of phrases for both) is replaced by its date: `resolve("Deploy tomorrow", date(2026, 11, 30))` is
`"Deploy on 2026-12-01"`. A day reads "on 2026-12-01" ("by 2026-12-01" after a preposition), a week
"the week of <its Monday>", a weekend "the weekend of <its Saturday>", a month "in November 2026", a
year "in 2026".
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, timedelta

from ctxwin.memory.dates import Resolved as Span
from ctxwin.memory.dates import resolve_relative

PREPOSITIONS = frozenset({"on", "by", "until", "till", "since", "from", "before", "after", "for", "of", "to"})
"""Words after which a resolved day drops its own "on" ("by tomorrow" -> "by 2026-12-01")."""


@dataclass(frozen=True, slots=True)
class Resolved:
    """`text` with its relative dates replaced; `days` the dates they named (a span: its first day)."""

    text: str
    days: tuple[date, ...]


def wording(span: Span) -> str:
    """What a resolved phrase is written as (see the module docstring)."""
    start, end = span.start, span.end
    if start == end:
        return f"on {start.isoformat()}"
    if start.weekday() == 0 and end == start + timedelta(days=6):
        return f"the week of {start.isoformat()}"
    if start.weekday() == 5 and end == start + timedelta(days=1):
        return f"the weekend of {start.isoformat()}"
    if start.day == 1 and end == start.replace(day=calendar.monthrange(start.year, start.month)[1]):
        return f"in {calendar.month_name[start.month]} {start.year}"
    if (start.month, start.day, end.month, end.day) == (1, 1, 12, 31) and start.year == end.year:
        return f"in {start.year}"
    return f"between {start.isoformat()} and {end.isoformat()}"


def resolve(text: str, today: date) -> Resolved:
    """`text` with every relative date phrase replaced by the date it meant on `today`."""
    spans = {s.phrase.lower(): s for s in resolve_relative(text, today)}
    if not spans:
        return Resolved(text, ())
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(p) for p in sorted(spans, key=len, reverse=True)) + r")\b",
                         re.IGNORECASE)
    days: list[date] = []

    def replace(match: re.Match[str]) -> str:
        span = spans[match.group(0).lower()]
        days.append(span.start)
        words = wording(span)
        before = text[:match.start()].rstrip()
        if before.rsplit(" ", 1)[-1].lower() in PREPOSITIONS and words.startswith(("on ", "in ")):
            words = words[3:]
        if not before and match.group(0)[0].isupper():
            words = words[0].upper() + words[1:]
        return words

    return Resolved(pattern.sub(replace, text), tuple(days))
