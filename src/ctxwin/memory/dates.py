"""Dates as the index sees them: the day a note or a message belongs to, relative dates in its text
resolved against that day ("yesterday" in a note of 2023-05-08 is 2023-05-07), the words a day is
searched by, and the dates a query names. Pure functions of text.

Patterns run on RE2 (`google-re2`): query text comes from a model or a user, and RE2 matches in time
linear in it, whatever it holds.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta

import re2

from ctxwin.paths import re2_options

MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): number for number, name in enumerate(calendar.month_abbr) if name})
MONTHS["sept"] = 9
WEEKDAYS = {name.lower(): number for number, name in enumerate(calendar.day_name)}
_MONTH = "(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|" \
         "jun|jul|aug|sept|sep|oct|nov|dec)"
_WEEKDAY = "(monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_NUMBER = "(a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few|[0-9]{1,2})"
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "few": 3}

_ISO = re2.compile(r"\b([0-9]{4})-([0-9]{2})-([0-9]{2})\b", re2_options())
_DAY_MONTH_YEAR = re2.compile(rf"(?i)\b([0-9]{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH}\.?,?\s+([0-9]{{4}})\b", re2_options())
_MONTH_DAY_YEAR = re2.compile(rf"(?i)\b{_MONTH}\.?\s+([0-9]{{1,2}})(?:st|nd|rd|th)?,?\s+([0-9]{{4}})\b", re2_options())
_MONTH_YEAR = re2.compile(rf"(?i)\b{_MONTH}\.?,?\s+(?:of\s+)?([0-9]{{4}})\b", re2_options())
_RELATIVE = re2.compile(
    rf"(?i)\b(yesterday|today|tonight|tomorrow|last night|this morning|this evening|"
    rf"(?:last|this|next|past) (?:week|weekend|month|year|{_WEEKDAY[1:-1]})|"
    rf"{_NUMBER} (?:days?|weeks?|months?|years?) ago|"
    rf"(?:in|after) {_NUMBER} (?:days?|weeks?|months?))\b", re2_options())
_AGO = re2.compile(rf"(?i){_NUMBER} (day|week|month|year)s? ago", re2_options())
_AHEAD = re2.compile(rf"(?i)(?:in|after) {_NUMBER} (day|week|month)s?", re2_options())
MAX_RELATIVE = 8
"""Relative dates resolved per unit (a long message cites few; this bounds the work on one that
repeats 'yesterday' thousands of times)."""


@dataclass(frozen=True, slots=True)
class Resolved:
    """A relative date in a text and what it means on the text's day: a day, or a span of days
    (`start` to `end`, inclusive) for a week, a month, a year."""

    phrase: str
    start: date
    end: date

    def label(self) -> str:
        """`yesterday = 2023-05-07`, `last month = April 2023`, `last year = 2022`."""
        if self.start == self.end:
            return f"{self.phrase} = {self.start.isoformat()}"
        if self.start.day == 1 and self.start.month == 1 and self.end == date(self.start.year, 12, 31):
            return f"{self.phrase} = {self.start.year}"
        last = calendar.monthrange(self.start.year, self.start.month)[1]
        if self.start.day == 1 and self.end == self.start.replace(day=last):
            return f"{self.phrase} = {calendar.month_name[self.start.month]} {self.start.year}"
        return f"{self.phrase} = {self.start.isoformat()}..{self.end.isoformat()}"


def _safe(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _full_dates(text: str, every: bool) -> Iterator[tuple[int, int, date]]:
    """(start, end, day) of the full dates written in `text`, each pattern's first only unless `every`."""
    for pattern, order in ((_ISO, "ymd"), (_DAY_MONTH_YEAR, "dmy"), (_MONTH_DAY_YEAR, "mdy")):
        for match in pattern.finditer(text):
            if order == "ymd":
                day = _safe(int(match.group(1)), int(match.group(2)), int(match.group(3)))
            elif order == "dmy":
                day = _safe(int(match.group(3)), MONTHS[match.group(2).lower()], int(match.group(1)))
            else:
                day = _safe(int(match.group(3)), MONTHS[match.group(1).lower()], int(match.group(2)))
            if day is not None:
                yield match.start(), match.end(), day
                if not every:
                    break


def first_date(text: str) -> date | None:
    """The first full date written in `text` (`2023-05-08`, `8 May, 2023`, `May 8th 2023`), or None."""
    found = [(start, day) for start, _end, day in _full_dates(text, every=False)]
    return min(found)[1] if found else None


def timestamp_day(timestamp: str | None) -> date | None:
    """The day of an ISO timestamp or date (None when there is none or it does not parse)."""
    if not timestamp:
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).date() if len(timestamp) > 10 \
            else date.fromisoformat(timestamp)
    except ValueError:
        return None


