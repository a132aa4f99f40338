"""Fit: the last guarantee that a request fits its budget, never silent.

The ladder, each step only as far as needed and each an event: drop the oldest API rounds (Claude
Code's head drop), clamp tool results (Letta's 5,000 characters), middle-truncate the largest
messages (Letta's 30 % head + 30 % tail). If the request still does not fit, the system prompt and
tool schemas alone are too large, and `ContextBudgetError` says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin.errors import ContextBudgetError
from ctxwin.messages import Message, Text, ToolCall, ToolResult, text_message
from ctxwin.pipeline.cut import head_tail
from ctxwin.pipeline.events import MiddleTruncated, ResultsClamped, RoundsDropped, UnansweredCollapsed
from ctxwin.pipeline.view import (
    Item,
    Rewrite,
    StageContext,
    StageResult,
    recall_ref,
    rerender,
    text_result,
    total_tokens,
    with_results,
)
from ctxwin.policies.model import FitPolicy

MARKER_ID = "fit:dropped"
MIN_CUT_CHARS = 200
"""Texts shorter than this are left whole by middle truncation (the marker would be as long)."""
TRUNCATE_ATTEMPTS = 4
"""Middle-truncation re-measures and cuts again up to this many times per message (a cut sized by
an average characters-per-token ratio can land a little over its target)."""


def dropped_marker(count: int) -> Message:
    """The user message that stands where dropped rounds were, so the view still starts with a user
    turn and the model knows history is missing."""
    return text_message("user", (
        f"[{count:,} earlier message(s) were dropped to fit the context window. They are kept in the session "
        f"log: recall(\"entry:<id>\") or a recall search brings any of them back.]"), id=MARKER_ID)


def rounds(items: Sequence[Item], start: int) -> list[tuple[int, int]]:
    """[begin, end) spans of API rounds from `start`: each round begins at an assistant message; what
    precedes the first assistant message is a round of its own."""
    spans: list[tuple[int, int]] = []
    begin = start
    for index in range(start + 1, len(items)):
        if items[index].message.role == "assistant":
            spans.append((begin, index))
            begin = index
    if begin < len(items):
        spans.append((begin, len(items)))
    return spans


def collapse_unanswered(items: Sequence[Item], ctx: StageContext) -> StageResult:
    """Assistant turns whose tool calls the view never answers, rendered as one line saying how many
    calls were made and where they are. Fit's answer when such a turn, or the error results repair
    would add for its calls, cannot fit (thousands of calls in one turn): the calls stay in the log,
    the view stays valid."""
    edit = Rewrite("fit", ctx, list(items))
    _collapse(edit)
    return edit.result()


def _collapse(edit: Rewrite, min_tokens: int = 0) -> int:
    """Collapse the unanswered turns of `edit.items` of at least `min_tokens`; returns the tokens saved."""
    items = edit.items
    answered = {r.call_id for item in items for r in item.message.tool_results}
    saved = 0
    for index, item in enumerate(items):
        calls = item.message.tool_calls
        unanswered = [c for c in calls if c.id not in answered]
        if (item.message.role != "assistant" or not unanswered or len(unanswered) < len(calls)
                or item.tokens < min_tokens):
            continue
        names = ", ".join(sorted({c.name for c in unanswered})[:5])
        note = (f"[{len(unanswered):,} tool call(s) ({names}) made here were never answered; they are kept in the "
                f"session log: recall(\"{recall_ref(item.entry_id)}\")]")
        text = item.message.text.strip()
        new = edit.render(index, text_message("assistant", f"{text}\n\n{note}" if text else note))
        saved += item.tokens - new.tokens
        edit.events.append(UnansweredCollapsed((item.entry_id,), item.tokens, new.tokens,
                                               "a turn of unanswered tool calls too large to send"))
    return saved


def stage(items: Sequence[Item], policy: FitPolicy, ctx: StageContext) -> StageResult:
    limit = ctx.budget - ctx.system_tokens
    if ctx.budget <= 0:
        raise ContextBudgetError(f"the request budget is {ctx.budget:,} tokens: nothing can be sent",
                                 tokens=ctx.system_tokens, budget=ctx.budget)
    if limit <= 0:
        raise ContextBudgetError(
            f"the system prompt and tool schemas alone are {ctx.system_tokens:,} tokens, over the request budget "
            f"of {ctx.budget:,}", tokens=ctx.system_tokens, budget=ctx.budget)
    out = list(items)
    total = total_tokens(out)
    if total <= limit:
        return StageResult(out)
    edit = Rewrite("fit", ctx, out)
    head = 0
    while head < len(out) and out[head].synthetic:
        head += 1

    # A turn of unanswered calls as large as half the room first: nothing real is lost (the calls never
    # got results; repair would only add error results for them), and it fits no other way. Smaller
    # ones go last, when nothing else was enough.
    total -= _collapse(edit, min_tokens=limit // 2)

    if total > limit and policy.drop_rounds:
        spans = rounds(out, head)
        droppable = spans[: max(len(spans) - policy.keep_last_rounds, 0)]
        marker_tokens = ctx.count(dropped_marker(0))
        dropped: list[Item] = []
        for begin, end in droppable:
            if total <= limit:
                break
            if any(item.entry_id in ctx.pins for item in out[begin:end]):
                continue  # a pinned round stays (and with it the calls and results it holds)
            dropped.extend(out[begin:end])
            total -= total_tokens(out[begin:end])
            if len(dropped) == end - begin:  # the first round dropped: the marker comes in
                total += marker_tokens
        if dropped:
            ids = {item.entry_id for item in dropped}
            kept = [item for item in out[head:] if item.entry_id not in ids]
            prior = sum(1 for item in out[:head] if item.entry_id == MARKER_ID)
            lead = [item for item in out[:head] if item.entry_id != MARKER_ID]
            marker = dropped_marker(len(dropped) + prior)
            out = edit.items = [*lead, Item(MARKER_ID, marker, ctx.count(marker), synthetic=True), *kept]
            for item in dropped:
                edit.record(item.entry_id, None)
            total = total_tokens(out)
            edit.events.append(RoundsDropped(tuple(item.entry_id for item in dropped),
                                             total_tokens(dropped), 0, f"request over its budget of {limit:,} tokens"))
            head = len(lead) + 1

    if total > limit and policy.clamp_chars > 0:
        clamped: list[str] = []
        before = total
        for index in range(head, len(out)):
            if total <= limit:
                break
            item = out[index]
            changed: dict[int, ToolResult] = {}
            for b_index, block in enumerate(item.message.blocks):
                if isinstance(block, ToolResult) and len(block.text) > policy.clamp_chars:
                    cut = head_tail(block.text, policy.clamp_chars // 2, policy.clamp_chars // 2)
                    changed[b_index] = text_result(block, (
                        f"{cut.head}\n[... {cut.omitted:,} characters clamped to fit the context window. Full output: "
                        f"{recall_ref(item.entry_id, block.call_id)}]\n{cut.tail}"))
            if changed:
                new = edit.render(index, with_results(item.message, changed))
                total += new.tokens - item.tokens
                clamped.append(item.entry_id)
        if clamped:
            edit.events.append(ResultsClamped(tuple(clamped), before, total,
                                              f"tool results clamped to {policy.clamp_chars:,} characters"))

    if total > limit:
        truncated: list[str] = []
        before = total
        for index in sorted(range(len(out)), key=lambda i: out[i].tokens, reverse=True):
            if total <= limit:
                break
            original = item = out[index]
            if item.entry_id == MARKER_ID:
                continue
            desired = max(item.tokens - (total - limit), 1)
            scale = desired / max(item.tokens, 1)
            for _ in range(TRUNCATE_ATTEMPTS):
                message = _middle_truncate(original, scale, policy)
                if message is None:
                    break
                new = rerender(original, message, ctx, "fit")
                if new.tokens < item.tokens:
                    total += new.tokens - item.tokens
                    item = new
                if new.tokens <= desired:
                    break
                scale *= desired / new.tokens * 0.95  # overshoot (notices, uneven text): cut again, harder
            if item is original:
                continue
            out[index] = item  # already rendered while searching for the cut that fits
            edit.record(item.entry_id, item.message)
            truncated.append(item.entry_id)
        if truncated:
            edit.events.append(MiddleTruncated(tuple(truncated), before, total,
                                               "largest messages cut to their head and tail"))

    if total > limit:
        total -= _collapse(edit)

    if total > limit:
        raise ContextBudgetError(
            f"the request is {total + ctx.system_tokens:,} tokens after every fit step; its budget is "
            f"{ctx.budget:,} (system prompt and tools: {ctx.system_tokens:,})",
            tokens=total + ctx.system_tokens, budget=ctx.budget)
    return edit.result()


def _middle_truncate(item: Item, scale: float, policy: FitPolicy) -> Message | None:
    """Every text of the message longer than MIN_CUT_CHARS (text blocks, tool results, string
    arguments of tool calls) shrunk to `scale` of its length, keeping head and tail in the policy's
    proportions, with a marker naming where the full text is."""
    head_share = policy.truncate_head_share / max(policy.truncate_head_share + policy.truncate_tail_share, 1e-9)

    def shrink(text: str, ref: str) -> str:
        keep = int(len(text) * scale)
        cut = head_tail(text, int(keep * head_share), keep - int(keep * head_share))
        return (f"{cut.head}\n[... {cut.omitted:,} characters cut to fit the context window. Full text: {ref}]\n"
                f"{cut.tail}")

    changed = False
    blocks = []
    for block in item.message.blocks:
        if isinstance(block, Text) and len(block.text) > MIN_CUT_CHARS:
            block = Text(shrink(block.text, recall_ref(item.entry_id)), block.extra)
            changed = True
        elif isinstance(block, ToolResult) and len(block.text) > MIN_CUT_CHARS:
            block = text_result(block, shrink(block.text, recall_ref(item.entry_id, block.call_id)))
            changed = True
        elif isinstance(block, ToolCall) and isinstance(block.arguments, dict) and any(
                isinstance(v, str) and len(v) > MIN_CUT_CHARS for v in block.arguments.values()):
            ref = recall_ref(item.entry_id, block.id)
            arguments = {k: shrink(v, ref) if isinstance(v, str) and len(v) > MIN_CUT_CHARS else v
                         for k, v in block.arguments.items()}
            block = ToolCall(block.id, block.name, arguments, block.extra)
            changed = True
        blocks.append(block)
    return item.message.replace(blocks=tuple(blocks)) if changed else None
