"""Exact identifiers and file operations of a span, and the guard that makes them survive a summary.

Summaries paraphrase; an agent that continues from one needs the literal strings: the path it was
editing, the commit it made, the UUID the user pasted, the error code it was chasing. `extract_identifiers`
finds them, `guard` appends the ones a summary lost (OpenClaw's strict identifier policy, but checked
and repaired instead of only asked for), and `extract_file_ops` gives the read and modified file lists
that Pi carries across compactions.

(Long on purpose: the identifier and file-operation patterns, mostly regular expressions with their cases.)
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from ctxwin.compaction.base import Summary
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.tokens.base import TokenCounter

GUARD_HEADING = "Exact identifiers"  # the section the guard appends to (OpenClaw's name for it)
MAX_IDENTIFIER_CHARS = 300  # longer matches are prose or data, not identifiers
MAX_ARG_SCAN_CHARS = 2_000  # tool-call string arguments longer than this are file bodies: not scanned
MAX_RESULT_SCAN_CHARS = 4_000  # only the head of a tool result is scanned for commit ids and URLs
MIN_USER_NUMBER_DIGITS = 2  # a number in a user message is kept from this many digits
MIN_OTHER_NUMBER_DIGITS = 6  # elsewhere only long numbers (ids, ports are caught as host:port)
MAX_SHELL_SEGMENT_CHARS = 10_000  # a longer piece of a shell command (an inline script or file body): not parsed
EXIT_SCAN_CHARS = 2_000  # an exit status is looked for in this many characters at each end of an output
TEXT_SCAN_CHARS = 32_000  # of a longer user or assistant text, this much at each end is scanned for identifiers

# Importance tiers, lower first: what the user gave, then error codes of failing results, then what
# the agent used, then what tools printed.
TIER_USER = 0
TIER_ERROR = 1
TIER_AGENT = 2
TIER_RESULT = 3

_TRAIL = ".,;:!?)]}>'\"`*"
_URL = re.compile(r"\bhttps?://[^\s<>\"'`\])}|]+", re.I)
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_HOSTPORT = re.compile(
    r"(?<![\w./-])(?:localhost|\d{1,3}(?:\.\d{1,3}){3}|[a-z0-9-]+(?:\.[a-z0-9-]+)+|\[[0-9a-f:]+\]):\d{2,5}\b", re.I
)
_WIN_PATH = re.compile(r"\b[A-Za-z]:\\(?:[^\\\s\"'<>|:*?]+\\)*[^\\\s\"'<>|:*?]+")
# A path: rooted (/, ~/, ./, ../) or relative with a slash; relative ones need an extension or two slashes.
_PATH = re.compile(r"(?<![\w/:~.@-])@?(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w.@+-]+/?")
_EXT = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,7}$")
_FILENAME = re.compile(
    r"(?<![\w/.-])[\w-]+(?:\.[\w-]+)*\.(?:py|pyi|ts|tsx|js|jsx|mjs|cjs|json|jsonl|toml|ya?ml|md|rst|txt|ex|exs|"
    r"rs|go|java|kt|rb|php|c|cc|cpp|h|hpp|cs|swift|sh|sql|html|css|scss|vue|svelte|lock|cfg|ini|env|xml|proto|"
    r"png|jpe?g|gif|svg|pdf|csv|tsv|log|traj|patch|diff)\b"
)
_HEX = re.compile(r"\b[0-9a-f]{7,64}\b")
_ERROR_CODE = re.compile(r"\b(?:E[A-Z]{3,}[A-Z0-9]*|[A-Z]{1,6}-?\d{3,6})\b")
_ISSUE = re.compile(r"(?<![\w&])#\d{2,}\b")
_BACKTICK = re.compile(r"`([^`\s]{2,80})`")
_SYMBOL = re.compile(r"\b(?:[a-z]+[A-Z][A-Za-z0-9]*|[A-Za-z][A-Za-z0-9]*_[A-Za-z0-9_]+|[A-Za-z]+\d+[A-Za-z0-9]*)\b")
_DOTTED_ID = re.compile(r"\b[A-Za-z][\w]*(?:[.-][\w]+)*[.-]\d+\b")  # spotter-gqc.1, v1.2.3, PR-12
_KEBAB = re.compile(r"\b[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b")
_NUMBER = re.compile(r"(?<![\w.])\d[\d_,]*(?:\.\d+)?(?![\w.]\w)")
_GIT_COMMIT = re.compile(r"^\[[\w./-]+(?: \(root-commit\))? ([0-9a-f]{7,40})\]", re.M)

# Tool names, lower-cased, after stripping namespaces ("functions.read", "mcp__fs__read_file").
READ_TOOLS = frozenset({"read", "read_file", "readfile", "view", "view_file", "cat", "open", "open_file",
                        "notebookread", "file_read", "read_many_files"})
WRITE_TOOLS = frozenset({"edit", "write", "multiedit", "notebookedit", "str_replace", "create", "create_file",
                         "write_file", "edit_file", "insert", "replace", "update_file", "delete_file",
                         "file_write", "file_edit", "search_replace"})
EDITOR_TOOLS = frozenset({"str_replace_editor", "str_replace_based_edit_tool", "text_editor"})
OPEN_FILE_TOOLS = frozenset({"open", "open_file", "create", "goto"})
"""SWE-agent commands that make a file the open one ..."""
OPEN_FILE_EDITS = frozenset({"edit", "insert", "append"})
OPEN_FILE_READS = frozenset({"goto", "scroll_up", "scroll_down"})
"""... and those that act on it when they name no file."""
PATCH_TOOLS = frozenset({"apply_patch", "patch", "applypatch"})
SHELL_TOOLS = frozenset({"bash", "shell", "sh", "exec", "exec_command", "run", "terminal", "execute_command",
                         "run_command", "local_shell", "run_shell_command", "execute_bash", "cmd"})
# Tool-call arguments that hold file bodies or prose, not names: not scanned for identifiers.
BODY_KEYS = frozenset({"content", "new_string", "old_string", "new_str", "old_str", "newtext", "oldtext", "new_text",
                       "old_text", "edits", "file_text", "text", "code", "patch", "insert_text", "todos", "plan",
                       "description", "prompt", "body", "message", "diff", "replacement", "search"})
PATH_KEYS = ("file_path", "path", "filename", "file", "notebook_path", "target_file", "filepath",
             "absolute_path", "relative_workspace_path")
_EDITOR_READ_COMMANDS = frozenset({"view"})
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.M)
_HEREDOC = re.compile(r"<<-?\s*['\"]?([A-Za-z_]\w*)['\"]?")
_SHELL_SPLIT = re.compile(r"\|\||&&|;|\||\n")
_READ_COMMANDS = frozenset({"cat", "head", "tail", "less", "more", "nl", "bat"})
_INPLACE_COMMANDS = frozenset({"sed", "perl", "gsed"})
_STOPWORD_KEBAB = frozenset({"read-only", "e-mail", "follow-up", "built-in", "so-called", "well-known"})


# --------------------------------------------------------------------------------------------------
# Tool calls


def tool_kind(name: str) -> str:
    """The canonical lower-case tool name: namespaces stripped ("mcp__fs__read_file" -> "read_file")."""
    base = name.rsplit("__", 1)[-1].rsplit(".", 1)[-1]
    return base.lower()


def call_arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as a dict (a raw JSON string is decoded; anything else is empty)."""
    args = call.arguments
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return {"input": args}
    return args if isinstance(args, dict) else {}


