"""Cut points: where a compaction may divide the view into a summarized span and a kept tail.

Pure functions of the view. The one rule every strategy shares: a cut falls before a user or an
assistant message, never before a tool result, so no call is ever separated from its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxwin.pipeline.view import Item, total_tokens


@dataclass(frozen=True)
class CutPlan:
    """What a compaction will do. `span` is summarized; `prefix` (a split turn's beginning) is
    summarized separately; `kept` stays verbatim; `pinned` are span items kept verbatim too."""

    span: list[Item]
    prefix: list[Item]
    kept: list[Item]
    pinned: list[Item] = field(default_factory=list)

    @property
    def first_kept_id(self) -> str | None:
        return self.kept[0].entry_id if self.kept else None

    @property
    def summarized(self) -> list[Item]:
        return self.span + self.prefix


def is_cut_point(items: Sequence[Item], index: int) -> bool:
    """A cut may fall before a user or assistant message, never before a tool result: cutting before
    an assistant message keeps its results with it, so no call is separated from its result."""
    item = items[index]
    return not item.synthetic and item.message.role in ("user", "assistant")


def first_content(items: Sequence[Item]) -> int:
    """Index of the first non-synthetic item (after the previous summary and markers)."""
    index = 0
    while index < len(items) and items[index].synthetic:
        index += 1
    return index


def find_cut(items: Sequence[Item], start: int, keep_tokens: int) -> int:
    """Pi's rule: walk back from the newest message until `keep_tokens` are kept, then move forward
    to the nearest cut point. When there is none ahead (the budget ran out inside the last round),
    move back to the round's start instead: the newest round, the results the model just asked
    for, is always kept, or an agent in a tool loop would lose its place. Returns `start` when
    everything fits (nothing to summarize)."""
    kept = 0
    for index in range(len(items) - 1, start - 1, -1):
        kept += items[index].tokens
        if kept >= keep_tokens:
            for cut in range(index, len(items)):
                if is_cut_point(items, cut):
                    return max(cut, start)
            for cut in range(index - 1, start, -1):
                if is_cut_point(items, cut):
                    return cut
            return start
    return start


def shrinking_cut(items: Sequence[Item], start: int, keep: int, fixed_tokens: int, limit: float) -> int:
    """`find_cut` for `keep` tokens, halving `keep` while the kept tail plus `fixed_tokens` (system
    prompt and summary) would still be over `limit`: a tail that leaves the view above the trigger
    would compact again on the next request."""
    cut = find_cut(items, start, keep)
    while fixed_tokens + total_tokens(items[cut:]) > limit and keep > 0:
        keep //= 2
        cut = find_cut(items, start, keep)
    if fixed_tokens + total_tokens(items[cut:]) > limit:
        return len(items)  # the newest round alone is past the trigger: it cannot stay verbatim
    return cut


def turn_starts(items: Sequence[Item]) -> list[int]:
    """Where each turn of the view begins: the index of every user message the user wrote (the
    summary and markers are synthetic and do not count)."""
    return [i for i, item in enumerate(items) if item.message.role == "user" and not item.synthetic]


def recent_turns_cut(items: Sequence[Item], turns: int) -> int:
    """The cut that keeps the last `turns` turns (0: none, everything before the end)."""
    starts = turn_starts(items)
    if turns <= 0:
        return len(items)
    return starts[-turns] if len(starts) >= turns else first_content(items)


def turn_start(items: Sequence[Item], start: int, cut: int) -> int | None:
    """When the cut falls inside a turn (not at a user message), where that turn began."""
    if cut >= len(items) or items[cut].message.role == "user":
        return None
    for index in range(cut - 1, start - 1, -1):
        if items[index].message.role == "user" and not items[index].synthetic:
            return index
    return None


def pinned_items(items: Sequence[Item], pins: set[str]) -> list[Item]:
    """The pinned items of a span, with the other halves of their tool calls and results (a pinned
    call is kept with its results, a pinned result with its call), in order. Pinned items are kept
    verbatim and left out of the summary."""
    chosen = {i.entry_id for i in items if i.entry_id in pins}
    if not chosen:
        return []
    call_ids = {c.id for i in items if i.entry_id in chosen for c in i.message.tool_calls} | {
        r.call_id for i in items if i.entry_id in chosen for r in i.message.tool_results}
    for item in items:
        if any(c.id in call_ids for c in item.message.tool_calls) or any(
                r.call_id in call_ids for r in item.message.tool_results):
            chosen.add(item.entry_id)
    return [i for i in items if i.entry_id in chosen]


def plan_at(items: Sequence[Item], cut: int, pins: set[str], *, split_turns: bool) -> CutPlan:
    """The plan for a cut at `cut`: pinned items held out of the span, and, with `split_turns`, a
    turn that the cut falls inside summarized apart as the prefix (Pi)."""
    start = first_content(items)
    split = turn_start(items, start, cut) if split_turns else None
    span_end = split if split is not None else cut
    pinned = pinned_items(items[start:cut], pins)
    held = {i.entry_id for i in pinned}
    span = [i for i in items[start:span_end] if not i.synthetic and i.entry_id not in held]
    prefix = [i for i in items[split:cut] if i.entry_id not in held] if split is not None else []
    return CutPlan(span, prefix, list(items[cut:]), pinned)
