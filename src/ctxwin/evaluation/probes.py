"""Probe facts: what a compacted context should still let the model know, drawn from the transcript.

At a compaction point, the *evicted span* is every message before the first message the real harness
kept verbatim (`messages[:first_kept]`, from the start of the session: a fact evicted by an earlier
compaction still counts). Probes come from it, by type (the definitions of
reference/measured-baselines.md):

- `modified_files`: paths of Edit/Write-style calls (and SWE-agent editor commands other than `view`,
  and SWE-agent's `create`, `edit`, `insert` on the file they name or the one last opened).
- `read_files`: paths of Read-style calls (and editor `view`, SWE-agent's `open`), for files never
  modified in the span.
- `errors`: every distinct line of a tool result that reads as an error by its content, whatever the
  exit code (compiler and test-runner lines, exception lines, `error:`/`fatal:`/`FAILED`, `npm ERR!`,
  a cross mark, "command not found", "N failures", "compilation error", a failed test's name as
  ExUnit, Go and Jest print it: `1) test ...`, `--- FAIL:`, `● ...`); for a result that failed
  (flagged as an error, or a non-zero exit) without such a line, its first substantial line. Text
  whose lines were escaped (a literal `\\n`) is split there first. File reads are not scanned (source
  code says "error" often), a declined call is a decision. An error with a location
  (`src/a.ts(12,5): error TS2304: ...`) is its message and the file's name: it is found where the
  message follows the file's name closely (a summary that groups the error's occurrences under one
  line keeps it; its line numbers are not required).
- `commands`: every shell command run, by its first line, with a leading `cd DIR &&` removed (the
  directory is the environment, not the command).
- `identifiers`: what the user typed that names something exactly: URLs, UUIDs, hashes, numbers of
  three or more digits, code names (camelCase, PascalCase, snake_case), ticket ids (`spotter-4te.4`),
  file names and paths.
- `continuation`: paths and identifiers in the arguments of the 30 tool calls after the point that
  also appear in the evicted span (what the agent needed next, and could only know from before).
- `user_constraints`: the first 80 characters of each message the user typed, prompts queued while the
  agent was busy included (`Transcript.metadata["queued_prompts"]`).

The environment is not a fact: probes naming the working directory or one of its parents, `/dev/null`,
or a sanitizer's marker (`REDACTED_EMAIL`) are left out; they are found everywhere and would inflate
every score.

A probe is found in a context by normalized containment (case-insensitive, whitespace collapsed; a
path also matches by its last two components) at word boundaries: a probe that starts or ends with a
name character must not continue a longer name there (`rm` is not in "format", `modes/interactive`
is not in `modes/interactive-mode.ts`, `a_test.exs` is not in `aa_test.exs`).

This module imports nothing of what it scores (`ctxwin.compaction`, `ctxwin.pipeline.failures`: a
test reads its imports): which tool reads or writes, which line is an error, which text is typed by
the user are decided here, by the rules of reference/measured-baselines.md, so the summarizer and
its scorer cannot share a blind spot.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ctxwin.messages import Image, Message, Text, Thinking, ToolCall, ToolResult

PROBE_TYPES: tuple[str, ...] = ("modified_files", "read_files", "errors", "commands", "identifiers", "continuation",
                                "user_constraints")
CONTINUATION_CALLS = 30  # tool calls after the point whose arguments give continuation probes
CONSTRAINT_CHARS = 80  # a user instruction probe is the message's first this many characters
MIN_TYPED_CHARS = 12  # typed user messages shorter than this ("continue", "ok") are not instructions
MAX_ERROR_LINE_CHARS = 200  # an error probe is at most this long (the line's head)
MIN_ERROR_LINE_CHARS = 12  # shorter lines are not distinctive
MIN_IDENTIFIER_CHARS = 4  # shorter identifiers match by accident
MAX_ARGUMENT_CHARS = 2_000  # longer string arguments are file bodies, not names: not scanned
EXIT_SCAN_CHARS = 2_000  # a non-zero exit status is looked for in this many characters at each end of an output

MAX_DIAGNOSTIC_CHARS = 500  # a longer "line" is a dump (HTML, JSON) that happens to hold a word
FILE_WINDOW_CHARS = 120  # a located error's file name is looked for this far before its message

# Tool-call parsing: tool names (lower case, namespaces stripped) and the arguments that name files.
READ_TOOLS = frozenset({"read", "read_file", "readfile", "view", "view_file", "open", "open_file",
                        "notebookread", "file_read", "read_many_files", "goto", "scroll_up", "scroll_down"})
WRITE_TOOLS = frozenset({"edit", "write", "multiedit", "notebookedit", "str_replace", "create", "create_file",
                         "write_file", "edit_file", "insert", "append", "replace", "update_file", "delete_file",
                         "file_write", "file_edit", "search_replace"})
EDITOR_TOOLS = frozenset({"str_replace_editor", "str_replace_based_edit_tool", "text_editor"})
SHELL_TOOLS = frozenset({"bash", "shell", "sh", "exec", "exec_command", "run", "terminal", "execute_command",
                         "run_command", "local_shell", "run_shell_command", "execute_bash", "cmd"})
OPEN_FILE_TOOLS = frozenset({"open", "open_file", "create", "goto"})
"""SWE-agent commands that make a file the open one (its `edit`/`insert` without a path act on it)."""
PATH_ARGUMENTS = ("file_path", "path", "filename", "file", "notebook_path", "target_file", "filepath",
                  "absolute_path", "relative_workspace_path")

_WS = re.compile(r"\s+")
_ERROR_WORDS = re.compile(r"error|exception|fatal|failed|failure|cannot|could not|not found|no such|denied|"
                          r"undefined|invalid|refused|panic|abort|✗|×", re.I)
_LOCATION = re.compile(r"^(?P<file>[^\s:()'\"]+?\.[A-Za-z][A-Za-z0-9]{0,7})(?:\(\d+(?:,\d+)?\)|:\d+(?::\d+)?)"
                       r"\s*[:\-]?\s+")
_DIAGNOSTIC_START = re.compile(
    r"^(?:error\b|fatal\b|failed\b|panic(?:ked)?\b|npm err!|npm error\b|uncaught\b|unhandled\b|"
    r"traceback\b(?! \(most recent call last\):?$))", re.I)
_DIAGNOSTIC_MARK = re.compile(r"^(?:FAIL(?:ED)?\b|ERROR\b|E {2,}\S|[A-Z][\w.]*(?:Error|Exception)\b(?::|$|\s)|"
                              r"\*\* \(|[✗×✘❌✕]\s?\S|\d+\) test\b|--- FAIL\b|● \S)")
"""... or a test runner naming the test that failed (ExUnit's `1) test ...`, Go's `--- FAIL:`, Jest's `●`)."""
_DIAGNOSTIC_ANYWHERE = re.compile(r"command not found|no such file or directory|permission denied|"
                                  r"(?<!\b0 )\bfailed\b|\b[1-9]\d* (?:failures?|errors?|failing)\b|"
                                  r"compilation error|panicked at|segmentation fault", re.I)
_GENERIC_ERROR_LINE = re.compile(r"^(exit code \d+|traceback \(most recent call last\):?|error:?|errors?)$", re.I)
_NONZERO_EXIT = re.compile(r"\b(?:exit(?:ed)?(?: with)? (?:code|status)|exit code|error code) [1-9]\d*\b", re.I)
_URL = re.compile(r"https?://[^\s<>\"'`)\]}]+", re.I)
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_HEX = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}\b")
_NUMBER = re.compile(r"(?<![\w.])\d{3,}(?![\w])")
_CAMEL = re.compile(r"\b(?:[a-z]+(?:[A-Z][a-z0-9]+)+|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+)\b")
_SNAKE = re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")
_PATH = re.compile(r"(?<![\w/.~@-])[@~.]{0,2}/?(?:[\w.@+-]+/)+[\w.@+-]*[\w]")
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,5}$")
_FILE = re.compile(r"\b[\w.-]+\.[A-Za-z][A-Za-z0-9]{0,5}\b")
# A ticket id: a project prefix, a dash, a short id with a digit or a dotted sub-number (beads'
# `spotter-4te.4`, `spotter-gqc.1`); plain kebab-case names ("pi-mono") are not ids.
_TICKET = re.compile(r"(?<![\w.-])[A-Za-z][A-Za-z0-9]*-(?=[a-z0-9]*\d|[a-z0-9]+\.\d)[a-z0-9]{2,12}(?:\.\d+)*(?![\w-])")
_CD_PREFIX = re.compile(r"^\s*cd\s+(?:\"[^\"]*\"|'[^']*'|\S+)\s*&&\s*")
_SANITIZED = re.compile(r"\bREDACTED(?:_[A-Z]+)*\b")
ENVIRONMENT_PATHS = ("/dev/null",)
_NAME_CHAR = re.compile(r"[\w-]")
_REJECTED = "The user doesn't want to proceed with this tool use"
_HARNESS_TEXT = ("<", "[Request interrupted", "Caveat: The messages below")
_BODY_KEYS = frozenset({"content", "new_string", "old_string", "new_str", "old_str", "newText", "oldText",
                        "file_text", "text", "edits", "todos", "prompt", "description", "plan", "body", "message"})