def call_path(args: dict[str, Any]) -> str | None:
    for key in PATH_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def shell_command(call: ToolCall) -> str | None:
    """The command line of a shell tool call, or None when the call is not one."""
    if tool_kind(call.name) not in SHELL_TOOLS:
        return None
    args = call_arguments(call)
    command = args.get("command", args.get("cmd", args.get("input")))
    if isinstance(command, list):
        parts = [str(p) for p in command]
        # Codex sends ["bash", "-lc", "<script>"]: the script is the command.
        if len(parts) >= 3 and parts[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and parts[1] in ("-lc", "-c"):
            return parts[-1]
        return shlex.join(parts)
    return command if isinstance(command, str) and command.strip() else None


def _strip_heredocs(command: str) -> str:
    """The command without heredoc bodies (their text would look like redirects and file names)."""
    lines = command.split("\n")
    out: list[str] = []
    terminator: str | None = None
    for line in lines:
        if terminator is not None:
            if line.strip() == terminator:
                terminator = None
            continue
        out.append(line)
        match = _HEREDOC.search(line)
        if match:
            terminator = match.group(1)
    return "\n".join(out)


def _looks_like_file(token: str) -> bool:
    if not token or token.startswith("-") or token.startswith("$") or token in ("-", "/dev/null"):
        return False
    if token.startswith("/dev/") or token.startswith("&"):
        return False
    return "/" in token or bool(_EXT.search(token))


def shell_file_ops(command: str) -> tuple[list[str], list[str]]:
    """Files a shell command cheaply reveals it reads (cat/head/tail/sed -n) and writes (sed -i,
    redirects, tee). A heuristic: anything it cannot parse is skipped, never guessed."""
    reads, writes = _shell_file_ops(command)
    return list(reads), list(writes)


@lru_cache(maxsize=4_096)
def _shell_file_ops(command: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    # Cached: one compaction parses the same commands for its file lists and again for its error fixes.
    reads: list[str] = []
    writes: list[str] = []
    for segment in _SHELL_SPLIT.split(_strip_heredocs(command)):
        segment = segment.strip()
        # shlex builds a token a character at a time, quadratic in its length: a 1 MB quoted argument
        # took 20 s. A piece that long is a script or a file body, not where file names are read from.
        if not segment or len(segment) > MAX_SHELL_SEGMENT_CHARS:
            continue
        try:
            tokens = shlex.split(segment, posix=True)
        except ValueError:
            continue
        if not tokens:
            continue
        redirected = False
        for index, token in enumerate(tokens):
            target = None
            if token in (">", ">>", "1>", "&>") and index + 1 < len(tokens):
                target = tokens[index + 1]
            elif re.fullmatch(r"(?:1|&)?>>?[^>&].*", token):
                target = token.lstrip("1&").lstrip(">")
            if target is not None:
                redirected = True
                if _looks_like_file(target):
                    writes.append(target)
        program = tokens[0].rsplit("/", 1)[-1]
        args = tokens[1:]
        if program == "tee":
            writes.extend(a for a in args if _looks_like_file(a))
        elif program in _INPLACE_COMMANDS and any(a.startswith("-i") or a.startswith("-pi") for a in args):
            files = [a for a in args[1:] if _looks_like_file(a) and not a.startswith("s/")]
            writes.extend(files)
        elif program in _READ_COMMANDS and not redirected:
            reads.extend(a for a in args if _looks_like_file(a))
        elif program == "sed" and "-n" in args and not redirected:
            reads.extend(a for a in args if _looks_like_file(a) and not a.endswith("p"))
    return tuple(reads), tuple(writes)


def _call_file_ops(call: ToolCall) -> tuple[list[str], list[str]]:
    kind = tool_kind(call.name)
    args = call_arguments(call)
    if kind in READ_TOOLS:
        path = call_path(args)
        return ([path] if path else []), []
    if kind in WRITE_TOOLS:
        path = call_path(args)
        return [], ([path] if path else [])
    if kind in EDITOR_TOOLS:
        path = call_path(args)
        if not path:
            return [], []
        command = str(args.get("command", "")).lower()
        return ([path], []) if command in _EDITOR_READ_COMMANDS else ([], [path])
    if kind in PATCH_TOOLS:
        patch = next((v for k, v in args.items() if k in ("input", "patch", "diff") and isinstance(v, str)), "")
        return [], [a or b for a, b in _PATCH_FILE.findall(patch)]
    script = shell_command(call)
    if script is not None:
        if script.lstrip().startswith("apply_patch"):
            return [], [a or b for a, b in _PATCH_FILE.findall(script)]
        return shell_file_ops(script)
    return [], []


def file_events(messages: Iterable[Message]) -> list[tuple[str, str]]:
    """Every file operation in order: ("read" | "modified", path). SWE-agent's viewer and editor act
    on the file it last opened or created when a call names none (`goto`, `scroll_down`, `edit`,
    `insert` with only the text)."""
    events: list[tuple[str, str]] = []
    open_file: str | None = None
    for message in messages:
        for call in message.tool_calls:
            kind = tool_kind(call.name)
            path = call_path(call_arguments(call))
            if kind in OPEN_FILE_TOOLS and path:
                open_file = path
            if path is None and open_file is not None and kind in OPEN_FILE_EDITS | OPEN_FILE_READS:
                events.append(("modified" if kind in OPEN_FILE_EDITS else "read", open_file))
                continue
            reads, writes = _call_file_ops(call)
            events.extend(("read", p) for p in reads)
            events.extend(("modified", p) for p in writes)
    return events


def extract_file_ops(messages: Iterable[Message]) -> tuple[list[str], list[str]]:
    """(read_files, modified_files) of the messages' tool calls. read_files are files read and never
    modified (Pi's read-only list); modified = edited or written. Each list is in the order the files
    were last touched, oldest first, so the most recent are at the end."""
    events = file_events(messages)
    canonical = canonical_paths(p for _, p in events)
    last: dict[str, int] = {}
    modified: set[str] = set()
    for index, (kind, raw) in enumerate(events):
        path = canonical.get(raw, raw)
        last.pop(path, None)
        last[path] = index
        if kind == "modified":
            modified.add(path)
    ordered = list(last)
    return [p for p in ordered if p not in modified], [p for p in ordered if p in modified]


def canonical_paths(paths: Iterable[str]) -> dict[str, str]:
    """For each relative path (also "./x"), the one absolute path it is the tail of, when exactly
    one is: `src/a.py` and `/repo/src/a.py` are the same file."""
    unique = list(dict.fromkeys(paths))
    absolute = [p for p in unique if p.startswith("/")]
    out: dict[str, str] = {}
    for path in unique:
        if path.startswith("/") or not absolute:
            continue
        tail = "/" + path.removeprefix("./")
        matches = [a for a in absolute if a.endswith(tail)]
        if len(matches) == 1:
            out[path] = matches[0]
    return out


# --------------------------------------------------------------------------------------------------
# Identifiers

_ESCAPES = {"\\n": "\n", "\\t": "\t", '\\"': '"', "\\'": "'", "\\r": ""}
_ESCAPE = re.compile(r"\\[ntr\"']")


def decoded(text: str) -> str:
    """`text` with the escapes of serialized output (a literal `\\n`, `\\t`, `\\"`) turned back into
    what they stand for: names are read from the text, not from its escaped form (no `nFinding`)."""
    return _ESCAPE.sub(lambda m: _ESCAPES[m.group(0)], text) if "\\n" in text else text


def _clean(token: str) -> str:
    token = token.strip().rstrip(_TRAIL)
    if token.startswith("@") and "/" in token:
        token = token[1:]  # Pi's "@path" file mentions
    return token


def _is_hash(token: str) -> bool:
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


@dataclass(frozen=True)
class _Finder:
    """A pass that appends matches to `out` and blanks them in the text, so later, looser patterns
    do not match inside them (the digits of a UUID are not a number). `needs`: a piece of text every
    match of `pattern` holds (a text without it is not scanned)."""

    pattern: re.Pattern[str]
    keep: Callable[[str], bool] | None = None
    group: int = 0
    needs: str = ""

    def __call__(self, text: str, out: list[str]) -> str:
        if self.needs not in text:
            return text

        def repl(match: re.Match[str]) -> str:
            token = _clean(match.group(self.group))
            if token and len(token) <= MAX_IDENTIFIER_CHARS and (self.keep is None or self.keep(token)):
                out.append(token)
                return " " * len(match.group(0))
            return match.group(0)

        return self.pattern.sub(repl, text)


def _is_path(token: str) -> bool:
    if "://" in token or not any(c.isalpha() for c in token):
        return False
    if token.startswith(("/", "~/")):
        return token.count("/") >= 2 or bool(_EXT.search(token))
    # Relative: only with a file extension ("and/or", "Model/thinking/theme" are prose).
    return bool(_EXT.search(token))


def _number_keep(min_digits: int) -> Callable[[str], bool]:
    return lambda token: sum(c.isdigit() for c in token) >= min_digits


_STRICT_PASSES: tuple[_Finder, ...] = (
    _Finder(_URL, needs="://"),
    _Finder(_UUID, needs="-"),
    _Finder(_HOSTPORT, needs=":"),
    _Finder(_WIN_PATH, needs=":\\"),
    _Finder(_PATH, _is_path, needs="/"),
    _Finder(_HEX, _is_hash),
)
_ERROR_CODES = _Finder(_ERROR_CODE)
_USER_PASSES: tuple[_Finder, ...] = (
    _Finder(_BACKTICK, group=1, needs="`"),
    _Finder(_FILENAME, needs="."),
    _Finder(_ISSUE, needs="#"),
    _Finder(_DOTTED_ID, lambda t: any(c.isalpha() for c in t)),
    _Finder(_SYMBOL),
    _Finder(_NUMBER, _number_keep(MIN_USER_NUMBER_DIGITS)),
)
_OTHER_PASSES: tuple[_Finder, ...] = (
    _Finder(_FILENAME, needs="."),
    _Finder(_NUMBER, _number_keep(MIN_OTHER_NUMBER_DIGITS)),
)
_URLS = _Finder(_URL, needs="://")


def scan_window(text: str) -> str:
    """The part of a message text that is scanned for identifiers: all of it up to 2 * TEXT_SCAN_CHARS,
    else its first and last TEXT_SCAN_CHARS joined by a line break. Each scan is some fourteen regex
    passes, twice per compaction: on a pasted log of megabytes that froze the process for seconds, and
    names deep in its middle are a fair loss. Each end is cut at a space when one is near, so that no
    name is scanned in half."""
    if len(text) <= 2 * TEXT_SCAN_CHARS:
        return text
    return _head(text, TEXT_SCAN_CHARS) + "\n" + _tail(text, TEXT_SCAN_CHARS)


def _head(text: str, limit: int) -> str:
    """`text[:limit]` less a word cut in two, looked back for as far as an identifier can be long
    (`limit` < len(text))."""
    for index in range(limit, max(limit - MAX_IDENTIFIER_CHARS, 0), -1):
        if text[index].isspace():
            return text[:index]
    return text[:limit]


def _tail(text: str, limit: int) -> str:
    """`text[-limit:]` less a word cut in two, the same way (`limit` < len(text))."""
    start = len(text) - limit
    for index in range(start - 1, min(start - 1 + MAX_IDENTIFIER_CHARS, len(text))):
        if text[index].isspace():
            return text[index + 1:]
    return text[start:]


def _scan(text: str, *, user: bool, error: bool = False) -> list[str]:
    """Identifiers in one text (its `scan_window`, decoded). User text also yields filenames, code
    names and any number."""
    out: list[str] = []
    text = decoded(scan_window(text))
    for run in _STRICT_PASSES:
        text = run(text, out)
    if user or error:
        text = _ERROR_CODES(text, out)
    for run in _USER_PASSES if user else _OTHER_PASSES:
        text = run(text, out)
    return out


def _arg_strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        if len(value) <= MAX_ARG_SCAN_CHARS:
            yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if str(key).lower() not in BODY_KEYS:
                yield from _arg_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _arg_strings(item)


def message_identifiers(message: Message) -> tuple[tuple[tuple[str, int], ...], tuple[str, ...]]:
    """What one message contributes to `extract_identifiers`: its (identifier, tier) occurrences in
    order, and the kebab-case names of a user message (which count only if a tool call of the span
    uses them). A pure function of the message: it can be computed once, when the message arrives."""
    tokens: list[tuple[str, int]] = []
    kebab: list[str] = []
    if message.role == "user":
        text = user_text(message)
        if text:
            tokens.extend((t, TIER_USER) for t in _scan(text, user=True))
            kebab.extend(k for k in _KEBAB.findall(scan_window(text)) if k not in _STOPWORD_KEBAB)
    elif message.role == "assistant":
        for block in message.blocks:
            if isinstance(block, Text):
                tokens.extend((t, TIER_AGENT) for t in _scan(block.text, user=False))
            elif isinstance(block, ToolCall):
                for value in _arg_strings(call_arguments(block)):
                    tokens.extend((t, TIER_AGENT) for t in _scan(value, user=False))
    elif message.role == "tool":
        for result in message.tool_results:
            tier = TIER_ERROR if is_failure(result) else TIER_RESULT
            tokens.extend((t, tier) for t in _result_identifiers(result))
    return tuple(tokens), tuple(kebab)


def extract_identifiers(messages: Sequence[Message],
                        scanned: Sequence[tuple[tuple[tuple[str, int], ...], tuple[str, ...]]] | None = None,
                        ) -> list[str]:
    """Exact identifiers of the messages, most important first, without duplicates.

    From user text: paths, URLs, UUIDs, hashes, host:port, file names, error codes, issue numbers,
    backticked and code-like names (camelCase, snake_case, ids with digits), kebab-case names the agent
    then used in a tool call, and any number of 2+ digits. From assistant text and tool-call arguments:
    paths, URLs, UUIDs, hashes, host:port, file names and numbers of 6+ digits. From failing tool results:
    error codes; from other results: commit ids git printed and URLs in short outputs.
    Ranked by tier (user, error, agent, result), then by how many later messages use each again, then
    by first appearance. `scanned`: `message_identifiers` of each message, when already computed.
    """
    found: dict[str, list[int]] = {}  # identifier -> [tier, -later uses, first position, last message]
    position = 0

    def add(tokens: Iterable[str], tier: int, at: int) -> None:
        nonlocal position
        for token in tokens:
            position += 1
            entry = found.get(token)
            if entry is None:
                found[token] = [tier, 0, position, at]
            else:
                entry[0] = min(entry[0], tier)
                if entry[3] != at:  # another, later message uses it again
                    entry[1] -= 1
                    entry[3] = at

    scans = list(scanned) if scanned is not None else [message_identifiers(m) for m in messages]
    call_text = "\n".join(s for m in messages for call in m.tool_calls for s in _arg_strings(call_arguments(call)))
    for current, (tokens, kebab) in enumerate(scans):
        for token, tier in tokens:
            add((token,), tier, current)
        add((k for k in kebab if k in call_text), TIER_USER, current)
    ranked = sorted(found.items(), key=lambda kv: (kv[1][0], kv[1][1], kv[1][2]))
    return [token for token, _ in ranked]


def _result_identifiers(result: ToolResult) -> list[str]:
    text = result.text
    head = text[:MAX_RESULT_SCAN_CHARS]
    out = [m for m in _GIT_COMMIT.findall(head)]
    if is_failure(result):
        _ERROR_CODES(head, out)
    if len(text) <= MAX_RESULT_SCAN_CHARS:
        urls: list[str] = []
        _URLS(text, urls)
        out.extend(urls)
    return out


# --------------------------------------------------------------------------------------------------
# Failures and user text (shared with the extractive summarizer)

_EXIT_CODE = re.compile(
    r"(?:^|\n)(?:Exit code|Command exited with code|exit status|exited with code|npm (?:error|ERR!) code)\s*:?\s*"
    r"([1-9]\d*)", re.I
)


def is_failure(result: ToolResult) -> bool:
    """A failing tool result: flagged as an error, or reporting a non-zero exit or a traceback."""
    if result.is_error:
        return True
    # Harnesses print the exit status first (Claude Code) or last (Pi): both ends are looked at.
    text = result.text
    ends = text if len(text) <= 2 * EXIT_SCAN_CHARS else text[:EXIT_SCAN_CHARS] + "\n" + text[-EXIT_SCAN_CHARS:]
    return bool(_EXIT_CODE.search(ends)) or "Traceback (most recent call last)" in text[-20_000:]


_META_PREFIXES = (
    "<local-command-stdout>", "<local-command-stderr>", "<local-command-caveat>",
    "Caveat: The messages below were generated by the user", "<task-notification>",
    "[Request interrupted by user", "This session is being continued from a previous conversation",
    "<user-prompt-submit-hook>", "<bash-stdout>", "<bash-stderr>", "<system_notification>",
)
_META_KEYS = ("isMeta", "is_meta", "meta", "isCompactSummary", "is_compact_summary", "compact_summary",
              "synthetic", "isVisibleInTranscriptOnly")
_SYSTEM_REMINDER = re.compile(r"<system-reminder>.*?(?:</system-reminder>|$)", re.S)
_COMMAND = re.compile(r"<command-name>(.*?)</command-name>", re.S)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)
_BASH_INPUT = re.compile(r"<bash-input>(.*?)</bash-input>", re.S)


def user_text(message: Message) -> str:
    """What the user typed in a user message, or "" when it is a harness meta message (reminders,
    local command output, interrupt notices, compaction summaries) or holds only tool results.
    Slash commands become "/name args"; "!cmd" shell input becomes "!cmd"."""
    if message.role != "user":
        return ""
    if any(message.meta.get(key) is True for key in _META_KEYS):
        return ""
    text = message.text
    if not text.strip():
        return ""
    text = _SYSTEM_REMINDER.sub("", text).strip()
    if not text:
        return ""
    command = _COMMAND.search(text)
    if command:
        args = _COMMAND_ARGS.search(text)
        return f"{command.group(1).strip()} {args.group(1).strip() if args else ''}".strip()
    bash = _BASH_INPUT.search(text)
    if bash:
        return "!" + bash.group(1).strip()
    if text.startswith(_META_PREFIXES):
        return ""
    return text


# --------------------------------------------------------------------------------------------------
# The guard

_WS = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Case-folded, whitespace collapsed: the form survival is checked in."""
    return _WS.sub(" ", text).strip().casefold()


def survives(identifier: str, normalized_text: str) -> bool:
    """Whether `identifier` is in the (normalized) text: verbatim, or for a path of 3+ components,
    by its last two components (paths are often shown relative to a root)."""
    ident = normalize(identifier)
    if ident in normalized_text:
        return True
    if "/" in ident:
        parts = [p for p in ident.replace("\\", "/").split("/") if p]
        if len(parts) >= 2:
            return "/".join(parts[-2:]) in normalized_text
    return False


def render_identifier(identifier: str) -> str:
    return f"- {identifier}"


def guard(summary: Summary, span: Sequence[Message], counter: TokenCounter, budget_tokens: int,
          scanned: Sequence[tuple[tuple[tuple[str, int], ...], tuple[str, ...]]] | None = None) -> Summary:
    """The summary with the span's identifiers that did not survive appended verbatim under
    "## Exact identifiers", most important first, as many as fit in `budget_tokens`. `details`
    gets an "identifier_guard" record: how many were checked, which were missing, appended, and
    left out for lack of room. `scanned`: `message_identifiers` of each message of the span, when
    already computed."""
    identifiers = extract_identifiers(span, scanned)
    normalized_text = normalize(summary.text)
    missing = [i for i in identifiers if not survives(i, normalized_text)]
    text = summary.text.rstrip("\n")
    heading = f"## {GUARD_HEADING}"
    has_section = _last_heading(text) == heading
    prefix = "" if has_section else ("\n\n" if text else "") + heading
    used = counter.count_text(text)
    appended: list[str] = []
    not_fitted: list[str] = []
    addition = prefix
    if missing:
        # Count the growing tail, not the whole text, each time: the tail is small, the text is not.
        header_cost = counter.count_text(prefix) if prefix else 0
        cost = used + header_cost
        for identifier in missing:
            line = "\n" + render_identifier(identifier)
            line_cost = counter.count_text(line)
            if cost + line_cost <= budget_tokens:
                appended.append(identifier)
                addition += line
                cost += line_cost
            else:
                not_fitted.append(identifier)
    new_text = text + addition if appended else summary.text
    tokens = counter.count_text(new_text)
    while appended and tokens > budget_tokens:  # token counts are not exactly additive across joins
        not_fitted.insert(0, appended.pop())
        new_text = text + prefix + "".join("\n" + render_identifier(i) for i in appended) if appended \
            else summary.text
        tokens = counter.count_text(new_text)
    sections = {k: list(v) for k, v in summary.sections.items()}
    if appended:
        sections.setdefault(GUARD_HEADING, []).extend(appended)
    details = dict(summary.details)
    details["identifier_guard"] = {
        "checked": len(identifiers),
        "missing": missing,
        "appended": appended,
        "not_fitted": not_fitted,
    }
    return replace(summary, text=new_text, sections=sections, identifiers=tuple(identifiers),
                   tokens=tokens, details=details)


def _last_heading(text: str) -> str | None:
    for line in reversed(text.splitlines()):
        if line.startswith("#"):
            return line.strip()
    return None
