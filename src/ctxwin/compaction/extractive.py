"""The extractive summarizer: the default, and the fallback when a model summary fails.

No model: it pulls out what an agent needs to continue (the goal, every user message, files read and
modified, commands verbatim, each error's distinctive line and what fixed it, identifiers, decisions,
open tasks, current work), merges it with the previous summary section by section, and renders it
within a token budget, trimming the least important items first. Same input, same bytes.

The full merged state (before trimming) is kept in `Summary.details["extractive"]`, so that the next
compaction merges with everything known, not only with what fit on the page; this also makes merging
idempotent (a summary merged with itself, or with the same span again, is unchanged).

(Long on purpose, for now: the summary's sections each have their own extraction; it is the first
module to split next, by section.)
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ctxwin.compaction.base import Summary, summary_counter
from ctxwin.compaction.identifiers import (
    call_arguments,
    call_path,
    extract_file_ops,
    extract_identifiers,
    is_failure,
    normalize,
    shell_command,
    survives,
    tool_kind,
    user_text,
)
from ctxwin.compaction.summary import (
    MAX_FIT_ATTEMPTS,
    Fitted,
    Section,
    SectionItem,
    clip,
    fit_sections,
    item_key,
    merge_items,
    render_item,
    render_sections,
)
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.pipeline.failures import error_lines
from ctxwin.tokens.base import TokenCounter

DEFAULT_BUDGET_TOKENS = 4_000  # when the caller gives none (Claude Code's summaries run 3-4k tokens)
PER_MESSAGE_CHARS = 1_000  # a user message is kept verbatim up to this many characters
USER_MEDIUM_CHARS = 300  # the middle form of a long user message
USER_SHORT_CHARS = 100  # the shortest form: its opening, enough to recognise the message
GOAL_CHARS = 600  # the goal shown at most this long
COMMAND_CHARS = 600  # a command's first line is shown verbatim up to this many characters
COMMAND_STATE_CHARS = 4_000  # ... and kept in the merge state up to this many (two commands differing later are two)
COMMAND_MEDIUM_CHARS = 240  # the middle form: long arguments shortened
COMMAND_ARGUMENT_CHARS = 40  # in the middle form, an argument longer than this is cut to it
SHORT_CHARS = 160  # the short form of a long item
DECISION_CHARS = 300
CURRENT_TEXT_CHARS = 800  # the last assistant message, shown at most this long
RECENT_CALLS = 5  # the last tool calls listed under current work
NEXT_STEP_ITEMS = 8  # list items taken after a "next steps" line
STATE_KEY = "extractive"  # where the merged state lives in Summary.details
MIN_ROOT_FILES = 3  # paths shown relative to a project root only when this many share it
ROOT_GROUP_DEPTH = 3  # files are grouped by their first directories, this many deep, to find the root
FOCUS_BOOST = 1_000_000.0  # rank bonus for items matching the focus instruction (kept first)
RECENT_MESSAGES = 400  # references are looked for in the span's last this many messages
RECENT_TEXT_CHARS = 20_000  # of each message, at most this much is scanned for references
RECENT_PER_LINE = 8  # references per line of the section (a line is the unit the budget trims)
RECENT_LINES = 40  # at most; the budget decides how many are shown, the most relevant first

GOAL = "Goal"
USER = "User messages"
ROOT = "Project root"
MODIFIED = "Files modified"
READ = "Files read"
COMMANDS = "Commands run"
ERRORS = "Errors and fixes"
DECISIONS = "Decisions"
OPEN = "Open tasks"
CURRENT = "Current work"
IDENTIFIERS = "Identifiers"
RECENT = "Recent references"

ORDER = (GOAL, USER, ROOT, MODIFIED, READ, COMMANDS, ERRORS, DECISIONS, OPEN, CURRENT, IDENTIFIERS, RECENT)
# Share of the budget when sections compete for it. Commands and errors weigh most: they are worth
# something only verbatim (a command to re-run, an error to search for), while a user message keeps
# its point in its first few hundred characters.
WEIGHTS: Mapping[str, float] = {
    GOAL: 2.0, USER: 4.0, ROOT: 1.0, MODIFIED: 3.0, READ: 2.5, COMMANDS: 8.0, ERRORS: 5.0,
    DECISIONS: 1.5, OPEN: 2.0, CURRENT: 2.0, IDENTIFIERS: 2.0, RECENT: 2.0,
}
OTHER_WEIGHT = 2.0  # sections carried from another summarizer's summary
# How each section merges with the previous summary's (see summary.merge_sections).
RULES: Mapping[str, str] = {GOAL: "keep", OPEN: "replace", CURRENT: "replace", IDENTIFIERS: "front",
                            RECENT: "replace"}
# At most this many items per section are kept in the merged state (the newest; identifiers: the first).
STATE_CAPS: Mapping[str, int] = {
    GOAL: 3, USER: 200, MODIFIED: 1_000, READ: 1_000, COMMANDS: 2_000, ERRORS: 500, DECISIONS: 60,
    OPEN: 40, CURRENT: 10, IDENTIFIERS: 300, RECENT: 40,
}
OTHER_CAP = 50

# Headings other summarizers use, mapped onto ours, so merging with an LLM summary lands in place.
_ALIASES: Mapping[str, str] = {
    "goal": GOAL, "goals": GOAL, "high level goals": GOAL, "primary request and intent": GOAL,
    "original request": GOAL, "task overview": GOAL,
    "user messages": USER, "all user messages": USER,
    "commands run": COMMANDS, "commands": COMMANDS,
    "errors and fixes": ERRORS, "errors": ERRORS, "tool failures": ERRORS,
    "decisions": DECISIONS, "key decisions": DECISIONS,
    "open tasks": OPEN, "next steps": OPEN, "pending tasks": OPEN, "open todos": OPEN,
    "optional next step": OPEN, "pending user asks": OPEN,
    "current work": CURRENT, "current state": CURRENT,
    "identifiers": IDENTIFIERS, "exact identifiers": IDENTIFIERS,
}
_FILE_HEADINGS = frozenset({"files modified", "files read", "project root", "modified files", "read files"})

_DECISION = re.compile(
    r"\b(?:decided|decide to|decision|will use|we'll use|i'll use|let's use|instead of|because|chose|"
    r"choose|chosen|going with|opted|prefer)\b",
    re.I,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*\"'(\[])|\n+")
_CODE_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_NEXT_STEPS = re.compile(r"next steps?\b", re.I)
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,2}[.)])\s+(.+)$")
_CD_PREFIX = re.compile(r"^(?:cd\s+\S+\s*(?:&&|;)\s*|[A-Z_][A-Z0-9_]*=\S*\s+)+")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_./-]{3,}")
_STOPWORDS = frozenset({
    "about", "after", "again", "also", "because", "been", "before", "being", "between", "both", "could",
    "does", "doing", "during", "each", "from", "further", "have", "having", "here", "into", "itself", "just",
    "more", "most", "other", "ought", "over", "same", "should", "some", "such", "than", "that", "their",
    "theirs", "them", "then", "there", "these", "they", "this", "those", "through", "under", "until", "very",
    "what", "when", "where", "which", "while", "whom", "with", "would", "your", "yours", "focus", "keep",
    "please", "summary", "summarize",
})
_TODO_TOOLS = frozenset({"todowrite", "todo_write", "update_plan", "write_todos", "todo"})


@dataclass(frozen=True)
class ExtractiveSummarizer:
    """Summarizes without a model. `per_message_chars` caps each user message kept verbatim."""

    per_message_chars: int = PER_MESSAGE_CHARS
    command_chars: int = COMMAND_STATE_CHARS
    name: str = "extractive"

    def summarize(self, span: Sequence[Message], *, previous: Summary | None = None, focus: str | None = None,
                  budget_tokens: int = DEFAULT_BUDGET_TOKENS, counter: TokenCounter | None = None) -> Summary:
        counter = summary_counter(counter)
        names = [message_names(m) for m in span]  # scanned once, for references and for what refers back
        new = span_state(span, per_message_chars=self.per_message_chars, command_chars=self.command_chars,
                         names=names)
        state = merge_states(previous_state(previous), new) if previous is not None else merge_states({}, new)
        root = project_root([*state.get(MODIFIED, ()), *state.get(READ, ())])
        referenced = referenced_later(span, names)
        sections = fit_input(state, root=root, focus=focus, per_message_chars=self.per_message_chars,
                             referenced=referenced)
        fitted = fit_tiers(sections, budget_tokens, counter)
        # Identifiers are listed only where no other section shows them; but a section may have lost
        # them to trimming. Fit again listing every identifier the first rendering lost.
        shown = normalize(fitted.text)
        lost = [i for i in state.get(IDENTIFIERS, ()) if not survives(i, shown)]
        if set(lost) - set(fitted.sections.get(IDENTIFIERS, ())):
            sections = fit_input(state, root=root, focus=focus, per_message_chars=self.per_message_chars,
                                 identifiers=lost, referenced=referenced)
            fitted = fit_tiers(sections, budget_tokens, counter)
        details: dict[str, Any] = {
            STATE_KEY: state,
            "budget_tokens": budget_tokens,
            "counter": counter.name,
            "span_messages": len(span),
            "omitted": fitted.omitted,
            "shortened": fitted.shortened,
        }
        if focus:
            details["focus"] = focus
        if root:
            details["root"] = root
        return Summary(
            text=fitted.text,
            sections=fitted.sections,
            read_files=tuple(state.get(READ, ())),
            modified_files=tuple(state.get(MODIFIED, ())),
            identifiers=tuple(state.get(IDENTIFIERS, ())),
            covered_ids=tuple(m.id for m in span if m.id),
            tokens=fitted.tokens,
            summarizer=self.name,
            details=details,
        )


# --------------------------------------------------------------------------------------------------
# What a span says


def span_state(span: Sequence[Message], *, per_message_chars: int = PER_MESSAGE_CHARS,
               command_chars: int = COMMAND_STATE_CHARS,
               names: Sequence[list[tuple[str, float]]] | None = None) -> dict[str, list[str]]:
    """Everything the extractive summary can say about `span`, untrimmed, by section."""
    users = [clip(t, per_message_chars) for t in (user_text(m) for m in span) if t]
    read, modified = extract_file_ops(span)
    commands = command_entries(span, command_chars)
    state: dict[str, list[str]] = {
        GOAL: users[:1],
        USER: _dedup_last(users),
        MODIFIED: modified,
        READ: read,
        COMMANDS: commands,
        ERRORS: error_entries(span),
        DECISIONS: _dedup_last(decisions(span)),
        OPEN: open_tasks(span),
        CURRENT: current_work(span),
        IDENTIFIERS: extract_identifiers(span),
        RECENT: recent_references(span, names),
    }
    return {k: v for k, v in state.items() if v}


# Code symbols (snake_case, camelCase, PascalCase with two capitals, dotted names) and paths.
_REFERENCE = re.compile(r"(?<![\w/.-])(?:[\w.-]*/[\w./-]+\w|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
_CODE_WORD = re.compile(r"_[A-Za-z0-9]|[a-z][A-Z]|[A-Z][a-z]+[A-Z]|\.[A-Za-z_]")


@lru_cache(maxsize=65_536)
def _is_name(token: str) -> bool:
    return 4 <= len(token) <= 120 and ("/" in token or _CODE_WORD.search(token) is not None)


def message_names(message: Message) -> list[tuple[str, float]]:
    """Every occurrence of a code name or path in a message, with its weight: tool-call arguments
    2 (the agent typed them), text 1, tool results 0.5 (their first RECENT_TEXT_CHARS)."""
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
        for found in _REFERENCE.findall(text[:RECENT_TEXT_CHARS]):
            token = found.strip(".-")
            if _is_name(token):
                out.append((token, factor))
    return out


def recent_references(span: Sequence[Message], names: Sequence[list[tuple[str, float]]] | None = None) -> list[str]:
    """What the agent was working with, for it to pick up again: code symbols and paths of the span,
    ranked by how recently and how often they appear (tool call arguments count double: the agent
    typed them). Rendered a few per line, most relevant first. `names`: `message_names` of each
    message of the span, when already computed."""
    scores: dict[str, float] = {}
    recent = names[-RECENT_MESSAGES:] if names is not None else [message_names(m) for m in span[-RECENT_MESSAGES:]]
    for position, found in enumerate(recent, start=1):
        weight = 0.2 + 0.8 * position / len(recent)  # recent counts most; often-used old names still rank
        for token, factor in found:
            scores[token] = scores.get(token, 0.0) + weight * factor
    ranked = sorted(scores, key=lambda t: (-scores[t], t))
    lines = [", ".join(ranked[i:i + RECENT_PER_LINE]) for i in range(0, len(ranked), RECENT_PER_LINE)]
    return lines[:RECENT_LINES]


def _dedup_last_by(items: Sequence[str], key: Callable[[str], str]) -> list[str]:
    """Items whose keys repeat kept once, at their last position."""
    last = {key(item): index for index, item in enumerate(items)}
    return [item for index, item in enumerate(items) if last[key(item)] == index]


def _dedup_last(items: Sequence[str]) -> list[str]:
    """Duplicates removed, each kept at its last position (most recent use)."""
    return merge_items([], list(reversed(items)), to_front=True)[::-1] if items else []


_CD = re.compile(r"^\s*cd\s+(\"[^\"]*\"|'[^']*'|\S+)\s*&&\s*")
REPEAT_MARK = re.compile(r" \(×\d+\)$| \(\+\d+ lines?\)$")
"""What a command item adds after the command line itself (repeats, the lines of a multi-line script)."""
DIRECTORY_PREFIX = "(in "


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


def command_entries(span: Sequence[Message], line_chars: int = COMMAND_STATE_CHARS) -> list[str]:
    """Every distinct command of the span, by its first line, at its last use, oldest first: a
    repeated command once with its count (`(×3)`), a script's first line with the number of lines
    after it (`(+12 lines)`), and the directories the commands were run in said once, first."""
    counts: dict[str, int] = {}
    last: dict[str, tuple[int, str, int]] = {}
    directories: list[str] = []
    position = 0
    for message in span:
        for call in message.tool_calls:
            command = shell_command(call)
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
            last[key] = (position, first[:line_chars], more)
            position += 1
    out = [f"{DIRECTORY_PREFIX}{', '.join(directories)})"] if directories else []
    for key, (_, first, more) in last.items():
        item = f"`{first}`"
        if counts[key] > 1:
            item += f" (×{counts[key]})"
        elif more:
            item += f" (+{more} line{'s' if more > 1 else ''})"
        out.append(item)
    return out


_ARGUMENT = re.compile(r"\"[^\"]*\"|'[^']*'|\S+")


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


def _calls_and_results(span: Sequence[Message]) -> tuple[list[ToolCall], dict[str, ToolResult]]:
    calls: list[ToolCall] = []
    results: dict[str, ToolResult] = {}
    for message in span:
        for block in message.blocks:
            if isinstance(block, ToolCall):
                calls.append(block)
            elif isinstance(block, ToolResult):
                results[block.call_id] = block
    return calls, results


def _target(call: ToolCall) -> tuple[str, str]:
    """(key, label) naming what a call acted on: a shell command's program and subcommand, or the
    file path; two calls with the same key are "the same command or file"."""
    command = shell_command(call)
    if command is not None:
        first, _, _ = command_line(command)
        words = _CD_PREFIX.sub("", first).split()
        return "cmd:" + " ".join(words[:2]), f"`{clip(first, SHORT_CHARS)}`"
    path = call_path(call_arguments(call))
    if path:
        return "path:" + path, f"{call.name} {_short_path(path)}"
    return "tool:" + call.name, call.name


def error_entries(span: Sequence[Message]) -> list[str]:
    """One entry per failing tool result that printed an error line no later failure repeats: what
    failed, its distinctive lines verbatim (each line kept once, at its latest failure), and whether
    it was fixed later in the span: "`cmd`: <line> — fixed: `cmd2` succeeded after editing a.py", or
    "— not fixed in this span"."""
    calls, results = _calls_and_results(span)
    keys = [_target(c) for c in calls]
    written: dict[int, list[str]] = {}  # files each call wrote, parsed only when needed

    def writes(index: int) -> list[str]:
        if index not in written:
            written[index] = extract_file_ops([_as_message(calls[index])])[1]
        return written[index]

    failures: list[tuple[str, list[str], str]] = []
    for index, call in enumerate(calls):
        result = results.get(call.id)
        if result is None or not is_failure(result):
            continue
        key, label = keys[index]
        fix = " — not fixed in this span"
        edited: list[str] = []
        for later in range(index + 1, len(calls)):
            later_result = results.get(calls[later].id)
            if keys[later][0] == key and later_result is not None:
                if not is_failure(later_result):
                    fix = f" — fixed: {keys[later][1]} succeeded"
                    if edited:
                        fix += " after editing " + ", ".join(_short_path(p) for p in edited)
                    break
            else:
                edited.extend(p for p in writes(later) if p not in edited)
        failures.append((label, error_lines(result.text), fix))
    # Each distinct line once, at its latest failure (the newest state of that error).
    seen: set[str] = set()
    entries: list[str] = []
    for label, lines, fix in reversed(failures):
        fresh = [line for line in lines if normalize(line) not in seen]
        seen.update(normalize(line) for line in lines)
        if lines and not fresh:
            continue
        body = "\n".join(fresh) if fresh else "failed"
        entries.append(f"{label}: {body}{fix}")
    return entries[::-1]


def _as_message(call: ToolCall) -> Message:
    return Message(role="assistant", blocks=(call,))


def _short_path(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    return "/".join(parts[-2:]) if len(parts) >= 2 else path


def decisions(span: Sequence[Message]) -> list[str]:
    """Assistant sentences that state a choice ("decided", "will use", "instead of", "because" ...)."""
    out = []
    for message in span:
        if message.role != "assistant":
            continue
        for block in message.blocks:
            if not isinstance(block, Text):
                continue
            prose = _CODE_FENCE.sub(" ", block.text)
            for sentence in _SENTENCE.split(prose):
                sentence = sentence.strip().lstrip("-*• ").strip()
                if len(sentence) >= 20 and _DECISION.search(sentence):
                    out.append(clip(sentence, DECISION_CHARS))
    return out


def _todo_items(call: ToolCall) -> list[str] | None:
    if tool_kind(call.name) not in _TODO_TOOLS:
        return None
    args = call_arguments(call)
    todos = args.get("todos", args.get("plan", args.get("items")))
    if not isinstance(todos, list):
        return None
    active, pending, done = [], [], []
    for todo in todos:
        if not isinstance(todo, dict):
            continue
        content = str(todo.get("content", todo.get("step", todo.get("title", "")))).strip()
        status = str(todo.get("status", "pending")).lower()
        if not content:
            continue
        if status in ("completed", "done"):
            done.append(f"[x] {content}")
        elif status in ("in_progress", "in-progress", "active"):
            active.append(f"[in progress] {content}")
        else:
            pending.append(f"[ ] {content}")
    return active + pending + done


_CHECKBOX = re.compile(r"^\s*[-*]\s+\[( |x|X)\]\s+(.+?)\s*$", re.M)
PLAN_ITEMS = 8  # unchecked items taken from each plan document, in document order


def _plan_items(call: ToolCall, plans: dict[str, dict[str, bool]]) -> None:
    """Track checklists in the markdown files the agent writes or edits (plan documents): item text
    -> checked, per file, updated by each write (the whole list) and edit (the changed lines)."""
    args = call_arguments(call)
    path = call_path(args)
    if not path or not path.lower().endswith((".md", ".markdown", ".txt")):
        return
    kind = tool_kind(call.name)
    text = args.get("content") if kind in ("write", "write_file", "create", "create_file") else None
    if text is None:
        text = args.get("new_string", args.get("newText", args.get("new_str")))
    if not isinstance(text, str):
        return
    items = plans.setdefault(path, {})
    if text is args.get("content"):  # a whole new version of the file
        items.clear()
    for mark, item in _CHECKBOX.findall(text):
        items[item] = mark != " "


def open_tasks(span: Sequence[Message]) -> list[str]:
    """Unanswered user asks, the latest todo list (open items first), the next unchecked items of
    plan documents the agent wrote, and the latest "next steps"."""
    todos: list[str] = []
    next_steps: list[str] = []
    plans: dict[str, dict[str, bool]] = {}
    last_reply = -1
    for index, message in enumerate(span):
        if message.role != "assistant":
            continue
        for call in message.tool_calls:
            items = _todo_items(call)
            if items is not None:
                todos = items
            _plan_items(call, plans)
        text = message.text
        if text.strip():
            last_reply = index
            steps = _next_steps(text)
            if steps:
                next_steps = steps
    unanswered = [f"Unanswered: {clip(t, USER_MEDIUM_CHARS)}"
                  for t in (user_text(m) for m in span[last_reply + 1:]) if t]
    planned = [f"Plan ({_short_path(path)}): {clip(item, SHORT_CHARS * 2)}"
               for path, items in plans.items() for item in [i for i, done in items.items() if not done][:PLAN_ITEMS]]
    return unanswered + todos + [f"Next: {s}" for s in next_steps] + planned


def _next_steps(text: str) -> list[str]:
    lines = text.splitlines()
    for index in range(len(lines) - 1, -1, -1):
        if _NEXT_STEPS.search(lines[index]):
            items = []
            for line in lines[index + 1:]:
                match = _LIST_ITEM.match(line)
                if match:
                    items.append(clip(match.group(1), SHORT_CHARS * 2))
                elif line.strip() and items:
                    break
                if len(items) >= NEXT_STEP_ITEMS:
                    break
            if items:
                return items
    return []


def _call_brief(call: ToolCall) -> str:
    command = shell_command(call)
    if command is not None:
        return f"{call.name}: {clip(command, SHORT_CHARS)}"
    args = call_arguments(call)
    path = call_path(args)
    if path:
        return f"{call.name} {path}"
    first = next((v for v in args.values() if isinstance(v, str | int | float)), None)
    return f"{call.name} {clip(str(first), SHORT_CHARS)}" if first is not None else call.name


def current_work(span: Sequence[Message]) -> list[str]:
    """The last assistant text and the last few tool calls (marked when they failed)."""
    calls, results = _calls_and_results(span)
    last_text = next((m.text for m in reversed(span) if m.role == "assistant" and m.text.strip()), "")
    out = [f"Last assistant message: {clip(last_text, CURRENT_TEXT_CHARS)}"] if last_text else []
    for call in calls[-RECENT_CALLS:]:
        result = results.get(call.id)
        status = " (failed)" if result is not None and is_failure(result) else ""
        out.append(f"Last tool call: {_call_brief(call)}{status}")
    return out


FACTS = frozenset({GOAL, USER, ROOT, MODIFIED, READ, COMMANDS, ERRORS})
"""The record of what happened (what the user asked, which files, every command and error): fitted
first, with the whole budget; the rest (decisions, tasks, current work, identifiers, references)
shares what the facts leave."""


def fit_tiers(sections: Sequence[Section], budget_tokens: int, counter: TokenCounter) -> Fitted:
    """Fit the fact sections first (`FACTS`, with omission notes), then the others in what is left,
    and render them together in section order, within `budget_tokens`."""
    facts = [s for s in sections if s.key in FACTS]
    rest = [s for s in sections if s.key not in FACTS]
    first = with_omission_notes(fit_sections(facts, budget_tokens, counter), facts, budget_tokens, counter)
    if not rest:
        return first
    room = budget_tokens - first.tokens - 2  # the blank line between the two parts
    for _ in range(MAX_FIT_ATTEMPTS):
        second = fit_sections(rest, max(0, room), counter)
        joined = _join(first, second, sections, counter)
        if joined.tokens <= budget_tokens or room <= 0:
            break
        room -= joined.tokens - budget_tokens + 2
    return joined if joined.tokens <= budget_tokens else first


def _join(first: Fitted, second: Fitted, sections: Sequence[Section], counter: TokenCounter) -> Fitted:
    both = {**first.sections, **second.sections}
    ordered = {s.key: both[s.key] for s in sections if s.key in both}
    text = render_sections(ordered, {s.key: s.title or s.key for s in sections})
    return Fitted(text=text, sections=ordered, tokens=counter.count_text(text) if text else 0,
                  omitted={**first.omitted, **second.omitted}, shortened={**first.shortened, **second.shortened})


NOTED_SECTIONS: Mapping[str, str] = {COMMANDS: "commands", ERRORS: "failures"}
"""Sections that must say how many of their items the budget left out (every command and every
error is a fact the agent may need)."""
OMISSION_NOTE = ("{count} more {what} not shown (the budget); every one is in this compaction entry's "
                 "summarizer_state, and in the original calls of the summarized span")


def omission_note(count: int, what: str) -> str:
    return OMISSION_NOTE.format(count=count, what=what)


def with_omission_notes(fitted: Fitted, sections: Sequence[Section], budget_tokens: int,
                        counter: TokenCounter) -> Fitted:
    """`fitted` with a last item in each noted section that lost items, saying how many and where
    the full list is; fitted again with room for the notes, so the budget still holds."""
    def notes_of(result: Fitted) -> dict[str, str]:
        return {key: omission_note(result.omitted[key], what) for key, what in NOTED_SECTIONS.items()
                if result.omitted.get(key)}

    notes = notes_of(fitted)
    if not notes:
        return fitted
    room = sum(counter.count_text(render_item(n)) + 1 for n in notes.values())
    refitted = fit_sections(sections, max(0, budget_tokens - room), counter)
    notes = notes_of(refitted)
    out = {k: list(v) for k, v in refitted.sections.items()}
    for key, note in notes.items():
        out.setdefault(key, []).append(note)
    ordered = {s.key: out[s.key] for s in sections if s.key in out}
    text = render_sections(ordered, {s.key: s.title or s.key for s in sections})
    tokens = counter.count_text(text) if text else 0
    if tokens > budget_tokens:  # the notes did not fit after all: the plain fit, which does
        return refitted
    return Fitted(text=text, sections=ordered, tokens=tokens, omitted=refitted.omitted, shortened=refitted.shortened)


# --------------------------------------------------------------------------------------------------
# Merging


def previous_state(previous: Summary) -> dict[str, list[str]]:
    """The previous summary as extractive state: its own state when it was extractive, otherwise its
    sections (known headings mapped onto ours) and its file lists."""
    stored = previous.details.get(STATE_KEY) if isinstance(previous.details, Mapping) else None
    if isinstance(stored, Mapping):
        return {str(k): [str(i) for i in v] for k, v in stored.items()}
    state: dict[str, list[str]] = {}
    for heading, items in previous.sections.items():
        norm = heading.strip().strip(":").casefold()
        if norm in _FILE_HEADINGS:
            continue
        key = _ALIASES.get(norm, heading if heading else "Earlier summary")
        state[key] = merge_items(state.get(key, []), list(items))
    if not previous.sections and previous.text.strip():
        state["Earlier summary"] = [p.strip() for p in previous.text.split("\n\n") if p.strip()]
    if previous.modified_files:
        state[MODIFIED] = list(previous.modified_files)
    if previous.read_files:
        state[READ] = list(previous.read_files)
    if previous.identifiers:
        state[IDENTIFIERS] = merge_items(list(previous.identifiers), state.get(IDENTIFIERS, []), to_front=True)
    return state


def merge_states(previous: Mapping[str, Sequence[str]], new: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Section-by-section merge: the goal is kept, open tasks and current work are replaced when the
    new span has any, identifiers go new-first, everything else is a union with the newest last;
    files modified anywhere leave the read-only list; each section is capped; user messages that
    are the goal are not repeated."""
    out: dict[str, list[str]] = {}
    for key in [*ORDER, *(k for k in previous if k not in ORDER), *(k for k in new if k not in ORDER)]:
        if key in out or key in (ROOT,):
            continue
        old, fresh = list(previous.get(key, ())), list(new.get(key, ()))
        rule = RULES.get(key, "union")
        if rule == "keep":
            merged = old or fresh
        elif rule == "replace":
            merged = fresh or old
        else:
            merged = merge_items(old, fresh, to_front=rule == "front")
        if key == COMMANDS:  # the same command with another repeat count is the same command
            merged = _dedup_last_by(merged, lambda c: item_key(REPEAT_MARK.sub("", c)))
        cap = STATE_CAPS.get(key, OTHER_CAP)
        merged = merged[:cap] if rule == "front" or rule == "keep" else merged[-cap:]
        if merged:
            out[key] = merged
    modified_keys = {item_key(p) for p in out.get(MODIFIED, ())}
    if READ in out:
        out[READ] = [p for p in out[READ] if item_key(p) not in modified_keys]
        if not out[READ]:
            del out[READ]
    goal_keys = {item_key(g) for g in out.get(GOAL, ())}
    if USER in out:
        out[USER] = [u for u in out[USER] if item_key(u) not in goal_keys]
        if not out[USER]:
            del out[USER]
    return out


