"""An independent retention checker: scores the views `ctxwin eval retention --views DIR` wrote, by
rules of its own. It imports nothing from ctxwin (standard library and tiktoken only): it reads the
session files itself, finds the real compaction points itself, builds the real harness's own view
itself, and decides for itself what an error, a command, a file, an instruction is.

    python benchmarks/independent_retention.py SESSION... --views DIR [--policy ctxwin] [--json]

Sessions: Claude Code and Pi JSONL, SWE-agent `.traj`. Points: the real compaction points it finds
itself (Claude Code's `compact_boundary`, Pi's `compaction` entries); for a file without one, the
synthetic points ctxwin chose are read from the `<stem>.points.json` that `--views` writes next to the
views (where each point is in the file: nothing else is taken from it).

Probes come from the evicted span of each point: every message before the first one the harness kept
verbatim (from the start of the session). Types:

- `modified_files`: paths of Edit / Write / MultiEdit / NotebookEdit (Claude Code), edit / write (Pi)
  and SWE-agent's create / edit / insert (on the file last opened when they name none) calls;
  `read_files`: paths of Read / read / SWE-agent open calls never modified in the span.
- `errors`: every distinct line of a tool result that reads as an error by its content, whatever the
  exit code: after a leading location (`path(12,5): `, `path:12:5: `) it starts with an error word
  (`error`, `fatal`, `FAILED`, `FAIL`, `ERROR`, `panic`, an exception name with a colon, `npm ERR!`,
  `npm error`, `** (` (Elixir), a cross `✗ × ✘ ✕`, pytest's `E  `), or it names a test that failed
  (ExUnit's `1) test ...`, Go's `--- FAIL:`, Jest's `● ...`), or it says `command not found`,
  `No such file or directory`, `Permission denied`, `failed` (not "0 failed"), N failures / N
  errors / N failing (N > 0), `compilation error`, `panicked at`, `segmentation fault`; plus, for a
  result flagged as an error or
  reporting a non-zero exit that has no such line, its first substantial line. File reads are not
  looked at (source code is full of the word "error"); a declined call is not an error. An error is
  identified by its message and the file named by its location: it counts as kept when one line of
  the view holds the message (its first 200 characters) and that file's name. Its line and column
  numbers are not required (a summary that groups 26 occurrences of one message says it once).
- `commands`: the first line of every shell command, a leading `cd DIR &&` removed.
- `user_instructions`: the first 80 characters of every message the user typed (harness-injected
  messages, tags and interrupt notices left out; prompts queued while the agent worked included).
- `identifiers`: URLs, UUIDs, hashes, numbers of 4+ digits, code names (snake_case, camelCase) and
  file paths the user typed.
- `continuation`: paths and names in the arguments of the 30 tool calls after the point that also
  appear in the evicted span.

A probe is found by normalized containment (case-insensitive, whitespace collapsed; a path also by
its last two components) at word edges. The session's working directory (and its parents) and the
markers a sanitizer left (`REDACTED_EMAIL`) are not facts and are never probes.

Size: the view text is counted with cl100k and brought to the harness's units with the session's own
Claude/cl100k ratio (measured from the usage records: context growth between consecutive calls over
the cl100k count of what was appended), plus the fixed overhead the files do not hold (system prompt,
tool schemas: the first call's context less its messages). That estimate is compared with the
harness's own next request (its recorded usage).

The last line printed is one JSON object (with --json, the only output).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tiktoken

CONSTRAINT_CHARS = 80
MIN_TYPED_CHARS = 10
MAX_ERROR_CHARS = 200
MIN_ERROR_CHARS = 12
MAX_ERROR_LINE_CHARS = 600  # a longer "line" is a dump that happens to contain a word
CONTINUATION_CALLS = 30
MAX_ARGUMENT_CHARS = 2_000
RATIO_MIN_CHARS = 2_000  # calibration pairs need at least this much appended text
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)
RANKS = Path(__file__).resolve().parents[1] / "src" / "ctxwin" / "tokens" / "data" / "cl100k_base.tiktoken.gz"
"""Where the cl100k rank file is when tiktoken cannot download it (a data file of this checkout)."""

MODIFY_TOOLS = {"edit", "write", "multiedit", "notebookedit", "create", "insert", "append"}
READ_TOOLS = {"read", "open"}
SHELL_TOOLS = {"bash"}
SWE_COMMANDS = {"open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "append", "submit",
                "search_file", "search_dir", "find_file"}
SWE_OPENS = {"open", "create"}  # make a file the open one: `edit`/`insert` without a path act on it
SWE_EDITS = {"edit", "insert", "append"}
PATH_ARGS = ("file_path", "path", "notebook_path", "filename")
BODY_ARGS = {"content", "new_string", "old_string", "edits", "todos", "prompt", "description", "plan", "newText",
             "oldText", "text"}

_WS = re.compile(r"\s+")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LOCATION = re.compile(r"^(?P<file>[^\s:()'\"]+?\.[A-Za-z0-9]{1,8})"
                       r"(?:\((?P<row>\d+)(?:,\d+)?\)|:(?P<line>\d+)(?::\d+)?)\s*[:\-]?\s+")
_ERROR_WORD = re.compile(
    r"^(?:error\b|fatal\b|failed\b|panic(?:ked)?\b|traceback \(most recent call last\)|npm err!|npm error\b|"
    r"uncaught\b|unhandled\b)", re.I)
_ERROR_MARK = re.compile(r"^(?:FAIL\b|ERROR\b|E {2,}\S|[A-Z][A-Za-z0-9_.]*(?:Error|Exception)(?::|$|\s)|"
                         r"\*\* \(|[✗×✘❌✕])")
_TEST_FAILED = re.compile(r"^(?:\d+\) test\b|--- FAIL\b|● \S)")
"""A test runner naming the test that failed: ExUnit's `1) test renders the page (AppTest)`, Go's
`--- FAIL: TestX`, Jest's `● Suite › test`."""
_ERROR_ANYWHERE = re.compile(r"command not found|No such file or directory|Permission denied|(?<!\b0 )\bfailed\b|"
                             r"\b[1-9]\d* (?:failures?|errors?|failing)\b|compilation error|panicked at|"
                             r"segmentation fault", re.I)