def normalize(text: str) -> str:
    """Case-folded, whitespace collapsed: how probes and contexts are compared."""
    return _WS.sub(" ", text).strip().lower()


@dataclass(frozen=True, slots=True)
class Probe:
    type: str
    text: str
    is_path: bool = False
    prefix: bool = False
    """The text is the head of something longer (an instruction's first 80 characters, a long error
    line's head): its end is not a word boundary."""
    file: str = ""
    """An error's file (its location named it): found only where the message follows the file's name."""

    def variants(self) -> tuple[str, ...]:
        """The normalized forms that count as a match: the text, and for a path its last two components."""
        text = normalize(self.text)
        if not self.is_path:
            return (text,)
        path = text.lstrip("@").removeprefix("./").rstrip("/")
        parts = [p for p in path.split("/") if p]
        tail = "/".join(parts[-2:])
        return tuple(dict.fromkeys(v for v in (path, tail) if v))

    def found_in(self, haystack: str) -> bool:
        """Whether a normalized context holds this probe, at word boundaries (an error with a file:
        its message, with the file's name at most FILE_WINDOW_CHARS before it)."""
        if self.file:
            name = normalize(self.file.rsplit("/", 1)[-1])
            return any(name in haystack[max(0, m.start() - FILE_WINDOW_CHARS):m.start()]
                       for v in self.variants() for m in _bounded(v, self.prefix).finditer(haystack))
        return any(v in haystack and _bounded(v, self.prefix).search(haystack) is not None for v in self.variants())

    @property
    def label(self) -> str:
        """How the probe is shown when it is missing."""
        return f"{self.file}: {self.text}" if self.file else self.text