# --------------------------------------------------------------------------------------------------
# Rendering within the budget


def project_root(paths: Sequence[str]) -> str | None:
    """The directory most absolute paths share (at least MIN_ROOT_FILES of them, two levels deep), so
    file lists can show paths relative to it."""
    absolute = sorted({p for p in paths if p.startswith("/")})
    if len(absolute) < 2:
        return None
    groups: dict[str, list[str]] = {}
    for path in absolute:
        groups.setdefault("/".join(path.split("/")[:-1][:ROOT_GROUP_DEPTH + 1]), []).append(path)
    best = max(sorted(groups.items()), key=lambda kv: len(kv[1]))[1]
    if len(best) < MIN_ROOT_FILES:
        return None
    root = posixpath.commonpath(best)
    if root in best:  # a file, not a directory (one path is a prefix of another)
        root = posixpath.dirname(root)
    return root if root.count("/") >= 2 else None


def _relative(path: str, root: str | None) -> str:
    if root and path.startswith(root + "/"):
        return path[len(root) + 1:]
    return path


def _focus_terms(focus: str | None) -> list[str]:
    if not focus:
        return []
    return sorted({w.casefold() for w in _WORD.findall(focus) if w.casefold() not in _STOPWORDS})


def _variants(text: str, *limits: int) -> tuple[str, ...]:
    out: list[str] = []
    for limit in limits:
        variant = clip(text, limit)
        if not out or variant != out[-1]:
            out.append(variant)
    return tuple(out)


