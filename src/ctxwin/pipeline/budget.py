"""Result budget: cap each tool result, keeping head and tail when the tail looks important.

OpenClaw's live tool-result cap (min(16k chars, 30 % of the window)) and Letta's per-request cap
(max(5k, 20 % of the window)). The full result stays in the log; the notice names its handle.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin.messages import Text, ToolResult
from ctxwin.pipeline.cut import has_important_tail, head_tail
from ctxwin.pipeline.events import ResultCapped
from ctxwin.pipeline.view import (
    CHARS_PER_TOKEN,
    Item,
    Rewrite,
    StageContext,
    StageResult,
    recall_ref,
    text_result,
    with_results,
)
from ctxwin.policies.model import ResultBudgetPolicy

NOTICE_RESERVE = 200
"""Characters set aside for the notice inside the cap."""


def result_cap(policy: ResultBudgetPolicy, window: int) -> int:
    """The per-result character cap for a window of `window` tokens."""
    share = int(window * policy.window_share * CHARS_PER_TOKEN)
    return max(policy.min_chars, min(policy.max_chars, share))


def cap_text(text: str, cap: int, policy: ResultBudgetPolicy, ref: str) -> str | None:
    """The capped text with its notice, or None when `text` fits."""
    if len(text) <= cap:
        return None
    room = max(cap - NOTICE_RESERVE, policy.min_chars // 2)
    if policy.tail_share > 0 and room > 2 * policy.min_chars and has_important_tail(text):
        tail = min(int(room * policy.tail_share), policy.tail_max_chars)
        cut = head_tail(text, room - tail, tail)
        return (f"{cut.head}\n\n[... {cut.omitted:,} characters omitted from the middle of this output "
                f"({cut.total_chars:,} in all); showing head and tail. Full output: {ref}]\n\n{cut.tail}")
    cut = head_tail(text, room, 0)
    return (f"{cut.head}\n\n[... {cut.omitted:,} more characters truncated ({cut.total_chars:,} in all). "
            f"Full output: {ref}]")


def stage(items: Sequence[Item], policy: ResultBudgetPolicy, ctx: StageContext) -> StageResult:
    """Cap the results of `items` (the engine passes only messages no stage has seen yet)."""
    cap = result_cap(policy, ctx.window)
    edit = Rewrite("result_budget", ctx, list(items))
    for index, item in enumerate(items):
        changed: dict[int, ToolResult] = {}
        for b_index, block in enumerate(item.message.blocks):
            if not isinstance(block, ToolResult):
                continue
            capped = cap_text(block.text, cap, policy, recall_ref(item.entry_id, block.call_id))
            if capped is not None and not any(not isinstance(p, Text) for p in block.content):
                changed[b_index] = text_result(block, capped)
        if changed:
            new = edit.render(index, with_results(item.message, changed))
            edit.events.append(ResultCapped((item.entry_id,), item.tokens, new.tokens,
                                            f"tool result over {cap:,} characters"))
    return edit.result()