@lru_cache(maxsize=65_536)
def _bounded(variant: str, open_end: bool = False) -> re.Pattern[str]:
    """`variant` where it does not continue a longer name: an edge that is a name character must not
    touch another name character (nor, at the end, a `.` that starts an extension)."""
    head = r"(?<![\w.-])" if _NAME_CHAR.match(variant[:1]) else ""
    tail = r"(?!\.?[\w-])" if _NAME_CHAR.match(variant[-1:]) and not open_end else ""
    return re.compile(head + re.escape(variant) + tail)


# --------------------------------------------------------------------------------------------------
# Tool calls


def tool_kind(name: str) -> str:
    """A tool's name, lower case, without its namespace (`mcp__fs__read_file`, `functions.read`)."""
    return name.rsplit("__", 1)[-1].rsplit(".", 1)[-1].lower()


def call_arguments(call: ToolCall) -> dict[str, object]:
    arguments = call.arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return {"input": arguments}
    return arguments if isinstance(arguments, dict) else {}


def call_path(arguments: dict[str, object]) -> str | None:
    for key in PATH_ARGUMENTS:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def shell_command(call: ToolCall) -> str | None:
    """The command line of a shell call (Codex's `["bash", "-lc", script]`: the script)."""
    if tool_kind(call.name) not in SHELL_TOOLS:
        return None
    arguments = call_arguments(call)
    command = arguments.get("command", arguments.get("cmd", arguments.get("input")))
    if isinstance(command, list):
        parts = [str(p) for p in command]
        if len(parts) >= 3 and parts[0].rsplit("/", 1)[-1] in ("bash", "sh", "zsh") and parts[1] in ("-lc", "-c"):
            return parts[-1]
        return " ".join(parts)
    return command if isinstance(command, str) and command.strip() else None


