"""The extractive summarizer: the default, and the fallback when a model summary fails.

No model: it pulls out what an agent needs to continue (the goal, every user message, files read and
modified, commands verbatim, each error's distinctive line and what fixed it, identifiers, decisions,
open tasks, current work), merges it with the previous summary section by section, and renders it
within a token budget, trimming the least important items first. Same input, same bytes.

The full merged state (before trimming) is kept in `Summary.details["extractive"]`, so that the next
compaction merges with everything known, not only with what fit on the page; this also makes merging
idempotent (a summary merged with itself, or with the same span again, is unchanged).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwin.compaction.base import Summary
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
from ctxwin.compaction.summary import Item, Section, clip, fit_sections, item_key, merge_items
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.tokens.base import TokenCounter

DEFAULT_BUDGET_TOKENS = 4_000  # when the caller gives none (Claude Code's summaries run 3-4k tokens)
PER_MESSAGE_CHARS = 1_000  # a user message is kept verbatim up to this many characters
USER_MEDIUM_CHARS = 300  # the middle form of a long user message
USER_SHORT_CHARS = 100  # the shortest form: its opening, enough to recognise the message
GOAL_CHARS = 600  # the goal shown at most this long
COMMAND_CHARS = 2_000  # a command longer than this is cut (heredoc scripts)
COMMAND_MEDIUM_CHARS = 400  # the middle form of a long command
SHORT_CHARS = 160  # the short form of a long item
ERROR_LINE_CHARS = 300  # an error line is cut here
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
RECENT_LINES = 12

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
# Share of the budget when sections compete for it.
WEIGHTS: Mapping[str, float] = {
    GOAL: 2.0, USER: 6.0, ROOT: 1.0, MODIFIED: 3.0, READ: 2.5, COMMANDS: 4.0, ERRORS: 3.0,
    DECISIONS: 1.5, OPEN: 2.0, CURRENT: 2.0, IDENTIFIERS: 2.0, RECENT: 2.0,
}
OTHER_WEIGHT = 2.0  # sections carried from another summarizer's summary
# How each section merges with the previous summary's (see summary.merge_sections).
RULES: Mapping[str, str] = {GOAL: "keep", OPEN: "replace", CURRENT: "replace", IDENTIFIERS: "front",
                            RECENT: "replace"}
# At most this many items per section are kept in the merged state (the newest; identifiers: the first).
STATE_CAPS: Mapping[str, int] = {
    GOAL: 3, USER: 200, MODIFIED: 1_000, READ: 1_000, COMMANDS: 300, ERRORS: 100, DECISIONS: 60,
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

# Words that mark an error line: strong ones first (an exception name, "error:", "fatal"), then weak
# ones that also occur in ordinary output (a test named "handles invalid input").
_STRONG_ERROR = re.compile(r"\w*(?:Error|Exception)\b|\b(?:errors?|fatal|failed|failures?|panic|traceback)\b", re.I)
_WEAK_ERROR = re.compile(
    r"\b(?:cannot|can't|could not|couldn't|not found|no such|denied|invalid|undefined|refused|timed out|unable|"
    r"missing)\b",
    re.I,
)
_GENERIC_ERROR = re.compile(r"^(?:exit code \d+|command exited with code \d+|errors?:?|error output:?)$", re.I)
_EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b")
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
    command_chars: int = COMMAND_CHARS
    name: str = "extractive"

    def summarize(
        self,
        span: Sequence[Message],
        *,
        previous: Summary | None = None,
        focus: str | None = None,
        budget_tokens: int = DEFAULT_BUDGET_TOKENS,
        counter: TokenCounter | None = None,
    ) -> Summary:
        if counter is None:
            from ctxwin.tokens import counter_for

            counter = counter_for()
        new = span_state(span, per_message_chars=self.per_message_chars, command_chars=self.command_chars)
        state = merge_states(previous_state(previous), new) if previous is not None else merge_states({}, new)
        root = project_root([*state.get(MODIFIED, ()), *state.get(READ, ())])
        sections = fit_input(state, root=root, focus=focus, per_message_chars=self.per_message_chars)
        fitted = fit_sections(sections, budget_tokens, counter)
        # Identifiers are listed only where no other section shows them; but a section may have lost
        # them to trimming. Fit again listing every identifier the first rendering lost.
        shown = normalize(fitted.text)
        lost = [i for i in state.get(IDENTIFIERS, ()) if not survives(i, shown)]
        if set(lost) - set(fitted.sections.get(IDENTIFIERS, ())):
            sections = fit_input(state, root=root, focus=focus, per_message_chars=self.per_message_chars,
                                 identifiers=lost)
            fitted = fit_sections(sections, budget_tokens, counter)
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
               command_chars: int = COMMAND_CHARS) -> dict[str, list[str]]:
    """Everything the extractive summary can say about `span`, untrimmed, by section."""
    users = [clip(t, per_message_chars) for t in (user_text(m) for m in span) if t]
    read, modified = extract_file_ops(span)
    commands = _dedup_last([clip(c, command_chars) for c in _commands(span)])
    state: dict[str, list[str]] = {
        GOAL: users[:1],
        USER: _dedup_last(users),
        MODIFIED: modified,
        READ: read,
        COMMANDS: commands,
        ERRORS: _dedup_last(error_entries(span)),
        DECISIONS: _dedup_last(decisions(span)),
        OPEN: open_tasks(span),
        CURRENT: current_work(span),
        IDENTIFIERS: extract_identifiers(span),
        RECENT: recent_references(span),
    }
    return {k: v for k, v in state.items() if v}


# Code symbols (snake_case, camelCase, PascalCase with two capitals, dotted names) and paths.
_REFERENCE = re.compile(r"(?<![\w/.-])(?:[\w.-]*/[\w./-]+\w|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
_CODE_WORD = re.compile(r"_[A-Za-z0-9]|[a-z][A-Z]|[A-Z][a-z]+[A-Z]|\.[A-Za-z_]")


def recent_references(span: Sequence[Message]) -> list[str]:
    """What the agent was working with, for it to pick up again: code symbols and paths of the span,
    ranked by how recently and how often they appear (tool call arguments count double: the agent
    typed them). Rendered a few per line, most relevant first."""
    scores: dict[str, float] = {}
    recent = span[-RECENT_MESSAGES:]
    for position, message in enumerate(recent, start=1):
        weight = 0.2 + 0.8 * position / len(recent)  # recent counts most; often-used old names still rank
        texts: list[tuple[str, float]] = []
        for block in message.blocks:
            if isinstance(block, Text):
                texts.append((block.text, 1.0))
            elif isinstance(block, ToolCall):
                texts.extend((v, 2.0) for v in call_arguments(block).values() if isinstance(v, str))
            elif isinstance(block, ToolResult):
                texts.append((block.text, 0.5))
        for text, factor in texts:
            for found in _REFERENCE.findall(text[:RECENT_TEXT_CHARS]):
                token = found.strip(".-")
                if len(token) < 4 or len(token) > 120 or not ("/" in token or _CODE_WORD.search(token)):
                    continue
                scores[token] = scores.get(token, 0.0) + weight * factor
    ranked = sorted(scores, key=lambda t: (-scores[t], t))
    lines = [", ".join(ranked[i:i + RECENT_PER_LINE]) for i in range(0, len(ranked), RECENT_PER_LINE)]
    return lines[:RECENT_LINES]


def _dedup_last(items: Sequence[str]) -> list[str]:
    """Duplicates removed, each kept at its last position (most recent use)."""
    return merge_items([], list(reversed(items)), to_front=True)[::-1] if items else []


def _commands(span: Sequence[Message]) -> list[str]:
    out = []
    for message in span:
        for call in message.tool_calls:
            command = shell_command(call)
            if command:
                out.append(command.strip())
    return out


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


def error_line(text: str) -> str:
    """The distinctive line of a failure: a Python traceback's exception line, else the first line
    naming an error strongly (an exception name, error, fatal, failed), else weakly (not found,
    invalid, denied ...), else the first line that is not a bare exit code."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    start = text.rfind("Traceback (most recent call last)")
    if start >= 0:
        tail = [line.strip() for line in text[start:].splitlines() if line.strip()]
        exceptions = [line for line in tail if _EXCEPTION_LINE.match(line)]
        return clip(exceptions[-1] if exceptions else tail[-1], ERROR_LINE_CHARS)
    for pattern in (_STRONG_ERROR, _WEAK_ERROR):
        for line in lines:
            if pattern.search(line) and not _GENERIC_ERROR.match(line):
                return clip(line, ERROR_LINE_CHARS)
    for line in lines:
        if not _GENERIC_ERROR.match(line):
            return clip(line, ERROR_LINE_CHARS)
    return clip(lines[0], ERROR_LINE_CHARS)


