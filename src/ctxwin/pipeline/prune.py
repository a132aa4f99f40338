"""OpenClaw's context pruning: when the view's characters pass a share of the window, soft-trim old
tool results to head + tail, then hard-clear them oldest first. Results after the last N assistant
messages, and everything before the first user message (bootstrap reads), are protected. In
`cache-ttl` mode it prunes only once the prompt cache has expired, and like OpenClaw's sticky
pruning every decision is recorded and replayed.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin.messages import Text, ToolResult
from ctxwin.pipeline.cut import head_tail
from ctxwin.pipeline.events import HardCleared, SoftTrimmed
from ctxwin.pipeline.view import (
    CHARS_PER_TOKEN,
    Item,
    Rewrite,
    StageContext,
    StageResult,
    message_chars,
    recall_ref,
    text_result,
    tool_matches,
    with_results,
)
from ctxwin.policies.model import PrunePolicy

CLEARED_BY = ("prune", "mask", "fit")
"""Renderings that are already placeholders: never pruned again."""


def _bounds(items: Sequence[Item], keep_last_assistants: int) -> tuple[int, int] | None:
    """[start, cutoff): after the first user message, before the N-th last assistant message."""
    start = next((i for i, item in enumerate(items) if item.message.role == "user"), None)
    if start is None:
        return None
    seen = 0
    for index in range(len(items) - 1, -1, -1):
        if items[index].message.role == "assistant":
            seen += 1
            if seen >= keep_last_assistants:
                return start, index
    return None


def _prunable(item: Item, policy: PrunePolicy) -> bool:
    if item.message.role != "tool" or item.synthetic or item.rendered_by in CLEARED_BY:
        return False
    results = item.message.tool_results
    return all(all(isinstance(p, Text) for p in r.content) for r in results) and all(
        tool_matches(r.name, policy.tools_allow, policy.tools_deny) for r in results)


def stage(items: Sequence[Item], policy: PrunePolicy, ctx: StageContext) -> StageResult:
    out = list(items)
    if policy.mode == "cache-ttl" and ctx.now is not None and ctx.last_call_at is not None \
            and ctx.now - ctx.last_call_at < policy.ttl_seconds:
        return StageResult(out)
    bounds = _bounds(out, policy.keep_last_assistants)
    if bounds is None:
        return StageResult(out)
    start, cutoff = bounds
    char_window = ctx.window * CHARS_PER_TOKEN
    sizes = [message_chars(item.message) for item in out]
    total = sum(sizes)
    if total < policy.soft_trim_ratio * char_window:
        return StageResult(out)
    edit = Rewrite("prune", ctx, out)
    changed: dict[int, str] = {}  # index -> stage action
    for index in range(start, cutoff):
        item = out[index]
        if not _prunable(item, policy) or item.rendered_by == "soft_trim":
            continue
        replaced: dict[int, ToolResult] = {}
        for b_index, block in enumerate(item.message.blocks):
            if not isinstance(block, ToolResult):
                continue
            text = block.text
            if len(text) <= policy.soft_trim_max_chars:
                continue
            cut = head_tail(text, policy.soft_trim_head_chars, policy.soft_trim_tail_chars)
            if not cut.changed:
                continue
            replaced[b_index] = text_result(block, (
                f"{cut.head}\n...\n{cut.tail}\n\n[Tool result trimmed: kept first {len(cut.head):,} chars and last "
                f"{len(cut.tail):,} chars of {cut.total_chars:,} chars. Full output: "
                f"{recall_ref(item.entry_id, block.call_id)}]"))
        if replaced:
            new = edit.render(index, with_results(item.message, replaced), rendered_by="soft_trim")
            total += message_chars(new.message) - sizes[index]
            sizes[index] = message_chars(new.message)
            changed[index] = "soft_trim"
    if policy.hard_clear and total >= policy.hard_clear_ratio * char_window:
        prunable = [i for i in range(start, cutoff) if out[i].message.role == "tool"
                    and out[i].rendered_by not in CLEARED_BY and _prunable_or_trimmed(out[i], policy)]
        if sum(sizes[i] for i in prunable) >= policy.min_prunable_chars:
            for index in prunable:
                if total < policy.hard_clear_ratio * char_window:
                    break
                item = out[index]
                cleared = {b_index: text_result(block, f"{policy.placeholder} (recover it with recall(\""
                                                       f"{recall_ref(item.entry_id, block.call_id)}\"))")
                           for b_index, block in enumerate(item.message.blocks) if isinstance(block, ToolResult)}
                new = edit.render(index, with_results(item.message, cleared))
                total += message_chars(new.message) - sizes[index]
                sizes[index] = message_chars(new.message)
                changed[index] = "hard_clear"
    for kind in (SoftTrimmed, HardCleared):
        indices = [i for i in sorted(changed) if changed[i] == kind.kind_action]
        if indices:
            before = sum(items[i].tokens for i in indices)
            after = sum(out[i].tokens for i in indices)
            edit.events.append(kind(tuple(out[i].entry_id for i in indices), before, after,
                                    f"context at {total / char_window:.0%} of the window in characters"))
    return edit.result()


def _prunable_or_trimmed(item: Item, policy: PrunePolicy) -> bool:
    return item.rendered_by == "soft_trim" or _prunable(item, policy)
