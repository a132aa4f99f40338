"""Names the agent works with: code symbols and paths as they occur in a span's messages (decoded:
escaped output is unescaped first, so `\\nFinding` is the word "Finding" after a line break, and a
closing tag `</div>` is no path), ranked by how much of the later history uses them; and which commands
and error lines a later message refers back to."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from ctxwin.compaction.extractive.commands import COMMAND_STATE_CHARS, command_line
from ctxwin.compaction.identifiers import call_arguments, decoded, normalize, shell_command
from ctxwin.messages import Message, Text, ToolCall, ToolResult

RECENT_MESSAGES = 400  # references are looked for in the span's last this many messages
RECENT_TEXT_CHARS = 20_000  # of each message, at most this much is scanned for references
RECENT_PER_LINE = 8  # references per line of the section (a line is the unit the budget trims)
RECENT_NAMES = 400  # at most this many kept; the budget decides how many are shown, the most relevant first

# Code symbols (snake_case, camelCase, PascalCase with two capitals, dotted names) and paths; never
# right after a `<`, `$` or `{` (a closing tag, a shell or template variable).
_REFERENCE = re.compile(r"(?<![\w/.<${:-])(?:[\w.-]*/[\w./-]+\w|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)"
                        r"(?![\w(}])")
_FILE_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
_CODE_WORD = re.compile(r"_[A-Za-z0-9]|[a-z][A-Z]|[A-Z][a-z]+[A-Z]|\.[A-Za-z_]")
@lru_cache(maxsize=65_536)
def is_name(token: str) -> bool:
    """A code name, or a path (anchored, with an extension, or of three parts or more: "and/or" and
    "call/tool" are prose)."""
    if not 4 <= len(token) <= 120:
        return False
    if "/" in token:
        return token.startswith(("/", "./", "../", "~/")) or bool(_FILE_EXTENSION.search(token)) \
            or token.count("/") >= 2
    return _CODE_WORD.search(token) is not None


def message_names(message: Message) -> list[tuple[str, float]]:
    """Every occurrence of a code name or path in a message, with its weight: tool-call arguments
    2 (the agent typed them), text 1, tool results 0.5 (their first RECENT_TEXT_CHARS); a file path
    counts twice that, a long property chain half."""
    texts: list[tuple[str, float]] = []
    for block in message.blocks:
        if isinstance(block, Text):
            texts.append((block.text, 1.0))
        elif isinstance(block, ToolCall):
            texts.extend((v, 2.0) for v in call_arguments(block).values() if isinstance(v, str))
        elif isinstance(block, ToolResult):
            texts.append((block.text, 0.5))
    out = []
    for text, factor in texts:
        for found in _REFERENCE.findall(decoded(text[:RECENT_TEXT_CHARS])):
            name = _name(found)
            if name is not None:
                out.append((name[0], factor * name[1]))
    return out


@lru_cache(maxsize=65_536)
def _name(found: str) -> tuple[str, float] | None:
    """A `_REFERENCE` match as a name and its kind factor, or None when it is no name (one cached call
    per occurrence: a span repeats the same words thousands of times)."""
    token = found.rstrip(".-").lstrip("-")  # `../core/a.ts` keeps its `../`; a sentence's dot goes
    return (token, kind_factor(token)) if is_name(token) else None


def kind_factor(token: str) -> float:
    """Files are what an agent most often picks up again; long property chains (`a.b.c.length`) least."""
    if "/" in token and _FILE_EXTENSION.search(token):
        return 2.0
    if token.count(".") >= 2 and "/" not in token:
        return 0.5
    return 1.0


def recent_references(span: Sequence[Message], names: Sequence[list[tuple[str, float]]] | None = None) -> list[str]:
    """What the agent was working with, for it to pick up again: code symbols and paths of the span's
    last messages, ranked by how many messages use them, each use weighing more the later it comes
    (0.2 for the oldest message looked at, 1 for the newest) and twice in a tool call's arguments
    (the agent typed them). Most relevant first. `names`: `message_names` of each
    message, when already computed."""
    recent = list(names[-RECENT_MESSAGES:]) if names is not None else [message_names(m)
                                                                      for m in span[-RECENT_MESSAGES:]]
    scores: dict[str, float] = {}
    for position, found in enumerate(recent, start=1):
        recency = 0.2 + 0.8 * position / len(recent)
        weights: dict[str, float] = {}
        for token, factor in found:  # a message counts once per name, by its strongest use
            weights[token] = max(weights.get(token, 0.0), factor)
        for token, factor in weights.items():
            scores[token] = scores.get(token, 0.0) + recency * factor
    return sorted(scores, key=lambda t: (-scores[t], t))[:RECENT_NAMES]


def reference_lines(names: Sequence[str]) -> list[str]:
    """Names a few per line (a line is the unit the budget trims), most relevant first."""
    return [", ".join(names[i:i + RECENT_PER_LINE]) for i in range(0, len(names), RECENT_PER_LINE)]


def short_names(text: str) -> set[str]:
    """The code names and paths of a short text (a command line, an error line), case-folded."""
    return {t.casefold() for t in (f.rstrip(".-").lstrip("-") for f in _REFERENCE.findall(decoded(text)))
            if is_name(t)}


def referenced_later(span: Sequence[Message], names: Sequence[list[tuple[str, float]]] | None = None) -> frozenset[str]:
    """Commands (their first lines) of the span that a later message refers back to: one of their
    names (a path, a code name) appears again after the call's result. Normalized. `names`:
    `message_names` of each message, when already computed."""
    last_seen: dict[str, int] = {}
    for position, found in enumerate(names if names is not None else [message_names(m) for m in span]):
        for token, _ in found:
            last_seen[token.casefold()] = position
    results = {r.call_id: i for i, m in enumerate(span) for r in m.tool_results}
    out: set[str] = set()
    for position, message in enumerate(span):
        for call in message.tool_calls:
            after = results.get(call.id, position)
            command = shell_command(call)
            if command:
                first = command_line(command)[0]
                # Only the part of the line the summary keeps can be referred back to; and a one-line
                # script of megabytes is not scanned whole.
                if any(last_seen.get(n, -1) > after for n in short_names(first[:COMMAND_STATE_CHARS])):
                    out.add(normalize(first))
    return frozenset(out)