_NONZERO = re.compile(r"\b(?:exit code|exited with code|exit status|Command exited with code)[: ]+([1-9]\d*)", re.I)
_STATUS_LINE = re.compile(r"^(?:exit code \d+|command exited with code \d+|error:?|errors?:?)$", re.I)
_CD = re.compile(r"^\s*cd\s+(?:\"[^\"]*\"|'[^']*'|\S+)\s*&&\s*")
_URL = re.compile(r"https?://[^\s<>\"'`)\]}]+")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_HEX = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
_NUMBER = re.compile(r"(?<![\w.])\d{4,}(?!\w)")
_CODE = re.compile(r"\b(?:[a-z]+(?:[A-Z][a-z0-9]+)+|[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+|"
                   r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+)\b")
_FILEPATH = re.compile(r"(?<![\w/.-])[@~.]{0,2}/?(?:[\w.@+-]+/)*[\w@+-]+\.[A-Za-z][A-Za-z0-9]{0,6}\b")
_NAME_EDGE = re.compile(r"[\w-]")
_SANITIZED = re.compile(r"\bREDACTED(?:_[A-Z]+)*\b")
_HARNESS = ("<", "[Request interrupted", "Caveat:", "This session is being continued")
_DECLINED = "The user doesn't want to proceed"


@dataclass
class Msg:
    role: str  # user | assistant | tool
    texts: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (tool name, arguments)
    results: list[tuple[str, bool, str]] = field(default_factory=list)  # (text, flagged error, tool name)
    typed: bool = False
    origin: object = None  # where in the file: the line (JSONL), the history entry (`.traj`)


@dataclass
class Point:
    evicted: list[Msg]
    after: list[Msg]
    recorded_view: str
    next_request: int | None


@dataclass
class Session:
    stem: str
    cwd: str
    messages: list[Msg]
    points: list[Point]
    calls: list[tuple[int, int, str]]  # (context tokens, output tokens, text appended before the call)


# --------------------------------------------------------------------------------------------------
# Reading sessions


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in _blocks(content) if b.get("type") == "text")


