"""Spill: results too large for the context go to the blob store; the view keeps a preview and the
handle, which the agent pages with `read_spilled` (Claude Code's persisted output, Pi's full-output
file, Alyx's preview plus full copy). Content-addressed, so the same output always gets the same
handle and the decision replays byte for byte.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin.messages import Text, ToolResult
from ctxwin.pipeline.events import Spilled
from ctxwin.pipeline.view import (
    Item,
    Rewrite,
    StageContext,
    StageResult,
    recall_ref,
    text_result,
    with_results,
)
from ctxwin.policies.model import SpillPolicy

PREVIEW_SNAP_SHARE = 0.5
"""The preview ends at the last line end if that is past this share of the preview size."""


def preview(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    head = text[:chars]
    newline = head.rfind("\n")
    return head[: newline + 1] if newline >= PREVIEW_SNAP_SHARE * chars else head


def spilled_text(text: str, handle: str, policy: SpillPolicy) -> str:
    lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    shown = preview(text, policy.preview_chars)
    how = ("page it with read_spilled, search it with grep_spilled" if handle.startswith("blob:")
           else f'get it back with recall("{handle}")')  # no blob store: the log has it
    return (
        f"[Output too large for the context: {len(text):,} characters, {lines:,} lines. "
        f"Full output: {handle} ({how}).]\n"
        f"Preview (first {len(shown):,} characters):\n{shown}"
    )


def _store(text: str, ctx: StageContext, origin: str) -> str:
    if ctx.blobs is None:
        return recall_ref(*origin.split("#", 1))
    info = ctx.blobs.put(text.encode("utf-8", "surrogatepass"), media_type="text/plain", origin=origin)
    return info.handle


def stage(items: Sequence[Item], policy: SpillPolicy, ctx: StageContext) -> StageResult:
    """Spill over-threshold results of `items` (new messages), then, per turn (the results that
    answer one assistant message), the largest results until the turn is under its cap."""
    edit = Rewrite("spill", ctx, list(items))
    out = edit.items
    # A turn's results may sit in one tool message (Anthropic) or one per result (OpenAI): group
    # consecutive tool messages.
    turn: list[int] = []
    for index in range(len(out) + 1):
        if index < len(out) and out[index].message.role == "tool":
            turn.append(index)
            continue
        if turn:
            _spill_turn(edit, turn, policy, ctx)
            turn = []
    return edit.result()


def _spill_turn(edit: Rewrite, turn: list[int], policy: SpillPolicy, ctx: StageContext) -> None:
    items = edit.items
    sizes: list[tuple[int, int, int]] = []  # (chars, item position, block index)
    for position in turn:
        for block_index, block in enumerate(items[position].message.blocks):
            if isinstance(block, ToolResult) and all(isinstance(p, Text) for p in block.content):
                sizes.append((len(block.text), position, block_index))
    total = sum(size for size, _, _ in sizes)
    chosen: set[tuple[int, int]] = {(p, b) for size, p, b in sizes if size > policy.per_result_chars}
    total -= sum(size for size, p, b in sizes if (p, b) in chosen)
    for size, position, block_index in sorted(sizes, reverse=True):
        if total <= policy.per_message_chars:
            break
        if (position, block_index) not in chosen and size > policy.preview_chars:
            chosen.add((position, block_index))
            total -= size
    by_item: dict[int, dict[int, ToolResult]] = {}
    for position, block_index in sorted(chosen):
        block = items[position].message.blocks[block_index]
        assert isinstance(block, ToolResult)
        origin = f"{items[position].entry_id}#{block.call_id}"
        handle = _store(block.text, ctx, origin)
        by_item.setdefault(position, {})[block_index] = text_result(block, spilled_text(block.text, handle, policy))
    for position, changed in by_item.items():
        item = items[position]
        new = edit.render(position, with_results(item.message, changed))
        edit.events.append(Spilled((item.entry_id,), item.tokens, new.tokens,
                                   f"{len(changed)} result(s) over {policy.per_result_chars:,} characters or over "
                                   f"the turn's {policy.per_message_chars:,}"))