def _names(text: str) -> set[str]:
    """The code names and paths of a short text (a command line, an error line), case-folded."""
    return {t.casefold() for t in (f.strip(".-") for f in _REFERENCE.findall(text)) if _is_name(t)}


def referenced_later(span: Sequence[Message], names: Sequence[list[tuple[str, float]]] | None = None) -> frozenset[str]:
    """Commands (their first lines) and error lines of the span that a later message refers back to:
    one of their names (a path, a code name) appears again after the call's result. Normalized.
    `names`: `message_names` of each message, when already computed."""
    last_seen: dict[str, int] = {}
    for position, found in enumerate(names if names is not None else [message_names(m) for m in span]):
        for token, _ in found:
            last_seen[token.casefold()] = position
    results = {r.call_id: (i, r) for i, m in enumerate(span) for r in m.tool_results}
    out: set[str] = set()
    for position, message in enumerate(span):
        for call in message.tool_calls:
            after, result = results.get(call.id, (position, None))
            command = shell_command(call)
            if command:
                first = command_line(command)[0]
                if any(last_seen.get(n, -1) > after for n in _names(first)):
                    out.add(normalize(first))
            if result is not None and is_failure(result):
                out.update(normalize(line) for line in error_lines(result.text)
                           if any(last_seen.get(n, -1) > after for n in _names(line)))
    return frozenset(out)


