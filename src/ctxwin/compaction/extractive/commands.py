"""Commands run: every distinct shell command of a span by its first line, with its count, and the
shorter forms a long one takes before it is dropped."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxwin.compaction.identifiers import normalize, shell_command, tool_kind
from ctxwin.messages import Message, ToolCall
from ctxwin.pipeline.cut import clip

COMMAND_CHARS = 600  # a command's first line is shown verbatim up to this many characters
COMMAND_STATE_CHARS = 4_000  # ... and kept in the merge state up to this many (two commands differing later are two)
COMMAND_MEDIUM_CHARS = 240  # the middle form: long arguments shortened
COMMAND_ARGUMENT_CHARS = 40  # in the middle form, an argument longer than this is cut to it
DIRECTORY_PREFIX = "(in "
SUBMIT = "submit"
"""SWE-agent's last step (its own command, not a shell line): listed with the commands, it says the
work was handed in."""

_CD = re.compile(r"^\s*cd\s+(\"[^\"]*\"|'[^']*'|\S+)\s*&&\s*")
_ENV_PREFIX = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+")
_REDIRECT = re.compile(r"\s*(?:\d?>&\d|&?>>?\s*/dev/null|\d>\s*/dev/null)")
_ARGUMENT = re.compile(r"\"[^\"]*\"|'[^']*'|\S+")
REPEAT_MARK = re.compile(r" \(×\d+\)$| \(\+\d+ lines?\)$")
"""What a command item adds after the command line itself (repeats, the lines of a multi-line script)."""


def command_line(command: str) -> tuple[str, str | None, int]:
    """(first line, directory, further lines) of a command: its first non-empty line without a
    leading `cd DIR &&` (the directory is returned apart), and how many non-empty lines follow."""
    lines = [line.strip() for line in command.strip().splitlines() if line.strip()]
    if not lines:
        return "", None, 0
    first, directory = lines[0], None
    while (match := _CD.match(first)) is not None and first[match.end():].strip():
        directory = match.group(1).strip("\"'")
        first = first[match.end():].strip()
    return first, directory, len(lines) - 1


def command_key(command: str) -> str:
    """What makes two runs "the same command" for errors and fixes: the first line without its `cd`,
    environment prefix, output redirections and the pipes that only filter its output (`2>&1 | tail
    -20` shows less of the same run)."""
    first = command_line(command)[0]
    first = _ENV_PREFIX.sub("", first)
    head = re.split(r"\s\|\s?(?=(?:head|tail|grep|less|more|tee|cat|sort|uniq|wc|cut|awk|sed)\b)", first)[0]
    return _REDIRECT.sub("", head).strip() or first


def command_entries(span: Sequence[Message], line_chars: int = COMMAND_STATE_CHARS) -> list[str]:
    """Every distinct command of the span, by its first line, at its last use, oldest first: a
    repeated command once with its count (`(×3)`), a script's first line with the number of lines
    after it (`(+12 lines)`), and the directories the commands were run in said once, first.
    SWE-agent's `submit` counts as a command."""
    counts: dict[str, int] = {}
    last: dict[str, tuple[str, int]] = {}
    directories: list[str] = []
    for message in span:
        for call in message.tool_calls:
            command = shell_command(call) or (SUBMIT if tool_kind(call.name) == SUBMIT else None)
            if not command:
                continue
            first, directory, more = command_line(command)
            if not first:
                continue
            if directory and directory not in directories:
                directories.append(directory)
            key = normalize(first)
            counts[key] = counts.get(key, 0) + 1
            last.pop(key, None)
            last[key] = (first[:line_chars], more)
    out = [f"{DIRECTORY_PREFIX}{', '.join(directories)})"] if directories else []
    for key, (first, more) in last.items():
        item = f"`{first}`"
        if counts[key] > 1:
            item += f" (×{counts[key]})"
        elif more:
            item += f" (+{more} line{'s' if more > 1 else ''})"
        out.append(item)
    return out


def group_paths(command: str) -> str:
    """A command with each run of paths in one directory written once: `a/b/x.ex a/b/y.ex` becomes
    `a/b/{x.ex,y.ex}` (shell brace expansion, so it still reads as the same command)."""
    words = _ARGUMENT.findall(command)
    out: list[str] = []
    index = 0
    while index < len(words):
        head, _, tail = words[index].rpartition("/")
        run = index + 1
        if head and tail and words[index][0] not in "\"'-":
            while run < len(words) and words[run].rpartition("/")[0] == head and words[run].rpartition("/")[2]:
                run += 1
        if run - index >= 2:
            out.append(head + "/{" + ",".join(w.rpartition("/")[2] for w in words[index:run]) + "}")
        else:
            out.extend(words[index:run])
        index = run
    return " ".join(out)


def shorten_arguments(command: str, limit: int = COMMAND_ARGUMENT_CHARS) -> str:
    """A command with its paths grouped (`group_paths`) and each long argument (a quoted string or
    a word) cut to `limit` characters: the compressed form of a long command, which still says what
    ran on what."""
    def cut(match: re.Match[str]) -> str:
        word = match.group(0)
        return word if len(word) <= limit else word[:limit] + "…"

    return _ARGUMENT.sub(cut, group_paths(command))


def command_variants(item: str) -> tuple[str, ...]:
    """A command item whole, then (when it is long) with its paths grouped, then its long arguments
    shortened, then its head: a short command is kept whole or not at all (a command is only worth
    its exact text)."""
    if len(item) <= COMMAND_MEDIUM_CHARS or not item.startswith("`"):
        return (item,)
    suffix = REPEAT_MARK.search(item)
    end = suffix.start() if suffix else len(item)
    command, tail = item[1:end].removesuffix("`"), item[end:]
    grouped, shortened = group_paths(command), shorten_arguments(command)
    forms = [*([command] if len(command) <= COMMAND_CHARS else []), clip(grouped, COMMAND_CHARS),
             clip(shortened, COMMAND_CHARS), clip(shortened, COMMAND_MEDIUM_CHARS)]
    return tuple(f"`{form}`{tail}" for form in sorted(dict.fromkeys(forms), key=len, reverse=True))


def is_search(call: ToolCall) -> bool:
    """A shell search (grep, rg, ag, ack, git grep): its exit status 1 means "no match", not a failure."""
    command = shell_command(call)
    if command is None:
        return False
    words = command_key(command).split()
    if not words:
        return False
    program = words[0].rsplit("/", 1)[-1]
    return program in ("grep", "egrep", "fgrep", "rg", "ag", "ack") or words[:2] == ["git", "grep"]
