"""Observation masking: tool outputs older than the last N become placeholders that say how to get
them back (JetBrains' "The Complexity Trap", SWE-agent's last-N observations).

Masking in batches is what makes it cheap once prompt caching is priced: each mask edits old
content, so the cached prefix breaks from there on. With `batch = B` the stage waits until B results
are due and masks them together: one cache break per B calls instead of one per call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxwin.messages import Message, ToolCall, ToolResult
from ctxwin.pipeline.events import Masked
from ctxwin.pipeline.failures import error_line
from ctxwin.pipeline.view import (
    Item,
    Rewrite,
    StageContext,
    StageResult,
    describe_call,
    recall_ref,
    text_result,
    tool_matches,
    total_tokens,
    with_results,
)
from ctxwin.policies.model import MaskPolicy

MASKED_BY = ("mask", "prune", "dedup", "fit")
"""Renderings that are already placeholders or stubs: never masked again."""
PATH_ARGUMENTS = ("file_path", "path", "filename", "file", "notebook_path")
WRITE_ARGUMENTS = frozenset({"content", "new_string", "old_string", "edits", "new_source", "text", "command"})


def placeholder(result: ToolResult, ctx: StageContext, entry_id: str, tokens: int, *, reread: bool = False) -> str:
    text = result.text
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    ref = recall_ref(entry_id, result.call_id)
    call = ctx.calls.get(result.call_id)
    note = (f"[Old output of {describe_call(call)} cleared to save context "
            f"({lines:,} lines, ~{tokens:,} tokens). Recover it with recall(\"{ref}\").")
    again = reread_call(call, lines) if reread else None
    if again:
        note += f" Or read the file again: {again}."
    if result.is_error:
        line = error_line(text)
        if line:
            note += f" It failed with: {line}"
    return note + "]"


def reread_call(call: ToolCall | None, lines: int) -> str | None:
    """The agent's own call that reads the same part of the file again, for a call that read a file
    (a path argument, nothing written): the call as made, with `offset` and `limit`."""
    if call is None or not isinstance(call.arguments, dict) or WRITE_ARGUMENTS & call.arguments.keys():
        return None
    key = next((k for k in PATH_ARGUMENTS if isinstance(call.arguments.get(k), str)), None)
    if key is None:
        return None
    offset = call.arguments.get("offset")
    start = offset if isinstance(offset, int) and not isinstance(offset, bool) else 1
    path = json.dumps(call.arguments[key], ensure_ascii=False)  # whole: a cut path would read another file
    return f"{call.name}({key}={path}, offset={start}, limit={max(lines, 1)})"


def _protected_from(items: Sequence[Item], keep_last: int) -> int:
    """Index of the first item holding one of the last `keep_last` tool results."""
    seen = 0
    for index in range(len(items) - 1, -1, -1):
        message = items[index].message
        if message.role == "tool":
            seen += len(message.blocks)
            if seen >= keep_last:
                return index
    return 0


def _long_inputs(message: Message, limit: int) -> bool:
    return any(isinstance(v, str) and len(v) > limit for c in message.tool_calls
               if isinstance(c.arguments, dict) for v in c.arguments.values())


def cleared_call(call: ToolCall, limit: int, ref: str) -> ToolCall:
    """The call with every string argument longer than `limit` replaced by a note saying where the
    original is; paths, commands and other short arguments stay as they were."""
    if not isinstance(call.arguments, dict):
        return call
    arguments = {k: (f"[cleared to save context: {len(v):,} characters; recall(\"{ref}\") has the call as made]"
                     if isinstance(v, str) and len(v) > limit else v) for k, v in call.arguments.items()}
    return ToolCall(call.id, call.name, arguments, call.extra)


@dataclass
class MaskScan:
    """How far `candidates` has looked into a view that has only grown at its end since: the items
    before `upto` were scanned, and `found` are the candidates among them (the eligible items after the
    last masked one). The caller keeps one per view and starts a new one when the view changes other
    than at its end (a decision, a compaction, a pin) or the policy changes; then a call scans only the
    items that became due since the previous call, however long the session (a session whose outputs
    are all too small to mask would otherwise be scanned from its start on every call)."""

    upto: int = 0
    found: list[int] = field(default_factory=list)


def candidates(items: Sequence[Item], policy: MaskPolicy, pins: frozenset[str] = frozenset(),
               scan: MaskScan | None = None) -> list[int]:
    """Indices of the items a batch would mask now: the eligible items before the cutoff (the last
    `keep_last` results stay) that come after the last masked item (masking always takes every item due
    up to its cutoff). With `scan` (see `MaskScan`, updated in place), only the items since its `upto`
    are looked at."""
    cutoff = _protected_from(items, policy.keep_last) if policy.keep_last > 0 else len(items)
    if scan is None:  # no memo: start after the last masked item (nothing before it is due)
        start = next((i + 1 for i in range(cutoff - 1, -1, -1) if items[i].rendered_by == "mask"), 0)
        scan = MaskScan(upto=start)
    elif scan.upto > cutoff:  # the cutoff never moves back in a view that only grows: not that view
        scan.upto, scan.found = 0, []
    found = scan.found
    for index in range(scan.upto, cutoff):
        item = items[index]
        if item.rendered_by == "mask":
            found.clear()
            continue
        if item.synthetic or item.rendered_by in MASKED_BY or item.entry_id in pins:
            continue
        role = item.message.role
        if role == "assistant":
            if policy.call_inputs_chars and _long_inputs(item.message, policy.call_inputs_chars):
                found.append(index)
        elif role == "tool" and item.tokens >= policy.min_tokens and any(
                tool_matches(b.name, policy.tools_allow, policy.tools_deny)
                for b in item.message.blocks if isinstance(b, ToolResult)):
            found.append(index)
    scan.upto = cutoff
    return list(found)


def stage(items: Sequence[Item], policy: MaskPolicy, ctx: StageContext, scan: MaskScan | None = None) -> StageResult:
    """Mask the items due, once a batch of them is. `scan`: the caller's memo of earlier scans of this
    view (see `MaskScan`); the result is the same with or without it."""
    out = list(items)
    total = ctx.system_tokens + total_tokens(out)
    if total <= policy.trigger_tokens or total <= policy.trigger_ratio * ctx.budget:
        return StageResult(out)
    due = candidates(out, policy, ctx.pins, scan)
    if sum(len(out[i].message.blocks) for i in due if out[i].message.role == "tool") < policy.batch:
        return StageResult(out)
    edit = Rewrite("mask", ctx, out)
    before = total_tokens(out[i] for i in due)
    for index in due:
        item = out[index]
        if item.message.role == "assistant":
            blocks = tuple(cleared_call(b, policy.call_inputs_chars, recall_ref(item.entry_id, b.id))
                           if isinstance(b, ToolCall) else b for b in item.message.blocks)
            edit.render(index, item.message.replace(blocks=blocks))
            continue
        per_block = max(item.tokens // max(len(item.message.blocks), 1), 1)
        changed = {
            b_index: text_result(block, placeholder(block, ctx, item.entry_id, per_block, reread=policy.reread_hint))
            for b_index, block in enumerate(item.message.blocks)
            if isinstance(block, ToolResult) and tool_matches(block.name, policy.tools_allow, policy.tools_deny)
        }
        edit.render(index, with_results(item.message, changed))
    after = total_tokens(out[i] for i in due)
    edit.events.append(Masked(tuple(out[i].entry_id for i in due), before, after,
                              f"{len(due)} tool output(s) older than the last {policy.keep_last}"))
    return edit.result()