def _is_referenced(item: str, referenced: frozenset[str]) -> bool:
    """Whether a command or error item holds a command line or error line of `referenced`."""
    if not referenced:
        return False
    head = item.split(FIX_MARK)[0]
    lines = [REPEAT_MARK.sub("", head).strip().strip("`")] if head.startswith("`") and "\n" not in head else []
    lines += [line.split(": ", 1)[-1] for line in head.split("\n")]
    lines += head.split("\n")
    return any(normalize(line.strip("`")) in referenced for line in lines)


def recent_or_referenced(items: Sequence[str], referenced: frozenset[str], boost: Callable[[str], float],
                         variants: Callable[[str], tuple[str, ...]]) -> tuple[SectionItem, ...]:
    """Items ranked for the budget: the most recent first, and an item naming something the end of
    the history still uses counts as twice as recent."""
    n = len(items)
    return tuple(SectionItem(variants(t), rank=(n - 1 - i) * (0.5 if _is_referenced(t, referenced) else 1.0) + boost(t))
                 for i, t in enumerate(items))


FIX_MARK = " — "


def error_variants(entry: str) -> tuple[str, ...]:
    """An error entry whole, then with its first error line only (and the fix note): the lines stay
    verbatim in both; an error line cut short would no longer be found where it came from."""
    lines = entry.split("\n")
    if len(lines) == 1:
        return (entry,)
    fix = lines[-1][lines[-1].rfind(FIX_MARK):] if FIX_MARK in lines[-1] else ""
    return (entry, lines[0] + fix)