def _target(call: ToolCall) -> tuple[str, str]:
    """(key, label) naming what a call acted on: a shell command's program and subcommand, or the
    file path; two calls with the same key are "the same command or file"."""
    command = shell_command(call)
    if command is not None:
        words = _CD_PREFIX.sub("", command.strip()).split()
        return "cmd:" + " ".join(words[:2]), f"`{clip(command.strip(), SHORT_CHARS)}`"
    path = call_path(call_arguments(call))
    if path:
        return "path:" + path, f"{call.name} {path}"
    return "tool:" + call.name, call.name


def error_entries(span: Sequence[Message]) -> list[str]:
    """One entry per failing tool result: what failed, its distinctive error line verbatim, and,
    when a later call on the same file or command succeeded, that call (and the files edited in
    between): "`cmd`: <error line> — fixed: `cmd2` succeeded after editing a.py"."""
    calls, results = _calls_and_results(span)
    keys = [_target(c) for c in calls]
    written: dict[int, list[str]] = {}  # files each call wrote, parsed only when needed

    def writes(index: int) -> list[str]:
        if index not in written:
            written[index] = extract_file_ops([_as_message(calls[index])])[1]
        return written[index]

    entries = []
    for index, call in enumerate(calls):
        result = results.get(call.id)
        if result is None or not is_failure(result):
            continue
        key, label = keys[index]
        line = error_line(result.text)
        entry = f"{label}: {line}" if line else f"{label}: failed"
        edited: list[str] = []
        for later in range(index + 1, len(calls)):
            later_call = calls[later]
            later_result = results.get(later_call.id)
            if keys[later][0] == key and later_result is not None:
                if not is_failure(later_result):
                    fix = f"{keys[later][1]} succeeded"
                    if edited:
                        fix += " after editing " + ", ".join(_short_path(p) for p in edited)
                    entry += f" — fixed: {fix}"
                    break
            else:
                edited.extend(p for p in writes(later) if p not in edited)
        entries.append(entry)
    return entries


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