def file_ops(messages: Iterable[Message]) -> tuple[list[str], list[str]]:
    """(read, modified) paths of the calls, in order: Read-style calls, editor `view` and SWE-agent's
    `open` read; Edit/Write-style calls, other editor commands and SWE-agent's `create`, `edit`,
    `insert` modify (the file they name, else the one SWE-agent last opened)."""
    read: list[str] = []
    modified: list[str] = []
    open_file: str | None = None
    for message in messages:
        for call in message.tool_calls:
            kind = tool_kind(call.name)
            arguments = call_arguments(call)
            path = call_path(arguments)
            if kind in OPEN_FILE_TOOLS and path:
                open_file = path
            if kind in EDITOR_TOOLS and path:
                (read if arguments.get("command") == "view" else modified).append(path)
            elif kind in WRITE_TOOLS and (path or open_file):
                modified.append(path or open_file or "")
            elif kind in READ_TOOLS and (path or open_file):
                read.append(path or open_file or "")
    return read, modified


# --------------------------------------------------------------------------------------------------
# Rendering a context as text


def message_text(message: Message) -> str:
    """What the model reads of a message, as plain text: each block's text in order (text, a tool
    call's name and its arguments, a tool result's text, thinking); images have no text. A call's
    string arguments are shown as the model reads them, not JSON-escaped (a command's quotes and line
    breaks are its own: `--title="x"`, not `--title=\\"x\\"`), one `key: value` line each."""
    parts: list[str] = []
    for block in message.blocks:
        if isinstance(block, Text):
            parts.append(block.text)
        elif isinstance(block, ToolCall):
            parts.append(call_text(block))
        elif isinstance(block, ToolResult):
            parts.extend(p.text for p in block.content if isinstance(p, Text))
        elif isinstance(block, Thinking):
            parts.append(block.thinking)
        elif isinstance(block, Image):
            continue
    return "\n".join(parts)


def call_text(call: ToolCall) -> str:
    arguments = call.arguments
    if not isinstance(arguments, dict):
        return f"{call.name} {arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)}"
    lines = [f"{key}: {value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
             for key, value in arguments.items()]
    return "\n".join([call.name, *lines])


def _argument_texts(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _argument_texts(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _argument_texts(v)]
    return [] if value is None else [str(value)]


def haystack(texts: Iterable[str]) -> str:
    """One normalized string to search probes in (parts joined by a separator no probe contains)."""
    return "\x00".join(normalize(t) for t in texts)


# --------------------------------------------------------------------------------------------------
# Extraction


def is_typed(message: Message) -> bool:
    """A message the user typed (not a tool result, not text the harness injected)."""
    if message.role != "user" or message.tool_results or message.meta.get("pi_bash_execution"):
        return False
    if message.meta.get("is_meta") or message.meta.get("isMeta") or message.meta.get("is_compact_summary"):
        return False
    return is_typed_text(message.text)


def is_typed_text(text: str) -> bool:
    """Text long enough to be an instruction and not injected by the harness (tags, notices)."""
    text = text.strip()
    return len(text) >= MIN_TYPED_CHARS and not text.startswith(_HARNESS_TEXT)


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.replace("\\n", "\n").splitlines() if line.strip()]


def error_lines(text: str) -> list[tuple[str, str]]:
    """(file, message) of every line that reads as an error: after a leading location (`path(12,5): `,
    `path:12:5: `) it starts with an error word (error, fatal, failed, panic, npm ERR!, Uncaught) or
    mark (FAIL, ERROR, pytest's `E  `, an exception name, Elixir's `** (`, a cross, a failed test's
    name), or it says command not found, no such file or directory, permission denied, failed,
    N failures, compilation error, panicked at, segmentation fault."""
    out = []
    for line in _lines(text):
        if len(line) < MIN_ERROR_LINE_CHARS or len(line) > MAX_DIAGNOSTIC_CHARS or _GENERIC_ERROR_LINE.match(line):
            continue
        location = _LOCATION.match(line)
        message = line[location.end():] if location else line
        if _DIAGNOSTIC_START.match(message) or _DIAGNOSTIC_MARK.match(message) or _DIAGNOSTIC_ANYWHERE.search(message):
            out.append((location.group("file") if location else "", message[:MAX_ERROR_LINE_CHARS]))
    return out