def commands_items(commands: Sequence[str], referenced: frozenset[str],
                   boost: Callable[[str], float]) -> tuple[SectionItem, ...]:
    """The commands section: the directories line first, then each command whole; a long one
    (over COMMAND_MEDIUM_CHARS) may shrink to its long arguments shortened, then to its head, before
    it is dropped. A short command is kept whole or not at all: a command is only worth its exact text."""
    def variants(item: str) -> tuple[str, ...]:
        if len(item) <= COMMAND_MEDIUM_CHARS or not item.startswith("`"):
            return (item,)
        suffix = REPEAT_MARK.search(item)
        end = suffix.start() if suffix else len(item)
        command, tail = item[1:end].removesuffix("`"), item[end:]
        grouped, shortened = group_paths(command), shorten_arguments(command)
        forms = [*([command] if len(command) <= COMMAND_CHARS else []), clip(grouped, COMMAND_CHARS),
                 clip(shortened, COMMAND_CHARS), clip(shortened, COMMAND_MEDIUM_CHARS)]
        return tuple(f"`{form}`{tail}" for form in sorted(dict.fromkeys(forms), key=len, reverse=True))

    head = [c for c in commands if c.startswith(DIRECTORY_PREFIX)]
    rest = [c for c in commands if not c.startswith(DIRECTORY_PREFIX)]
    newest_root = tuple(SectionItem((h,), rank=-1.0) for h in head[-1:])
    return newest_root + recent_or_referenced(rest, referenced, boost, variants)


