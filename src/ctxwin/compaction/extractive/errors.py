"""Errors and fixes: every distinct error line of a span, found by what it says (whatever the exit
code: a failing check piped into `tail` exits 0), grouped by the command that printed it and then by
file, each message once with the lines it was reported at; and, for each command, whether it was
fixed, claimed only with the evidence and saying which (the same command later passed, after which
edits; a later edit of the same file succeeded), else "not fixed in this span".

A search that found nothing (grep's exit status 1 with no output) is not an error, and neither is a
call the user declined. File reads are not scanned (source code is full of the word "error"), but a
read that failed is an error like any other.

The state is a list of records (JSON strings, so the summary's merge state stays plain data): one
per message (`{"k": "m", "g": command, "f": file, "m": message, "l": [lines], "c": [calls]}`) and one
per command (`{"k": "g", "g": command, "label": ..., "c": [failed calls], "fix": ...}`). Records merge
by key, their sets by union, so merging the same span twice changes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwin.compaction.extractive.commands import command_key, is_search
from ctxwin.compaction.extractive.files import short_path
from ctxwin.compaction.identifiers import (
    EDITOR_TOOLS,
    READ_TOOLS,
    WRITE_TOOLS,
    call_arguments,
    call_path,
    extract_file_ops,
    is_failure,
    shell_command,
    tool_kind,
)
from ctxwin.compaction.summary import render_item
from ctxwin.messages import Message, ToolCall, ToolResult

MAX_LINE_CHARS = 500  # a longer "line" is a dump (HTML, JSON, minified code) that happens to hold a word
MESSAGE_CHARS = 300  # an error message is kept up to this many characters
MIN_MESSAGE_CHARS = 8  # a shorter first line of a failure is not worth quoting ("Exit 1")
LINES_SHOWN = 8  # line numbers listed per message before "…"
JOIN_CHARS = 90  # messages without a file shorter than this share a line, joined by " · "
JOIN_LINE_CHARS = 200
SCAN_CHARS = 16_000  # of a longer output, this much at each end is scanned (errors are printed first or last)
DECLINED = "The user doesn't want to proceed with this tool use"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LOCATION = re.compile(r"^(?P<file>[^\s:()'\"]+?\.[A-Za-z][A-Za-z0-9]{0,7})"
                       r"(?:\((?P<row>\d+)(?:,\d+)?\)|:(?P<line>\d+)(?::\d+)?)\s*[:\-]?\s+")
_ERROR_WORD = re.compile(r"^(?:error\b|fatal\b|failed\b|panic(?:ked)?\b|npm err!|npm error\b|uncaught\b|"
                         r"unhandled\b|assertion(?:error)?\b)", re.I)
_ERROR_MARK = re.compile(r"^(?:FAIL(?:ED)?\b|ERROR\b|E {2,}\S|[A-Z][\w.]*(?:Error|Exception|Exit)\b(?::|$|\s)|"
                         r"\*\* \(|[✗×✘❌]\s?\S|\d+\) test\b.* \([\w.]+\)$|● .+ › |--- FAIL:)")
"""A failed test's name is an error line too: ExUnit's `1) test renders the page (AppWeb.PageTest)`,
Go's `--- FAIL: TestX`, Jest's `● suite › case` (each in its own full shape: `● nginx.service` in a
`systemctl status` and `1) test the parser` in a plan are not failures)."""
_ERROR_ANYWHERE = re.compile(r"command not found|no such file or directory|permission denied|"
                             r"(?<!\b0 )\bfailed\b|\b[1-9]\d* (?:failing|failures?|errors?)\b|"
                             r"compilation error|panicked at|segmentation fault", re.I)
_CANDIDATE = re.compile(r"error|fail|fatal|panic|exception|npm err|uncaught|unhandled|assert|denied|not found|"
                        r"no such|\*\* \(|^[ \t]*E {2,}|[✗×✘❌●]|exit|\) test|segmentation fault",
                        re.I | re.M)
"""A quick look for any word an error line could start with or hold: text without one has none."""
_STATUS_LINE = re.compile(r"^(?:exit code|command exited with code|exited with code|exit status)\s*:?\s*\d+\.?$|"
                          r"^(?:errors?|error output|traceback \(most recent call last\)):?$", re.I)
_EXIT = re.compile(r"(?:exit code|exited with code|exit status)\s*:?\s*([1-9]\d*)", re.I)
_NO_OUTPUT = re.compile(r"^\(?(?:no output|no matches( found)?|no results)\)?\.?$", re.I)


@dataclass(frozen=True)
class Diagnostic:
    """One error line: the file its location names (""), the line number (None), and its message."""

    file: str
    line: int | None
    message: str


def _prepared(text: str) -> str:
    if len(text) > 2 * SCAN_CHARS:
        text = text[:SCAN_CHARS] + "\n" + text[-SCAN_CHARS:]
    return _ANSI.sub("", text.replace("\\n", "\n"))


def _lines(text: str) -> list[str]:
    return [line.strip() for line in _prepared(text).splitlines() if line.strip()]


def _candidate_lines(text: str) -> list[str]:
    """The lines of `text` (prepared and split as `_lines` does) that hold a word an error line could
    have (`_CANDIDATE`), in order: only they are looked at closely."""
    prepared = "\n".join(_prepared(text).splitlines())
    low = prepared.lower()
    if len(low) == len(prepared) and not _FOLDS_APART.intersection(prepared):
        starts = _candidate_starts(low)
    else:  # a character lower() does not fold as the regex's IGNORECASE does: the regex itself
        starts = sorted({prepared.rfind("\n", 0, m.start()) + 1 for m in _CANDIDATE.finditer(prepared)})
    out: list[str] = []
    for start in starts:
        end = prepared.find("\n", start)
        line = prepared[start:len(prepared) if end < 0 else end].strip()
        if line:
            out.append(line)
    return out


_CANDIDATE_WORDS = ("error", "fail", "fatal", "panic", "exception", "npm err", "uncaught", "unhandled", "assert",
                    "denied", "not found", "no such", "** (", "exit", ") test", "segmentation fault",
                    "✗", "×", "✘", "❌", "●")  # the marks anywhere: after a location (`a.ts(3,1): × bad`) too
_CANDIDATE_HEADS = ("e  ",)
"""`_CANDIDATE` as plain substrings of the lower-cased text: its words anywhere, its marks at a line's
start after blanks (`_candidate_starts` finds the same lines with `str.find`, several times faster)."""
_FOLDS_APART = frozenset("ıſ")
"""The characters IGNORECASE matches to a letter of `_CANDIDATE` that lower() leaves apart (dotless i,
long s; every other difference changes the text's length): a text holding one takes the regex."""


def _candidate_starts(low: str) -> list[int]:
    """The offsets, in order, of the lines of `low` (a lower-cased text) that `_CANDIDATE` matches."""
    starts: set[int] = set()
    for word in _CANDIDATE_WORDS:
        at = low.find(word)
        while at >= 0:
            starts.add(low.rfind("\n", 0, at) + 1)
            end = low.find("\n", at)
            at = -1 if end < 0 else low.find(word, end + 1)
    for head in _CANDIDATE_HEADS:
        at = low.find(head)
        while at >= 0:
            start = low.rfind("\n", 0, at) + 1
            if not low[start:at].strip(" \t"):
                starts.add(start)
            at = low.find(head, at + 1)
    return sorted(starts)


def diagnostics(text: str) -> list[Diagnostic]:
    """Every line of `text` that reads as an error, in order (escaped line breaks, a literal `\\n` in
    serialized output, split lines too): after a leading location (`path(12,5): `, `path:12:5: `) it
    starts with an error word or mark (error, fatal, FAILED, an exception name, `npm ERR!`, `** (`, a
    cross, pytest's `E  `), or it says command not found, no such file, permission denied, failed (not
    "0 failed"), N failures."""
    out: list[Diagnostic] = []
    for line in _candidate_lines(text):
        if len(line) > MAX_LINE_CHARS or _STATUS_LINE.match(line):
            continue
        location = _LOCATION.match(line)
        message = line[location.end():] if location else line
        if not (_ERROR_WORD.match(message) or _ERROR_MARK.match(message) or _ERROR_ANYWHERE.search(message)):
            continue
        file, number = "", None
        if location:
            file = location.group("file")
            row = location.group("row") or location.group("line")
            number = int(row) if row else None
        out.append(Diagnostic(file, number, message[:MESSAGE_CHARS]))
    return out


def _first_line(text: str) -> str | None:
    for line in _lines(text):
        if len(line) >= MIN_MESSAGE_CHARS and not _STATUS_LINE.match(line) and len(line) <= MAX_LINE_CHARS:
            return line[:MESSAGE_CHARS]
    return None


def _exit_code(text: str) -> str | None:
    found = _EXIT.search(text[:2_000] + "\n" + text[-2_000:])
    return found.group(1) if found else None


def result_errors(call: ToolCall | None, result: ToolResult,
                  lines: Sequence[Diagnostic] | None = None) -> list[Diagnostic] | None:
    """The error lines of one result, or None when it did not fail. A file read is not scanned unless
    it failed; a search with exit status 1 and nothing else is "no match"; a declined call is a choice.
    `lines`: `diagnostics(result.text)`, when already computed."""
    text = result.text
    if text.startswith(DECLINED):
        return None
    reads = call is not None and tool_kind(call.name) in READ_TOOLS
    found = [] if reads else list(lines if lines is not None else diagnostics(text))
    failed = bool(found) or is_failure(result)
    if not failed:
        return None
    if not found and call is not None and is_search(call) and _exit_code(text) in (None, "1") and all(
            _STATUS_LINE.match(line) or _NO_OUTPUT.match(line) for line in _lines(text)):
        return None  # grep found nothing
    if found:
        return found
    first = _first_line(text)
    code = _exit_code(text)
    return [Diagnostic("", None, first or (f"exit code {code}" if code else "failed"))]


# --------------------------------------------------------------------------------------------------
# Records of a span


def group_of(call: ToolCall | None) -> tuple[str, str]:
    """(key, label) of what failed: a shell command by `command_key`, a file tool by tool and file."""
    if call is None:
        return "tool:?", "a tool call"
    command = shell_command(call)
    if command is not None:
        key = command_key(command)
        return "cmd:" + key, f"`{key}`"
    path = call_path(call_arguments(call))
    if path:
        kind = tool_kind(call.name)
        # A failed edit is fixed by a later edit or write of the file, not by reading it.
        category = "read" if kind in READ_TOOLS else "write" if kind in WRITE_TOOLS | EDITOR_TOOLS else kind
        return f"{category}:{path}", f"{call.name} {short_path(path)}"
    return "tool:" + call.name, call.name


@dataclass
class _Group:
    key: str
    label: str
    failed: list[str] = field(default_factory=list)  # call ids
    fix: str = ""
    edited: list[str] = field(default_factory=list)  # files written since its last failure
    later: str = ""  # a longer form of the command that passed since its last failure (`git push --set-upstream ...`)


def error_records(span: Sequence[Message], diagnosed: Mapping[str, Sequence[Diagnostic]] | None = None,
                  ) -> tuple[list[str], list[str]]:
    """(error records, passed records) of a span, in order (see the module docstring). A passed record
    (`{"k": "p", "g": command, "edited": [files]}`) says the command succeeded in this span after those
    edits: a later compaction uses it to say that an earlier failure was fixed. `diagnosed`: each
    result's `diagnostics`, by call id, when already computed."""
    calls: dict[str, ToolCall] = {}
    messages: dict[tuple[str, str, str], dict[str, Any]] = {}
    groups: dict[str, _Group] = {}
    passed: dict[str, list[str]] = {}
    order: list[tuple[str, tuple[str, ...]]] = []  # ("m" | "g", key) at last update
    edited_in_span: list[str] = []
    for message in span:
        for call in message.tool_calls:
            calls[call.id] = call
        for result in message.tool_results:
            made = calls.get(result.call_id)
            key, label = group_of(made)
            found = result_errors(made, result, (diagnosed or {}).get(result.call_id))
            if found is None:
                group = groups.get(key)
                if group is not None and group.failed and not group.fix:
                    group.fix = _evidence(group, made)
                passed[key] = list(dict.fromkeys(edited_in_span))
                for other in groups.values():  # `git push` failed, `git push --set-upstream origin x` passed
                    if other.failed and not other.fix and other.key.startswith("cmd:") and \
                            key.startswith(other.key + " "):
                        other.later = key.removeprefix("cmd:")
            else:
                group = groups.setdefault(key, _Group(key, label))
                group.failed.append(result.call_id)
                group.fix, group.edited, group.later = "", [], ""
                order.append(("g", (key,)))
                for diagnostic in found:
                    # One file printed two ways (`../pkg/src/a.ts`, `src/a.ts`) is one file.
                    file = short_path(diagnostic.file) if diagnostic.file else ""
                    mkey = (key, file, diagnostic.message)
                    record = messages.setdefault(mkey, {"k": "m", "g": key, "f": file,
                                                        "m": diagnostic.message, "l": [], "c": []})
                    if diagnostic.line is not None and diagnostic.line not in record["l"]:
                        record["l"].append(diagnostic.line)
                    if result.call_id not in record["c"]:
                        record["c"].append(result.call_id)
                    order.append(("m", mkey))
            if made is not None:
                written = extract_file_ops([Message("assistant", (made,))])[1] if found is None else []
                for path in written:
                    edited_in_span.append(path)
                    for open_group in groups.values():
                        if open_group.failed and not open_group.fix and path not in open_group.edited:
                            open_group.edited.append(path)
    out: list[str] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for kind, key_parts in reversed(order):  # each record once, at its last update
        if (kind, key_parts) in seen:
            continue
        seen.add((kind, key_parts))
        if kind == "g":
            group = groups[key_parts[0]]
            group_record: dict[str, Any] = {"k": "g", "g": group.key, "label": group.label, "c": group.failed,
                                            "fix": group.fix}
            if not group.fix and group.later:
                group_record["later"] = group.later
            if not group.fix and group.edited:
                group_record["edited"] = group.edited
            out.append(_dump(group_record))
        else:
            out.append(_dump(messages[(key_parts[0], key_parts[1], key_parts[2])]))
    passed_records = [_dump({"k": "p", "g": key, "edited": files}) for key, files in passed.items()]
    return out[::-1], passed_records


def _evidence(group: _Group, call: ToolCall | None) -> str:
    """What shows a failing command or call was fixed: the same command later passed (after which
    edits), or a later call of the same kind on the same file succeeded."""
    if group.key.startswith("cmd:"):
        return "fixed: passed later" + _edits(group.edited)
    return f"fixed: a later {call.name if call is not None else 'call'} succeeded"


def _edits(files: Sequence[str]) -> str:
    if not files:
        return ""
    more = f" and {len(files) - 3} more" if len(files) > 3 else ""
    return f", after editing {', '.join(short_path(p) for p in files[:3])}{more}"


def _dump(record: Mapping[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def load(records: Iterable[str]) -> list[dict[str, Any]]:
    out = []
    for item in records:
        try:
            record = json.loads(item)
        except ValueError:
            continue  # an item that is not a record (another summarizer's prose) is not ours to read
        if isinstance(record, dict) and record.get("k") in ("m", "g", "p"):
            out.append(record)
    return out


def record_key(record: Mapping[str, Any]) -> tuple[str, ...]:
    if record["k"] == "m":
        return ("m", str(record["g"]), str(record["f"]), str(record["m"]))
    return (str(record["k"]), str(record["g"]))


def merge_records(previous: Sequence[str], new: Sequence[str], passed: Sequence[str]) -> list[str]:
    """Previous records merged with a new span's: the same message or command is one record (its
    lines and calls united, moved to its newest place); a command the new span failed again takes the
    new span's fix state; one it only passed is marked fixed with the new span's evidence."""
    merged: dict[tuple[str, ...], dict[str, Any]] = {}
    for record in load(previous):
        merged[record_key(record)] = record
    for record in load(new):
        key = record_key(record)
        old = merged.pop(key, None)
        if old is not None:
            record = {**record, "c": list(dict.fromkeys([*old.get("c", []), *record.get("c", [])]))}
            if record["k"] == "m":
                record["l"] = list(dict.fromkeys([*old.get("l", []), *record.get("l", [])]))
        merged[key] = record
    new_groups = {record_key(r) for r in load(new) if r["k"] == "g"}
    for record in load(passed):
        key = ("g", str(record["g"]))
        group = merged.get(key)
        if group is not None and key not in new_groups and not group.get("fix"):
            group["fix"] = ("fixed: passed later" + _edits(record.get("edited") or [])
                            if str(group["g"]).startswith("cmd:") else "fixed: a later call succeeded")
            group.pop("later", None)
            group.pop("edited", None)
        for open_group in merged.values():  # an earlier failure whose longer form passed in this span
            command = str(open_group.get("g", ""))
            if open_group["k"] == "g" and not open_group.get("fix") and command.startswith("cmd:") and \
                    ("g", command) not in new_groups and str(record["g"]).startswith(command + " "):
                open_group["later"] = str(record["g"]).removeprefix("cmd:")
    return [_dump(r) for r in merged.values()]


# --------------------------------------------------------------------------------------------------
# Rendering


@dataclass
class Group:
    """A command's errors, for rendering: its label, failed runs, fix, and messages by file."""

    key: str
    label: str
    runs: int
    fix: str
    messages: list[dict[str, Any]]
    position: int
    later: str = ""
    """A not fixed command: a longer form of it that passed since (`git push --set-upstream origin x`)."""
    edited: list[str] = field(default_factory=list)
    """A not fixed command: the files written since it last failed."""

    def since(self) -> str:
        """What happened since a not fixed command last failed, as evidence for the reader: "" or
        `; a later `…` passed; edited since: a.ts` (of the files its errors name)."""
        parts = [f"a later `{self.later}` passed"] if self.later else []
        named = set(self.files)
        edited = [p for p in self.edited if short_path(p) in named]
        if edited:
            parts.append("edited since: " + _edits(edited).removeprefix(", after editing "))
        return "".join(f"; {p}" for p in parts)

    @property
    def fixed(self) -> bool:
        return bool(self.fix)

    @property
    def files(self) -> list[str]:
        return list(dict.fromkeys(m["f"] for m in self.messages if m["f"]))


def groups(records: Sequence[str]) -> list[Group]:
    """The records as command groups, oldest last failure first, each group's messages by file."""
    loaded = load(records)
    by_key: dict[str, Group] = {}
    for position, record in enumerate(loaded):
        if record["k"] == "g":
            by_key[record["g"]] = Group(record["g"], record.get("label", record["g"]), len(record.get("c", [])),
                                        record.get("fix", ""), [], position, str(record.get("later", "")),
                                        [str(f) for f in record.get("edited", ())])
    for record in loaded:
        if record["k"] == "m" and record["g"] in by_key:
            by_key[record["g"]].messages.append(record)
    for group in by_key.values():
        files = list(dict.fromkeys(m["f"] for m in group.messages))
        group.messages.sort(key=lambda m: files.index(m["f"]))
    return sorted((g for g in by_key.values() if g.messages), key=lambda g: g.position)


def _message_line(record: Mapping[str, Any], level: int) -> str:
    file = short_path(record["f"]) if record["f"] else ""
    text = f"{file}: {record['m']}" if file else record["m"]
    lines = sorted(int(x) for x in record.get("l", []))
    if level == 0 and lines:
        shown = ", ".join(str(n) for n in lines[:LINES_SHOWN]) + (", …" if len(lines) > LINES_SHOWN else "")
        text += f" (line{'s' if len(lines) > 1 else ''} {shown})"
    elif level == 1 and len(lines) > 1:
        text += f" (×{len(lines)})"
    return text


PARTIAL_MESSAGES = 3  # the smallest form of a group shows this many of its messages


def render_group(group: Group, level: int, limit: int | None = None, more: str = "") -> str:
    """One command's errors as an item: `label — fix:` then one line per message, `file: message
    (lines …)` (level 0), `(×N)` (1), messages only (2); short messages without a file share lines.
    With `limit`, only the first `limit` messages, then `more` (formatted with how many are left out)."""
    runs = f" ({group.runs} failed runs)" if group.runs > 1 and level < 2 else ""
    if group.fix:
        status = group.fix if level < 2 else "fixed"
    else:
        status = "not fixed in this span" + group.since() if level < 2 else "not fixed"
    lines: list[tuple[str, bool]] = []  # (text, made of short messages without a file: others may join)
    shown = group.messages if limit is None else group.messages[:limit]
    for record in shown:
        text = _message_line(record, level)
        short = not record["f"] and len(text) <= JOIN_CHARS
        if short and lines and lines[-1][1] and len(lines[-1][0]) + len(text) + 3 <= JOIN_LINE_CHARS:
            lines[-1] = (f"{lines[-1][0]} · {text}", True)
        else:
            lines.append((text, short))
    if limit is not None and limit < len(group.messages):
        lines.append((more.format(count=len(group.messages) - limit), False))
    return f"{group.label}{runs} — {status}:" + "".join(f"\n{line}" for line, _ in lines)


def render(records: Sequence[str], level: int = 0) -> str:
    """Every group at one level, as bullets: the full list `recall` returns."""
    return "\n".join(render_item(render_group(g, level)) for g in groups(records))


def items(records: Sequence[str], more: str) -> list[tuple[tuple[str, ...], int]]:
    """Each command's errors as an item to fit: its four forms, longest first (line numbers, counts,
    then fix details go; the last keeps PARTIAL_MESSAGES messages and `more`, formatted with how many
    it leaves out), and its rank: the open errors first, newest first, then the fixed ones."""
    all_groups = groups(records)
    order = sorted(all_groups, key=lambda g: (g.fixed, -g.position))
    out: list[tuple[tuple[str, ...], int]] = []
    for group in all_groups:
        forms = (render_group(group, 0), render_group(group, 1), render_group(group, 2),
                 render_group(group, 2, PARTIAL_MESSAGES, more))
        out.append((forms, order.index(group)))
    return out


def open_errors(records: Sequence[str]) -> list[Group]:
    """The groups not fixed, newest last."""
    return [g for g in groups(records) if not g.fixed]
