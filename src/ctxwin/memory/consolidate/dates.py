"""Relative dates made absolute against the day a note or message was written.

"yesterday" in a note of 2026-11-30 is 2026-11-29 for ever; consolidated memory outlives the day, so
every relative phrase is replaced by the date it meant: `resolve("Deploy tomorrow", date(2026, 11, 30))`
is `"Deploy on 2026-12-01"`. Phrases: today / tonight / this morning, tomorrow, yesterday, the day
after tomorrow / before yesterday, in N days / weeks, N days / weeks / months / years ago, next / last
/ this <weekday>, next / last / this week / weekend / month / year. A bare weekday ("on Friday") is
left as written: it can mean the last one or the next.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a few": 3}
PREPOSITIONS = frozenset({"on", "by", "until", "till", "since", "from", "before", "after", "for", "of", "to"})
"""Words after which a resolved day drops its own "on" ("by tomorrow" -> "by 2026-12-01")."""

_NUM = r"(?P<{name}>\d{{1,3}}|a couple of|a few|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_DAY = "|".join(WEEKDAYS)
_PATTERN = re.compile(
    r"\b(?:"
    r"(?P<after>the day after tomorrow)|(?P<before>the day before yesterday)"
    r"|(?P<today>today|tonight|this (?:morning|afternoon|evening))"
    r"|(?P<tomorrow>tomorrow)|(?P<yesterday>yesterday|last night)"
    rf"|(?P<in>in {_NUM.format(name='in_n')} (?P<in_unit>days?|weeks?)(?: time)?)"
    rf"|(?P<ago>{_NUM.format(name='ago_n')} (?P<ago_unit>days?|weeks?|months?|years?) ago)"
    rf"|(?P<rel>next|last|this|coming|past) (?P<what>{_DAY}|week(?:end)?|month|year)"
    r")\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Resolved:
    """`text` with its relative dates replaced; `days` the dates it named (a week or month: its
    first day), in order."""

    text: str
    days: tuple[date, ...]


def _count(value: str) -> int:
    value = value.lower()
    return int(value) if value.isdigit() else NUMBERS[value]


def _month_start(day: date, delta: int) -> date:
    index = day.year * 12 + day.month - 1 + delta
    return date(index // 12, index % 12 + 1, 1)


def _phrase(match: re.Match[str], today: date) -> tuple[str, date]:
    """The absolute wording of one relative phrase, and the day it names."""
    g = match.groupdict()
    if g["after"]:
        return _on(today + timedelta(days=2))
    if g["before"]:
        return _on(today - timedelta(days=2))
    if g["today"]:
        return _on(today)
    if g["tomorrow"]:
        return _on(today + timedelta(days=1))
    if g["yesterday"]:
        return _on(today - timedelta(days=1))
    if g["in"]:
        n = _count(g["in_n"])
        step = 7 if g["in_unit"].lower().startswith("week") else 1
        return _on(today + timedelta(days=n * step))
    if g["ago"]:
        n = _count(g["ago_n"])
        unit = g["ago_unit"].lower()
        if unit.startswith("day"):
            return _on(today - timedelta(days=n))
        if unit.startswith("week"):
            return _on(today - timedelta(days=7 * n))
        if unit.startswith("month"):
            first = _month_start(today, -n)
            return f"in {MONTHS[first.month - 1]} {first.year}", first
        return f"in {today.year - n}", date(today.year - n, 1, 1)
    which, what = g["rel"].lower(), g["what"].lower()
    step = {"next": 1, "coming": 1, "last": -1, "past": -1, "this": 0}[which]
    if what in WEEKDAYS:
        target = WEEKDAYS.index(what)
        offset = target - today.weekday()
        if step > 0:
            offset = offset if offset > 0 else offset + 7
        elif step < 0:
            offset = offset if offset < 0 else offset - 7
        return _on(today + timedelta(days=offset))
    if what == "week":
        monday = today - timedelta(days=today.weekday()) + timedelta(days=7 * step)
        return f"the week of {monday.isoformat()}", monday
    if what == "weekend":
        saturday = today + timedelta(days=5 - today.weekday()) + timedelta(days=7 * step)
        return f"the weekend of {saturday.isoformat()}", saturday
    if what == "month":
        first = _month_start(today, step)
        return f"in {MONTHS[first.month - 1]} {first.year}", first
    return f"in {today.year + step}", date(today.year + step, 1, 1)


def _on(day: date) -> tuple[str, date]:
    return f"on {day.isoformat()}", day


def resolve(text: str, today: date) -> Resolved:
    """`text` with every relative date phrase replaced by the absolute date it meant on `today`."""
    days: list[date] = []
    out: list[str] = []
    at = 0
    for match in _PATTERN.finditer(text):
        wording, day = _phrase(match, today)
        before = text[at:match.start()]
        previous = before.rstrip().rsplit(" ", 1)[-1].lower() if before.strip() else ""
        if previous in PREPOSITIONS and wording.startswith(("on ", "in ")):
            wording = wording[3:]
        if match.group(0)[0].isupper() and not before.strip():
            wording = wording[0].upper() + wording[1:]
        out.append(before)
        out.append(wording)
        days.append(day)
        at = match.end()
    if not days:
        return Resolved(text, ())
    out.append(text[at:])
    return Resolved("".join(out), tuple(days))