def error_line(text: str) -> str | None:
    """The distinctive line of a failing output that has no error line: the first line naming an
    error, else the first substantial line; None when there is nothing distinctive."""
    lines = [line for line in _lines(text) if len(line) >= MIN_ERROR_LINE_CHARS and not _GENERIC_ERROR_LINE.match(line)]
    if not lines:
        return None
    named = next((line for line in lines if _ERROR_WORDS.search(line)), lines[0])
    return named[:MAX_ERROR_LINE_CHARS]


def is_failure(result: ToolResult) -> bool:
    """An error result or a non-zero exit; a call the user declined (Claude Code's rejection notice)
    is a decision, not a failure."""
    if result.text.startswith(_REJECTED):
        return False
    text = result.text
    # Harnesses print the exit status first (Claude Code) or last (Pi): look at both ends.
    return result.is_error or bool(_NONZERO_EXIT.search(text[:EXIT_SCAN_CHARS] + "\n" + text[-EXIT_SCAN_CHARS:]))


def result_errors(call: ToolCall | None, result: ToolResult) -> list[Probe]:
    """The error probes of one result: its error lines; else, when it failed, its distinctive line.
    File reads are not scanned, a declined call has none."""
    if result.text.startswith(_REJECTED):
        return []
    reads = call is not None and tool_kind(call.name) in READ_TOOLS
    found = [] if reads else error_lines(result.text)
    if not found and is_failure(result):
        line = error_line(result.text)
        found = [("", line)] if line else []
    return [Probe("errors", message, prefix=len(message) >= MAX_ERROR_LINE_CHARS, file=file)
            for file, message in found]


def _is_path(value: str) -> bool:
    """A slash-separated token names a file or folder when it is anchored (/, ~, ., @), has a file
    extension, or has three or more parts; "print/json" and "show/hide" are prose."""
    parts = [p for p in value.split("/") if p]
    return value.startswith(("/", "~", ".", "@")) or bool(_EXTENSION.search(parts[-1] if parts else "")) \
        or len(parts) >= 3


def user_identifiers(text: str) -> list[tuple[str, bool]]:
    """(identifier, is_path) pairs a user message names exactly, in order of appearance."""
    found: list[tuple[int, str, bool]] = []
    taken: list[tuple[int, int]] = []

    def add(pattern: re.Pattern[str], is_path: bool = False, minimum: int = MIN_IDENTIFIER_CHARS,
            accept: Callable[[str], bool] | None = None) -> None:
        for match in pattern.finditer(text):
            start, end = match.span()
            value = match.group(0).rstrip(".,;:")
            if len(value) < minimum or any(s <= start < e or s < end <= e for s, e in taken):
                continue
            if accept is not None and not accept(value):
                continue
            taken.append((start, end))
            found.append((start, value, is_path))

    add(_URL)
    add(_UUID)
    add(_PATH, is_path=True, accept=_is_path)
    add(_TICKET)
    add(_FILE)
    add(_HEX)
    add(_CAMEL)
    add(_SNAKE)
    add(_NUMBER, minimum=3)
    return [(value, is_path) for _, value, is_path in sorted(found)]


def call_identifiers(call: ToolCall) -> list[tuple[str, bool]]:
    """Paths and identifiers in a tool call's arguments (file bodies and prose left out; bare numbers,
    such as timeouts and line offsets, are settings rather than names)."""
    args = call_arguments(call)
    out: list[tuple[str, bool]] = []
    path = call_path(args)
    if path:
        out.append((path, True))
    for key, value in args.items():
        if key in _BODY_KEYS:
            continue
        for text in _argument_texts(value):
            if len(text) <= MAX_ARGUMENT_CHARS:
                out.extend(item for item in user_identifiers(text)
                           if (not item[1] or item[0] != path) and not item[0].isdigit())
    return list(dict.fromkeys(out))


@dataclass(frozen=True, slots=True)
class ProbeSet:
    """The probes of one compaction point, by type, and the span they came from."""

    probes: dict[str, list[Probe]]
    evicted_messages: int

    def counts(self) -> dict[str, int]:
        return {t: len(self.probes.get(t, [])) for t in PROBE_TYPES}


