"""The working notes of a span: decisions the assistant stated, open tasks (unanswered asks, the todo
list, plan documents' unchecked items, "next steps"), and the current work (the last assistant message
and the last tool calls)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxwin.compaction.extractive.asks import USER_MEDIUM_CHARS
from ctxwin.compaction.extractive.errors import result_errors
from ctxwin.compaction.extractive.files import short_path
from ctxwin.compaction.identifiers import (
    call_arguments,
    call_path,
    scan_window,
    shell_command,
    tool_kind,
    user_text,
)
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.pipeline.cut import clip

SHORT_CHARS = 160  # the short form of a long item
DECISION_CHARS = 300
CURRENT_TEXT_CHARS = 800  # the last assistant message, shown at most this long
RECENT_CALLS = 5  # the last tool calls listed under current work
NEXT_STEP_ITEMS = 8  # list items taken after a "next steps" line
LAST_MESSAGE = "Last assistant message: "
LAST_CALLS = "Last tool calls: "

_DECISION = re.compile(
    r"\b(?:decided|decide to|decision|will use|we'll use|i'll use|let's use|instead of|because|chose|"
    r"choose|chosen|going with|opted|prefer)\b",
    re.I,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*\"'(\[])|\n+")
_CODE_FENCE = re.compile(r"```.*?(?:```|$)", re.S)
_NEXT_STEPS = re.compile(r"next steps?\b", re.I)
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,2}[.)])\s+(.+)$")
_TODO_TOOLS = frozenset({"todowrite", "todo_write", "update_plan", "write_todos", "todo"})


def decisions(span: Sequence[Message]) -> list[str]:
    """Assistant sentences that state a choice ("decided", "will use", "instead of", "because" ...)."""
    out = []
    for message in span:
        if message.role != "assistant":
            continue
        for block in message.blocks:
            if not isinstance(block, Text):
                continue
            # Of a text of megabytes only the ends are read, as for identifiers: bounded work per text.
            prose = _CODE_FENCE.sub(" ", scan_window(block.text))
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
    -> checked, per file, in document order, updated by each write (the whole list) and edit (the
    items of the replaced text give way to those of the new text, in their place)."""
    args = call_arguments(call)
    path = call_path(args)
    if not path or not path.lower().endswith((".md", ".markdown", ".txt")):
        return
    kind = tool_kind(call.name)
    whole = args.get("content") if kind in ("write", "write_file", "create", "create_file") else None
    new = whole if isinstance(whole, str) else args.get("new_string", args.get("newText", args.get("new_str")))
    if not isinstance(new, str):
        return
    items = plans.setdefault(path, {})
    fresh = {item: mark != " " for mark, item in _CHECKBOX.findall(new)}
    if isinstance(whole, str):  # a whole new version of the file
        items.clear()
        items.update(fresh)
        return
    old = args.get("old_string", args.get("oldText", args.get("old_str")))
    replaced = [item for _, item in _CHECKBOX.findall(old)] if isinstance(old, str) else []
    gone = set(replaced) | set(fresh)
    order = list(items.items())
    at = next((k for k, (item, _) in enumerate(order) if item in set(replaced)), len(order))
    rebuilt = [(i, v) for i, v in order[:at] if i not in gone] + list(fresh.items()) + \
        [(i, v) for i, v in order[at:] if i not in gone]
    items.clear()
    items.update(rebuilt)


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
    planned = [f"Plan ({short_path(path)}): {clip(item, SHORT_CHARS * 2)}"
               for path, items in plans.items() for item in next_unchecked(items)]
    return unanswered + todos + [f"Next: {s}" for s in next_steps] + planned


def next_unchecked(items: dict[str, bool]) -> list[str]:
    """A plan document's next items: the unchecked ones after the last checked (where the work
    stands), else the first unchecked ones; at most PLAN_ITEMS."""
    order = list(items)
    last_done = max((i for i, item in enumerate(order) if items[item]), default=-1)
    ahead = [item for item in order[last_done + 1:] if not items[item]]
    return (ahead or [item for item in order if not items[item]])[:PLAN_ITEMS]


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


def current_work(span: Sequence[Message]) -> list[str]:
    """The last assistant text, and the last few tool calls in one line (each marked when it failed)."""
    calls, results = _calls_and_results(span)
    last_text = next((m.text for m in reversed(span) if m.role == "assistant" and m.text.strip()), "")
    out = [f"{LAST_MESSAGE}{clip(last_text, CURRENT_TEXT_CHARS)}"] if last_text else []
    briefs = []
    for call in calls[-RECENT_CALLS:]:
        result = results.get(call.id)
        failed = result is not None and result_errors(call, result) is not None
        brief = f"{_call_brief(call)}{' (failed)' if failed else ''}"
        if brief not in briefs:
            briefs.append(brief)
    if briefs:
        out.append(LAST_CALLS + "; ".join(briefs))
    return out


def last_assistant_text(span: Sequence[Message]) -> str:
    return next((m.text for m in reversed(span) if m.role == "assistant" and m.text.strip()), "")
