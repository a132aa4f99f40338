"""Turn cap (OpenClaw's `max_turns` without `summary_after`): the view holds at most `max_turns`
turns; older turns leave it (the log keeps them, the dropped-rounds marker says where).

A turn is a user message and everything after it up to the next one. The cut falls at a turn's
start, so no tool call is separated from its result. Each turn past the cap moves the view's start,
which changes the prompt prefix on every new turn: `summary_after` batches that instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from ctxwin.pipeline.events import TurnsDropped
from ctxwin.pipeline.view import Item, Rewrite, StageContext, StageResult, total_tokens


def stage(items: Sequence[Item], max_turns: int, ctx: StageContext) -> StageResult:
    starts = [i for i, item in enumerate(items) if item.message.role == "user" and not item.synthetic]
    edit = Rewrite("turns", ctx, list(items))
    if len(starts) <= max_turns:
        return edit.result()
    cut = starts[-max_turns] if max_turns else len(items)
    bounds = [*(s for s in starts if s < cut), cut]
    dropped: list[Item] = []
    for begin, end in pairwise(bounds):
        turn = [item for item in items[begin:end] if not item.synthetic]
        if not any(item.entry_id in ctx.pins for item in turn):  # a pinned turn stays, calls and results
            dropped.extend(turn)
    if not dropped:  # every turn past the cap is pinned: nothing to do, nothing to say
        return edit.result()
    for item in dropped:
        edit.record(item.entry_id, None)
    edit.events.append(TurnsDropped(tuple(i.entry_id for i in dropped), total_tokens(dropped), 0,
                                    f"{len(starts) - max_turns} turn(s) past max_turns = {max_turns}"))
    return edit.result()
