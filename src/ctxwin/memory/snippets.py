"""What a result shows, within the caller's budget of characters: pure functions.

A result is its matching unit (a turn, a section, a paragraph) whole when it fits; when it does not,
only its lines that hold the query's words, the ones holding most of them first (its first lines
when none does: a hit by meaning alone), shown in file order with `…` where lines were skipped; a
line longer than the room is cut around its first match.
Then, if room is left, the lines of the unit before and after it that hold at least two of the
query's words (or the only one), as context. Nothing is shown that neither is the unit nor matches.

The budget (`max_chars`) is for all results together, in rank order: each result takes what it needs
up to its share, and what it leaves goes to the results after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CHARS_PER_RESULT = 400
"""The default budget is this many characters per result asked for (2,000 for k = 5)."""
MIN_RESULT_CHARS = 80
"""A result with less room left than this is not shown (the budget is spent)."""
CONTEXT_LINES = 2
"""Lines of each neighbouring unit shown as context, at most."""
GAP = "…"

# Python's re: one character class repeated matches in linear time, and its C loop is ~20x faster per
# word than RE2's Python wrapper (this runs over every unit the search agent ranks).
_WORD = re.compile(r"[^\W_]+")
STOPWORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "could", "did", "do", "does", "for",
    "from", "had", "has", "have", "he", "her", "his", "how", "i", "if", "in", "into", "is", "it", "its", "me",
    "my", "of", "on", "or", "our", "she", "so", "that", "the", "their", "them", "then", "there", "they", "this",
    "to", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "whose", "why", "will", "with",
    "would", "you", "your", "about", "after", "before", "any", "all", "also", "just", "than", "these", "those",
    "very", "much", "more", "most", "some",
))


def stem(word: str) -> str:
    """A crude English stem for matching lines to a query (`painted`, `paints` -> `paint`; `vehicle`,
    `vehicles` -> `vehicl`; `cities` -> `city`); the index itself ranks with FTS5's Porter stemmer.
    A final `e` goes too, so a word and its plural agree (`vehicles` lost only its `es` before)."""
    w = word.lower()
    for suffix in ("ingly", "edly", "ing", "ies", "ied", "ed", "ly", "s"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix) and not (suffix == "s" and w.endswith("ss")):
            w = w[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
            break
    return w[:-1] if len(w) > 3 and w.endswith("e") else w


def query_stems(query: str) -> frozenset[str]:
    """The query's content words, stemmed (stopwords left out)."""
    return frozenset(stem(w) for w in _WORD.findall(query.lower()) if w not in STOPWORDS)


def word_stems(text: str, memo: dict[str, str] | None = None) -> frozenset[str]:
    """The stems of every word of `text` (`memo`: word -> stem, shared by the calls of one search)."""
    if memo is None:
        return frozenset(stem(w) for w in _WORD.findall(text.lower()))
    out = set()
    for word in _WORD.findall(text.lower()):
        found = memo.get(word)
        if found is None:
            found = memo[word] = stem(word)
        out.add(found)
    return frozenset(out)


def line_score(line: str, stems: frozenset[str]) -> int:
    """How many distinct query words a line holds."""
    if not stems:
        return 0
    return len(word_stems(line) & stems)


def _cut(line: str, stems: frozenset[str], room: int) -> str:
    """`room` characters of a long line around its first query word."""
    lowered = line.lower()
    at = 0
    for match in _WORD.finditer(lowered):
        if stem(match.group(0)) in stems:
            at = match.start()
            break
    start = max(0, min(at - room // 4, len(line) - room))
    piece = line[start:start + room - 2 * len(GAP)]
    return (GAP if start else "") + piece + (GAP if start + len(piece) < len(line) else "")


@dataclass(frozen=True, slots=True)
class Shown:
    """The text of one result and the lines of the unit it shows (`lines`: 1-based, of the unit's text)."""

    text: str
    unit_lines: tuple[int, ...]
    context: bool


def unit_text(text: str, stems: frozenset[str], room: int) -> tuple[str, tuple[int, ...]]:
    """The unit within `room` characters: whole, or its matching lines first (see the module doc)."""
    lines = text.split("\n")
    if len(text) <= room:
        return text, tuple(range(1, len(lines) + 1))
    scores = [line_score(line, stems) for line in lines]
    order = sorted((i for i in range(len(lines)) if scores[i] > 0), key=lambda i: (-scores[i], i))
    if not order:  # found by meaning alone: its first lines
        order = list(range(len(lines)))
    # What a line costs once shown: itself, its newline, and a `…` line with its newline before it
    # (there is at most one gap more than lines: the trailing one, reserved up front). So the
    # shown text never exceeds `room`, however the picked lines fall.
    gap = len(GAP) + 1
    picked: dict[int, str] = {}
    used = len(GAP)
    for i in order:
        cost = len(lines[i]) + 1 + gap
        if used + cost <= room:
            picked[i] = lines[i]
            used += cost
        elif not picked:
            picked[i] = _cut(lines[i], stems, room - used - 2 * gap)
            used += len(picked[i]) + 1 + gap
        if room - used < MIN_RESULT_CHARS // 2:
            break
    out: list[str] = []
    last = -1
    for i in sorted(picked):
        if (out and i != last + 1) or (not out and i > 0):
            out.append(GAP)
        out.append(picked[i])
        last = i
    if last < len(lines) - 1:
        out.append(GAP)
    return "\n".join(out), tuple(i + 1 for i in sorted(picked))


def context_lines(text: str, stems: frozenset[str], room: int, *, last: bool) -> str:
    """At most `CONTEXT_LINES` lines of a neighbouring unit that hold two or more of the query's
    words (one when the query has only one), within `room`; the lines nearest the result first."""
    need = 1 if len(stems) <= 1 else 2
    lines = text.split("\n")
    indexed = list(enumerate(lines))
    if last:
        indexed.reverse()
    picked: list[int] = []
    used = 0
    for i, line in indexed:
        if len(picked) >= CONTEXT_LINES:
            break
        if line_score(line, stems) >= need and used + len(line) + 1 <= room:
            picked.append(i)
            used += len(line) + 1
    return "\n".join(lines[i] for i in sorted(picked))


def shown(text: str, before: str | None, after: str | None, stems: frozenset[str], room: int,
          context: bool = True) -> Shown:
    """One result's text within `room` characters: the unit, then context from its neighbours."""
    body, lines = unit_text(text, stems, room)
    parts = [body]
    added = False
    if context:
        left = room - len(body)
        if before and left > MIN_RESULT_CHARS:
            piece = context_lines(before, stems, left // 2, last=True)
            if piece:
                parts.insert(0, piece)
                left -= len(piece) + 1
                added = True
        if after and left > MIN_RESULT_CHARS:
            piece = context_lines(after, stems, left, last=False)
            if piece:
                parts.append(piece)
                added = True
    return Shown("\n".join(parts), lines, added)


def room_for(remaining: int, results_left: int) -> int:
    """What the next result may take: its share of what is left, and at least `CHARS_PER_RESULT`
    (so a large k does not cut every unit short), never more than is left."""
    return min(remaining, max(CHARS_PER_RESULT, remaining // max(results_left, 1)))