def fit_input(state: Mapping[str, Sequence[str]], *, root: str | None, focus: str | None = None,
              per_message_chars: int = PER_MESSAGE_CHARS, identifiers: Sequence[str] | None = None) -> list[Section]:
    """The state as sections to fit: each item with its shorter forms and its rank (recent first for
    chronological sections, in order for the others, focus matches before everything). The
    identifiers listed are `identifiers`, or by default those no other section contains."""
    terms = _focus_terms(focus)

    def boost(text: str) -> float:
        if not terms:
            return 0.0
        low = text.casefold()
        return -FOCUS_BOOST if any(t in low for t in terms) else 0.0

    def newest_first(items: Sequence[str], *limits: int) -> tuple[Item, ...]:
        n = len(items)
        return tuple(Item(_variants(t, *limits), rank=(n - 1 - i) + boost(t)) for i, t in enumerate(items))

    def in_order(items: Sequence[str], *limits: int) -> tuple[Item, ...]:
        return tuple(Item(_variants(t, *limits), rank=i + boost(t)) for i, t in enumerate(items))

    if identifiers is None:
        covered = normalize("\n".join(i for k, v in state.items() if k != IDENTIFIERS for i in v))
        identifiers = [i for i in state.get(IDENTIFIERS, ()) if not survives(i, covered)]
    files = {
        MODIFIED: [_relative(p, root) for p in state.get(MODIFIED, ())],
        READ: [_relative(p, root) for p in state.get(READ, ())],
    }
    built: dict[str, tuple[Item, ...]] = {
        GOAL: in_order(state.get(GOAL, ()), GOAL_CHARS, USER_MEDIUM_CHARS, USER_SHORT_CHARS),
        USER: newest_first(state.get(USER, ()), per_message_chars, USER_MEDIUM_CHARS, USER_SHORT_CHARS),
        ROOT: (Item((root,)),) if root and (files[MODIFIED] or files[READ]) else (),
        MODIFIED: newest_first(files[MODIFIED], 10_000),
        READ: newest_first(files[READ], 10_000),
        COMMANDS: newest_first(state.get(COMMANDS, ()), COMMAND_CHARS, COMMAND_MEDIUM_CHARS, SHORT_CHARS),
        ERRORS: newest_first(state.get(ERRORS, ()), 2 * ERROR_LINE_CHARS, ERROR_LINE_CHARS),
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