def _dedup(probes: Iterable[Probe]) -> list[Probe]:
    seen: dict[tuple[str, str], Probe] = {}
    for probe in probes:
        seen.setdefault((normalize(probe.text), normalize(probe.file.rsplit("/", 1)[-1])), probe)
    return list(seen.values())


def command_probe(command: str) -> str | None:
    """What a command is known by: its first non-empty line, without a leading `cd DIR &&`."""
    line = next((raw.strip() for raw in command.splitlines() if raw.strip()), "")
    while (match := _CD_PREFIX.match(line)) is not None:
        line = line[match.end():].strip()
    return line or None


def environment_paths(cwds: Iterable[str]) -> frozenset[str]:
    """The normalized paths that are the environment: each working directory, its parents, `/dev/null`."""
    out = set(ENVIRONMENT_PATHS)
    for cwd in cwds:
        path = normalize(cwd).rstrip("/")
        while path:
            out.add(path)
            path = path.rpartition("/")[0]
    return frozenset(out)


def is_environment(probe: Probe, environment: frozenset[str]) -> bool:
    """A probe that names the environment (see the module docstring), not a fact of the session."""
    if _SANITIZED.fullmatch(probe.text.strip()):
        return True
    if probe.type in ("identifiers", "continuation") and _SANITIZED.search(probe.text):
        return True
    return normalize(probe.text).lstrip("@").removeprefix("./").rstrip("/") in environment


def extract(messages: Sequence[Message], first_kept: int, point: int, *, cwds: Iterable[str] = (),
            queued: Iterable[str] = ()) -> ProbeSet:
    """The probes at a compaction point: facts of `messages[:first_kept]`, continuation from the tool
    calls after `messages[:point]`. `cwds` are the session's working directories (the environment),
    `queued` the prompts the user queued during the evicted span."""
    environment = environment_paths(cwds)
    evicted = messages[:first_kept]
    read, modified = file_ops(evicted)
    errors: list[Probe] = []
    commands: list[Probe] = []
    identifiers: list[Probe] = []
    constraints: list[Probe] = []
    typed: list[str] = []
    calls: dict[str, ToolCall] = {}
    for message in evicted:
        for call in message.tool_calls:
            calls[call.id] = call
            command = shell_command(call)
            line = command_probe(command) if command else None
            if line:
                commands.append(Probe("commands", line))
        for result in message.tool_results:
            errors.extend(result_errors(calls.get(result.call_id), result))
        if is_typed(message):
            typed.append(message.text.strip())
    typed.extend(t.strip() for t in queued if is_typed_text(t))
    for text in typed:
        constraints.append(Probe("user_constraints", text[:CONSTRAINT_CHARS], prefix=len(text) > CONSTRAINT_CHARS))
        identifiers.extend(Probe("identifiers", value, is_path) for value, is_path in user_identifiers(text))
    modified_set = {normalize(p) for p in modified}
    before = haystack(message_text(m) for m in evicted)
    continuation: list[Probe] = []
    for call in [c for m in messages[point:] for c in m.tool_calls][:CONTINUATION_CALLS]:
        for value, is_path in call_identifiers(call):
            probe = Probe("continuation", value, is_path)
            if probe.found_in(before):
                continuation.append(probe)
    probes = {
        "modified_files": _dedup(Probe("modified_files", p, True) for p in modified),
        "read_files": _dedup(Probe("read_files", p, True) for p in read if normalize(p) not in modified_set),
        "errors": _dedup(errors),
        "commands": _dedup(commands),
        "identifiers": _dedup(identifiers),
        "continuation": _dedup(continuation),
        "user_constraints": _dedup(constraints),
    }
    probes = {kind: [p for p in items if not is_environment(p, environment)] for kind, items in probes.items()}
    return ProbeSet(probes, len(evicted))


@dataclass(frozen=True, slots=True)
class Score:
    found: int
    total: int
    missing: tuple[str, ...] = ()

    @property
    def recall(self) -> float | None:
        return self.found / self.total if self.total else None


def score(probes: ProbeSet, context: str) -> dict[str, Score]:
    """Recall of each probe type in a normalized context (`haystack`)."""
    out = {}
    for kind in PROBE_TYPES:
        items = probes.probes.get(kind, [])
        missing = tuple(p.label for p in items if not p.found_in(context))
        out[kind] = Score(len(items) - len(missing), len(items), missing)
    return out