def fit_input(state: Mapping[str, Sequence[str]], *, root: str | None, focus: str | None = None,
              per_message_chars: int = PER_MESSAGE_CHARS, identifiers: Sequence[str] | None = None,
              referenced: frozenset[str] = frozenset()) -> list[Section]:
    """The state as sections to fit: each item with its shorter forms and its rank (recent first for
    chronological sections, in order for the others, focus matches before everything; commands and
    errors in `referenced` count as twice as recent). The identifiers listed are `identifiers`, or by
    default those no other section contains."""
    terms = _focus_terms(focus)

    def boost(text: str) -> float:
        if not terms:
            return 0.0
        low = text.casefold()
        return -FOCUS_BOOST if any(t in low for t in terms) else 0.0

    def newest_first(items: Sequence[str], *limits: int) -> tuple[SectionItem, ...]:
        n = len(items)
        return tuple(SectionItem(_variants(t, *limits), rank=(n - 1 - i) + boost(t)) for i, t in enumerate(items))

    def in_order(items: Sequence[str], *limits: int) -> tuple[SectionItem, ...]:
        return tuple(SectionItem(_variants(t, *limits), rank=i + boost(t)) for i, t in enumerate(items))

    if identifiers is None:
        covered = normalize("\n".join(i for k, v in state.items() if k != IDENTIFIERS for i in v))
        identifiers = [i for i in state.get(IDENTIFIERS, ()) if not survives(i, covered)]
    files = {
        MODIFIED: [_relative(p, root) for p in state.get(MODIFIED, ())],
        READ: [_relative(p, root) for p in state.get(READ, ())],
    }
    built: dict[str, tuple[SectionItem, ...]] = {
        GOAL: in_order(state.get(GOAL, ()), GOAL_CHARS, USER_MEDIUM_CHARS, USER_SHORT_CHARS),
        USER: newest_first(state.get(USER, ()), per_message_chars, USER_MEDIUM_CHARS, USER_SHORT_CHARS),
        ROOT: (SectionItem((root,)),) if root and (files[MODIFIED] or files[READ]) else (),
        MODIFIED: newest_first(files[MODIFIED], 10_000),
        READ: newest_first(files[READ], 10_000),
        COMMANDS: commands_items(state.get(COMMANDS, ()), referenced, boost),
        ERRORS: recent_or_referenced(state.get(ERRORS, ()), referenced, boost, error_variants),
        DECISIONS: newest_first(state.get(DECISIONS, ()), DECISION_CHARS, SHORT_CHARS),
        OPEN: in_order(state.get(OPEN, ()), USER_MEDIUM_CHARS, USER_SHORT_CHARS),
        CURRENT: in_order(state.get(CURRENT, ()), CURRENT_TEXT_CHARS, USER_MEDIUM_CHARS),
        IDENTIFIERS: in_order(identifiers, 10_000),
        RECENT: in_order(state.get(RECENT, ()), 10_000),
    }
    sections = []
    for key in ORDER:
        if key == ROOT:
            # Carried sections of an earlier model summary read best right after the goal and asks.
            sections.extend(
                Section(key=k, items=in_order(v, 400, SHORT_CHARS), weight=OTHER_WEIGHT)
                for k, v in state.items() if k not in ORDER and v
            )
        if built[key]:
            sections.append(Section(key=key, items=built[key], weight=WEIGHTS[key]))
    return sections
