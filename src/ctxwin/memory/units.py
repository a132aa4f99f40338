"""The grain the index searches at: a text cut into units the way people ask about it. Pure functions.

- A heading section that is short (a record, a small note section) is one unit, its heading included.
- Otherwise each paragraph is a unit, with the path of headings above it kept beside it.
- A paragraph of dialogue turns (`Caroline: ...`, `**Mel** (1:56 pm): ...`) or of list items is cut
  into one unit per turn or item, the speaker kept.
- A fenced code block is one unit (cut into windows of lines when it is long).
- Anything longer than `UNIT_MAX_CHARS` is cut into windows of whole lines; a single line longer than
  that into pieces (they share its line number).

Lines are 1-based and inclusive. Patterns run on RE2 (memory files are written by models too).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import re2

from ctxwin.paths import re2_options

UNIT_MAX_CHARS = 800
"""The longest unit: longer paragraphs and blocks are cut into windows of whole lines."""
SECTION_MAX_CHARS = 600
"""A heading section up to this size (heading included) stays one unit."""
PARAGRAPH_MAX_CHARS = 400
"""A paragraph of turns or list items longer than this is cut into one unit per turn or item."""

_HEADING = re2.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re2_options())
_FENCE = re2.compile(r"^\s{0,3}(```|~~~)", re2_options())
_NAME_WORD = r"\p{Lu}[\pL\pN'.\-]*"
_TURN = re2.compile(rf"^\s*(?:[-*+]\s+)?(?:\*\*|__)?({_NAME_WORD}(?: {_NAME_WORD})?(?: {_NAME_WORD})?)"
                    r"(?:\*\*|__)?(?:\s*\([^)\n]*\))?(?:\*\*|__)?\s*:\s*\S", re2_options())
SPEAKER_MAX_CHARS = 40
"""A longer name before a colon is a sentence, not a speaker."""
_ITEM = re2.compile(r"^\s{0,3}(?:[-*+]|[0-9]{1,3}[.)])\s+\S", re2_options())
_ITEM_FIRST = frozenset("-*+0123456789")


@dataclass(frozen=True, slots=True)
class Unit:
    """One searchable piece of a text: its lines, its speaker (dialogue), the headings above it."""

    start_line: int
    end_line: int
    text: str
    kind: str  # section, paragraph, turn, item, code, window
    speaker: str | None = None
    heading: str = ""


def speaker_of(line: str) -> str | None:
    """The speaker of a dialogue line (`Caroline: hi`, `- **Mel** (2 pm): hi`), or None."""
    head = line[:200]
    if ":" not in head:  # the pattern is only run where it can match: this runs on every line indexed
        return None
    match = _TURN.match(head)
    return match.group(1) if match and len(match.group(1)) <= SPEAKER_MAX_CHARS else None


def _is_item(line: str) -> bool:
    return line.lstrip()[:1] in _ITEM_FIRST and _ITEM.match(line) is not None


def _heading(line: str) -> Any:  # an re2 match or None (re2 ships no types)
    return _HEADING.match(line) if line.startswith("#") else None


def _fence(line: str) -> Any:  # an re2 match or None (re2 ships no types)
    head = line[:6]
    return _FENCE.match(line) if "```" in head or "~~~" in head else None


def _has_turns(lines: list[tuple[int, str]], count: int) -> bool:
    found = 0
    for _, text in lines:
        if speaker_of(text) is not None:
            found += 1
            if found >= count:
                return True
    return False


def _pieces(number: int, line: str, limit: int) -> Iterator[tuple[int, str]]:
    if len(line) <= limit:
        yield number, line
        return
    for start in range(0, len(line), limit):
        yield number, line[start:start + limit]


def windows(lines: list[tuple[int, str]], limit: int = UNIT_MAX_CHARS) -> list[tuple[int, int, str]]:
    """Consecutive (line number, text) packed into windows of at most `limit` characters (a longer
    line is cut into pieces of its own)."""
    out: list[tuple[int, int, str]] = []
    current: list[tuple[int, str]] = []
    size = 0
    for number, line in lines:
        for piece_number, piece in _pieces(number, line, limit):
            if current and size + len(piece) + 1 > limit:
                out.append((current[0][0], current[-1][0], "\n".join(t for _, t in current)))
                current, size = [], 0
            current.append((piece_number, piece))
            size += len(piece) + 1
    if current:
        out.append((current[0][0], current[-1][0], "\n".join(t for _, t in current)))
    return [w for w in out if w[2].strip()]


@dataclass
class _Block:
    lines: list[tuple[int, str]]
    kind: str  # paragraph or code
    heading: str


def _blocks(text: str) -> Iterator[tuple[int, str, list[_Block]]]:
    """(level, heading path, blocks) per heading section, in order; the text before the first
    heading is a section of level 0. A section's heading line is the first line of its first block."""
    stack: list[tuple[int, str]] = []
    level, path = 0, ""
    blocks: list[_Block] = []
    current: list[tuple[int, str]] = []
    fence: str | None = None

    def close(kind: str = "paragraph") -> None:
        nonlocal current
        if current:
            blocks.append(_Block(current, kind, path))
            current = []

    for number, line in enumerate(text.split("\n"), start=1):
        if fence is not None:
            current.append((number, line))
            if line.strip().startswith(fence):
                fence = None
                close("code")
            continue
        opened = _fence(line)
        if opened is not None:
            close()
            fence = opened.group(1)
            current.append((number, line))
            continue
        heading = _heading(line)
        if heading is not None:
            close()
            if blocks:
                yield level, path, blocks
            blocks = []
            level = len(heading.group(1))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, heading.group(2)))
            path = " / ".join(title for _, title in stack)
            current.append((number, line))
            continue
        if not line.strip():
            close()
            continue
        current.append((number, line))
    close("code" if fence is not None else "paragraph")
    if blocks:
        yield level, path, blocks