def read_claude_code(records: list[tuple[int, dict[str, Any]]], stem: str) -> Session:
    messages: list[Msg] = []
    calls: list[tuple[int, int, str]] = []
    names: dict[str, str] = {}
    boundaries: list[int] = []
    summaries: dict[int, str] = {}
    usage_at: dict[int, int] = {}
    seen_ids: set[str] = set()
    appended: list[str] = []
    cwd = ""
    for line, record in records:
        if record.get("isSidechain"):
            continue
        cwd = cwd or record.get("cwd") or ""
        kind = record.get("type")
        if kind == "system" and record.get("subtype") == "compact_boundary":
            boundaries.append(len(messages))
            continue
        if kind == "queue-operation" and record.get("operation") == "enqueue":
            text = record.get("content")
            if isinstance(text, str) and not text.lstrip().startswith(_HARNESS):
                messages.append(Msg("user", [text], typed=True, origin=line))
            continue
        message = record.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            continue
        if record.get("isCompactSummary"):
            summaries[len(messages)] = _result_text(message.get("content"))
            continue
        if kind == "user":
            msg = Msg("user", origin=line)
            for block in _blocks(message.get("content")):
                if block.get("type") == "tool_result":
                    msg.role = "tool"
                    name = names.get(str(block.get("tool_use_id")), "")
                    msg.results.append((_result_text(block.get("content")), bool(block.get("is_error")), name))
                elif block.get("type") == "text":
                    msg.texts.append(block.get("text", ""))
            msg.typed = msg.role == "user" and not record.get("isMeta") and _typed(" ".join(msg.texts))
            messages.append(msg)
            appended.extend(msg.texts + [r[0] for r in msg.results])
            continue
        msg = Msg("assistant", origin=line)
        for block in _blocks(message.get("content")):
            if block.get("type") == "text":
                msg.texts.append(block.get("text", ""))
            elif block.get("type") == "tool_use":
                names[str(block.get("id"))] = str(block.get("name", ""))
                arguments = block.get("input") if isinstance(block.get("input"), dict) else {}
                msg.calls.append((str(block.get("name", "")), arguments))
        usage = message.get("usage")
        message_id = str(message.get("id", ""))
        if isinstance(usage, dict) and message_id not in seen_ids:
            seen_ids.add(message_id)
            context = sum(int(usage.get(k) or 0) for k in
                          ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
            calls.append((context, int(usage.get("output_tokens") or 0), "\n".join(appended)))
            usage_at.setdefault(len(messages), context)
            appended = []
        messages.append(msg)
        appended.extend(msg.texts + [json.dumps(a) for _, a in msg.calls])
    points = []
    for boundary in boundaries:
        summary = next((text for at, text in sorted(summaries.items()) if at >= boundary), "")
        after = next((c for at, c in sorted(usage_at.items()) if at >= boundary), None)
        points.append(Point(messages[:boundary], messages[boundary:], summary, after))
    return Session(stem, cwd, messages, points, calls)


def read_pi(records: list[tuple[int, dict[str, Any]]], stem: str) -> Session:
    messages: list[Msg] = []
    calls: list[tuple[int, int, str]] = []
    first_at: dict[int, int] = {}  # file entry index -> message index
    compactions: list[tuple[int, int, str]] = []  # (message index at the entry, first kept entry, summary)
    usage_at: dict[int, int] = {}
    appended: list[str] = []
    cwd = ""
    for index, (line, record) in enumerate(records):
        kind = record.get("type")
        if kind == "session":
            cwd = record.get("cwd") or ""
        if kind == "compaction":
            compactions.append((len(messages), int(record.get("firstKeptEntryIndex", 0)), record.get("summary", "")))
            continue
        message = record.get("message")
        if kind != "message" or not isinstance(message, dict):
            continue
        first_at[index] = len(messages)
        role = message.get("role")
        if role == "user":
            texts = [b.get("text", "") for b in _blocks(message.get("content")) if b.get("type") == "text"]
            msg = Msg("user", texts, typed=_typed(" ".join(texts)))
        elif role == "assistant":
            msg = Msg("assistant")
            for block in _blocks(message.get("content")):
                if block.get("type") == "text":
                    msg.texts.append(block.get("text", ""))
                elif block.get("type") == "toolCall":
                    arguments = block.get("arguments") if isinstance(block.get("arguments"), dict) else {}
                    msg.calls.append((str(block.get("name", "")), arguments))
            usage = message.get("usage")
            context = sum(int(usage.get(k) or 0) for k in ("input", "cacheRead", "cacheWrite")) \
                if isinstance(usage, dict) else 0
            if context and message.get("stopReason") not in ("error", "aborted"):
                calls.append((context, int(usage.get("output") or 0), "\n".join(appended)))
                usage_at.setdefault(len(messages), context)
                appended = []
        elif role == "toolResult":
            msg = Msg("tool", results=[(_result_text(message.get("content")), bool(message.get("isError")),
                                        str(message.get("toolName", "")))])
        elif role == "bashExecution":
            msg = Msg("assistant", calls=[("bash", {"command": message.get("command", "")})], origin=line)
            messages.append(msg)
            exit_code = message.get("exitCode")
            output = str(message.get("output", "")) + (f"\nExit code {exit_code}" if exit_code else "")
            msg = Msg("tool", results=[(output, False, "bash")])
        else:
            continue
        msg.origin = line
        messages.append(msg)
        appended.extend(msg.texts + [r[0] for r in msg.results] + [json.dumps(a) for _, a in msg.calls])
    points = []
    for at, first_kept_entry, summary in compactions:
        first_kept = first_at.get(first_kept_entry, at)
        kept = messages[first_kept:at]
        view = "\n\n".join([summary, *(render(m) for m in kept)])
        after = next((c for i, c in sorted(usage_at.items()) if i >= at), None)
        points.append(Point(messages[:first_kept], messages[at:], view, after))
    return Session(stem, cwd, messages, points, calls)


def render(message: Msg) -> str:
    return "\n".join([*message.texts, *(f"{n} {json.dumps(a, ensure_ascii=False)}" for n, a in message.calls),
                      *(r[0] for r in message.results)])


def _typed(text: str) -> bool:
    text = text.strip()
    return len(text) >= MIN_TYPED_CHARS and not text.startswith(_HARNESS)


def read_swe_agent(document: dict[str, Any], stem: str) -> Session:
    """A SWE-agent trajectory's `history`: function calls and their observations, or thought/action
    steps (the action a command: SWE-agent's own, `open`/`create`/`edit`/`submit`..., or the shell's)
    and the observation after each."""
    messages: list[Msg] = []
    for index, entry in enumerate(document.get("history", [])):
        if not isinstance(entry, dict) or entry.get("is_demo"):
            continue
        role, origin = entry.get("role"), f"history[{index}]"
        content = entry.get("content")
        text = content if isinstance(content, str) else _result_text(content)
        if role == "assistant" and entry.get("tool_calls"):
            msg = Msg("assistant", [text] if text else [], origin=origin)
            for call in entry["tool_calls"]:
                function = call.get("function", {}) if isinstance(call, dict) else {}
                try:
                    arguments = json.loads(function.get("arguments") or "{}")
                except ValueError:
                    arguments = {}
                msg.calls.append((str(function.get("name", "")), arguments if isinstance(arguments, dict) else {}))
            messages.append(msg)
        elif role == "assistant" and isinstance(entry.get("action"), str) and entry["action"].strip():
            action = entry["action"].strip()
            words = action.split()
            name = words[0] if words and words[0] in SWE_COMMANDS else "bash"
            arguments: dict[str, Any] = {"command": action} if name == "bash" else {}
            if name in ("open", "create") and len(words) > 1:
                arguments["path"] = words[1]
            messages.append(Msg("assistant", origin=origin, calls=[(name, arguments)]))
        elif role == "tool" or (role == "user" and messages and messages[-1].calls and not messages[-1].results
                                 and entry.get("message_type") == "observation" and index > 1):
            name = messages[-1].calls[0][0] if messages and messages[-1].calls else ""
            messages.append(Msg("tool", results=[(text, False, name)], origin=origin))
        elif role == "user":
            messages.append(Msg("user", [text], typed=_typed(text), origin=origin))
        elif role == "assistant":
            messages.append(Msg("assistant", [text], origin=origin))
    return Session(stem, "", messages, [], [])


def read_session(path: Path) -> Session:
    stem = path.name.removesuffix(".gz").rsplit(".", 1)[0]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    if path.name.removesuffix(".gz").endswith(".traj"):
        return read_swe_agent(json.loads(text), stem)
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append((number, record))
    if any(r.get("type") == "session" for _, r in records[:3]):
        return read_pi(records, stem)
    return read_claude_code(records, stem)


def sidecar_points(session: Session, views: Path) -> list[tuple[int, Point]]:
    """The points ctxwin chose itself (synthetic: the file has no real compaction), by where they are
    in the file (`<stem>.points.json`, written with the views); real points are found above."""
    path = views / f"{session.stem}.points.json"
    if not path.exists():
        return []
    out = []
    for record in json.loads(path.read_text()):
        if record.get("kind") != "synthetic":
            continue
        origins = [str(m.origin) for m in session.messages]
        # The cut in this reader's own order: at the first kept message and the first after the point
        # (a harness record split in several here is one message there: its first record is named).
        kept = str(record.get("first_kept_origin"))
        at = str(record.get("index_origin"))
        first = origins.index(kept) if kept in origins else len(origins)
        start = origins.index(at) if at in origins else len(origins)
        out.append((int(record["point"]), Point(session.messages[:first], session.messages[start:], "", None)))
    return out


# --------------------------------------------------------------------------------------------------
# Probes


def normalize(text: str) -> str:
    return _WS.sub(" ", text).strip().casefold()


@dataclass(frozen=True)
class Probe:
    kind: str
    text: str
    is_path: bool = False
    file: str = ""  # errors: the file their location names
    open_end: bool = False

    def forms(self) -> list[str]:
        text = normalize(self.text)
        if not self.is_path:
            return [text]
        parts = [p for p in text.lstrip("@").removeprefix("./").rstrip("/").split("/") if p]
        return list(dict.fromkeys(["/".join(parts), "/".join(parts[-2:])]))


def _bounded(form: str, haystack: str, open_end: bool) -> bool:
    start = 0
    while (at := haystack.find(form, start)) >= 0:
        before = haystack[at - 1] if at else ""
        after = haystack[at + len(form)] if at + len(form) < len(haystack) else ""
        head_ok = not (_NAME_EDGE.match(form[:1]) and before and (_NAME_EDGE.match(before) or before == "."))
        tail_ok = open_end or not (_NAME_EDGE.match(form[-1:]) and after and _NAME_EDGE.match(after))
        if head_ok and tail_ok:
            return True
        start = at + 1
    return False


def found(probe: Probe, text: str, lines: list[str]) -> bool:
    if probe.kind == "errors":
        message = normalize(probe.text)
        name = normalize(probe.file.rsplit("/", 1)[-1]) if probe.file else ""
        return any(message in line and (not name or name in line) for line in lines)
    return any(_bounded(form, text, probe.open_end) for form in probe.forms() if form)


def error_lines(text: str) -> list[tuple[str, str]]:
    """(file, message) of every line of `text` that reads as an error."""
    out = []
    for raw in _ANSI.sub("", text.replace("\\n", "\n")).splitlines():
        line = raw.strip()
        if len(line) < MIN_ERROR_CHARS or len(line) > MAX_ERROR_LINE_CHARS or _STATUS_LINE.match(line):
            continue
        location = _LOCATION.match(line)
        file, message = (location.group("file"), line[location.end():]) if location else ("", line)
        if _ERROR_WORD.match(message) or _ERROR_MARK.match(message) or _TEST_FAILED.match(message) or \
                _ERROR_ANYWHERE.search(message):
            out.append((file, message))
    return out


def _nonzero(text: str) -> bool:
    return bool(_NONZERO.search(text[:2000] + "\n" + text[-2000:]))


def user_identifiers(text: str) -> list[tuple[str, bool]]:
    out: list[tuple[str, bool]] = []
    taken: list[tuple[int, int]] = []
    for pattern, is_path in ((_URL, False), (_UUID, False), (_FILEPATH, True), (_HEX, False), (_CODE, False),
                             (_NUMBER, False)):
        for match in pattern.finditer(text):
            if any(s <= match.start() < e for s, e in taken):
                continue
            value = match.group(0).rstrip(".,;:")
            if len(value) >= 4:
                taken.append(match.span())
                out.append((value, is_path))
    return out


def _environment(cwd: str) -> set[str]:
    out = {"/dev/null"}
    path = normalize(cwd).rstrip("/")
    while path:
        out.add(path)
        path = path.rpartition("/")[0]
    return out


def probes(session: Session, point: Point) -> dict[str, list[Probe]]:
    modified: list[str] = []
    read: list[str] = []
    errors: dict[tuple[str, str], Probe] = {}
    commands: list[str] = []
    instructions: list[Probe] = []
    identifiers: list[Probe] = []
    open_file: str | None = None
    for message in point.evicted:
        for name, arguments in message.calls:
            tool = name.lower()
            path = next((arguments[k] for k in PATH_ARGS if isinstance(arguments.get(k), str)), None)
            if tool in SWE_OPENS and path:
                open_file = path
            if path is None and tool in SWE_EDITS:
                path = open_file
            if path and tool in MODIFY_TOOLS:
                modified.append(path)
            elif path and tool in READ_TOOLS:
                read.append(path)
            command = arguments.get("command") if tool in SHELL_TOOLS else None
            if isinstance(command, str):
                line = next((x.strip() for x in command.splitlines() if x.strip()), "")
                while (cd := _CD.match(line)) is not None:
                    line = line[cd.end():].strip()
                if line:
                    commands.append(line)
        for text, flagged, tool in message.results:
            if tool.lower() in READ_TOOLS or text.startswith(_DECLINED):
                continue
            found_lines = error_lines(text)
            if not found_lines and (flagged or _nonzero(text)):
                first = next((x.strip() for x in text.replace("\\n", "\n").splitlines()
                              if len(x.strip()) >= MIN_ERROR_CHARS and not _STATUS_LINE.match(x.strip())), None)
                if first:
                    found_lines = [("", first)]
            for file, line in found_lines:
                key = (file.rsplit("/", 1)[-1].casefold(), normalize(line[:MAX_ERROR_CHARS]))
                errors.setdefault(key, Probe("errors", line[:MAX_ERROR_CHARS], file=file))
        if message.typed:
            text = _WS.sub(" ", " ".join(message.texts)).strip()
            instructions.append(Probe("user_instructions", text[:CONSTRAINT_CHARS], open_end=len(text) > 80))
            identifiers.extend(Probe("identifiers", v, p) for v, p in user_identifiers(text))
    modified_keys = {normalize(p) for p in modified}
    before = normalize("\n".join(render(m) for m in point.evicted))
    continuation: list[Probe] = []
    for _, arguments in [c for m in point.after for c in m.calls][:CONTINUATION_CALLS]:
        for key, value in arguments.items():
            if key in BODY_ARGS or not isinstance(value, str) or len(value) > MAX_ARGUMENT_CHARS:
                continue
            for item, is_path in [(value, True)] if key in PATH_ARGS else user_identifiers(value):
                probe = Probe("continuation", item, is_path)
                if any(_bounded(f, before, False) for f in probe.forms()):
                    continuation.append(probe)
    environment = _environment(session.cwd)

    def keep(items: list[Probe]) -> list[Probe]:
        seen: dict[str, Probe] = {}
        for probe in items:
            key = normalize(probe.text) + "\x00" + probe.file.casefold()
            text = normalize(probe.text).lstrip("@").rstrip("/")
            if text not in environment and not _SANITIZED.search(probe.text):
                seen.setdefault(key, probe)
        return list(seen.values())

    return {
        "modified_files": keep([Probe("modified_files", p, True) for p in modified]),
        "read_files": keep([Probe("read_files", p, True) for p in read if normalize(p) not in modified_keys]),
        "errors": list(errors.values()),
        "commands": keep([Probe("commands", c) for c in commands]),
        "user_instructions": keep(instructions),
        "identifiers": keep(identifiers),
        "continuation": keep(continuation),
    }


# --------------------------------------------------------------------------------------------------
# Size


def encoding() -> tiktoken.Encoding:
    try:
        return tiktoken.get_encoding("cl100k_base")
    except Exception:  # no network: build it from the rank file of this checkout
        ranks = {}
        for line in gzip.decompress(RANKS.read_bytes()).splitlines():
            if line:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
        return tiktoken.Encoding("cl100k_base_local", pat_str=CL100K_PATTERN, mergeable_ranks=ranks,
                                 special_tokens={"<|endoftext|>": 100257})


def calibration(session: Session, enc: tiktoken.Encoding) -> tuple[float, int]:
    """(harness tokens per cl100k token, fixed overhead in harness tokens), from the usage records."""
    ratios = []
    for (before, output, _), (after, _, text) in zip(session.calls, session.calls[1:], strict=False):
        if len(text) >= RATIO_MIN_CHARS and after > before:
            counted = len(enc.encode(text, disallowed_special=()))
            if counted:
                ratios.append((after - before - output) / counted)
    ratio = statistics.median(ratios) if ratios else 1.0
    first_context, _, first_text = session.calls[0] if session.calls else (0, 0, "")
    overhead = max(0, round(first_context - ratio * len(enc.encode(first_text, disallowed_special=()))))
    return ratio, overhead


# --------------------------------------------------------------------------------------------------
# Scoring


def score(kinds: dict[str, list[Probe]], text: str) -> dict[str, dict[str, Any]]:
    haystack = normalize(text)
    lines = [normalize(line) for line in text.splitlines()]
    out = {}
    for kind, items in kinds.items():
        missing = [p.text if not p.file else f"{p.file}: {p.text}" for p in items if not found(p, haystack, lines)]
        out[kind] = {"found": len(items) - len(missing), "total": len(items),
                     "recall": round((len(items) - len(missing)) / len(items), 4) if items else None,
                     "missing": missing[:10]}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sessions", nargs="+", type=Path)
    parser.add_argument("--views", type=Path, required=True, help="the folder `ctxwin eval retention --views` wrote")
    parser.add_argument("--policy", default="ctxwin", help="whose views to score (default: ctxwin)")
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    args = parser.parse_args(argv)
    enc = encoding()
    results = []
    for path in args.sessions:
        session = read_session(path)
        ratio, overhead = calibration(session, enc)
        for number, point in [*enumerate(session.points), *sidecar_points(session, args.views)]:
            view_file = args.views / f"{session.stem}.{args.policy}.p{number}.txt"
            if not view_file.exists():
                print(f"missing view {view_file}", file=sys.stderr)
                continue
            view = view_file.read_text(encoding="utf-8", errors="replace")
            kinds = probes(session, point)
            tokens = {name: overhead + round(ratio * len(enc.encode(text, disallowed_special=())))
                      for name, text in (("view", view), ("recorded", point.recorded_view))}
            results.append({
                "session": session.stem, "point": number, "evicted_messages": len(point.evicted),
                "next_request": point.next_request, "ratio": round(ratio, 3), "overhead": overhead,
                "view_tokens_estimate": tokens["view"],
                "view_within_next_request": point.next_request is None or tokens["view"] <= point.next_request,
                "policy": score(kinds, view),
                "recorded": score(kinds, point.recorded_view) if point.recorded_view else None,
            })
            if not args.json:
                print_point(results[-1], args.policy)
    print(json.dumps({"checker": "independent_retention", "policy": args.policy, "points": results}))
    return 0


def print_point(result: dict[str, Any], policy: str) -> None:
    harness = f"{result['next_request']:,}" if result["next_request"] else "none recorded"
    print(f"\n{result['session']} p{result['point']}: {policy} view ~{result['view_tokens_estimate']:,} tokens "
          f"(harness next request {harness}; ratio {result['ratio']}, overhead {result['overhead']:,})")
    print(f"  {'probe':<18} {policy:>14} {'recorded':>14}")
    for kind, mine in result["policy"].items():
        theirs = result["recorded"][kind] if result["recorded"] else {"recall": None}
        print(f"  {kind:<18} {_shown(mine):>14} {_shown(theirs):>14}")


def _shown(score: dict[str, Any]) -> str:
    return "–" if score["recall"] is None else f"{score['recall']:.2f} ({score['found']}/{score['total']})"


if __name__ == "__main__":
    sys.exit(main())