def _month_span(year: int, month: int) -> tuple[date, date]:
    return date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1])


def _shift_months(day: date, months: int) -> tuple[int, int]:
    total = day.year * 12 + day.month - 1 + months
    return total // 12, total % 12 + 1


def _count(word: str) -> int:
    word = word.lower()
    return _NUMBERS.get(word) or int(word)


def _resolve(phrase: str, day: date) -> tuple[date, date] | None:
    p = phrase.lower()
    if p in ("today", "tonight", "this morning", "this evening"):
        return day, day
    if p in ("yesterday", "last night"):
        return day - timedelta(days=1), day - timedelta(days=1)
    if p == "tomorrow":
        return day + timedelta(days=1), day + timedelta(days=1)
    ago = _AGO.fullmatch(p)
    if ago is not None:
        n, unit = _count(ago.group(1)), ago.group(2)
        if unit == "day":
            return day - timedelta(days=n), day - timedelta(days=n)
        if unit == "week":
            start = day - timedelta(weeks=n)
            return start - timedelta(days=start.weekday()), start - timedelta(days=start.weekday()) + timedelta(days=6)
        if unit == "month":
            return _month_span(*_shift_months(day, -n))
        return date(day.year - n, 1, 1), date(day.year - n, 12, 31)
    ahead = _AHEAD.fullmatch(p)
    if ahead is not None:
        n, unit = _count(ahead.group(1)), ahead.group(2)
        if unit == "day":
            return day + timedelta(days=n), day + timedelta(days=n)
        if unit == "week":
            return day + timedelta(weeks=n), day + timedelta(weeks=n)
        return _month_span(*_shift_months(day, n))
    which, _, what = p.partition(" ")
    step = {"last": -1, "past": -1, "this": 0, "next": 1}[which]
    if what == "week":
        monday = day - timedelta(days=day.weekday()) + timedelta(weeks=step)
        return monday, monday + timedelta(days=6)
    if what == "weekend":
        saturday = day - timedelta(days=day.weekday()) + timedelta(days=5) + timedelta(weeks=step)
        return saturday, saturday + timedelta(days=1)
    if what == "month":
        return _month_span(*_shift_months(day, step))
    if what == "year":
        return date(day.year + step, 1, 1), date(day.year + step, 12, 31)
    target = WEEKDAYS[what]
    if step < 0:  # the most recent such weekday before this day
        back = (day.weekday() - target) % 7 or 7
        return day - timedelta(days=back), day - timedelta(days=back)
    if step > 0:
        ahead_days = (target - day.weekday()) % 7 or 7
        return day + timedelta(days=ahead_days), day + timedelta(days=ahead_days)
    this = day - timedelta(days=day.weekday()) + timedelta(days=target)
    return this, this


def resolve_relative(text: str, day: date | None) -> list[Resolved]:
    """The relative dates of `text` ("yesterday", "last Friday", "two weeks ago", "next month")
    resolved against `day`, in order, each phrase once; none without a day."""
    if day is None:
        return []
    out: list[Resolved] = []
    seen: set[str] = set()
    for match in _RELATIVE.finditer(text):
        phrase = match.group(0)
        key = phrase.lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            span = _resolve(phrase, day)
        except (ValueError, OverflowError):  # before year 1 or after 9999: no such day to search by
            span = None
        if span is not None:
            out.append(Resolved(phrase, *span))
        if len(out) >= MAX_RELATIVE:
            break
    return out


def day_words(day: date) -> str:
    """The words a day is found by: `2023-05-08 8 May 2023 Monday`."""
    return f"{day.isoformat()} {day.day} {calendar.month_name[day.month]} {day.year} {calendar.day_name[day.weekday()]}"


def span_words(start: date, end: date) -> str:
    """The words of a resolved span: its day's words, or the month and year it covers."""
    if start == end:
        return day_words(start)
    if start.year == end.year and start.month == end.month:
        return f"{calendar.month_name[start.month]} {start.year}"
    return f"{start.isoformat()} {end.isoformat()} {start.year}"


def query_spans(query: str) -> list[tuple[date, date]]:
    """The days a query names explicitly (`2023-05-08`, `8 May 2023`, `May 2023`), as inclusive
    spans; a month named without a day is the whole month."""
    spans: list[tuple[date, date]] = []
    taken: list[tuple[int, int]] = []
    for start, end, day in _full_dates(query, every=True):
        spans.append((day, day))
        taken.append((start, end))
    for match in _MONTH_YEAR.finditer(query):
        if any(start <= match.start() < end for start, end in taken):
            continue
        try:
            spans.append(_month_span(int(match.group(2)), MONTHS[match.group(1).lower()]))
        except ValueError:  # "May 0000": no such month
            continue
    return spans