def _split_paragraph(block: _Block) -> list[Unit]:
    lines = block.lines
    body = "\n".join(t for _, t in lines)
    speakers = [speaker_of(t) for _, t in lines]
    starts = [i for i, speaker in enumerate(speakers) if speaker is not None]
    items = [i for i, (_, t) in enumerate(lines) if _is_item(t)]
    # Sets for the membership tests below: lists made a 16,000-item tool output take 1.2 s (quadratic).
    turn_starts, item_starts = set(starts), set(items)
    cuts = starts if len(starts) >= max(1, len(lines) // 2) else items if len(items) >= 2 else []
    if len(body) <= PARAGRAPH_MAX_CHARS and not (starts and len(starts) > 1):
        cuts = []
    if not cuts:
        if len(body) <= UNIT_MAX_CHARS:
            return [Unit(lines[0][0], lines[-1][0], body, "paragraph", speakers[0], block.heading)]
        return [Unit(s, e, t, "window", None, block.heading) for s, e, t in windows(lines)]
    out: list[Unit] = []
    bounds = [0, *cuts] if cuts[0] != 0 else list(cuts)
    for n, start in enumerate(bounds):
        end = bounds[n + 1] if n + 1 < len(bounds) else len(lines)
        part = lines[start:end]
        text = "\n".join(t for _, t in part)
        if not text.strip():
            continue
        speaker = speakers[start]
        kind = "turn" if speaker is not None and start in turn_starts else "item" if start in item_starts \
            else "paragraph"
        if len(text) <= UNIT_MAX_CHARS:
            out.append(Unit(part[0][0], part[-1][0], text, kind, speaker, block.heading))
        else:
            out.extend(Unit(s, e, t, kind, speaker, block.heading) for s, e, t in windows(part))
    return out


def text_units(text: str) -> list[Unit]:
    """The units of a text, in order (see the module docstring). Empty text has none."""
    out: list[Unit] = []
    for level, heading, blocks in _blocks(text):
        lines = [line for block in blocks for line in block.lines]
        size = sum(len(t) + 1 for _, t in lines)
        if len(lines) == 1 and _heading(lines[0][1]):
            continue  # a heading with nothing under it (before its subsections)
        dialogue = _has_turns(lines, 2)
        if level and size <= SECTION_MAX_CHARS and len(blocks) <= 4 and not dialogue:
            body = "\n".join(t for _, t in lines)
            out.append(Unit(lines[0][0], lines[-1][0], body, "section", None, heading))
            continue
        for block in blocks:
            if _heading(block.lines[0][1]):
                # The heading line itself is in the heading path of the units under it.
                block = _Block(block.lines[1:], block.kind, block.heading)
                if not block.lines:
                    continue
            if block.kind == "code":
                body = "\n".join(t for _, t in block.lines)
                if len(body) <= 2 * UNIT_MAX_CHARS:
                    out.append(Unit(block.lines[0][0], block.lines[-1][0], body, "code", None, heading))
                else:
                    out.extend(Unit(s, e, t, "code", None, heading) for s, e, t in windows(block.lines))
                continue
            out.extend(_split_paragraph(block))
    return [u for u in out if u.text.strip()]
